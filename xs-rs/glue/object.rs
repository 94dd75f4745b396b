//! Lugh objects: a blessed hash whose ext magic holds a boxed `Arc<T>`.
//! No registries and no ids: the magic's free hook drops the Arc when perl
//! frees the hash, and a hash without the magic (a copy, a hand-blessed hash)
//! is simply not an object.
use super::ffi::{self, Sv};
use super::Perl;
use crate::engine::Error;
use std::any::Any;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many Lugh objects perl holds now (for leak tests: `Lugh::_live_objects`).
pub static LIVE_OBJECTS: AtomicUsize = AtomicUsize::new(0);

type Payload = Box<dyn Any + Send + Sync>;

/// Wraps `value` as a new perl object blessed into `class`.
pub fn new_object<T: Send + Sync + 'static>(perl: Perl, class: &str, value: Arc<T>) -> Sv {
    let payload: Box<Payload> = Box::new(Box::new(value));
    let class = CString::new(class).expect("class names have no NUL");
    LIVE_OBJECTS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: ownership of the payload moves to the magic; free_object takes it back.
    unsafe { ffi::lugh_new_object(perl.0, class.as_ptr(), Box::into_raw(payload).cast()) }
}

/// The object's `Arc<T>` (a new strong reference, so the value stays alive
/// even if perl code frees the object while we use it, e.g. in a callback).
pub fn object_arc<T: Send + Sync + 'static>(perl: Perl, sv: Sv, class: &str) -> Result<Arc<T>, Error> {
    // SAFETY: the shim checks the magic's vtable before returning a payload.
    let raw = unsafe { ffi::lugh_object_payload(perl.0, sv) };
    perl.check(&format!("the {class} object"))?;
    if raw.is_null() {
        return Err(Error::Argument(format!("not a {class} object (got {})", perl.describe(sv))));
    }
    // SAFETY: payloads are only ever made by new_object.
    let payload = unsafe { &*(raw as *const Payload) };
    payload
        .downcast_ref::<Arc<T>>()
        .cloned()
        .ok_or_else(|| Error::Argument(format!("not a {class} object (got {})", perl.describe(sv))))
}

/// The magic's free hook: drops the payload.
///
/// # Safety
/// Called by perl exactly once per payload made by new_object.
pub unsafe extern "C" fn free_object(raw: *mut c_void) {
    LIVE_OBJECTS.fetch_sub(1, Ordering::Relaxed);
    // Dropping must never unwind into perl.
    let _ = std::panic::catch_unwind(|| drop(Box::from_raw(raw as *mut Payload)));
}
