//! One forward pass of a model: the graph builder ([`graph`]) and the inputs
//! it reads, the KV cache and its file format, LoRA adapters on the
//! projections, step profiles, and [`runner::Runner`], which computes a step
//! on a session's devices. Imports `ggml` and `model`; never `generate`,
//! `tensor` or `train`.
pub mod compute;
pub mod graph;
pub mod inputs;
pub mod kv_cache;
pub mod kv_file;
pub mod lora;
pub mod profile;
pub mod runner;
pub mod settings;
