/*
 * What Lugh's x86 kernels share (x86_vec_dot.c, x86_gemm.c): ggml's
 * block layouts and the pieces of ggml's AVX2 dot products whose integer and
 * float operations the kernels repeat exactly. LUGH_X86_AVX512 is set, and
 * the rest defined, where the compiler targets AVX-512 F/BW/VL/VNNI with F16C
 * and FMA; elsewhere the kernels hand over to ggml's own.
 */
#ifndef LUGH_X86_KERNELS_H
#define LUGH_X86_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ggml's block layouts (ggml-common.h), restated: 32 weights a block, fp16
 * scales first. */
typedef struct {
    uint16_t d, m; /* scale and minimum */
    uint8_t qs[16];
} q4_1_block;
typedef struct {
    uint16_t d, s; /* scale, and scale times the sum of qs */
    int8_t qs[32];
} q8_1_block;
typedef struct {
    uint16_t d;
    int8_t qs[32];
} q8_0_block;
typedef struct {
    uint16_t d;
    uint8_t qh[4]; /* the fifth bit of each weight */
    uint8_t qs[16];
} q5_0_block;

/* The K-quants: 256 weights a superblock. Q8_K, the activations, keeps a
 * float scale and the sums of each 16 of its bytes. Q4_Kx8 is ggml's
 * repacked layout of eight Q4_K rows (repack.h's block_q4_Kx8): their
 * scales side by side, each 12-byte group of `scales` one sub-block's eight
 * 6-bit scales and mins, and `qs` in 8-byte runs of the eight rows in turn. */
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} q8_K_block;
typedef struct {
    uint8_t ql[128]; /* the low four bits */
    uint8_t qh[64];  /* the high two bits */
    int8_t scales[16];
    uint16_t d;
} q6_K_block;
typedef struct {
    uint16_t d[8], dmin[8];
    uint8_t scales[96];
    uint8_t qs[1024];
} q4_K_x8_block;

/* Four Q8_K rows as ggml's repacked matrix product reads them (repack.h's
 * block_q8_Kx4): their scales, their bytes in 8-byte runs of the four rows
 * in turn, and per 64 bytes of a row the four rows' four 16-byte sums. */
typedef struct {
    float d[4];
    int8_t qs[1024];
    int16_t bsums[64];
} q8_K_x4_block;

_Static_assert(sizeof(q8_K_x4_block) == 1168, "block_q8_Kx4 is 1168 bytes");
_Static_assert(sizeof(q8_K_block) == 292, "block_q8_K is 292 bytes");
_Static_assert(sizeof(q6_K_block) == 210, "block_q6_K is 210 bytes");
_Static_assert(sizeof(q4_K_x8_block) == 1152, "block_q4_Kx8 is 1152 bytes");
_Static_assert(sizeof(q4_1_block) == 20, "block_q4_1 is 20 bytes");
_Static_assert(sizeof(q8_1_block) == 36, "block_q8_1 is 36 bytes");
_Static_assert(sizeof(q8_0_block) == 34, "block_q8_0 is 34 bytes");
_Static_assert(sizeof(q5_0_block) == 22, "block_q5_0 is 22 bytes");

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__) && defined(__FMA__)
#define LUGH_X86_AVX512 1
#include <immintrin.h>

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

/* 32 weights packed as nibbles, as bytes 0..15: the low nibbles, then the
 * high ones (ggml's bytes_from_nibbles_32). */
static inline __m256i nibbles(const uint8_t packed_bytes[16]) {
    const __m128i packed = _mm_loadu_si128((const __m128i *)packed_bytes);
    return _mm256_and_si256(_mm256_set1_epi8(0x0F), _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed));
}

#endif
#endif
