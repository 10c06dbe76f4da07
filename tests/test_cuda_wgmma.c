/* test_cuda_wgmma: the assumptions of cuda_wgmma.cuh (the register layout of
 * wgmma's A and D, the shared-memory descriptor of a no-swizzle K-major B and
 * which of its strides runs along K) checked on the GPU, through
 * lilac_cuda_wgmma_probe: a 64 x K by K x 128 product of small integers
 * (exact in fp16, their sums exact in float32) against the same product on
 * the CPU, bit for bit, for K = 16, 32 and 64, with the descriptor's
 * leading byte offset along K (cuda_wgmma.cuh; the strides swapped, as
 * tried in session 12, read past the buffer).
 *
 * Without a usable CUDA device it skips (exit 77), unless
 * LILAC_REQUIRE_CUDA=1; a build without sm_90a or a device other than
 * compute capability 9.0 skips with that reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "cudatest.h"

#ifdef LILAC_CUDA
#include "kernels/cuda/cuda_ops.h"

/* Mismatches of the probe's d against a b^T; where the first one is. */
static int probe(int K, const float *a, const float *b, const float *ref, char *why, size_t cap,
                 int *unsupported)
{
    float *d = malloc(sizeof(float) * 64 * 128);
    char msg[256] = "";
    int bad = -1;
    *unsupported = 0;
    if (!d)
        return -1;
    if (lilac_cuda_wgmma_probe(a, b, d, K, msg, sizeof msg) != 0) {
        snprintf(why, cap, "%s", msg);
        *unsupported = 1;
        free(d);
        return -1;
    }
    bad = 0;
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 128; c++)
            if (!(d[r * 128 + c] == ref[r * 128 + c])) {
                if (!bad)
                    snprintf(why, cap, "first at row %d column %d: %g, expected %g", r, c, d[r * 128 + c],
                             ref[r * 128 + c]);
                bad++;
            }
    free(d);
    return bad;
}

static void test_k(int K)
{
    float *a = malloc(sizeof(float) * 64 * K), *b = malloc(sizeof(float) * 128 * K),
          *ref = malloc(sizeof(float) * 64 * 128);
    /* distinct small integers: a misplaced element changes the sum */
    for (int i = 0; i < 64 * K; i++)
        a[i] = (float)((int)(rnd() % 15) - 7);
    for (int i = 0; i < 128 * K; i++)
        b[i] = (float)((int)(rnd() % 31) - 15);
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 128; c++) {
            float s = 0;
            for (int k = 0; k < K; k++)
                s += a[r * K + k] * b[c * K + k];
            ref[r * 128 + c] = s;
        }
    char why[256] = "";
    int uns = 0;
    const int bad = probe(K, a, b, ref, why, sizeof why, &uns);
    if (uns) {
        free(a), free(b), free(ref);
        SKIP("%s", why);
    }
    printf("K %2d: wgmma probe: %d of 8192 differ%s%s\n", K, bad, bad ? ", " : "", bad ? why : "");
    CHECKF(bad == 0, "wgmma probe K %d: %d wrong values (%s)", K, bad, why);
    free(a), free(b), free(ref);
}
#endif

int main(void)
{
    char msg[512];
    ct_rng = 0x3C6EF372FE94F82Bull;
    ct_require_cuda(msg, sizeof msg);
#ifdef LILAC_CUDA
    test_k(16);
    test_k(32);
    test_k(64);
#else
    SKIP("built without CUDA");
#endif
    TEST_END();
}
