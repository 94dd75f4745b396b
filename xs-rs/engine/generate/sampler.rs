//! Choosing the next token from logits: llama.cpp b11434's sampler chain
//! (common/sampling.cpp builds it, src/llama-sampler.cpp computes it), step
//! for step and in its arithmetic, so that a seed gives llama.cpp's tokens:
//!
//! logit_bias → penalties → DRY → top-n-sigma → top-k → typical-p → top-p →
//! min-p → XTC → temperature → dist (the order of the middle steps is the
//! `samplers` option); with mirostat: logit_bias → temperature → mirostat.
//!
//! The steps work on [`Candidates`], kept in the order llama.cpp's array has
//! (token order until a step sorts it), because the final draw walks them in
//! that order. Sums are float where llama.cpp's are, double where its are.
//!
//! Randomness: `std::mt19937` ([`Mt19937`]) seeded with the 32-bit seed,
//! one draw per token for `dist`, a generator of its own for XTC. Without a
//! seed, the seed comes from the default generator that `Lugh::srand`
//! reseeds.
use crate::engine::generate::logits::{first_max_if_numbers, first_max_of_numbers};
use crate::engine::generate::sampler_steps::{
    bucket_partial_sort, dist, min_p, mirostat_v1, mirostat_v2, temperature, top_k, top_n_sigma, top_p, typical_p, xtc,
    Dry, DryBreakers, Mirostat, Penalties,
};
use crate::engine::generate::stl_sort;
use crate::engine::model::tokenizer::Vocab;
use crate::engine::rng::{sampling_seed, Mt19937};
use crate::engine::{Error, Result};

/// The tokens still in the running: parallel vectors of ids, logits and
/// probabilities (as llama.cpp's `llama_token_data_array`), with whether
/// they are sorted by logit, best first. A sampler keeps one and refills it
/// for every token, so after the first token nothing is reallocated.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    pub ids: Vec<i32>,
    pub logits: Vec<f32>,
    pub probs: Vec<f32>,
    pub(crate) sorted: bool,
    // scratch for reordering
    order: Vec<usize>,
    spare_ids: Vec<i32>,
    spare_logits: Vec<f32>,
    spare_probs: Vec<f32>,
}

impl Candidates {
    #[cfg(test)]
    pub fn from_logits(logits: &[f32]) -> Candidates {
        let mut c = Candidates::default();
        c.fill(logits);
        c
    }

    /// Every token, with `logits`, in token order.
    pub fn fill(&mut self, logits: &[f32]) {
        self.ids.clear();
        self.ids.extend(0..logits.len() as i32);
        self.logits.clear();
        self.logits.extend_from_slice(logits);
        self.probs.clear();
        self.probs.resize(logits.len(), 0.0);
        self.sorted = false;
    }

    /// These (id, logit) pairs, in this order, unsorted.
    pub fn set(&mut self, pairs: impl Iterator<Item = (i32, f32)>) {
        self.ids.clear();
        self.logits.clear();
        for (id, logit) in pairs {
            self.ids.push(id);
            self.logits.push(logit);
        }
        self.probs.clear();
        self.probs.resize(self.ids.len(), 0.0);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Bans a token (a grammar's or a caller's filter): its logit becomes
    /// -inf, so that no step keeps it ahead of an allowed one.
    // the grammar sampler (issue #37) is its first caller outside the tests
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn ban(&mut self, at: usize) {
        self.logits[at] = f32::NEG_INFINITY;
    }

    /// Sorts (best first) and computes the probabilities, as callers that
    /// want a distribution expect.
    pub fn softmax(&mut self) {
        self.softmax_impl(true);
    }

    /// llama.cpp's `llama_sampler_softmax_impl`: optionally sorts, then
    /// p = expf(logit - max) / (their float sum, taken in array order).
    pub(crate) fn softmax_impl(&mut self, sort: bool) {
        if self.is_empty() {
            return;
        }
        if sort && !self.sorted {
            self.sort();
        }
        let max = self.max_logit();
        let mut sum = 0.0f32;
        for (p, &l) in self.probs.iter_mut().zip(&self.logits) {
            *p = (l - max).exp();
            sum += *p;
        }
        self.probs.iter_mut().for_each(|p| *p /= sum);
    }

    /// The largest logit: the first one when sorted, else a scan as
    /// llama.cpp's `std::max` scan.
    pub(crate) fn max_logit(&self) -> f32 {
        if self.sorted {
            return self.logits[0];
        }
        self.logits[1..].iter().fold(self.logits[0], |m, &l| if m < l { l } else { m })
    }

    /// Sorts by logit, best first (llama.cpp's partial sort of all of
    /// them: equal logits end where libstdc++ leaves them).
    pub(crate) fn sort(&mut self) {
        self.keep_best(self.len());
    }

    /// Keeps the candidates at `order`'s positions, in that order.
    pub(crate) fn reorder(&mut self, order: &[usize]) {
        self.spare_ids.clear();
        self.spare_ids.extend(order.iter().map(|&i| self.ids[i]));
        self.spare_logits.clear();
        self.spare_logits.extend(order.iter().map(|&i| self.logits[i]));
        self.spare_probs.clear();
        self.spare_probs.extend(order.iter().map(|&i| self.probs[i]));
        // copied back rather than swapped, so that each vector keeps its own
        // capacity (a swap would hand the vocabulary-sized one to the spare)
        self.ids.clear();
        self.ids.extend_from_slice(&self.spare_ids);
        self.logits.clear();
        self.logits.extend_from_slice(&self.spare_logits);
        self.probs.clear();
        self.probs.extend_from_slice(&self.spare_probs);
    }

    /// llama.cpp's `llama_token_data_array_partial_sort_inplace`: the `n`
    /// best candidates, sorted, kept alone (up to 128 by std::partial_sort,
    /// more through its histogram of logits), exactly as it orders them.
    pub(crate) fn keep_best(&mut self, n: usize) {
        let n = n.min(self.len());
        if !self.sorted {
            let mut order = std::mem::take(&mut self.order);
            order.clear();
            order.extend(0..self.len());
            if n <= 128 {
                let logits = &self.logits;
                stl_sort::partial_sort(&mut order, n, &mut |&a, &b| logits[a] > logits[b]);
                order.truncate(n);
            } else {
                bucket_partial_sort(&self.logits, &mut order, n);
            }
            self.reorder(&order);
            self.order = order;
            self.sorted = true;
        }
        self.truncate(n);
    }

    /// Keeps the first `n` candidates.
    pub(crate) fn truncate(&mut self, n: usize) {
        self.ids.truncate(n);
        self.logits.truncate(n);
        self.probs.truncate(n);
    }

    /// Drops the first `n` candidates, keeping the order.
    pub(crate) fn drop_front(&mut self, n: usize) {
        self.ids.drain(..n);
        self.logits.drain(..n);
        self.probs.drain(..n);
    }

    /// Keeps the candidates for which `keep(logit)` holds, in order.
    pub(crate) fn retain_logits(&mut self, keep: impl Fn(f32) -> bool) {
        let mut kept = 0;
        for i in 0..self.len() {
            if keep(self.logits[i]) {
                self.ids[kept] = self.ids[i];
                self.logits[kept] = self.logits[i];
                self.probs[kept] = self.probs[i];
                kept += 1;
            }
        }
        self.truncate(kept);
    }

    /// The index of the first largest logit in array order (as llama.cpp's
    /// temperature 0 keeps it).
    pub(crate) fn first_max(&self) -> usize {
        let mut best = 0;
        for i in 1..self.len() {
            if self.logits[i] > self.logits[best] {
                best = i;
            }
        }
        best
    }
}

/// A step of the chain, by the names llama.cpp's `--samplers` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplerKind {
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    TypicalP,
    TopP,
    MinP,
    Xtc,
    Temperature,
}

impl SamplerKind {
    /// b11434's default order (common_params_sampling::samplers).
    pub const DEFAULT_ORDER: [SamplerKind; 9] = [
        SamplerKind::Penalties,
        SamplerKind::Dry,
        SamplerKind::TopNSigma,
        SamplerKind::TopK,
        SamplerKind::TypicalP,
        SamplerKind::TopP,
        SamplerKind::MinP,
        SamplerKind::Xtc,
        SamplerKind::Temperature,
    ];

    /// llama.cpp's canonical name.
    pub fn name(self) -> &'static str {
        match self {
            SamplerKind::Penalties => "penalties",
            SamplerKind::Dry => "dry",
            SamplerKind::TopNSigma => "top_n_sigma",
            SamplerKind::TopK => "top_k",
            SamplerKind::TypicalP => "typ_p",
            SamplerKind::TopP => "top_p",
            SamplerKind::MinP => "min_p",
            SamplerKind::Xtc => "xtc",
            SamplerKind::Temperature => "temperature",
        }
    }

    /// A name as common_sampler_types_from_names reads it: canonical,
    /// kebab-case (top-k), without the underscore (topk), or one of
    /// nucleus, temp, typ; any case.
    pub fn from_name(name: &str) -> Result<SamplerKind> {
        let lower = name.to_ascii_lowercase();
        let plain = |k: SamplerKind| {
            let canonical = k.name();
            lower == canonical || lower == canonical.replace('_', "-") || lower == canonical.replace('_', "")
        };
        if let Some(k) = Self::DEFAULT_ORDER.into_iter().find(|&k| plain(k)) {
            return Ok(k);
        }
        match lower.as_str() {
            "nucleus" => Ok(SamplerKind::TopP),
            "temp" => Ok(SamplerKind::Temperature),
            "typ" | "typical" | "typical_p" => Ok(SamplerKind::TypicalP),
            _ => {
                let names: Vec<&str> = Self::DEFAULT_ORDER.iter().map(|k| k.name()).collect();
                Err(Error::Argument(format!("samplers: unknown sampler '{name}' (known: {})", names.join(", "))))
            }
        }
    }
}

/// The settings of a sampler, as the caller gives them. Defaults are
/// llama.cpp's common defaults (temperature 0.8, top_k 40, top_p 0.95,
/// min_p 0.05, the rest off).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerOptions {
    /// Always the most likely token after the chain (as temperature 0).
    pub greedy: bool,
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// 1.0 = off.
    pub typical_p: f32,
    /// <= 0 = off.
    pub top_n_sigma: f32,
    /// 0.0 = off.
    pub xtc_probability: f32,
    /// > 0.5 = off.
    pub xtc_threshold: f32,
    /// 1.0 = off.
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// How many of the most recent history tokens the penalties look at.
    pub penalty_last_n: usize,
    /// 0.0 = off.
    pub dry_multiplier: f32,
    /// Below 1 = off.
    pub dry_base: f32,
    pub dry_allowed_length: usize,
    /// How many of the most recent history tokens DRY looks at (0 = off).
    pub dry_penalty_last_n: usize,
    pub dry_sequence_breakers: Vec<String>,
    /// 0 = off, 1 = mirostat, 2 = mirostat 2.0.
    pub mirostat_mode: u8,
    pub mirostat_tau: f32,
    pub mirostat_eta: f32,
    /// (token, bias) pairs added to the logits first; -inf bans a token.
    pub logit_bias: Vec<(i32, f32)>,
    /// The order of the middle of the chain.
    pub samplers: Vec<SamplerKind>,
    /// None: seeded from the default generator.
    pub seed: Option<u64>,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            greedy: false,
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            mirostat_mode: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            logit_bias: Vec::new(),
            samplers: SamplerKind::DEFAULT_ORDER.to_vec(),
            seed: None,
        }
    }
}

impl SamplerOptions {
    /// Checks every value's range; the message names the option.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, v: f32, range: &str| Err(Error::Argument(format!("{what} must be {range}, got {v}")));
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad("temperature", self.temperature, "a number >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "in (0, 1]");
        }
        let unit = [
            ("min_p", self.min_p),
            ("typical_p", self.typical_p),
            ("xtc_probability", self.xtc_probability),
            ("xtc_threshold", self.xtc_threshold),
        ];
        for (what, v) in unit {
            if !(0.0..=1.0).contains(&v) {
                return bad(what, v, "in [0, 1]");
            }
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite() && (1.0 / self.repeat_penalty).is_finite()) {
            return bad("repeat_penalty", self.repeat_penalty, "a number > 0");
        }
        let finite = [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("top_n_sigma", self.top_n_sigma),
        ];
        for (what, v) in finite {
            if !v.is_finite() {
                return bad(what, v, "a finite number");
            }
        }
        let at_least_zero = [
            ("dry_multiplier", self.dry_multiplier),
            ("dry_base", self.dry_base),
            ("mirostat_tau", self.mirostat_tau),
            ("mirostat_eta", self.mirostat_eta),
        ];
        for (what, v) in at_least_zero {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(what, v, "a finite number >= 0");
            }
        }
        if self.mirostat_mode > 2 {
            return Err(Error::Argument(format!("mirostat_mode must be 0, 1 or 2, got {}", self.mirostat_mode)));
        }
        if self.dry_sequence_breakers.iter().any(String::is_empty) {
            return Err(Error::Argument("dry_sequence_breakers must not contain an empty string".into()));
        }
        for &(id, bias) in &self.logit_bias {
            if id < 0 {
                return Err(Error::Argument(format!("logit_bias: token {id} is not a token id")));
            }
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(Error::Argument(format!(
                    "logit_bias: the bias of token {id} must be a number or '-inf', got {bias}"
                )));
            }
        }
        Ok(())
    }

    fn is_greedy(&self) -> bool {
        self.greedy || self.temperature <= 0.0
    }

    pub(crate) fn penalties_on(&self) -> bool {
        self.penalty_last_n > 0
            && !(self.repeat_penalty == 1.0 && self.frequency_penalty == 0.0 && self.presence_penalty == 0.0)
    }

    pub(crate) fn dry_on(&self) -> bool {
        self.dry_multiplier != 0.0 && self.dry_base >= 1.0 && self.dry_penalty_last_n > 0
    }

    /// Whether the chain, greedy, may choose another token than the
    /// largest logit (otherwise the argmax is taken without it).
    /// Greedy with no step that could change the argmax: the answer is
    /// the first largest logit.
    fn takes_plain_argmax(&self) -> bool {
        self.is_greedy() && !self.changes_the_argmax()
    }

    fn changes_the_argmax(&self) -> bool {
        let has = |k| self.samplers.contains(&k);
        !self.logit_bias.is_empty()
            || (has(SamplerKind::Penalties) && self.penalties_on())
            || (has(SamplerKind::Dry) && self.dry_on())
            || (has(SamplerKind::TypicalP) && self.typical_p < 1.0)
            || (has(SamplerKind::Xtc) && self.xtc_probability > 0.0 && self.xtc_threshold <= 0.5)
    }
}

/// A sampler: the chain built from [`SamplerOptions`] plus its generators
/// and state. One sampler serves a whole generation, so a seed fixes every
/// draw and mirostat's mu carries over.
pub struct Sampler {
    options: SamplerOptions,
    rng: Mt19937,
    xtc_rng: Mt19937,
    mirostat: Mirostat,
    // kept between tokens so that sampling allocates nothing once warm
    cands: Candidates,
    penalties: Penalties,
    dry: Dry,
}

impl Sampler {
    /// A sampler for a model's vocabulary: DRY's breakers are tokenized
    /// with it, and its suppress_tokens are never picked. Without one, DRY's
    /// sequence breakers must be none.
    pub fn with_vocab(mut options: SamplerOptions, vocab: Option<&Vocab>) -> Result<Sampler> {
        options.validate()?;
        // after the user's biases, as common_sampler merges them
        if let Some(vocab) = vocab {
            options.logit_bias.extend(vocab.suppress_tokens().iter().map(|&id| (id, f32::NEG_INFINITY)));
        }
        let seed = sampling_seed(options.seed);
        let dry_used = options.samplers.contains(&SamplerKind::Dry) && options.dry_on() && options.mirostat_mode == 0;
        let breakers = match (dry_used && !options.dry_sequence_breakers.is_empty(), vocab) {
            (false, _) => DryBreakers::default(),
            (true, Some(vocab)) => DryBreakers::new(vocab, &options.dry_sequence_breakers)?,
            (true, None) => {
                return Err(Error::Argument(
                    "dry_sequence_breakers need a model with a vocabulary (give dry_sequence_breakers => [])".into(),
                ))
            }
        };
        let mirostat =
            Mirostat { tau: options.mirostat_tau, eta: options.mirostat_eta, mu: 2.0 * options.mirostat_tau };
        Ok(Sampler {
            options,
            rng: Mt19937::new(seed),
            xtc_rng: Mt19937::new(seed),
            mirostat,
            cands: Candidates::default(),
            penalties: Penalties::default(),
            dry: Dry::new(breakers),
        })
    }

    /// The next token for `logits`, penalising tokens of `history` (the
    /// prompt and what was generated, oldest first).
    pub fn sample(&mut self, logits: &[f32], history: &[i32]) -> Result<i32> {
        if self.options.takes_plain_argmax() {
            // the first largest finite logit is the chain's answer; NaN and
            // infinite logits take the checked path below
            if let Some((best, max)) = first_max_if_numbers(logits) {
                if max.is_finite() {
                    return Ok(best as i32);
                }
            }
        }
        self.sample_filtered(logits, history, &mut |_| {})
    }

    /// As [`Sampler::sample`], with `filter` applied to the candidates (all
    /// tokens, in token order) before the chain: the seam for constrained
    /// sampling. llama.cpp's grammar sampling calls `sample` first, and only
    /// when that token is not allowed calls this with the grammar banning
    /// ([`Candidates::ban`]) what it does not allow: a second draw.
    pub fn sample_filtered(
        &mut self,
        logits: &[f32],
        history: &[i32],
        filter: &mut dyn FnMut(&mut Candidates),
    ) -> Result<i32> {
        if let Some(id) = self.load(logits, filter)? {
            return Ok(id);
        }
        let greedy = self.options.is_greedy();
        if self.options.mirostat_mode != 0 && !greedy {
            return self.mirostat_chain();
        }
        self.run_chain(history, greedy);
        if self.cands.logits.iter().all(|&l| l == f32::NEG_INFINITY) {
            return Err(Error::Argument("every token is excluded (every logit is -inf)".into()));
        }
        let chosen = if greedy { self.cands.first_max() } else { dist(&mut self.rng, &mut self.cands) };
        Ok(self.cands.ids[chosen])
    }

    /// The distribution `sample` draws from: the candidates the chain
    /// leaves, best first, with their probabilities (summing to 1). Greedy:
    /// the best token alone, with probability 1. Speculative decoding
    /// compares these distributions of two models.
    pub fn distribution(&mut self, logits: &[f32], history: &[i32]) -> Result<&Candidates> {
        if self.options.mirostat_mode != 0 {
            return Err(Error::Argument("mirostat has no fixed distribution to compare (mirostat_mode 0 here)".into()));
        }
        let greedy = self.options.is_greedy();
        if self.load(logits, &mut |_| {})?.is_none() {
            self.run_chain(history, greedy);
        }
        if greedy {
            let best = self.cands.first_max();
            let (id, logit) = (self.cands.ids[best], self.cands.logits[best]);
            self.cands.set(std::iter::once((id, logit)));
        }
        self.cands.retain_logits(|l| l != f32::NEG_INFINITY);
        if self.cands.is_empty() {
            return Err(Error::Argument("every token is excluded (every logit is -inf)".into()));
        }
        self.cands.softmax();
        Ok(&self.cands)
    }

    /// Checks the logits and fills the candidates (logit_bias and `filter`
    /// applied). Some(id) when the answer needs no chain: greedy without a
    /// step that could change it, or +inf logits (the softmax's limit: the
    /// +inf tokens share all the probability; the chain would compute
    /// inf - inf = NaN).
    fn load(&mut self, logits: &[f32], filter: &mut dyn FnMut(&mut Candidates)) -> Result<Option<i32>> {
        if logits.is_empty() {
            return Err(Error::Argument("logits are empty".into()));
        }
        // one vectorisable pass; the position only on the error path
        if logits.iter().any(|l| l.is_nan()) {
            let i = logits.iter().position(|l| l.is_nan()).unwrap_or(0);
            return Err(Error::Argument(format!("logit {i} is not a number (NaN)")));
        }
        if let Some(&(id, _)) = self.options.logit_bias.iter().find(|&&(id, _)| id as usize >= logits.len()) {
            return Err(Error::Argument(format!("logit_bias: token {id} is out of range [0, {})", logits.len())));
        }
        let greedy = self.options.is_greedy();
        if logits.contains(&f32::INFINITY) {
            let winners = (0..logits.len() as i32).filter(|&i| logits[i as usize] == f32::INFINITY);
            self.cands.set(winners.take(if greedy { 1 } else { usize::MAX }).map(|i| (i, 0.0)));
            self.cands.softmax();
            let chosen = dist(&mut self.rng, &mut self.cands);
            return Ok(Some(self.cands.ids[chosen]));
        }
        if logits.iter().all(|&l| l == f32::NEG_INFINITY) {
            return Err(Error::Argument("every logit is -inf: there is no token to draw".into()));
        }
        self.cands.fill(logits);
        for &(id, bias) in &self.options.logit_bias {
            self.cands.logits[id as usize] += bias;
        }
        filter(&mut self.cands);
        if self.options.takes_plain_argmax() {
            // the chain would keep the first largest logit: take it without
            // running it over a whole vocabulary
            let best = first_max_of_numbers(&self.cands.logits);
            let (id, logit) = (self.cands.ids[best], self.cands.logits[best]);
            self.cands.set(std::iter::once((id, logit)));
        }
        Ok(None)
    }

    /// The middle of the chain, in the order of `samplers`.
    fn run_chain(&mut self, history: &[i32], greedy: bool) {
        let o = &self.options;
        let c = &mut self.cands;
        for &kind in &o.samplers {
            match kind {
                SamplerKind::Penalties => self.penalties.apply(o, history, c),
                SamplerKind::Dry => self.dry.apply(o, history, c),
                SamplerKind::TopNSigma => top_n_sigma(o.top_n_sigma, c),
                SamplerKind::TopK => top_k(o.top_k, c),
                SamplerKind::TypicalP => typical_p(o.typical_p, c),
                SamplerKind::TopP => top_p(o.top_p, c),
                SamplerKind::MinP => min_p(o.min_p, c),
                SamplerKind::Xtc => xtc(o.xtc_probability, o.xtc_threshold, &mut self.xtc_rng, c),
                SamplerKind::Temperature => temperature(if greedy { 0.0 } else { o.temperature }, c),
            }
        }
    }

    /// logit_bias → temperature → mirostat (v1 or v2).
    fn mirostat_chain(&mut self) -> Result<i32> {
        let n_vocab = self.cands.len();
        temperature(self.options.temperature, &mut self.cands);
        let chosen = match self.options.mirostat_mode {
            1 => mirostat_v1(&mut self.mirostat, n_vocab, &mut self.rng, &mut self.cands),
            _ => mirostat_v2(&mut self.mirostat, &mut self.rng, &mut self.cands),
        };
        Ok(self.cands.ids[chosen])
    }
}

/// A draw from a distribution: the first candidate whose cumulative
/// probability passes `r` (uniform in [0, 1)).
pub fn draw(ids: &[i32], probs: &[f32], r: f32) -> i32 {
    let mut sum = 0.0f32;
    for (id, p) in ids.iter().zip(probs) {
        sum += p;
        if r < sum {
            return *id;
        }
    }
    // Rounding can leave the sum a hair under r: the last candidate then.
    *ids.last().expect("at least one candidate")
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
