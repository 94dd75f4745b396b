//! The steps of the sampler chain ([`super::sampler`]), each as llama.cpp
//! b11434's src/llama-sampler.cpp computes it: its arithmetic (float or
//! double as it has them), its sorts (libstdc++'s, [`stl_sort`]) and its
//! random draws.
use crate::engine::generate::sampler::{Candidates, SamplerOptions};
use crate::engine::generate::stl_sort;
use crate::engine::model::tokenizer::{EncodeOptions, Vocab};
use crate::engine::rng::Mt19937;
use crate::engine::Result;

/// llama.cpp's `llama_token_data_array_partial_sort` over the positions
/// `order` (0..n): the candidates go into 128 buckets of logit over
/// [-10, 10), only the best buckets holding `npartial` are kept, each
/// sorted with std::sort and the last with std::partial_sort. Leaves the
/// `npartial` best positions in `order`, best first.
pub(crate) fn bucket_partial_sort(logits: &[f32], order: &mut Vec<usize>, npartial: usize) {
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

/// The longest penalty window reserved up front (a longer one grows as the
/// history does).
const MAX_RESERVED_WINDOW: usize = 1 << 16;

/// Repetition, presence and frequency penalties over the last `last_n`
/// tokens of the history (llama.cpp's `penalties`): a repeated token's logit
/// is multiplied by `repeat` when <= 0 and divided by it otherwise, then
/// lowered by `count * frequency + presence`.
#[derive(Default)]
pub(crate) struct Penalties {
    counts: Vec<(i32, u32)>,
    sorted_history: Vec<i32>,
}

impl Penalties {
    pub(crate) fn apply(&mut self, o: &SamplerOptions, history: &[i32], cands: &mut Candidates) {
        if !o.penalties_on() {
            return;
        }
        let recent = &history[history.len().saturating_sub(o.penalty_last_n)..];
        self.sorted_history.clear();
        self.counts.clear();
        // room for the whole window at the first token (as llama.cpp's ring
        // buffer), so that later tokens allocate nothing
        let window = o.penalty_last_n.min(MAX_RESERVED_WINDOW);
        self.sorted_history.reserve(window);
        self.counts.reserve(window);
        self.sorted_history.extend_from_slice(recent);
        self.sorted_history.sort_unstable();
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
    pub(crate) fn from_sequences(sequences: &[&[i32]]) -> DryBreakers {
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
pub(crate) struct Dry {
    breakers: DryBreakers,
    repeat_count: Vec<usize>,
    max_token_repeat: Vec<(i32, usize)>,
}

impl Dry {
    pub(crate) fn new(breakers: DryBreakers) -> Dry {
        Dry { breakers, ..Dry::default() }
    }

    pub(crate) fn apply(&mut self, o: &SamplerOptions, history: &[i32], cands: &mut Candidates) {
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
pub(crate) fn top_n_sigma(n: f32, cands: &mut Candidates) {
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
pub(crate) fn top_k(k: usize, cands: &mut Candidates) {
    if k > 0 {
        cands.keep_best(k);
    }
}

/// Locally typical sampling: the tokens whose surprise is closest to the
/// entropy, until their probabilities pass p; left in that order.
pub(crate) fn typical_p(p: f32, cands: &mut Candidates) {
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
pub(crate) fn top_p(p: f32, cands: &mut Candidates) {
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
pub(crate) fn min_p(p: f32, cands: &mut Candidates) {
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
pub(crate) fn xtc(probability: f32, threshold: f32, rng: &mut Mt19937, cands: &mut Candidates) {
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
pub(crate) fn temperature(t: f32, cands: &mut Candidates) {
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
pub(crate) fn dist(rng: &mut Mt19937, cands: &mut Candidates) -> usize {
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
pub(crate) fn discrete(rng: &mut Mt19937, probs: &[f32]) -> usize {
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
pub(crate) fn truncate_to_int(x: f32) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// Mirostat (v1): estimates the Zipf exponent from the best m = 100
/// tokens, keeps the top k that targets surprise mu, draws, and moves mu
/// towards tau.
pub(crate) fn mirostat_v1(state: &mut Mirostat, n_vocab: usize, rng: &mut Mt19937, cands: &mut Candidates) -> usize {
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
pub(crate) fn mirostat_v2(state: &mut Mirostat, rng: &mut Mt19937, cands: &mut Candidates) -> usize {
    cands.softmax_impl(true);
    let keep = cands.probs.iter().take_while(|&&p| -p.log2() <= state.mu).count().max(1);
    cands.truncate(keep);
    cands.softmax_impl(true);
    let chosen = discrete(rng, &cands.probs);
    state.update(cands.probs[chosen]);
    chosen
}

/// Mirostat's target surprise, carried from token to token.
pub(crate) struct Mirostat {
    pub(crate) tau: f32,
    pub(crate) eta: f32,
    pub(crate) mu: f32,
}

impl Mirostat {
    fn update(&mut self, p: f32) {
        let error = -p.log2() - self.tau;
        self.mu -= self.eta * error;
    }
}
