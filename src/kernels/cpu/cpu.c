/* cpu: kernel selection and the threaded matrix product. */
#include "kernels/cpu/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/quant.h"
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

lilac_qdotn_fn lilac_cpu_qdotn_for(const lilac_cpu_kernels *k, int type)
{
    switch (type) {
    case LILAC_Q4_K: return k->qdotn_q4_K;
    case LILAC_Q6_K: return k->qdotn_q6_K;
    default: return NULL;
    }
}

lilac_qr16_fn lilac_cpu_qr16_for(const lilac_cpu_kernels *k, int type)
{
    switch (type) {
    case LILAC_Q4_K_R16: return k->qr16_q4_K;
    case LILAC_Q6_K_R16: return k->qr16_q6_K;
    default: return NULL;
    }
}

int lilac_cpu_r16_base(int type)
{
    switch (type) {
    case LILAC_Q4_K_R16: return LILAC_Q4_K;
    case LILAC_Q6_K_R16: return LILAC_Q6_K;
    default: return -1;
    }
}

/* One 256-column block of a 16-row group of a repacked matrix (type
 * LILAC_Q4_K_R16 / LILAC_Q6_K_R16) back in its file layout: 16 blocks, row
 * r's at out + r * block size. */
static void r16_unpack_block(int type, const lilac_mat *W, int64_t group, int64_t b, uint8_t *out)
{
    const uint8_t *g = (const uint8_t *)W->data + (size_t)group * LILAC_QR16_ROWS * W->row_bytes;
    if (type == LILAC_Q4_K_R16)
        lilac_qr16_unpack_q4_K(g + (size_t)b * sizeof(block_q4_Kx16), 256, out, sizeof(block_q4_K));
    else
        lilac_qr16_unpack_q6_K(g + (size_t)b * sizeof(block_q6_Kx16), 256, out, sizeof(block_q6_K));
}

void lilac_r16_row_to_f32(const lilac_mat *W, int64_t r, float *out)
{
    uint8_t blocks[LILAC_QR16_ROWS * sizeof(block_q6_K)];
    int base = lilac_cpu_r16_base(W->type);
    size_t bs = lilac_dtype_row_bytes(base, 256);
    for (int64_t b = 0; b < W->cols / 256; b++) {
        r16_unpack_block(W->type, W, r / LILAC_QR16_ROWS, b, blocks);
        lilac_row_to_f32(base, blocks + (size_t)(r % LILAC_QR16_ROWS) * bs, out + 256 * b, 256);
    }
}

int lilac_cpu_r16_type(int type)
{
    switch (type) {
    case LILAC_Q4_K: return LILAC_Q4_K_R16;
    case LILAC_Q6_K: return LILAC_Q6_K_R16;
    default: return -1;
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
    lilac_qdotn_fn qdotn; /* up to LILAC_QDOT_NT rows at once, or NULL */
    lilac_qr16_fn qr16;   /* a repacked matrix (kernels/cpu/qr16.h): 16 rows at once */
    uint8_t *qx;
    size_t qx_bytes;
    int qx_layout;
} matmul_job;

/* Rows r0..r1 of one product (the same per-row dots whatever the split). */
static void matmul_rows(const matmul_job *j, int64_t r0, int64_t r1)
{
    int64_t cols = j->W->cols, rows = j->W->rows;
    if (r1 > rows)
        r1 = rows;
    if (j->qr16) {
        /* 16-row groups (r0 is a multiple of 16); tokens in blocks whose
         * quantized rows stay in L2 while every group of the task passes
         * over them, the task's weights staying there for every block */
        enum { NT = LILAC_QR16_NT, TB = 32 };
        lilac_qx q[TB]; /* the block's rows, carved once for all its groups */
        for (int64_t tb = 0; tb < j->n_tok; tb += TB) {
            const int64_t te = tb + TB < j->n_tok ? tb + TB : j->n_tok;
            for (int64_t t = tb; t < te; t++)
                q[t - tb] = lilac_qx_carve(j->qx + (size_t)t * j->qx_bytes, cols, j->qx_layout);
            for (int64_t g = r0; g < r1; g += LILAC_QR16_ROWS) {
                const void *w = (const uint8_t *)j->W->data + (size_t)g * j->W->row_bytes;
                for (int64_t t0 = tb; t0 < te; t0 += NT) {
                    const int nt = te - t0 < NT ? (int)(te - t0) : NT;
                    float o[NT * LILAC_QR16_ROWS];
                    j->qr16(w, q + (t0 - tb), nt, cols, o);
                    for (int u = 0; u < nt; u++)
                        memcpy(j->y + (t0 + u) * rows + g, o + u * LILAC_QR16_ROWS, LILAC_QR16_ROWS * sizeof(float));
                }
            }
        }
        return;
    }
    if (j->qdot) {
        /* chunks of RB rows: a group of NT activation rows is read from
         * L1 for every row of the chunk, the chunk's weights stay there
         * for every group */
        enum { NT = LILAC_QDOT_NT, RB = 8 };
        for (int64_t rc = r0; rc < r1; rc += RB) {
            const int64_t re = rc + RB < r1 ? rc + RB : r1;
            int64_t t0 = 0;
            if (j->qdotn && j->n_tok >= 2)
                for (; t0 < j->n_tok; t0 += NT) {
                    const int nt = j->n_tok - t0 < NT ? (int)(j->n_tok - t0) : NT;
                    lilac_qx q[NT];
                    for (int u = 0; u < nt; u++)
                        q[u] = lilac_qx_carve(j->qx + (size_t)(t0 + u) * j->qx_bytes, cols, j->qx_layout);
                    for (int64_t r = rc; r < re; r++) {
                        float o[NT];
                        j->qdotn(lilac_mat_row(j->W, r), q, nt, cols, o);
                        for (int u = 0; u < nt; u++)
                            j->y[(t0 + u) * rows + r] = o[u];
                    }
                }
            for (int64_t t = t0; t < j->n_tok; t++) {
                lilac_qx q = lilac_qx_carve(j->qx + (size_t)t * j->qx_bytes, cols, j->qx_layout);
                for (int64_t r = rc; r < re; r++)
                    j->y[t * rows + r] = j->qdot(lilac_mat_row(j->W, r), &q, cols);
            }
        }
        return;
    }
    if (lilac_cpu_r16_base(j->W->type) >= 0) {
        /* a repacked matrix without its quantized activations (no memory
         * for them): float32 dots block by block over the unpacked rows */
        uint8_t blocks[LILAC_QR16_ROWS * sizeof(block_q6_K)];
        size_t bs = lilac_dtype_row_bytes(lilac_cpu_r16_base(j->W->type), 256);
        for (int64_t g = r0; g < r1; g += LILAC_QR16_ROWS) {
            for (int64_t t = 0; t < j->n_tok; t++)
                memset(j->y + t * rows + g, 0, LILAC_QR16_ROWS * sizeof(float));
            for (int64_t b = 0; b < cols / 256; b++) {
                r16_unpack_block(j->W->type, j->W, g / LILAC_QR16_ROWS, b, blocks);
                for (int r = 0; r < LILAC_QR16_ROWS; r++)
                    for (int64_t t = 0; t < j->n_tok; t++)
                        j->y[t * rows + g + r] += j->dot(blocks + r * bs, j->x + t * cols + 256 * b, 256);
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
    /* one product is a job of one part */
    const lilac_mm_item item = {W, x, y, n_tok};
    lilac_matmul_multi(k, pool, &item, 1, n_tok);
}

/* ---- several products in one job ---- */

typedef struct {
    matmul_job part[LILAC_MM_MAX];
    int task0[LILAC_MM_MAX + 1]; /* the first task of each part; task0[n] = all tasks */
    int n;
} multi_job;

static void multi_task(void *ctx, int task, int thread)
{
    (void)thread;
    const multi_job *mj = ctx;
    int i = 0;
    while (task >= mj->task0[i + 1])
        i++;
    const matmul_job *j = &mj->part[i];
    int64_t r0 = (int64_t)(task - mj->task0[i]) * j->rows_per_task;
    matmul_rows(j, r0, r0 + j->rows_per_task);
}

/* The activation rows a multi job quantizes: part[i]'s n_tok rows are rows
 * row0[i] .. row0[i + 1] of the whole. */
typedef struct {
    const multi_job *mj;
    const lilac_cpu_kernels *k;
    int part[LILAC_MM_MAX];
    int64_t row0[LILAC_MM_MAX + 1];
    int n;
    int64_t rows, rows_per_task;
} quant_job;

static void quantize_task(void *ctx, int task, int thread)
{
    (void)thread;
    const quant_job *qj = ctx;
    int64_t r0 = (int64_t)task * qj->rows_per_task, r1 = r0 + qj->rows_per_task;
    if (r1 > qj->rows)
        r1 = qj->rows;
    int i = 0;
    for (int64_t r = r0; r < r1; r++) {
        while (r >= qj->row0[i + 1])
            i++;
        const matmul_job *j = &qj->mj->part[qj->part[i]];
        int64_t t = r - qj->row0[i];
        lilac_qx q = lilac_qx_carve(j->qx + (size_t)t * j->qx_bytes, j->W->cols, j->qx_layout);
        qj->k->qx_quantize(j->x + t * j->W->cols, j->W->cols, &q);
    }
}

void lilac_matmul_multi(const lilac_cpu_kernels *k, lilac_pool *pool, const lilac_mm_item *items, int n_items,
                        int64_t n_tok)
{
    multi_job mj;
    quant_job qj;
    qj.n = 0;
    qj.rows = 0;
    int n = 0;
    /* where each part's quantized rows start in the buffer (SIZE_MAX: none) */
    size_t off[LILAC_MM_MAX], total = 0;
    for (int i = 0; i < n_items; i++) {
        const lilac_mat *W = items[i].W;
        int64_t nt_i = items[i].n > 0 ? items[i].n : n_tok;
        if (W->type == LILAC_MLX_AFFINE || n >= LILAC_MM_MAX) {
            lilac_matmul(k, pool, W, items[i].x, nt_i, items[i].y);
            continue;
        }
        matmul_job *j = &mj.part[n];
        int dtype = lilac_cpu_r16_base(W->type) >= 0 ? lilac_cpu_r16_base(W->type) : W->type;
        *j = (matmul_job){.W = W, .dot = lilac_cpu_dot_for(k, dtype), .x = items[i].x, .n_tok = nt_i,
                          .y = items[i].y};
        off[n] = SIZE_MAX;
        lilac_qr16_fn qr16 = lilac_cpu_qr16_for(k, W->type);
        lilac_qdot_fn qdot = k->fast ? lilac_cpu_qdot_for(k, W->type) : NULL;
        int layout = lilac_qx_layout(W->type);
        if ((qdot || qr16) && k->qx_quantize && W->cols % (layout == LILAC_QX_KQ ? 256 : LILAC_QX_BLOCK) == 0 &&
            nt_i > 0) {
            j->qdot = qdot;
            j->qr16 = qr16;
            j->qdotn = lilac_cpu_qdotn_for(k, W->type);
            j->qx_layout = layout;
            j->qx_bytes = lilac_qx_row_bytes(W->cols);
            for (int p = 0; p < n && off[n] == SIZE_MAX; p++) /* the same rows quantized already? */
                if (off[p] != SIZE_MAX && mj.part[p].x == j->x && mj.part[p].qx_layout == layout &&
                    mj.part[p].W->cols == W->cols && mj.part[p].n_tok == nt_i)
                    off[n] = off[p];
            if (off[n] == SIZE_MAX) {
                off[n] = total;
                total += j->qx_bytes * (size_t)nt_i;
            }
        }
        n++;
    }
    if (!n)
        return;
    uint8_t *buf = total ? scratch_get(total) : NULL;
    for (int i = 0; i < n; i++) {
        matmul_job *j = &mj.part[i];
        if (!j->qdot && !j->qr16)
            continue;
        if (!buf) { /* the precise path, which needs no memory */
            j->qdot = NULL;
            j->qdotn = NULL;
            j->qr16 = NULL;
            continue;
        }
        j->qx = buf + off[i];
        bool first = true;
        for (int p = 0; p < i && first; p++)
            first = !((mj.part[p].qdot || mj.part[p].qr16) && off[p] == off[i]);
        if (first) {
            qj.part[qj.n] = i;
            qj.row0[qj.n] = qj.rows;
            qj.rows += j->n_tok;
            qj.n++;
        }
    }
    /* the activation rows, quantized once each: over the pool when there
     * are many (prefill), inline for the few of a decode step (a barrier
     * costs more than they do); each row's bytes do not depend on who
     * quantizes it */
    qj.row0[qj.n] = qj.rows;
    qj.mj = &mj;
    qj.k = k;
    int q_tasks = lilac_pool_size(pool) * 4;
    if (qj.rows >= 32 && lilac_pool_size(pool) > 1) {
        qj.rows_per_task = (qj.rows + q_tasks - 1) / q_tasks;
        lilac_pool_run(pool, (int)((qj.rows + qj.rows_per_task - 1) / qj.rows_per_task), quantize_task, &qj);
    } else {
        qj.rows_per_task = qj.rows;
        if (qj.rows)
            quantize_task(&qj, 0, 0);
    }
    /* about 16 tasks per thread over the whole job, each part split in
     * proportion to its work; a tiny job runs inline */
    int n_threads = lilac_pool_size(pool);
    double work = 0;
    for (int i = 0; i < n; i++)
        work += (double)mj.part[i].W->rows * (double)mj.part[i].W->cols * (double)mj.part[i].n_tok;
    double target = work < 32768 ? 1 : n_threads * 16;
    int tasks = 0;
    for (int i = 0; i < n; i++) {
        matmul_job *j = &mj.part[i];
        int64_t rows = j->W->rows;
        double share = (double)rows * (double)j->W->cols * (double)j->n_tok / (work > 0 ? work : 1);
        int64_t nt = (int64_t)(share * target + 0.5);
        if (nt < 1)
            nt = 1;
        if (nt > rows)
            nt = rows > 0 ? rows : 1;
        j->rows_per_task = rows > 0 ? (rows + nt - 1) / nt : 1;
        if (lilac_cpu_r16_base(j->W->type) >= 0) /* whole 16-row groups */
            j->rows_per_task = (j->rows_per_task + LILAC_QR16_ROWS - 1) / LILAC_QR16_ROWS * LILAC_QR16_ROWS;
        nt = rows > 0 ? (rows + j->rows_per_task - 1) / j->rows_per_task : 0;
        mj.task0[i] = tasks;
        tasks += (int)nt;
    }
    mj.task0[n] = tasks;
    mj.n = n;
    if (tasks == 0)
        return;
    if (work < 32768) {
        for (int t = 0; t < tasks; t++)
            multi_task(&mj, t, 0);
        return;
    }
    lilac_pool_run(pool, tasks, multi_task, &mj);
}
