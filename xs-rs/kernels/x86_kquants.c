/*
 * Lugh's replacements for ggml's x86 Q4_K repacked matrix products, the bulk
 * of a Q4_K_M file's work: eight interleaved Q4_K weight rows
 * (block_q4_Kx8) times one Q8_K column (gemv, a decode step) or times four
 * interleaved Q8_K rows (gemm, a prompt; block_q8_Kx4).
 *
 * Both return exactly what ggml's code returns, bit for bit. ggml's integer
 * sums are exact, so any order of the same integer products gives the same
 * integers; the float operations are kept as ggml does them, per output: the
 * gemv one fused multiply-add per superblock of its integer sum times (row
 * scale times activation scale), one for the mins times (row dmin times
 * activation scale), and their difference at the end; the gemm the same per
 * 64 weights (ggml's AVX-512 gemm accumulates per sub-block pair).
 *
 * What changes is the integer work: 512-bit VNNI byte products (vpdpbusd)
 * of a whole 64-byte run of the eight rows against 8 activation bytes
 * broadcast, instead of 256-bit maddubs/add chains with shuffles and blends
 * per 8 bytes, and each weight byte unpacked once for four activation rows
 * (gemm). On one core of a 2-core Intel Xeon (AVX-512 VNNI) the gemm is
 * 1.4 times as fast as ggml's and the gemv 1.4 times in cache; from memory
 * the gemv is bound by the memory's speed as ggml's is. Q6_K's dot product
 * is left to ggml: a 512-bit version was no faster (Intel runs 512-bit
 * integer work on two ports, 256-bit on three).
 *
 * build.rs compiles ggml's arch/x86/repack.cpp with the two renamed
 * (lugh_ggml_...), so that ggml's repacked tensors call these. Where the
 * processor lacks AVX-512 VNNI they call ggml's own.
 */
#include "x86_kernels.h"

#define GEMV_ARGS int n, float *s, size_t bs, const void *vx, const void *vy, int nr, int nc

/* ggml's kernels, renamed. */
void lugh_ggml_gemv_q4_K_8x8_q8_K(GEMV_ARGS);
void lugh_ggml_gemm_q4_K_8x8_q8_K(GEMV_ARGS);
/* The names ggml's tables call. */
void ggml_gemv_q4_K_8x8_q8_K(GEMV_ARGS);
void ggml_gemm_q4_K_8x8_q8_K(GEMV_ARGS);

#ifndef LUGH_X86_AVX512

void ggml_gemv_q4_K_8x8_q8_K(GEMV_ARGS) {
    lugh_ggml_gemv_q4_K_8x8_q8_K(n, s, bs, vx, vy, nr, nc);
}

void ggml_gemm_q4_K_8x8_q8_K(GEMV_ARGS) {
    lugh_ggml_gemm_q4_K_8x8_q8_K(n, s, bs, vx, vy, nr, nc);
}

#else

/* One sub-block's eight 6-bit scales and mins (one per row) from its 12
 * bytes, packed as Q4_K packs a superblock's: scales and mins of rows 0-3
 * in bytes 0-3 and 4-7, the low four bits of rows 4-7's in bytes 8-11 and
 * their high two bits in the top of bytes 0-7. */
static inline void q4_K_scales_and_mins(const uint8_t packed[12], uint8_t scales[8], uint8_t mins[8]) {
    uint32_t w[3];
    memcpy(w, packed, sizeof w);
    const uint32_t s_low = w[0] & 0x3f3f3f3f;
    const uint32_t s_high = (w[2] & 0x0f0f0f0f) | (((w[0] >> 6) & 0x03030303) << 4);
    const uint32_t m_low = w[1] & 0x3f3f3f3f;
    const uint32_t m_high = ((w[2] >> 4) & 0x0f0f0f0f) | (((w[1] >> 6) & 0x03030303) << 4);
    memcpy(scales, &s_low, 4);
    memcpy(scales + 4, &s_high, 4);
    memcpy(mins, &m_low, 4);
    memcpy(mins + 4, &m_high, 4);
}

/* Eight rows' scales spread over the lanes of their dot products (lanes 2r
 * and 2r+1: row r's), as int32 lanes: int16 pairs (scale, 0). */
static inline __m512i scales_of_lane_pairs(const uint8_t scales[8]) {
    const __m128i s = _mm_loadl_epi64((const __m128i *)scales);
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(s, s));
}

/* Per row, the sum of the two 32-bit lanes it has (2r, 2r+1). */
static inline __m256i sum_lane_pairs(__m512i lanes) {
    return _mm512_cvtepi64_epi32(_mm512_add_epi32(lanes, _mm512_srli_epi64(lanes, 32)));
}

/* acc + dots * scales, lane by lane: one sub-block's dot products (each
 * lane 16 products of a nibble and a byte, |sum| <= 16 * 15 * 128 < 2^15,
 * so its low int16 is the whole value) times the (scale, 0) int16 pairs. */
static inline __m512i scaled_sum(__m512i acc, __m512i dots, __m512i scales) {
    return _mm512_dpwssd_epi32(acc, dots, scales);
}

/* Eight Q4_K rows (one repacked group) times one Q8_K column: c[0..7]. */
static inline void q4_K_x8_times_column(int n_blocks, const q4_K_x8_block *x, const q8_K_block *y, float *c) {
    const __m512i low_nibble = _mm512_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps(), acc_mins = _mm256_setzero_ps();
    for (int b = 0; b < n_blocks; b++) {
        uint8_t scales[8][8], mins[8][8];
        for (int j = 0; j < 8; j++) {
            q4_K_scales_and_mins(x[b].scales + 12 * j, scales[j], mins[j]);
        }
        /* lanes 2r and 2r+1: row r's sum of scale * (sub-block dot product) */
        __m512i sums = _mm512_setzero_si512();
        for (int sb = 0; sb < 4; sb++) {
            const uint8_t *q = x[b].qs + 256 * sb;
            const int8_t *a = y[b].qs + 64 * sb;
            __m512i first = _mm512_setzero_si512(), second = _mm512_setzero_si512();
            for (int u = 0; u < 4; u++) {
                /* bytes 8u..8u+7 of each row's 32: weights 64sb+8u.. (low
                 * nibbles) and 64sb+32+8u.. (high) */
                const __m512i bits = _mm512_loadu_si512(q + 64 * u);
                /* the same bytes four superblocks on: a decode step streams
                 * the weights from memory once, and the hardware prefetcher
                 * alone leaves one core short of the memory's speed */
                _mm_prefetch((const char *)(q + 64 * u) + 4 * sizeof(q4_K_x8_block), _MM_HINT_T0);
                int64_t a_first, a_second;
                memcpy(&a_first, a + 8 * u, 8);
                memcpy(&a_second, a + 32 + 8 * u, 8);
                first = _mm512_dpbusd_epi32(first, _mm512_and_si512(bits, low_nibble), _mm512_set1_epi64(a_first));
                second = _mm512_dpbusd_epi32(second, _mm512_and_si512(_mm512_srli_epi16(bits, 4), low_nibble),
                                             _mm512_set1_epi64(a_second));
            }
            sums = scaled_sum(sums, first, scales_of_lane_pairs(scales[2 * sb]));
            sums = scaled_sum(sums, second, scales_of_lane_pairs(scales[2 * sb + 1]));
        }
        const __m256i row_sums = _mm512_cvtepi64_epi32(_mm512_add_epi32(sums, _mm512_srli_epi64(sums, 32)));
        /* the mins: per row, sum over sub-blocks of min * (sum of its 32
         * activations), the sub-block sums added in int16 as ggml does */
        const __m128i bsums_0 = _mm_loadu_si128((const __m128i *)y[b].bsums);
        const __m128i bsums_1 = _mm_loadu_si128((const __m128i *)(y[b].bsums + 8));
        int32_t sub_block_sums[4]; /* int16 pairs: sub-blocks 2p and 2p+1 */
        _mm_storeu_si128((__m128i *)sub_block_sums, _mm_hadd_epi16(bsums_0, bsums_1));
        __m256i min_sums = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            const __m128i pair = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)mins[2 * p]),
                                                   _mm_loadl_epi64((const __m128i *)mins[2 * p + 1]));
            const __m256i activation_pair = _mm256_set1_epi32(sub_block_sums[p]);
            min_sums = _mm256_add_epi32(min_sums, _mm256_madd_epi16(_mm256_cvtepu8_epi16(pair), activation_pair));
        }
        const __m256 y_scale = _mm256_set1_ps(y[b].d);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[b].d));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[b].dmin));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(row_sums), _mm256_mul_ps(d, y_scale), acc);
        acc_mins = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sums), _mm256_mul_ps(dmin, y_scale), acc_mins);
    }
    _mm256_storeu_ps(c, _mm256_sub_ps(acc, acc_mins));
}

void ggml_gemv_q4_K_8x8_q8_K(GEMV_ARGS) {
    /* ggml calls this with one column; anything else stays with ggml's */
    if (nr != 1) {
        lugh_ggml_gemv_q4_K_8x8_q8_K(n, s, bs, vx, vy, nr, nc);
        return;
    }
    const int n_blocks = n / 256;
    const q4_K_x8_block *x = vx;
    for (int g = 0; g < nc / 8; g++) {
        q4_K_x8_times_column(n_blocks, x + (size_t)g * n_blocks, vy, s + 8 * g);
    }
}

/*
 * Four Q8_K rows (one block_q8_Kx4 column) times two groups of eight Q4_K
 * rows (block_q4_Kx8; the same group twice when only one is left, the
 * second's outputs then unused): out[r * bs + j] for the 16 weight rows j.
 * ggml's AVX-512 gemm, per output: per 64 weights (a pair of sub-blocks) an
 * exact integer sum, scale times dot product over the pair, one fused
 * multiply-add of it times (row d times activation d) into the output's
 * accumulator, one of the pair's mins times activation sums times (row dmin
 * times activation d) into a second, and their difference at the end.
 */
static inline __attribute__((always_inline)) void q4_K_tile(int n_blocks, const q4_K_x8_block *x0,
                                                            const q4_K_x8_block *x1, const q8_K_x4_block *y,
                                                            float *out, size_t bs, int groups) {
    const __m512i low_nibble = _mm512_set1_epi8(0x0F);
    __m512 acc[4], acc_mins[4];
    for (int r = 0; r < 4; r++) {
        acc[r] = _mm512_setzero_ps();
        acc_mins[r] = _mm512_setzero_ps();
    }
    for (int b = 0; b < n_blocks; b++) {
        const q4_K_x8_block *x[2] = {x0 + b, x1 + b};
        uint8_t scales[2][8][8], mins[2][8][8];
        for (int g = 0; g < 2; g++) {
            for (int j = 0; j < 8; j++) {
                q4_K_scales_and_mins(x[g]->scales + 12 * j, scales[g][j], mins[g][j]);
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)x[0]->d)), _mm_loadu_si128((const __m128i *)x[1]->d), 1));
        const __m512 dmin = _mm512_cvtph_ps(
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)x[0]->dmin)),
                                    _mm_loadu_si128((const __m128i *)x[1]->dmin), 1));
        const q8_K_x4_block *a = y + b;
        for (int sb = 0; sb < 4; sb++) {
            /* [row][group]: the two sub-blocks' dot products, lanes 2j and 2j+1 weight row j's */
            __m512i first[4][2], second[4][2];
            for (int r = 0; r < 4; r++) {
                for (int g = 0; g < 2; g++) {
                    first[r][g] = _mm512_setzero_si512();
                    second[r][g] = _mm512_setzero_si512();
                }
            }
            for (int u = 0; u < 4; u++) {
                __m512i low[2], high[2];
                for (int g = 0; g < 2; g++) {
                    const __m512i bits = _mm512_loadu_si512(x[g]->qs + 256 * sb + 64 * u);
                    low[g] = _mm512_and_si512(bits, low_nibble);
                    high[g] = _mm512_and_si512(_mm512_srli_epi16(bits, 4), low_nibble);
                }
                for (int r = 0; r < 4; r++) {
                    /* row r's bytes 64sb+8u.. and 64sb+32+8u.. (8-byte runs k at 32k + 8r) */
                    int64_t a_first, a_second;
                    memcpy(&a_first, a->qs + 32 * (8 * sb + u) + 8 * r, 8);
                    memcpy(&a_second, a->qs + 32 * (8 * sb + 4 + u) + 8 * r, 8);
                    const __m512i af = _mm512_set1_epi64(a_first), as = _mm512_set1_epi64(a_second);
                    for (int g = 0; g < 2; g++) {
                        first[r][g] = _mm512_dpbusd_epi32(first[r][g], low[g], af);
                        second[r][g] = _mm512_dpbusd_epi32(second[r][g], high[g], as);
                    }
                }
            }
            __m512i scale_first[2], scale_second[2];
            __m256i min_pairs[2];
            for (int g = 0; g < 2; g++) {
                scale_first[g] = scales_of_lane_pairs(scales[g][2 * sb]);
                scale_second[g] = scales_of_lane_pairs(scales[g][2 * sb + 1]);
                min_pairs[g] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)mins[g][2 * sb]),
                                                                      _mm_loadl_epi64((const __m128i *)mins[g][2 * sb + 1])));
            }
            const __m512i mins_512 = _mm512_inserti64x4(_mm512_castsi256_si512(min_pairs[0]), min_pairs[1], 1);
            for (int r = 0; r < 4; r++) {
                __m256i sums[2];
                for (int g = 0; g < 2; g++) {
                    sums[g] = sum_lane_pairs(scaled_sum(scaled_sum(_mm512_setzero_si512(), first[r][g], scale_first[g]), second[r][g],
                                                        scale_second[g]));
                }
                const __m512i ints = _mm512_inserti64x4(_mm512_castsi256_si512(sums[0]), sums[1], 1);
                /* the activation sums of the two sub-blocks, added in int16 as ggml does */
                const int16_t *bsums = a->bsums + 16 * sb + 4 * r;
                const uint16_t sum_first = (uint16_t)((uint16_t)bsums[0] + (uint16_t)bsums[1]);
                const uint16_t sum_second = (uint16_t)((uint16_t)bsums[2] + (uint16_t)bsums[3]);
                const __m512i activation_pair = _mm512_set1_epi32((int)((uint32_t)sum_first | ((uint32_t)sum_second << 16)));
                const __m512i min_sums = _mm512_madd_epi16(activation_pair, mins_512);
                const __m512 y_scale = _mm512_set1_ps(a->d[r]);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), _mm512_mul_ps(d, y_scale), acc[r]);
                acc_mins[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(min_sums), _mm512_mul_ps(dmin, y_scale), acc_mins[r]);
            }
        }
    }
    for (int r = 0; r < 4; r++) {
        const __m512 result = _mm512_sub_ps(acc[r], acc_mins[r]);
        if (groups == 2) {
            _mm512_storeu_ps(out + r * bs, result);
        } else {
            _mm256_storeu_ps(out + r * bs, _mm512_castps512_ps256(result));
        }
    }
}

void ggml_gemm_q4_K_8x8_q8_K(GEMV_ARGS) {
    const int n_blocks = n / 256;
    const q4_K_x8_block *x = vx;
    const q8_K_x4_block *y = vy;
    const int n_groups = nc / 8;
    for (int row = 0; row + 4 <= nr; row += 4) {
        const q8_K_x4_block *a = y + (size_t)(row / 4) * n_blocks;
        float *out = s + (size_t)row * bs;
        int g = 0;
        for (; g + 2 <= n_groups; g += 2) {
            q4_K_tile(n_blocks, x + (size_t)g * n_blocks, x + (size_t)(g + 1) * n_blocks, a, out + 8 * g, bs, 2);
        }
        if (g < n_groups) {
            q4_K_tile(n_blocks, x + (size_t)g * n_blocks, x + (size_t)g * n_blocks, a, out + 8 * g, bs, 1);
        }
    }
}

#endif
