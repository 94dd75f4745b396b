//! The engine: everything Lugh computes, with no knowledge of perl (the
//! perl side is `crate::glue` and `crate::subs`). It is tested with
//! `cargo test`.
//!
//! # The layers, and which way the arrows go
//!
//! Each folder owns one subject and may import only from the folders listed
//! before it (and from the small modules of this folder: errors, debug
//! output, live-object counts, hashing, random numbers):
//!
//! 1. [`ggml`]: ggml itself: its FFI, ops on tensors, contexts, buffers,
//!    backends and devices, CPU features and thread budgets, RPC servers,
//!    quantization types.
//! 2. [`model`]: a GGUF model file and what it describes: the reader and
//!    writer, the architecture table and hyperparameters, RoPE settings,
//!    the weights placed on devices, the tokenizer.
//! 3. [`forward`]: one forward pass: the graph builder and its inputs, the
//!    KV cache (and its file format), LoRA adapters applied to the
//!    projections, the runner that computes a step.
//! 4. [`generate`]: what is done with the logits: sampling, generation
//!    loops, speculative decoding, streaming text, chat templates,
//!    embeddings and scores, and [`generate::inference::Inference`], the
//!    Rust side of `Lugh::Inference`.
//! 5. [`tensor`]: the Lugh::Tensor/Ops/Graph API: user-made ggml contexts,
//!    tensors and graphs (builds on `ggml` only).
//! 6. [`train`]: autograd, optimizers, and training a model or an adapter
//!    through the forward graph. Training builds on the forward path; nothing
//!    in `ggml`, `model`, `forward` or `generate` imports it.
//!
//! A test module may drive a higher layer for an end-to-end check (the KV
//! cache file's tests run a whole session); code may not.
pub mod alloc_count;
pub mod debug;
pub mod error;
pub mod live;
pub mod rng;
pub mod xxhash;

pub mod forward;
pub mod generate;
pub mod ggml;
pub mod model;
pub mod tensor;
pub mod train;

pub use error::{Error, Result};
