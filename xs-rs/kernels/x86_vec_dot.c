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
 * same horizontal sum. The integer dot products are computed as ggml computes
 * them. What changes is the scales: ggml converts each block's fp16 scales
 * with a table lookup apiece (four loads per Q4_1 block, on top of the
 * block's own), while these kernels gather the scale words of four blocks
 * with one permutation and convert them with one instruction. In a decode
 * step the weights stream from memory once, and ggml's loop spends its
 * time on those loads: SmolLM2's decode takes about a fifth less time with
 * these kernels.
 *
 * build.rs compiles ggml's arch/x86/quants.c with its two functions renamed
 * (ggml_vec_dot_q4_1_q8_1 -> lugh_ggml_vec_dot_q4_1_q8_1, the same for
 * q8_0), so that ggml's type-traits table takes these. Where the processor
 * lacks the AVX-512 parts used (BW, VL, VNNI), they call ggml's own.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__) && defined(__FMA__)
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

/* acc = scale[k] * sums[k] + acc for the four blocks in order: what ggml's
 * loop does one block at a time. */
static inline __m256 accumulate_four(__m256 acc, __m128 scale, const __m256 sums[4]) {
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(scale), sums[0], acc);
    acc = _mm256_fmadd_ps(lane(scale, 1), sums[1], acc);
    acc = _mm256_fmadd_ps(lane(scale, 2), sums[2], acc);
    acc = _mm256_fmadd_ps(lane(scale, 3), sums[3], acc);
    return acc;
}

/* Eight fp16 words picked from the 128 bytes at p, as floats. */
static inline __m256 gather_halves(const uint8_t *p, __m512i word_indexes) {
    const __m512i words = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), word_indexes, _mm512_loadu_si512(p + 64));
    return _mm256_cvtph_ps(_mm512_castsi512_si128(words));
}

/* A Q4_1 block's 32 weights as bytes 0..15: the low nibbles, then the high
 * ones (ggml's bytes_from_nibbles_32). */
static inline __m256i q4_1_weights(const q4_1_block *block) {
    const __m128i packed = _mm_loadu_si128((const __m128i *)block->qs);
    return _mm256_and_si256(_mm256_set1_epi8(0x0F), _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed));
}

/* The 8 lane sums of unsigned x signed byte products, four a lane, as
 * floats: exact integers (|sum| < 2^24). */
static inline __m256 lane_sums(__m256i unsigned_bytes, __m256i signed_bytes) {
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), unsigned_bytes, signed_bytes));
}

/* ggml's mul_sum_i8_pairs_float: |x| times y with x's sign, so that the
 * unsigned-by-signed product gives x * y. */
static inline __m256 signed_lane_sums(const int8_t *x, const int8_t *y) {
    const __m256i qx = _mm256_loadu_si256((const __m256i *)x);
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y);
    return lane_sums(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
}

void ggml_vec_dot_q4_1_q8_1(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc) {
    (void)bs;
    (void)bx;
    (void)by;
    (void)nrc;
    const int n_blocks = n / 32;
    const q4_1_block *x = vx;
    const q8_1_block *y = vy;
    /* The fp16 words of four blocks' scales: x (20-byte blocks, one 64-byte
     * load) d at words 0, 10, 20, 30 and m one word after each; y (36-byte
     * blocks, two loads) d at words 0, 18, 36, 54 and s one after each. */
    const __m512i x_scales = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31,
                                              21, 11, 1, 30, 20, 10, 0);
    const __m512i y_scales = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 55,
                                              37, 19, 1, 54, 36, 18, 0);

    __m256 acc = _mm256_setzero_ps();
    __m128 mins = _mm_setzero_ps();
    int ib = 0;
    /* Four blocks span 80 bytes of x and 144 of y: the scale loads (64
     * bytes of x, 128 of y) stay inside them. */
    for (; ib + 4 <= n_blocks; ib += 4) {
        __m256 sums[4];
        for (int k = 0; k < 4; k++) {
            sums[k] = lane_sums(q4_1_weights(&x[ib + k]), _mm256_loadu_si256((const __m256i *)y[ib + k].qs));
        }
        const __m256 xs =
            _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(x_scales, _mm512_loadu_si512(x + ib))));
        const __m256 ys = gather_halves((const uint8_t *)(y + ib), y_scales);
        const __m128 m = _mm256_extractf128_ps(xs, 1);
        const __m128 sy = _mm256_extractf128_ps(ys, 1);
        /* ggml: summs += m * s, contracted to one fused multiply-add. */
        mins = _mm_fmadd_ss(m, sy, mins);
        mins = _mm_fmadd_ss(_mm_movehdup_ps(m), _mm_movehdup_ps(sy), mins);
        mins = _mm_fmadd_ss(_mm_movehl_ps(m, m), _mm_movehl_ps(sy, sy), mins);
        mins = _mm_fmadd_ss(_mm_shuffle_ps(m, m, 3), _mm_shuffle_ps(sy, sy, 3), mins);
        acc = accumulate_four(acc, _mm_mul_ps(_mm256_castps256_ps128(xs), _mm256_castps256_ps128(ys)), sums);
    }
    for (; ib < n_blocks; ++ib) {
        mins = _mm_fmadd_ss(_mm_set_ss(fp16_to_float(x[ib].m)), _mm_set_ss(fp16_to_float(y[ib].s)), mins);
        const __m256 scale = _mm256_set1_ps(fp16_to_float(x[ib].d) * fp16_to_float(y[ib].d));
        acc = _mm256_fmadd_ps(scale, lane_sums(q4_1_weights(&x[ib]), _mm256_loadu_si256((const __m256i *)y[ib].qs)),
                              acc);
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
    /* The scale words of four 34-byte blocks: words 0, 17, 34, 51. */
    const __m512i scale_words = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                 0, 0, 0, 0, 51, 34, 17, 0);

    __m256 acc = _mm256_setzero_ps();
    int ib = 0;
    /* Four blocks span 136 bytes, the scale loads 128: inside the row. */
    for (; ib + 4 <= n_blocks; ib += 4) {
        __m256 sums[4];
        for (int k = 0; k < 4; k++) {
            sums[k] = signed_lane_sums(x[ib + k].qs, y[ib + k].qs);
        }
        const __m128 xd = _mm256_castps256_ps128(gather_halves((const uint8_t *)(x + ib), scale_words));
        const __m128 yd = _mm256_castps256_ps128(gather_halves((const uint8_t *)(y + ib), scale_words));
        acc = accumulate_four(acc, _mm_mul_ps(xd, yd), sums);
    }
    for (; ib < n_blocks; ++ib) {
        const __m256 scale = _mm256_set1_ps(fp16_to_float(x[ib].d) * fp16_to_float(y[ib].d));
        acc = _mm256_fmadd_ps(scale, signed_lane_sums(x[ib].qs, y[ib].qs), acc);
    }
    *s = sum_of_lanes(acc);
}

#endif
