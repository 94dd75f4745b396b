//! Where a session's time goes, phase by phase: the counters behind
//! `$inference->profile` and bench/profile-decode. Always on: reading the
//! clock twice per phase costs tens of nanoseconds against milliseconds of
//! compute per step.
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Building a graph (only when no graph of that shape is kept).
    Build,
    /// Reserving and allocating compute memory for a new graph.
    Allocate,
    /// Writing token ids, positions, masks and cache indices.
    Inputs,
    /// The backend computing the graph.
    Compute,
    /// Copying the logits out.
    Read,
    /// Choosing the next token (generate).
    Sample,
    /// The caller's per-token callbacks (generate).
    Callback,
}

pub const PHASES: [Phase; 7] =
    [Phase::Build, Phase::Allocate, Phase::Inputs, Phase::Compute, Phase::Read, Phase::Sample, Phase::Callback];

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Build => "build",
            Phase::Allocate => "allocate",
            Phase::Inputs => "inputs",
            Phase::Compute => "compute",
            Phase::Read => "read",
            Phase::Sample => "sample",
            Phase::Callback => "callback",
        }
    }
}

/// Total time and number of times of each phase, and graph evaluations.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    time: [Duration; PHASES.len()],
    count: [u64; PHASES.len()],
    pub steps: u64,
}

impl Profile {
    pub fn add(&mut self, phase: Phase, elapsed: Duration) {
        self.time[phase as usize] += elapsed;
        self.count[phase as usize] += 1;
    }

    /// (phase, total time, times) for every phase, in pipeline order.
    pub fn entries(&self) -> impl Iterator<Item = (Phase, Duration, u64)> + '_ {
        PHASES.iter().map(|&p| (p, self.time[p as usize], self.count[p as usize]))
    }
}

/// Runs `f`, adding its time to `phase` of `profile`.
pub fn timed<T>(profile: &std::sync::Mutex<Profile>, phase: Phase, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let elapsed = start.elapsed();
    profile.lock().unwrap_or_else(|e| e.into_inner()).add(phase, elapsed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_up_per_phase() {
        let profile = std::sync::Mutex::new(Profile::default());
        assert_eq!(timed(&profile, Phase::Compute, || 7), 7);
        timed(&profile, Phase::Compute, || std::thread::sleep(Duration::from_millis(2)));
        timed(&profile, Phase::Sample, || ());
        let p = profile.lock().unwrap();
        let compute = p.entries().find(|e| e.0 == Phase::Compute).unwrap();
        assert_eq!(compute.2, 2);
        assert!(compute.1 >= Duration::from_millis(2));
        assert_eq!(p.entries().filter(|e| e.2 == 0).count(), PHASES.len() - 2);
        assert_eq!(p.entries().map(|e| e.0.name()).collect::<Vec<_>>()[0], "build");
    }
}
