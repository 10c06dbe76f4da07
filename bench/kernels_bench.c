/* kernels_bench: GB/s of weights streamed by the CPU dot-product kernels,
 * through lilac_matmul as a decode step calls it (one token, or -n
 * tokens), on a matrix larger than the caches, with 1 and 2 threads.
 *
 *   kernels_bench [-m MB] [-c COLS] [-r REPEATS] [-n TOKENS] [-t TYPE[,TYPE]]
 *                 [-k SET[,SET]] [-j THREADS[,THREADS]]
 *
 * For each block type it runs every kernel set this CPU has on the
 * precise path (float32 activations) and on the fast path (qfast.h), and
 * the float types on the precise path; the scalar set only when asked
 * (-k scalar). A read-only stream of the same bytes (64-bit loads,
 * prefetched as the kernels are) gives the memory bandwidth to compare
 * with. Each figure is the best of REPEATS runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"
#include "util/pool.h"

typedef struct {
    int type;
    const char *name;
    size_t f16_at[2]; /* fp16 fields kept moderate (random bytes would be NaN at times) */
    int n_f16;
} btype;

static const btype types[] = {
    {LILAC_Q4_K, "Q4_K", {0, 2}, 2},
    {LILAC_Q5_K, "Q5_K", {0, 2}, 2},
    {LILAC_Q6_K, "Q6_K", {208}, 1},
    {LILAC_Q8_0, "Q8_0", {0}, 1},
    {LILAC_Q4_0, "Q4_0", {0}, 1},
    {LILAC_BF16, "BF16", {0}, 0},
    {LILAC_F16, "F16", {0}, 0},
    {LILAC_F32, "F32", {0}, 0},
};

static int listed(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len + (e != NULL);
    }
    return 0;
}

/* moderate, random-signed values for every element of the matrix */
static void fill(const btype *t, uint8_t *data, size_t bytes, int64_t rows, size_t row_bytes)
{
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t v = bu_next();
        memcpy(data + i, &v, 8);
    }
    const lilac_dtype_info *di = lilac_dtype_get(t->type);
    if (t->type == LILAC_F32) {
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            float f = (float)(int)(bu_next() % 2001 - 1000) * 1e-3f;
            memcpy(data + i, &f, 4);
        }
        return;
    }
    if (t->type == LILAC_F16 || t->type == LILAC_BF16) {
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            uint16_t h = t->type == LILAC_F16 ? (uint16_t)(0x3000 + (bu_next() & 0xfff))
                                              : (uint16_t)(0x3c00 + (bu_next() & 0xff));
            h |= (uint16_t)(bu_next() & 0x8000);
            memcpy(data + i, &h, 2);
        }
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (size_t b = 0; b < row_bytes / di->size; b++)
            for (int k = 0; k < t->n_f16; k++) {
                uint16_t h = (uint16_t)(0x2000 + (bu_next() & 0x7ff));
                memcpy(data + (size_t)r * row_bytes + b * di->size + t->f16_at[k], &h, 2);
            }
}

typedef struct {
    const uint8_t *data;
    size_t bytes;
    int n_tasks;
    uint64_t sums[64];
} stream_job;

static void stream_task(void *ctx, int task, int thread)
{
    (void)thread;
    stream_job *j = ctx;
    size_t per = (j->bytes / (size_t)j->n_tasks) & ~(size_t)63;
    const uint64_t *p = (const uint64_t *)(const void *)(j->data + (size_t)task * per);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 8 <= per / 8; i += 8) {
        __builtin_prefetch(p + i + 512, 0, 0); /* 4 KB ahead, non-temporal: as the kernels do */
        a += p[i] + p[i + 4];
        b += p[i + 1] + p[i + 5];
        c += p[i + 2] + p[i + 6];
        d += p[i + 3] + p[i + 7];
    }
    j->sums[task] = a + b + c + d;
}

int main(int argc, char **argv)
{
    int mb = 256, cols = 2048, reps = 5, ntok = 1;
    const char *type_list = NULL, *set_list = NULL, *thread_list = "1,2";
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: %s [-m MB] [-c COLS] [-r REPEATS] [-n TOKENS] [-t TYPES] [-k SETS] [-j THREADS]\n",
                    argv[0]);
            return 2;
        }
        if (!strcmp(a, "-m"))
            mb = atoi(v);
        else if (!strcmp(a, "-c"))
            cols = atoi(v);
        else if (!strcmp(a, "-r"))
            reps = atoi(v);
        else if (!strcmp(a, "-n"))
            ntok = atoi(v);
        else if (!strcmp(a, "-t"))
            type_list = v;
        else if (!strcmp(a, "-k"))
            set_list = v;
        else if (!strcmp(a, "-j"))
            thread_list = v;
        else {
            fprintf(stderr, "%s: unknown option %s\n", argv[0], a);
            return 2;
        }
    }
    if (mb <= 0 || cols <= 0 || cols % 256 || reps <= 0 || ntok <= 0) {
        fprintf(stderr, "%s: -m, -r, -n must be positive, -c a multiple of 256\n", argv[0]);
        return 2;
    }
    const lilac_cpu_kernels *all[] = {
        &lilac_cpu_scalar,
#if defined(LILAC_X86)
        &lilac_cpu_avx2,
        &lilac_cpu_avx512,
#endif
#if defined(__aarch64__)
        &lilac_cpu_neon,
#endif
    };
    const lilac_cpu_kernels *sets[4];
    int n_sets = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (lilac_cpu_runs(all[i]) && (set_list ? listed(set_list, all[i]->name) : all[i] != &lilac_cpu_scalar))
            sets[n_sets++] = all[i];

    int threads[8], n_threads = 0;
    for (const char *p = thread_list; *p && n_threads < 8;) {
        threads[n_threads++] = atoi(p);
        const char *e = strchr(p, ',');
        if (!e)
            break;
        p = e + 1;
    }
    lilac_pool *pools[8];
    for (int i = 0; i < n_threads; i++) {
        lilac_error err;
        if (threads[i] < 1 || lilac_pool_new(threads[i], &pools[i], &err)) {
            fprintf(stderr, "cannot start a pool of %d threads\n", threads[i]);
            return 1;
        }
    }

    size_t cap = (size_t)mb << 20;
    uint8_t *data = aligned_alloc(64, cap);
    float *x = malloc((size_t)ntok * cols * sizeof(float));
    float *y = malloc(((size_t)cap / 64 + 1) * ntok * sizeof(float));
    if (!data || !x || !y) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < (int64_t)ntok * cols; i++)
        x[i] = (float)((int)(bu_next() % 2001) - 1000) * 1e-3f;
    printf("kernels_bench: %d MB of weights, %d columns, %d token(s), best of %d; best set here: %s\n", mb, cols, ntok,
           reps, lilac_cpu_best()->name);

    /* the memory's read bandwidth */
    memset(data, 1, cap);
    for (int ti = 0; ti < n_threads; ti++) {
        stream_job j = {data, cap, threads[ti] * 4, {0}};
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = bu_now();
            lilac_pool_run(pools[ti], j.n_tasks, stream_task, &j);
            double dt = bu_now() - t0;
            best = dt < best ? dt : best;
        }
        printf("%-6s %-16s %d thread%s %7.2f GB/s\n", "-", "read stream", threads[ti], threads[ti] > 1 ? "s" : " ",
               (double)cap / best * 1e-9);
    }

    printf("\n| type | kernels          | threads |   GB/s | ms/matrix |\n");
    printf("|------|------------------|--------:|-------:|----------:|\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const btype *t = &types[ti];
        if (!listed(type_list, t->name))
            continue;
        size_t row_bytes = lilac_dtype_row_bytes(t->type, cols);
        int64_t rows = (int64_t)(cap / row_bytes);
        size_t bytes = (size_t)rows * row_bytes;
        fill(t, data, bytes, rows, row_bytes);
        lilac_mat W = {.data = data, .type = t->type, .rows = rows, .cols = cols,
                       .row_bytes = row_bytes};
        int quant = lilac_cpu_qdot_for(&lilac_cpu_scalar, t->type) != NULL;
        /* path 0 precise, 1 fast, 2 fast on the 16-row repacked layout
         * (kernels/cpu/qr16.h) as the model runs Q4_K / Q6_K */
        int r16 = lilac_cpu_r16_type(t->type);
        int64_t rows16 = rows / LILAC_QR16_ROWS * LILAC_QR16_ROWS;
        uint8_t *packed = NULL;
        lilac_mat W16 = W;
        if (r16 >= 0 && cols % 256 == 0 && rows16 > 0 && (packed = aligned_alloc(64, (bytes + 63) / 64 * 64))) {
            for (int64_t g = 0; g < rows16 / LILAC_QR16_ROWS; g++) {
                size_t off = (size_t)g * LILAC_QR16_ROWS * row_bytes;
                if (t->type == LILAC_Q4_K)
                    lilac_qr16_pack_q4_K(data + off, row_bytes, cols, packed + off);
                else
                    lilac_qr16_pack_q6_K(data + off, row_bytes, cols, packed + off);
            }
            W16 = (lilac_mat){.data = packed, .type = r16, .rows = rows16, .cols = cols, .row_bytes = row_bytes};
        }
        for (int path = 0; path <= (packed ? 2 : quant); path++)
            for (int s = 0; s < n_sets; s++) {
                lilac_cpu_kernels k = lilac_cpu_with(sets[s], path > 0);
                const lilac_mat *M = path == 2 ? &W16 : &W;
                if (path == 2 && !lilac_cpu_qr16_for(&k, r16))
                    continue;
                char label[40];
                snprintf(label, sizeof label, "%s %s", sets[s]->name,
                         quant ? (path == 2 ? "fast r16" : path ? "fast" : "precise") : "");
                size_t mbytes = (size_t)M->rows * row_bytes;
                for (int th = 0; th < n_threads; th++) {
                    double best = 1e30;
                    lilac_matmul(&k, pools[th], M, x, ntok, y); /* warm the pool and the scratch */
                    for (int r = 0; r < reps; r++) {
                        double t0 = bu_now();
                        lilac_matmul(&k, pools[th], M, x, ntok, y);
                        double dt = bu_now() - t0;
                        best = dt < best ? dt : best;
                    }
                    printf("| %-4s | %-16s | %7d | %6.2f | %9.2f |\n", t->name, label, threads[th],
                           (double)mbytes / best * 1e-9, best * 1e3);
                    fflush(stdout);
                }
            }
        free(packed);
    }
    for (int i = 0; i < n_threads; i++)
        lilac_pool_free(pools[i]);
    free(data), free(x), free(y);
    return 0;
}
