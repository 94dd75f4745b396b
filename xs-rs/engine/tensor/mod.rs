//! The Lugh::Tensor, Lugh::Ops and Lugh::Graph API: contexts a program makes,
//! the tensors in them, ops on them and graphs computed over them. Imports
//! only `ggml`.
mod context;
pub mod graph;
pub mod ops;

pub use context::{check_dims, TensorContext, TensorHandle, Values};
pub(crate) use context::{f32_values, holds_values, i32_values, join, lock, mark_computed};
