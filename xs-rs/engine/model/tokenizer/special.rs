//! Splitting special tokens out of the text before tokenization, as
//! llama.cpp's `tokenizer_st_partition`.
//!
//! The special tokens (control, user-defined and unknown tokens; control and
//! unknown ones only when special tokens are parsed) are tried one after the
//! other, longest text first. Each claims its leftmost non-overlapping
//! occurrences in the pieces of text not claimed yet. A token with the lstrip
//! (rstrip) attribute also swallows the ASCII whitespace before (after) it.
//!
//! Trying thousands of tokens on every text would be slow (Gemma 3 has over
//! 6000), so an Aho-Corasick automaton first finds which special texts occur
//! at all; only those are tried, in the same order, which gives the same
//! result.
use aho_corasick::AhoCorasick;
use memchr::memmem;

/// A piece of the text: raw bytes still to tokenize, or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment {
    Text { start: usize, end: usize },
    Token(i32),
}

/// One special token as the partition sees it.
pub struct SpecialToken {
    pub id: i32,
    pub text: Box<[u8]>,
    /// Only split out when special tokens are parsed (control, unknown).
    pub needs_parse_special: bool,
    pub lstrip: bool,
    pub rstrip: bool,
}

pub struct SpecialTokens {
    /// In llama.cpp's order: longest text first.
    tokens: Vec<SpecialToken>,
    /// Finds every occurrence of every special text (index into `tokens`).
    finder: Option<AhoCorasick>,
}

/// C's isspace in the "C" locale, which llama.cpp uses for lstrip/rstrip.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

impl SpecialTokens {
    /// `tokens` must already be in llama.cpp's order (longest first).
    pub fn new(tokens: Vec<SpecialToken>) -> SpecialTokens {
        let finder = if tokens.is_empty() {
            None
        } else {
            Some(AhoCorasick::new(tokens.iter().map(|t| &*t.text)).expect("special token automaton"))
        };
        SpecialTokens { tokens, finder }
    }

    /// The fragments of `text`, in order.
    pub fn partition(&self, text: &[u8], parse_special: bool, out: &mut Vec<Fragment>) {
        out.clear();
        if text.is_empty() {
            return;
        }
        out.push(Fragment::Text { start: 0, end: text.len() });
        let Some(finder) = &self.finder else { return };
        let mut present: Vec<usize> = finder
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .filter(|&i| parse_special || !self.tokens[i].needs_parse_special)
            .collect();
        if present.is_empty() {
            return;
        }
        present.sort_unstable();
        present.dedup();
        let mut next = Vec::with_capacity(8);
        for index in present {
            let token = &self.tokens[index];
            let finder = memmem::Finder::new(&*token.text);
            next.clear();
            for &fragment in out.iter() {
                match fragment {
                    Fragment::Text { start, end } => split_text(text, start, end, token, &finder, &mut next),
                    other => next.push(other),
                }
            }
            std::mem::swap(out, &mut next);
        }
    }
}

/// Splits text[start..end] at the token's leftmost non-overlapping matches.
fn split_text(
    text: &[u8],
    start: usize,
    end: usize,
    token: &SpecialToken,
    finder: &memmem::Finder,
    out: &mut Vec<Fragment>,
) {
    let mut pos = start;
    while pos < end {
        let Some(found) = finder.find(&text[pos..end]) else {
            break;
        };
        let at = pos + found;
        let mut left_end = at;
        if token.lstrip {
            while left_end > pos && is_c_space(text[left_end - 1]) {
                left_end -= 1;
            }
        }
        if left_end > pos {
            out.push(Fragment::Text { start: pos, end: left_end });
        }
        out.push(Fragment::Token(token.id));
        pos = at + token.text.len();
        if token.rstrip {
            while pos < end && is_c_space(text[pos]) {
                pos += 1;
            }
        }
    }
    if pos < end {
        out.push(Fragment::Text { start: pos, end });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn special(id: i32, text: &str, needs_parse_special: bool, lstrip: bool, rstrip: bool) -> SpecialToken {
        SpecialToken { id, text: text.as_bytes().into(), needs_parse_special, lstrip, rstrip }
    }

    fn parts(st: &SpecialTokens, text: &str, parse: bool) -> Vec<String> {
        let mut out = vec![];
        st.partition(text.as_bytes(), parse, &mut out);
        out.iter()
            .map(|f| match *f {
                Fragment::Text { start, end } => format!("'{}'", &text[start..end]),
                Fragment::Token(id) => format!("#{id}"),
            })
            .collect()
    }

    #[test]
    fn longest_first_then_leftmost() {
        let st = SpecialTokens::new(vec![
            special(1, "<|im_start|>", true, false, false),
            special(2, "<|im", true, false, false),
            special(3, "<u>", false, false, false),
        ]);
        assert_eq!(parts(&st, "a<|im_start|>b<|imc<u>", true), ["'a'", "#1", "'b'", "#2", "'c'", "#3"]);
        // control tokens stay text without parse_special; user-defined ones do not
        assert_eq!(parts(&st, "a<|im_start|>b<u>", false), ["'a<|im_start|>b'", "#3"]);
        assert_eq!(parts(&st, "<u><u>", false), ["#3", "#3"]);
        assert_eq!(parts(&st, "< |im_start|>", true), ["'< |im_start|>'"]);
    }

    #[test]
    fn strip_attributes_take_ascii_whitespace() {
        let st = SpecialTokens::new(vec![special(7, "<|end|>", true, true, true)]);
        assert_eq!(parts(&st, "x \t<|end|>\n y", true), ["'x'", "#7", "'y'"]);
        assert_eq!(parts(&st, "  <|end|>  ", true), ["#7"]);
    }
}
