/* mlx: matrices of MLX affine-quantized weights (lilac_mat of type
 * LILAC_MLX_AFFINE, as mlx / mlx-lm save them): each row packs cols codes
 * of `bits` bits LSB-first into uint32 words (for 3, 5 and 6 bits the codes
 * straddle bytes; the stream is still LSB-first), and group g of a row
 * dequantizes to scale[g] * q + bias[g] in float32. The scalar versions are
 * the oracle of the SIMD ones. */
#ifndef LILAC_KERNELS_CPU_MLX_H
#define LILAC_KERNELS_CPU_MLX_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/mat.h"
#include "util/pool.h"

struct lilac_cpu_kernels;

/* Bits per code lilac reads: 2, 3, 4, 5, 6, 8. */
bool lilac_mlx_bits_supported(int bits);
/* Group sizes lilac reads: multiples of 32 (MLX writes 32, 64, 128). */
bool lilac_mlx_group_supported(int group_size);
/* Code i of a packed row. */
uint32_t lilac_mlx_code(const void *row, int bits, int64_t i);

/* Row r of W as W->cols float32 values. */
void lilac_mlx_dequant_row(const lilac_mat *W, int64_t r, float *out);

/* dot(row r of W, x) over W->cols values. */
typedef float (*lilac_mlx_dot_fn)(const lilac_mat *W, int64_t r, const float *x);
float lilac_mlx_dot_scalar(const lilac_mat *W, int64_t r, const float *x);
#if defined(LILAC_X86)
float lilac_mlx_dot_avx2(const lilac_mat *W, int64_t r, const float *x); /* AVX2 + FMA + F16C */
#endif
/* The dot product for a kernel set (by its name: avx2 and avx512 sets get
 * the AVX2 one, others the scalar one). */
lilac_mlx_dot_fn lilac_mlx_dot_for(const struct lilac_cpu_kernels *k);

/* lilac_matmul for W->type == LILAC_MLX_AFFINE: y[t * W.rows + r] =
 * dot(W row r, x[t * W.cols ...]), split over the pool's threads by rows. */
void lilac_mlx_matmul(const struct lilac_cpu_kernels *k, lilac_pool *pool, const lilac_mat *W,
                      const float *x, int64_t n_tok, float *y);

#endif
