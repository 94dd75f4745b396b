//! The CPUs of the process, shared by every CPU graph computing at once.
//! ggml's CPU workers meet at a spinning barrier after every operation, so a
//! worker without a core of its own stalls the others for a scheduler time
//! slice at each of a token's hundreds of operations: two sessions of 2
//! threads computing together on 2 cores ran 6 times slower than one after
//! the other. A compute takes as many of the free CPUs as it asks for (at
//! least one, waiting while none is free) and gives them back when done.
use std::sync::{Condvar, Mutex, OnceLock};

/// The most threads a session may use (ggml's GGML_MAX_N_THREADS).
pub const MAX_THREADS: usize = 512;

/// The CPUs this process may run on (its affinity mask and cgroup quota).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(MAX_THREADS)
}

/// The number of physical cores (distinct core/package pairs in sysfs),
/// else the number of CPUs the process may use.
pub fn physical_cores() -> usize {
    let mut cores = std::collections::HashSet::new();
    if let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu") {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.strip_prefix("cpu").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
                continue;
            }
            let topo = entry.path().join("topology");
            let read = |f: &str| std::fs::read_to_string(topo.join(f)).ok().map(|s| s.trim().to_string());
            if let (Some(core), Some(pkg)) = (read("core_id"), read("physical_package_id")) {
                cores.insert((pkg, core));
            }
        }
    }
    let available = available_cpus();
    if cores.is_empty() {
        available
    } else {
        cores.len().min(available)
    }
}

struct Budget {
    free: Mutex<usize>,
    returned: Condvar,
}

fn budget() -> &'static Budget {
    static BUDGET: OnceLock<Budget> = OnceLock::new();
    BUDGET.get_or_init(|| Budget { free: Mutex::new(available_cpus()), returned: Condvar::new() })
}

/// CPUs held by one compute; given back on drop.
pub struct Grant {
    pub n: usize,
}

/// Between 1 and `want` CPUs, as many as are free (waiting while none is).
pub fn acquire(want: usize) -> Grant {
    let b = budget();
    let mut free = b.free.lock().unwrap_or_else(|e| e.into_inner());
    while *free == 0 {
        free = b.returned.wait(free).unwrap_or_else(|e| e.into_inner());
    }
    let n = want.clamp(1, *free);
    *free -= n;
    Grant { n }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let b = budget();
        *b.free.lock().unwrap_or_else(|e| e.into_inner()) += self.n;
        b.returned.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_never_exceed_the_cpus() {
        let total = available_cpus();
        let first = acquire(usize::MAX);
        assert_eq!(first.n, total, "one compute may take them all");
        let waiter = std::thread::spawn(|| acquire(2).n);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the next waits while none is free");
        drop(first);
        assert_eq!(waiter.join().unwrap(), total.min(2));
        assert_eq!(acquire(1).n, 1);
    }
}
