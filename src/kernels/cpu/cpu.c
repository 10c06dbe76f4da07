/* cpu: kernel selection and the threaded matrix product. */
#include "kernels/cpu/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/mlx.h"

bool lilac_cpu_runs(const lilac_cpu_kernels *k)
{
    if (k == &lilac_cpu_scalar)
        return true;
#if defined(LILAC_X86)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (k == &lilac_cpu_avx2)
        return avx2; /* F16C comes with every AVX2 + FMA processor */
    if (k == &lilac_cpu_avx512)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__aarch64__)
    if (k == &lilac_cpu_neon)
        return lilac_cpu_neon_dotprod();
#endif
    return false;
}

const lilac_cpu_kernels *lilac_cpu_best(void)
{
    /* best first */
    static const lilac_cpu_kernels *const sets[] = {
#if defined(LILAC_X86)
        &lilac_cpu_avx512, &lilac_cpu_avx2,
#endif
#if defined(__aarch64__)
        &lilac_cpu_neon,
#endif
        &lilac_cpu_scalar,
    };
    const char *force = getenv("LILAC_CPU_KERNELS");
    size_t from = 0, n = sizeof sets / sizeof sets[0];
    if (force && *force)
        for (size_t i = 0; i < n; i++)
            if (strcmp(force, sets[i]->name) == 0)
                from = i;
    for (size_t i = from; i < n; i++)
        if (lilac_cpu_runs(sets[i]))
            return sets[i];
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

lilac_qdot_fn lilac_cpu_qdot_for(const lilac_cpu_kernels *k, int type)
{
    switch (type) {
    case LILAC_Q8_0: return k->qdot_q8_0;
    case LILAC_Q4_0: return k->qdot_q4_0;
    case LILAC_Q4_K: return k->qdot_q4_K;
    case LILAC_Q5_K: return k->qdot_q5_K;
    case LILAC_Q6_K: return k->qdot_q6_K;
    default: return NULL;
    }
}

bool lilac_cpu_type_supported(int type) { return lilac_cpu_dot_for(&lilac_cpu_scalar, type) != NULL; }

/* The quantized activations of the calling thread: grown as needed, freed
 * by a thread-specific destructor when the thread ends (the main thread's
 * stays reachable through the thread-local pointer until exit). */
typedef struct {
    void *p;
    size_t cap;
} qx_scratch;

static _Thread_local qx_scratch tls_scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_ok;

static void scratch_free(void *v)
{
    qx_scratch *s = v;
    free(s->p);
    s->p = NULL;
    s->cap = 0;
}

static void scratch_key_init(void) { scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0; }

static void *scratch_get(size_t bytes)
{
    qx_scratch *s = &tls_scratch;
    if (bytes <= s->cap)
        return s->p;
    pthread_once(&scratch_once, scratch_key_init);
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < bytes)
        cap *= 2;
    void *p = aligned_alloc(64, cap);
    if (!p)
        return NULL;
    if (!s->p && scratch_key_ok)
        pthread_setspecific(scratch_key, s);
    free(s->p);
    s->p = p;
    s->cap = cap;
    return p;
}

typedef struct {
    const lilac_mat *W;
    lilac_dot_fn dot;
    const float *x;
    int64_t n_tok;
    float *y;
    int64_t rows_per_task;
    /* the fast path: qdot over the quantized rows of x at qx, qx_bytes apart */
    lilac_qdot_fn qdot;
    uint8_t *qx;
    size_t qx_bytes;
    int qx_layout;
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
    if (j->qdot) {
        for (int64_t r = r0; r < r1; r++) {
            const void *row = lilac_mat_row(j->W, r);
            for (int64_t t = 0; t < j->n_tok; t++) {
                lilac_qx q = lilac_qx_carve(j->qx + (size_t)t * j->qx_bytes, cols, j->qx_layout);
                j->y[t * rows + r] = j->qdot(row, &q, cols);
            }
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const void *row = lilac_mat_row(j->W, r);
        for (int64_t t = 0; t < j->n_tok; t++)
            j->y[t * rows + r] = j->dot(row, j->x + t * cols, cols);
    }
}

void lilac_matmul(const lilac_cpu_kernels *k, lilac_pool *pool, const lilac_mat *W,
                  const float *x, int64_t n_tok, float *y)
{
    if (W->type == LILAC_MLX_AFFINE) { /* MLX affine-quantized weights: kernels/cpu/mlx_scalar.c */
        lilac_mlx_matmul(k, pool, W, x, n_tok, y);
        return;
    }
    matmul_job j = {.W = W, .dot = lilac_cpu_dot_for(k, W->type), .x = x, .n_tok = n_tok, .y = y};
    lilac_qdot_fn qdot = k->fast ? lilac_cpu_qdot_for(k, W->type) : NULL;
    int layout = lilac_qx_layout(W->type);
    if (qdot && k->qx_quantize && W->cols % (layout == LILAC_QX_KQ ? 256 : LILAC_QX_BLOCK) == 0 && n_tok > 0) {
        size_t rb = lilac_qx_row_bytes(W->cols);
        uint8_t *buf = scratch_get(rb * (size_t)n_tok);
        if (buf) { /* else the precise path, which needs no memory */
            for (int64_t t = 0; t < n_tok; t++) {
                lilac_qx q = lilac_qx_carve(buf + (size_t)t * rb, W->cols, layout);
                k->qx_quantize(x + t * W->cols, W->cols, &q);
            }
            j.qdot = qdot;
            j.qx = buf;
            j.qx_bytes = rb;
            j.qx_layout = layout;
        }
    }
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
