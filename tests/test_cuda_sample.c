/* test_cuda_sample: the sampler's reduction on the GPU (lilac_cuda_logits_top)
 * against its host oracle (lilac_logits_top_of) and a plain sort:
 * - vocabularies from 1 to 300,000 logits (slices of 4096 whole, partial and
 *   single), k 1, 2, 40, 128 and more than the vocabulary;
 * - one row a call and several (5, 3 with rows farther apart than V, 32);
 * - ties: logits drawn from few values, so that k cuts through runs of equal
 *   logits, which must come lowest id first; -0 and +0 as one value; -inf;
 * Bounds: the candidates' ids and logits exactly (-0 may come back as +0); the log-sum-exp within
 * 1e-6 (relative to its magnitude, at least 1) of a float64 one.
 * Without a usable CUDA device it skips (exit 77), unless
 * LILAC_REQUIRE_CUDA=1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudatest.h"
#include "kernels/cuda/cuda.h"

#ifdef LILAC_CUDA
#include "kernels/cuda/cuda_sizes.h"

static int cmp_desc(const void *a, const void *b) /* logit descending, id ascending */
{
    const float *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? 1 : -1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static double worst_lse;

/* rows rows of V logits, `pad` floats apart beyond V, reduced in one call; each row against the oracle */
static void test_case(int V, int k, int mode, int rows, int pad)
{
    const long long stride = (long long)V + pad;
    float *all = malloc(sizeof(float) * (size_t)(stride * rows)), *pairs = malloc(sizeof(float) * 2 * (size_t)V);
    for (long long i = 0; i < stride * rows; i++) {
        if (mode == 0) /* spread */
            all[i] = rnd_normal() * 4.0f;
        else if (mode == 1) /* few values: long runs of ties */
            all[i] = (float)(int)(rnd_unit() * 9) - 4.0f;
        else /* zeros of both signs, -inf, and a few larger */
            all[i] = (rnd() & 3) == 0 ? -INFINITY : (rnd() & 1) ? 0.0f : -0.0f;
    }
    for (int r = 0; mode == 2 && V > 10 && r < rows; r++)
        all[r * stride + V / 3] = 2.5f, all[r * stride + V - 1] = 2.5f, all[r * stride + 7] = 1.0f + r;
    const int kk = k < LILAC_TOP_MAX ? k : LILAC_TOP_MAX;
    const size_t bytes = lilac_cuda_top_bytes(V, kk, rows);
    float *dl = ct_dmalloc(sizeof(float) * (size_t)(stride * rows));
    char *dscr = ct_dmalloc(bytes);
    ct_up(dl, all, sizeof(float) * (size_t)(stride * rows));
    int rc = lilac_cuda_logits_top(dl, V, rows, stride, kk, dscr, NULL);
    CHECKF(rc == 0, "V %d k %d rows %d: the reduction launched", V, kk, rows);
    for (int r = 0; rc == 0 && r < rows; r++) {
        const float *lg = all + r * stride;
        lilac_logits_top got, want;
        ct_down(&got, dscr + (size_t)r * LILAC_CUDA_TOP_OUT, sizeof got);
        lilac_logits_top_of(lg, V, kk, &want);
        /* and a plain sort, for the oracle itself (-0 as +0: equal floats) */
        for (int i = 0; i < V; i++)
            pairs[2 * i] = lg[i] == 0.0f ? 0.0f : lg[i], pairs[2 * i + 1] = (float)i;
        qsort(pairs, (size_t)V, 2 * sizeof(float), cmp_desc);
        const int n = kk < V ? kk : V;
        int bad_ids = 0, bad_sort = 0;
        for (int i = 0; i < n; i++) {
            bad_ids += got.id[i] != want.id[i] || got.logit[i] != want.logit[i]; /* -0 comes back +0 */
            bad_sort += want.id[i] != (int32_t)pairs[2 * i + 1];
        }
        double mx = -INFINITY, z = 0;
        for (int i = 0; i < V; i++)
            mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < V; i++)
            z += exp((double)lg[i] - mx);
        /* every logit -inf: -inf (the sum of no mass), not the formula's NaN */
        const double lse = mx == -INFINITY ? -INFINITY : mx + log(z), scale = fabs(lse) > 1 ? fabs(lse) : 1;
        const double e = got.lse == lse ? 0 : fabs(got.lse - lse) / scale;
        worst_lse = e > worst_lse ? e : worst_lse;
        CHECKF(got.n == n && want.n == n, "V %d k %d: %d and %d candidates, not %d", V, kk, got.n, want.n, n);
        CHECKF(bad_ids == 0, "V %d k %d mode %d row %d of %d: %d of %d candidates differ from the host's", V, kk, mode,
               r, rows, bad_ids, n);
        CHECKF(bad_sort == 0, "V %d k %d mode %d: the host's top differs from a sort in %d places", V, kk, mode,
               bad_sort);
        CHECKF(e <= 1e-6, "V %d k %d mode %d row %d: log-sum-exp %.9g against %.9g", V, kk, mode, r, got.lse, lse);
        CHECKF(want.lse == lse || fabs(want.lse - lse) / scale <= 1e-6, "V %d: the host's log-sum-exp %.9g against "
               "%.9g", V, want.lse, lse);
    }
    lilac_cuda_free(dl);
    lilac_cuda_free(dscr);
    free(all);
    free(pairs);
}
#endif

int main(void)
{
    char msg[512];
    ct_rng = 0x510E527FADE682D1ull;
    ct_require_cuda(msg, sizeof msg);
#ifdef LILAC_CUDA
    static const int VS[] = {1, 5, 100, 4096, 4097, 8191, 151936, 248320, 300000};
    static const int KS[] = {1, 2, 40, 128};
    int cases = 0;
    if (ct_quick()) { /* the sanitizers' runs (racecheck of all of it ran past 150 s): a case of each path */
        test_case(4097, 40, 1, 1, 0), test_case(5, 128, 2, 1, 0), test_case(248320, 40, 0, 2, 3), cases += 3;
    } else {
        for (size_t v = 0; v < sizeof VS / sizeof VS[0]; v++)
            for (size_t k = 0; k < sizeof KS / sizeof KS[0]; k++)
                for (int mode = 0; mode < 3; mode++, cases++)
                    test_case(VS[v], KS[k], mode, 1, 0);
        /* several rows a call (the batched step's), rows apart by more than V */
        test_case(248320, 40, 0, 5, 0), test_case(248320, 128, 1, 3, 17), test_case(4097, 7, 2, 32, 3), cases += 3;
    }
    /* what it refuses: k out of range, and a vocabulary whose slices' candidates overflow the merge */
    float *d = ct_dmalloc(sizeof(float) * 16);
    void *scr = ct_dmalloc(lilac_cuda_top_bytes(16, LILAC_TOP_MAX, 1));
    CHECK(lilac_cuda_logits_top(d, 16, 1, 16, 0, scr, NULL) == -1);
    CHECK(lilac_cuda_logits_top(d, 16, 1, 16, LILAC_TOP_MAX + 1, scr, NULL) == -1);
    CHECK(lilac_cuda_logits_top(d, 0, 1, 16, 1, scr, NULL) == -1);
    CHECK(lilac_cuda_logits_top(d, 16, 0, 16, 1, scr, NULL) == -1);
    CHECK(lilac_cuda_logits_top(d, 16, 2, 15, 1, scr, NULL) == -1); /* rows overlapping */
    CHECK(lilac_cuda_logits_top(d, (LILAC_CUDA_TOP_MERGE / LILAC_TOP_MAX + 1) * LILAC_CUDA_TOP_SLICE, 1, 0,
                                LILAC_TOP_MAX, scr, NULL) == -1);
    lilac_cuda_free(d);
    lilac_cuda_free(scr);
    printf("%d cases; worst log-sum-exp error %.3g\n", cases, worst_lse);
#else
    SKIP("built without CUDA");
#endif
    TEST_END();
}
