//! Inference sessions: the contract between the forward pass (graph, weights,
//! KV cache on a ggml backend) and the perl-facing layer (Lugh::Inference).
//!
//! CONTRACT FIRST: the signatures below are what subs/inference.rs codes
//! against; the bodies are filled in by the forward-pass work (issue #4).
#![allow(dead_code, unused_variables)]
use super::model::Model;
use super::{Error, Result};
use std::sync::Arc;

/// Flash attention: `Auto` resolves as llama.cpp does (on for the CPU backend
/// when the model's head sizes allow it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashAttn {
    Auto,
    Enabled,
    Disabled,
}

/// Which logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Only the last position: one vector of n_vocab.
    Last,
    /// Every position of the new tokens.
    All,
}

/// Settings of a session, as given by the caller (None = the default).
#[derive(Clone, Debug, Default)]
pub struct InferenceOptions {
    /// A backend name from the registry; None or "auto" = the best available.
    pub backend: Option<String>,
    /// Default: the number of physical cores.
    pub n_threads: Option<usize>,
    /// Default: min(model's training context, 4096).
    pub n_ctx: Option<usize>,
    /// Default: Auto.
    pub flash_attn: Option<FlashAttn>,
    /// Default: 512 (prompt tokens per graph evaluation).
    pub n_batch: Option<usize>,
}

/// One inference session over a model on one backend. Shareable between
/// threads of Rust (`Send + Sync`); mutable state lives in KvCache/ComputePool.
pub struct Inference {
    model: Arc<Model>,
}

impl Inference {
    /// Checks the architecture (unsupported → Error naming it), resolves the
    /// options and the backend (unknown/unavailable → Error listing those
    /// available), and uploads or maps the weights.
    pub fn new(model: Arc<Model>, options: InferenceOptions) -> Result<Inference> {
        Err(Error::Backend("inference is not built yet".into()))
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
    pub fn backend_name(&self) -> &str {
        todo!()
    }
    pub fn n_threads(&self) -> usize {
        todo!()
    }
    pub fn n_ctx(&self) -> usize {
        todo!()
    }
    pub fn n_batch(&self) -> usize {
        todo!()
    }
    /// The resolved flash-attention setting.
    pub fn flash_attn(&self) -> bool {
        todo!()
    }
    pub fn n_vocab(&self) -> usize {
        todo!()
    }
    pub fn n_layer(&self) -> usize {
        todo!()
    }

    /// An empty KV cache of n_ctx positions (f16 K/V, like llama.cpp).
    pub fn new_cache(&self) -> Result<KvCache> {
        todo!()
    }

    /// A reusable compute allocation for forward passes.
    pub fn new_pool(&self) -> Result<ComputePool> {
        todo!()
    }

    /// Appends `tokens` to `cache` and returns the logits (Output::Last: one
    /// vector; Output::All: one per token). Validates token ids (Error with
    /// position, id and range) and capacity (Error before computing) first;
    /// an empty token list is an error. Processes the tokens in chunks of
    /// n_batch. With a pool, its allocation is reused.
    pub fn forward(
        &self,
        cache: &mut KvCache,
        tokens: &[i32],
        output: Output,
        pool: Option<&mut ComputePool>,
    ) -> Result<Vec<Vec<f32>>> {
        todo!()
    }

    /// Evaluates several sequences together in one graph per step, each masked
    /// to its own tokens, each appended to its own cache; returns the
    /// last-position logits of each sequence.
    pub fn forward_batch(
        &self,
        caches: &mut [KvCache],
        sequences: &[Vec<i32>],
        pool: Option<&mut ComputePool>,
    ) -> Result<Vec<Vec<f32>>> {
        todo!()
    }
}

/// The K/V cache of one sequence.
pub struct KvCache {}

impl KvCache {
    pub fn n_cached(&self) -> usize {
        todo!()
    }
    pub fn n_ctx(&self) -> usize {
        todo!()
    }
    pub fn n_layer(&self) -> usize {
        todo!()
    }
    pub fn clear(&mut self) {
        todo!()
    }
    /// Rolls back to the first `n` positions (n <= n_cached, else Error).
    pub fn resize(&mut self, n: usize) -> Result<()> {
        todo!()
    }
}

/// A compute allocation kept between forward passes.
pub struct ComputePool {}

impl ComputePool {
    /// Frees the allocation; the next forward makes a new one.
    pub fn reset(&mut self) {
        todo!()
    }
    pub fn backend_name(&self) -> &str {
        todo!()
    }
    /// How many compute buffers this pool has allocated so far (tests use it
    /// to prove that reuse happens).
    pub fn n_allocations(&self) -> usize {
        todo!()
    }
}
