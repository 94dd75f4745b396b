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
use crate::engine::generate::logits::first_max_of_numbers;
use crate::engine::generate::stl_sort;
use crate::engine::model::tokenizer::{EncodeOptions, Vocab};
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
    sorted: bool,
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
    fn softmax_impl(&mut self, sort: bool) {
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
    fn max_logit(&self) -> f32 {
        if self.sorted {
            return self.logits[0];
        }
        self.logits[1..].iter().fold(self.logits[0], |m, &l| if m < l { l } else { m })
    }

    /// Sorts by logit, best first (llama.cpp's partial sort of all of
    /// them: equal logits end where libstdc++ leaves them).
    fn sort(&mut self) {
        self.keep_best(self.len());
    }

    /// Keeps the candidates at `order`'s positions, in that order.
    fn reorder(&mut self, order: &[usize]) {
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
    fn keep_best(&mut self, n: usize) {
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
    fn truncate(&mut self, n: usize) {
        self.ids.truncate(n);
        self.logits.truncate(n);
        self.probs.truncate(n);
    }

    /// Drops the first `n` candidates, keeping the order.
    fn drop_front(&mut self, n: usize) {
        self.ids.drain(..n);
        self.logits.drain(..n);
        self.probs.drain(..n);
    }

    /// Keeps the candidates for which `keep(logit)` holds, in order.
    fn retain_logits(&mut self, keep: impl Fn(f32) -> bool) {
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
    fn first_max(&self) -> usize {
        let mut best = 0;
        for i in 1..self.len() {
            if self.logits[i] > self.logits[best] {
                best = i;
            }
        }
        best
    }
}

/// llama.cpp's `llama_token_data_array_partial_sort` over the positions
/// `order` (0..n): the candidates go into 128 buckets of logit over
/// [-10, 10), only the best buckets holding `npartial` are kept, each
/// sorted with std::sort and the last with std::partial_sort. Leaves the
/// `npartial` best positions in `order`, best first.
fn bucket_partial_sort(logits: &[f32], order: &mut Vec<usize>, npartial: usize) {
    const BUCKETS: usize = 128;
    let (low, high) = (-10.0f32, 10.0f32);
    let scale = BUCKETS as f32 / (high - low);
    let inter = -low * scale;
    let bucket_of = |v: f32| truncate_to_int(scale * v + inter).clamp(0, BUCKETS as i32 - 1) as usize;
    let buckets: Vec<usize> = logits.iter().map(|&v| bucket_of(v)).collect();
    let mut histogram = [0usize; BUCKETS];
    buckets.iter().for_each(|&b| histogram[b] += 1);
    let mut have = 0;
    let mut last = 0;
    for b in (0..BUCKETS).rev() {
        have += histogram[b];
        last = b;
        if have >= npartial {
            break;
        }
    }
    // each kept bucket's slice of `order`, best bucket first, filled in array order
    let mut start = [0usize; BUCKETS];
    let mut at = 0;
    for b in (last..BUCKETS).rev() {
        start[b] = at;
        at += histogram[b];
    }
    order.clear();
    order.resize(have, 0);
    let mut next = start;
    for (i, &b) in buckets.iter().enumerate() {
        if b >= last {
            order[next[b]] = i;
            next[b] += 1;
        }
    }
    let better = &mut |a: &usize, b: &usize| logits[*a] > logits[*b];
    let mut done = 0;
    for b in (last + 1..BUCKETS).rev() {
        stl_sort::sort(&mut order[start[b]..start[b] + histogram[b]], &mut *better);
        done += histogram[b];
    }
    stl_sort::partial_sort(&mut order[start[last]..start[last] + histogram[last]], npartial - done, better);
    order.truncate(npartial);
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

    fn penalties_on(&self) -> bool {
        self.penalty_last_n > 0
            && !(self.repeat_penalty == 1.0 && self.frequency_penalty == 0.0 && self.presence_penalty == 0.0)
    }

    fn dry_on(&self) -> bool {
        self.dry_multiplier != 0.0 && self.dry_base >= 1.0 && self.dry_penalty_last_n > 0
    }

    /// Whether the chain, greedy, may choose another token than the
    /// largest logit (otherwise the argmax is taken without it).
    fn changes_the_argmax(&self) -> bool {
        let has = |k| self.samplers.contains(&k);
        !self.logit_bias.is_empty()
            || (has(SamplerKind::Penalties) && self.penalties_on())
            || (has(SamplerKind::Dry) && self.dry_on())
            || (has(SamplerKind::TypicalP) && self.typical_p < 1.0)
            || (has(SamplerKind::Xtc) && self.xtc_probability > 0.0 && self.xtc_threshold <= 0.5)
    }
}

/// Repetition, presence and frequency penalties over the last `last_n`
/// tokens of the history (llama.cpp's `penalties`): a repeated token's logit
/// is multiplied by `repeat` when <= 0 and divided by it otherwise, then
/// lowered by `count * frequency + presence`.
#[derive(Default)]
struct Penalties {
    counts: Vec<(i32, u32)>,
    sorted_history: Vec<i32>,
}

impl Penalties {
    fn apply(&mut self, o: &SamplerOptions, history: &[i32], cands: &mut Candidates) {
        if !o.penalties_on() {
            return;
        }
        let recent = &history[history.len().saturating_sub(o.penalty_last_n)..];
        self.sorted_history.clear();
        self.sorted_history.extend_from_slice(recent);
        self.sorted_history.sort_unstable();
        self.counts.clear();
        for &id in &self.sorted_history {
            match self.counts.last_mut() {
                Some((last, n)) if *last == id => *n += 1,
                _ => self.counts.push((id, 1)),
            }
        }
        for (id, logit) in cands.ids.iter().zip(cands.logits.iter_mut()) {
            let Ok(k) = self.counts.binary_search_by_key(id, |&(i, _)| i) else {
                continue;
            };
            let count = self.counts[k].1 as f32;
            if *logit <= 0.0 {
                *logit *= o.repeat_penalty;
            } else {
                *logit /= o.repeat_penalty;
            }
            *logit -= count * o.frequency_penalty + o.presence_penalty;
        }
        cands.sorted = false;
    }
}

/// DRY's sequence breakers as token sequences: a head token and the tokens
/// that must follow it (none for a token that contains a breaker).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DryBreakers {
    heads: Vec<(i32, Vec<i32>)>,
}

impl DryBreakers {
    /// llama.cpp's `get_overlapping_token_sequences` for each breaker (at
    /// most 40 bytes, tails at most 20 tokens): every token whose text
    /// contains the breaker, and every token whose text ends with a start of
    /// it, with the rest of the breaker tokenized.
    pub fn new(vocab: &Vocab, breakers: &[String]) -> Result<DryBreakers> {
        const MAX_CHAR_LEN: usize = 40;
        const MAX_SEQ_LEN: usize = 20;
        let mut heads: Vec<(i32, Vec<i32>)> = Vec::new();
        let plain = EncodeOptions { add_bos: false, add_eos: false, parse_special: false };
        for breaker in breakers {
            let b = &breaker.as_bytes()[..breaker.len().min(MAX_CHAR_LEN)];
            if b.is_empty() {
                continue;
            }
            for id in 0..vocab.n_vocab() as i32 {
                let word = vocab.decode(&[id], true)?;
                if word.windows(b.len()).any(|w| w == b) {
                    Self::add(&mut heads, id, Vec::new());
                    continue;
                }
                for pos in (0..word.len()).filter(|&p| word[p] == b[0]) {
                    let overlap = (word.len() - pos).min(b.len());
                    if word[pos..pos + overlap] != b[..overlap] {
                        continue;
                    }
                    let mut tail = vocab.encode_bytes(&b[overlap..], plain);
                    tail.truncate(MAX_SEQ_LEN);
                    Self::add(&mut heads, id, tail);
                }
            }
        }
        heads.sort_by_key(|(id, _)| *id);
        Ok(DryBreakers { heads })
    }

    #[cfg(test)]
    fn from_sequences(sequences: &[&[i32]]) -> DryBreakers {
        let mut heads = Vec::new();
        for s in sequences {
            Self::add(&mut heads, s[0], s[1..].to_vec());
        }
        heads.sort_by_key(|(id, _)| *id);
        DryBreakers { heads }
    }

    fn add(heads: &mut Vec<(i32, Vec<i32>)>, id: i32, tail: Vec<i32>) {
        if !heads.iter().any(|(h, t)| *h == id && *t == tail) {
            heads.push((id, tail));
        }
    }

    /// The tails of the breakers starting with `id`.
    fn tails(&self, id: i32) -> impl Iterator<Item = &Vec<i32>> {
        let start = self.heads.partition_point(|(h, _)| *h < id);
        self.heads[start..].iter().take_while(move |(h, _)| *h == id).map(|(_, t)| t)
    }
}

/// DRY ("don't repeat yourself", llama.cpp's `dry`): a token that would
/// extend a repetition of at least `dry_allowed_length` tokens of the recent
/// history loses multiplier * base^(length - allowed_length).
#[derive(Default)]
struct Dry {
    breakers: DryBreakers,
    repeat_count: Vec<usize>,
    max_token_repeat: Vec<(i32, usize)>,
}

impl Dry {
    fn apply(&mut self, o: &SamplerOptions, history: &[i32], cands: &mut Candidates) {
        if !o.dry_on() {
            return;
        }
        let n = history.len().min(o.dry_penalty_last_n);
        let allowed = o.dry_allowed_length;
        if n <= allowed {
            return;
        }
        let recent = &history[history.len() - n..];
        // the i-th token from the end (0: the last)
        let rat = |i: usize| recent[n - 1 - i];

        // Step 1: the most recent restart sequence limits the repetition length.
        let mut rep_limit = n;
        for i in 0..n {
            let mut longest: Option<usize> = None;
            for tail in self.breakers.tails(rat(i)) {
                let len = tail.len();
                if longest.is_none_or(|l| len > l) && len <= i && (0..len).all(|k| tail[k] == rat(i - k - 1)) {
                    longest = Some(len);
                }
            }
            if let Some(len) = longest {
                rep_limit = i - len;
                break;
            }
        }
        if rep_limit < allowed {
            return;
        }

        // Step 2: the Z-algorithm, backwards: repeat_count[last - k] is the
        // length of the suffix that also ends k tokens before the end.
        self.repeat_count.clear();
        self.repeat_count.resize(n, 0);
        let last = n - 1;
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..n {
            if k > rt {
                let mut len = 0;
                while len + k < n && rat(len) == rat(len + k) {
                    len += 1;
                }
                self.repeat_count[last - k] = len.min(rep_limit);
                if len > 0 {
                    lt = k;
                    rt = k + len - 1;
                }
            } else {
                let p = k - lt;
                let right_part_len = rt - k + 1;
                if self.repeat_count[last - p] < right_part_len {
                    self.repeat_count[last - k] = self.repeat_count[last - p].min(rep_limit);
                } else {
                    let mut i = rt + 1;
                    while i < n && rat(i) == rat(i - k) {
                        i += 1;
                    }
                    self.repeat_count[last - k] = (i - k).min(rep_limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }

        // Step 3: the longest repetition each next token would extend.
        self.max_token_repeat.clear();
        for i in 0..n - 1 {
            let repeat_len = self.repeat_count[i];
            if repeat_len >= allowed {
                let token = rat(n - 2 - i);
                match self.max_token_repeat.iter_mut().find(|(t, _)| *t == token) {
                    Some((_, len)) => *len = (*len).max(repeat_len),
                    None => self.max_token_repeat.push((token, repeat_len)),
                }
            }
        }

        // Step 4: the penalties (the exponent clamped so the power stays finite).
        const FLOAT_MAX_LOG: f32 = 88.722_84;
        let max_exponent = if o.dry_base > 1.000_001 { (FLOAT_MAX_LOG / o.dry_base.ln()) as i32 } else { 0 };
        for (id, logit) in cands.ids.iter().zip(cands.logits.iter_mut()) {
            let Some(&(_, repeat_len)) = self.max_token_repeat.iter().find(|(t, _)| t == id) else {
                continue;
            };
            if self.breakers.tails(*id).any(Vec::is_empty) {
                continue;
            }
            let mut exponent = (repeat_len - allowed) as i32;
            if max_exponent > 0 && exponent > max_exponent {
                exponent = max_exponent;
            }
            // std::pow(float, int) computes in double
            let penalty = (f64::from(o.dry_multiplier) * f64::from(o.dry_base).powf(f64::from(exponent))) as f32;
            *logit -= penalty;
        }
        cands.sorted = false;
    }
}

/// Top-n-sigma: masks (-inf) the tokens more than n standard deviations of
/// the finite logits below the largest.
fn top_n_sigma(n: f32, cands: &mut Candidates) {
    if n <= 0.0 || cands.len() <= 1 {
        return;
    }
    let mut max = cands.logits[0];
    let mut sum = 0.0f32;
    let mut valid = 0usize;
    for &l in cands.logits.iter().filter(|&&l| l != f32::NEG_INFINITY) {
        max = if max < l { l } else { max };
        sum += l;
        valid += 1;
    }
    let mean = if valid > 0 { sum / valid as f32 } else { 0.0 };
    let mut acc = 0.0f32;
    for &l in cands.logits.iter().filter(|&&l| l != f32::NEG_INFINITY) {
        // pow(float, 2) is computed (exactly) in double, then added to a float
        let d = f64::from(l - mean);
        acc = (f64::from(acc) + d * d) as f32;
    }
    let std = if valid > 0 { (acc / valid as f32).sqrt() } else { 0.0 };
    let floor = max - n * std;
    cands.logits.iter_mut().filter(|l| **l < floor).for_each(|l| *l = f32::NEG_INFINITY);
}

/// Top-k: the k best, sorted (k = 0: all, unsorted).
fn top_k(k: usize, cands: &mut Candidates) {
    if k > 0 {
        cands.keep_best(k);
    }
}

/// Locally typical sampling: the tokens whose surprise is closest to the
/// entropy, until their probabilities pass p; left in that order.
fn typical_p(p: f32, cands: &mut Candidates) {
    if p >= 1.0 || cands.is_empty() {
        return;
    }
    cands.softmax_impl(true);
    let entropy = cands.probs.iter().fold(0.0f32, |e, &q| e + -q * q.ln());
    let scores: Vec<f32> = cands.probs.iter().map(|&q| (-q.ln() - entropy).abs()).collect();
    // libstdc++'s std::sort, as llama.cpp's: equal (or NaN) scores end in its order
    let mut order: Vec<usize> = (0..cands.len()).collect();
    stl_sort::sort(&mut order, &mut |&a, &b| scores[a] < scores[b]);
    let mut sum = 0.0f32;
    let mut keep = order.len();
    for (i, &at) in order.iter().enumerate() {
        sum += cands.probs[at];
        if sum > p {
            keep = i + 1;
            break;
        }
    }
    order.truncate(keep);
    cands.reorder(&order);
    cands.sorted = false;
}

/// Nucleus sampling: the fewest best tokens whose probabilities (computed
/// in the current order) reach p, sorted.
fn top_p(p: f32, cands: &mut Candidates) {
    if p >= 1.0 || cands.is_empty() {
        return;
    }
    cands.softmax_impl(false);
    // llama.cpp sorts only the best 256 of a large unsorted vocabulary
    // first, and all of them if those do not reach p: the same order
    if !cands.sorted && cands.len() > 1024 {
        let mut best = cands.clone();
        best.keep_best(256);
        if best.probs.iter().fold(0.0f32, |s, &q| s + q) >= p {
            *cands = best;
        }
    }
    if !cands.sorted {
        cands.keep_best(cands.len());
    }
    let mut sum = 0.0f32;
    let mut keep = cands.len();
    for (i, &q) in cands.probs.iter().enumerate() {
        sum += q;
        if sum >= p {
            keep = i + 1;
            break;
        }
    }
    cands.truncate(keep);
}

/// Min-p: the tokens whose logit is at least max + ln p (probability at
/// least p times the best's); unsorted candidates keep their order.
fn min_p(p: f32, cands: &mut Candidates) {
    if p <= 0.0 || cands.is_empty() {
        return;
    }
    if !cands.sorted {
        let max = cands.logits.iter().fold(-f32::MAX, |m, &l| if m < l { l } else { m });
        let floor = max + p.ln();
        if cands.logits.iter().any(|&l| l >= floor) {
            cands.retain_logits(|l| l >= floor);
            return;
        }
        cands.keep_best(cands.len());
    }
    let floor = cands.logits[0] + p.ln();
    let keep = 1 + cands.logits[1..].iter().take_while(|&&l| l >= floor).count();
    cands.truncate(keep);
}

/// XTC ("exclude top choices"): with the given probability, drops every
/// token above the threshold but the least likely of them.
fn xtc(probability: f32, threshold: f32, rng: &mut Mt19937, cands: &mut Candidates) {
    if probability <= 0.0 || threshold > 0.5 || cands.len() < 2 {
        return;
    }
    if rng.next_f32() > probability {
        return;
    }
    cands.softmax_impl(true);
    let last_above = cands.probs.iter().take_while(|&&q| q >= threshold).count().saturating_sub(1);
    if last_above > 0 {
        cands.drop_front(last_above);
    }
}

/// Temperature: divides the logits; at 0 or below, every token but the
/// first best becomes -inf.
fn temperature(t: f32, cands: &mut Candidates) {
    if cands.is_empty() {
        return;
    }
    if t <= 0.0 {
        let best = cands.first_max();
        for (i, l) in cands.logits.iter_mut().enumerate() {
            if i != best {
                *l = f32::NEG_INFINITY;
            }
        }
        return;
    }
    cands.logits.iter_mut().for_each(|l| *l /= t);
}

/// llama.cpp's `dist`: weights expf(logit - max), summed in double, and the
/// first candidate whose running sum reaches sum × a uniform draw. One draw
/// per token, even for a single candidate.
fn dist(rng: &mut Mt19937, cands: &mut Candidates) -> usize {
    let draw = rng.next_f64();
    if cands.len() == 1 {
        cands.probs[0] = 1.0;
        return 0;
    }
    let max = cands.max_logit();
    let mut sum = 0.0f64;
    for (p, &l) in cands.probs.iter_mut().zip(&cands.logits) {
        *p = (l - max).exp();
        sum += f64::from(*p);
    }
    let target = sum * draw;
    let mut running = 0.0f64;
    let mut chosen = None;
    for (i, p) in cands.probs.iter_mut().enumerate() {
        if chosen.is_none() {
            running += f64::from(*p);
            if running >= target {
                chosen = Some(i);
            }
        }
        *p = (f64::from(*p) / sum) as f32;
    }
    chosen.unwrap_or(cands.len() - 1)
}

/// `std::discrete_distribution<int>` over the probabilities, as libstdc++
/// draws it: normalized in double, cumulative sums with the last set to 1,
/// the first reaching a uniform draw. Fewer than two: the first, no draw.
fn discrete(rng: &mut Mt19937, probs: &[f32]) -> usize {
    if probs.len() < 2 {
        return 0;
    }
    let sum: f64 = probs.iter().fold(0.0, |s, &p| s + f64::from(p));
    let draw = rng.next_f64();
    let mut cumulative = 0.0f64;
    for (i, &p) in probs.iter().enumerate() {
        cumulative += f64::from(p) / sum;
        if i + 1 == probs.len() || cumulative >= draw {
            return i;
        }
    }
    probs.len() - 1
}

/// A float truncated to int as x86's cvttss2si does (what llama.cpp's
/// `int(k)` compiles to): NaN and out-of-range values give i32::MIN.
fn truncate_to_int(x: f32) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// Mirostat (v1): estimates the Zipf exponent from the best m = 100
/// tokens, keeps the top k that targets surprise mu, draws, and moves mu
/// towards tau.
fn mirostat_v1(state: &mut Mirostat, n_vocab: usize, rng: &mut Mt19937, cands: &mut Candidates) -> usize {
    const M: usize = 100;
    cands.softmax_impl(true);
    let (mut sum_ti_bi, mut sum_ti_sq) = (0.0f32, 0.0f32);
    for i in 0..(M - 1).min(cands.len() - 1) {
        let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
        let b_i = (cands.probs[i] / cands.probs[i + 1]).ln();
        sum_ti_bi += t_i * b_i;
        sum_ti_sq += t_i * t_i;
    }
    let s_hat = sum_ti_bi / sum_ti_sq;
    let epsilon_hat = s_hat - 1.0;
    let k = ((epsilon_hat * 2f32.powf(state.mu)) / (1.0 - (n_vocab as f32).powf(-epsilon_hat))).powf(1.0 / s_hat);
    let k = truncate_to_int(k).max(1) as usize;
    cands.keep_best(k);
    cands.softmax_impl(true);
    let chosen = discrete(rng, &cands.probs);
    state.update(cands.probs[chosen]);
    chosen
}

/// Mirostat 2.0: keeps the tokens whose surprise is at most mu, draws, and
/// moves mu towards tau.
fn mirostat_v2(state: &mut Mirostat, rng: &mut Mt19937, cands: &mut Candidates) -> usize {
    cands.softmax_impl(true);
    let keep = cands.probs.iter().take_while(|&&p| -p.log2() <= state.mu).count().max(1);
    cands.truncate(keep);
    cands.softmax_impl(true);
    let chosen = discrete(rng, &cands.probs);
    state.update(cands.probs[chosen]);
    chosen
}

/// Mirostat's target surprise, carried from token to token.
struct Mirostat {
    tau: f32,
    eta: f32,
    mu: f32,
}

impl Mirostat {
    fn update(&mut self, p: f32) {
        let error = -p.log2() - self.tau;
        self.mu -= self.eta * error;
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
    /// A sampler without a vocabulary: DRY's sequence breakers must then be
    /// none (they are text, tokenized with the model's vocabulary).
    pub fn new(options: SamplerOptions) -> Result<Sampler> {
        Self::with_vocab(options, None)
    }

    /// A sampler for a model's vocabulary (which DRY's breakers need).
    pub fn with_vocab(options: SamplerOptions, vocab: Option<&Vocab>) -> Result<Sampler> {
        options.validate()?;
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
            dry: Dry { breakers, ..Dry::default() },
        })
    }

    /// The next token for `logits`, penalising tokens of `history` (the
    /// prompt and what was generated, oldest first).
    pub fn sample(&mut self, logits: &[f32], history: &[i32]) -> Result<i32> {
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
        if greedy && !self.options.changes_the_argmax() {
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
