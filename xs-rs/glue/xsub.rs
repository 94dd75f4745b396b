//! Running one XSUB: argument access, return values, and the error path.
use super::ffi::{self, Cv, Interp, Sv};
use crate::engine::Error;
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What went wrong in an XSUB: an engine error becomes a croak naming the
/// method; a perl exception (from a callback) is rethrown unchanged.
pub enum XsError {
    Lugh(Error),
    Perl(Sv),
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
    List(Vec<Sv>),
    /// A long list of numbers (logits), pushed without one Sv per element in Rust.
    Floats(Vec<f32>),
}

/// The arguments of the running XSUB.
pub struct Args {
    pub p: Interp,
    cv: Cv,
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

    pub fn perl(&self) -> super::Perl {
        super::Perl(self.p)
    }

    /// Croaks with perl's "Usage: NAME(PARAMS)" unless the count is in range.
    /// Called first in an XSUB, while nothing Rust-owned is alive.
    pub fn expect(&self, min: usize, max: usize, params: &'static CStr) {
        if self.len() < min || self.len() > max {
            // SAFETY: no Rust value with a destructor is live in this frame.
            unsafe { ffi::lugh_croak_usage(self.p, self.cv, params.as_ptr()) }
        }
    }
}

/// Runs an XSUB body. `method` names the public method in error messages.
///
/// # Safety
/// Must be called directly from an `extern "C"` XSUB entry with perl's own
/// interpreter and CV.
pub unsafe fn xsub(p: Interp, cv: Cv, method: &str, body: impl FnOnce(&Args) -> XsResult) {
    let mut items = 0;
    let ax = ffi::lugh_xs_start(p, &mut items);
    let args = Args { p, cv, ax, items };
    let failure: Sv = match catch_unwind(AssertUnwindSafe(|| body(&args))) {
        Ok(Ok(ret)) => {
            push_return(p, ax, ret);
            return;
        }
        Ok(Err(XsError::Perl(sv))) => {
            // SAFETY: every Rust value of the body has been dropped.
            ffi::lugh_croak_sv(p, sv)
        }
        Ok(Err(XsError::Lugh(e))) => super::Perl(p).str(&format!("{method}: {e}")),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            super::Perl(p).str(&format!("{method}: internal error (Rust panic: {what})"))
        }
    };
    // The message now lives in a mortal SV; nothing Rust-owned is left.
    ffi::lugh_croak_msg(p, failure)
}

unsafe fn push_return(p: Interp, ax: i32, ret: Ret) {
    match ret {
        Ret::Empty => ffi::lugh_xs_return(p, ax, std::ptr::null(), 0),
        Ret::One(sv) => ffi::lugh_xs_return(p, ax, &sv, 1),
        Ret::List(list) => ffi::lugh_xs_return(p, ax, list.as_ptr(), list.len() as i32),
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
