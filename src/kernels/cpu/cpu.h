/* cpu: the CPU kernels. Each has a plain scalar version (the oracle for the
 * tests) and SIMD versions picked at run time from the CPU's features. */
#ifndef LILAC_KERNELS_CPU_H
#define LILAC_KERNELS_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/attn.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/qfast.h"
#include "kernels/cpu/qr16.h"
#include "kernels/mat.h"
#include "util/pool.h"

/* dot(row of `type`, x) over n values, accumulated in float32. */
typedef float (*lilac_dot_fn)(const void *row, const float *x, int64_t n);

/* y[i] += a * x[i] for i < n. */
typedef void (*lilac_axpy_fn)(float *y, float a, const float *x, int64_t n);

typedef struct lilac_cpu_kernels {
    const char *name; /* "scalar", "avx2", ... */
    lilac_dot_fn dot_f32, dot_f16, dot_bf16;
    lilac_axpy_fn axpy_f32; /* attention's weighted sum of values */
    /* Attention over a KV cache of float32 / IEEE half (kernels/cpu/attn.h). */
    lilac_attn_fn attn_f32, attn_f16;
    /* Small dense float32 products (kernels/cpu/gemm.h): the DeltaNet chunk. */
    lilac_gemm_f32_fn gemm_f32;
    /* GGUF block types (kernels/cpu/quant.h): float32 x against the
     * dequantized weights. */
    lilac_dot_fn dot_q8_0, dot_q4_0, dot_q4_K, dot_q5_K, dot_q6_K;
    /* The fast path of the same types (kernels/cpu/qfast.h): activations
     * quantized to two int8 terms per value, integer dot products. */
    lilac_qx_quantize_fn qx_quantize;
    lilac_qdot_fn qdot_q8_0, qdot_q4_0, qdot_q4_K, qdot_q5_K, qdot_q6_K;
    /* Their LILAC_QDOT_NT-row versions, bitwise the same; NULL where a
     * set has none (the single-row dot then runs per row). */
    lilac_qdotn_fn qdotn_q4_K, qdotn_q6_K;
    /* The 16-row interleaved kernels (kernels/cpu/qr16.h), NULL where a set
     * has none (the model then keeps its Q4_K / Q6_K matrices as they are). */
    lilac_qr16_fn qr16_q4_K, qr16_q6_K;
    /* lilac_matmul takes the fast path for the block types when set. The
     * sets below leave it off (precise); a model copies its set and turns
     * it on unless lilac_model_params.precise (lilac_cpu_with). */
    bool fast;
} lilac_cpu_kernels;

extern const lilac_cpu_kernels lilac_cpu_scalar;
#if defined(LILAC_X86)
extern const lilac_cpu_kernels lilac_cpu_avx2;
extern const lilac_cpu_kernels lilac_cpu_avx512; /* F, BW, VL, DQ + VNNI */
#endif
#if defined(__aarch64__)
extern const lilac_cpu_kernels lilac_cpu_neon; /* NEON + dotprod */
bool lilac_cpu_neon_dotprod(void);             /* whether this CPU has sdot */
#endif

/* The best set this CPU runs. LILAC_CPU_KERNELS=scalar|avx2|avx512|neon
 * forces one (or the best this CPU has below it). */
const lilac_cpu_kernels *lilac_cpu_best(void);
/* Whether this CPU runs a set (by pointer). */
bool lilac_cpu_runs(const lilac_cpu_kernels *k);
/* A copy of k on the fast (fast = true) or precise path. */
static inline lilac_cpu_kernels lilac_cpu_with(const lilac_cpu_kernels *k, bool fast)
{
    lilac_cpu_kernels c = *k;
    c.fast = fast;
    return c;
}
/* The dot product for a type in a set, or NULL when it has none. */
lilac_dot_fn lilac_cpu_dot_for(const lilac_cpu_kernels *k, int type);
/* The fast-path dot product for a block type, or NULL (unquantized types). */
lilac_qdot_fn lilac_cpu_qdot_for(const lilac_cpu_kernels *k, int type);
/* The multi-row fast dot for a block type, or NULL. */
lilac_qdotn_fn lilac_cpu_qdotn_for(const lilac_cpu_kernels *k, int type);
bool lilac_cpu_type_supported(int type);
/* The 16-row kernel for a repacked type (LILAC_Q4_K_R16, LILAC_Q6_K_R16),
 * or NULL; lilac_cpu_r16_type: the repacked type of a block type, or -1. */
lilac_qr16_fn lilac_cpu_qr16_for(const lilac_cpu_kernels *k, int type);
int lilac_cpu_r16_type(int type);
int lilac_cpu_r16_base(int type); /* the inverse, or -1 */
/* Row r of a repacked matrix as float32 (W->cols values). */
void lilac_r16_row_to_f32(const lilac_mat *W, int64_t r, float *out);

/* Scalar conversions. */
float lilac_f16_to_f32(uint16_t h);
static inline float lilac_bf16_to_f32(uint16_t b)
{
    union { uint32_t u; float f; } v = {(uint32_t)b << 16};
    return v.f;
}
/* A row of n values of `type` as float32 (for a block type, n is a whole
 * number of blocks); any type lilac_cpu_type_supported accepts. */
void lilac_row_to_f32(int type, const void *row, float *out, int64_t n);

/* y[t * W.rows + r] = dot(W row r, x[t * W.cols ...]) for t < n_tok,
 * split over the pool's threads by rows. With k->fast and a block type,
 * each row of x is first quantized (k->qx_quantize) into a scratch buffer
 * of the calling thread that grows as needed and is freed when the thread
 * ends, and the products are k's qdot_*. */
void lilac_matmul(const lilac_cpu_kernels *k, lilac_pool *pool, const lilac_mat *W,
                  const float *x, int64_t n_tok, float *y);

/* One product of a lilac_matmul_multi batch. */
typedef struct lilac_mm_item {
    const lilac_mat *W;
    const float *x; /* [n][W->cols] */
    float *y;       /* [n][W->rows] */
    int64_t n;      /* its rows of x; 0: the call's n_tok */
} lilac_mm_item;

/* Several independent products over n_tok tokens each, as ONE parallel job
 * (one barrier): tasks over (item, row chunk). Each product is computed
 * exactly as lilac_matmul computes it (the same per-row dot, the same
 * quantized activations), so the results are bitwise the same; an input
 * row shared by several items (the same x pointer and layout) is quantized
 * once. Items of an MLX type run through lilac_matmul one by one. At most
 * LILAC_MM_MAX items. */
#define LILAC_MM_MAX 520
void lilac_matmul_multi(const lilac_cpu_kernels *k, lilac_pool *pool, const lilac_mm_item *items, int n_items,
                        int64_t n_tok);

#endif
