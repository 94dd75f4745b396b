//! Running one XSUB: argument access, return values, and the error path.
use super::ffi::{self, Cv, Interp, Sv};
use crate::engine::Error;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What went wrong in an XSUB: an engine error becomes a croak naming the
/// method; a perl exception (from a callback) is rethrown unchanged.
pub enum XsError {
    Lugh(Error),
    Perl(Sv),
    /// A whole message, croaked as it is: a usage error, or an error of an
    /// accessor that names its public method itself (see [`as_method`]).
    Message(String),
}

/// Runs `f` and prefixes its error with `method`: for XSUBs that serve
/// several public methods, named by an argument (one accessor sub per table).
pub fn as_method<T>(method: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, XsError> {
    f().map_err(|e| XsError::Message(format!("{method}: {e}")))
}

impl From<Error> for XsError {
    fn from(e: Error) -> Self {
        XsError::Lugh(e)
    }
}

pub type XsResult = Result<Ret, XsError>;

/// The values an XSUB returns.
pub enum Ret {
    Empty,
    One(Sv),
    /// A list; in scalar context, an array reference to it.
    List(Vec<Sv>),
    /// A long list (an array reference in scalar context) of numbers (logits), pushed without one Sv per element in Rust.
    Floats(Vec<f32>),
}

/// The arguments of the running XSUB.
pub struct Args {
    pub p: Interp,
    method: &'static str,
    ax: i32,
    items: i32,
}

impl Args {
    pub fn len(&self) -> usize {
        self.items as usize
    }

    pub fn is_empty(&self) -> bool {
        self.items == 0
    }

    /// Argument `i`, or undef when the caller passed fewer.
    pub fn get(&self, i: usize) -> Sv {
        if i < self.len() {
            // SAFETY: i < items, so the slot is on this XSUB's part of the stack.
            unsafe { ffi::lugh_st(self.p, self.ax, i as i32) }
        } else {
            super::Perl(self.p).undef()
        }
    }

    /// The arguments from `first` on (name => value pairs, usually).
    pub fn rest(&self, first: usize) -> Vec<Sv> {
        (first..self.len()).map(|i| self.get(i)).collect()
    }

    pub fn perl(&self) -> super::Perl {
        super::Perl(self.p)
    }

    /// The public method this XSUB serves, for messages.
    pub fn method(&self) -> &'static str {
        self.method
    }

    /// Err("Usage: METHOD(PARAMS)") unless the argument count is in range.
    pub fn expect(&self, min: usize, max: usize, params: &str) -> Result<(), XsError> {
        if self.len() < min || self.len() > max {
            return Err(XsError::Message(format!("Usage: {}({params})", self.method)));
        }
        Ok(())
    }
}

/// Runs an XSUB body. `method` names the public method in error messages.
///
/// # Safety
/// Must be called directly from an `extern "C"` XSUB entry with perl's own
/// interpreter and CV.
pub unsafe fn xsub(p: Interp, _cv: Cv, method: &'static str, body: impl FnOnce(&Args) -> XsResult) {
    let mut items = 0;
    let ax = ffi::lugh_xs_start(p, &mut items);
    let args = Args { p, method, ax, items };
    let perl = super::Perl(p);
    // A call from a callback keeps its caller's pending read error apart.
    let outer_error = perl.take_error();
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&args)));
    // A read that died but was not checked still fails the call: its value
    // was a stand-in.
    let unchecked = perl.check("an argument");
    ffi::lugh_restore_error(p, outer_error.unwrap_or(Sv(std::ptr::null_mut())));
    let outcome = match (outcome, unchecked) {
        (Ok(Ok(_)), Err(e)) => Ok(Err(XsError::Lugh(e))),
        (outcome, _) => outcome,
    };
    let failure: Sv = match outcome {
        Ok(Ok(ret)) => {
            push_return(p, ax, ret);
            return;
        }
        Ok(Err(XsError::Perl(sv))) => {
            // SAFETY: every Rust value of the body has been dropped.
            ffi::lugh_croak_sv(p, sv)
        }
        Ok(Err(XsError::Message(usage))) => perl.str(&usage),
        Ok(Err(XsError::Lugh(e))) => perl.str(&format!("{method}: {e}")),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            perl.str(&format!("{method}: internal error (Rust panic: {what})"))
        }
    };
    // The message now lives in a mortal SV; nothing Rust-owned is left.
    ffi::lugh_croak_msg(p, failure)
}

unsafe fn push_return(p: Interp, ax: i32, ret: Ret) {
    match ret {
        Ret::Empty => ffi::lugh_xs_return(p, ax, std::ptr::null(), 0, 0),
        Ret::One(sv) => ffi::lugh_xs_return(p, ax, &sv, 1, 0),
        Ret::List(list) => ffi::lugh_xs_return(p, ax, list.as_ptr(), list.len() as i32, 1),
        Ret::Floats(v) => ffi::lugh_xs_return_floats(p, ax, v.as_ptr(), v.len()),
    }
}

/// Registers an XSUB under its perl name.
///
/// # Safety
/// Only during boot, with perl's interpreter.
pub unsafe fn register(p: Interp, name: &str, f: ffi::RustXsub) {
    let name = CString::new(name).expect("XSUB names have no NUL");
    ffi::lugh_newxs(p, name.as_ptr(), f);
}
