//! One position's scores over the vocabulary, kept whole on this side so a
//! caller can ask for the few numbers it needs (the best token, the top k, a
//! probability) without copying a 262,144-entry vector out.
use crate::engine::{Error, Result};

#[derive(Clone, Debug)]
pub struct Logits {
    values: Vec<f32>,
}

impl Logits {
    pub fn new(values: Vec<f32>) -> Logits {
        Logits { values }
    }

    pub fn values(&self) -> &[f32] {
        &self.values
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn get(&self, id: i64) -> Result<f32> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.values.get(i).copied())
            .ok_or_else(|| Error::Argument(format!("token id {id} is out of range [0, {})", self.values.len())))
    }

    /// The id of the highest score, the lowest id among equals (NaN never wins).
    pub fn argmax(&self) -> Option<usize> {
        if self.values.is_empty() {
            return None;
        }
        if !self.values.iter().any(|v| v.is_nan()) {
            return Some(first_max_of_numbers(&self.values));
        }
        let mut best: Option<usize> = None;
        for (i, &v) in self.values.iter().enumerate() {
            if !v.is_nan() && best.is_none_or(|b| v > self.values[b]) {
                best = Some(i);
            }
        }
        best
    }

    /// The `n` best (id, score) pairs, best first, lower id first among
    /// equals. Selects before sorting, so only n entries are sorted.
    pub fn top_k(&self, n: usize) -> Vec<(usize, f32)> {
        top_k(&self.values, n)
    }

    /// log(softmax(scores / temperature)), computed stably (the maximum
    /// subtracted first). Temperature must be finite and > 0.
    pub fn log_softmax(&self, temperature: f32) -> Result<Logits> {
        let mut values = Vec::new();
        log_softmax_into(&self.values, temperature, &mut values)?;
        Ok(Logits { values })
    }

    /// softmax(scores / temperature): the probabilities.
    pub fn softmax(&self, temperature: f32) -> Result<Logits> {
        let mut out = self.log_softmax(temperature)?;
        for v in out.values.iter_mut() {
            *v = v.exp();
        }
        Ok(out)
    }
}

/// The index of the first largest value (no NaN in `values`, not empty):
/// the maximum by independent lanes (so the loop vectorises), then its
/// first position. A 262,144-entry vocabulary takes tens of microseconds.
pub fn first_max_of_numbers(values: &[f32]) -> usize {
    first_max_if_numbers(values).map_or(0, |(i, _)| i)
}

/// The index and value of the first largest of `values` in one pass, or
/// None when `values` is empty or holds a NaN: greedy decoding's whole
/// sampling step, which over a 262,144-entry vocabulary is worth a pass
/// rather than the several that checking, copying and choosing take.
pub fn first_max_if_numbers(values: &[f32]) -> Option<(usize, f32)> {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    // a lane that ever saw a NaN stays marked
    let mut nan = [false; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for ((lane, seen), &v) in lanes.iter_mut().zip(nan.iter_mut()).zip(chunk) {
            *lane = if v > *lane { v } else { *lane };
            *seen |= v.is_nan();
        }
    }
    if values.is_empty() || nan.contains(&true) || rest.iter().any(|v| v.is_nan()) {
        return None;
    }
    let max = lanes.iter().chain(rest).copied().fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
    values.iter().position(|&v| v == max).map(|i| (i, max))
}

/// The `n` best (index, value) pairs of `values`, best first, the lower
/// index first among equals, NaN last.
pub fn top_k(values: &[f32], n: usize) -> Vec<(usize, f32)> {
    let better = |a: &usize, b: &usize| {
        let (x, y) = (values[*a], values[*b]);
        match (x.is_nan(), y.is_nan()) {
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => y.total_cmp(&x).then(a.cmp(b)),
        }
    };
    let mut ids: Vec<usize> = (0..values.len()).collect();
    let n = n.min(ids.len());
    if n == 0 {
        return Vec::new();
    }
    if n < ids.len() {
        ids.select_nth_unstable_by(n - 1, better);
        ids.truncate(n);
    }
    ids.sort_by(better);
    ids.into_iter().map(|i| (i, values[i])).collect()
}

/// log(softmax(values / temperature)) into `out`.
pub fn log_softmax_into(values: &[f32], temperature: f32, out: &mut Vec<f32>) -> Result<()> {
    if !(temperature.is_finite() && temperature > 0.0) {
        return Err(Error::Argument(format!("temperature must be a finite number > 0, got {temperature}")));
    }
    if values.iter().any(|v| v.is_nan()) {
        return Err(Error::Argument("the logits contain NaN".into()));
    }
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max) / temperature;
    // f64 for the sum: up to 262,144 terms
    let sum: f64 = values.iter().map(|&v| f64::from(v / temperature - max).exp()).sum();
    let log_sum = sum.ln() as f32;
    out.clear();
    out.extend(values.iter().map(|&v| v / temperature - max - log_sum));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_max_is_the_first_largest() {
        assert_eq!(first_max_of_numbers(&[1.0]), 0);
        let mut v: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1000) as f32).collect();
        assert_eq!(first_max_of_numbers(&v), v.iter().position(|&x| x == 999.0).unwrap());
        v[3] = 5000.0;
        v[900] = 5000.0;
        assert_eq!(first_max_of_numbers(&v), 3, "the lowest index among equals");
        assert_eq!(first_max_of_numbers(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
        assert_eq!(first_max_of_numbers(&[-3.0, -1.0, -2.0]), 1);
    }

    #[test]
    fn first_max_checks_for_nan() {
        assert_eq!(first_max_if_numbers(&[]), None);
        let mut v: Vec<f32> = (0..100).map(|i| (i % 37) as f32).collect();
        assert_eq!(first_max_if_numbers(&v), Some((36, 36.0)));
        v[50] = f32::NAN;
        assert_eq!(first_max_if_numbers(&v), None, "a NaN in the lanes");
        v[50] = 0.0;
        v[99] = f32::NAN;
        assert_eq!(first_max_if_numbers(&v), None, "a NaN in the remainder");
        assert_eq!(first_max_if_numbers(&[f32::NEG_INFINITY, f32::INFINITY, f32::INFINITY]), Some((1, f32::INFINITY)));
    }

    #[test]
    fn best_and_top_k() {
        let l = Logits::new(vec![0.5, 2.0, 1.0, 2.0, f32::NAN, -1.0]);
        assert_eq!(l.argmax(), Some(1), "the lower id among equals; NaN never wins");
        assert_eq!(l.top_k(3), vec![(1, 2.0), (3, 2.0), (2, 1.0)]);
        assert_eq!(l.top_k(0), vec![]);
        assert_eq!(l.top_k(99).len(), 6, "at most the vocabulary");
        assert_eq!(l.top_k(99)[5].0, 4, "NaN last");
        assert_eq!(Logits::new(vec![]).argmax(), None);
        assert!(l.get(6).is_err() && l.get(-1).is_err());
        assert_eq!(l.get(5).unwrap(), -1.0);
    }

    #[test]
    fn probabilities() {
        let l = Logits::new(vec![1.0, 2.0, 3.0]);
        let p = l.softmax(1.0).unwrap();
        let sum: f32 = p.values().iter().sum();
        assert!((sum - 1.0).abs() < 1e-6);
        let e = [1f32.exp(), 2f32.exp(), 3f32.exp()];
        let z: f32 = e.iter().sum();
        for (got, e) in p.values().iter().zip(e) {
            assert!((got - e / z).abs() < 1e-6);
        }
        let hot = l.softmax(0.01).unwrap();
        assert!(hot.values()[2] > 0.999, "a low temperature sharpens");
        let lp = Logits::new(vec![1000.0, 0.0]).log_softmax(1.0).unwrap();
        assert_eq!(lp.values()[0], 0.0, "stable for large scores");
        assert!(l.softmax(0.0).is_err() && l.softmax(f32::NAN).is_err());
        assert!(Logits::new(vec![f32::NAN]).softmax(1.0).is_err());
    }
}
