//! Choosing the next token from logits: a chain of small steps over a list of
//! candidates, as llama.cpp's sampler chain does (penalties → top-k → top-p →
//! min-p → temperature → a final draw), ending in either a seeded random draw
//! or the argmax.
//!
//! Randomness comes from our own generator ([`Rng`], xoshiro256**), never from
//! perl's `rand`: a `seed` makes a draw reproducible, and without one the draw
//! takes its seed from a process-wide default generator that `Lugh::srand`
//! reseeds.
use crate::engine::generate::logits::first_max_of_numbers;
use crate::engine::rng::{rng_for_call, Rng};
use crate::engine::{Error, Result};

/// The tokens still in the running, with their (adjusted) logits. `probs` is
/// filled by [`Candidates::softmax`], which also sorts by logit, best first.
/// A sampler keeps one and refills it for every token, so after the first
/// token its vectors are reused, never reallocated.
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
}

impl Candidates {
    #[cfg(test)]
    pub fn from_logits(logits: &[f32]) -> Candidates {
        let mut c = Candidates::default();
        c.fill(logits);
        c
    }

    /// Every token, with `logits`, unsorted.
    pub fn fill(&mut self, logits: &[f32]) {
        self.ids.clear();
        self.ids.extend(0..logits.len() as i32);
        self.logits.clear();
        self.logits.extend_from_slice(logits);
        self.probs.clear();
        self.sorted = false;
    }

    /// These (id, logit) pairs, unsorted.
    pub fn set(&mut self, pairs: impl Iterator<Item = (i32, f32)>) {
        self.ids.clear();
        self.logits.clear();
        for (id, logit) in pairs {
            self.ids.push(id);
            self.logits.push(logit);
        }
        self.probs.clear();
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Sorts by logit (descending; ties keep the lower id first, like a
    /// stable sort of ids in order) and computes the probabilities.
    pub fn softmax(&mut self) {
        self.sort();
        let max = self.logits.first().copied().unwrap_or(0.0);
        self.probs.clear();
        self.probs.extend(self.logits.iter().map(|&l| (l - max).exp()));
        let sum: f32 = self.probs.iter().sum();
        self.probs.iter_mut().for_each(|p| *p /= sum);
    }

    fn sort(&mut self) {
        if self.sorted {
            return;
        }
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(0..self.len());
        // (logit, id) is a total order: an unstable sort gives the stable result
        order.sort_unstable_by(|&a, &b| self.better(a, b));
        self.reorder(&order);
        self.order = order;
        self.probs.clear();
        self.sorted = true;
    }

    /// Keeps the candidates at `order`'s positions, in that order.
    fn reorder(&mut self, order: &[usize]) {
        self.spare_ids.clear();
        self.spare_ids.extend(order.iter().map(|&i| self.ids[i]));
        self.spare_logits.clear();
        self.spare_logits.extend(order.iter().map(|&i| self.logits[i]));
        // copied back rather than swapped, so that each vector keeps its own
        // capacity (a swap would hand the vocabulary-sized one to the spare)
        self.ids.clear();
        self.ids.extend_from_slice(&self.spare_ids);
        self.logits.clear();
        self.logits.extend_from_slice(&self.spare_logits);
    }

    /// Keeps the `n` best candidates, sorted. Unsorted, it selects them
    /// first (linear time) so that top-k over a large vocabulary sorts only k.
    fn truncate(&mut self, n: usize) {
        let n = n.max(1);
        if !self.sorted && n < self.len() {
            let mut order = std::mem::take(&mut self.order);
            order.clear();
            order.extend(0..self.len());
            order.select_nth_unstable_by(n - 1, |&a, &b| self.better(a, b));
            order.truncate(n);
            self.reorder(&order);
            self.order = order;
            self.probs.clear();
        }
        self.sort();
        self.ids.truncate(n);
        self.logits.truncate(n);
        self.probs.truncate(n);
    }

    /// Ordering of candidates: higher logit first, then lower id.
    fn better(&self, a: usize, b: usize) -> std::cmp::Ordering {
        self.logits[b].total_cmp(&self.logits[a]).then(self.ids[a].cmp(&self.ids[b]))
    }

    /// The index of the highest logit (the lowest id among equals).
    fn argmax(&self) -> usize {
        let mut best = 0;
        for i in 1..self.len() {
            let better = self.logits[i] > self.logits[best]
                || (self.logits[i] == self.logits[best] && self.ids[i] < self.ids[best]);
            if better {
                best = i;
            }
        }
        best
    }
}

/// One step of the chain: narrows or reshapes the candidates.
pub trait Step {
    fn apply(&mut self, cands: &mut Candidates);
}

/// Repetition, presence and frequency penalties over the last `last_n` tokens
/// of the history (llama.cpp's `penalties`): a repeated token's logit is
/// divided by `repeat` when positive and multiplied by it when negative, then
/// lowered by `count * frequency + presence`.
pub struct Penalties {
    pub repeat: f32,
    pub presence: f32,
    pub frequency: f32,
    pub counts: Vec<(i32, u32)>,
}

impl Penalties {
    #[cfg(test)]
    pub fn new(repeat: f32, presence: f32, frequency: f32, history: &[i32], last_n: usize) -> Penalties {
        let mut p = Penalties { repeat, presence, frequency, counts: Vec::new() };
        p.count(history, last_n, &mut Vec::new());
        p
    }

    /// Counts the last `last_n` tokens of `history` (reusing `counts` and
    /// the `sorted` scratch vector).
    pub fn count(&mut self, history: &[i32], last_n: usize, sorted: &mut Vec<i32>) {
        let recent = &history[history.len().saturating_sub(last_n)..];
        sorted.clear();
        sorted.extend_from_slice(recent);
        sorted.sort_unstable();
        self.counts.clear();
        for &id in sorted.iter() {
            match self.counts.last_mut() {
                Some((last, n)) if *last == id => *n += 1,
                _ => self.counts.push((id, 1)),
            }
        }
    }
}

impl Penalties {
    /// Whether applying them changes no logit.
    pub fn is_neutral(&self) -> bool {
        self.counts.is_empty() || (self.repeat == 1.0 && self.presence == 0.0 && self.frequency == 0.0)
    }
}

impl Step for Penalties {
    fn apply(&mut self, cands: &mut Candidates) {
        if self.is_neutral() {
            return;
        }
        for (id, logit) in cands.ids.iter().zip(cands.logits.iter_mut()) {
            let Ok(k) = self.counts.binary_search_by_key(id, |&(i, _)| i) else {
                continue;
            };
            let count = self.counts[k].1 as f32;
            if *logit > 0.0 {
                *logit /= self.repeat;
            } else {
                *logit *= self.repeat;
            }
            *logit -= count * self.frequency + self.presence;
        }
        cands.sorted = false;
    }
}

/// Keeps the `k` most likely candidates (k = 0: all).
pub struct TopK(pub usize);

impl Step for TopK {
    fn apply(&mut self, cands: &mut Candidates) {
        if self.0 > 0 && self.0 < cands.len() {
            cands.truncate(self.0);
        }
    }
}

/// Nucleus sampling: keeps the smallest set of best candidates whose
/// probabilities add up to at least `p` (p >= 1: all).
pub struct TopP(pub f32);

impl Step for TopP {
    fn apply(&mut self, cands: &mut Candidates) {
        if self.0 >= 1.0 {
            return;
        }
        cands.softmax();
        let mut sum = 0.0f32;
        let mut keep = cands.len();
        for (i, p) in cands.probs.iter().enumerate() {
            sum += p;
            if sum >= self.0 {
                keep = i + 1;
                break;
            }
        }
        cands.truncate(keep);
    }
}

/// Keeps candidates at least `p` times as likely as the best one (p = 0: all).
pub struct MinP(pub f32);

impl Step for MinP {
    fn apply(&mut self, cands: &mut Candidates) {
        if self.0 <= 0.0 || cands.is_empty() {
            return;
        }
        cands.softmax();
        let threshold = cands.probs[0] * self.0;
        let keep = cands.probs.iter().take_while(|&&p| p >= threshold).count();
        cands.truncate(keep);
    }
}

/// Divides the logits by the temperature; a temperature of 0 (or below)
/// keeps only the best candidate, so it means greedy, with no division.
pub struct Temperature(pub f32);

impl Step for Temperature {
    fn apply(&mut self, cands: &mut Candidates) {
        if self.0 <= 0.0 {
            let best = cands.argmax();
            cands.ids.swap(0, best);
            cands.logits.swap(0, best);
            cands.ids.truncate(1);
            cands.logits.truncate(1);
            cands.probs.clear();
            cands.sorted = true;
            return;
        }
        if self.0 != 1.0 {
            cands.logits.iter_mut().for_each(|l| *l /= self.0);
            cands.probs.clear();
        }
    }
}

/// The settings of a sampler, as the caller gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerOptions {
    /// Always the most likely token (after penalties).
    pub greedy: bool,
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// 1.0 = off.
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// How many of the most recent history tokens the penalties look at.
    pub penalty_last_n: usize,
    /// None: seeded from the default generator.
    pub seed: Option<u64>,
}

impl Default for SamplerOptions {
    /// Lugh's documented defaults: temperature 0.8, top_k 40, top_p 0.95.
    fn default() -> Self {
        SamplerOptions {
            greedy: false,
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
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
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p, "in [0, 1]");
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad("repeat_penalty", self.repeat_penalty, "a number > 0");
        }
        if !self.presence_penalty.is_finite() {
            return bad("presence_penalty", self.presence_penalty, "a finite number");
        }
        if !self.frequency_penalty.is_finite() {
            return bad("frequency_penalty", self.frequency_penalty, "a finite number");
        }
        Ok(())
    }
}

/// A sampler: the chain built from [`SamplerOptions`] plus its generator.
/// One sampler serves a whole generation, so a seed fixes every draw.
pub struct Sampler {
    options: SamplerOptions,
    rng: Rng,
    // kept between tokens so that sampling allocates nothing once warm
    cands: Candidates,
    penalties: Penalties,
    sorted_history: Vec<i32>,
}

impl Sampler {
    pub fn new(options: SamplerOptions) -> Result<Sampler> {
        options.validate()?;
        let rng = rng_for_call(options.seed);
        let penalties = Penalties {
            repeat: options.repeat_penalty,
            presence: options.presence_penalty,
            frequency: options.frequency_penalty,
            // the penalty window, reserved whole (within reason)
            counts: Vec::with_capacity(options.penalty_last_n.min(4096)),
        };
        let sorted_history = Vec::with_capacity(options.penalty_last_n.min(4096));
        Ok(Sampler { options, rng, cands: Candidates::default(), penalties, sorted_history })
    }

    /// The next token for `logits`, penalising tokens of `history`: a draw
    /// from [`Sampler::distribution`] (greedy: its one token, no draw).
    pub fn sample(&mut self, logits: &[f32], history: &[i32]) -> Result<i32> {
        let greedy = self.options.greedy || self.options.temperature <= 0.0;
        self.distribution(logits, history)?;
        if greedy {
            return Ok(self.cands.ids[0]);
        }
        let r = self.rng.next_f64() as f32;
        Ok(draw(&self.cands.ids, &self.cands.probs, r))
    }

    /// The distribution `sample` draws from: the candidates the chain
    /// leaves, best first, with their probabilities (`probs`, summing to 1).
    /// Greedy: the best token alone, with probability 1. Speculative
    /// decoding compares these distributions of two models.
    pub fn distribution(&mut self, logits: &[f32], history: &[i32]) -> Result<&Candidates> {
        if logits.is_empty() {
            return Err(Error::Argument("logits are empty".into()));
        }
        // one vectorisable pass; the position only on the error path
        if logits.iter().any(|l| l.is_nan()) {
            let i = logits.iter().position(|l| l.is_nan()).unwrap_or(0);
            return Err(Error::Argument(format!("logit {i} is not a number (NaN)")));
        }
        let o = &self.options;
        let greedy = o.greedy || o.temperature <= 0.0;
        if logits.contains(&f32::INFINITY) {
            // The softmax's limit: the +inf tokens share all the probability
            // (the chain would compute inf - inf = NaN).
            let winners = (0..logits.len()).filter(|&i| logits[i] == f32::INFINITY);
            self.cands.set(winners.take(if greedy { 1 } else { usize::MAX }).map(|i| (i as i32, 0.0)));
            self.cands.softmax();
            return Ok(&self.cands);
        }
        if logits.iter().all(|&l| l == f32::NEG_INFINITY) {
            return Err(Error::Argument("every logit is -inf: there is no token to draw".into()));
        }
        let no_penalties = o.repeat_penalty == 1.0 && o.presence_penalty == 0.0 && o.frequency_penalty == 0.0;
        if greedy && no_penalties {
            // the chain would change nothing: the first largest logit, without
            // copying a whole vocabulary of candidates per token
            let best = first_max_of_numbers(logits);
            self.cands.set(std::iter::once((best as i32, logits[best])));
            self.cands.softmax();
            return Ok(&self.cands);
        }
        if no_penalties {
            self.penalties.counts.clear();
        } else {
            self.penalties.count(history, o.penalty_last_n, &mut self.sorted_history);
        }
        self.cands.fill(logits);
        let (mut top_k, mut top_p, mut min_p, mut temperature) =
            (TopK(o.top_k), TopP(o.top_p), MinP(o.min_p), Temperature(o.temperature));
        let chain: [&mut dyn Step; 5] = [&mut self.penalties, &mut top_k, &mut top_p, &mut min_p, &mut temperature];
        // greedy: the penalties, then the best (temperature 0 keeps it alone)
        let steps = if greedy { 1 } else { chain.len() };
        for step in chain.into_iter().take(steps) {
            step.apply(&mut self.cands);
        }
        if greedy {
            Temperature(0.0).apply(&mut self.cands);
        }
        self.cands.softmax();
        Ok(&self.cands)
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
mod tests {
    use super::*;

    fn opts() -> SamplerOptions {
        SamplerOptions { seed: Some(1), ..SamplerOptions::default() }
    }

    #[test]
    fn infinite_logits_win_and_all_minus_infinity_is_an_error() {
        let inf = f32::INFINITY;
        for seed in 0..20 {
            let mut s = Sampler::new(SamplerOptions { seed: Some(seed), ..SamplerOptions::default() }).unwrap();
            assert_eq!(s.sample(&[1.0, inf, 3.0], &[]).unwrap(), 1);
            let id = s.sample(&[inf, 0.0, inf], &[]).unwrap();
            assert!(id == 0 || id == 2);
        }
        let mut s = Sampler::new(SamplerOptions { greedy: true, ..opts() }).unwrap();
        assert_eq!(s.sample(&[1.0, 2.0, inf], &[1, 2]).unwrap(), 2);
        assert!(s.sample(&[-inf, -inf], &[]).is_err());
        assert_eq!(s.sample(&[-inf, 0.5], &[]).unwrap(), 1);
    }

    #[test]
    fn greedy_and_zero_temperature_take_the_argmax() {
        let logits = [0.1, 3.0, 2.9, -1.0];
        let mut s = Sampler::new(SamplerOptions { greedy: true, ..opts() }).unwrap();
        assert_eq!(s.sample(&logits, &[]).unwrap(), 1);
        let mut s = Sampler::new(SamplerOptions { temperature: 0.0, ..opts() }).unwrap();
        assert_eq!(s.sample(&logits, &[]).unwrap(), 1);
        // Ties: the lower id.
        assert_eq!(s.sample(&[1.0, 5.0, 5.0], &[]).unwrap(), 1);
    }

    #[test]
    fn top_k_one_is_deterministic() {
        let mut s = Sampler::new(SamplerOptions { top_k: 1, temperature: 5.0, ..opts() }).unwrap();
        for _ in 0..20 {
            assert_eq!(s.sample(&[0.0, 1.0, 0.5], &[]).unwrap(), 1);
        }
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        let mut c = Candidates::from_logits(&[0.0, 10.0, 9.0, -5.0]);
        TopP(0.9).apply(&mut c);
        assert_eq!(c.ids, vec![1, 2]);
        let mut c = Candidates::from_logits(&[0.0, 10.0, 9.0, -5.0]);
        TopP(0.5).apply(&mut c);
        assert_eq!(c.ids, vec![1]);
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let mut c = Candidates::from_logits(&[0.0, 2.0, 1.9, -3.0]);
        MinP(0.5).apply(&mut c);
        assert_eq!(c.ids, vec![1, 2]);
    }

    #[test]
    fn penalties_follow_llama_cpp() {
        let mut c = Candidates::from_logits(&[2.0, -2.0, 1.0]);
        Penalties::new(2.0, 0.5, 0.25, &[0, 1, 1, 9], 64).apply(&mut c);
        assert_eq!(c.logits, vec![2.0 / 2.0 - 0.25 - 0.5, -2.0 * 2.0 - 0.5 - 0.5, 1.0]);
        // Only the last n history tokens count.
        let mut c = Candidates::from_logits(&[2.0, 2.0]);
        Penalties::new(2.0, 0.0, 0.0, &[0, 1], 1).apply(&mut c);
        assert_eq!(c.logits, vec![2.0, 1.0]);
    }

    #[test]
    fn repeat_penalty_changes_greedy_choice() {
        let mut s = Sampler::new(SamplerOptions { greedy: true, repeat_penalty: 2.0, ..opts() }).unwrap();
        assert_eq!(s.sample(&[3.0, 2.0], &[0]).unwrap(), 1);
    }

    #[test]
    fn seeded_draws_repeat_and_follow_the_distribution() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let run = |seed| {
            let mut s = Sampler::new(SamplerOptions { seed: Some(seed), top_k: 0, top_p: 1.0, ..opts() }).unwrap();
            (0..30).map(|_| s.sample(&logits, &[]).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
        // Two tokens, logits ln(3) and 0 at temperature 1: about 3:1.
        let mut s = Sampler::new(SamplerOptions { temperature: 1.0, top_k: 0, top_p: 1.0, ..opts() }).unwrap();
        let firsts = (0..20_000).filter(|_| s.sample(&[3f32.ln(), 0.0], &[]).unwrap() == 0).count();
        assert!((firsts as f64 / 20_000.0 - 0.75).abs() < 0.02, "{firsts}");
    }

    #[test]
    fn bad_values_are_rejected() {
        for o in [
            SamplerOptions { temperature: -1.0, ..opts() },
            SamplerOptions { top_p: 0.0, ..opts() },
            SamplerOptions { top_p: 1.5, ..opts() },
            SamplerOptions { min_p: 2.0, ..opts() },
            SamplerOptions { repeat_penalty: 0.0, ..opts() },
            SamplerOptions { temperature: f32::NAN, ..opts() },
        ] {
            assert!(Sampler::new(o).is_err());
        }
        let mut s = Sampler::new(opts()).unwrap();
        assert!(s.sample(&[], &[]).is_err());
        assert!(s.sample(&[1.0, f32::NAN], &[]).to_string_err().contains("logit 1"));
    }

    trait ErrString {
        fn to_string_err(self) -> String;
    }
    impl<T> ErrString for Result<T> {
        fn to_string_err(self) -> String {
            self.err().map(|e| e.to_string()).unwrap_or_default()
        }
    }
}
