/*
 * Lugh's matrix products for prompts on x86: Q4_1 weights times Q8_1
 * activations, and Q8_0 or Q5_0 weights times Q8_0 activations, the ones a
 * prompt on the test models spends its time in.
 *
 * ggml computes them one output at a time (Q4_1: a vec_dot of one weight
 * row and one activation column each, unpacking the weight block again for
 * every column) or in llamafile's tinyBLAS tiles (Q8_0, Q5_0: 256-bit
 * vectors, two sign instructions per block product, every scale converted
 * again in every tile). Here a tile of two weight rows by eight activation
 * columns is computed together in 512-bit vectors: each weight block is
 * unpacked once for eight columns, and the activations are prepared once per
 * column group (paired, offset, their scales converted and spread) for
 * every weight row that meets them. A single column (a decode step) is split
 * between the threads in even shares of rows, each output Lugh's streaming
 * vec_dot (x86_vec_dot.c); that part needs no AVX-512 and runs on every x86
 * processor, with ggml's own vec_dot where Lugh's are not compiled.
 *
 * Every output is still exactly what ggml computes, bit for bit: its own
 * 8-lane float accumulator, one fused multiply-add per block in block order
 * with the product of the two scales, the same exact integer lane sums
 * (4 byte products a lane), the Q4_1 min * sum chain, and ggml's horizontal
 * sum at the end. ggml's vec_dot and tinyBLAS agree on all of that for Q8_0
 * and Q5_0, so which of the two ggml would have used does not matter. Tiling
 * changes which outputs are computed side by side, never the operations
 * inside one. The activations must be ggml's own quantized ones, whose bytes
 * are never -128 (where ggml's sign trick wraps and an exact product does
 * not).
 *
 * build.rs compiles ggml's llamafile/sgemm.cpp with llamafile_sgemm renamed
 * to lugh_llamafile_sgemm; ggml's matrix product calls the llamafile_sgemm
 * below, which takes these three pairs and hands every other request to
 * ggml's.
 */
#include <stdbool.h>

#include "ggml-cpu-impl.h"
#include "ggml-cpu.h"
#include "x86_kernels.h"

bool lugh_llamafile_sgemm(const struct ggml_compute_params *params, int64_t m, int64_t n, int64_t k, const void *A,
                          int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc, int Atype, int Btype,
                          int Ctype);
bool llamafile_sgemm(const struct ggml_compute_params *params, int64_t m, int64_t n, int64_t k, const void *A,
                     int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc, int Atype, int Btype, int Ctype);
bool lugh_x86_gemm(int ith, int nth, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, const void *B,
                   int64_t ldb, float *C, int64_t ldc, int Atype, int Btype);
bool lugh_x86_gemm_built(void);

/* Q6_K (times Q8_K) is taken for one column only: the dot product is
 * ggml's, the split of rows between threads this file's (ggml hands out
 * 16-row chunks of a Q6_K product one by one; a Q4_K_M file's output
 * matrix is Q6_K). */
typedef enum { WEIGHTS_Q4_1, WEIGHTS_Q8_0, WEIGHTS_Q5_0, WEIGHTS_Q6_K } weights_type;

static inline size_t weight_block_bytes(weights_type type) {
    switch (type) {
    case WEIGHTS_Q4_1:
        return sizeof(q4_1_block);
    case WEIGHTS_Q8_0:
        return sizeof(q8_0_block);
    case WEIGHTS_Q5_0:
        return sizeof(q5_0_block);
    default:
        return sizeof(q6_K_block);
    }
}

static inline int64_t block_weights_count(weights_type type) {
    return type == WEIGHTS_Q6_K ? 256 : 32;
}

/* The activations: Q8_1 for Q4_1 weights, Q8_0 for the others. */
static inline size_t activation_block_bytes(weights_type type) {
    return type == WEIGHTS_Q4_1 ? sizeof(q8_1_block) : sizeof(q8_0_block);
}

static inline const void *block_at(const void *row, int64_t b, size_t bytes) {
    return (const char *)row + b * (int64_t)bytes;
}

/* Rows [i0, i1) of A times the single column y, one output at a time with
 * the vec_dot ggml's type-traits table holds for the weights (Lugh's, where
 * x86_vec_dot.c compiled them). */
static void rows_times_column(weights_type type, int64_t i0, int64_t i1, int64_t n_blocks, const void *A,
                              int64_t lda, const void *y, float *c) {
    const enum ggml_type weights = type == WEIGHTS_Q4_1   ? GGML_TYPE_Q4_1
                                   : type == WEIGHTS_Q8_0 ? GGML_TYPE_Q8_0
                                   : type == WEIGHTS_Q5_0 ? GGML_TYPE_Q5_0
                                                          : GGML_TYPE_Q6_K;
    const ggml_vec_dot_t vec_dot = ggml_get_type_traits_cpu(weights)->vec_dot;
    const size_t x_bytes = weight_block_bytes(type);
    const int n = (int)(n_blocks * block_weights_count(type));
    for (int64_t i = i0; i < i1; i++) {
        vec_dot(n, c + i, 0, block_at(A, i * lda, x_bytes), 0, y, 0, 1);
    }
}

/* The weights type of a product this file computes, or false. */
static bool product_type(int Atype, int Btype, weights_type *type) {
    if (Atype == GGML_TYPE_Q4_1 && Btype == GGML_TYPE_Q8_1) {
        *type = WEIGHTS_Q4_1;
    } else if (Atype == GGML_TYPE_Q8_0 && Btype == GGML_TYPE_Q8_0) {
        *type = WEIGHTS_Q8_0;
    } else if (Atype == GGML_TYPE_Q5_0 && Btype == GGML_TYPE_Q8_0) {
        *type = WEIGHTS_Q5_0;
    } else if (Atype == GGML_TYPE_Q6_K && Btype == GGML_TYPE_Q8_K) {
        *type = WEIGHTS_Q6_K;
    } else {
        return false;
    }
    return true;
}

#ifdef LUGH_X86_AVX512

#include <pthread.h>
#include <stdlib.h>

enum {
    TILE_COLUMNS = 8,
    PAIRS = TILE_COLUMNS / 2,
    /* Weight rows are taken in chunks of about this many bytes, which stay
     * in the L2 cache while every column group passes over them. */
    CHUNK_BYTES = 256 * 1024,
};

/* An activation block's 32 signed bytes. */
static inline __m256i activation_bytes(weights_type type, const void *block) {
    const int8_t *qs = type == WEIGHTS_Q4_1 ? ((const q8_1_block *)block)->qs : ((const q8_0_block *)block)->qs;
    return _mm256_loadu_si256((const __m256i *)qs);
}

/* Every block type here begins with its fp16 scale d. */
static inline float block_scale(const void *block) {
    uint16_t d;
    memcpy(&d, block, sizeof d);
    return fp16_to_float(d);
}

/*
 * A column group, prepared once for every weight row that meets it: per
 * block b, the 32 activation bytes of each column pair in one vector
 * (pairs[PAIRS * b + p], column 2p in the low half), the pair's scales
 * spread over the same halves (scales[PAIRS * b + p]), and for Q4_1 the
 * eight columns' sum terms (sums[TILE_COLUMNS * b + j]).
 *
 * The integer dot products are VNNI's unsigned-by-signed byte products.
 * Q4_1's weights are unsigned nibbles, the activations the signed side. Q8_0
 * and Q5_0 weights are signed, so the activations are stored offset by 128
 * as unsigned bytes, and each weight block's 128 * (sum of its bytes) per
 * lane is taken off again: the lane sums stay the exact integers ggml
 * computes.
 */
typedef struct {
    __m512i *pairs;
    __m512 *scales;
    float *sums;
} column_group;

static inline __attribute__((always_inline)) void prepare_columns(weights_type type, const void *B, int64_t ldb,
                                                                  int64_t j, int64_t n_blocks, const column_group *g) {
    const size_t bytes = activation_block_bytes(type);
    const __m512i offset = _mm512_set1_epi8(type == WEIGHTS_Q4_1 ? 0 : (char)0x80);
    for (int64_t b = 0; b < n_blocks; b++) {
        for (int p = 0; p < PAIRS; p++) {
            const void *low = block_at(B, (j + 2 * p) * ldb + b, bytes);
            const void *high = block_at(B, (j + 2 * p + 1) * ldb + b, bytes);
            const __m512i pair = _mm512_inserti64x4(_mm512_castsi256_si512(activation_bytes(type, low)),
                                                    activation_bytes(type, high), 1);
            _mm512_store_si512(&g->pairs[PAIRS * b + p], _mm512_xor_si512(pair, offset));
            const __m512d low_scale = _mm512_castps_pd(_mm512_set1_ps(block_scale(low)));
            const __m256d high_scale = _mm256_castps_pd(_mm256_set1_ps(block_scale(high)));
            g->scales[PAIRS * b + p] = _mm512_castpd_ps(_mm512_insertf64x4(low_scale, high_scale, 1));
            if (type == WEIGHTS_Q4_1) {
                g->sums[TILE_COLUMNS * b + 2 * p] = fp16_to_float(((const q8_1_block *)low)->s);
                g->sums[TILE_COLUMNS * b + 2 * p + 1] = fp16_to_float(((const q8_1_block *)high)->s);
            }
        }
    }
}

/* A weight block's 32 weights in ggml's order (Q4_1 and Q5_0: the low
 * nibbles, then the high ones): unsigned for Q4_1, signed for the others. */
static inline __m256i block_weights(weights_type type, const void *block) {
    if (type == WEIGHTS_Q4_1) {
        return nibbles(((const q4_1_block *)block)->qs);
    }
    if (type == WEIGHTS_Q8_0) {
        return _mm256_loadu_si256((const __m256i *)((const q8_0_block *)block)->qs);
    }
    const q5_0_block *q5 = block;
    uint32_t fifth_bits;
    memcpy(&fifth_bits, q5->qh, sizeof fifth_bits);
    /* nibble + 16 * fifth bit - 16: the nibble, with -16 where the bit is clear */
    const __m256i low_bits = nibbles(q5->qs);
    return _mm256_mask_blend_epi8(fifth_bits, _mm256_sub_epi8(low_bits, _mm256_set1_epi8(16)), low_bits);
}

/* `rows` (1 or 2) weight rows x times the column group g: the outputs
 * c[j * ldc + r]. Each half of acc[r][p] is what ggml keeps in its 8-lane
 * accumulator for row r and column 2p (low) or 2p+1 (high). */
static inline __attribute__((always_inline)) void tile(weights_type type, const int rows, const void *const x[2],
                                                        const column_group *g, int64_t n_blocks, float *c,
                                                        int64_t ldc) {
    const size_t bytes = weight_block_bytes(type);
    __m512 acc[2][PAIRS];
    __m256 mins[2];
    for (int r = 0; r < rows; r++) {
        for (int p = 0; p < PAIRS; p++) {
            acc[r][p] = _mm512_setzero_ps();
        }
        mins[r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n_blocks; b++) {
        for (int r = 0; r < rows; r++) {
            const void *block = block_at(x[r], b, bytes);
            const __m512i w = _mm512_broadcast_i64x4(block_weights(type, block));
            /* signed weights: the activations' offset of 128, taken off */
            const __m512i start =
                type == WEIGHTS_Q4_1
                    ? _mm512_setzero_si512()
                    : _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w));
            const __m512 d = _mm512_set1_ps(block_scale(block));
            if (type == WEIGHTS_Q4_1) {
                /* ggml: summs += m * s, contracted to a fused multiply-add */
                const __m256 m = _mm256_set1_ps(fp16_to_float(((const q4_1_block *)block)->m));
                mins[r] = _mm256_fmadd_ps(m, _mm256_loadu_ps(g->sums + TILE_COLUMNS * b), mins[r]);
            }
            for (int p = 0; p < PAIRS; p++) {
                const __m512i pair = g->pairs[PAIRS * b + p];
                const __m512i lane_sums =
                    type == WEIGHTS_Q4_1 ? _mm512_dpbusd_epi32(start, w, pair) : _mm512_dpbusd_epi32(start, pair, w);
                /* ggml: the product of the two scales, then acc = d * lane sums + acc */
                const __m512 scale = _mm512_mul_ps(d, g->scales[PAIRS * b + p]);
                acc[r][p] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(lane_sums), acc[r][p]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        float min_sums[TILE_COLUMNS];
        _mm256_storeu_ps(min_sums, mins[r]);
        for (int j = 0; j < TILE_COLUMNS; j++) {
            const __m512 pair = acc[r][j / 2];
            const __m256 half = (j % 2) == 0 ? _mm512_castps512_ps256(pair)
                                             : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pair), 1));
            c[j * ldc + r] = type == WEIGHTS_Q4_1 ? sum_of_lanes(half) + min_sums[j] : sum_of_lanes(half);
        }
    }
}

/* Each thread's column group storage, kept for the thread's life and grown
 * as rows get longer: no allocation in a prompt once it has run once. */
static pthread_key_t scratch_key;
static bool scratch_key_made;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

typedef struct {
    size_t blocks;
    column_group group;
} scratch;

static void free_scratch(void *p) {
    scratch *s = p;
    if (s) {
        free(s->group.pairs);
        free(s->group.scales);
        free(s->group.sums);
        free(s);
    }
}

static void make_scratch_key(void) {
    scratch_key_made = pthread_key_create(&scratch_key, free_scratch) == 0;
}

/* The calling thread's column group for rows of n_blocks, or NULL where
 * memory is short (ggml's kernels then do the product). */
static const column_group *thread_column_group(int64_t n_blocks) {
    pthread_once(&scratch_once, make_scratch_key);
    if (!scratch_key_made) {
        return NULL;
    }
    scratch *s = pthread_getspecific(scratch_key);
    if (s && s->blocks >= (size_t)n_blocks) {
        return &s->group;
    }
    free_scratch(s);
    pthread_setspecific(scratch_key, NULL);
    s = calloc(1, sizeof *s);
    if (!s) {
        return NULL;
    }
    const size_t vectors = (size_t)n_blocks * PAIRS;
    s->blocks = (size_t)n_blocks;
    s->group.pairs = aligned_alloc(64, vectors * sizeof(__m512i));
    s->group.scales = aligned_alloc(64, vectors * sizeof(__m512));
    s->group.sums = malloc((size_t)n_blocks * TILE_COLUMNS * sizeof(float));
    if (!s->group.pairs || !s->group.scales || !s->group.sums || pthread_setspecific(scratch_key, s) != 0) {
        free_scratch(s);
        return NULL;
    }
    return &s->group;
}

/* Thread ith of nth's rows of C, in chunks of rows, column groups, tiles. */
static inline __attribute__((always_inline)) void gemm(weights_type type, const column_group *g, int ith, int nth,
                                                        int64_t m, int64_t n, int64_t n_blocks, const void *A,
                                                        int64_t lda, const void *B, int64_t ldb, float *C,
                                                        int64_t ldc) {
    const size_t x_bytes = weight_block_bytes(type), y_bytes = activation_block_bytes(type);
    const int64_t first = m * ith / nth, end = m * (ith + 1) / nth;
    int64_t chunk_rows = CHUNK_BYTES / (n_blocks * (int64_t)x_bytes);
    chunk_rows = chunk_rows < 2 ? 2 : chunk_rows & ~(int64_t)1;
    const int64_t grouped = n - n % TILE_COLUMNS;
    for (int64_t chunk = first; chunk < end; chunk += chunk_rows) {
        const int64_t chunk_end = chunk + chunk_rows < end ? chunk + chunk_rows : end;
        for (int64_t j = 0; j < grouped; j += TILE_COLUMNS) {
            prepare_columns(type, B, ldb, j, n_blocks, g);
            int64_t i = chunk;
            for (; i + 2 <= chunk_end; i += 2) {
                const void *const x[2] = {block_at(A, i * lda, x_bytes), block_at(A, (i + 1) * lda, x_bytes)};
                tile(type, 2, x, g, n_blocks, C + j * ldc + i, ldc);
            }
            if (i < chunk_end) {
                const void *const x[2] = {block_at(A, i * lda, x_bytes), block_at(A, i * lda, x_bytes)};
                tile(type, 1, x, g, n_blocks, C + j * ldc + i, ldc);
            }
        }
        /* the last n % TILE_COLUMNS columns, one output at a time */
        for (int64_t j = grouped; j < n; j++) {
            rows_times_column(type, chunk, chunk_end, n_blocks, A, lda, block_at(B, j * ldb, y_bytes), C + j * ldc);
        }
    }
}

#endif

/* Thread ith of nth computes its share of C's rows, llamafile_sgemm's way:
 * C is column-major (C[j * ldc + i] is row i of A times column j of B), k
 * counts blocks, A's rows are lda blocks apart and B's columns ldb. False
 * where the types or sizes are not this file's: one column is taken on
 * every x86 processor, eight or more where the tiles were compiled. */
bool lugh_x86_gemm(int ith, int nth, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, const void *B,
                   int64_t ldb, float *C, int64_t ldc, int Atype, int Btype) {
    weights_type type;
    if (!product_type(Atype, Btype, &type) || k <= 0) {
        return false;
    }
    if (n == 1) {
        /* one long run of rows per thread */
        rows_times_column(type, m * ith / nth, m * (ith + 1) / nth, k, A, lda, B, C);
        return true;
    }
#ifdef LUGH_X86_AVX512
    const column_group *g = n >= TILE_COLUMNS && type != WEIGHTS_Q6_K ? thread_column_group(k) : NULL;
    if (!g) {
        return false;
    }
    if (type == WEIGHTS_Q4_1) {
        gemm(WEIGHTS_Q4_1, g, ith, nth, m, n, k, A, lda, B, ldb, C, ldc);
    } else if (type == WEIGHTS_Q8_0) {
        gemm(WEIGHTS_Q8_0, g, ith, nth, m, n, k, A, lda, B, ldb, C, ldc);
    } else {
        gemm(WEIGHTS_Q5_0, g, ith, nth, m, n, k, A, lda, B, ldb, C, ldc);
    }
    return true;
#else
    (void)ldb, (void)ldc;
    return false;
#endif
}

bool lugh_x86_gemm_built(void) {
#ifdef LUGH_X86_AVX512
    return true;
#else
    return false;
#endif
}

bool llamafile_sgemm(const struct ggml_compute_params *params, int64_t m, int64_t n, int64_t k, const void *A,
                     int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc, int Atype, int Btype, int Ctype) {
    /* One column, a decode step: each thread takes an even share of the
     * rows, one output at a time (Lugh's streaming vec_dot). ggml hands out
     * 64-row chunks one by one, and every chunk starts a new memory stream;
     * one long stream per thread took 18-26% off a decode step on the test
     * models. Two to seven columns stay with ggml. */
    if (Ctype == GGML_TYPE_F32 &&
        lugh_x86_gemm(params->ith, params->nth, m, n, k, A, lda, B, ldb, C, ldc, Atype, Btype)) {
        return true;
    }
    return lugh_llamafile_sgemm(params, m, n, k, A, lda, B, ldb, C, ldc, Atype, Btype, Ctype);
}
