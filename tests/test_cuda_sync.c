/* test_cuda_sync: lilac_cuda_sync_probe (cuda_probe.cu), the cost of a step boundary in the decode step two
 * ways: a CUDA graph of dependent kernels (PDL), one a phase, against one persistent kernel whose phases wait
 * on device-scope counters. Asserted: every variant orders its phases (each phase's values depend on all of
 * the phase before: the last phase's match the host's, for every variant), with no work and with 32 KB and
 * 64 KB a block a phase. Printed (informative, for docs/architecture.md's persistent step kernel): the
 * microseconds a phase of each.
 *
 * Without a usable CUDA device it skips (exit 77), unless LILAC_REQUIRE_CUDA=1. LILAC_CUDA_TEST_QUICK=1 (the
 * sanitizer runs'): few phases and repetitions. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "cudatest.h"

#ifdef LILAC_CUDA
#include "kernels/cuda/cuda_ops.h"

/* cuda_probe.cu's k_probe_fill word i */
static uint32_t word(size_t i) { return (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 7); }

/* The last phase's values on the host, hashed as the probe hashes them. */
static unsigned host_check(int phases, int nb, int work_bytes, int *last)
{
    const size_t per = (size_t)work_bytes / 4; /* words a block a phase */
    int *v = calloc((size_t)nb, sizeof(int)), *nv = calloc((size_t)nb, sizeof(int));
    for (int p = 0; p < phases; p++) {
        unsigned s = 0;
        for (int b = 0; b < nb; b++)
            s += (unsigned)v[b];
        for (int b = 0; b < nb; b++) {
            unsigned x = 0;
            const size_t w0 = ((size_t)p * nb + b) * per;
            for (size_t i = 0; i < per; i++)
                x ^= word(w0 + i);
            nv[b] = (int)((31u * s + (unsigned)b + (unsigned)p + x) & 0x7fffffffu);
        }
        memcpy(v, nv, sizeof(int) * (size_t)nb);
    }
    unsigned h = 0;
    for (int i = 0; i < (nb < 256 ? nb : 256); i++) {
        h = h * 1000003u + (unsigned)v[i];
        last[i] = v[i];
    }
    free(v), free(nv);
    return h;
}

static void probe(int phases, int reps, int work)
{
    lilac_cuda_sync_probe_result r;
    char msg[256] = "";
    const int rc = lilac_cuda_sync_probe(phases, reps, work, &r, msg, sizeof msg);
    CHECKF(rc == 0, "lilac_cuda_sync_probe(%d, %d, %d): %s", phases, reps, work, msg);
    if (rc)
        return;
    int last[256];
    const unsigned want = host_check(phases, r.blocks, work, last);
    static const char *names[] = {"chain", "chain, staged", "persistent", "persistent, prefetching"};
    for (int v = 0; v < 4; v++)
        CHECKF(r.check[v] == want, "%s, %d phases, %d bytes a block: the last phase's values are not the host's "
               "(an ordering bug)", names[v], phases, work);
    CHECKF(memcmp(last, r.last, sizeof(int) * (size_t)(r.blocks < 256 ? r.blocks : 256)) == 0,
           "the persistent kernel's last values differ from the host's");
    printf("%d blocks, %d phases, %5d bytes a block a phase: us a phase: chain %.2f, staged %.2f; persistent %.2f, "
           "prefetching %.2f\n",
           r.blocks, phases, work, r.us_chain, r.us_chain_staged, r.us_persist, r.us_persist_prefetch);
}
#endif

int main(void)
{
    char msg[512];
    ct_require_cuda(msg, sizeof msg);
#ifdef LILAC_CUDA
    const int quick = ct_quick();
    const int phases = quick ? 4 : 64, reps = quick ? 1 : 20;
    probe(phases, reps, 0);
    probe(phases, reps, 32768);
    probe(phases, reps, 65536);
#else
    SKIP("built without CUDA");
#endif
    TEST_END();
}
