//! Training: autograd over tensors, optimizers, the training pass through a
//! model's forward graph, trainable LoRA adapters and random models to train.
//! Builds on every other layer; nothing imports it but the perl subs.
pub mod autograd;
pub mod lora;
pub mod model_create;
pub mod optimizer;
pub mod pass;
