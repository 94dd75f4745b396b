//! Lugh.so: LLM inference for Perl on ggml.
//!
//! Three layers, kept apart:
//! - `engine`: models, tokenizer, graphs, sampling; knows nothing of perl and
//!   is tested with `cargo test`;
//! - `glue`: the only code that touches perl's API (via the C shim);
//! - `subs`: one file per perl package, each XSUB reading its arguments,
//!   calling the engine and returning perl values.

// Unused code is reported by the full build, whose XS subs are the engine's
// users; test and fuzz builds leave them out.
#![cfg_attr(any(test, feature = "fuzzing"), allow(dead_code))]
// Private, so that the compiler reports what nothing uses; public only for
// the fuzz targets, which drive the engine directly.
#[cfg(feature = "fuzzing")]
pub mod engine;
#[cfg(not(feature = "fuzzing"))]
mod engine;

#[global_allocator]
static ALLOCATOR: engine::alloc_count::CountingAllocator = engine::alloc_count::CountingAllocator;

// `lugh serve`: a layer above the engine (it imports the engine, not perl).
#[cfg(all(feature = "server", not(feature = "fuzzing")))]
mod serve;

#[cfg(not(any(test, feature = "fuzzing")))]
mod glue;
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
