//! The engine: everything Lugh computes, with no knowledge of perl.
pub mod alloc_count;
pub mod arch;
pub mod backend;
pub mod chat_template;
pub mod compute;
pub mod cpu;
pub mod cpu_budget;
pub mod error;
pub mod generate;
pub mod ggml_ops;
pub mod ggml_runtime;
pub mod ggml_sys;
pub mod gguf;
pub mod graph;
pub mod inference;
pub mod kv_cache;
pub mod live;
pub mod logits;
pub mod model;
pub mod profile;
pub mod sampler;
pub mod session;
pub mod text_stream;
pub mod tokenizer;
pub mod validate;
pub mod weights;

pub use error::{Error, Result};
