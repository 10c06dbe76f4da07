/* dn_bench: one layer's Gated DeltaNet prefill (the per-head recurrence,
 * not the projections) on the Qwen3.6-35B-A3B shape: 32 value heads over
 * 16 key heads, dk = dv = 128, N tokens (default 512) in chunks of 64, on
 * one thread, as decoder.c's dn_head_task runs it (q, k, v read from the
 * conv output rows, o written into the [tokens][heads x dv] output). The
 * old code (tests/dn_ref.h: per-element loops, expf in inner loops) against
 * model/deltanet.c with each kernel set's gemm_f32.
 *
 *   bench/build.sh build-rel dn_bench
 *   build-rel/bench/dn_bench [-n TOKENS] [-r REPEATS] [-k SETS]
 *
 * Reports ms per layer (best of REPEATS) and the new form's useful
 * multiply-adds (the triangular products counted by their lower half) as a
 * fraction of one core's FMA peak (16 float FMAs per cycle on Zen 4 at the
 * /proc/cpuinfo clock). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "../tests/dn_ref.h"
#include "kernels/cpu/cpu.h"
#include "model/deltanet.h"

enum { NK = 16, NV = 32, DK = 128, DV = 128, C = 2 * NK * DK + NV * DV };

static void normalize(float *x, int n, float scale)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(s + 1e-6)) * scale;
    for (int i = 0; i < n; i++)
        x[i] *= r;
}

typedef struct {
    int nt;
    float *qkv, *g, *beta, *S, *o, *buf;
} layer;

/* one layer, every head, the old way (pointer arrays as decoder.c had them) */
static void run_old(layer *ly)
{
    const float *qs[DN_OLD_CHUNK], *ks[DN_OLD_CHUNK], *vs[DN_OLD_CHUNK];
    float *os[DN_OLD_CHUNK], gs[DN_OLD_CHUNK], bs[DN_OLD_CHUNK];
    for (int j = 0; j < NV; j++) {
        int kh = j % NK;
        float *S = ly->S + (size_t)j * DK * DV;
        for (int t0 = 0; t0 < ly->nt; t0 += DN_OLD_CHUNK) {
            int L = ly->nt - t0 < DN_OLD_CHUNK ? ly->nt - t0 : DN_OLD_CHUNK;
            for (int i = 0; i < L; i++) {
                const float *row = ly->qkv + (size_t)(t0 + i) * C;
                qs[i] = row + kh * DK, ks[i] = row + NK * DK + kh * DK, vs[i] = row + 2 * NK * DK + j * DV;
                os[i] = ly->o + (size_t)(t0 + i) * NV * DV + j * DV;
                gs[i] = ly->g[(size_t)(t0 + i) * NV + j], bs[i] = ly->beta[(size_t)(t0 + i) * NV + j];
            }
            dn_chunk_old(S, qs, ks, vs, gs, bs, L, DK, DV, os, ly->buf);
        }
    }
}

static void run_new(layer *ly, const lilac_cpu_kernels *kern)
{
    float gs[LILAC_DN_CHUNK], bs[LILAC_DN_CHUNK];
    for (int j = 0; j < NV; j++) {
        int kh = j % NK;
        float *S = ly->S + (size_t)j * DK * DV;
        for (int t0 = 0; t0 < ly->nt; t0 += LILAC_DN_CHUNK) {
            int L = ly->nt - t0 < LILAC_DN_CHUNK ? ly->nt - t0 : LILAC_DN_CHUNK;
            for (int i = 0; i < L; i++)
                gs[i] = ly->g[(size_t)(t0 + i) * NV + j], bs[i] = ly->beta[(size_t)(t0 + i) * NV + j];
            const float *row = ly->qkv + (size_t)t0 * C;
            lilac_dn_chunk(kern, S, row + kh * DK, row + NK * DK + kh * DK, row + 2 * NK * DK + j * DV, C, gs, bs,
                           L, DK, DV, ly->o + (size_t)t0 * NV * DV + j * DV, NV * DV, ly->buf);
        }
    }
}

int main(int argc, char **argv)
{
    int nt = 512, reps = 5, opt;
    const char *sets_arg = NULL;
    while ((opt = getopt(argc, argv, "n:r:k:")) != -1) {
        if (opt == 'n')
            nt = atoi(optarg);
        else if (opt == 'r')
            reps = atoi(optarg);
        else if (opt == 'k')
            sets_arg = optarg;
        else {
            fprintf(stderr, "usage: %s [-n TOKENS] [-r REPEATS] [-k scalar,avx2,avx512]\n", argv[0]);
            return 2;
        }
    }
    if (nt < 1 || reps < 1)
        return 2;
    layer ly = {.nt = nt};
    ly.qkv = malloc((size_t)nt * C * sizeof(float));
    ly.g = malloc((size_t)nt * NV * sizeof(float));
    ly.beta = malloc((size_t)nt * NV * sizeof(float));
    ly.S = malloc((size_t)NV * DK * DV * sizeof(float));
    ly.o = malloc((size_t)nt * NV * DV * sizeof(float));
    size_t nb = lilac_dn_scratch_floats(DK, DV), no = dn_old_floats(DK, DV);
    ly.buf = malloc((nb > no ? nb : no) * sizeof(float));
    for (size_t i = 0; i < (size_t)nt * C; i++)
        ly.qkv[i] = bu_frand();
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < NK; h++) {
            normalize(ly.qkv + (size_t)t * C + h * DK, DK, 1.0f / sqrtf((float)DK));
            normalize(ly.qkv + (size_t)t * C + NK * DK + h * DK, DK, 1.0f);
        }
    for (size_t i = 0; i < (size_t)nt * NV; i++) {
        ly.g[i] = -0.5f + 0.49f * bu_frand();
        ly.beta[i] = 0.5f + 0.49f * bu_frand();
    }
    float *ref = malloc((size_t)nt * NV * DV * sizeof(float));

    /* useful FMAs per layer: per chunk of L, 3 L dk dv (v_new, o, state)
     * + L^2/2 (2 dk + 2 dv + dk) (k.k, q.k, U, P v_new, W) */
    double fma = 0;
    for (int t0 = 0; t0 < nt; t0 += LILAC_DN_CHUNK) {
        double L = nt - t0 < LILAC_DN_CHUNK ? nt - t0 : LILAC_DN_CHUNK;
        fma += NV * (3 * L * DK * DV + L * L / 2 * (3 * DK + 2 * DV));
    }
    double peak = bu_cpu_mhz() * 1e6 * 16;
    printf("one DeltaNet layer, %d tokens, %d value heads, dk = dv = %d, one thread; best of %d\n", nt, NV, DK, reps);

    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        memset(ly.S, 0, (size_t)NV * DK * DV * sizeof(float));
        double t = bu_now();
        run_old(&ly);
        t = bu_now() - t;
        best = t < best ? t : best;
    }
    memcpy(ref, ly.o, (size_t)nt * NV * DV * sizeof(float));
    double t_old = best;
    printf("  %-16s %8.2f ms  %5.1f %% of FMA peak\n", "old", t_old * 1e3, 100 * fma / t_old / peak);

    const lilac_cpu_kernels *sets[] = {&lilac_cpu_scalar,
#if defined(LILAC_X86)
                                       &lilac_cpu_avx2, &lilac_cpu_avx512,
#endif
    };
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        if (!lilac_cpu_runs(sets[s]) || (sets_arg && !strstr(sets_arg, sets[s]->name)))
            continue;
        best = 1e30;
        for (int r = 0; r < reps; r++) {
            memset(ly.S, 0, (size_t)NV * DK * DV * sizeof(float));
            double t = bu_now();
            run_new(&ly, sets[s]);
            t = bu_now() - t;
            best = t < best ? t : best;
        }
        double md = 0, mo = 0;
        for (size_t i = 0; i < (size_t)nt * NV * DV; i++) {
            md = fmax(md, fabs(ly.o[i] - ref[i]));
            mo = fmax(mo, fabs(ref[i]));
        }
        char name[32];
        snprintf(name, sizeof name, "new, %s", sets[s]->name);
        printf("  %-16s %8.2f ms  %5.1f %% of FMA peak  x%.1f  (max |o - old| %.1e of max |o|)\n", name, best * 1e3,
               100 * fma / best / peak, t_old / best, md / mo);
    }
    free(ly.qkv), free(ly.g), free(ly.beta), free(ly.S), free(ly.o), free(ly.buf), free(ref);
    return 0;
}
