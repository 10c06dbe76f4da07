/* mat: a weight matrix as the kernels see it, whatever file it came from:
 * rows stored one after another, each row `cols` values of `type` (a
 * lilac_dtype; block types pack whole blocks per row). Row r computes
 * output r; the matrix never owns its data (it points into a file map). */
#ifndef LILAC_KERNELS_MAT_H
#define LILAC_KERNELS_MAT_H

#include <stddef.h>
#include <stdint.h>

typedef struct lilac_mat {
    const void *data;
    int type;
    int64_t rows, cols;
    size_t row_bytes;
    /* MLX affine quantization (type LILAC_MLX_AFFINE; zero for other types):
     * value = scale * q + bias per group of group_size values of a row, q
     * packed `bits` wide LSB-first into the row's uint32 words; scales and
     * biases are [rows, cols / group_size] of scale_type (F16, BF16, F32),
     * rows scale_row_bytes apart. */
    const void *scales, *biases;
    int scale_type;
    int group_size;
    int bits;
    size_t scale_row_bytes;
} lilac_mat;

static inline const void *lilac_mat_row(const lilac_mat *m, int64_t r)
{
    return (const uint8_t *)m->data + (size_t)r * m->row_bytes;
}

/* Row r of m as n = m->cols float32 values, for any type the kernels
 * compute with (MLX affine included); kernels/cpu/mlx_scalar.c. */
void lilac_mat_row_to_f32(const lilac_mat *m, int64_t r, float *out);

#endif
