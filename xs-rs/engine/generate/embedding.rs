//! Embeddings: the final hidden state of a text (after the output norm,
//! before the output projection), pooled and normalised as llama.cpp's
//! embedding mode and `llama-embedding` do.
use crate::engine::forward::graph::Head;
use crate::engine::forward::runner::Overrides;
use crate::engine::generate::inference::Inference;
use crate::engine::model::tokenizer::EncodeOptions;
use crate::engine::{Error, Result};

/// How the per-token hidden states become one vector (llama.cpp's
/// `--pooling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Every token's own vector.
    None,
    Mean,
    /// The first token's (llama.cpp's CLS pooling).
    Cls,
    Last,
}

impl Pooling {
    pub const NAMES: &'static str = "none, mean, cls, last";

    pub fn from_name(name: &str) -> Result<Pooling> {
        match name {
            "none" => Ok(Pooling::None),
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            _ => Err(Error::Argument(format!("pooling must be one of {}, got '{name}'", Pooling::NAMES))),
        }
    }

    /// llama.cpp's `LLM_KV_POOLING_TYPE` numbering (the GGUF key
    /// `ARCH.pooling_type`); None for values it has no pooling of ours for.
    pub fn from_gguf(value: u64) -> Option<Pooling> {
        match value {
            0 => Some(Pooling::None),
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }
}

/// Scales `v` to unit Euclidean length (llama.cpp's `embd_normalize` 2: the
/// sum of squares in f64); a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    let scale = if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 };
    v.iter_mut().for_each(|x| *x *= scale);
}

/// `rows` (n tokens of `width` values) pooled into one vector, or all of
/// them with Pooling::None.
pub fn pool(rows: &[f32], width: usize, pooling: Pooling) -> Vec<f32> {
    let n = rows.len() / width;
    match pooling {
        Pooling::None => rows.to_vec(),
        Pooling::Cls => rows[..width].to_vec(),
        Pooling::Last => rows[(n - 1) * width..].to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f64; width];
            for row in rows.chunks_exact(width) {
                sum.iter_mut().zip(row).for_each(|(s, &x)| *s += f64::from(x));
            }
            sum.into_iter().map(|s| (s / n as f64) as f32).collect()
        }
    }
}

impl Inference {
    /// The model's own pooling (`ARCH.pooling_type`), if it names one.
    pub fn model_pooling(&self) -> Option<Pooling> {
        self.runner.model().pooling_type().and_then(|v| u64::try_from(v).ok()).and_then(Pooling::from_gguf)
    }

    /// The embedding of each sequence: pooled (n_embd values), or with
    /// Pooling::None every token's (n_tokens × n_embd, flat); each vector
    /// normalised to unit length when asked.
    pub fn embed(
        &self,
        sequences: &[Vec<i32>],
        pooling: Pooling,
        unit_length: bool,
        ov: &Overrides,
    ) -> Result<Vec<Vec<f32>>> {
        if sequences.is_empty() {
            return Err(Error::Argument("no texts given (the list is empty)".into()));
        }
        let width = self.runner.hparams().n_embd;
        let hidden = self.runner.hidden_states(sequences, None, ov)?;
        let mut out: Vec<Vec<f32>> = hidden.iter().map(|rows| pool(rows, width, pooling)).collect();
        if unit_length {
            for v in out.iter_mut() {
                v.chunks_exact_mut(width).for_each(normalize);
            }
        }
        Ok(out)
    }
}

impl Inference {
    /// The relevance of each document to the query, from an encoder's
    /// classification head (llama.cpp's rank pooling: the head on the first
    /// token's final state). Each pair is tokenized as llama-embedding's
    /// `--pooling rank` does (for BERT: [CLS] query [SEP] document [SEP]);
    /// special-token texts in the query and documents are not parsed.
    /// Errors: no documents, an empty text, a model without a
    /// classification head.
    pub fn rerank(&self, query: &[u8], documents: &[&[u8]], ov: &Overrides) -> Result<Vec<f32>> {
        if documents.is_empty() {
            return Err(Error::Argument("documents is empty: give at least one document to rank".into()));
        }
        let vocab = self.runner.model().vocab()?;
        let plain = |text: &[u8], add_bos: bool, add_eos: bool| {
            vocab.encode_bytes(text, EncodeOptions { add_bos, add_eos, parse_special: false })
        };
        let first = plain(query, vocab.add_bos_default(), false);
        let pairs = documents
            .iter()
            .map(|doc| {
                let mut tokens = first.clone();
                tokens.extend(vocab.closing_id());
                tokens.extend(plain(doc, false, vocab.add_eos_default()));
                tokens
            })
            .collect::<Vec<_>>();
        let rows = self.runner.rows_of_sequences(&pairs, Head::Rank, None, ov)?;
        Ok(rows.iter().map(|r| r[0]).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_picks_and_averages_rows() {
        let rows = [1.0f32, 2.0, 3.0, 4.0, 5.0, 9.0];
        assert_eq!(pool(&rows, 2, Pooling::Cls), vec![1.0, 2.0]);
        assert_eq!(pool(&rows, 2, Pooling::Last), vec![5.0, 9.0]);
        assert_eq!(pool(&rows, 2, Pooling::Mean), vec![3.0, 5.0]);
        assert_eq!(pool(&rows, 2, Pooling::None), rows.to_vec());
    }

    #[test]
    fn normalize_gives_unit_length_and_keeps_zero() {
        let mut v = [3.0f32, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0f32; 3];
        normalize(&mut z);
        assert_eq!(z, [0.0; 3]);
    }

    #[test]
    fn pooling_names_round_trip_and_bad_names_say_the_valid_ones() {
        for name in ["none", "mean", "cls", "last"] {
            assert!(Pooling::from_name(name).is_ok());
        }
        let err = Pooling::from_name("max").unwrap_err().to_string();
        assert!(err.contains("none, mean, cls, last") && err.contains("'max'"), "{err}");
    }
}
