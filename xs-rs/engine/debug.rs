//! LUGH_DEBUG: when set to a true value, the engine says what it does (one
//! line per model load, weight placement, session, forward and generation)
//! on standard error, and ggml's own log goes there too.
use std::sync::OnceLock;

/// Whether LUGH_DEBUG is set to something other than "", "0".
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("LUGH_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// `eprintln!` prefixed with "Lugh: ", only under LUGH_DEBUG.
#[macro_export]
macro_rules! debug_log {
    ($($arg:tt)*) => {
        if $crate::engine::debug::enabled() {
            eprintln!("Lugh: {}", format_args!($($arg)*));
        }
    };
}

/// Bytes as MiB, for the log.
pub fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
