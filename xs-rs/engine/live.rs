//! A count of the engine's heavy values alive now (models and sessions), so
//! that tests can see a leak that no perl object shows: an `Arc` cloned in a
//! native frame and never dropped keeps a session, its threads and its
//! buffers alive after perl has freed every object.
use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A field that counts its owner as alive until the owner is dropped.
#[derive(Debug)]
pub struct Live(());

impl Live {
    pub fn new() -> Live {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Live(())
    }
}

impl Default for Live {
    fn default() -> Live {
        Live::new()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many models and sessions are alive.
pub fn count() -> usize {
    LIVE.load(Ordering::Relaxed)
}
