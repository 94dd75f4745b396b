//! The generation loop: the prompt through the model in batches, then one
//! token per step with the KV cache, until max_tokens, an end-of-generation
//! token, a stop string, or the caller's per-token callback says stop.
//!
//! The loop only needs "logits for the next tokens" and "the text and kind of
//! a token", so it is written against two small traits; [`CachedSession`] and
//! [`Vocab`] are the real implementations, and the tests use fakes.
use super::inference::{ComputePool, Inference, KvCache, Output};
use super::sampler::{Sampler, SamplerOptions};
use super::tokenizer::Vocab;
use super::{Error, Result};

/// Something that turns tokens into next-token logits, keeping its context.
pub trait LogitsSource {
    /// Positions still free in the context.
    fn capacity(&self) -> usize;
    /// The largest number of tokens to evaluate at once.
    fn n_batch(&self) -> usize;
    /// Appends `tokens` to the context; the logits after the last one.
    fn forward(&mut self, tokens: &[i32]) -> Result<Vec<f32>>;
}

/// What the loop needs to know about tokens.
pub trait TokenText {
    fn is_eog(&self, id: i32) -> bool;
    /// The bytes the token stands for in generated text (no control tokens).
    fn piece(&self, id: i32) -> Result<Vec<u8>>;
}

impl TokenText for Vocab {
    fn is_eog(&self, id: i32) -> bool {
        Vocab::is_eog(self, id)
    }
    fn piece(&self, id: i32) -> Result<Vec<u8>> {
        self.token_to_piece(id, false)
    }
}

/// An inference session appending to one KV cache, optionally through a
/// compute pool.
pub struct CachedSession<'a> {
    pub inference: &'a Inference,
    pub cache: &'a mut KvCache,
    pub pool: Option<&'a mut ComputePool>,
}

impl LogitsSource for CachedSession<'_> {
    fn capacity(&self) -> usize {
        self.cache.n_ctx().saturating_sub(self.cache.n_cached())
    }
    fn n_batch(&self) -> usize {
        self.inference.n_batch()
    }
    fn forward(&mut self, tokens: &[i32]) -> Result<Vec<f32>> {
        let mut logits = self.inference.forward(self.cache, tokens, Output::Last, self.pool.as_deref_mut())?;
        logits.pop().ok_or_else(|| Error::Ggml("the forward pass returned no logits".into()))
    }
}

/// The settings of one generation.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampler: SamplerOptions,
    /// Stops at this token instead of the model's end-of-generation tokens.
    pub eos_token: Option<i32>,
    /// Stops once the generated text contains one of these.
    pub stop: Vec<String>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_tokens: 128, sampler: SamplerOptions::default(), eos_token: None, stop: Vec::new() }
    }
}

/// Finds stop strings in the text generated so far, including strings that
/// span several tokens: each new piece is searched together with the tail of
/// the text before it.
struct StopMatcher {
    stops: Vec<Vec<u8>>,
    text: Vec<u8>,
    longest: usize,
}

impl StopMatcher {
    fn new(stops: &[String]) -> StopMatcher {
        let stops: Vec<Vec<u8>> = stops.iter().map(|s| s.as_bytes().to_vec()).collect();
        let longest = stops.iter().map(Vec::len).max().unwrap_or(0);
        StopMatcher { stops, text: Vec::new(), longest }
    }

    /// Adds a piece; true when a stop string now appears. Only the text a
    /// stop string could still end in is kept (its last longest - 1 bytes).
    fn push(&mut self, piece: &[u8]) -> bool {
        self.text.extend_from_slice(piece);
        let found = self.stops.iter().any(|s| self.text.windows(s.len()).any(|w| w == s.as_slice()));
        let keep = self.longest.saturating_sub(1);
        if self.text.len() > keep {
            self.text.drain(..self.text.len() - keep);
        }
        found
    }
}

/// Runs the loop. `on_token(id, count)` is called once per generated token
/// (count from 1); Ok(true) stops after that token, and an Err stops at once
/// and is returned as it is. Returns the generated ids, not the prompt.
///
/// End-of-generation tokens end the loop and are not returned (nor passed to
/// the callback); the token that completes a stop string is returned.
pub fn generate<E: From<Error>>(
    source: &mut dyn LogitsSource,
    tokens: Option<&dyn TokenText>,
    prompt: &[i32],
    options: &GenerateOptions,
    mut on_token: impl FnMut(i32, usize) -> std::result::Result<bool, E>,
) -> std::result::Result<Vec<i32>, E> {
    check(source, tokens, prompt, options)?;
    let mut sampler = Sampler::new(options.sampler.clone())?;
    let mut generated = Vec::new();
    if options.max_tokens == 0 {
        return Ok(generated);
    }
    let is_eog = |id: i32| match (options.eos_token, tokens) {
        (Some(eos), _) => id == eos,
        (None, Some(t)) => t.is_eog(id),
        (None, None) => false,
    };
    let mut stops = StopMatcher::new(&options.stop);

    let mut logits = Vec::new();
    for chunk in prompt.chunks(source.n_batch().max(1)) {
        logits = source.forward(chunk)?;
    }
    let mut history = prompt.to_vec();
    loop {
        let id = sampler.sample(&logits, &history)?;
        if is_eog(id) {
            break;
        }
        generated.push(id);
        history.push(id);
        let stop_asked = on_token(id, generated.len())?;
        let stop_found = match tokens {
            Some(t) if !options.stop.is_empty() => stops.push(&t.piece(id)?),
            _ => false,
        };
        if stop_asked || stop_found || generated.len() >= options.max_tokens {
            break;
        }
        logits = source.forward(&[id])?;
    }
    Ok(generated)
}

/// Everything that can be known wrong before computing anything.
fn check(
    source: &dyn LogitsSource,
    tokens: Option<&dyn TokenText>,
    prompt: &[i32],
    options: &GenerateOptions,
) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::Argument("the prompt is empty (give at least one token)".into()));
    }
    options.sampler.validate()?;
    if options.stop.iter().any(String::is_empty) {
        return Err(Error::Argument("stop strings must not be empty".into()));
    }
    if tokens.is_none() && (options.eos_token.is_none() || !options.stop.is_empty()) {
        return Err(Error::Argument("the model has no usable vocabulary: give eos_token and no stop strings".into()));
    }
    // Every generated token but the last is fed back.
    let needed = prompt.len() + options.max_tokens.saturating_sub(1);
    if needed > source.capacity() {
        return Err(Error::Argument(format!(
            "the prompt ({} tokens) plus max_tokens ({}) needs {needed} positions, but the context has {} free \
             (raise n_ctx or lower max_tokens)",
            prompt.len(),
            options.max_tokens,
            source.capacity()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake model over a vocabulary of 8 tokens: the next token is always
    /// (last + 1) % 8, strongly preferred.
    struct Counter {
        n_ctx: usize,
        seen: Vec<i32>,
        calls: Vec<usize>,
    }

    impl LogitsSource for Counter {
        fn capacity(&self) -> usize {
            self.n_ctx - self.seen.len()
        }
        fn n_batch(&self) -> usize {
            4
        }
        fn forward(&mut self, tokens: &[i32]) -> Result<Vec<f32>> {
            self.seen.extend_from_slice(tokens);
            self.calls.push(tokens.len());
            let next = (self.seen.last().unwrap() + 1) % 8;
            Ok((0..8).map(|i| if i == next { 10.0 } else { 0.0 }).collect())
        }
    }

    /// Token i is the letter 'a' + i; token 7 is the end of generation.
    struct Letters;
    impl TokenText for Letters {
        fn is_eog(&self, id: i32) -> bool {
            id == 7
        }
        fn piece(&self, id: i32) -> Result<Vec<u8>> {
            Ok(vec![b'a' + id as u8])
        }
    }

    fn greedy(max_tokens: usize) -> GenerateOptions {
        GenerateOptions {
            max_tokens,
            sampler: SamplerOptions { greedy: true, ..SamplerOptions::default() },
            ..GenerateOptions::default()
        }
    }

    fn run(
        prompt: &[i32],
        options: &GenerateOptions,
        cb: impl FnMut(i32, usize) -> std::result::Result<bool, Error>,
    ) -> (Result<Vec<i32>>, Counter) {
        let mut model = Counter { n_ctx: 64, seen: vec![], calls: vec![] };
        let out = generate(&mut model, Some(&Letters), prompt, options, cb);
        (out, model)
    }

    #[test]
    fn prompt_in_batches_then_one_token_per_step() {
        let (out, model) = run(&[0; 10], &greedy(3), |_, _| Ok(false));
        assert_eq!(out.unwrap(), vec![1, 2, 3]);
        assert_eq!(model.calls, vec![4, 4, 2, 1, 1]);
    }

    #[test]
    fn stops_at_eog_without_returning_it() {
        let (out, _) = run(&[4], &greedy(10), |_, _| Ok(false));
        assert_eq!(out.unwrap(), vec![5, 6]);
        let options = GenerateOptions { eos_token: Some(6), ..greedy(10) };
        let (out, _) = run(&[2], &options, |_, _| Ok(false));
        assert_eq!(out.unwrap(), vec![3, 4, 5], "eos_token wins over the model's");
        let options = GenerateOptions { eos_token: Some(3), ..greedy(10) };
        let (out, _) = run(&[4], &options, |_, _| Ok(false));
        assert_eq!(out.unwrap(), vec![5, 6, 7, 0, 1, 2], "the model's EOG no longer stops");
    }

    #[test]
    fn callback_sees_each_token_and_can_stop() {
        let mut seen = vec![];
        let (out, _) = run(&[0], &greedy(10), |id, n| {
            seen.push((id, n));
            Ok(n == 2)
        });
        assert_eq!(out.unwrap(), vec![1, 2]);
        assert_eq!(seen, vec![(1, 1), (2, 2)]);
    }

    #[test]
    fn callback_error_comes_back_unchanged() {
        let (out, model) =
            run(&[0], &greedy(10), |_, n| if n == 2 { Err(Error::Argument("boom".into())) } else { Ok(false) });
        assert_eq!(out.unwrap_err().to_string(), "boom");
        assert_eq!(model.calls, vec![1, 1], "no forward after the error");
    }

    #[test]
    fn stop_strings_span_tokens() {
        let options = GenerateOptions { stop: vec!["cd".into()], ..greedy(10) };
        let (out, _) = run(&[0], &options, |_, _| Ok(false));
        assert_eq!(out.unwrap(), vec![1, 2, 3], "b c d: 'cd' spans tokens 2 and 3");
        let options = GenerateOptions { stop: vec!["zz".into(), "bcde".into()], ..greedy(10) };
        let (out, _) = run(&[0], &options, |_, _| Ok(false));
        assert_eq!(out.unwrap(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn bad_requests_fail_before_computing() {
        for (prompt, options) in [
            (vec![], greedy(3)),
            (vec![0; 60], greedy(10)),
            (vec![0], GenerateOptions { stop: vec![String::new()], ..greedy(3) }),
        ] {
            let (out, model) = run(&prompt, &options, |_, _| Ok(false));
            assert!(out.is_err());
            assert!(model.calls.is_empty());
        }
        // Exactly full: the last token is not fed back.
        let (out, _) = run(&[0; 60], &greedy(5), |_, _| Ok(false));
        assert_eq!(out.unwrap().len(), 5);
    }

    #[test]
    fn max_tokens_zero_computes_nothing() {
        let (out, model) = run(&[0], &greedy(0), |_, _| Ok(false));
        assert!(out.unwrap().is_empty());
        assert!(model.calls.is_empty());
    }

    #[test]
    fn seeded_sampling_repeats() {
        let options = GenerateOptions {
            max_tokens: 20,
            eos_token: Some(99),
            sampler: SamplerOptions {
                seed: Some(3),
                temperature: 50.0,
                top_k: 0,
                top_p: 1.0,
                ..SamplerOptions::default()
            },
            ..GenerateOptions::default()
        };
        let a = run(&[0], &options, |_, _| Ok(false)).0.unwrap();
        let b = run(&[0], &options, |_, _| Ok(false)).0.unwrap();
        assert_eq!(a, b);
        assert_ne!(a, vec![1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4]);
    }
}
