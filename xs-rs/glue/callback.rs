//! Calling perl code from Rust (under G_EVAL, so a `die` comes back as a value).
use super::ffi::{self, Sv};
use super::Perl;

/// Calls `cb` with `args` in scalar context. Ok(result) is mortal; Err holds
/// the exception (mortal) exactly as thrown, to be rethrown after cleanup.
pub fn call_callback(perl: Perl, cb: Sv, args: &[Sv]) -> Result<Sv, Sv> {
    let mut err = Sv(std::ptr::null_mut());
    // SAFETY: runs on the interpreter's own thread; the shim wraps call_sv in
    // ENTER/SAVETMPS, a null block and G_EVAL, so perl never longjmps through
    // this frame.
    unsafe {
        let ret = ffi::lugh_call_sv(perl.0, cb, args.as_ptr(), args.len() as i32, &mut err);
        if !err.0.is_null() {
            return Err(loop_control_explained(perl, ffi::lugh_sv_mortal(perl.0, err)));
        }
        Ok(if ret.0.is_null() { perl.undef() } else { ffi::lugh_sv_mortal(perl.0, ret) })
    }
}

/// Calls `cb` and tests its result for truth. A result whose `bool`
/// overload dies fails like a die in the callback: Err(the exception).
pub fn call_callback_truth(perl: Perl, cb: Sv, args: &[Sv]) -> Result<bool, Sv> {
    let ret = call_callback(perl, cb, args)?;
    let truth = perl.is_true(ret);
    match perl.take_error() {
        Some(err) => Err(err),
        None => Ok(truth),
    }
}

impl Perl {
    /// Runs the `%SIG` handlers of signals that arrived while native code ran
    /// (perl defers them to a safe point, and a long native call has none),
    /// so that Ctrl-C reaches a handler within a token. Err(the exception)
    /// when a handler dies. Costs one load when nothing is pending.
    pub fn despatch_signals(self) -> Result<(), Sv> {
        // SAFETY: reads one interpreter variable on the interpreter's thread.
        if unsafe { ffi::lugh_signal_pending(self.0) } == 0 {
            return Ok(());
        }
        call_callback(self, self.str("Lugh::_despatch_signals"), &[]).map(|_| ())
    }

    /// Perl's `warn`, with the caller's file and line (through Lugh::_warn),
    /// under G_EVAL: Err(the exception) when a __WARN__ handler dies.
    pub fn warn(self, message: &str) -> Result<(), Sv> {
        call_callback(self, self.str("Lugh::_warn"), &[self.str(message)]).map(|_| ())
    }
}

/// `last`, `next` or `redo` in a callback meets the shim's null block and
/// dies with perl's "Can't \"last\" outside a loop block"; say what happened
/// and what to do instead.
fn loop_control_explained(perl: Perl, err: Sv) -> Sv {
    if perl.ref_kind(err) != 0 {
        return err;
    }
    let text = perl.text(err);
    let keyword = ["last", "next", "redo"].into_iter().find(|k| {
        text.starts_with(&format!("Can't \"{k}\" outside a loop block"))
            || text.starts_with(&format!("Label not found for \"{k} "))
    });
    match keyword {
        Some(k) => {
            let place = text.find(" at ").map_or("", |i| text[i..].trim_end().trim_end_matches('.'));
            perl.str(&format!(
                "'{k}' cannot leave a Lugh callback (it would jump over native code): return from the callback \
                 instead (a true return value stops generation){place}.\n"
            ))
        }
        None => err,
    }
}
