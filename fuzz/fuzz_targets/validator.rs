//! The semantic validator: architecture row, hyperparameters, tensor types
//! and shapes, weight loading, then a 3-token forward whose logits must be
//! finite-or-rejected, never a ggml abort or a fault.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lugh::engine::forward::runner::{FlashAttn, InferenceOptions, Output, Overrides, Runner};
mod common;

fuzz_target!(|data: &[u8]| {
    let model = match common::open_model(data) {
        Ok(m) => m,
        Err(e) => return common::check_error(&e),
    };
    let options = InferenceOptions {
        n_threads: Some(1),
        n_ctx: Some(32),
        flash_attn: Some(FlashAttn::Disabled),
        ..Default::default()
    };
    let inference = match Runner::new(model, options) {
        Ok(i) => i,
        Err(e) => return common::check_error(&e),
    };
    let mut cache = inference.new_cache().expect("a 32-token cache");
    let n_vocab = inference.n_vocab() as i32;
    let tokens: Vec<i32> = [1, 2, 3].iter().map(|t| t % n_vocab).collect();
    if let Ok(rows) = inference.forward(&mut cache, &tokens, Output::Last, None, &Overrides::NONE) {
        assert_eq!(rows[0].len(), n_vocab as usize);
    }
});
