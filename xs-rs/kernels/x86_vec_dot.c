/*
 * Lugh's replacements for three of ggml's x86 dot-product kernels, the ones a
 * decode step on the test models spends most of its time in: a row of Q4_1,
 * Q8_0 or Q5_0 weights times the quantized activations.
 *
 * They return exactly what ggml's AVX2 kernels return, bit for bit. Those
 * kernels accumulate block after block into one 8-lane float vector
 * (acc = d * lane_sums + acc, a fused multiply-add per block) and, for Q4_1,
 * a scalar sum of min * activation-sum products; the order and rounding of
 * those float operations is what fixes the logits, so it is kept here: one
 * fused multiply-add per block, in block order, on the same 8 lanes, and the
 * same horizontal sum. The integer dot products are computed as ggml computes
 * them. What changes is the scales: ggml converts each block's fp16 scales
 * with a table lookup apiece (four loads per Q4_1 block on top of the
 * block's own), while these kernels gather the scale words of four blocks
 * with one permutation and convert them with one instruction. In a decode
 * step the weights stream from memory once, and ggml's loop spends its time
 * on those loads.
 *
 * build.rs compiles ggml's arch/x86/quants.c with the three functions renamed
 * (ggml_vec_dot_q4_1_q8_1 -> lugh_ggml_vec_dot_q4_1_q8_1, and so on), so
 * that ggml's type-traits table takes these. Where the processor lacks the
 * AVX-512 parts used (BW, VL, VNNI), they call ggml's own.
 */
#include "x86_kernels.h"

#define VEC_DOT_ARGS int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc

/* ggml's kernels, renamed. */
void lugh_ggml_vec_dot_q4_1_q8_1(VEC_DOT_ARGS);
void lugh_ggml_vec_dot_q8_0_q8_0(VEC_DOT_ARGS);
void lugh_ggml_vec_dot_q5_0_q8_0(VEC_DOT_ARGS);
/* The names ggml's type-traits table calls. */
void ggml_vec_dot_q4_1_q8_1(VEC_DOT_ARGS);
void ggml_vec_dot_q8_0_q8_0(VEC_DOT_ARGS);
void ggml_vec_dot_q5_0_q8_0(VEC_DOT_ARGS);

#ifndef LUGH_X86_AVX512

void ggml_vec_dot_q4_1_q8_1(VEC_DOT_ARGS) {
    lugh_ggml_vec_dot_q4_1_q8_1(n, s, bs, vx, bx, vy, by, nrc);
}

void ggml_vec_dot_q8_0_q8_0(VEC_DOT_ARGS) {
    lugh_ggml_vec_dot_q8_0_q8_0(n, s, bs, vx, bx, vy, by, nrc);
}

void ggml_vec_dot_q5_0_q8_0(VEC_DOT_ARGS) {
    lugh_ggml_vec_dot_q5_0_q8_0(n, s, bs, vx, bx, vy, by, nrc);
}

#else

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

/* Eight fp16 words picked from the 64 bytes at p (indexes 0-31) and the 64
 * at p + second (indexes 32-63), as floats. */
static inline __m256 gather_halves(const void *p, int second, __m512i word_indexes) {
    const uint8_t *bytes = p;
    const __m512i words =
        _mm512_permutex2var_epi16(_mm512_loadu_si512(bytes), word_indexes, _mm512_loadu_si512(bytes + second));
    return _mm256_cvtph_ps(_mm512_castsi512_si128(words));
}

/* The 8 lane sums of unsigned x signed byte products, four a lane, as
 * floats: exact integers (|sum| < 2^24). */
static inline __m256 lane_sums(__m256i unsigned_bytes, __m256i signed_bytes) {
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), unsigned_bytes, signed_bytes));
}

/* ggml's mul_sum_i8_pairs_float: |x| times y with x's sign, so that the
 * unsigned-by-signed product gives x * y. */
static inline __m256 signed_lane_sums(__m256i qx, const int8_t *y) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y);
    return lane_sums(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
}

void ggml_vec_dot_q4_1_q8_1(VEC_DOT_ARGS) {
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
            sums[k] = lane_sums(nibbles(x[ib + k].qs), _mm256_loadu_si256((const __m256i *)y[ib + k].qs));
        }
        const __m256 xs =
            _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(x_scales, _mm512_loadu_si512(x + ib))));
        const __m256 ys = gather_halves(y + ib, 64, y_scales);
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
        acc = _mm256_fmadd_ps(scale, lane_sums(nibbles(x[ib].qs), _mm256_loadu_si256((const __m256i *)y[ib].qs)), acc);
    }
    *s = sum_of_lanes(acc) + _mm_cvtss_f32(mins);
}

/* The scale words of four Q8_0 blocks (34 bytes each, 136 in all) from the
 * 64 bytes at p and the 64 at p + 64: words 0, 17, 34 and 51. */
static inline __m128 q8_0_scales(const q8_0_block *blocks) {
    const __m512i words = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                           0, 0, 51, 34, 17, 0);
    return _mm256_castps256_ps128(gather_halves(blocks, 64, words));
}

/* The scale words of four Q5_0 blocks (22 bytes each, 88 in all) from the
 * 64 bytes at p and the 64 at p + 24: words 0, 11, 22, and the second
 * load's 21. */
static inline __m128 q5_0_scales(const q5_0_block *blocks) {
    const __m512i words = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                           0, 0, 53, 22, 11, 0);
    return _mm256_castps256_ps128(gather_halves(blocks, 24, words));
}

static inline __m256i q8_0_weights(const q8_0_block *block) {
    return _mm256_loadu_si256((const __m256i *)block->qs);
}

/* A Q5_0 block's weights as signed bytes: the four low bits from the
 * nibbles, with the high nibble set (minus 16) where the fifth bit is clear
 * (ggml's bytes_from_nibbles_32 or'd with its inverted bytes_from_bits_32). */
static inline __m256i q5_0_weights(const q5_0_block *block) {
    uint32_t fifth_bits;
    memcpy(&fifth_bits, block->qh, sizeof fifth_bits);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)fifth_bits),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit_set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                              _mm256_set1_epi64x(-1));
    return _mm256_or_si256(nibbles(block->qs), _mm256_andnot_si256(bit_set, _mm256_set1_epi8((char)0xF0)));
}

/* The loop of the Q8_0 and Q5_0 kernels, whose activations are Q8_0: four
 * blocks at a time while four remain (the scale loads stay inside them),
 * then one at a time. `weights` gives a block's signed bytes, `scales` four
 * blocks' scales. */
#define SIGNED_BLOCKS_DOT(weights, scales)                                                            \
    do {                                                                                            \
        __m256 acc = _mm256_setzero_ps();                                                           \
        int ib = 0;                                                                                 \
        for (; ib + 4 <= n_blocks; ib += 4) {                                                       \
            __m256 sums[4];                                                                         \
            for (int k = 0; k < 4; k++) {                                                           \
                sums[k] = signed_lane_sums(weights(&x[ib + k]), y[ib + k].qs);                      \
            }                                                                                       \
            acc = accumulate_four(acc, _mm_mul_ps(scales(x + ib), q8_0_scales(y + ib)), sums);     \
        }                                                                                           \
        for (; ib < n_blocks; ++ib) {                                                               \
            const __m256 scale = _mm256_set1_ps(fp16_to_float(x[ib].d) * fp16_to_float(y[ib].d));  \
            acc = _mm256_fmadd_ps(scale, signed_lane_sums(weights(&x[ib]), y[ib].qs), acc);         \
        }                                                                                           \
        *s = sum_of_lanes(acc);                                                                     \
    } while (0)

void ggml_vec_dot_q8_0_q8_0(VEC_DOT_ARGS) {
    (void)bs;
    (void)bx;
    (void)by;
    (void)nrc;
    const int n_blocks = n / 32;
    const q8_0_block *x = vx;
    const q8_0_block *y = vy;
    SIGNED_BLOCKS_DOT(q8_0_weights, q8_0_scales);
}

void ggml_vec_dot_q5_0_q8_0(VEC_DOT_ARGS) {
    (void)bs;
    (void)bx;
    (void)by;
    (void)nrc;
    const int n_blocks = n / 32;
    const q5_0_block *x = vx;
    const q8_0_block *y = vy;
    SIGNED_BLOCKS_DOT(q5_0_weights, q5_0_scales);
}

#endif
