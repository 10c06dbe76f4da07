/* mlx_scalar: MLX affine-quantized rows, plain C (the oracle), and the
 * threaded product over them. */
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/mlx.h"

bool lilac_mlx_bits_supported(int bits)
{
    return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

bool lilac_mlx_group_supported(int group_size) { return group_size >= 32 && group_size % 32 == 0; }

uint32_t lilac_mlx_code(const void *row, int bits, int64_t i)
{
    const uint8_t *b = row;
    uint64_t bit = (uint64_t)i * (uint64_t)bits;
    size_t at = (size_t)(bit >> 3);
    unsigned shift = (unsigned)(bit & 7);
    uint32_t v = b[at];
    if (shift + (unsigned)bits > 8) /* straddles into the next byte */
        v |= (uint32_t)b[at + 1] << 8;
    return (v >> shift) & ((1u << bits) - 1u);
}

static float load_scale(const void *p, int type, int64_t g)
{
    switch (type) {
    case LILAC_F16: return lilac_f16_to_f32(((const uint16_t *)p)[g]);
    case LILAC_BF16: return lilac_bf16_to_f32(((const uint16_t *)p)[g]);
    default: {
        float f;
        memcpy(&f, (const uint8_t *)p + (size_t)g * sizeof f, sizeof f);
        return f;
    }
    }
}

void lilac_mlx_dequant_row(const lilac_mat *W, int64_t r, float *out)
{
    const void *row = lilac_mat_row(W, r);
    const uint8_t *sc = (const uint8_t *)W->scales + (size_t)r * W->scale_row_bytes;
    const uint8_t *bi = (const uint8_t *)W->biases + (size_t)r * W->scale_row_bytes;
    int64_t gs = W->group_size;
    for (int64_t g = 0; g < W->cols / gs; g++) {
        float s = load_scale(sc, W->scale_type, g), b = load_scale(bi, W->scale_type, g);
        for (int64_t i = g * gs; i < (g + 1) * gs; i++) {
            float q = (float)lilac_mlx_code(row, W->bits, i);
            float sq = s * q; /* rounded apart, as MLX computes it */
            out[i] = sq + b;
        }
    }
}

float lilac_mlx_dot_scalar(const lilac_mat *W, int64_t r, const float *x)
{
    const void *row = lilac_mat_row(W, r);
    const uint8_t *sc = (const uint8_t *)W->scales + (size_t)r * W->scale_row_bytes;
    const uint8_t *bi = (const uint8_t *)W->biases + (size_t)r * W->scale_row_bytes;
    int64_t gs = W->group_size;
    float sum = 0;
    for (int64_t g = 0; g < W->cols / gs; g++) {
        float s = load_scale(sc, W->scale_type, g), b = load_scale(bi, W->scale_type, g);
        for (int64_t i = g * gs; i < (g + 1) * gs; i++) {
            float sq = s * (float)lilac_mlx_code(row, W->bits, i);
            sum += (sq + b) * x[i];
        }
    }
    return sum;
}

lilac_mlx_dot_fn lilac_mlx_dot_for(const struct lilac_cpu_kernels *k)
{
#if defined(LILAC_X86)
    if (k && k->name && (strcmp(k->name, "avx2") == 0 || strcmp(k->name, "avx512") == 0))
        return lilac_mlx_dot_avx2;
#else
    (void)k;
#endif
    return lilac_mlx_dot_scalar;
}

void lilac_mat_row_to_f32(const lilac_mat *m, int64_t r, float *out)
{
    if (m->type == LILAC_MLX_AFFINE)
        lilac_mlx_dequant_row(m, r, out);
    else if (lilac_cpu_r16_base(m->type) >= 0)
        lilac_r16_row_to_f32(m, r, out);
    else
        lilac_row_to_f32(m->type, lilac_mat_row(m, r), out, m->cols);
}

typedef struct {
    const lilac_mat *W;
    lilac_mlx_dot_fn dot;
    const float *x;
    int64_t n_tok;
    float *y;
    int64_t rows_per_task;
} mlx_job;

static void mlx_task(void *ctx, int task, int thread)
{
    (void)thread;
    const mlx_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    int64_t rows = j->W->rows, cols = j->W->cols;
    if (r1 > rows)
        r1 = rows;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = 0; t < j->n_tok; t++)
            j->y[t * rows + r] = j->dot(j->W, r, j->x + t * cols);
}

void lilac_mlx_matmul(const struct lilac_cpu_kernels *k, lilac_pool *pool, const lilac_mat *W,
                      const float *x, int64_t n_tok, float *y)
{
    if (W->rows < 1 || n_tok < 1)
        return;
    mlx_job j = {W, lilac_mlx_dot_for(k), x, n_tok, y, 0};
    int n_threads = lilac_pool_size(pool);
    int64_t work = W->rows * W->cols * n_tok;
    int n_tasks = work < 32768 ? 1 : n_threads * 4;
    if (n_tasks > W->rows)
        n_tasks = (int)W->rows;
    j.rows_per_task = (W->rows + n_tasks - 1) / n_tasks;
    n_tasks = (int)((W->rows + j.rows_per_task - 1) / j.rows_per_task);
    lilac_pool_run(pool, n_tasks, mlx_task, &j);
}
