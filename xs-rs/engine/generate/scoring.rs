//! Scoring a given text: each token's log-probability under the model, and
//! perplexity computed exactly as llama.cpp's `llama-perplexity` computes it
//! (chunks of n_ctx tokens, each evaluated on an empty cache, only the second
//! half of each chunk scored, log-softmax with a double-precision sum).
use crate::engine::forward::graph::Head;
use crate::engine::forward::runner::Overrides;
use crate::engine::generate::inference::Inference;
use crate::engine::{Error, Result};

/// The log-probabilities of one row of logits: the maximum and the log of
/// the sum of exponentials, as llama-perplexity's `log_softmax` forms them
/// (f32 differences from the maximum, exponentials summed in f64).
#[derive(Clone, Copy, Debug)]
pub struct LogSoftmax {
    max: f32,
    log_sum: f64,
}

impl LogSoftmax {
    pub fn new(logits: &[f32]) -> LogSoftmax {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
        LogSoftmax { max, log_sum: sum.ln() }
    }

    /// log p(id) for the row this was made from.
    pub fn of(&self, logits: &[f32], id: usize) -> f64 {
        f64::from(logits[id] - self.max) - self.log_sum
    }
}

/// What [`Inference::score`] found.
#[derive(Clone, Debug, Default)]
pub struct TokenScores {
    /// log p(token i | tokens before it) for i = 1..n (the first token has
    /// nothing before it).
    pub logprobs: Vec<f64>,
    /// With `top`: per scored position the best alternatives (id, logprob),
    /// best first.
    pub top: Vec<Vec<(i32, f64)>>,
}

impl TokenScores {
    /// exp(mean negative log-likelihood) of the scored tokens.
    pub fn perplexity(&self) -> f64 {
        (-self.logprobs.iter().sum::<f64>() / self.logprobs.len() as f64).exp()
    }
}

/// What [`Inference::perplexity`] found, as llama-perplexity reports it.
#[derive(Clone, Debug, Default)]
pub struct Perplexity {
    pub perplexity: f64,
    /// The standard error of the estimate (None with a single scored token
    /// or no spread).
    pub error: Option<f64>,
    /// The estimate after each chunk (llama-perplexity's `[1]x,[2]y,...`).
    pub after_chunk: Vec<f64>,
    pub n_chunks: usize,
    pub n_scored: usize,
    /// The mean negative log-likelihood of the scored tokens.
    pub mean_nll: f64,
}

impl Inference {
    /// Scores `tokens` in one pass on an empty cache: every token after the
    /// first gets its log-probability given those before it; with `top` > 0
    /// also the `top` best alternatives at each position.
    pub fn score(&self, tokens: &[i32], top: usize, ov: &Overrides) -> Result<TokenScores> {
        if tokens.len() < 2 {
            return Err(Error::Argument(format!(
                "scoring needs at least 2 tokens (the first is only context), got {}",
                tokens.len()
            )));
        }
        let n_ctx = self.runner.n_ctx();
        if tokens.len() > n_ctx {
            return Err(Error::Argument(format!(
                "{} tokens do not fit in n_ctx {n_ctx} (raise n_ctx, or use perplexity(), which scores a long text \
                 in windows)",
                tokens.len()
            )));
        }
        let mut scores = TokenScores { logprobs: Vec::with_capacity(tokens.len() - 1), top: Vec::new() };
        // The last token's row predicts nothing given: scored rows are 0..n-1.
        let scored = &tokens[..tokens.len() - 1];
        let mut next = tokens[1..].iter();
        self.with_empty_cache(|runner, cache| {
            runner.forward_rows(cache, scored, Head::Logits, None, ov, |row| {
                let ls = LogSoftmax::new(row);
                let id = *next.next().expect("one row per scored token") as usize;
                scores.logprobs.push(ls.of(row, id));
                if top > 0 {
                    let best = crate::engine::generate::logits::top_k(row, top);
                    scores.top.push(best.into_iter().map(|(i, _)| (i as i32, ls.of(row, i))).collect());
                }
                Ok(())
            })
        })?;
        Ok(scores)
    }

    /// llama-perplexity's estimate over `tokens` with windows of `n_ctx`:
    /// min(n_chunks, len / n_ctx) chunks, each on an empty cache with its
    /// first token replaced by `bos` when given (the model adds one), and
    /// the tokens after the first half of each chunk scored.
    pub fn perplexity(
        &self,
        tokens: &[i32],
        n_ctx: usize,
        n_chunks: Option<usize>,
        bos: Option<i32>,
        ov: &Overrides,
    ) -> Result<Perplexity> {
        let session_ctx = self.runner.n_ctx();
        if n_ctx < 2 || n_ctx > session_ctx {
            return Err(Error::Argument(format!(
                "n_ctx must be between 2 and the session's n_ctx ({session_ctx}), got {n_ctx}"
            )));
        }
        if tokens.len() < 2 * n_ctx {
            return Err(Error::Argument(format!(
                "perplexity with n_ctx {n_ctx} needs at least {} tokens (two windows), the text has {} (give a longer \
                 text or a smaller n_ctx)",
                2 * n_ctx,
                tokens.len()
            )));
        }
        if n_chunks == Some(0) {
            return Err(Error::Argument("n_chunks must be at least 1".into()));
        }
        let n_chunks = n_chunks.map_or(tokens.len() / n_ctx, |n| n.min(tokens.len() / n_ctx));
        let first = n_ctx / 2;
        let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
        let mut result = Perplexity { n_chunks, ..Perplexity::default() };
        let mut window = Vec::with_capacity(n_ctx);
        for chunk in tokens.chunks_exact(n_ctx).take(n_chunks) {
            window.clear();
            window.extend_from_slice(chunk);
            if let Some(bos) = bos {
                window[0] = bos;
            }
            let mut position = 0;
            self.with_empty_cache(|runner, cache| {
                runner.forward_rows(cache, &window, Head::Logits, None, ov, |row| {
                    if position >= first && position + 1 < n_ctx {
                        let v = -LogSoftmax::new(row).of(row, chunk[position + 1] as usize);
                        nll += v;
                        nll2 += v * v;
                    }
                    position += 1;
                    Ok(())
                })
            })?;
            count += n_ctx - first - 1;
            result.after_chunk.push((nll / count as f64).exp());
        }
        let mean = nll / count as f64;
        let spread = nll2 / count as f64 - mean * mean;
        result.perplexity = mean.exp();
        result.mean_nll = mean;
        result.n_scored = count;
        result.error = (spread > 0.0 && count > 1).then(|| (spread / (count - 1) as f64).sqrt() * result.perplexity);
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_sums_to_one_and_matches_a_direct_formula() {
        let logits = [1.5f32, -2.0, 0.25, 3.0, 3.0];
        let ls = LogSoftmax::new(&logits);
        let total: f64 = (0..logits.len()).map(|i| ls.of(&logits, i).exp()).sum();
        // the exponentials are f32, as llama-perplexity takes them
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        let direct = f64::from(logits[2]) - logits.iter().map(|&l| f64::from(l).exp()).sum::<f64>().ln();
        assert!((ls.of(&logits, 2) - direct).abs() < 1e-6);
    }

    #[test]
    fn perplexity_of_uniform_scores_is_the_vocabulary_size() {
        let scores = TokenScores { logprobs: vec![-(8f64.ln()); 5], top: Vec::new() };
        assert!((scores.perplexity() - 8.0).abs() < 1e-9);
    }
}
