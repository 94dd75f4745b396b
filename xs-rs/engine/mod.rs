//! The engine: everything Lugh computes, with no knowledge of perl.
pub mod backend;
pub mod error;
pub mod generate;
pub mod ggml_sys;
pub mod gguf;
pub mod inference;
pub mod model;
pub mod sampler;
pub mod session;
pub mod tokenizer;

pub use error::{Error, Result};
