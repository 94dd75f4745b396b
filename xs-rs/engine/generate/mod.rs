//! What is done with a forward pass's logits: sampling, the generation loop,
//! speculative decoding, streaming text, chat templates, embeddings and
//! scores, and [`inference::Inference`], the Rust side of `Lugh::Inference`
//! (a runner with its scratch caches). Imports `ggml`, `model` and
//! `forward`; never `tensor` or `train`.
pub mod batch;
pub mod chat_template;
pub mod embedding;
pub mod generation;
pub mod grammar;
pub mod inference;
pub mod json_schema;
pub mod logits;
pub mod ngram;
pub mod sampler;
pub mod sampler_steps;
pub mod scoring;
pub mod speculative;
pub mod stl_sort;
pub mod text_stream;
