//! ggml: the FFI declarations and their safe wrappers. Owns ggml contexts,
//! tensors and ops, backends, buffers and devices, the placement of layers
//! over devices, CPU features and the process's thread budget, RPC servers
//! and quantization types. Imports nothing of the engine but its errors and
//! debug output.
pub mod backend;
pub mod cpu;
pub mod cpu_budget;
pub mod ops;
pub mod placement;
pub mod quant;
pub mod rpc;
pub mod runtime;
pub mod sys;
