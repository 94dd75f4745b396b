//! Lugh.so: LLM inference for Perl on ggml.
//!
//! Three layers, kept apart:
//! - `engine`: models, tokenizer, graphs, sampling; knows nothing of perl and
//!   is tested with `cargo test`;
//! - `glue`: the only code that touches perl's API (via the C shim);
//! - `subs`: one file per perl package, each XSUB reading its arguments,
//!   calling the engine and returning perl values.
pub mod engine;

#[global_allocator]
static ALLOCATOR: engine::alloc_count::CountingAllocator = engine::alloc_count::CountingAllocator;

#[cfg(not(any(test, feature = "fuzzing")))]
pub mod glue;
#[cfg(not(any(test, feature = "fuzzing")))]
mod subs;

/// The entry point DynaLoader calls (`bootstrap Lugh`). It is the only
/// symbol the library exports.
///
/// # Safety
/// Called by perl with its interpreter and the bootstrap CV.
#[cfg(all(not(any(test, feature = "fuzzing")), perl_multiplicity))]
#[no_mangle]
pub unsafe extern "C" fn boot_Lugh(p: glue::Interp, cv: glue::Cv) {
    subs::boot(p, cv)
}

/// The entry point DynaLoader calls on an unthreaded perl.
///
/// # Safety
/// Called by perl with the bootstrap CV.
#[cfg(all(not(any(test, feature = "fuzzing")), not(perl_multiplicity)))]
#[no_mangle]
pub unsafe extern "C" fn boot_Lugh(cv: glue::Cv) {
    subs::boot(std::ptr::null_mut(), cv)
}
