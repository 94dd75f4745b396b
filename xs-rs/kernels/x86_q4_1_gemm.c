/*
 * Lugh's matrix product for Q4_1 weights times Q8_1 activations, the one a
 * prompt on Q4_1 models (SmolLM2) spends its time in. ggml has no tiled
 * kernel for this pair on x86: its llamafile GEMM (tinyBLAS) declines it, and
 * ggml then computes every output as a separate vec_dot of one weight row
 * and one activation column, unpacking each weight block again for every
 * column and converting every fp16 scale with a table lookup.
 *
 * Here a tile of two weight rows by four activation columns is computed
 * together: each weight block is unpacked once for four columns, and the
 * activations' scales are converted once per column group. Every output is
 * still exactly ggml's vec_dot_q4_1_q8_1 of its row and column, bit for bit:
 * its own 8-lane accumulator (one fused multiply-add per block, in block
 * order, with ggml's products as scales), its own chain of min * sum fused
 * multiply-adds, and ggml's horizontal sum at the end. Tiling changes which
 * outputs are computed side by side, never the operations inside one.
 *
 * build.rs compiles ggml's llamafile/sgemm.cpp with llamafile_sgemm renamed
 * to lugh_llamafile_sgemm; ggml's matrix product calls the llamafile_sgemm
 * below, which takes Q4_1 x Q8_1 and hands every other request to ggml's.
 */
#include <stdbool.h>

#include "ggml-cpu-impl.h"
#include "x86_kernels.h"

bool lugh_llamafile_sgemm(const struct ggml_compute_params *params, int64_t m, int64_t n, int64_t k, const void *A,
                          int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc, int Atype, int Btype,
                          int Ctype);
bool llamafile_sgemm(const struct ggml_compute_params *params, int64_t m, int64_t n, int64_t k, const void *A,
                     int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc, int Atype, int Btype, int Ctype);
void lugh_q4_1_gemm(int ith, int nth, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, const void *B,
                    int64_t ldb, float *C, int64_t ldc);
void ggml_vec_dot_q4_1_q8_1(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);

#ifdef LUGH_X86_AVX512

enum {
    TILE_COLUMNS = 4,
    /* Weight rows are taken in chunks of about this many bytes, which stay
     * in the L2 cache while every column group passes over them. */
    CHUNK_BYTES = 256 * 1024,
    /* Longest row handled, in blocks (a column group's scales live on the
     * stack: 32 bytes a block). */
    MAX_BLOCKS = 4096,
};

/* The scales of one column group, as floats, per block: d of the four
 * columns, then s of the four. */
static void column_scales(const q8_1_block *const y[TILE_COLUMNS], int64_t n_blocks, float *scales) {
    for (int64_t b = 0; b < n_blocks; b++) {
        for (int j = 0; j < TILE_COLUMNS; j++) {
            scales[8 * b + j] = fp16_to_float(y[j][b].d);
            scales[8 * b + 4 + j] = fp16_to_float(y[j][b].s);
        }
    }
}

/* `rows` (1 or 2) weight rows times the four columns y: the outputs
 * C[j * ldc + r]. Columns are paired in 512-bit vectors, column 2p in the low
 * 8 lanes and 2p+1 in the high 8, each half holding what ggml's kernel keeps
 * in its 8-lane accumulator. */
static inline __attribute__((always_inline)) void tile(const int rows, const q4_1_block *const x[2],
                                                        const q8_1_block *const y[TILE_COLUMNS],
                                                        const float *scales, int64_t n_blocks, float *c,
                                                        int64_t ldc) {
    const __m512i low_pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i high_pair = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    __m512 acc[2][2];
    __m128 mins[2];
    for (int r = 0; r < rows; r++) {
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        mins[r] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n_blocks; b++) {
        const __m512i y01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[0][b].qs)),
                                               _mm256_loadu_si256((const __m256i *)y[1][b].qs), 1);
        const __m512i y23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[2][b].qs)),
                                               _mm256_loadu_si256((const __m256i *)y[3][b].qs), 1);
        const __m128 y_d = _mm_loadu_ps(scales + 8 * b);
        const __m128 y_s = _mm_loadu_ps(scales + 8 * b + 4);
        for (int r = 0; r < rows; r++) {
            const __m512i w = _mm512_broadcast_i64x4(nibbles(x[r][b].qs));
            /* ggml: d0 * d1, then acc = d0d1 * lane sums + acc */
            const __m512 d = _mm512_castps128_ps512(_mm_mul_ps(_mm_set1_ps(fp16_to_float(x[r][b].d)), y_d));
            /* ggml: summs += m * s, contracted to a fused multiply-add */
            mins[r] = _mm_fmadd_ps(_mm_set1_ps(fp16_to_float(x[r][b].m)), y_s, mins[r]);
            const __m512 sums01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, y01));
            const __m512 sums23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, y23));
            acc[r][0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(low_pair, d), sums01, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(high_pair, d), sums23, acc[r][1]);
        }
    }
    for (int r = 0; r < rows; r++) {
        float min_sums[4];
        _mm_storeu_ps(min_sums, mins[r]);
        for (int j = 0; j < TILE_COLUMNS; j++) {
            const __m512 pair = acc[r][j / 2];
            const __m256 half = (j % 2) == 0 ? _mm512_castps512_ps256(pair)
                                             : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pair), 1));
            c[j * ldc + r] = sum_of_lanes(half) + min_sums[j];
        }
    }
}

#endif

/* Rows [i0, i1) times columns [j0, j1), one ggml vec_dot per output. */
static void one_by_one(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t n_blocks, const void *A, int64_t lda,
                       const void *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t j = j0; j < j1; j++) {
        for (int64_t i = i0; i < i1; i++) {
            const q4_1_block *x = (const q4_1_block *)A + i * lda;
            const q8_1_block *y = (const q8_1_block *)B + j * ldb;
            ggml_vec_dot_q4_1_q8_1((int)(n_blocks * 32), C + j * ldc + i, 0, x, 0, y, 0, 1);
        }
    }
}

/* Thread ith of nth computes its share of C's rows, llamafile_sgemm's way:
 * C is column-major (C[j * ldc + i] is row i of A times column j of B), k
 * counts blocks, A's rows are lda blocks apart and B's columns ldb. */
void lugh_q4_1_gemm(int ith, int nth, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, const void *B,
                    int64_t ldb, float *C, int64_t ldc) {
    const int64_t first = m * ith / nth, end = m * (ith + 1) / nth;
#ifndef LUGH_X86_AVX512
    one_by_one(first, end, 0, n, k, A, lda, B, ldb, C, ldc);
#else
    const int64_t n_blocks = k;
    const q4_1_block *a = A;
    const q8_1_block *b = B;
    int64_t chunk_rows = CHUNK_BYTES / (n_blocks * (int64_t)sizeof(q4_1_block));
    chunk_rows = chunk_rows < 2 ? 2 : chunk_rows & ~(int64_t)1;
    float scales[8 * n_blocks];
    const int64_t grouped = n - n % TILE_COLUMNS;
    for (int64_t chunk = first; chunk < end; chunk += chunk_rows) {
        const int64_t chunk_end = chunk + chunk_rows < end ? chunk + chunk_rows : end;
        for (int64_t j = 0; j < grouped; j += TILE_COLUMNS) {
            const q8_1_block *const y[TILE_COLUMNS] = {b + j * ldb, b + (j + 1) * ldb, b + (j + 2) * ldb,
                                                      b + (j + 3) * ldb};
            column_scales(y, n_blocks, scales);
            int64_t i = chunk;
            for (; i + 2 <= chunk_end; i += 2) {
                const q4_1_block *const x[2] = {a + i * lda, a + (i + 1) * lda};
                tile(2, x, y, scales, n_blocks, C + j * ldc + i, ldc);
            }
            if (i < chunk_end) {
                const q4_1_block *const x[2] = {a + i * lda, a + i * lda};
                tile(1, x, y, scales, n_blocks, C + j * ldc + i, ldc);
            }
        }
        one_by_one(chunk, chunk_end, grouped, n, n_blocks, A, lda, B, ldb, C, ldc);
    }
#endif
}

bool llamafile_sgemm(const struct ggml_compute_params *params, int64_t m, int64_t n, int64_t k, const void *A,
                     int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc, int Atype, int Btype, int Ctype) {
#ifdef LUGH_X86_AVX512
    /* One column (a decode step) stays with ggml's per-output loop, which
     * calls Lugh's streaming vec_dot. */
    if (Atype == GGML_TYPE_Q4_1 && Btype == GGML_TYPE_Q8_1 && Ctype == GGML_TYPE_F32 && n >= TILE_COLUMNS &&
        k <= MAX_BLOCKS) {
        lugh_q4_1_gemm(params->ith, params->nth, m, n, k, A, lda, B, ldb, C, ldc);
        return true;
    }
#endif
    return lugh_llamafile_sgemm(params, m, n, k, A, lda, B, ldb, C, ldc, Atype, Btype, Ctype);
}
