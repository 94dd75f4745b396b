//! Trainable LoRA adapters: made by `Lugh::LoRA->create` for a model, their
//! A and B matrices autograd variables that the optimizer changes, used by
//! the forward path like loaded adapters (`forward::lora`), and saved as
//! llama.cpp reads adapters.
use crate::engine::forward::lora::{LoraAdapter, LoraPair};
use crate::engine::ggml::ops::{Tensor, GGML_TYPE_F32};
use crate::engine::model::gguf::Value;
use crate::engine::model::gguf_writer::GgufWriter;
use crate::engine::model::Model;
use crate::engine::rng::rng_for_call;
use crate::engine::tensor::TensorContext;
use crate::engine::train::autograd::Variable;
use crate::engine::{Error, Result};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A trainable adapter's matrices of one base weight: (its name, A, B).
pub type TrainablePair = (String, Arc<Variable>, Arc<Variable>);

/// What `LoraAdapter::create` makes.
pub struct LoraSpec<'a> {
    pub rank: usize,
    pub alpha: f32,
    pub scale: f32,
    /// Weight kinds (attn_q, ffn_down, output, ...) or full weight names.
    pub targets: &'a [String],
    pub seed: Option<u64>,
}

/// The largest rank `create` makes (Lugh 0.12's bound).
const MAX_RANK: usize = 256;

/// Sorts weight names by layer number, then name ("blk.10" after "blk.9",
/// the weights outside the blocks last).
fn weight_order(name: &str) -> (usize, String) {
    let layer = name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok());
    (layer.unwrap_or(usize::MAX), name.to_string())
}

/// The values of an f32 adapter tensor (every adapter lives in host memory:
/// an arena, or a CPU buffer).
fn tensor_f32_values(t: Tensor) -> Result<Vec<f32>> {
    if t.type_id() == GGML_TYPE_F32 {
        let mut bytes = vec![0u8; t.nbytes()];
        t.read_data(0, &mut bytes);
        return Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
    }
    Err(Error::Argument(format!("cannot save a {} LoRA tensor (only f32 ones are written)", t.type_name())))
}

/// What training adds to a LoRA adapter: making one, its variables, saving it.
pub trait TrainableAdapter: Sized {
    /// A new adapter to train for `model` (see the implementation).
    fn create(model: &Model, spec: &LoraSpec) -> Result<Self>;
    /// The trainable tensors of an adapter made by `create`: (base weight
    /// name, A, B) in creation order; None for a loaded one.
    fn trainable(&self) -> Option<&[TrainablePair]>;
    /// Writes an adapter made by `create` as llama.cpp reads adapters.
    fn save(&self, path: &Path) -> Result<()>;
}

impl TrainableAdapter for LoraAdapter {
    /// A new adapter to train, for `model`: for each 2-D base weight the
    /// targets name (a kind such as attn_q matches it in every layer), A
    /// [n_in, rank] Kaiming-uniform and B [rank, n_out] zero, so it starts
    /// as no change. `path` names it until it is saved.
    fn create(model: &Model, spec: &LoraSpec) -> Result<LoraAdapter> {
        if !(1..=MAX_RANK).contains(&spec.rank) {
            return Err(Error::Argument(format!("the LoRA rank must be between 1 and {MAX_RANK}, got {}", spec.rank)));
        }
        if !spec.alpha.is_finite() || spec.alpha < 0.0 {
            return Err(Error::Argument(format!("the LoRA alpha must be a finite number >= 0, got {}", spec.alpha)));
        }
        let mut names = Vec::new();
        for target in spec.targets {
            let matches: Vec<&str> = model
                .gguf
                .tensors
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| {
                    *n == target
                        || n.strip_prefix("blk.")
                            .and_then(|r| r.split_once('.'))
                            .is_some_and(|(_, rest)| rest == format!("{target}.weight"))
                        || *n == format!("{target}.weight")
                })
                .collect();
            if matches.is_empty() {
                return Err(Error::Argument(format!(
                    "the LoRA target '{target}' matches no weight of '{}' (kinds are such as attn_q, attn_k, attn_v, \
                     attn_output, ffn_gate, ffn_up, ffn_down, output)",
                    model.path().display()
                )));
            }
            for name in matches {
                let info = model.gguf.tensor(name).expect("listed above");
                if info.shape.len() != 2 || name == "token_embd.weight" {
                    return Err(Error::Argument(format!(
                        "the LoRA target '{target}' names '{name}', which is not a projection LoRA can adapt"
                    )));
                }
                if !names.iter().any(|(n, _): &(String, [u64; 2])| n == name) {
                    names.push((name.to_string(), [info.shape[0], info.shape[1]]));
                }
            }
        }
        // in layer order, as 0.12 listed them
        names.sort_by_key(|(n, _)| weight_order(n));
        let rank = spec.rank as i64;
        let bytes: usize = names.iter().map(|(_, [n_in, n_out])| 4 * spec.rank * (*n_in + *n_out) as usize).sum();
        let ctx = TensorContext::new((bytes + names.len() * 2 * 1024 + 4096) as u64)?;
        let mut rng = rng_for_call(spec.seed);
        let mut pairs = HashMap::new();
        let mut params = Vec::new();
        for (name, [n_in, n_out]) in names {
            let a = Variable::leaf(&ctx, 0, &[n_in as i64, rank], true)?;
            let b = Variable::leaf(&ctx, 0, &[rank, n_out as i64], true)?;
            // Kaiming-uniform for a ReLU gain: U(-b, b), b = sqrt(6 / fan_in)
            let bound = (6.0 / n_in as f64).sqrt();
            let init: Vec<f64> = (0..n_in * rank as u64).map(|_| (2.0 * rng.next_f64() - 1.0) * bound).collect();
            a.value().set_values(&init)?;
            let (ta, tb) = (a.value().raw(), b.value().raw());
            ta.set_name(&format!("{name}.lora_a"));
            tb.set_name(&format!("{name}.lora_b"));
            pairs.insert(name.clone(), LoraPair { a: ta, b: tb, alpha: spec.alpha });
            params.push((name, a, b));
        }
        let adapter = LoraAdapter::owned(model, spec.alpha, pairs, Box::new(params))?;
        adapter.set_scale(spec.scale)?;
        Ok(adapter)
    }

    fn trainable(&self) -> Option<&[TrainablePair]> {
        self.owner().and_then(|(owner, _)| owner.downcast_ref::<Vec<TrainablePair>>()).map(Vec::as_slice)
    }

    /// Writes the adapter as llama.cpp reads adapters: general.type
    /// adapter, adapter.type lora, adapter.lora.alpha, and the f32 pairs
    /// `NAME.lora_a` [n_in, rank] and `NAME.lora_b` [rank, n_out].
    fn save(&self, path: &Path) -> Result<()> {
        let Some((_, architecture)) = self.owner() else {
            return Err(Error::Argument(format!(
                "only adapters made by Lugh::LoRA->create are saved (this one was read from '{}')",
                self.path.display()
            )));
        };
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::Str(architecture.to_string()));
        w.kv("general.type", Value::Str("adapter".into()));
        w.kv("adapter.type", Value::Str("lora".into()));
        w.kv("adapter.lora.alpha", Value::F32(self.alpha));
        let _guard = crate::engine::tensor::lock();
        let mut names = self.weight_names();
        names.sort_by_key(|n| weight_order(n));
        for name in names {
            let p = self.get(&name).expect("one of its weight names");
            for (t, suffix) in [(p.a, "lora_a"), (p.b, "lora_b")] {
                let ne = t.ne();
                let values = tensor_f32_values(t)?;
                w.tensor_f32(&format!("{name}.{suffix}"), &[ne[0] as u64, ne[1] as u64], &values);
            }
        }
        w.write(path)
    }
}
