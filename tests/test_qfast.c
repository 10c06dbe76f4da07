/* The fast path's kernels (kernels/cpu/qfast.h) in every kernel set this
 * CPU runs:
 *  - the activation quantizer: its invariants (digits in -127..127, Q =
 *    256 hi + lo, |x - unit * Q| <= 1.5 unit, the sums), and every SIMD
 *    version bit for bit equal to the scalar one, ties included;
 *  - each dot product: the scalar oracle against float64 over the same
 *    quantized activations, each SIMD version against the oracle, and
 *    against float64 over the true activations within the activation
 *    rounding, on random blocks of 1..33 blocks; unit probes (every value
 *    lands in its place) and a zeroed block (every block counts);
 *  - deliberately broken kernels, which the same checks must reject;
 *  - lilac_matmul on the fast path, and the precise dots of every set
 *    (the AVX-512 set's float dots are its own).
 * Model-level checks of the fast path are in test_quant_models.c. This
 * file builds without the rest of the engine, so tests/neon/run.sh runs it
 * under qemu for the NEON kernels. */
#include <math.h>
#include <stddef.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qfast.h"
#include "kernels/cpu/quant.h"
#include "qxtest.h"
#include "testutil.h"

typedef void (*dequant_fn)(const void *row, float *out, int64_t n);

typedef struct {
    int type;
    const char *name;
    int qk;
    size_t size;
    dequant_fn dequant;
    size_t f16_at[2];
    int n_f16;
} qtype;

static const qtype types[] = {
    {LILAC_Q8_0, "Q8_0", LILAC_QK8_0, sizeof(block_q8_0), lilac_dequant_q8_0, {offsetof(block_q8_0, d)}, 1},
    {LILAC_Q4_0, "Q4_0", LILAC_QK4_0, sizeof(block_q4_0), lilac_dequant_q4_0, {offsetof(block_q4_0, d)}, 1},
    {LILAC_Q4_K, "Q4_K", LILAC_QK_K, sizeof(block_q4_K), lilac_dequant_q4_K,
     {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}, 2},
    {LILAC_Q5_K, "Q5_K", LILAC_QK_K, sizeof(block_q5_K), lilac_dequant_q5_K,
     {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}, 2},
    {LILAC_Q6_K, "Q6_K", LILAC_QK_K, sizeof(block_q6_K), lilac_dequant_q6_K, {offsetof(block_q6_K, d)}, 1},
};
#define N_TYPES (sizeof types / sizeof types[0])

/* the sets this CPU runs, scalar first */
static const lilac_cpu_kernels *sets[4];
static int n_sets;

static void find_sets(void)
{
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
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (lilac_cpu_runs(all[i]))
            sets[n_sets++] = all[i];
        else
            printf("SKIP (part): this CPU cannot run the %s kernels\n", all[i]->name);
    }
    printf("kernel sets run here:");
    for (int i = 0; i < n_sets; i++)
        printf(" %s", sets[i]->name);
    printf(" (best: %s)\n", lilac_cpu_best()->name);
}

/* nb random blocks; moderate = fp16 scales of moderate size and sign */
static uint8_t *rand_row(const qtype *t, int nb, int moderate)
{
    uint8_t *row = malloc((size_t)nb * t->size);
    for (size_t i = 0; i < (size_t)nb * t->size; i++)
        row[i] = (uint8_t)qt_next();
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < t->n_f16; k++) {
            uint16_t h = moderate ? (uint16_t)(0x3000 + (qt_next() & 0x7ff)) : qt_rand_f16();
            memcpy(row + (size_t)b * t->size + t->f16_at[k], &h, 2);
        }
    return row;
}

static float f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return lilac_f16_to_f32(h);
}

/* Per value, a bound on the size of the terms a kernel sums for it (the
 * K-quant scale and minimum products apart, the Q6_K offset included):
 * float32 rounding is relative to these, not to the weight. */
static void term_mag(const qtype *t, const uint8_t *row, int64_t n, double *g)
{
    float *w = malloc((size_t)n * sizeof(float));
    t->dequant(row, w, n);
    for (int64_t b = 0; b < n / t->qk; b++) {
        const uint8_t *blk = row + (size_t)b * t->size;
        for (int i = 0; i < t->qk; i++) {
            int64_t p = b * t->qk + i;
            double v = fabs((double)w[p]);
            if (t->type == LILAC_Q4_0) /* q * Q less 8 * Q */
                v = fabs((double)f16_at(blk)) * 16;
            else if (t->type == LILAC_Q4_K || t->type == LILAC_Q5_K) {
                uint8_t sc, m;
                lilac_kq_scale_min(i / 32, blk + offsetof(block_q4_K, scales), &sc, &m);
                v = fabs((double)f16_at(blk) * sc) * 32 + fabs((double)f16_at(blk + 2) * m);
            } else if (t->type == LILAC_Q6_K) {
                const block_q6_K *q6 = (const block_q6_K *)(const void *)blk;
                v = fabs((double)lilac_f16_to_f32(q6->d) * q6->scales[i / 16]) * 96;
            }
            g[p] = v;
        }
    }
    free(w);
}

/* ---- activations ---- */

/* Q and the value of value i (in natural order) */
static inline int32_t qx_Q(const lilac_qx *q, int64_t i)
{
    int64_t at = lilac_qx_pos(q->layout, i);
    return 256 * (int32_t)q->hi[at] + q->lo[at];
}
static inline double qx_val(const lilac_qx *q, int64_t i) { return (double)q->unit[i / 32] * qx_Q(q, i); }

static int qx_equal(const lilac_qx *a, const lilac_qx *b, int64_t n)
{
    return memcmp(a->hi, b->hi, (size_t)n) == 0 && memcmp(a->lo, b->lo, (size_t)n) == 0 &&
           memcmp(a->unit, b->unit, (size_t)n / 32 * sizeof(float)) == 0 &&
           memcmp(a->sum16, b->sum16, (size_t)n / 16 * sizeof(int32_t)) == 0 &&
           memcmp(a->sum32, b->sum32, (size_t)n / 32 * sizeof(int32_t)) == 0;
}

/* a copy of q (n values) */
static qrow qrow_copy(const lilac_qx *q, int64_t n)
{
    qrow c = qrow_new(n, q->layout);
    memcpy(c.q.hi, q->hi, (size_t)n);
    memcpy(c.q.lo, q->lo, (size_t)n);
    memcpy(c.q.unit, q->unit, (size_t)n / 32 * sizeof(float));
    memcpy(c.q.sum16, q->sum16, (size_t)n / 16 * sizeof(int32_t));
    memcpy(c.q.sum32, q->sum32, (size_t)n / 32 * sizeof(int32_t));
    return c;
}

static void test_layout(void)
{
    /* KQ: value 64r + 16m + t of each 256 at 64m + 16r + t; a permutation
     * of each 256 that is its own inverse */
    int bad = 0;
    unsigned char seen[512] = {0};
    for (int64_t i = 0; i < 512; i++) {
        int64_t p = lilac_qx_pos(LILAC_QX_KQ, i);
        int64_t r = (i % 256) / 64, m = (i % 64) / 16, t = i % 16;
        bad += p != (i / 256) * 256 + 64 * m + 16 * r + t;
        bad += lilac_qx_pos(LILAC_QX_KQ, p) != i;
        bad += lilac_qx_pos(LILAC_QX_NATURAL, i) != i;
        if (p >= 0 && p < 512)
            seen[p]++;
    }
    for (int i = 0; i < 512; i++)
        bad += seen[i] != 1;
    CHECKF(bad == 0, "the KQ layout is not the transposed 4 x 4 pieces (%d wrong)", bad);
    CHECK(lilac_qx_layout(LILAC_Q4_K) == LILAC_QX_KQ && lilac_qx_layout(LILAC_Q5_K) == LILAC_QX_KQ &&
          lilac_qx_layout(LILAC_Q6_K) == LILAC_QX_NATURAL && lilac_qx_layout(LILAC_Q8_0) == LILAC_QX_NATURAL &&
          lilac_qx_layout(LILAC_Q4_0) == LILAC_QX_NATURAL);
}

static void test_quantize(void)
{
    static const int nbs[2][8] = {{1, 2, 3, 5, 8, 9, 17, 33}, {8, 16, 24, 40, 72, 128, 136, 264}};
    for (int layout = 0; layout < 2; layout++) {
        int bad_inv = 0, bad_err = 0, ties = 0, checked = 0;
        int bad_simd[4] = {0};
        double worst = 0;
        for (int si = 0; si < 8; si++)
            for (int rep = 0; rep < (layout ? 4 : 20); rep++) {
                int64_t n = 32 * nbs[layout][si];
                float *x = malloc((size_t)n * sizeof(float));
                qt_rand_x(x, n, 0);
                qrow r = qrow_new(n, layout);
                lilac_qx_quantize_scalar(x, n, &r.q);
                for (int64_t b = 0; b < n / 32; b++) {
                    float amax = 0;
                    for (int i = 0; i < 32; i++)
                        amax = fabsf(x[32 * b + i]) > amax ? fabsf(x[32 * b + i]) : amax;
                    float unit = amax >= LILAC_QX_TINY ? amax / 127.0f * (1.0f / 256.0f) : 0.0f;
                    bad_inv += r.q.unit[b] != unit;
                    for (int h = 0; h < 2; h++) {
                        int32_t s = 0;
                        for (int i = 16 * h; i < 16 * h + 16; i++) {
                            int64_t p = 32 * b + i, at = lilac_qx_pos(layout, p);
                            int hi = r.q.hi[at], lo = r.q.lo[at];
                            bad_inv += hi < -127 || hi > 127 || lo < -127 || lo > 127;
                            s += qx_Q(&r.q, p);
                            ties += lo == 127 || lo == -127;
                            double e = fabs((double)x[p] - qx_val(&r.q, p));
                            if (unit > 0) {
                                /* 1.5 units, and the float32 rounding of x * 256 * 127 / max|x| */
                                bad_err += !(e <= 1.51 * unit);
                                worst = e / unit > worst ? e / unit : worst;
                            } else {
                                bad_err += !(fabs(x[p]) < LILAC_QX_TINY && qx_Q(&r.q, p) == 0);
                            }
                            checked++;
                        }
                        bad_inv += s != r.q.sum16[2 * b + h];
                    }
                    bad_inv += r.q.sum32[b] != r.q.sum16[2 * b] + r.q.sum16[2 * b + 1];
                }
                for (int k = 1; k < n_sets; k++) {
                    qrow o = qrow_new(n, layout);
                    sets[k]->qx_quantize(x, n, &o.q);
                    bad_simd[k] += !qx_equal(&r.q, &o.q, n);
                    free(o.buf);
                }
                free(r.buf);
                free(x);
            }
        printf("quantize, layout %s: %d values, worst |x - unit*Q| = %.3f units, %d digits at +-127 (ties)\n",
               layout ? "KQ" : "natural", checked, worst, ties);
        CHECKF(bad_inv == 0, "quantize: %d broken invariants (digit range, unit, sums)", bad_inv);
        CHECKF(bad_err == 0, "quantize: %d values off by more than 1.5 units", bad_err);
        CHECKF(ties > 0, "quantize: the tie cases were not exercised");
        for (int k = 1; k < n_sets; k++)
            CHECKF(bad_simd[k] == 0, "%s quantize (layout %d) differs from scalar in %d rows", sets[k]->name, layout,
                   bad_simd[k]);
    }

    /* the comparison would see a one-digit difference */
    int64_t n = 64;
    float x[64];
    qt_rand_x(x, n, 1);
    qrow a = qrow_new(n, 0), b = qrow_new(n, 0);
    lilac_qx_quantize_scalar(x, n, &a.q);
    lilac_qx_quantize_scalar(x, n, &b.q);
    CHECK(qx_equal(&a.q, &b.q, n));
    b.q.lo[37] ^= 1;
    CHECK(!qx_equal(&a.q, &b.q, n));
    free(a.buf);
    free(b.buf);
}

/* ---- dot products ---- */

/* Deliberately wrong kernels: each must fail the checks below. */
static float broken_swap(const void *row, const lilac_qx *x, int64_t n)
{
    /* values 5 and 6 of every block of 32 trade places */
    qrow c = qrow_copy(x, n);
    for (int64_t b = 0; b < n / 32; b++) {
        int64_t p5 = lilac_qx_pos(x->layout, 32 * b + 5), p6 = lilac_qx_pos(x->layout, 32 * b + 6);
        int8_t t = c.q.hi[p5];
        c.q.hi[p5] = c.q.hi[p6], c.q.hi[p6] = t;
        t = c.q.lo[p5];
        c.q.lo[p5] = c.q.lo[p6], c.q.lo[p6] = t;
    }
    float s = lilac_qdot_q4_K_scalar(row, &c.q, n);
    free(c.buf);
    return s;
}

static float broken_one_term(const void *row, const lilac_qx *x, int64_t n)
{
    /* the low digit ignored: 8-bit activations */
    qrow c = qrow_copy(x, n);
    memset(c.q.lo, 0, (size_t)n);
    for (int64_t k = 0; k < n / 16; k++) {
        int32_t s = 0;
        for (int i = 0; i < 16; i++)
            s += 256 * c.q.hi[lilac_qx_pos(x->layout, 16 * k + i)];
        c.q.sum16[k] = s;
    }
    for (int64_t b = 0; b < n / 32; b++)
        c.q.sum32[b] = c.q.sum16[2 * b] + c.q.sum16[2 * b + 1];
    float s = lilac_qdot_q4_K_scalar(row, &c.q, n);
    free(c.buf);
    return s;
}

static float broken_last_block(const void *row, const lilac_qx *x, int64_t n)
{
    /* forgets the last super-block */
    return lilac_qdot_q4_K_scalar(row, x, n - LILAC_QK_K);
}

typedef struct {
    int bad_oracle, bad_kernel, bad_true, bad_zero, bad_probe, runs;
    double worst_kernel, worst_true;
} dot_stats;

/* One kernel on random rows of one type: quantizer qz, dot fn. */
static dot_stats check_dot(const qtype *t, lilac_qx_quantize_fn qz, lilac_qdot_fn fn, int reps)
{
    static const int nbs[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33};
    lilac_qdot_fn oracle = lilac_cpu_qdot_for(&lilac_cpu_scalar, t->type);
    dot_stats st = {0};
    for (size_t si = 0; si < sizeof nbs / sizeof nbs[0]; si++)
        for (int rep = 0; rep < reps; rep++) {
            int nb = nbs[si];
            int64_t n = (int64_t)nb * t->qk;
            uint8_t *row = rand_row(t, nb, rep & 1);
            float *w = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
            double *g = malloc((size_t)n * sizeof(double));
            t->dequant(row, w, n);
            term_mag(t, row, n, g);
            qt_rand_x(x, n, rep == 0);
            qrow r = qrow_new(n, lilac_qx_layout(t->type));
            qz(x, n, &r.q);
            double exact_q = 0, exact = 0, mag = 0, err = 0;
            for (int64_t i = 0; i < n; i++) {
                double v = qx_val(&r.q, i);
                exact_q += (double)w[i] * v;
                exact += (double)w[i] * x[i];
                mag += g[i] * fabs(v);
                err += fabs((double)w[i]) * fabs(x[i] - v);
            }
            float want = oracle(row, &r.q, n), got = fn(row, &r.q, n);
            double tol = 1e-5 * mag + 1e-30;
            st.bad_oracle += !(fabs(want - exact_q) <= tol);
            st.bad_kernel += !(fabs(got - want) <= tol);
            st.bad_true += !(fabs(got - exact) <= err + tol);
            if (mag > 0 && fabs(got - want) / mag > st.worst_kernel)
                st.worst_kernel = fabs(got - want) / mag;
            double amag = 0;
            for (int64_t i = 0; i < n; i++)
                amag += fabs((double)w[i] * x[i]);
            if (rep == 0 && amag > 0 && fabs(got - exact) / amag > st.worst_true)
                st.worst_true = fabs(got - exact) / amag;

            /* zeroing one weight block's activations takes exactly its share away */
            int b = (int)(qt_next() % (uint64_t)nb);
            float *xz = malloc((size_t)n * sizeof(float));
            memcpy(xz, x, (size_t)n * sizeof(float));
            memset(xz + (size_t)b * t->qk, 0, (size_t)t->qk * sizeof(float));
            qrow z = qrow_new(n, lilac_qx_layout(t->type));
            qz(xz, n, &z.q);
            double ez = 0, share = 0;
            for (int64_t i = 0; i < n; i++) {
                ez += (double)w[i] * qx_val(&z.q, i);
                if (i / t->qk == b)
                    share += (double)w[i] * qx_val(&r.q, i);
            }
            float gz = fn(row, &z.q, n);
            st.bad_zero += !(fabs(gz - ez) <= tol);
            if (fabs(share) > 100 * tol)
                st.bad_zero += gz == got;
            st.runs++;
            free(z.buf), free(xz), free(r.buf), free(row), free(w), free(x), free(g);
        }

    /* unit probes: dot(row, e_p) is value p (times 127/127 in the unit) */
    for (int rep = 0; rep < 2; rep++) {
        int nb = t->qk == 32 ? 5 : 2;
        int64_t n = (int64_t)nb * t->qk;
        uint8_t *row = rand_row(t, nb, 1);
        float *w = malloc((size_t)n * sizeof(float)), *x = calloc((size_t)n, sizeof(float));
        double *g = malloc((size_t)n * sizeof(double));
        t->dequant(row, w, n);
        term_mag(t, row, n, g);
        qrow r = qrow_new(n, lilac_qx_layout(t->type));
        for (int64_t p = 0; p < n; p++) {
            x[p] = rep ? -2.0f : 1.0f;
            qz(x, n, &r.q);
            double v = fn(row, &r.q, n), want = (double)w[p] * x[p];
            st.bad_probe += !(fabs(v - want) <= 1e-5 * g[p] * fabs(x[p]) + 1e-30);
            x[p] = 0;
        }
        free(r.buf), free(row), free(w), free(x), free(g);
    }
    return st;
}

static void test_dots(void)
{
    for (int k = 0; k < n_sets; k++)
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const qtype *t = &types[ti];
            lilac_qdot_fn fn = lilac_cpu_qdot_for(sets[k], t->type);
            CHECKF(fn != NULL && sets[k]->qx_quantize != NULL, "%s has a fast %s dot", sets[k]->name, t->name);
            if (!fn || !sets[k]->qx_quantize)
                continue;
            dot_stats s = check_dot(t, sets[k]->qx_quantize, fn, 4);
            printf("%-6s %-4s: %d rows of 1..33 blocks; vs scalar worst |d|/sum|terms| %.2e; vs true x (plain "
                   "rows) worst |d|/sum|wx| %.2e\n",
                   sets[k]->name, t->name, s.runs, s.worst_kernel, s.worst_true);
            CHECKF(s.bad_oracle == 0, "scalar %s: %d dots off float64 over the quantized x", t->name, s.bad_oracle);
            CHECKF(s.bad_kernel == 0, "%s %s: %d dots off the scalar oracle", sets[k]->name, t->name, s.bad_kernel);
            CHECKF(s.bad_true == 0, "%s %s: %d dots off the true dot by more than the activation rounding",
                   sets[k]->name, t->name, s.bad_true);
            CHECKF(s.bad_zero == 0, "%s %s: %d zeroed-block checks failed", sets[k]->name, t->name, s.bad_zero);
            CHECKF(s.bad_probe == 0, "%s %s: %d unit probes off their value", sets[k]->name, t->name, s.bad_probe);
        }

    /* the same checks reject wrong kernels */
    const qtype *q4k = &types[2];
    dot_stats s = check_dot(q4k, lilac_qx_quantize_scalar, broken_swap, 1);
    CHECKF(s.bad_probe > 0 && s.bad_kernel > 0, "a kernel with two values swapped passes (probe %d, oracle %d)",
           s.bad_probe, s.bad_kernel);
    s = check_dot(q4k, lilac_qx_quantize_scalar, broken_one_term, 1);
    CHECKF(s.bad_true > 0 && s.bad_kernel > 0, "a kernel without the low digit passes (true %d, oracle %d)",
           s.bad_true, s.bad_kernel);
    s = check_dot(q4k, lilac_qx_quantize_scalar, broken_last_block, 1);
    CHECKF(s.bad_zero > 0 && s.bad_probe > 0, "a kernel missing the last block passes (zero %d, probe %d)",
           s.bad_zero, s.bad_probe);
}

/* A NaN or an infinity among the activations makes its block's unit NaN
 * (digits 0), the same in every quantizer, and every fast dot NaN. */
static void test_nonfinite(void)
{
    const float specials[3] = {NAN, INFINITY, -INFINITY};
    int bad_q = 0, bad_dot = 0, runs = 0;
    for (int sp = 0; sp < 3; sp++)
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const qtype *t = &types[ti];
            int nb = t->qk == 32 ? 9 : 2;
            int64_t n = (int64_t)nb * t->qk;
            uint8_t *row = rand_row(t, nb, 1);
            float *x = malloc((size_t)n * sizeof(float));
            qt_rand_x(x, n, 1);
            int64_t at = (int64_t)(qt_next() % (uint64_t)n);
            x[at] = specials[sp];
            qrow r = qrow_new(n, lilac_qx_layout(t->type));
            lilac_qx_quantize_scalar(x, n, &r.q);
            bad_q += !isnan(r.q.unit[at / 32]);
            for (int i = 0; i < 32; i++)
                bad_q += qx_Q(&r.q, at / 32 * 32 + i) != 0;
            for (int k = 0; k < n_sets; k++) {
                qrow o = qrow_new(n, lilac_qx_layout(t->type));
                sets[k]->qx_quantize(x, n, &o.q);
                bad_q += !qx_equal(&r.q, &o.q, n);
                bad_dot += !isnan(lilac_cpu_qdot_for(sets[k], t->type)(row, &o.q, n));
                runs++;
                free(o.buf);
            }
            free(r.buf), free(row), free(x);
        }
    printf("non-finite activations: %d dots\n", runs);
    CHECKF(bad_q == 0, "NaN/inf activations: %d quantizer results off (unit NaN, digits 0, all sets alike)", bad_q);
    CHECKF(bad_dot == 0, "NaN/inf activations: %d fast dots are not NaN", bad_dot);
}

/* ---- the matrix product ---- */

static void test_matmul(void)
{
    lilac_pool *p1, *p3;
    lilac_error err;
    CHECK(lilac_pool_new(1, &p1, &err) == LILAC_OK && lilac_pool_new(3, &p3, &err) == LILAC_OK);
    for (int k = 0; k < n_sets; k++) {
        lilac_cpu_kernels fast = lilac_cpu_with(sets[k], true), precise = lilac_cpu_with(sets[k], false);
        int bad_fast = 0, bad_precise = 0, bad_close = 0;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const qtype *t = &types[ti];
            int rows = 37, nb = t->qk == 32 ? 9 : 3;
            for (int ntok = 1; ntok <= 11; ntok += (ntok < 9 ? 1 : 2)) {
                int64_t cols = (int64_t)nb * t->qk;
                uint8_t *W = rand_row(t, rows * nb, 1);
                float *x = malloc((size_t)(ntok * cols) * sizeof(float));
                float *y1 = malloc((size_t)ntok * rows * sizeof(float));
                float *y3 = malloc((size_t)ntok * rows * sizeof(float));
                float *yp = malloc((size_t)ntok * rows * sizeof(float));
                qt_rand_x(x, ntok * cols, 1);
                lilac_mat m = {.data = W, .type = t->type, .rows = rows, .cols = cols,
                               .row_bytes = lilac_dtype_row_bytes(t->type, cols)};
                lilac_matmul(&fast, p1, &m, x, ntok, y1);
                lilac_matmul(&fast, p3, &m, x, ntok, y3);
                lilac_matmul(&precise, p3, &m, x, ntok, yp);
                lilac_qdot_fn qd = lilac_cpu_qdot_for(sets[k], t->type);
                lilac_dot_fn dd = lilac_cpu_dot_for(sets[k], t->type);
                qrow r = qrow_new(cols, lilac_qx_layout(t->type));
                float *w = malloc((size_t)cols * sizeof(float));
                for (int tok = 0; tok < ntok; tok++) {
                    sets[k]->qx_quantize(x + tok * cols, cols, &r.q);
                    for (int rr = 0; rr < rows; rr++) {
                        const void *row = lilac_mat_row(&m, rr);
                        float want = qd(row, &r.q, cols);
                        size_t o = (size_t)tok * rows + rr;
                        bad_fast += y1[o] != want || y3[o] != want;
                        bad_precise += yp[o] != dd(row, x + tok * cols, cols);
                        /* fast within the activation rounding of precise */
                        t->dequant(row, w, cols);
                        double e = 0, mag = 0;
                        for (int64_t i = 0; i < cols; i++) {
                            double v = qx_val(&r.q, i), xi = x[tok * cols + i];
                            e += fabs((double)w[i]) * fabs(xi - v);
                            mag += fabs((double)w[i] * xi);
                        }
                        bad_close += !(fabs(y1[o] - yp[o]) <= e + 1e-5 * mag);
                    }
                }
                free(r.buf), free(w), free(W), free(x), free(y1), free(y3), free(yp);
            }
        }
        CHECKF(bad_fast == 0, "%s fast matmul: %d outputs differ from the row's fast dot", sets[k]->name, bad_fast);
        CHECKF(bad_precise == 0, "%s precise matmul: %d outputs differ from the precise dot", sets[k]->name,
               bad_precise);
        CHECKF(bad_close == 0, "%s: %d fast outputs beyond the activation rounding of precise", sets[k]->name,
               bad_close);

        /* float types stay on float32 even with the fast path on */
        int rows = 19, cols = 77;
        float *W = malloc((size_t)rows * cols * sizeof(float)), *x = malloc((size_t)2 * cols * sizeof(float));
        float *y = malloc((size_t)2 * rows * sizeof(float));
        for (int i = 0; i < rows * cols; i++)
            W[i] = qt_frand();
        for (int i = 0; i < 2 * cols; i++)
            x[i] = qt_frand();
        lilac_mat m = {.data = W, .type = LILAC_F32, .rows = rows, .cols = cols,
                       .row_bytes = (size_t)cols * sizeof(float)};
        lilac_matmul(&fast, p3, &m, x, 2, y);
        int bad = 0;
        for (int tok = 0; tok < 2; tok++)
            for (int r = 0; r < rows; r++)
                bad += y[tok * rows + r] != sets[k]->dot_f32(W + (size_t)r * cols, x + tok * cols, cols);
        CHECKF(bad == 0, "%s fast matmul of F32: %d outputs differ from dot_f32", sets[k]->name, bad);
        free(W), free(x), free(y);
    }
    lilac_pool_free(p1);
    lilac_pool_free(p3);
}

/* ---- the multi-row dots: bit for bit the single-row ones ---- */

static void test_multi_dots(void)
{
    enum { NT = LILAC_QDOT_NT };
    for (int k = 0; k < n_sets; k++) {
        int runs = 0, bad = 0;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const qtype *t = &types[ti];
            lilac_qdotn_fn fn = lilac_cpu_qdotn_for(sets[k], t->type);
            lilac_qdot_fn one = lilac_cpu_qdot_for(sets[k], t->type);
            if (!fn)
                continue;
            static const int nbs[] = {1, 2, 3, 5, 7, 11};
            for (size_t bi = 0; bi < sizeof nbs / sizeof nbs[0]; bi++)
                for (int rep = 0; rep < 4; rep++) {
                    int nb = nbs[bi];
                    int64_t n = (int64_t)nb * t->qk;
                    uint8_t *row = rand_row(t, nb, rep & 1);
                    float *x = malloc((size_t)n * sizeof(float));
                    qrow r[NT];
                    lilac_qx q[NT];
                    for (int u = 0; u < NT; u++) {
                        r[u] = qrow_new(n, lilac_qx_layout(t->type));
                        qt_rand_x(x, n, rep >= 2);
                        sets[k]->qx_quantize(x, n, &r[u].q);
                        q[u] = r[u].q;
                    }
                    for (int nt = 1; nt <= NT; nt++) {
                        float out[NT];
                        fn(row, q, nt, n, out);
                        for (int u = 0; u < nt; u++) {
                            float want = one(row, &q[u], n);
                            /* bitwise, NaN included */
                            bad += memcmp(&out[u], &want, sizeof want) != 0;
                            runs++;
                        }
                    }
                    for (int u = 0; u < NT; u++)
                        free(r[u].buf);
                    free(row), free(x);
                }
        }
        printf("%s multi-row dots vs single-row: %d outputs\n", sets[k]->name, runs);
        CHECKF(bad == 0, "%s multi-row dots: %d outputs differ from the single-row dot", sets[k]->name, bad);
    }
}

/* ---- every set's precise dots against the scalar ones ---- */

static void test_precise_sets(void)
{
    for (int k = 1; k < n_sets; k++) {
        int bad = 0, runs = 0;
        /* float types, lengths across the vector widths and tails */
        for (int n = 1; n <= 300; n += (n < 40 ? 1 : 37)) {
            float *wf = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
            uint16_t *wh = malloc((size_t)n * 2), *wb = malloc((size_t)n * 2);
            double mag = 0;
            for (int i = 0; i < n; i++) {
                wf[i] = qt_frand();
                x[i] = qt_frand();
                wh[i] = (uint16_t)(0x3000 + (qt_next() & 0xfff)) | (uint16_t)(qt_next() & 0x8000);
                union { float f; uint32_t u; } v = {qt_frand()};
                wb[i] = (uint16_t)(v.u >> 16);
                mag += fabs((double)x[i]) * 4;
            }
            bad += !(fabsf(sets[k]->dot_f32(wf, x, n) - lilac_cpu_scalar.dot_f32(wf, x, n)) <= 1e-5 * mag);
            bad += !(fabsf(sets[k]->dot_f16(wh, x, n) - lilac_cpu_scalar.dot_f16(wh, x, n)) <= 1e-5 * mag);
            bad += !(fabsf(sets[k]->dot_bf16(wb, x, n) - lilac_cpu_scalar.dot_bf16(wb, x, n)) <= 1e-5 * mag);
            runs += 3;
            /* a unit probe at the last position: the tail is read */
            memset(x, 0, (size_t)n * sizeof(float));
            x[n - 1] = 1;
            bad += sets[k]->dot_f32(wf, x, n) != wf[n - 1];
            bad += sets[k]->dot_f16(wh, x, n) != lilac_f16_to_f32(wh[n - 1]);
            bad += sets[k]->dot_bf16(wb, x, n) != lilac_bf16_to_f32(wb[n - 1]);
            free(wf), free(x), free(wh), free(wb);
        }
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const qtype *t = &types[ti];
            lilac_dot_fn d = lilac_cpu_dot_for(sets[k], t->type), o = lilac_cpu_dot_for(&lilac_cpu_scalar, t->type);
            for (int nb = 1; nb <= 9; nb += 4) {
                int64_t n = (int64_t)nb * t->qk;
                uint8_t *row = rand_row(t, nb, 1);
                float *w = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
                t->dequant(row, w, n);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) {
                    x[i] = qt_frand();
                    mag += fabs((double)w[i] * x[i]);
                }
                bad += !(fabsf(d(row, x, n) - o(row, x, n)) <= 1e-5 * mag);
                runs++;
                /* unit probes: value p lands in place, exactly */
                if (nb == 1) {
                    memset(x, 0, (size_t)n * sizeof(float));
                    for (int64_t p = 0; p < n; p++) {
                        x[p] = 1;
                        bad += d(row, x, n) != w[p];
                        x[p] = 0;
                    }
                }
                free(row), free(w), free(x);
            }
        }
        printf("%s precise dots (F32, F16, BF16, block types) vs scalar: %d runs, and unit probes\n", sets[k]->name,
               runs);
        CHECKF(bad == 0, "%s precise dots: %d off the scalar ones", sets[k]->name, bad);
    }
}

int main(void)
{
    qt_rng = 0x2545f4914f6cdd1dull;
    find_sets();
    test_layout();
    test_quantize();
    test_dots();
    test_nonfinite();
    test_multi_dots();
    test_matmul();
    test_precise_sets();
    TEST_END();
}
