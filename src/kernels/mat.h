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
} lilac_mat;

static inline const void *lilac_mat_row(const lilac_mat *m, int64_t r)
{
    return (const uint8_t *)m->data + (size_t)r * m->row_bytes;
}

#endif
