// Included by sys.rs into its x86_kernel_tests module.
//
// Lugh's x86 K-quant kernels against ggml's own, which build.rs keeps under
// the names `lugh_ggml_*`: the repacked Q4_K matrix-vector and matrix
// products (xs-rs/kernels/x86_kquants.c) on random blocks, every superblock
// count from 1 to 9 and the real models' row lengths, and the one-column
// Q6_K product split between threads (x86_gemm.c, through llamafile_sgemm)
// against ggml's dot product of every row.

extern "C" {
    fn ggml_vec_dot_q6_K_q8_K(
        n: c_int,
        s: *mut f32,
        bs: usize,
        x: *const c_void,
        bx: usize,
        y: *const c_void,
        by: usize,
        nrc: c_int,
    );
    fn ggml_gemv_q4_K_8x8_q8_K(
        n: c_int,
        s: *mut f32,
        bs: usize,
        x: *const c_void,
        y: *const c_void,
        nr: c_int,
        nc: c_int,
    );
    fn lugh_ggml_gemv_q4_K_8x8_q8_K(
        n: c_int,
        s: *mut f32,
        bs: usize,
        x: *const c_void,
        y: *const c_void,
        nr: c_int,
        nc: c_int,
    );
}

const GGML_TYPE_Q6_K: u32 = 14;
const GGML_TYPE_Q8_K: u32 = 15;
const SUPERBLOCK: usize = 256;
/// block_q4_Kx8: eight fp16 d, eight fp16 dmin, 96 bytes of scales, 1024 of weights.
const Q4_K_X8_BYTES: usize = 1152;

/// Superblock counts: 1-9 (every remainder a loop might have) and the real
/// models' rows (2048 and 8192 values).
const SUPERBLOCKS: [usize; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 24, 32];

/// A finite random fp16 (exponent 1..29: normal, up to about 2^14).
fn random_half(rng: &mut Rng) -> [u8; 2] {
    ((rng.next_u64() as u16 & 0x83ff) | (((rng.next_u64() % 29) as u16 + 1) << 10)).to_le_bytes()
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// `blocks` Q6_K superblocks: quantized from random floats, or random bytes
/// with a finite random scale (the last two bytes of each 210).
fn q6_k_row(rng: &mut Rng, blocks: usize, raw: bool) -> Vec<u8> {
    if !raw {
        return random_row(rng, GGML_TYPE_Q6_K, blocks * SUPERBLOCK, false);
    }
    let mut row = random_bytes(rng, blocks * 210);
    for block in row.chunks_mut(210) {
        block[208..].copy_from_slice(&random_half(rng));
    }
    row
}

/// `blocks` Q8_K superblocks: quantized by ggml's from_float, or random
/// bytes with a finite random float scale (the first four bytes of each 292;
/// the 16 block sums are random too, as ggml reads them as given).
fn q8_k_row(rng: &mut Rng, blocks: usize, raw: bool) -> Vec<u8> {
    if !raw {
        return activations(rng, GGML_TYPE_Q8_K as c_int, blocks * SUPERBLOCK, false);
    }
    let mut row = random_bytes(rng, blocks * 292);
    for block in row.chunks_mut(292) {
        let scale = (rng.next_f64() * 2.0 - 1.0) as f32 * 2f32.powi((rng.next_u64() % 40) as i32 - 30);
        block[..4].copy_from_slice(&scale.to_le_bytes());
    }
    row
}

/// A decode step's Q6_K product (one column) through llamafile_sgemm, each of
/// 1-3 threads its share of the rows: ggml's vec_dot of every row, bit for
/// bit; more than one column is left to ggml.
#[test]
fn q6_k_column_product_is_ggmls_bit_for_bit() {
    // SAFETY: initialises ggml's fp16 tables, which ggml's kernels read.
    unsafe { ggml_cpu_init() };
    let mut rng = Rng::new(20261129);
    for (m, blocks) in [(1, 1), (7, 3), (33, 8), (64, 9)] {
        for raw in [false, true] {
            // rows a superblock longer than k, as a view's would be
            let lda = blocks + 1;
            let a: Vec<u8> = (0..m).flat_map(|_| q6_k_row(&mut rng, lda, raw)).collect();
            let b = q8_k_row(&mut rng, blocks, raw);
            for nth in 1..=3 {
                let case = format!("Q6_K, {m} rows of {blocks} superblocks, raw {raw}, {nth} threads");
                let sizes = (m, 1, blocks);
                let types = (GGML_TYPE_Q6_K, GGML_TYPE_Q8_K);
                let c = sgemm_product(llamafile_sgemm, sizes, &a, &b, (lda, blocks, m + 3), types, nth)
                    .unwrap_or_else(|| panic!("{case}: declined"));
                for (i, ours) in c.iter().enumerate().take(m) {
                    let mut expected = f32::NAN;
                    // SAFETY: row i of a and b hold `blocks` superblocks.
                    unsafe {
                        ggml_vec_dot_q6_K_q8_K(
                            (blocks * SUPERBLOCK) as c_int,
                            &mut expected,
                            0,
                            a.as_ptr().add(i * lda * 210).cast(),
                            0,
                            b.as_ptr().cast(),
                            0,
                            1,
                        )
                    };
                    assert_eq!(ours.to_bits(), expected.to_bits(), "{case} row {i}: {ours} vs ggml's {expected}");
                }
                assert!(c[m..].iter().all(|v| v.is_nan()), "{case}: padding");
            }
        }
    }
    let a = q6_k_row(&mut rng, 16, false);
    let b: Vec<u8> = (0..8).flat_map(|_| q8_k_row(&mut rng, 2, false)).collect();
    let taken = sgemm_product(llamafile_sgemm, (8, 8, 2), &a, &b, (2, 2, 8), (GGML_TYPE_Q6_K, GGML_TYPE_Q8_K), 1);
    assert!(taken.is_none(), "eight Q6_K columns are ggml's");
}

/// `groups` repacked groups of eight Q4_K rows, `blocks` superblocks each, as
/// random bytes with finite random fp16 d and dmin: any bytes are a valid
/// block_q4_Kx8 (the scales are 6-bit fields), and both kernels must agree
/// on all of them.
fn q4_k_x8_rows(rng: &mut Rng, groups: usize, blocks: usize) -> Vec<u8> {
    let mut rows = random_bytes(rng, groups * blocks * Q4_K_X8_BYTES);
    for block in rows.chunks_mut(Q4_K_X8_BYTES) {
        for word in 0..16 {
            block[2 * word..2 * word + 2].copy_from_slice(&random_half(rng));
        }
    }
    rows
}

#[test]
fn q4_k_repacked_gemv_is_ggmls_bit_for_bit() {
    // SAFETY: initialises ggml's fp16 tables, which ggml's kernels read.
    unsafe { ggml_cpu_init() };
    let mut rng = Rng::new(20261130);
    let mut compared = 0;
    for blocks in SUPERBLOCKS {
        for groups in [1usize, 2, 3] {
            for raw in [false, true] {
                let x = q4_k_x8_rows(&mut rng, groups, blocks);
                let y = q8_k_row(&mut rng, blocks, raw);
                let n = (blocks * SUPERBLOCK) as c_int;
                let nc = 8 * groups;
                let (mut ours, mut theirs) = (vec![f32::NAN; nc + 1], vec![f32::NAN; nc + 1]);
                // SAFETY: x holds nc rows of n values in groups of eight, y one Q8_K column of n, the outputs nc floats.
                unsafe {
                    ggml_gemv_q4_K_8x8_q8_K(
                        n,
                        ours.as_mut_ptr(),
                        0,
                        x.as_ptr().cast(),
                        y.as_ptr().cast(),
                        1,
                        nc as c_int,
                    );
                    lugh_ggml_gemv_q4_K_8x8_q8_K(
                        n,
                        theirs.as_mut_ptr(),
                        0,
                        x.as_ptr().cast(),
                        y.as_ptr().cast(),
                        1,
                        nc as c_int,
                    );
                }
                for (r, (a, b)) in ours.iter().zip(&theirs).enumerate().take(nc) {
                    let case = format!("Q4_Kx8, {blocks} superblocks, {groups} groups, raw activations {raw}, row {r}");
                    assert_eq!(a.to_bits(), b.to_bits(), "{case}: {a} vs ggml's {b}");
                }
                assert!(ours[nc].is_nan(), "past the rows");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, SUPERBLOCKS.len() * 3 * 2);
}

extern "C" {
    fn ggml_gemm_q4_K_8x8_q8_K(
        n: c_int,
        s: *mut f32,
        bs: usize,
        x: *const c_void,
        y: *const c_void,
        nr: c_int,
        nc: c_int,
    );
    fn lugh_ggml_gemm_q4_K_8x8_q8_K(
        n: c_int,
        s: *mut f32,
        bs: usize,
        x: *const c_void,
        y: *const c_void,
        nr: c_int,
        nc: c_int,
    );
    fn ggml_quantize_mat_q8_K_4x8(x: *const f32, y: *mut c_void, k: i64);
}

/// block_q8_Kx4: four float d, 1024 bytes, 64 int16 sums.
const Q8_K_X4_BYTES: usize = 1168;

/// `groups` groups of four Q8_K rows of `blocks` superblocks in ggml's
/// interleaved layout: quantized by ggml from random floats, or random bytes
/// with finite random scales (the sums random too, as ggml reads them as given).
fn q8_k_x4_rows(rng: &mut Rng, groups: usize, blocks: usize, raw: bool) -> Vec<u8> {
    let n = blocks * SUPERBLOCK;
    let mut rows = vec![0u8; groups * blocks * Q8_K_X4_BYTES];
    for group in rows.chunks_mut(blocks * Q8_K_X4_BYTES) {
        if raw {
            group.copy_from_slice(&random_bytes(rng, group.len()));
            for block in group.chunks_mut(Q8_K_X4_BYTES) {
                for r in 0..4 {
                    let scale = (rng.next_f64() * 2.0 - 1.0) as f32 * 2f32.powi((rng.next_u64() % 40) as i32 - 30);
                    block[4 * r..4 * r + 4].copy_from_slice(&scale.to_le_bytes());
                }
            }
        } else {
            let values: Vec<f32> = (0..4 * n).map(|_| (rng.next_f64() * 2.0 - 1.0) as f32).collect();
            // SAFETY: values holds four rows of n floats, group the blocks of their n / 256 superblocks.
            unsafe { ggml_quantize_mat_q8_K_4x8(values.as_ptr(), group.as_mut_ptr().cast(), n as i64) };
        }
    }
    rows
}

/// A prompt's Q4_K product (ggml's repacked gemm: four activation rows at a
/// time, groups of eight weight rows), Lugh's against ggml's: every output
/// the same bits, and nothing written between the output rows.
#[test]
fn q4_k_repacked_gemm_is_ggmls_bit_for_bit() {
    // SAFETY: initialises ggml's fp16 tables, which ggml's kernels read.
    unsafe { ggml_cpu_init() };
    let mut rng = Rng::new(20261131);
    let mut compared = 0;
    for blocks in [1usize, 2, 3, 8, 9] {
        for groups in 1..=5usize {
            for row_groups in [1usize, 2, 5] {
                for raw in [false, true] {
                    let x = q4_k_x8_rows(&mut rng, groups, blocks);
                    let y = q8_k_x4_rows(&mut rng, row_groups, blocks, raw);
                    let (n, nc, nr) = ((blocks * SUPERBLOCK) as c_int, 8 * groups, 4 * row_groups);
                    let bs = nc + 3;
                    let (mut ours, mut theirs) = (vec![f32::NAN; nr * bs], vec![f32::NAN; nr * bs]);
                    // SAFETY: x holds nc rows of n values in groups of eight, y nr rows in groups of four, the outputs nr rows of bs floats.
                    unsafe {
                        let (xp, yp) = (x.as_ptr().cast(), y.as_ptr().cast());
                        ggml_gemm_q4_K_8x8_q8_K(n, ours.as_mut_ptr(), bs, xp, yp, nr as c_int, nc as c_int);
                        lugh_ggml_gemm_q4_K_8x8_q8_K(n, theirs.as_mut_ptr(), bs, xp, yp, nr as c_int, nc as c_int);
                    }
                    for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                        let case = format!(
                            "Q4_Kx8 gemm, {blocks} superblocks, {groups} groups, {nr} rows, raw {raw}, output {k}"
                        );
                        if k % bs < nc {
                            assert_eq!(a.to_bits(), b.to_bits(), "{case}: {a} vs ggml's {b}");
                        } else {
                            assert!(a.is_nan(), "{case}: padding written");
                        }
                    }
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 5 * 5 * 3 * 2);
}

/// The time of `f`, the best of `trials` runs of `reps` calls, in seconds per call.
fn best_time(trials: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    (0..trials)
        .map(|_| {
            let t0 = std::time::Instant::now();
            for _ in 0..reps {
                f();
            }
            t0.elapsed().as_secs_f64() / reps as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Lugh's K-quant kernels next to ggml's on one thread, on a matrix that
/// stays in the L2 cache (compute) and on one that streams from memory:
/// `cargo test --release --lib kquant_kernel_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn kquant_kernel_speed() {
    // SAFETY: initialises ggml's fp16 tables, which ggml's kernels read.
    unsafe { ggml_cpu_init() };
    let mut rng = Rng::new(7);
    let blocks = 8; // rows of 2048 values
    let n = (blocks * SUPERBLOCK) as c_int;
    let y = q8_k_row(&mut rng, blocks, false);
    {
        // a prompt's product: 64 activation rows times 2048 weight rows of 2048
        let (rows, nr) = (2048usize, 64usize);
        let x = q4_k_x8_rows(&mut rng, rows / 8, blocks);
        let a = q8_k_x4_rows(&mut rng, nr / 4, blocks, false);
        let mut out = vec![0f32; rows * nr];
        let mut run =
            |gemm: unsafe extern "C" fn(c_int, *mut f32, usize, *const c_void, *const c_void, c_int, c_int)| {
                best_time(3, 4, || {
                    // SAFETY: x holds `rows` rows of n values in groups of eight, a nr rows in groups of four, out nr rows of `rows` floats.
                    unsafe {
                        gemm(
                            n,
                            out.as_mut_ptr(),
                            rows,
                            x.as_ptr().cast(),
                            a.as_ptr().cast(),
                            nr as c_int,
                            rows as c_int,
                        )
                    }
                })
            };
        let (ours, theirs) = (run(ggml_gemm_q4_K_8x8_q8_K), run(lugh_ggml_gemm_q4_K_8x8_q8_K));
        println!(
            "Q4_Kx8 gemm {nr} x {rows} rows x 2048: Lugh {:.0} us, ggml {:.0} us, {:.2}x",
            ours * 1e6,
            theirs * 1e6,
            theirs / ours
        );
    }
    for rows in [256usize, 16384] {
        let x = q4_k_x8_rows(&mut rng, rows / 8, blocks);
        let mut out = vec![0f32; rows];
        let reps = (1 << 22) / rows;
        let mut run =
            |gemv: unsafe extern "C" fn(c_int, *mut f32, usize, *const c_void, *const c_void, c_int, c_int)| {
                best_time(5, reps, || {
                    // SAFETY: x holds `rows` rows of n values in groups of eight, y one column, out `rows` floats.
                    unsafe { gemv(n, out.as_mut_ptr(), 0, x.as_ptr().cast(), y.as_ptr().cast(), 1, rows as c_int) }
                })
            };
        let (ours, theirs) = (run(ggml_gemv_q4_K_8x8_q8_K), run(lugh_ggml_gemv_q4_K_8x8_q8_K));
        let mb = x.len() as f64 / 1e6;
        println!(
            "Q4_Kx8 gemv {rows} rows x 2048 ({mb:.1} MB): Lugh {:.1} us, ggml {:.1} us, {:.2}x",
            ours * 1e6,
            theirs * 1e6,
            theirs / ours
        );
    }
}
