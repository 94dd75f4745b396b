//! Prompt lookup: a draft for speculative decoding that needs no second
//! model. The last few tokens of the context are looked up earlier in the
//! context, and what followed them there is proposed as what comes next, as
//! llama.cpp's lookup decoding and transformers' prompt lookup do. It pays
//! off where the output repeats the input (rewriting, quoting, editing code)
//! and costs nothing to compute.
use crate::engine::{Error, Result};

/// The n-gram sizes looked up: the longest first, down to `min`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramOptions {
    pub min: usize,
    pub max: usize,
}

/// The largest n-gram size accepted (longer matches are rare and a longer
/// key only makes each lookup slower).
pub const MAX_NGRAM: usize = 64;

impl Default for NgramOptions {
    /// Two to four tokens: one token alone matches too often by chance
    /// (a space, a bracket) for its continuation to be a good guess.
    fn default() -> Self {
        NgramOptions { min: 2, max: 4 }
    }
}

impl NgramOptions {
    pub fn validate(&self) -> Result<()> {
        if self.min < 1 || self.min > MAX_NGRAM {
            return Err(Error::Argument(format!("ngram_min must be in [1, {MAX_NGRAM}], got {}", self.min)));
        }
        if self.max < self.min || self.max > MAX_NGRAM {
            return Err(Error::Argument(format!(
                "ngram_max must be in [ngram_min ({}), {MAX_NGRAM}], got {}",
                self.min, self.max
            )));
        }
        Ok(())
    }
}

/// Up to `n` tokens that followed the most recent earlier occurrence of the
/// longest suffix of `context` (of `options.min` to `options.max` tokens)
/// found earlier in it; empty when none is found. The continuation may run
/// into the suffix itself (a repeating pattern continues).
pub fn lookup(context: &[i32], options: NgramOptions, n: usize) -> &[i32] {
    if n == 0 {
        return &[];
    }
    let len = context.len();
    for size in (options.min..=options.max.min(len.saturating_sub(1))).rev() {
        let key = &context[len - size..];
        // Starts of earlier occurrences, the most recent first: it is
        // usually the most relevant one (the line being copied now).
        if let Some(start) = (0..len - size).rev().find(|&s| &context[s..s + size] == key) {
            let from = start + size;
            return &context[from..(from + n).min(len)];
        }
    }
    &[]
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: NgramOptions = NgramOptions { min: 2, max: 4 };

    #[test]
    fn proposes_what_followed_the_longest_match() {
        // "1 2 3 4 5 ... 1 2 3" → 4 5 6
        let ctx = [1, 2, 3, 4, 5, 6, 9, 1, 2, 3];
        assert_eq!(lookup(&ctx, O, 3), &[4, 5, 6]);
        assert_eq!(lookup(&ctx, O, 10), &[4, 5, 6, 9, 1, 2, 3], "up to the end of the context");
        assert_eq!(lookup(&ctx, O, 0), &[] as &[i32]);
    }

    #[test]
    fn prefers_longer_then_more_recent_matches() {
        // the 2-gram "7 8" occurs twice; the 3-gram "6 7 8" only at the start
        let ctx = [6, 7, 8, 1, 0, 7, 8, 2, 0, 6, 7, 8];
        assert_eq!(lookup(&ctx, O, 1), &[1], "the 3-gram wins over the more recent 2-gram");
        let ctx = [7, 8, 1, 0, 7, 8, 2, 0, 5, 7, 8];
        assert_eq!(lookup(&ctx, O, 1), &[2], "among equal lengths, the most recent");
    }

    #[test]
    fn no_match_below_the_minimum() {
        let ctx = [1, 2, 3, 4, 5, 3];
        assert!(lookup(&ctx, O, 4).is_empty(), "a 1-gram is below min 2");
        assert_eq!(lookup(&ctx, NgramOptions { min: 1, max: 4 }, 2), &[4, 5]);
        assert!(lookup(&[1], O, 4).is_empty());
        assert!(lookup(&[], O, 4).is_empty());
    }

    #[test]
    fn a_repeating_pattern_continues_into_itself() {
        let ctx = [5, 5, 5, 5];
        assert_eq!(lookup(&ctx, O, 8), &[5], "the match at 1..3 is followed by one token");
        let ctx = [1, 2, 1, 2, 1, 2];
        assert_eq!(lookup(&ctx, O, 8), &[1, 2]);
    }

    #[test]
    fn options_are_checked() {
        assert!(NgramOptions { min: 0, max: 2 }.validate().is_err());
        assert!(NgramOptions { min: 3, max: 2 }.validate().is_err());
        assert!(NgramOptions { min: 1, max: MAX_NGRAM + 1 }.validate().is_err());
        assert!(NgramOptions::default().validate().is_ok());
    }
}
