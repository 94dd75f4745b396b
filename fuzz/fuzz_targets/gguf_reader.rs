//! The GGUF reader and the metadata checks of Model::open on any bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    match common::open_model(data) {
        Ok(model) => {
            // The reader's accessors on whatever it accepted.
            let _ = (model.architecture(), model.n_layer(), model.n_embd(), model.n_head(), model.n_ctx_train());
            for t in &model.gguf.tensors {
                let _ = (t.n_elements(), t.ne(), model.mapped_data(t).map(<[u8]>::len));
            }
        }
        Err(e) => common::check_error(&e),
    }
});
