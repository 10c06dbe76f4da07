/* qxtest: what the fast-path kernel tests (test_qfast.c, test_qr16_*.c)
 * share: a seeded xorshift generator, random fp16 scales, quantized
 * activation rows, and random activations with the awkward blocks. */
#ifndef LILAC_TEST_QXTEST_H
#define LILAC_TEST_QXTEST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/qfast.h"

static uint64_t qt_rng = 0x9e3779b97f4a7c15ull; /* a test may seed it */

static inline uint64_t qt_next(void)
{
    qt_rng ^= qt_rng << 13, qt_rng ^= qt_rng >> 7, qt_rng ^= qt_rng << 17;
    return qt_rng;
}
static inline double qt_urand(void) { return (double)(qt_next() >> 11) * (1.0 / 9007199254740992.0); }
static inline float qt_frand(void) { return (float)(qt_urand() * 2.0 - 1.0); }

/* any finite fp16 */
static inline uint16_t qt_rand_f16(void)
{
    uint16_t h = (uint16_t)qt_next();
    if (((h >> 10) & 31) == 31)
        h &= (uint16_t)~0x4000;
    return h;
}

/* One quantized activation row in its own buffer, filled with a pattern
 * first so that nothing may stay unwritten. */
typedef struct {
    void *buf;
    lilac_qx q;
} qrow;

static inline qrow qrow_new(int64_t n, int layout)
{
    qrow r;
    r.buf = aligned_alloc(64, lilac_qx_row_bytes(n));
    memset(r.buf, 0xA5, lilac_qx_row_bytes(n));
    r.q = lilac_qx_carve(r.buf, n, layout);
    return r;
}

/* Random activations with the awkward cases (plain: none): zero and
 * sub-threshold blocks, blocks of very different sizes, lone outliers,
 * and exact ties of the rounding (max|x| = 127 makes Q = 256 x, so
 * x = k + 1/2 lands on Q = 128 mod 256 and x = k + 1/2 + 1/512 on a half
 * of Q). */
static inline void qt_rand_x(float *x, int64_t n, int plain)
{
    for (int64_t b = 0; b < n / 32; b++) {
        float *xb = x + 32 * b;
        int kind = plain ? 7 : (int)(qt_next() % 10);
        float scale = 1.0f;
        switch (kind) {
        case 0: memset(xb, 0, 32 * sizeof(float)); continue;
        case 1:
            for (int i = 0; i < 32; i++)
                xb[i] = qt_frand() * 1e-31f;
            continue;
        case 2: scale = 1e-3f; break;
        case 3: scale = 1e3f; break;
        case 4:
            for (int i = 0; i < 32; i++)
                xb[i] = qt_frand() * 0.01f;
            xb[qt_next() % 32] = 40.0f * (qt_next() & 1 ? 1 : -1);
            continue;
        case 5:
            for (int i = 0; i < 32; i++)
                xb[i] = (float)((int)(qt_next() % 253) - 126) + (qt_next() & 1 ? 0.5f : -0.5f) +
                        (qt_next() & 1 ? 1.0f / 512 : 0.0f);
            xb[qt_next() % 32] = qt_next() & 1 ? 127.0f : -127.0f;
            continue;
        default: break;
        }
        for (int i = 0; i < 32; i++)
            xb[i] = qt_frand() * scale;
    }
}

#endif
