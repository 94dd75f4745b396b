//! Lugh's random numbers, never perl's `rand`: a `seed` makes a draw
//! reproducible, and without one a call takes its seed from a process-wide
//! default generator ([`Rng`], xoshiro256**) that `Lugh::srand` reseeds.
//!
//! Sampling draws from [`Mt19937`], the generator llama.cpp's samplers use
//! (`std::mt19937`), turned into numbers in [0, 1) exactly as libstdc++'s
//! `std::generate_canonical` does, so that a seed gives llama.cpp's tokens.
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

/// The 32-bit Mersenne Twister (Matsumoto & Nishimura), as C++'s
/// `std::mt19937`: the same seed gives the same sequence of outputs.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; 624],
    next: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("next", &self.next).finish_non_exhaustive()
    }
}

impl Mt19937 {
    const N: usize = 624;
    const M: usize = 397;

    pub fn new(seed: u32) -> Mt19937 {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..Self::N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { state, next: Self::N }
    }

    /// Regenerates the whole state (the "twist"), done every 624 outputs.
    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MATRIX: u32 = 0x9908_b0df;
        for i in 0..Self::N {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % Self::N] & LOWER);
            let mag = if y & 1 == 1 { MATRIX } else { 0 };
            self.state[i] = self.state[(i + Self::M) % Self::N] ^ (y >> 1) ^ mag;
        }
        self.next = 0;
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.next >= Self::N {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `std::uniform_real_distribution<double>(0, 1)` of libstdc++: two
    /// outputs, the second the high part, summed and scaled in double
    /// (rounding to 1 gives the largest double below 1 instead).
    pub fn next_f64(&mut self) -> f64 {
        let low = f64::from(self.next_u32());
        let high = f64::from(self.next_u32());
        let two32 = 4_294_967_296.0f64;
        let r = (low + high * two32) / (two32 * two32);
        if r >= 1.0 {
            1.0 - f64::EPSILON / 2.0
        } else {
            r
        }
    }

    /// `std::uniform_real_distribution<float>(0, 1)` of libstdc++: one
    /// output, converted to float and scaled (1 becomes the largest float
    /// below 1).
    pub fn next_f32(&mut self) -> f32 {
        let r = self.next_u32() as f32 / 4_294_967_296.0f32;
        if r >= 1.0 {
            1.0 - f32::EPSILON / 2.0
        } else {
            r
        }
    }
}

/// The 32-bit seed of one sampling call, as llama.cpp's samplers take it:
/// the low 32 bits of `seed` when given, else a value of the default
/// generator (so `Lugh::srand` makes unseeded calls reproducible too).
pub fn sampling_seed(seed: Option<u64>) -> u32 {
    match seed {
        Some(seed) => seed as u32,
        None => rng_for_call(None).next_u64() as u32,
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
    fn mt19937_gives_the_standard_outputs() {
        // C++11 [rand.predef]: the 10000th output of a default-constructed
        // (seed 5489) std::mt19937 is 4123659995
        let mut mt = Mt19937::new(5489);
        assert_eq!(mt.next_u32(), 3_499_211_612);
        let mut mt = Mt19937::new(5489);
        let last = (0..10_000).map(|_| mt.next_u32()).last();
        assert_eq!(last, Some(4_123_659_995));
        // seed 1: first outputs of the reference implementation (mt19937ar.c, init_genrand(1))
        let mut mt = Mt19937::new(1);
        assert_eq!([mt.next_u32(), mt.next_u32(), mt.next_u32()], [1_791_095_845, 4_282_876_139, 3_093_770_124]);
    }

    #[test]
    fn mt19937_canonical_numbers_follow_libstdcxx() {
        let mut mt = Mt19937::new(5489);
        let (low, high) = (3_499_211_612u64, 581_869_302u64);
        let expected = (low as f64 + high as f64 * 4_294_967_296.0) / 18_446_744_073_709_551_616.0;
        assert_eq!(mt.next_f64(), expected);
        let mut mt = Mt19937::new(5489);
        assert_eq!(mt.next_f32(), 3_499_211_612u32 as f32 / 4_294_967_296.0);
        assert_eq!(sampling_seed(Some((7u64 << 32) | 42)), 42, "llama.cpp's seeds are 32-bit");
    }

    #[test]
    fn default_rng_reseeds() {
        seed_default_rng(99);
        let a = rng_for_call(None).next_u64();
        seed_default_rng(99);
        assert_eq!(a, rng_for_call(None).next_u64());
    }
}
