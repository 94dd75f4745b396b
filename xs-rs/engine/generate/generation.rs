//! The generation loop: the prompt through the model in batches, then one
//! token per step with the KV cache, until max_tokens, an end-of-generation
//! token, a stop string, or the caller's per-token callback says stop.
//!
//! The prompt is the whole context: whatever leading part of it the context
//! already holds (a conversation's earlier turns) is kept, the rest of the
//! context is dropped, and only the new tokens are evaluated.
//!
//! The loop only needs "logits for the next tokens" and "the text and kind of
//! a token", so it is written against two small traits; [`CachedRunner`] and
//! [`Vocab`] are the real implementations, and the tests use fakes.
use crate::engine::forward::profile::Phase;
use crate::engine::forward::runner::{ComputePool, KvCache, Overrides, Runner};
use crate::engine::generate::grammar::{self, Grammar, GrammarState, LazyGrammar};
use crate::engine::generate::logits::{log_softmax_into, top_k};
use crate::engine::generate::sampler::{Sampler, SamplerOptions};
use crate::engine::generate::text_stream::TextStream;
use crate::engine::model::tokenizer::{EncodeOptions, Vocab};
use crate::engine::{Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Something that turns tokens into next-token logits, keeping its context.
pub trait LogitsSource {
    /// The tokens in the context, in order.
    fn context(&self) -> &[i32];
    /// The most tokens the context can hold.
    fn n_ctx(&self) -> usize;
    /// The largest number of tokens to evaluate at once.
    fn n_batch(&self) -> usize;
    /// Keeps only the first `n` tokens of the context.
    fn truncate(&mut self, n: usize) -> Result<()>;
    /// The longest prefix of at most `n` tokens that `truncate` keeps
    /// without evaluating anything again (a recurrent model's state goes
    /// back only to its checkpoints).
    fn reusable(&self, n: usize) -> usize {
        n
    }
    /// Appends `tokens` to the context; writes the logits after the last one
    /// into `logits` (replacing what it held, reusing its memory).
    fn forward(&mut self, tokens: &[i32], logits: &mut Vec<f32>) -> Result<()>;
    /// Adds time the loop spent in `phase` to the source's profile.
    fn record(&self, _phase: Phase, _elapsed: Duration) {}
}

/// What the loop needs to know about tokens.
pub trait TokenText {
    fn is_eog(&self, id: i32) -> bool;
    /// The bytes the token stands for in generated text (no control tokens).
    fn piece(&self, id: i32) -> Result<&[u8]>;
    /// The token's bytes with control tokens as their text, which is what a
    /// grammar matches (llama.cpp's piece cache).
    fn special_piece(&self, id: i32) -> Result<&[u8]> {
        self.piece(id)
    }
    /// The tokens of `text` with special tokens recognised (no BOS), which
    /// is how a grammar's `<text>` token is found.
    fn tokenize_special(&self, _text: &[u8]) -> Vec<i32> {
        Vec::new()
    }
    /// The whole vocabulary, where there is one (DRY's sequence breakers
    /// are tokenized with it).
    fn vocab(&self) -> Option<&Vocab> {
        None
    }
}

impl TokenText for Vocab {
    fn is_eog(&self, id: i32) -> bool {
        Vocab::is_eog(self, id)
    }
    fn piece(&self, id: i32) -> Result<&[u8]> {
        Vocab::piece(self, id, false)
    }
    fn special_piece(&self, id: i32) -> Result<&[u8]> {
        Vocab::piece(self, id, true)
    }
    fn tokenize_special(&self, text: &[u8]) -> Vec<i32> {
        self.encode_bytes(text, EncodeOptions { add_bos: false, add_eos: false, parse_special: true })
    }
    fn vocab(&self) -> Option<&Vocab> {
        Some(self)
    }
}

/// A runner appending to one KV cache, optionally through a compute pool.
pub struct CachedRunner<'a> {
    pub runner: &'a Runner,
    pub cache: &'a mut KvCache,
    pub pool: Option<&'a mut ComputePool>,
    pub overrides: &'a Overrides,
}

impl LogitsSource for CachedRunner<'_> {
    fn context(&self) -> &[i32] {
        // cells computed with other RoPE settings or adapters are no prefix
        // of this generation's
        match (self.cache.filled_with(), self.runner.settings_key(self.overrides)) {
            (Some(filled), Ok(now)) if filled != now => &[],
            _ => self.cache.tokens(),
        }
    }
    fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }
    fn n_batch(&self) -> usize {
        self.runner.n_batch()
    }
    fn truncate(&mut self, n: usize) -> Result<()> {
        let keep = self.cache.restorable(n);
        if n >= self.cache.n_cached() || keep == n {
            return self.cache.resize(n);
        }
        // a recurrent state between checkpoints: back to the last one
        // before `n`, then the tokens after it again, one at a time as
        // decoding (and exact speculative verification) computed them
        let again = self.cache.tokens()[keep..n].to_vec();
        self.cache.resize(keep)?;
        let mut logits = Vec::new();
        again.chunks(1).try_for_each(|token| self.forward(token, &mut logits))
    }
    fn reusable(&self, n: usize) -> usize {
        self.cache.restorable(n)
    }
    fn forward(&mut self, tokens: &[i32], logits: &mut Vec<f32>) -> Result<()> {
        self.runner.forward_last_into(self.cache, tokens, self.pool.as_deref_mut(), self.overrides, logits)
    }
    fn record(&self, phase: Phase, elapsed: Duration) {
        self.runner.record(phase, elapsed);
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
    /// The caller wants the text, not only the ids.
    pub need_text: bool,
    /// Report each generated token's log-probability and this many best
    /// alternatives.
    pub logprobs: Option<usize>,
    /// RoPE settings and adapters for this generation.
    pub overrides: Overrides,
    /// Only text this grammar allows is generated ([`grammar::sample`]).
    pub grammar: Option<Arc<Grammar>>,
    /// The grammar constrains only from the first time this text is
    /// generated, starting at it ([`grammar::LazyGrammar`]).
    pub grammar_trigger: Option<String>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 128,
            sampler: SamplerOptions::default(),
            eos_token: None,
            stop: Vec::new(),
            need_text: false,
            logprobs: None,
            overrides: Overrides::NONE,
            grammar: None,
            grammar_trigger: None,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model's end-of-generation token (or the caller's eos_token).
    EndOfGeneration,
    MaxTokens,
    StopString,
    /// The per-token callback asked to stop.
    Callback,
    /// The progress callback asked to stop while the prompt was evaluated.
    Cancelled,
}

impl StopReason {
    /// The name Perl sees.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::EndOfGeneration => "eos",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopString => "stop_string",
            StopReason::Callback => "callback",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// What one generation did.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The generated ids (not the prompt, not the end-of-generation token).
    pub tokens: Vec<i32>,
    /// Their text, ending before a stop string (only with need_text).
    pub text: String,
    pub stop_reason: StopReason,
    pub n_prompt: usize,
    /// Prompt tokens that were already in the context and not evaluated.
    pub n_reused: usize,
    /// Prompt tokens evaluated (none when max_tokens is 0).
    pub n_evaluated: usize,
    pub prompt_seconds: f64,
    pub generate_seconds: f64,
    /// With `logprobs`: one entry per generated token.
    pub logprobs: Vec<TokenLogprob>,
}

/// A generated token's log-probability (natural log, from the logits divided
/// by the sampling temperature; 1 when greedy) and the best alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: i32,
    pub logprob: f32,
    /// (id, logprob), best first.
    pub top: Vec<(i32, f32)>,
}

/// One generated token as the callback sees it: its id, how many tokens
/// have been generated, and the text it released (whole characters, never
/// part of a stop string; often empty while a character or a possible stop
/// string is incomplete).
pub struct Step<'a> {
    pub id: i32,
    pub count: usize,
    pub text: &'a str,
}

/// One sequence's generation once its prompt is evaluated: sampling (under
/// its grammar), the history the penalties see, the text released so far,
/// and the log-probabilities. [`generate`] drives one; the batch scheduler
/// (`generate::batch`) drives one per slot.
pub struct Decoder {
    sampler: Sampler,
    stream: TextStream,
    /// The grammar constraining every token, or waiting for its trigger.
    constraint: Option<GrammarState>,
    waiting: Option<LazyGrammar>,
    /// The prompt, then every generated token.
    history: Vec<i32>,
    n_prompt: usize,
    // kept between tokens so that a decode step allocates nothing
    masked: Vec<f32>,
    log_probs: Vec<f32>,
}

/// What [`Decoder::next`] made of one row of logits.
pub enum Decoded {
    /// An end-of-generation token (not part of the output).
    End,
    /// A generated token; `stopped`: it completes a stop string.
    Token { id: i32, stopped: bool, logprob: Option<TokenLogprob> },
}

impl Decoder {
    /// A decoder for `prompt` with `options`, after checking what can be
    /// known wrong before computing anything (the prompt and max_tokens must
    /// fit in `n_ctx` positions).
    pub fn new(
        tokens: Option<&dyn TokenText>,
        prompt: &[i32],
        options: &GenerateOptions,
        n_ctx: usize,
    ) -> Result<Decoder> {
        check(n_ctx, tokens, prompt, options)?;
        let sampler = Sampler::with_vocab(options.sampler.clone(), tokens.and_then(|t| t.vocab()))?;
        let (mut constraint, mut waiting) = (None, None);
        if let (Some(g), Some(t)) = (&options.grammar, tokens) {
            let bound = g.bind(|text| t.tokenize_special(text))?;
            match &options.grammar_trigger {
                Some(trigger) => waiting = Some(LazyGrammar::new(bound, trigger)?),
                None => constraint = Some(GrammarState::new(bound)?),
            }
        }
        // Room for everything up front: a decode step allocates nothing.
        let most = options.max_tokens.min(n_ctx);
        let mut history = Vec::with_capacity(prompt.len() + most);
        history.extend_from_slice(prompt);
        Ok(Decoder {
            sampler,
            stream: TextStream::new(&options.stop),
            constraint,
            waiting,
            history,
            n_prompt: prompt.len(),
            masked: Vec::new(),
            log_probs: Vec::new(),
        })
    }

    /// Samples the next token from `logits` and takes it into the history,
    /// the grammar and the text.
    pub fn next(
        &mut self,
        logits: &[f32],
        tokens: Option<&dyn TokenText>,
        options: &GenerateOptions,
    ) -> Result<Decoded> {
        let id = match (&self.constraint, tokens) {
            (Some(state), Some(t)) => {
                grammar::sample(&mut self.sampler, state, logits, &self.history, t, &mut self.masked)?
            }
            _ => self.sampler.sample(logits, &self.history)?,
        };
        if let (Some(state), Some(t)) = (&mut self.constraint, tokens) {
            state.accept(id, t)?;
        } else if let (Some(lazy), Some(t)) = (&mut self.waiting, tokens) {
            if let Some(state) = lazy.observe(t.special_piece(id)?)? {
                self.constraint = Some(state);
                self.waiting = None;
            }
        }
        let is_eog = match (options.eos_token, tokens) {
            (Some(eos), _) => id == eos,
            (None, Some(t)) => t.is_eog(id),
            (None, None) => false,
        };
        if is_eog {
            return Ok(Decoded::End);
        }
        let logprob = match options.logprobs {
            Some(n) => {
                let s = &options.sampler;
                let temperature = if s.greedy || s.temperature <= 0.0 { 1.0 } else { s.temperature };
                log_softmax_into(logits, temperature, &mut self.log_probs)?;
                let top = top_k(&self.log_probs, n).into_iter().map(|(i, v)| (i as i32, v)).collect();
                Some(TokenLogprob { id, logprob: self.log_probs[id as usize], top })
            }
            None => None,
        };
        self.history.push(id);
        // The text is made only when someone reads it: stop strings, the
        // caller (need_text).
        let stopped = match tokens {
            Some(t) if options.need_text || !options.stop.is_empty() => self.stream.push(t.piece(id)?),
            _ => false,
        };
        Ok(Decoded::Token { id, stopped, logprob })
    }

    /// The text the last token released (whole characters, never part of a
    /// stop string).
    pub fn released(&self) -> &str {
        self.stream.released()
    }

    /// The text still held back, now that generation ends.
    pub fn finish(&mut self) -> String {
        self.stream.finish()
    }

    /// The tokens generated so far.
    pub fn generated(&self) -> &[i32] {
        &self.history[self.n_prompt..]
    }
}

/// Runs the loop. `on_progress(done, total)` is called after each batch of
/// the prompt (counting the tokens evaluated, the reused ones excluded);
/// Ok(true) cancels: nothing is generated, and the context keeps what was
/// evaluated. `on_token` is called once per generated token; Ok(true)
/// stops after that token. An Err from either stops at once and is returned
/// as it is. `on_end` receives the text still held back when generation ends
/// (called only when non-empty).
///
/// End-of-generation tokens end the loop and are not returned (nor passed to
/// the callback); the token that completes a stop string is returned.
pub fn generate<E: From<Error>>(
    source: &mut dyn LogitsSource,
    tokens: Option<&dyn TokenText>,
    prompt: &[i32],
    options: &GenerateOptions,
    mut on_progress: impl FnMut(usize, usize) -> std::result::Result<bool, E>,
    mut on_token: impl FnMut(&Step) -> std::result::Result<bool, E>,
    mut on_end: impl FnMut(&str) -> std::result::Result<(), E>,
) -> std::result::Result<Generation, E> {
    // At least the last prompt token is evaluated: its logits are needed.
    let n_reused = source.reusable(common_prefix(source.context(), prompt).min(prompt.len().saturating_sub(1)));
    let mut decoder = Decoder::new(tokens, prompt, options, source.n_ctx())?;
    let mut result = Generation {
        tokens: Vec::new(),
        text: String::new(),
        stop_reason: StopReason::MaxTokens,
        n_prompt: prompt.len(),
        n_reused,
        n_evaluated: 0,
        prompt_seconds: 0.0,
        generate_seconds: 0.0,
        logprobs: Vec::new(),
    };
    if options.max_tokens == 0 {
        return Ok(result);
    }

    let started = Instant::now();
    source.truncate(n_reused)?;
    let mut logits = Vec::new();
    let to_evaluate = &prompt[n_reused..];
    for chunk in to_evaluate.chunks(source.n_batch().max(1)) {
        source.forward(chunk, &mut logits)?;
        result.n_evaluated += chunk.len();
        let called = Instant::now();
        let cancel = on_progress(result.n_evaluated, to_evaluate.len())?;
        source.record(Phase::Callback, called.elapsed());
        if cancel {
            result.stop_reason = StopReason::Cancelled;
            result.prompt_seconds = started.elapsed().as_secs_f64();
            return Ok(result);
        }
    }
    result.prompt_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let most = options.max_tokens.min(source.n_ctx());
    result.tokens.reserve(most);
    if options.need_text {
        result.text.reserve(most * 8);
    }
    loop {
        let sampled = Instant::now();
        let decoded = decoder.next(&logits, tokens, options)?;
        source.record(Phase::Sample, sampled.elapsed());
        let Decoded::Token { id, stopped, logprob } = decoded else {
            result.stop_reason = StopReason::EndOfGeneration;
            break;
        };
        result.logprobs.extend(logprob);
        result.tokens.push(id);
        if options.need_text {
            result.text.push_str(decoder.released());
        }
        let step = Step { id, count: result.tokens.len(), text: decoder.released() };
        let called = Instant::now();
        let stop_asked = on_token(&step)?;
        source.record(Phase::Callback, called.elapsed());
        if stopped {
            result.stop_reason = StopReason::StopString;
            break;
        }
        if stop_asked {
            result.stop_reason = StopReason::Callback;
            break;
        }
        if result.tokens.len() >= options.max_tokens {
            break;
        }
        source.forward(&[id], &mut logits)?;
    }
    result.generate_seconds = started.elapsed().as_secs_f64();
    let rest = decoder.finish();
    if !rest.is_empty() {
        if options.need_text {
            result.text.push_str(&rest);
        }
        on_end(&rest)?;
    }
    Ok(result)
}

pub(crate) fn common_prefix(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Everything that can be known wrong before computing anything.
fn check(n_ctx: usize, tokens: Option<&dyn TokenText>, prompt: &[i32], options: &GenerateOptions) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::Argument("the prompt is empty (give at least one token)".into()));
    }
    options.sampler.validate()?;
    if options.stop.iter().any(String::is_empty) {
        return Err(Error::Argument("stop strings must not be empty".into()));
    }
    if options.grammar_trigger.is_some() && options.grammar.is_none() {
        return Err(Error::Argument("grammar_trigger needs a grammar (or json_schema) to trigger".into()));
    }
    if tokens.is_none() && options.grammar.is_some() {
        return Err(Error::Argument("a grammar needs the model's vocabulary, and this model has none".into()));
    }
    if tokens.is_none() && (options.eos_token.is_none() || !options.stop.is_empty()) {
        return Err(Error::Argument("the model has no usable vocabulary: give eos_token and no stop strings".into()));
    }
    // Every generated token but the last is fed back.
    let needed = prompt.len() + options.max_tokens.saturating_sub(1);
    if needed > n_ctx {
        return Err(Error::Argument(format!(
            "the prompt ({} tokens) plus max_tokens ({}) needs {needed} positions, but the context has {} free \
             (raise n_ctx or lower max_tokens)",
            prompt.len(),
            options.max_tokens,
            n_ctx,
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
        fn context(&self) -> &[i32] {
            &self.seen
        }
        fn n_ctx(&self) -> usize {
            self.n_ctx
        }
        fn n_batch(&self) -> usize {
            4
        }
        fn truncate(&mut self, n: usize) -> Result<()> {
            self.seen.truncate(n);
            Ok(())
        }
        fn forward(&mut self, tokens: &[i32], logits: &mut Vec<f32>) -> Result<()> {
            self.seen.extend_from_slice(tokens);
            self.calls.push(tokens.len());
            let next = (self.seen.last().unwrap() + 1) % 8;
            logits.clear();
            logits.extend((0..8).map(|i| if i == next { 10.0 } else { 0.0 }));
            Ok(())
        }
    }

    /// Token i is the letter 'a' + i; token 7 is the end of generation.
    struct Letters;
    impl TokenText for Letters {
        fn is_eog(&self, id: i32) -> bool {
            id == 7
        }
        fn piece(&self, id: i32) -> Result<&[u8]> {
            Ok(&b"abcdefgh"[id as usize..id as usize + 1])
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
        mut cb: impl FnMut(i32, usize) -> std::result::Result<bool, Error>,
    ) -> (Result<Vec<i32>>, Counter) {
        let mut model = Counter { n_ctx: 64, seen: vec![], calls: vec![] };
        let out = generate(
            &mut model,
            Some(&Letters),
            prompt,
            options,
            |_, _| Ok(false),
            |s: &Step| cb(s.id, s.count),
            |_| Ok(()),
        );
        (out.map(|g| g.tokens), model)
    }

    /// Generates with the text wanted; returns it and each callback's text.
    fn run_full(model: &mut Counter, prompt: &[i32], options: &GenerateOptions) -> (Generation, Vec<String>) {
        let options = &GenerateOptions { need_text: true, ..options.clone() };
        let mut texts = Vec::new();
        let mut ends = Vec::new();
        let g = generate::<Error>(
            model,
            Some(&Letters),
            prompt,
            options,
            |_, _| Ok(false),
            |s: &Step| {
                texts.push(s.text.to_string());
                Ok(false)
            },
            |rest| {
                ends.push(rest.to_string());
                Ok(())
            },
        )
        .unwrap();
        texts.extend(ends.into_iter().map(|e| format!("end:{e}")));
        (g, texts)
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
    fn reports_why_it_stopped_and_the_text() {
        let mut model = Counter { n_ctx: 64, seen: vec![], calls: vec![] };
        let (g, _) = run_full(&mut model, &[4], &greedy(10));
        assert_eq!((g.stop_reason, g.text.as_str()), (StopReason::EndOfGeneration, "fg"));
        let (g, _) = run_full(&mut model, &[0], &greedy(2));
        assert_eq!(g.stop_reason, StopReason::MaxTokens);
        let options = GenerateOptions { stop: vec!["cd".into()], ..greedy(10) };
        let (g, texts) = run_full(&mut model, &[0], &options);
        assert_eq!(g.stop_reason, StopReason::StopString);
        assert_eq!(g.tokens, vec![1, 2, 3]);
        assert_eq!(g.text, "b", "the stop string is not part of the text");
        assert_eq!(texts, ["b", "", ""], "'c' is held back until 'd' shows it starts the stop string");
        let options = GenerateOptions { stop: vec!["cx".into()], ..greedy(2) };
        let (g, texts) = run_full(&mut model, &[0], &options);
        assert_eq!(texts, ["b", "", "end:c"], "a held-back false start is released at the end");
        assert_eq!(g.text, "bc");
    }

    #[test]
    fn the_context_keeps_the_prompt_prefix_it_shares() {
        let mut model = Counter { n_ctx: 64, seen: vec![], calls: vec![] };
        let (g, _) = run_full(&mut model, &[0, 0, 0], &greedy(2));
        assert_eq!((g.n_prompt, g.n_reused), (3, 0));
        assert_eq!(model.seen, vec![0, 0, 0, 1], "the last generated token is not fed back");
        model.calls.clear();
        // the next turn: the whole conversation so far plus new tokens
        let (g, _) = run_full(&mut model, &[0, 0, 0, 1, 2, 5, 5], &greedy(1));
        assert_eq!((g.n_prompt, g.n_reused), (7, 4));
        assert_eq!(model.calls, vec![3], "only the tokens not in the context are evaluated");
        // an earlier token changed: roll back to the common prefix
        model.calls.clear();
        let (g, _) = run_full(&mut model, &[0, 3, 3], &greedy(1));
        assert_eq!(g.n_reused, 1);
        assert_eq!(model.calls, vec![2]);
        // the same prompt again: its last token is evaluated again for its logits
        model.calls.clear();
        let (g, _) = run_full(&mut model, &[0, 3, 3], &greedy(1));
        assert_eq!((g.n_reused, model.calls.clone()), (2, vec![1]));
    }

    #[test]
    fn logprobs_of_each_token_and_the_best_alternatives() {
        let mut model = Counter { n_ctx: 64, seen: vec![], calls: vec![] };
        let options = GenerateOptions { logprobs: Some(2), ..greedy(3) };
        let (g, _) = run_full(&mut model, &[0], &options);
        assert_eq!(g.logprobs.len(), 3);
        // logits: 10 for the next token, 0 for the seven others
        let best = -(1.0f32 + 7.0 * (-10.0f32).exp()).ln();
        for (lp, id) in g.logprobs.iter().zip([1, 2, 3]) {
            assert_eq!(lp.id, id);
            assert!((lp.logprob - best).abs() < 1e-5);
            assert_eq!(lp.top.len(), 2);
            assert_eq!(lp.top[0].0, id);
            assert!((lp.top[1].1 - (best - 10.0)).abs() < 1e-4);
        }
        let (g, _) = run_full(&mut model, &[0], &greedy(3));
        assert!(g.logprobs.is_empty(), "only when asked");
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
                // llama.cpp's default min_p 0.05 would leave only the best token
                min_p: 0.0,
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
