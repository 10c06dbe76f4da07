/* cudatest: what the CUDA kernel tests share: a seeded xorshift generator,
 * random weight blocks with sane scales, the device-error check, and the
 * skip-or-fail rule when no GPU can be used. */
#ifndef LILAC_TESTS_CUDATEST_H
#define LILAC_TESTS_CUDATEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/cuda.h"
#include "testutil.h"
#include "util/env.h"

/* LILAC_CUDA_TEST_QUICK=1 (bench/cuda/run.sh sanitize: compute-sanitizer's instrumented runs are slow): a case
 * of each kernel path, not their spread. */
static inline bool ct_quick(void) { return lilac_env_switch("LILAC_CUDA_TEST_QUICK", false); }

/* LILAC_CUDA_TEST_PARTS=a,b (racecheck, whose runs of a whole test exceed a call's time): the parts of a test
 * named there alone; unset, every part. A test prints the parts it knows when none of them ran. */
static inline bool ct_part(const char *name)
{
    const char *e = getenv("LILAC_CUDA_TEST_PARTS");
    return !e || !*e || lilac_env_list_has(e, name);
}

/* The generator's state: each test seeds it (ct_rng = ...) before drawing. */
static uint64_t ct_rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t rnd(void)
{
    ct_rng ^= ct_rng << 13;
    ct_rng ^= ct_rng >> 7;
    ct_rng ^= ct_rng << 17;
    return ct_rng;
}
static inline double rnd_unit(void) { return (double)(rnd() >> 11) / 9007199254740992.0; } /* [0, 1) */
static inline float rnd_sym(void) { return (float)(2 * rnd_unit() - 1); }               /* [-1, 1) */
static inline double rnd_open(void) { return ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0; } /* (0, 1) */
/* N(0, 1) (Box-Muller) */
static inline float rnd_normal(void)
{
    return (float)(sqrt(-2 * log(rnd_open())) * cos(6.283185307179586 * rnd_open()));
}

/* A small finite fp16 scale of either sign, 2^-10 .. 2^-5. */
static inline uint16_t rnd_scale(void)
{
    const float m = ldexpf(1.f + (float)rnd_unit(), -10 + (int)(rnd() % 5));
    return lilac_f32_to_f16(rnd() & 1 ? -m : m);
}

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static inline const char *tname(int type) { return lilac_dtype_get(type)->name; }

/* LILAC_CUDA_TEST_TYPES=Q4_K,Q6_K (racecheck: test_cuda_kernels' matvec part a type a process): the block types
 * named there alone (tname's names); unset, every one. */
static inline bool ct_type(int type)
{
    const char *e = getenv("LILAC_CUDA_TEST_TYPES");
    return !e || !*e || lilac_env_list_has(e, tname(type));
}

/* rows x cols of `type`, rows row_bytes apart (any padding random). Mode 0:
 * random bytes with sane fp16 scales (every bit pattern of the quants and
 * the 6-bit scales); mode 1: gaussian-like floats through lilac's own
 * quantizers (the values models have). Float types: gaussian-like floats. */
static inline void fill_matrix(int type, int64_t rows, int64_t cols, size_t row_bytes, int mode, uint8_t *buf)
{
    const size_t packed = lilac_dtype_row_bytes(type, cols);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = buf + (size_t)r * row_bytes;
        for (size_t i = 0; i < row_bytes; i++)
            row[i] = (uint8_t)rnd();
        if (mode == 1 || type == LILAC_F32 || type == LILAC_F16 || type == LILAC_BF16) {
            for (int64_t c = 0; c < cols; c++)
                tmp[c] = (rnd_sym() + rnd_sym() + rnd_sym()) * (mode == 1 ? 0.05f : 1.f);
            lilac_quantize_rows(NULL, type, tmp, row, 1, cols);
            continue;
        }
        const lilac_dtype_info *ti = lilac_dtype_get(type);
        for (size_t b = 0; b < packed / ti->size; b++) {
            uint8_t *blk = row + b * ti->size;
            switch (type) {
            case LILAC_Q8_0:
            case LILAC_Q4_0: put16(blk, rnd_scale()); break;
            case LILAC_Q4_K:
            case LILAC_Q5_K:
                put16(blk, rnd_scale());
                put16(blk + 2, rnd_scale());
                break;
            case LILAC_Q6_K: put16(blk + 208, rnd_scale()); break;
            }
        }
    }
    free(tmp);
}

/* Device memory and copies for the kernel tests: a failure ends the test (exit 1) with CUDA's message. */
static inline void *ct_dmalloc(size_t bytes)
{
    void *d = NULL;
    char msg[256];
    if (lilac_cuda_malloc(&d, bytes, msg, sizeof msg)) {
        fprintf(stderr, "cuda malloc: %s\n", msg);
        exit(1);
    }
    return d;
}

static inline void ct_up(void *d, const void *h, size_t bytes)
{
    char msg[256];
    if (lilac_cuda_upload(d, h, bytes, msg, sizeof msg)) {
        fprintf(stderr, "cuda upload: %s\n", msg);
        exit(1);
    }
}

static inline void ct_down(void *h, const void *d, size_t bytes)
{
    char msg[256];
    if (lilac_cuda_download(h, d, bytes, NULL, msg, sizeof msg)) {
        fprintf(stderr, "cuda download: %s\n", msg);
        exit(1);
    }
}

/* The first refused call or device error since the last check, or NULL. */
static inline const char *check_msg(void)
{
    static char msg[512];
    msg[0] = 0;
    if (lilac_cuda_check(msg, sizeof msg) != 0)
        return msg;
    if (lilac_cuda_sync(NULL, msg, sizeof msg) != 0)
        return msg;
    return NULL;
}

/* No usable GPU: skip (exit 77), saying why, unless LILAC_REQUIRE_CUDA=1: then fail (exit 1). msg holds the
 * device's description (lilac_cuda_available) when there is one. */
static inline void ct_require_cuda(char *msg, size_t cap)
{
    if (lilac_cuda_available(msg, cap))
        return;
    const char *req = getenv("LILAC_REQUIRE_CUDA");
    if (req && strcmp(req, "1") == 0) {
        fprintf(stderr, "FAIL: LILAC_REQUIRE_CUDA=1 but CUDA is not available: %s\n", msg);
        exit(1);
    }
    SKIP("CUDA not available: %s", msg);
}

#endif
