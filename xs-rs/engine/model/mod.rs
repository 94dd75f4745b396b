//! A model file and what it describes: the GGUF reader and writer, the
//! architecture table ([`arch`]: one row of building blocks per
//! architecture) and hyperparameters, RoPE settings, the weights loaded onto
//! devices, the tokenizer, and the checks of a file against them. Imports
//! only `ggml`.
pub mod arch;
pub mod gguf;
pub mod gguf_value;
pub mod gguf_writer;
mod loaded;
pub mod rope;
pub mod safetensors;
pub mod tokenizer;
pub mod validate;
pub mod weight_table;
pub mod weights;

pub use loaded::Model;
