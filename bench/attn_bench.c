/* attn_bench: one decode token's attention over a KV cache at depth, on
 * the Qwen3.6-35B-A3B shape (16 query heads, 2 KV heads, head_dim 256, q
 * with its output gate beside it), through lilac_attn_run exactly as the
 * decoder calls it, against the attention lilac ran before
 * (model/attention.c replaced it: per key and head the kernel set's dot
 * product, libm expf, then axpy per value row and head), kept here.
 *
 * Ten layers of cache are allocated and a token runs through all ten, so
 * the K/V bytes come from memory as in the model (335 MB of float32 at
 * depth 8192, more than the caches). Reports ms per token for the 10
 * layers, GB/s of K/V read and the fraction of the FMA peak (16 float FMAs
 * per cycle per core on Zen 4; the clock from /proc/cpuinfo).
 *
 *   attn_bench [-d 0,2048,8192] [-j 1,2] [-r REPEATS] [-k SET] [-L LAYERS]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quantize.h"
#include "model/attention.h"
#include "util/pool.h"

enum { NH = 16, NKV = 2, HD = 256, G = NH / NKV, QSTEP = 2 * HD };

/* ---- the previous attention (decoder.c before model/attention.c) ---- */

typedef struct {
    const lilac_cpu_kernels *kern;
    const float *q, *k, *v;
    float *out;
    int n_keys;
    float *scores; /* [threads][G * n_keys] */
} old_job;

static void old_task(void *ctx, int kvh, int thread)
{
    const old_job *j = ctx;
    int kvw = NKV * HD, n_keys = j->n_keys;
    float *sc = j->scores + (size_t)thread * G * n_keys;
    float scale = 1.0f / sqrtf((float)HD);
    const float *q0 = j->q + (size_t)kvh * G * QSTEP;
    for (int p = 0; p < n_keys; p++) {
        const float *k = j->k + (size_t)p * kvw + (size_t)kvh * HD;
        for (int i = 0; i < G; i++)
            sc[(size_t)i * n_keys + p] = j->kern->dot_f32(k, q0 + (size_t)i * QSTEP, HD) * scale;
    }
    for (int i = 0; i < G; i++) {
        float *s = sc + (size_t)i * n_keys, mx = -INFINITY;
        for (int p = 0; p < n_keys; p++)
            mx = s[p] > mx ? s[p] : mx;
        double sum = 0;
        for (int p = 0; p < n_keys; p++) {
            s[p] = expf(s[p] - mx);
            sum += s[p];
        }
        float inv = (float)(1.0 / sum);
        for (int p = 0; p < n_keys; p++)
            s[p] *= inv;
        memset(j->out + (size_t)(kvh * G + i) * HD, 0, HD * sizeof(float));
    }
    for (int p = 0; p < n_keys; p++) {
        const float *v = j->v + (size_t)p * kvw + (size_t)kvh * HD;
        for (int i = 0; i < G; i++)
            j->kern->axpy_f32(j->out + (size_t)(kvh * G + i) * HD, sc[(size_t)i * n_keys + p], v, HD);
    }
}

/* ---- */

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        s = strchr(s, ',');
        if (!s)
            break;
        s++;
    }
    return n;
}

int main(int argc, char **argv)
{
    int depths[8] = {0, 2048, 8192}, nd = 3, threads[4] = {1, 2}, nj = 2, reps = 5, L = 10;
    const lilac_cpu_kernels *kern = lilac_cpu_best();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-d") && i + 1 < argc)
            nd = parse_list(argv[++i], depths, 8);
        else if (!strcmp(argv[i], "-j") && i + 1 < argc)
            nj = parse_list(argv[++i], threads, 4);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-L") && i + 1 < argc)
            L = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) {
            const char *want = argv[++i];
            kern = !strcmp(want, "scalar") ? &lilac_cpu_scalar
#if defined(LILAC_X86)
                   : !strcmp(want, "avx2") ? &lilac_cpu_avx2
#endif
                                           : lilac_cpu_best();
        } else {
            fprintf(stderr, "usage: %s [-d 0,2048,8192] [-j 1,2] [-r REPEATS] [-k SET] [-L LAYERS]\n", argv[0]);
            return 2;
        }
    }
    if (L < 1 || reps < 1)
        return 2;
    int max_depth = 0;
    for (int i = 0; i < nd; i++)
        max_depth = depths[i] > max_depth ? depths[i] : max_depth;
    int rows = max_depth + 1, kvw = NKV * HD;
    size_t cells = (size_t)rows * kvw;
    float **k32 = calloc((size_t)L, sizeof *k32), **v32 = calloc((size_t)L, sizeof *v32);
    uint16_t **k16 = calloc((size_t)L, sizeof *k16), **v16 = calloc((size_t)L, sizeof *v16);
    for (int l = 0; l < L; l++) {
        k32[l] = malloc(cells * 4), v32[l] = malloc(cells * 4);
        k16[l] = malloc(cells * 2), v16[l] = malloc(cells * 2);
        if (!k32[l] || !v32[l] || !k16[l] || !v16[l]) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < cells; i++) {
            k32[l][i] = bu_frand() * 2, v32[l][i] = bu_frand();
            k16[l][i] = lilac_f32_to_f16(k32[l][i]), v16[l][i] = lilac_f32_to_f16(v32[l][i]);
        }
    }
    float q[NH * QSTEP], out[NH * HD];
    for (int i = 0; i < NH * QSTEP; i++)
        q[i] = bu_frand() * 3;
    int max_threads = 1;
    for (int i = 0; i < nj; i++)
        max_threads = threads[i] > max_threads ? threads[i] : max_threads;
    size_t ptf = lilac_attn_thread_floats(NH, NKV, HD);
    float *per_thread = malloc((size_t)max_threads * ptf * sizeof(float));
    float *parts = malloc(LILAC_ATTN_PARTS * lilac_attn_part_floats(NH, NKV, HD) * sizeof(float));
    float *old_scores = malloc((size_t)max_threads * G * (size_t)rows * sizeof(float));
    double mhz = bu_cpu_mhz();
    printf("attention, one decode token: %d q heads, %d KV heads, head_dim %d; %d layers; kernel set %s; "
           "clock %.0f MHz (peak %.1f GFMA/s per core); best of %d\n",
           NH, NKV, HD, L, kern->name, mhz, 16 * mhz * 1e-3, reps);
    printf("%-6s %-4s %-3s %7s | %11s %8s %7s\n", "code", "kv", "thr", "depth", "ms/token", "GB/s", "of FMA peak");
    const char *codes[3] = {"old", "new", "new"};
    const int kv_types[3] = {LILAC_KV_F32, LILAC_KV_F32, LILAC_KV_F16};
    for (int di = 0; di < nd; di++)
        for (int ti = 0; ti < nj; ti++) {
            lilac_pool *pool = NULL;
            lilac_error err = {0};
            if (lilac_pool_new(threads[ti], &pool, &err)) {
                fprintf(stderr, "pool: %s\n", err.msg);
                return 1;
            }
            for (int c = 0; c < 3; c++) {
                int pos = depths[di], n_keys = pos + 1;
                double best = INFINITY;
                /* enough tokens per sample to be ~20 ms */
                int iters = 1 + (int)(2e8 / ((double)n_keys * NH * HD * 2 * L + 1e6));
                for (int r = 0; r < reps; r++) {
                    double t0 = bu_now();
                    for (int it = 0; it < iters; it++)
                        for (int l = 0; l < L; l++) {
                            if (c == 0) {
                                old_job oj = {kern, q, k32[l], v32[l], out, n_keys, old_scores};
                                lilac_pool_run(pool, NKV, old_task, &oj);
                            } else {
                                const void *kv[2] = {kv_types[c] == LILAC_KV_F16 ? (const void *)k16[l] : k32[l],
                                                     kv_types[c] == LILAC_KV_F16 ? (const void *)v16[l] : v32[l]};
                                lilac_attn_step as = {kern, NH, NKV, HD, kv_types[c], 1, q, NH * QSTEP, QSTEP, kv,
                                                      &pos, out, per_thread, ptf, parts, LILAC_ATTN_PARTS};
                                lilac_attn_run(pool, &as);
                            }
                        }
                    double dt = (bu_now() - t0) / iters;
                    best = dt < best ? dt : best;
                }
                double fmas = (double)n_keys * NH * HD * 2 * L;
                double bytes = (double)n_keys * kvw * 2 * (kv_types[c] == LILAC_KV_F16 ? 2 : 4) * L;
                double peak = 16 * mhz * 1e6 * threads[ti];
                printf("%-6s %-4s %-3d %7d | %11.3f %8.1f %6.1f %%\n", codes[c], lilac_kv_type_name(kv_types[c]),
                       threads[ti], pos, best * 1e3, bytes / best * 1e-9, 100 * fmas / best / peak);
                fflush(stdout);
            }
            lilac_pool_free(pool);
        }
    return 0;
}
