/* quant: GGUF block-quantized types, laid out bit for bit as llama.cpp
 * stores them (ggml-common.h), and their kernels on the precise path:
 * each block is dequantized to float32 exactly as ggml-quants.c does
 * (dequantize_row_*), then dotted with float32 activations. No activation
 * is ever rounded to a lower precision.
 *
 * A block's fp16 fields are little-endian IEEE half floats. Blocks are
 * read in place from the file map; every block size is even, so blocks
 * of a 2-aligned tensor stay 2-aligned. */
#ifndef LILAC_KERNELS_CPU_QUANT_H
#define LILAC_KERNELS_CPU_QUANT_H

#include <stdint.h>

#define LILAC_QK8_0 32
#define LILAC_QK4_0 32
#define LILAC_QK_K 256
#define LILAC_K_SCALE_SIZE 12

/* Q8_0: value = qs[i] * d. */
typedef struct block_q8_0 {
    uint16_t d; /* fp16 */
    int8_t qs[LILAC_QK8_0];
} block_q8_0;

/* Q4_0: byte j holds value j in its low nibble and value j + 16 in its
 * high nibble; value = (q - 8) * d. */
typedef struct block_q4_0 {
    uint16_t d; /* fp16 */
    uint8_t qs[LILAC_QK4_0 / 2];
} block_q4_0;

/* Q4_K: 8 groups of 32 values with 6-bit scales and mins (packed in
 * `scales`, see lilac_kq_scale_min). Four runs of 32 bytes: each run's low
 * nibbles are group 2j, its high nibbles group 2j + 1.
 * value = d * sc * q - dmin * m. */
typedef struct block_q4_K {
    uint16_t d;    /* fp16, super-block scale of the scales */
    uint16_t dmin; /* fp16, super-block scale of the mins */
    uint8_t scales[LILAC_K_SCALE_SIZE];
    uint8_t qs[LILAC_QK_K / 2];
} block_q4_K;

/* Q5_K: Q4_K plus a fifth bit per value: bit 2j of qh[l] is the high bit of
 * value l of group 2j, bit 2j + 1 that of value l of group 2j + 1. */
typedef struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[LILAC_K_SCALE_SIZE];
    uint8_t qh[LILAC_QK_K / 8];
    uint8_t qs[LILAC_QK_K / 2];
} block_q5_K;

/* Q6_K: two halves of 128 values, each from 64 bytes of ql (low 4 bits)
 * and 32 of qh (high 2 bits); 16 groups of 16 with int8 scales.
 * value = d * sc * (q - 32). */
typedef struct block_q6_K {
    uint8_t ql[LILAC_QK_K / 2];
    uint8_t qh[LILAC_QK_K / 4];
    int8_t scales[LILAC_QK_K / 16];
    uint16_t d; /* fp16 */
} block_q6_K;

/* A block_q6_K's unsigned 6-bit quants (value + 32) in value order
 * (qfast_scalar.c; the 16-row repacking reads them too). */
void lilac_q6_K_quants(const block_q6_K *b, uint8_t q[256]);

_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes");
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K is 144 bytes");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K is 176 bytes");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K is 210 bytes");

/* Scale and min of group j (0..7) of a Q4_K/Q5_K block: ggml's
 * get_scale_min_k4. Groups 0-3 are the low 6 bits of bytes j and j + 4;
 * groups 4-7 take their low 4 bits from byte j + 4's nibbles and their top
 * 2 bits from the spare top bits of bytes j - 4 and j. */
static inline void lilac_kq_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* All eight scales and mins of a block. */
static inline void lilac_kq_scales(const uint8_t q[LILAC_K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 8; j++)
        lilac_kq_scale_min(j, q, &sc[j], &m[j]);
}

/* Dequantize a row of n values (a whole number of blocks) to float32,
 * bit for bit as llama.cpp does. */
void lilac_dequant_q8_0(const void *row, float *out, int64_t n);
void lilac_dequant_q4_0(const void *row, float *out, int64_t n);
void lilac_dequant_q4_K(const void *row, float *out, int64_t n);
void lilac_dequant_q5_K(const void *row, float *out, int64_t n);
void lilac_dequant_q6_K(const void *row, float *out, int64_t n);

/* dot(row, x) over n values: the scalar oracles, each block dequantized as
 * above and dotted with x in float32. No allocation. */
float lilac_dot_q8_0_scalar(const void *row, const float *x, int64_t n);
float lilac_dot_q4_0_scalar(const void *row, const float *x, int64_t n);
float lilac_dot_q4_K_scalar(const void *row, const float *x, int64_t n);
float lilac_dot_q5_K_scalar(const void *row, const float *x, int64_t n);
float lilac_dot_q6_K_scalar(const void *row, const float *x, int64_t n);

#if defined(LILAC_X86)
/* AVX2 + FMA + F16C: the same dequantized values, accumulated in eight
 * lanes. Call only where the CPU has those features. */
float lilac_dot_q8_0_avx2(const void *row, const float *x, int64_t n);
float lilac_dot_q4_0_avx2(const void *row, const float *x, int64_t n);
float lilac_dot_q4_K_avx2(const void *row, const float *x, int64_t n);
float lilac_dot_q5_K_avx2(const void *row, const float *x, int64_t n);
float lilac_dot_q6_K_avx2(const void *row, const float *x, int64_t n);
#endif

#endif
