/* The 16-row interleaved Q6_K kernels (kernels/cpu/qr16.h):
 *  - pack then unpack gives the original blocks byte for byte;
 *  - the scalar qr16 kernel equals, per row and token, the one-row fast
 *    dot's oracle (lilac_qdot_q6_K_scalar) over the same quantized
 *    activations, to float32 rounding of sum |w * x|;
 *  - the AVX-512 and AVX2 (x86) or NEON (aarch64) kernels, where this
 *    CPU runs them, equal the scalar one to the same bound;
 *  - every kernel's out[t * 16 + r] is bit for bit its nt = 1 result for
 *    x[t], for every nt up to LILAC_QR16_NT;
 *  - a NaN or infinite activation makes that token's outputs NaN, zero
 *    activations give exactly 0;
 *  - deliberately broken kernels fail the same comparisons. */
#include <math.h>
#include <stddef.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qfast.h"
#include "kernels/cpu/qr16.h"
#include "kernels/cpu/quant.h"
#include "qxtest.h"
#include "testutil.h"

enum { R = LILAC_QR16_ROWS, NT = LILAC_QR16_NT };

typedef struct {
    const char *name;
    lilac_qr16_fn fn;
} kernel;

static kernel kernels[3];
static int n_kernels;

static void find_kernels(void)
{
    kernels[n_kernels++] = (kernel){"scalar", lilac_qr16_q6_K_scalar};
#if defined(LILAC_X86)
    if (lilac_cpu_runs(&lilac_cpu_avx512))
        kernels[n_kernels++] = (kernel){"avx512", lilac_qr16_q6_K_avx512};
    else
        printf("SKIP (part): this CPU cannot run the AVX-512 kernel: not tested\n");
    if (lilac_cpu_runs(&lilac_cpu_avx2))
        kernels[n_kernels++] = (kernel){"avx2", lilac_qr16_q6_K_avx2};
    else
        printf("SKIP (part): this CPU cannot run the AVX2 kernel: not tested\n");
#elif defined(__aarch64__)
    if (lilac_cpu_runs(&lilac_cpu_neon))
        kernels[n_kernels++] = (kernel){"neon", lilac_qr16_q6_K_neon};
    else
        printf("SKIP (part): this CPU cannot run the neon kernel (no dotprod): not tested\n");
#else
    printf("SKIP (part): neither x86 nor aarch64: only the scalar qr16 Q6_K kernel is tested\n");
#endif
    printf("qr16 Q6_K kernels tested:");
    for (int k = 0; k < n_kernels; k++)
        printf(" %s", kernels[k].name);
    printf("\n");
}

/* 16 rows of nb random Q6_K blocks (every bit pattern is a valid block),
 * row r at m + r * row_bytes; d a moderate fp16 of either sign */
static uint8_t *rand_rows(int nb, size_t row_bytes)
{
    uint8_t *m = malloc(R * row_bytes);
    for (size_t i = 0; i < R * row_bytes; i++)
        m[i] = (uint8_t)qt_next();
    for (int r = 0; r < R; r++)
        for (int b = 0; b < nb; b++) {
            block_q6_K *blk = (block_q6_K *)(void *)(m + (size_t)r * row_bytes) + b;
            blk->d = (uint16_t)(0x2000 + (qt_next() & 0x1fff)) | (uint16_t)(qt_next() & 0x8000);
        }
    return m;
}

static double qx_val(const lilac_qx *q, int64_t i)
{
    const int64_t at = lilac_qx_pos(q->layout, i);
    return (double)q->unit[i / 32] * (256 * (int32_t)q->hi[at] + q->lo[at]);
}

/* One case: 16 rows of n columns, NT tokens; the packed weights, both
 * quantizations of each token, the one-row oracle's results and sum |w x|
 * per row and token. */
typedef struct {
    int64_t n;
    size_t row_bytes;
    uint8_t *rows;   /* 16 original rows */
    void *packed;    /* n / 256 x16 blocks */
    float *x;        /* [NT][n] */
    qrow nat[NT];    /* NATURAL, what the qr16 kernels read */
    qrow one[NT];    /* the one-row kernel's layout */
    lilac_qx xn[NT]; /* the views of nat */
    float want[NT * R];
    double mag[NT * R];
} qcase;

static void case_quantize(qcase *c)
{
    for (int t = 0; t < NT; t++) {
        lilac_qx_quantize_scalar(c->x + t * c->n, c->n, &c->nat[t].q);
        lilac_qx_quantize_scalar(c->x + t * c->n, c->n, &c->one[t].q);
        c->xn[t] = c->nat[t].q;
    }
    float *w = malloc((size_t)c->n * sizeof(float));
    for (int r = 0; r < R; r++) {
        const uint8_t *row = c->rows + (size_t)r * c->row_bytes;
        lilac_dequant_q6_K(row, w, c->n);
        for (int t = 0; t < NT; t++) {
            c->want[t * R + r] = lilac_qdot_q6_K_scalar(row, &c->one[t].q, c->n);
            double m = 0;
            for (int64_t i = 0; i < c->n; i++)
                m += fabs((double)w[i] * qx_val(&c->nat[t].q, i));
            c->mag[t * R + r] = m;
        }
    }
    free(w);
}

static qcase case_new(int64_t n, size_t pad)
{
    qcase c = {.n = n, .row_bytes = (size_t)n / LILAC_QK_K * sizeof(block_q6_K) + pad};
    c.rows = rand_rows((int)(n / LILAC_QK_K), c.row_bytes);
    c.packed = malloc((size_t)n / LILAC_QK_K * sizeof(block_q6_Kx16));
    lilac_qr16_pack_q6_K(c.rows, c.row_bytes, n, c.packed);
    c.x = malloc((size_t)NT * n * sizeof(float));
    for (int t = 0; t < NT; t++) {
        qt_rand_x(c.x + t * n, n, 0);
        c.nat[t] = qrow_new(n, LILAC_QX_NATURAL);
        c.one[t] = qrow_new(n, lilac_qx_layout(LILAC_Q6_K));
    }
    case_quantize(&c);
    return c;
}

static void case_free(qcase *c)
{
    for (int t = 0; t < NT; t++)
        free(c->nat[t].buf), free(c->one[t].buf);
    free(c->rows), free(c->packed), free(c->x);
}

/* float32 rounding of the terms: 1e-6 of sum |w * x| */
static int close_to(float got, float want, double mag) { return fabs((double)got - want) <= 1e-6 * mag + 1e-30; }

/* Outputs of fn (nt = NT) off ref by more than the bound; the worst
 * |d| / sum |w x| into *worst. */
static int count_off(lilac_qr16_fn fn, const qcase *c, const float *ref, double *worst)
{
    float out[NT * R];
    fn(c->packed, c->xn, NT, c->n, out);
    int bad = 0;
    for (int o = 0; o < NT * R; o++) {
        bad += !close_to(out[o], ref[o], c->mag[o]);
        if (c->mag[o] > 0 && fabs((double)out[o] - ref[o]) / c->mag[o] > *worst)
            *worst = fabs((double)out[o] - ref[o]) / c->mag[o];
    }
    return bad;
}

/* ---- broken kernels, which the checks must reject ---- */

static void broken_last(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    /* forgets the last super-block */
    lilac_qr16_q6_K_scalar(w, x, nt, n - LILAC_QK_K, out);
}

static void broken_col(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    /* column 13 of every group read as column 14 (chunk 3 misplaced) */
    block_q6_Kx16 *c = malloc((size_t)n / LILAC_QK_K * sizeof *c);
    memcpy(c, w, (size_t)n / LILAC_QK_K * sizeof *c);
    for (int64_t i = 0; i < n / LILAC_QK_K; i++)
        for (int g = 0; g < 16; g++)
            for (int k = 0; k < 3; k++)
                for (int r = 0; r < R; r++)
                    c[i].q[g][k][4 * r + 1] = (uint8_t)((c[i].q[g][k][4 * r + 1] & 0x3F) | (c[i].q[g][k][4 * r + 2] & 0xC0));
    lilac_qr16_q6_K_scalar(c, x, nt, n, out);
    free(c);
}

static void broken_lo(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    /* the low digit ignored */
    qrow c[NT];
    lilac_qx q[NT];
    for (int t = 0; t < nt; t++) {
        c[t] = qrow_new(n, LILAC_QX_NATURAL);
        memcpy(c[t].q.hi, x[t].hi, (size_t)n);
        memset(c[t].q.lo, 0, (size_t)n);
        memcpy(c[t].q.unit, x[t].unit, (size_t)n / 32 * sizeof(float));
        memcpy(c[t].q.sum16, x[t].sum16, (size_t)n / 16 * sizeof(int32_t));
        q[t] = c[t].q;
    }
    lilac_qr16_q6_K_scalar(w, q, nt, n, out);
    for (int t = 0; t < nt; t++)
        free(c[t].buf);
}

/* ---- tests ---- */

static const int64_t sizes[] = {256, 512, 2048, 4096};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

static void test_pack(void)
{
    int bad = 0, runs = 0;
    for (size_t si = 0; si < N_SIZES; si++)
        for (size_t pad = 0; pad <= 96; pad += 96) { /* rows with a gap between them too */
            const int64_t n = sizes[si];
            const size_t row_bytes = (size_t)n / LILAC_QK_K * sizeof(block_q6_K) + pad;
            uint8_t *rows = rand_rows((int)(n / LILAC_QK_K), row_bytes);
            uint8_t *back = malloc(R * row_bytes);
            memcpy(back, rows, R * row_bytes); /* the gaps are not written */
            for (int r = 0; r < R; r++)
                memset(back + (size_t)r * row_bytes, 0x5A, (size_t)n / LILAC_QK_K * sizeof(block_q6_K));
            void *p = malloc((size_t)n / LILAC_QK_K * sizeof(block_q6_Kx16));
            lilac_qr16_pack_q6_K(rows, row_bytes, n, p);
            lilac_qr16_unpack_q6_K(p, n, back, row_bytes);
            bad += memcmp(rows, back, R * row_bytes) != 0;
            /* and the comparison sees one changed bit */
            back[(size_t)(qt_next() % (R * row_bytes))] ^= 1;
            bad += memcmp(rows, back, R * row_bytes) == 0;
            runs++;
            free(rows), free(back), free(p);
        }
    printf("pack -> unpack: %d matrices byte for byte\n", runs);
    CHECKF(bad == 0, "pack -> unpack: %d matrices not the original bytes", bad);
}

static void test_dots(void)
{
    int bad_oracle = 0, bad_kernel[3] = {0}, runs = 0;
    double worst_oracle = 0, worst_kernel[3] = {0};
    int rej_last = 0, rej_col = 0, rej_lo = 0;
    for (size_t si = 0; si < N_SIZES; si++)
        for (int rep = 0; rep < 3; rep++) {
            qcase c = case_new(sizes[si], rep == 1 ? 64 : 0);
            float ref[NT * R];
            lilac_qr16_q6_K_scalar(c.packed, c.xn, NT, c.n, ref);
            for (int o = 0; o < NT * R; o++) {
                bad_oracle += !close_to(ref[o], c.want[o], c.mag[o]);
                if (c.mag[o] > 0 && fabs((double)ref[o] - c.want[o]) / c.mag[o] > worst_oracle)
                    worst_oracle = fabs((double)ref[o] - c.want[o]) / c.mag[o];
            }
            for (int k = 1; k < n_kernels; k++)
                bad_kernel[k] += count_off(kernels[k].fn, &c, ref, &worst_kernel[k]);
            double dummy = 0;
            if (c.n > LILAC_QK_K)
                rej_last += count_off(broken_last, &c, ref, &dummy) > 0;
            rej_col += count_off(broken_col, &c, ref, &dummy) > 0;
            rej_lo += count_off(broken_lo, &c, ref, &dummy) > 0;
            runs++;
            case_free(&c);
        }
    printf("scalar qr16 vs one-row oracle: %d cases x %d outputs, worst |d| / sum|w x| %.2e\n", runs, NT * R,
           worst_oracle);
    CHECKF(bad_oracle == 0, "scalar qr16: %d outputs off the one-row oracle", bad_oracle);
    for (int k = 1; k < n_kernels; k++) {
        printf("%s qr16 vs scalar qr16: worst |d| / sum|w x| %.2e\n", kernels[k].name, worst_kernel[k]);
        CHECKF(bad_kernel[k] == 0, "%s qr16: %d outputs off the scalar qr16 kernel", kernels[k].name, bad_kernel[k]);
    }
    CHECKF(rej_last == 3 * ((int)N_SIZES - 1), "a kernel missing the last super-block passes (%d)", rej_last);
    CHECKF(rej_col == 3 * (int)N_SIZES, "a kernel with a column misplaced passes (%d)", rej_col);
    CHECKF(rej_lo == 3 * (int)N_SIZES, "a kernel without the low digit passes (%d)", rej_lo);
}

/* out[t * 16 + r] bit for bit the nt = 1 result of x[t], for every nt */
static void test_batch_invariance(void)
{
    for (int k = 0; k < n_kernels; k++) {
        int bad = 0, runs = 0;
        for (size_t si = 0; si < N_SIZES; si++) {
            qcase c = case_new(sizes[si], 0);
            float single[NT * R];
            for (int t = 0; t < NT; t++)
                kernels[k].fn(c.packed, &c.xn[t], 1, c.n, single + t * R);
            for (int nt = 1; nt <= NT; nt++) {
                /* x[first .. first + nt), from the front and from the back:
                 * each token in other company and another slot */
                for (int first = 0; first <= NT - nt; first += NT - nt > 0 ? NT - nt : 1) {
                    float out[NT * R];
                    kernels[k].fn(c.packed, c.xn + first, nt, c.n, out);
                    bad += memcmp(out, single + first * R, (size_t)nt * R * sizeof(float)) != 0;
                    runs++;
                }
            }
            case_free(&c);
        }
        printf("%s: nt = 1..%d bit for bit the single-token results: %d calls\n", kernels[k].name, NT, runs);
        CHECKF(bad == 0, "%s: %d batched calls differ from the single-token results", kernels[k].name, bad);
    }
}

static void test_special(void)
{
    const float specials[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < n_kernels; k++) {
        int bad_nan = 0, bad_zero = 0;
        for (size_t si = 0; si < N_SIZES; si++) {
            qcase c = case_new(sizes[si], 0);
            /* token 2 gets a non-finite value; the others stay as they were */
            for (int sp = 0; sp < 3; sp++) {
                float *x2 = c.x + 2 * c.n;
                const int64_t at = (int64_t)(qt_next() % (uint64_t)c.n);
                const float keep = x2[at];
                x2[at] = specials[sp];
                lilac_qx_quantize_scalar(x2, c.n, &c.nat[2].q);
                float out[NT * R];
                kernels[k].fn(c.packed, c.xn, NT, c.n, out);
                for (int t = 0; t < NT; t++)
                    for (int r = 0; r < R; r++)
                        bad_nan += t == 2 ? !isnan(out[t * R + r]) : !isfinite(out[t * R + r]);
                x2[at] = keep;
                lilac_qx_quantize_scalar(x2, c.n, &c.nat[2].q);
            }
            /* all-zero activations: exactly 0 */
            memset(c.x, 0, (size_t)NT * c.n * sizeof(float));
            case_quantize(&c);
            float out[NT * R];
            kernels[k].fn(c.packed, c.xn, NT, c.n, out);
            for (int o = 0; o < NT * R; o++)
                bad_zero += out[o] != 0.0f;
            case_free(&c);
        }
        printf("%s: NaN / inf activations and zero activations checked\n", kernels[k].name);
        CHECKF(bad_nan == 0, "%s: %d outputs not NaN for a NaN/inf activation (or not finite beside it)",
               kernels[k].name, bad_nan);
        CHECKF(bad_zero == 0, "%s: %d outputs not 0 for zero activations", kernels[k].name, bad_zero);
    }
}

int main(void)
{
    qt_rng = 0x9e3779b97f4a7c15ull;
    find_kernels();
    test_pack();
    test_dots();
    test_batch_invariance();
    test_special();
    TEST_END();
}
