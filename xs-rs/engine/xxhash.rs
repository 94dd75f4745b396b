//! XXH64, Yann Collet's 64-bit xxHash (the algorithm of xxhash.h, written
//! from its specification, xxhash_spec.md): a fast non-cryptographic hash,
//! fed in pieces. Saved KV caches use it for their checksums and for the
//! fingerprint of the model they were made with.

const PRIME_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME_4: u64 = 0x85EB_CA77_C2B2_AE63;
const PRIME_5: u64 = 0x27D4_EB2F_1656_67C5;

/// Bytes consumed per round of the four lanes.
const STRIPE: usize = 32;

fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(PRIME_2)).rotate_left(31).wrapping_mul(PRIME_1)
}

fn merge_round(acc: u64, lane: u64) -> u64 {
    (acc ^ round(0, lane)).wrapping_mul(PRIME_1).wrapping_add(PRIME_4)
}

fn read_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

fn read_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

/// An XXH64 state: `update` with the bytes in order, then `digest`.
#[derive(Clone)]
pub struct Xxh64 {
    seed: u64,
    lanes: [u64; 4],
    /// The bytes of a stripe not complete yet.
    pending: [u8; STRIPE],
    n_pending: usize,
    total_len: u64,
}

impl Xxh64 {
    pub fn new(seed: u64) -> Xxh64 {
        Xxh64 {
            seed,
            lanes: [
                seed.wrapping_add(PRIME_1).wrapping_add(PRIME_2),
                seed.wrapping_add(PRIME_2),
                seed,
                seed.wrapping_sub(PRIME_1),
            ],
            pending: [0; STRIPE],
            n_pending: 0,
            total_len: 0,
        }
    }

    fn consume_stripe(lanes: &mut [u64; 4], stripe: &[u8]) {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = round(*lane, read_u64(&stripe[8 * i..]));
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.total_len += data.len() as u64;
        if self.n_pending > 0 {
            let take = (STRIPE - self.n_pending).min(data.len());
            self.pending[self.n_pending..self.n_pending + take].copy_from_slice(&data[..take]);
            self.n_pending += take;
            data = &data[take..];
            if self.n_pending < STRIPE {
                return;
            }
            let stripe = self.pending;
            Self::consume_stripe(&mut self.lanes, &stripe);
            self.n_pending = 0;
        }
        let mut stripes = data.chunks_exact(STRIPE);
        for stripe in &mut stripes {
            Self::consume_stripe(&mut self.lanes, stripe);
        }
        let rest = stripes.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.n_pending = rest.len();
    }

    /// The hash of everything given so far (the state is left as it is).
    pub fn digest(&self) -> u64 {
        let mut h = if self.total_len >= STRIPE as u64 {
            let [v1, v2, v3, v4] = self.lanes;
            let mut h = v1
                .rotate_left(1)
                .wrapping_add(v2.rotate_left(7))
                .wrapping_add(v3.rotate_left(12))
                .wrapping_add(v4.rotate_left(18));
            for v in self.lanes {
                h = merge_round(h, v);
            }
            h
        } else {
            self.seed.wrapping_add(PRIME_5)
        };
        h = h.wrapping_add(self.total_len);
        let mut rest = &self.pending[..self.n_pending];
        while rest.len() >= 8 {
            h = (h ^ round(0, read_u64(rest))).rotate_left(27).wrapping_mul(PRIME_1).wrapping_add(PRIME_4);
            rest = &rest[8..];
        }
        if rest.len() >= 4 {
            h = (h ^ u64::from(read_u32(rest)).wrapping_mul(PRIME_1))
                .rotate_left(23)
                .wrapping_mul(PRIME_2)
                .wrapping_add(PRIME_3);
            rest = &rest[4..];
        }
        for &b in rest {
            h = (h ^ u64::from(b).wrapping_mul(PRIME_5)).rotate_left(11).wrapping_mul(PRIME_1);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(PRIME_2);
        h ^= h >> 29;
        h = h.wrapping_mul(PRIME_3);
        h ^ (h >> 32)
    }
}

/// The XXH64 of `data` with seed 0.
pub fn xxh64(data: &[u8]) -> u64 {
    let mut h = Xxh64::new(0);
    h.update(data);
    h.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The reference values published with xxHash and its ports (seed 0).
    const VECTORS: &[(&[u8], u64)] = &[
        (b"", 0xEF46_DB37_51D8_E999),
        (b"a", 0xD24E_C4F1_A98C_6E5B),
        (b"abc", 0x44BC_2CF5_AD77_0999),
        (b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0x856E_8432_98F9_9AD7),
        (b"Nobody inspects the spammish repetition", 0xFBCE_A83C_8A37_8BF1),
        (b"The quick brown fox jumps over the lazy dog", 0x0B24_2D36_1FDA_71BC),
    ];

    #[test]
    fn the_published_values() {
        for &(input, want) in VECTORS {
            assert_eq!(xxh64(input), want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn fed_in_pieces_it_hashes_as_in_one() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let whole = xxh64(&data);
        for cut in [1, 3, 8, 31, 32, 33, 64, 100, 999] {
            let mut h = Xxh64::new(0);
            for piece in data.chunks(cut) {
                h.update(piece);
            }
            assert_eq!(h.digest(), whole, "pieces of {cut}");
        }
        let mut h = Xxh64::new(0);
        h.update(&data[..5]);
        h.update(&[]);
        h.update(&data[5..]);
        assert_eq!(h.digest(), whole, "an empty piece changes nothing");
    }

    #[test]
    fn the_seed_changes_the_hash() {
        let mut h = Xxh64::new(1);
        h.update(b"abc");
        assert_ne!(h.digest(), xxh64(b"abc"));
    }
}
