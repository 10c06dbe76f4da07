/* cpu: kernel selection and the threaded matrix product. */
#include "kernels/cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"

const lilac_cpu_kernels *lilac_cpu_best(void)
{
    const char *force = getenv("LILAC_CPU_KERNELS");
    if (force && strcmp(force, "scalar") == 0)
        return &lilac_cpu_scalar;
#if defined(LILAC_X86)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return &lilac_cpu_avx2;
#endif
    return &lilac_cpu_scalar;
}

lilac_dot_fn lilac_cpu_dot_for(const lilac_cpu_kernels *k, int type)
{
    switch (type) {
    case LILAC_F32: return k->dot_f32;
    case LILAC_F16: return k->dot_f16;
    case LILAC_BF16: return k->dot_bf16;
    case LILAC_Q8_0: return k->dot_q8_0;
    case LILAC_Q4_0: return k->dot_q4_0;
    case LILAC_Q4_K: return k->dot_q4_K;
    case LILAC_Q5_K: return k->dot_q5_K;
    case LILAC_Q6_K: return k->dot_q6_K;
    default: return NULL;
    }
}

bool lilac_cpu_type_supported(int type) { return lilac_cpu_dot_for(&lilac_cpu_scalar, type) != NULL; }

typedef struct {
    const lilac_mat *W;
    lilac_dot_fn dot;
    const float *x;
    int64_t n_tok;
    float *y;
    int64_t rows_per_task;
} matmul_job;

static void matmul_task(void *ctx, int task, int thread)
{
    (void)thread;
    const matmul_job *j = ctx;
    int64_t r0 = task * j->rows_per_task;
    int64_t r1 = r0 + j->rows_per_task;
    if (r1 > j->W->rows)
        r1 = j->W->rows;
    int64_t cols = j->W->cols, rows = j->W->rows;
    for (int64_t r = r0; r < r1; r++) {
        const void *row = lilac_mat_row(j->W, r);
        for (int64_t t = 0; t < j->n_tok; t++)
            j->y[t * rows + r] = j->dot(row, j->x + t * cols, cols);
    }
}

void lilac_matmul(const lilac_cpu_kernels *k, lilac_pool *pool, const lilac_mat *W,
                  const float *x, int64_t n_tok, float *y)
{
    matmul_job j = {W, lilac_cpu_dot_for(k, W->type), x, n_tok, y, 0};
    int n_threads = lilac_pool_size(pool);
    /* A few tasks per thread balance uneven progress; tiny matrices run inline. */
    int64_t work = W->rows * W->cols * n_tok;
    int n_tasks = work < 32768 ? 1 : n_threads * 4;
    if (n_tasks > W->rows)
        n_tasks = (int)W->rows;
    j.rows_per_task = (W->rows + n_tasks - 1) / n_tasks;
    n_tasks = (int)((W->rows + j.rows_per_task - 1) / j.rows_per_task);
    lilac_pool_run(pool, n_tasks, matmul_task, &j);
}
