/* The 16-row interleaved Q4_K kernels (kernels/cpu/qr16.h):
 *  - packing: the x16 block is the layout qr16.h describes (checked by
 *    code written from that description, not from the packer), and
 *    unpacking gives the original bytes back exactly, padding untouched;
 *  - the scalar qr16 kernel against the one-row oracle
 *    lilac_qdot_q4_K_scalar (same activations quantized in its KQ layout),
 *    per row and token, within float32 rounding of the sum of the terms;
 *  - the AVX2 and AVX-512 (x86) or NEON (aarch64) kernels against the
 *    scalar qr16 kernel, where this CPU runs them;
 *  - every kernel: out[t * 16 + r] bit for bit the same for every nt and
 *    whichever tokens come with x[t]; a NaN/inf activation block makes the
 *    token's outputs NaN (and leaves the other tokens alone); zero
 *    activations give 0;
 *  - corrupted weights, which the same checks must reject. */
#include <math.h>
#include <stddef.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qfast.h"
#include "kernels/cpu/qr16.h"
#include "kernels/cpu/quant.h"
#include "qxtest.h"
#include "testutil.h"

#define ROWS LILAC_QR16_ROWS
#define NT LILAC_QR16_NT

/* ---- weights ---- */

/* 16 rows of n columns of random Q4_K blocks, row r at r * row_bytes;
 * moderate = d, dmin of moderate size (else any finite fp16) */
static uint8_t *rand_rows(int64_t n, size_t row_bytes, int moderate)
{
    uint8_t *rows = malloc(ROWS * row_bytes);
    for (size_t i = 0; i < ROWS * row_bytes; i++)
        rows[i] = (uint8_t)qt_next();
    for (int r = 0; r < ROWS; r++)
        for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
            block_q4_K *b = (block_q4_K *)(void *)(rows + (size_t)r * row_bytes + (size_t)i * sizeof(block_q4_K));
            b->d = moderate ? (uint16_t)(0x3000 + (qt_next() & 0x7ff)) : qt_rand_f16();
            b->dmin = moderate ? (uint16_t)(0x2c00 + (qt_next() & 0x7ff)) : qt_rand_f16();
        }
    return rows;
}

/* q of column c of a block_q4_K, from quant.h's description */
static int q4k_q(const block_q4_K *b, int c)
{
    const int j = c / 64, t = c % 64;
    return t < 32 ? b->qs[32 * j + t] & 0xF : b->qs[32 * j + t - 32] >> 4;
}

/* The x16 block is what qr16.h says: d, dmin, scale words by row, and
 * byte 4r + e of qs[g][p] = q[r][32g + 4p + e] | q[r][32g + 16 + 4p + e] << 4. */
static int layout_errors(const uint8_t *rows, size_t row_bytes, int64_t n, const block_q4_Kx16 *x)
{
    int bad = 0;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++)
        for (int r = 0; r < ROWS; r++) {
            block_q4_K b;
            memcpy(&b, rows + (size_t)r * row_bytes + (size_t)i * sizeof b, sizeof b);
            bad += x[i].d[r] != b.d || x[i].dmin[r] != b.dmin;
            for (int k = 0; k < 3; k++)
                bad += memcmp(&x[i].scales[k][r], b.scales + 4 * k, 4) != 0;
            for (int g = 0; g < 8; g++)
                for (int p = 0; p < 4; p++)
                    for (int e = 0; e < 4; e++) {
                        int want = q4k_q(&b, 32 * g + 4 * p + e) | q4k_q(&b, 32 * g + 16 + 4 * p + e) << 4;
                        bad += x[i].qs[g][p][4 * r + e] != want;
                    }
        }
    return bad;
}

/* ---- activations ---- */

/* NT tokens of n values, quantized in both layouts */
typedef struct {
    qrow nat[NT], kq[NT];
    lilac_qx xn[2 * NT]; /* the NATURAL rows twice: x + s for any s < NT is NT tokens */
} tokens;

static void tokens_make(tokens *tk, int64_t n, const float *const xs[NT])
{
    for (int t = 0; t < NT; t++) {
        tk->nat[t] = qrow_new(n, LILAC_QX_NATURAL);
        tk->kq[t] = qrow_new(n, LILAC_QX_KQ);
        lilac_qx_quantize_scalar(xs[t], n, &tk->nat[t].q);
        lilac_qx_quantize_scalar(xs[t], n, &tk->kq[t].q);
        tk->xn[t] = tk->xn[t + NT] = tk->nat[t].q;
    }
}

static void tokens_free(tokens *tk)
{
    for (int t = 0; t < NT; t++)
        free(tk->nat[t].buf), free(tk->kq[t].buf);
}

/* Per row, sum over values of |each term a kernel sums| (d * sc * q and
 * dmin * m apart, times unit * Q): float32 rounding is relative to it. */
static double term_mag(const uint8_t *row, int64_t n, const lilac_qx *xn)
{
    double mag = 0;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const block_q4_K *b = (const block_q4_K *)(const void *)(row + (size_t)i * sizeof(block_q4_K));
        const double d = fabs((double)lilac_f16_to_f32(b->d)), dmin = fabs((double)lilac_f16_to_f32(b->dmin));
        for (int c = 0; c < LILAC_QK_K; c++) {
            uint8_t sc, m;
            lilac_kq_scale_min(c / 32, b->scales, &sc, &m);
            const int64_t v = 256 * i + c;
            const double xq = fabs((double)xn->unit[v / 32] * (256 * xn->hi[v] + xn->lo[v]));
            mag += (d * sc * q4k_q(b, c) + dmin * m) * xq;
        }
    }
    return mag;
}

/* ---- kernels ---- */

typedef struct {
    const char *name;
    lilac_qr16_fn fn;
    const lilac_cpu_kernels *set; /* the set whose CPU features it needs */
} kernel;

static kernel kernels[3];
static int n_kernels;

static void find_kernels(void)
{
    kernels[n_kernels++] = (kernel){"scalar", lilac_qr16_q4_K_scalar, &lilac_cpu_scalar};
#if defined(LILAC_X86)
    const kernel simd[2] = {{"avx2", lilac_qr16_q4_K_avx2, &lilac_cpu_avx2},
                            {"avx512", lilac_qr16_q4_K_avx512, &lilac_cpu_avx512}};
    for (int k = 0; k < 2; k++) {
        if (lilac_cpu_runs(simd[k].set))
            kernels[n_kernels++] = simd[k];
        else
            printf("SKIP (part): this CPU cannot run the %s qr16 Q4_K kernel\n", simd[k].name);
    }
#elif defined(__aarch64__)
    if (lilac_cpu_runs(&lilac_cpu_neon))
        kernels[n_kernels++] = (kernel){"neon", lilac_qr16_q4_K_neon, &lilac_cpu_neon};
    else
        printf("SKIP (part): this CPU cannot run the neon qr16 Q4_K kernel (no dotprod)\n");
#else
    printf("SKIP (part): neither x86 nor aarch64: only the scalar qr16 Q4_K kernel is tested\n");
#endif
    printf("qr16 Q4_K kernels run here:");
    for (int k = 0; k < n_kernels; k++)
        printf(" %s", kernels[k].name);
    printf("\n");
}

static const int64_t ns[] = {256, 512, 2048, 4096};
#define N_NS (sizeof ns / sizeof ns[0])

/* ---- packing ---- */

static void test_pack(void)
{
    int bad_layout = 0, bad_round = 0, bad_pad = 0, runs = 0;
    for (size_t ni = 0; ni < N_NS; ni++)
        for (int pad = 0; pad < 2; pad++) {
            const int64_t n = ns[ni];
            const size_t used = (size_t)(n / LILAC_QK_K) * sizeof(block_q4_K), row_bytes = used + (pad ? 20 : 0);
            uint8_t *rows = rand_rows(n, row_bytes, pad);
            block_q4_Kx16 *x = malloc(ROWS * used);
            lilac_qr16_pack_q4_K(rows, row_bytes, n, x);
            bad_layout += layout_errors(rows, row_bytes, n, x);
            uint8_t *back = malloc(ROWS * row_bytes);
            memset(back, 0x5A, ROWS * row_bytes);
            lilac_qr16_unpack_q4_K(x, n, back, row_bytes);
            for (int r = 0; r < ROWS; r++) {
                bad_round += memcmp(back + r * row_bytes, rows + r * row_bytes, used) != 0;
                for (size_t k = used; k < row_bytes; k++)
                    bad_pad += back[r * row_bytes + k] != 0x5A;
            }
            runs++;
            free(rows), free(x), free(back);
        }
    printf("pack/unpack: %d matrices of 16 rows\n", runs);
    CHECKF(bad_layout == 0, "pack: %d fields not where qr16.h puts them", bad_layout);
    CHECKF(bad_round == 0, "unpack(pack(rows)): %d rows differ from the original bytes", bad_round);
    CHECKF(bad_pad == 0, "unpack wrote %d bytes past the blocks of a row", bad_pad);

    /* the checks see a one-nibble change */
    const int64_t n = 256;
    uint8_t *rows = rand_rows(n, sizeof(block_q4_K), 1);
    block_q4_Kx16 x;
    lilac_qr16_pack_q4_K(rows, sizeof(block_q4_K), n, &x);
    x.qs[5][2][37] ^= 0x10;
    CHECK(layout_errors(rows, sizeof(block_q4_K), n, &x) == 1);
    uint8_t back[ROWS * sizeof(block_q4_K)];
    lilac_qr16_unpack_q4_K(&x, n, back, sizeof(block_q4_K));
    CHECK(memcmp(back, rows, sizeof back) != 0);
    free(rows);
}

/* ---- dot products ---- */

/* float32 rounding of the terms: a kernel sums 2 n / 32 float terms per
 * row and token, each rounded a few times; 1e-6 of their magnitudes is
 * well above what the oracles differ by (printed) and far below what one
 * wrong weight, scale or group costs. */
#define TOL_REL 1e-6

typedef struct {
    int bad_oracle, bad_kernel[3], bad_nt[3], runs;
    int bitwise[3];
    double worst_oracle, worst_kernel[3];
} dot_stats;

static void check_matrix(const uint8_t *rows, size_t row_bytes, int64_t n, const block_q4_Kx16 *w, tokens *tk,
                         dot_stats *st)
{
    /* the one-row oracle, and the tolerance, per row and token */
    float want[NT][ROWS];
    double tol[NT][ROWS];
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < ROWS; r++) {
            want[t][r] = lilac_qdot_q4_K_scalar(rows + (size_t)r * row_bytes, &tk->kq[t].q, n);
            tol[t][r] = TOL_REL * term_mag(rows + (size_t)r * row_bytes, n, &tk->nat[t].q) + 1e-30;
        }
    float ref[NT * ROWS]; /* the scalar qr16 kernel, nt = NT */
    lilac_qr16_q4_K_scalar(w, tk->xn, NT, n, ref);
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < ROWS; r++) {
            const double e = fabs((double)ref[t * ROWS + r] - want[t][r]);
            st->bad_oracle += !(e <= tol[t][r]);
            if (e / tol[t][r] * TOL_REL > st->worst_oracle)
                st->worst_oracle = e / tol[t][r] * TOL_REL;
        }
    for (int k = 0; k < n_kernels; k++) {
        float single[NT][ROWS];
        for (int t = 0; t < NT; t++)
            kernels[k].fn(w, &tk->xn[t], 1, n, single[t]);
        for (int t = 0; t < NT; t++)
            for (int r = 0; r < ROWS; r++) {
                const double e = fabs((double)single[t][r] - ref[t * ROWS + r]);
                st->bad_kernel[k] += !(e <= tol[t][r]);
                st->bitwise[k] += memcmp(&single[t][r], &ref[t * ROWS + r], sizeof(float)) == 0;
                if (e / tol[t][r] * TOL_REL > st->worst_kernel[k])
                    st->worst_kernel[k] = e / tol[t][r] * TOL_REL;
            }
        /* every nt, with tokens s .. s + nt - 1 (so x[t] comes with
         * different companions and at different positions) */
        for (int nt = 1; nt <= NT; nt++) {
            const int s = (int)(qt_next() % NT);
            float got[NT * ROWS];
            memset(got, 0xFF, sizeof got);
            kernels[k].fn(w, &tk->xn[s], nt, n, got);
            for (int t = 0; t < nt; t++)
                st->bad_nt[k] += memcmp(got + t * ROWS, single[(s + t) % NT], sizeof single[0]) != 0;
            for (int t = nt; t < NT; t++) /* nothing written past nt tokens */
                for (int r = 0; r < ROWS; r++)
                    st->bad_nt[k] += !isnan(got[t * ROWS + r]);
        }
    }
    st->runs++;
}

static void test_dots(void)
{
    for (size_t ni = 0; ni < N_NS; ni++) {
        const int64_t n = ns[ni];
        dot_stats st = {0};
        for (int rep = 0; rep < 3; rep++) {
            const size_t row_bytes = (size_t)(n / LILAC_QK_K) * sizeof(block_q4_K);
            uint8_t *rows = rand_rows(n, row_bytes, rep != 2);
            /* weights 4 bytes past a 64-byte boundary: the kernels must
             * not need more than the struct's alignment */
            uint8_t *wbuf = aligned_alloc(64, ROWS * row_bytes + 64);
            block_q4_Kx16 *w = (block_q4_Kx16 *)(void *)(wbuf + 4);
            lilac_qr16_pack_q4_K(rows, row_bytes, n, w);
            float *xs[NT];
            for (int t = 0; t < NT; t++) {
                xs[t] = malloc((size_t)n * sizeof(float));
                qt_rand_x(xs[t], n, rep == 0 && t < 2);
            }
            tokens tk;
            tokens_make(&tk, n, (const float *const *)xs);
            check_matrix(rows, row_bytes, n, w, &tk, &st);
            tokens_free(&tk);
            for (int t = 0; t < NT; t++)
                free(xs[t]);
            free(rows), free(wbuf);
        }
        printf("n = %4lld: scalar qr16 vs one-row oracle worst |d| / sum|terms| %.2e (%d matrices x %d tokens)\n",
               (long long)n, st.worst_oracle, st.runs, NT);
        CHECKF(st.bad_oracle == 0, "n = %lld: scalar qr16: %d dots off the one-row oracle", (long long)n,
               st.bad_oracle);
        for (int k = 0; k < n_kernels; k++) {
            printf("  %-6s vs scalar qr16: worst %.2e, %d of %d bit for bit\n", kernels[k].name, st.worst_kernel[k],
                   st.bitwise[k], st.runs * NT * ROWS);
            CHECKF(st.bad_kernel[k] == 0, "n = %lld: %s: %d dots off the scalar qr16 kernel", (long long)n,
                   kernels[k].name, st.bad_kernel[k]);
            CHECKF(st.bad_nt[k] == 0, "n = %lld: %s: %d token results differ between nt = 1 and batched",
                   (long long)n, kernels[k].name, st.bad_nt[k]);
        }
    }
}

/* NaN or inf in one activation block of one token: that token's 16
 * outputs are NaN, the others' unchanged; all-zero activations give 0. */
static void test_special(void)
{
    const float specials[3] = {NAN, INFINITY, -INFINITY};
    const int64_t n = 512;
    const size_t row_bytes = (size_t)(n / LILAC_QK_K) * sizeof(block_q4_K);
    int bad_nan = 0, bad_other = 0, bad_zero = 0;
    for (int sp = 0; sp < 3; sp++) {
        uint8_t *rows = rand_rows(n, row_bytes, 1);
        block_q4_Kx16 *w = malloc(ROWS * row_bytes);
        lilac_qr16_pack_q4_K(rows, row_bytes, n, w);
        float *xs[NT];
        for (int t = 0; t < NT; t++) {
            xs[t] = malloc((size_t)n * sizeof(float));
            qt_rand_x(xs[t], n, 1);
        }
        xs[1][qt_next() % (uint64_t)n] = specials[sp];
        memset(xs[2], 0, (size_t)n * sizeof(float));
        tokens tk;
        tokens_make(&tk, n, (const float *const *)xs);
        for (int k = 0; k < n_kernels; k++) {
            float got[3 * ROWS], alone[ROWS];
            kernels[k].fn(w, tk.xn, 3, n, got);
            kernels[k].fn(w, tk.xn, 1, n, alone);
            for (int r = 0; r < ROWS; r++) {
                bad_nan += !isnan(got[ROWS + r]);
                bad_zero += got[2 * ROWS + r] != 0.0f;
                bad_other += !isfinite(got[r]) || memcmp(&got[r], &alone[r], sizeof(float)) != 0;
            }
        }
        tokens_free(&tk);
        for (int t = 0; t < NT; t++)
            free(xs[t]);
        free(rows), free(w);
    }
    printf("non-finite and zero activations: %d kernels x 3 matrices\n", n_kernels);
    CHECKF(bad_nan == 0, "%d outputs of a token with a NaN/inf activation are not NaN", bad_nan);
    CHECKF(bad_other == 0, "%d outputs of a finite token batched with a NaN one are off", bad_other);
    CHECKF(bad_zero == 0, "%d outputs of zero activations are not 0", bad_zero);
}

/* The comparisons reject wrong weights: one nibble, one scale, one d. */
static void test_broken(void)
{
    const int64_t n = 2048;
    const size_t row_bytes = (size_t)(n / LILAC_QK_K) * sizeof(block_q4_K);
    uint8_t *rows = rand_rows(n, row_bytes, 1);
    block_q4_Kx16 *w = malloc(ROWS * row_bytes);
    float *xs[NT];
    for (int t = 0; t < NT; t++) {
        xs[t] = malloc((size_t)n * sizeof(float));
        qt_rand_x(xs[t], n, 1);
    }
    tokens tk;
    tokens_make(&tk, n, (const float *const *)xs);
    for (int c = 0; c < 3; c++) {
        lilac_qr16_pack_q4_K(rows, row_bytes, n, w);
        block_q4_Kx16 *b = &w[qt_next() % (uint64_t)(n / LILAC_QK_K)];
        const int r = (int)(qt_next() % ROWS);
        if (c == 0)
            b->qs[qt_next() % 8][qt_next() % 4][4 * r + qt_next() % 4] ^= 0x44; /* a weight in each nibble by 4 */
        else if (c == 1)
            b->scales[0][r] ^= 0x10u << (8 * (qt_next() % 4)); /* one group's scale by 16 */
        else
            b->d[r] ^= 0x0400; /* d twice or half */
        dot_stats st = {0};
        check_matrix(rows, row_bytes, n, w, &tk, &st);
        CHECKF(st.bad_oracle >= NT / 2, "corruption %d: only %d of %d dots of the row off the oracle", c,
               st.bad_oracle, NT);
    }
    tokens_free(&tk);
    for (int t = 0; t < NT; t++)
        free(xs[t]);
    free(rows), free(w);
}

int main(void)
{
    qt_rng = 0x9e3779b97f4a7c15ull;
    find_kernels();
    test_pack();
    test_dots();
    test_special();
    test_broken();
    TEST_END();
}
