/* CPU kernels against their scalar oracles, and the scalar oracles
 * against plain math: random data of awkward sizes. */
#include <math.h>
#include <stdatomic.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "testutil.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static uint16_t to_bf16(float f)
{
    union { float f; uint32_t u; } v = {f};
    return (uint16_t)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16);
}

/* float -> f16 by rounding to nearest, for normal values in range */
static uint16_t to_f16(float f)
{
    union { float f; uint32_t u; } v = {f};
    uint32_t sign = (v.u >> 16) & 0x8000;
    int e = (int)((v.u >> 23) & 0xff) - 127 + 15;
    uint32_t man = v.u & 0x7fffff;
    if (e <= 0)
        return (uint16_t)sign; /* flush tiny values: only normal values are tested */
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
    if ((man & 0x1fff) > 0x1000 || ((man & 0x1fff) == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)h;
}

static double f16_math(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_f16_all(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = f16_math((uint16_t)h);
        float got = lilac_f16_to_f32((uint16_t)h);
        if (isnan(want) ? !isnan(got) : (double)got != want)
            bad++;
    }
    CHECKF(bad == 0, "%d of 65536 f16 values convert wrong", bad);
    CHECK(lilac_bf16_to_f32(0x3f80) == 1.0f && lilac_bf16_to_f32(0xc000) == -2.0f);
}

static void test_dots(const lilac_cpu_kernels *k)
{
    static const int sizes[] = {1, 2, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 1000, 4099};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        float *x = malloc((size_t)n * 4), *w32 = malloc((size_t)n * 4);
        uint16_t *w16 = malloc((size_t)n * 2), *wb = malloc((size_t)n * 2);
        double mag = 0, exact32 = 0, exact16 = 0, exactb = 0;
        for (int i = 0; i < n; i++) {
            x[i] = frand() * 3;
            w32[i] = frand();
            w16[i] = to_f16(w32[i]);
            wb[i] = to_bf16(w32[i]);
            mag += fabs((double)w32[i] * x[i]);
            exact32 += (double)w32[i] * x[i];
            exact16 += f16_math(w16[i]) * x[i];
            exactb += (double)lilac_bf16_to_f32(wb[i]) * x[i];
        }
        /* float32 accumulation: error grows like n * eps * sum|w x| at worst */
        double tol = 4e-7 * (n + 8) * mag + 1e-30;
        struct { int type; const void *w; double exact; } c[] = {
            {LILAC_F32, w32, exact32}, {LILAC_F16, w16, exact16}, {LILAC_BF16, wb, exactb}};
        for (int j = 0; j < 3; j++) {
            float fast = lilac_cpu_dot_for(k, c[j].type)(c[j].w, x, n);
            float oracle = lilac_cpu_dot_for(&lilac_cpu_scalar, c[j].type)(c[j].w, x, n);
            CHECKF(fabs(fast - c[j].exact) <= tol, "%s dot type %d n=%d: %.9g vs exact %.9g", k->name, c[j].type,
                   n, fast, c[j].exact);
            CHECKF(fabs(fast - oracle) <= tol, "%s dot type %d n=%d: %.9g vs scalar %.9g", k->name, c[j].type, n,
                   fast, oracle);
        }
        /* axpy: y + a x with one or two roundings per element, every element, the tail included */
        float *y = malloc((size_t)n * 4), *yo = malloc((size_t)n * 4), a = frand() * 2;
        for (int i = 0; i < n; i++)
            y[i] = yo[i] = frand();
        k->axpy_f32(y, a, x, n);
        lilac_cpu_scalar.axpy_f32(yo, a, x, n);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += fabs((double)y[i] - ((double)yo[i])) > 2.5e-7 * (fabs((double)a * x[i]) + fabs((double)yo[i])) + 1e-30;
        CHECKF(bad == 0, "%s axpy n=%d: %d elements off the oracle", k->name, n, bad);
        free(y), free(yo);
        free(x), free(w32), free(w16), free(wb);
    }
    /* a wrong kernel fails: a dot that skipped its tail would be far off */
    float x[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1}, w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 5};
    CHECKF(k->dot_f32(w, x, 9) == 5.0f, "%s: the tail element counts", k->name);
}

static void test_matmul(void)
{
    int rows = 37, cols = 45, ntok = 5;
    float *W = malloc((size_t)rows * cols * 4), *x = malloc((size_t)ntok * cols * 4);
    float *y1 = malloc((size_t)ntok * rows * 4), *y3 = malloc((size_t)ntok * rows * 4);
    for (int i = 0; i < rows * cols; i++)
        W[i] = frand();
    for (int i = 0; i < ntok * cols; i++)
        x[i] = frand();
    lilac_mat m = {.data = W, .type = LILAC_F32, .rows = rows, .cols = cols, .row_bytes = (size_t)cols * 4};
    lilac_pool *p1, *p3;
    lilac_error err;
    CHECK(lilac_pool_new(1, &p1, &err) == LILAC_OK && lilac_pool_new(3, &p3, &err) == LILAC_OK);
    const lilac_cpu_kernels *k = lilac_cpu_best();
    lilac_matmul(k, p1, &m, x, ntok, y1);
    lilac_matmul(k, p3, &m, x, ntok, y3);
    int bad = 0;
    for (int t = 0; t < ntok; t++)
        for (int r = 0; r < rows; r++) {
            float want = k->dot_f32(W + (size_t)r * cols, x + (size_t)t * cols, cols);
            bad += y1[t * rows + r] != want || y3[t * rows + r] != want;
        }
    CHECKF(bad == 0, "matmul: %d outputs differ from the row dot products", bad);
    lilac_pool_free(p1);
    lilac_pool_free(p3);
    free(W), free(x), free(y1), free(y3);
}

static atomic_int hits[1000];
static void count_task(void *ctx, int task, int thread)
{
    (void)ctx;
    (void)thread;
    atomic_fetch_add(&hits[task], 1);
}

static void test_pool(void)
{
    lilac_pool *p;
    lilac_error err;
    CHECK(lilac_pool_new(4, &p, &err) == LILAC_OK);
    for (int rep = 0; rep < 200; rep++) {
        int n = 1 + rep * 5 % 1000;
        for (int i = 0; i < n; i++)
            atomic_store(&hits[i], 0);
        lilac_pool_run(p, n, count_task, NULL);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += atomic_load(&hits[i]) != 1;
        CHECKF(bad == 0, "pool run %d: %d of %d tasks not run exactly once", rep, bad, n);
    }
    lilac_pool_free(p);
}

int main(void)
{
    test_f16_all();
    test_dots(&lilac_cpu_scalar);
    const lilac_cpu_kernels *best = lilac_cpu_best();
    printf("best CPU kernels here: %s\n", best->name);
#if defined(LILAC_X86)
    /* every SIMD set this CPU runs, against the oracle */
    const lilac_cpu_kernels *simd[] = {&lilac_cpu_avx2, &lilac_cpu_avx512};
    for (int i = 0; i < 2; i++) {
        if (lilac_cpu_runs(simd[i]))
            test_dots(simd[i]);
        else
            printf("SKIP (part): this CPU cannot run the %s kernels\n", simd[i]->name);
    }
#endif
    test_matmul();
    test_pool();
    TEST_END();
}
