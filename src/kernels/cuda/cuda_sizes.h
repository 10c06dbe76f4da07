/* cuda_sizes: the sizes of the CUDA kernels' device buffers as plain C,
 * no CUDA needed: the kernels (cuda_ops.cu, cuda_mma.cu) size their
 * buffers by these, and the GPU memory plan (model/cuda_mem.c) adds them
 * up on machines without a GPU as well. */
#ifndef LILAC_KERNELS_CUDA_SIZES_H
#define LILAC_KERNELS_CUDA_SIZES_H

#include <stddef.h>

/* The most key ranges of one token's attention (lilac_cuda_attention takes LILAC_CUDA_ATT_RANGES=N of them,
 * default all 512; 256 with LILAC_CUDA_ATT_V2=0), and the ranges of a row of a batched call
 * (lilac_cuda_attention_rows): each range leaves hd + 2 floats of parts per head. */
#define LILAC_CUDA_ATT_SPLIT 512
#define LILAC_CUDA_ATT_SPLIT_ROWS 16

static inline size_t lilac_cuda_att_part_floats(int n_head, int hd)
{
    return (size_t)n_head * LILAC_CUDA_ATT_SPLIT * (size_t)(hd + 2);
}

static inline size_t lilac_cuda_att_rows_part_floats(int n_head, int hd, int n)
{
    return (size_t)n * (size_t)n_head * LILAC_CUDA_ATT_SPLIT_ROWS * (size_t)(hd + 2);
}

/* The decode step's expert sum over a grid (lilac_cuda_moe_sum_norm_grid): values a block, and the most blocks,
 * whose sums of squares its part buffer holds. */
#define LILAC_CUDA_SUM_GRID_T 256
#define LILAC_CUDA_SUM_GRID_MAXB 64
/* lilac_cuda_moe_down_sum's blocks at most (16 rows each), whose squares the same part buffer holds. */
#define LILAC_CUDA_DOWN_SUM_MAXB 256
/* A part buffer either kernel can use (the decode step's, and a row's of the exact batched step's). */
#define LILAC_CUDA_PART_MAXB \
    (LILAC_CUDA_SUM_GRID_MAXB > LILAC_CUDA_DOWN_SUM_MAXB ? LILAC_CUDA_SUM_GRID_MAXB : LILAC_CUDA_DOWN_SUM_MAXB)

/* The tensor-core products' scratch (cuda_mma.cu's xq_get): for n rows of K columns, the digits
 * (LILAC_CUDA_XQ_BLOCK bytes a row and 32 columns), a float sum a block (the array padded to 256
 * bytes), an int exponent a row. One buffer a stream, grown to the largest request, in whole MiB. */
#define LILAC_CUDA_XQ_BLOCK 128

static inline size_t lilac_cuda_xq_bytes(size_t n, size_t K)
{
    const size_t nb = n * (K / 32);
    return nb * LILAC_CUDA_XQ_BLOCK + ((nb * 4 + 255) & ~(size_t)255) + n * 4;
}

/* The prefill delta rule's T and P (cuda_prefill.cu's k_pf_dn_tp): for n tokens of nv value heads, two
 * LILAC_CUDA_DN_SUB x LILAC_CUDA_DN_SUB float matrices a head and sub-chunk of LILAC_CUDA_DN_SUB tokens. */
#define LILAC_CUDA_DN_SUB 64

static inline size_t lilac_cuda_dn_tp_floats(int nv, int n)
{
    return nv < 1 || n < 1 ? 0 : (size_t)nv * (size_t)((n + LILAC_CUDA_DN_SUB - 1) / LILAC_CUDA_DN_SUB) * 2 *
                                     LILAC_CUDA_DN_SUB * LILAC_CUDA_DN_SUB;
}

/* The sampler's reduction (cuda_sample.cu, lilac_cuda_logits_top): slices of LILAC_CUDA_TOP_SLICE logits a
 * block, each block's best LILAC_TOP_MAX keys (8 bytes) and its max and sum of exponentials (two floats); a
 * row's result is a lilac_logits_top in LILAC_CUDA_TOP_OUT bytes (lilac.h's struct is checked against it), the
 * rows' results first in the scratch; the merge sorts a row's blocks' keys at once in shared memory:
 * LILAC_CUDA_TOP_MERGE of them at most. The decode step's scratch holds LILAC_CUDA_TOP_ROWS rows (the batched
 * step's logits chunk). */
#define LILAC_CUDA_TOP_SLICE 4096
#define LILAC_CUDA_TOP_MERGE 16384
#define LILAC_CUDA_TOP_OUT 1040
#define LILAC_CUDA_TOP_ROWS 32

static inline size_t lilac_cuda_top_bytes(int n_vocab, int top_max, int rows)
{
    const size_t nb = ((size_t)(n_vocab > 0 ? n_vocab : 1) + LILAC_CUDA_TOP_SLICE - 1) / LILAC_CUDA_TOP_SLICE;
    return (size_t)rows * (LILAC_CUDA_TOP_OUT + nb * ((size_t)top_max * 8 + 8));
}

/* The prefill attention's K and V split into fp16 hi/lo once a call (cuda_attn.cu's k_attn_presplit) for keys
 * 0 .. n_keys - 1 (cap: n_keys rounded up to whole LILAC_CUDA_ATT_TILE-key tiles) of n_kv heads of hd dims, one
 * buffer: K's hi and lo words (hd / 2 each a key), K's scales (a float a key), V's hi and lo words (8 each a tile
 * and head dim), V's scales (a float a tile and head dim). The scratch is asked for keys rounded up to
 * LILAC_CUDA_ATT_GROW (it grows in those steps as a context does). */
#define LILAC_CUDA_ATT_TILE 16
#define LILAC_CUDA_ATT_GROW 4096

static inline size_t lilac_cuda_attn_split_bytes(size_t n_keys, size_t n_kv, size_t hd)
{
    const size_t cap = (n_keys + LILAC_CUDA_ATT_TILE - 1) / LILAC_CUDA_ATT_TILE * LILAC_CUDA_ATT_TILE;
    return n_kv * cap * (hd * 4 + 4) + n_kv * cap * hd * 4 + n_kv * (cap / LILAC_CUDA_ATT_TILE) * hd * 4;
}

static inline size_t lilac_cuda_scratch_round(size_t bytes)
{
    return (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
}

#endif
