//! Calling perl code from Rust (under G_EVAL, so a `die` comes back as a value).
use super::ffi::{self, Sv};
use super::Perl;

/// Calls `cb` with `args` in scalar context. Ok(result) is mortal; Err holds
/// the exception (mortal) exactly as thrown, to be rethrown after cleanup.
pub fn call_callback(perl: Perl, cb: Sv, args: &[Sv]) -> Result<Sv, Sv> {
    let mut err = Sv(std::ptr::null_mut());
    // SAFETY: runs on the interpreter's own thread; the shim wraps call_sv in
    // ENTER/SAVETMPS and G_EVAL, so perl never longjmps through this frame.
    unsafe {
        let ret = ffi::lugh_call_sv(perl.0, cb, args.as_ptr(), args.len() as i32, &mut err);
        if !err.0.is_null() {
            return Err(ffi::lugh_sv_mortal(perl.0, err));
        }
        Ok(if ret.0.is_null() { perl.undef() } else { ffi::lugh_sv_mortal(perl.0, ret) })
    }
}
