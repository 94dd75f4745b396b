//! The XS subs, one file per perl package.
use crate::glue::{self, ffi, Cv, Interp};

mod autograd;
mod batch;
mod context;
mod generate_options;
mod grammar;
mod graph;
mod inference;
mod kv_cache;
mod logits;
mod lora;
mod lugh;
mod memory_pool;
mod model;
mod ops;
mod optimizer;
mod prompt;
mod quant;
mod rope;
mod sampling_options;
#[cfg(feature = "server")]
mod server;
mod speculative;
mod tensor;
mod tokenizer;
mod train;

/// Boot: the API-version handshake, then every package's XSUBs.
///
/// # Safety
/// Called once per interpreter from `boot_Lugh`.
pub unsafe fn boot(p: Interp, cv: Cv) {
    let ax = ffi::lugh_boot_start(p, cv);
    // Caught panics become perl exceptions; the default hook would also print them.
    std::panic::set_hook(Box::new(|_| {}));
    ffi::lugh_set_free_hook(glue::free_object);
    crate::engine::ggml::backend::init_logging();
    for table in [
        lugh::SUBS,
        model::SUBS,
        tokenizer::SUBS,
        tokenizer::decoder_subs::SUBS,
        inference::SUBS,
        kv_cache::SUBS,
        logits::SUBS,
        grammar::SUBS,
        lora::SUBS,
        memory_pool::SUBS,
        prompt::SUBS,
        rope::SUBS,
        speculative::SUBS,
        batch::SUBS,
        context::SUBS,
        tensor::SUBS,
        ops::SUBS,
        graph::SUBS,
        quant::SUBS,
        autograd::SUBS,
        autograd::ops::SUBS,
        optimizer::SUBS,
        train::SUBS,
        #[cfg(feature = "server")]
        server::SUBS,
    ] {
        for &(name, f) in table {
            glue::register(p, name, f);
        }
    }
    ffi::lugh_boot_end(p, ax);
}
