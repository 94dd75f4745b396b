//! Lugh's random numbers ([`Rng`], xoshiro256**), never perl's `rand`: a
//! `seed` makes a draw reproducible, and without one a call takes its seed
//! from a process-wide default generator that `Lugh::srand` reseeds.
use std::sync::Mutex;

/// xoshiro256** (Blackman & Vigna), seeded through splitmix64 so that any u64
/// seed, 0 included, gives a well-mixed state.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut splitmix = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng { s: [splitmix(), splitmix(), splitmix(), splitmix()] }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The process-wide default generator, used when a call gives no seed.
/// Until `Lugh::srand` is called it is seeded from the clock and the pid.
static DEFAULT_RNG: Mutex<Option<Rng>> = Mutex::new(None);

/// A seed from the clock and the process id (for unseeded runs).
pub fn entropy_seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    Rng::new(nanos ^ ((std::process::id() as u64) << 32)).next_u64()
}

/// Reseeds the default generator (`Lugh::srand`).
pub fn seed_default_rng(seed: u64) {
    *DEFAULT_RNG.lock().unwrap_or_else(|e| e.into_inner()) = Some(Rng::new(seed));
}

/// A generator for one call: from `seed` when given, else seeded by the next
/// value of the default generator (so `Lugh::srand` makes unseeded calls
/// reproducible too).
pub fn rng_for_call(seed: Option<u64>) -> Rng {
    match seed {
        Some(seed) => Rng::new(seed),
        None => {
            let mut guard = DEFAULT_RNG.lock().unwrap_or_else(|e| e.into_inner());
            let default = guard.get_or_insert_with(|| Rng::new(entropy_seed()));
            Rng::new(default.next_u64())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_reproducible_and_uniform() {
        let a: Vec<u64> = (0..5).scan(Rng::new(42), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..5).scan(Rng::new(42), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        assert_ne!(Rng::new(0).next_u64(), Rng::new(1).next_u64());
        let mut r = Rng::new(7);
        let mean: f64 = (0..100_000).map(|_| r.next_f64()).sum::<f64>() / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn default_rng_reseeds() {
        seed_default_rng(99);
        let a = rng_for_call(None).next_u64();
        seed_default_rng(99);
        assert_eq!(a, rng_for_call(None).next_u64());
    }
}
