/*
 * Lugh's replacements for two of ggml's x86 dot-product kernels, the ones a
 * decode step spends most of its time in on Q4_1 and Q8_0 models: the row of
 * quantized weights times the quantized activations.
 *
 * They return exactly what ggml's AVX2 kernels return, bit for bit. Those
 * kernels accumulate block after block into one 8-lane float vector
 * (acc = d * lane_sums + acc, a fused multiply-add per block) and, for Q4_1,
 * a scalar sum of min * activation-sum products; the order and rounding of
 * those float operations is what fixes the logits, so it is kept here: one
 * fused multiply-add per block, in block order, on the same 8 lanes, and the
 * same horizontal sum. What changes is only how the exact parts are computed:
 * the integer dot products of four blocks come from two 512-bit VNNI
 * instructions, the nibbles are unpacked with one byte permutation per two
 * blocks, and the fp16 scales of four blocks are converted at once. ggml's
 * AVX2 loop spends about 20 instructions and 11 loads on each block; this one
 * about half as many, which is what a decode step on a small model waits for.
 *
 * build.rs compiles ggml's arch/x86/quants.c with its two functions renamed
 * (ggml_vec_dot_q4_1_q8_1 -> lugh_ggml_vec_dot_q4_1_q8_1, the same for
 * q8_0), so that ggml's type-traits table takes these. Where the processor
 * lacks the AVX-512 parts used (VBMI, VNNI, BW, VL), they call ggml's own.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VBMI__) && \
    defined(__AVX512VNNI__) && defined(__AVX512DQ__) && defined(__F16C__) && defined(__FMA__)
#define LUGH_VEC_DOT_AVX512 1
#include <immintrin.h>
#endif

void lugh_ggml_vec_dot_q4_1_q8_1(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                                 int nrc);
void lugh_ggml_vec_dot_q8_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                                 int nrc);
void ggml_vec_dot_q4_1_q8_1(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
void ggml_vec_dot_q8_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);

#ifndef LUGH_VEC_DOT_AVX512

void ggml_vec_dot_q4_1_q8_1(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc) {
    lugh_ggml_vec_dot_q4_1_q8_1(n, s, bs, vx, bx, vy, by, nrc);
}

void ggml_vec_dot_q8_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc) {
    lugh_ggml_vec_dot_q8_0_q8_0(n, s, bs, vx, bx, vy, by, nrc);
}

#else

/* ggml's block layouts (ggml-common.h), restated: 32 weights a block. */
typedef struct {
    uint16_t d, m; /* fp16 scale and minimum */
    uint8_t qs[16];
} q4_1_block;
typedef struct {
    uint16_t d, s; /* fp16 scale, and scale times the sum of qs */
    int8_t qs[32];
} q8_1_block;
typedef struct {
    uint16_t d;
    int8_t qs[32];
} q8_0_block;

_Static_assert(sizeof(q4_1_block) == 20, "block_q4_1 is 20 bytes");
_Static_assert(sizeof(q8_1_block) == 36, "block_q8_1 is 36 bytes");
_Static_assert(sizeof(q8_0_block) == 34, "block_q8_0 is 34 bytes");

static inline float fp16_to_float(uint16_t h) {
    return _cvtsh_ss(h);
}

/* ggml's hsum_float_8, the same additions in the same order. */
static inline float sum_of_lanes(__m256 x) {
    __m128 sum = _mm256_extractf128_ps(x, 1);
    sum = _mm_add_ps(sum, _mm256_castps256_ps128(x));
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
}

/* Lane k of a 4-float vector, in all 8 lanes. */
static inline __m256 lane(__m128 v, int k) {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(k));
}

/* acc = scale[k] * block k's 8 lane sums + acc, for the four blocks in order:
 * what ggml's loop does one block at a time. */
static inline __m256 accumulate_four(__m256 acc, __m128 scale, __m512 sums01, __m512 sums23) {
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(scale), _mm512_castps512_ps256(sums01), acc);
    acc = _mm256_fmadd_ps(lane(scale, 1), _mm512_extractf32x8_ps(sums01, 1), acc);
    acc = _mm256_fmadd_ps(lane(scale, 2), _mm512_castps512_ps256(sums23), acc);
    acc = _mm256_fmadd_ps(lane(scale, 3), _mm512_extractf32x8_ps(sums23, 1), acc);
    return acc;
}

/* Two blocks' 32-byte activations side by side. */
static inline __m512i two_rows(const int8_t *first, const int8_t *second) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)first)),
                              _mm256_loadu_si256((const __m256i *)second), 1);
}

/* The 8 lane sums of u8 x s8 products, four products a lane, as floats:
 * exact integers (|sum| < 2^24), so any way of computing them is ggml's. */
static inline __m512 lane_sums(__m512i unsigned_bytes, __m512i signed_bytes) {
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), unsigned_bytes, signed_bytes));
}

void ggml_vec_dot_q4_1_q8_1(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc) {
    (void)bs;
    (void)bx;
    (void)by;
    (void)nrc;
    const int n_blocks = n / 32;
    const q4_1_block *x = vx;
    const q8_1_block *y = vy;

    /* Byte indexes into the 80 bytes of four q4_1 blocks (a 64-byte load and
     * a 16-byte one): block k's 16 packed bytes start at 20k + 4. Each block's
     * bytes go to two 128-bit lanes; the second is shifted right by 4 to give
     * the high nibbles, as ggml's bytes_from_nibbles_32 lays them out. */
    const __m512i blocks01 = _mm512_set_epi8(39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 39, 38, 37,
                                             36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 19, 18, 17, 16, 15, 14,
                                             13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9,
                                             8, 7, 6, 5, 4);
    const __m512i blocks23 = _mm512_set_epi8(79, 78, 77, 76, 75, 74, 73, 72, 71, 70, 69, 68, 67, 66, 65, 64, 79, 78, 77,
                                             76, 75, 74, 73, 72, 71, 70, 69, 68, 67, 66, 65, 64, 59, 58, 57, 56, 55, 54,
                                             53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 59, 58, 57, 56, 55, 54, 53, 52, 51,
                                             50, 49, 48, 47, 46, 45, 44);
    const __m512i high_nibble_shift = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                                       0x0004000400040004LL, 0x0004000400040004LL, 0, 0);
    const __m512i low_nibble = _mm512_set1_epi8(0x0F);
    /* The fp16 words of four blocks' scales: d of blocks 0-3, then m (x) or s (y). */
    const __m512i x_scales = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31,
                                              21, 11, 1, 30, 20, 10, 0);
    const __m512i y_scales = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 55,
                                              37, 19, 1, 54, 36, 18, 0);

    __m256 acc = _mm256_setzero_ps();
    __m128 mins = _mm_setzero_ps();
    int ib = 0;
    for (; ib + 4 <= n_blocks; ib += 4) {
        const uint8_t *xb = (const uint8_t *)(x + ib);
        const uint8_t *yb = (const uint8_t *)(y + ib);
        const __m512i x_head = _mm512_loadu_si512(xb);
        const __m512i x_tail = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(xb + 64)));
        const __m512i nibbles01 = _mm512_and_si512(
            _mm512_srlv_epi16(_mm512_permutex2var_epi8(x_head, blocks01, x_tail), high_nibble_shift), low_nibble);
        const __m512i nibbles23 = _mm512_and_si512(
            _mm512_srlv_epi16(_mm512_permutex2var_epi8(x_head, blocks23, x_tail), high_nibble_shift), low_nibble);
        const __m512 sums01 = lane_sums(nibbles01, two_rows(y[ib].qs, y[ib + 1].qs));
        const __m512 sums23 = lane_sums(nibbles23, two_rows(y[ib + 2].qs, y[ib + 3].qs));

        const __m256 xs = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(x_scales, x_head)));
        const __m256 ys = _mm256_cvtph_ps(_mm512_castsi512_si128(
            _mm512_permutex2var_epi16(_mm512_loadu_si512(yb), y_scales, _mm512_loadu_si512(yb + 64))));
        const __m128 m = _mm256_extractf128_ps(xs, 1);
        const __m128 ys_s = _mm256_extractf128_ps(ys, 1);
        /* ggml: summs += m * s, contracted to one fused multiply-add. */
        mins = _mm_fmadd_ss(m, ys_s, mins);
        mins = _mm_fmadd_ss(_mm_movehdup_ps(m), _mm_movehdup_ps(ys_s), mins);
        mins = _mm_fmadd_ss(_mm_movehl_ps(m, m), _mm_movehl_ps(ys_s, ys_s), mins);
        mins = _mm_fmadd_ss(_mm_shuffle_ps(m, m, 3), _mm_shuffle_ps(ys_s, ys_s, 3), mins);
        acc = accumulate_four(acc, _mm_mul_ps(_mm256_castps256_ps128(xs), _mm256_castps256_ps128(ys)), sums01, sums23);
    }
    for (; ib < n_blocks; ++ib) {
        mins = _mm_fmadd_ss(_mm_set_ss(fp16_to_float(x[ib].m)), _mm_set_ss(fp16_to_float(y[ib].s)), mins);
        const __m256 scale = _mm256_set1_ps(fp16_to_float(x[ib].d) * fp16_to_float(y[ib].d));
        const __m128i packed = _mm_loadu_si128((const __m128i *)x[ib].qs);
        const __m256i nibbles =
            _mm256_and_si256(_mm256_set1_epi8(0x0F), _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed));
        const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles,
                                                 _mm256_loadu_si256((const __m256i *)y[ib].qs));
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc);
    }
    *s = sum_of_lanes(acc) + _mm_cvtss_f32(mins);
}

void ggml_vec_dot_q8_0_q8_0(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc) {
    (void)bs;
    (void)bx;
    (void)by;
    (void)nrc;
    const int n_blocks = n / 32;
    const q8_0_block *x = vx;
    const q8_0_block *y = vy;
    /* The fp16 scale words of four 34-byte blocks, from two 64-byte loads
     * (offsets 0, 34, 68 and 102: words 0, 17, and 32 + 2, 32 + 19). */
    const __m512i scale_words = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                 0, 0, 0, 0, 51, 34, 17, 0);

    __m256 acc = _mm256_setzero_ps();
    int ib = 0;
    for (; ib + 4 <= n_blocks; ib += 4) {
        const uint8_t *xb = (const uint8_t *)(x + ib);
        const uint8_t *yb = (const uint8_t *)(y + ib);
        const __m512i x01 = two_rows(x[ib].qs, x[ib + 1].qs);
        const __m512i x23 = two_rows(x[ib + 2].qs, x[ib + 3].qs);
        /* ggml's mul_sum_i8_pairs_float: |x| times y with x's sign, so that
         * the unsigned-by-signed VNNI product gives x * y. */
        const __m512i y01 = two_rows(y[ib].qs, y[ib + 1].qs);
        const __m512i y23 = two_rows(y[ib + 2].qs, y[ib + 3].qs);
        const __m512 sums01 = lane_sums(
            _mm512_abs_epi8(x01),
            _mm512_mask_sub_epi8(y01, _mm512_movepi8_mask(x01), _mm512_setzero_si512(), y01));
        const __m512 sums23 = lane_sums(
            _mm512_abs_epi8(x23),
            _mm512_mask_sub_epi8(y23, _mm512_movepi8_mask(x23), _mm512_setzero_si512(), y23));
        const __m128 xd = _mm_cvtph_ps(_mm512_castsi512_si128(
            _mm512_permutex2var_epi16(_mm512_loadu_si512(xb), scale_words, _mm512_loadu_si512(xb + 64))));
        const __m128 yd = _mm_cvtph_ps(_mm512_castsi512_si128(
            _mm512_permutex2var_epi16(_mm512_loadu_si512(yb), scale_words, _mm512_loadu_si512(yb + 64))));
        acc = accumulate_four(acc, _mm_mul_ps(xd, yd), sums01, sums23);
    }
    for (; ib < n_blocks; ++ib) {
        const __m256 scale = _mm256_set1_ps(fp16_to_float(x[ib].d) * fp16_to_float(y[ib].d));
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[ib].qs);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[ib].qs);
        const __m256i sums =
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc);
    }
    *s = sum_of_lanes(acc);
}

#endif
