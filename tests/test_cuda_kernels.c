/* test_cuda_kernels: the CUDA matrix-vector kernels (kernels/cuda) against
 * the CPU's dequantization: for every type the kernels take, several
 * shapes, token counts and memory layouts, y = W x on the GPU is compared
 * with a float64 dot of the rows lilac_row_to_f32 decodes, within
 * TOL * sum |w x| (float32 rounding of the sums). Then the experts product
 * and the row lookup (bit for bit), and a bandwidth line per type.
 *
 * Without a usable CUDA device it skips (exit 77), saying why, unless
 * LILAC_REQUIRE_CUDA=1 is set: then it fails, so that a run meant for a GPU
 * machine cannot pass by skipping. LILAC_CUDA_NO_BENCH leaves the
 * bandwidth lines out; LILAC_CUDA_BENCH_ONLY runs only them. Also the gated
 * RMSNorm of DeltaNet heads (lilac_cuda_gated_norm, whichever kernel
 * LILAC_CUDA_PF_WARP_NORM picks) against float64, within 2e-6 of each value's
 * magnitude. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_sizes.h"
#include "cudatest.h"

#define TOL 1e-5

static const int TYPES[] = {LILAC_F32,  LILAC_F16,  LILAC_BF16, LILAC_Q8_0,
                            LILAC_Q4_0, LILAC_Q4_K, LILAC_Q5_K, LILAC_Q6_K};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

/* A matrix in host and device memory. */
typedef struct {
    int type;
    int64_t rows, cols;
    size_t row_bytes, offset; /* device data starts offset bytes into the allocation */
    uint8_t *host;
    void *dev;
    float *deq; /* rows x cols, lilac_row_to_f32 */
    lilac_cuda_mat m;
} tmat;

static int tmat_make(tmat *t, int type, int64_t rows, int64_t cols, size_t row_bytes, size_t offset, int mode)
{
    char msg[512];
    memset(t, 0, sizeof *t);
    t->type = type, t->rows = rows, t->cols = cols, t->row_bytes = row_bytes, t->offset = offset;
    const size_t bytes = (size_t)rows * row_bytes;
    t->host = malloc(bytes + 1);
    t->deq = malloc(sizeof(float) * (size_t)(rows * cols));
    fill_matrix(type, rows, cols, row_bytes, mode, t->host);
    for (int64_t r = 0; r < rows; r++)
        lilac_row_to_f32(type, t->host + (size_t)r * row_bytes, t->deq + r * cols, cols);
    if (lilac_cuda_malloc(&t->dev, bytes + offset + 16, msg, sizeof msg) ||
        lilac_cuda_upload((uint8_t *)t->dev + offset, t->host, bytes, msg, sizeof msg)) {
        CHECKF(0, "%s %lld x %lld: %s", tname(type), (long long)rows, (long long)cols, msg);
        return -1;
    }
    t->m = (lilac_cuda_mat){.data = (uint8_t *)t->dev + offset, .type = type, .rows = rows, .cols = cols,
                            .row_bytes = row_bytes};
    return 0;
}

static void tmat_free(tmat *t)
{
    lilac_cuda_free(t->dev);
    free(t->host);
    free(t->deq);
}

/* y[t][r] of n rows against the float64 dot of deq rows with x[t]: returns
 * the largest error / sum|w x|; prints the first few failures. */
static double compare(const char *what, const float *deq, int64_t cols, const float *x, const float *y,
                      int64_t rows, int n_tok, int64_t y_tok)
{
    double worst = 0;
    int bad = 0;
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < rows; r++) {
            const float *w = deq + r * cols, *xt = x + t * cols;
            double dot = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                dot += (double)w[c] * xt[c];
                mag += fabs((double)w[c] * xt[c]);
            }
            const double got = y[t * y_tok + r], err = fabs(got - dot);
            const double rel = mag > 0 ? err / mag : err;
            if (!(rel <= worst))
                worst = isnan(rel) ? INFINITY : rel;
            if (!(err <= TOL * mag + 1e-30)) {
                if (bad < 5)
                    CHECKF(0, "%s: y[t=%d][r=%lld] = %.9g, expected %.9g (|err| %.3g > %.0e * sum|w x| = %.3g)",
                           what, t, (long long)r, got, dot, err, TOL, TOL * mag);
                bad++;
            }
        }
    if (bad > 5)
        CHECKF(0, "%s: %d results out of tolerance in all", what, bad);
    tu_checks++;
    return worst;
}

static float *dev_floats(const float *host, size_t n)
{
    char msg[512];
    void *d = NULL;
    if (lilac_cuda_malloc(&d, sizeof(float) * (n ? n : 1), msg, sizeof msg) ||
        (host && lilac_cuda_upload(d, host, sizeof(float) * n, msg, sizeof msg))) {
        CHECKF(0, "device buffer of %zu floats: %s", n, msg);
        return NULL;
    }
    return d;
}

static double worst_mv[N_TYPES], worst_ex[N_TYPES];
static int gr_bad[N_TYPES], cases[N_TYPES];

/* W x for n_tok tokens on the GPU against the reference. */
static void test_matvec(int ti, const tmat *m, int n_tok, const char *layout)
{
    char what[256];
    snprintf(what, sizeof what, "%s matvec %lld x %lld n_tok %d (%s)", tname(m->type), (long long)m->rows,
             (long long)m->cols, n_tok, layout);
    const size_t nx = (size_t)n_tok * (size_t)m->cols, ny = (size_t)n_tok * (size_t)m->rows;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny);
    for (size_t i = 0; i < nx; i++) /* activations of mixed magnitude, 2^-4 .. 2^4 */
        x[i] = ldexpf(rnd_sym(), (int)(rnd() % 9) - 4);
    float *dx = dev_floats(x, nx), *dy = dev_floats(NULL, ny);
    if (dx && dy) {
        lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL); /* NaN: a row never written shows */
        lilac_cuda_matvec(&m->m, dx, dy, n_tok, NULL);
        const char *err = check_msg();
        char msg[512];
        if (err)
            CHECKF(0, "%s: %s", what, err);
        else if (lilac_cuda_download(y, dy, sizeof(float) * ny, NULL, msg, sizeof msg))
            CHECKF(0, "%s: download: %s", what, msg);
        else {
            const double w = compare(what, m->deq, m->cols, x, y, m->rows, n_tok, m->rows);
            if (!(w <= worst_mv[ti]))
                worst_mv[ti] = w;
            cases[ti]++;
        }
    }
    lilac_cuda_free(dx);
    lilac_cuda_free(dy);
    free(x);
    free(y);
}

/* n experts of rows x cols of type, stride bytes apart (*host), and their values (*deq, n x rows x cols);
 * odd experts from the quantizer's gaussian mode. The caller frees both. */
static void experts_make(int type, int64_t rows, int64_t cols, size_t stride, int n, uint8_t **host, float **deq)
{
    const size_t rb = lilac_dtype_row_bytes(type, cols);
    *host = malloc(stride * (size_t)n);
    *deq = malloc(sizeof(float) * (size_t)(n * rows * cols));
    for (int e = 0; e < n; e++) {
        fill_matrix(type, rows, cols, rb, e & 1, *host + e * stride);
        for (int64_t r = 0; r < rows; r++)
            lilac_row_to_f32(type, *host + e * stride + r * rb, *deq + (e * rows + r) * cols, cols);
    }
}

/* k experts of one layer, stored expert_stride apart, idx with repeats.
 * fused: through lilac_cuda_matvec_fused with the input silu(x) * x2 and
 * the product added to y's previous contents. */
static void test_experts(int ti, int type, int64_t rows, int64_t cols, int x_stride, int fused)
{
    enum { N_EXP = 16, K = 8 };
    static const int32_t IDX[K] = {3, 15, 0, 3, 7, 7, 12, 1};
    char what[256], msg[512];
    snprintf(what, sizeof what, "%s experts %d of %d, %lld x %lld, x_stride %d%s", tname(type), K, N_EXP,
             (long long)rows, (long long)cols, x_stride, fused ? ", fused SwiGLU input and y +=" : "");
    const size_t rb = lilac_dtype_row_bytes(type, cols), stride = (size_t)rows * rb + 64;
    uint8_t *host;
    float *deq;
    experts_make(type, rows, cols, stride, N_EXP, &host, &deq);
    const int nxr = x_stride ? K : 1;
    float *x = malloc(sizeof(float) * (size_t)(nxr * cols)), *y = malloc(sizeof(float) * (size_t)(K * rows));
    float *x2 = malloc(sizeof(float) * (size_t)(nxr * cols)), *xe = malloc(sizeof(float) * (size_t)(nxr * cols));
    for (int64_t i = 0; i < nxr * cols; i++) {
        x[i] = 4 * rnd_sym(), x2[i] = rnd_sym();
        xe[i] = fused ? x[i] / (1.0f + expf(-x[i])) * x2[i] : x[i]; /* what the product sees */
    }
    const float Y0 = 0x1p-12f; /* y's previous contents when fused: exact, small */
    void *dw = NULL, *didx = NULL;
    float *dx = dev_floats(x, (size_t)(nxr * cols)), *dy = dev_floats(NULL, (size_t)(K * rows));
    float *dx2 = dev_floats(x2, (size_t)(nxr * cols));
    if (lilac_cuda_malloc(&dw, stride * N_EXP, msg, sizeof msg) ||
        lilac_cuda_upload(dw, host, stride * N_EXP, msg, sizeof msg) ||
        lilac_cuda_malloc(&didx, sizeof IDX, msg, sizeof msg) ||
        lilac_cuda_upload(didx, IDX, sizeof IDX, msg, sizeof msg))
        CHECKF(0, "%s: %s", what, msg);
    else if (dx && dy && dx2) {
        const lilac_cuda_mat m = {.data = dw, .type = type, .rows = rows, .cols = cols, .row_bytes = rb};
        if (fused) {
            for (int64_t i = 0; i < K * rows; i++)
                y[i] = Y0;
            lilac_cuda_upload(dy, y, sizeof(float) * (size_t)(K * rows), msg, sizeof msg);
            lilac_cuda_matvec_fused(&m, stride, didx, K, dx, dx2, x_stride, dy, 1, NULL);
        } else {
            lilac_cuda_memset(dy, 0xFF, sizeof(float) * (size_t)(K * rows), NULL);
            lilac_cuda_matvec_experts(&m, stride, didx, K, dx, x_stride, dy, NULL);
        }
        const char *err = check_msg();
        if (err)
            CHECKF(0, "%s: %s", what, err);
        else if (lilac_cuda_download(y, dy, sizeof(float) * (size_t)(K * rows), NULL, msg, sizeof msg))
            CHECKF(0, "%s: download: %s", what, msg);
        else
            for (int i = 0; i < K; i++) {
                for (int64_t r = 0; fused && r < rows; r++)
                    y[i * rows + r] -= Y0;
                char w2[300];
                snprintf(w2, sizeof w2, "%s, slot %d (expert %d)", what, i, IDX[i]);
                const double w = compare(w2, deq + (size_t)IDX[i] * rows * cols, cols, xe + (x_stride ? i * cols : 0),
                                         y + i * rows, rows, 1, rows);
                if (!(w <= worst_ex[ti]))
                    worst_ex[ti] = w;
            }
    }
    lilac_cuda_free(dw);
    lilac_cuda_free(didx);
    lilac_cuda_free(dx);
    lilac_cuda_free(dx2);
    lilac_cuda_free(dy);
    free(host);
    free(deq);
    free(x);
    free(x2);
    free(xe);
    free(y);
}

/* Row r of m through lilac_cuda_get_row: bit for bit lilac_row_to_f32's,
 * and NaN for an r out of range. */
static void test_get_row(int ti, const tmat *m, int32_t r)
{
    char msg[512];
    void *dr = NULL;
    float *dout = dev_floats(NULL, (size_t)m->cols), *out = malloc(sizeof(float) * (size_t)m->cols);
    if (lilac_cuda_malloc(&dr, sizeof r, msg, sizeof msg) || lilac_cuda_upload(dr, &r, sizeof r, msg, sizeof msg) ||
        !dout) {
        CHECKF(0, "%s get_row: %s", tname(m->type), msg);
        goto out;
    }
    lilac_cuda_get_row(&m->m, dr, dout, NULL);
    const char *err = check_msg();
    if (err) {
        CHECKF(0, "%s get_row %d: %s", tname(m->type), r, err);
        goto out;
    }
    if (lilac_cuda_download(out, dout, sizeof(float) * (size_t)m->cols, NULL, msg, sizeof msg)) {
        CHECKF(0, "%s get_row %d: download: %s", tname(m->type), r, msg);
        goto out;
    }
    int bad = 0;
    for (int64_t c = 0; c < m->cols; c++) {
        const int in_range = r >= 0 && r < m->rows;
        const float want = in_range ? m->deq[r * m->cols + c] : NAN;
        const int same = in_range ? memcmp(&out[c], &want, sizeof want) == 0 : isnan(out[c]);
        uint32_t bits;
        memcpy(&bits, &out[c], sizeof bits);
        if (!same && bad++ < 3)
            CHECKF(0, "%s get_row %d of %lld x %lld: value %lld is %.9g (0x%08x), lilac_row_to_f32 gives %.9g",
                   tname(m->type), r, (long long)m->rows, (long long)m->cols, (long long)c, out[c], (unsigned)bits,
                   want);
    }
    if (bad)
        gr_bad[ti] += bad;
    tu_checks++;
out:
    lilac_cuda_free(dr);
    lilac_cuda_free(dout);
    free(out);
}

static void test_down_sum(int type, int64_t rows, int64_t cols, int k, int shared, int normed, int exact);

static void test_type_matvec(int ti)
{
    const int type = TYPES[ti];
    const int64_t COLS[] = {256, 512, 2048, 4096}, ROWS[] = {1, 7, 333, 2048};
    const int NTOK[] = {1, 2, 5, 16};
    const bool quick = ct_quick(); /* the shapes of every kernel path */
    tmat m;
    for (int ci = 0; ci < 4; ci++)
        for (int ri = 0; ri < 4; ri++) {
            if (quick && ci != 3 && !(ci == 0 && ri == 3))
                continue;
            if (tmat_make(&m, type, ROWS[ri], COLS[ci], lilac_dtype_row_bytes(type, COLS[ci]), 0, 0))
                return;
            for (int ni = 0; ni < 4; ni++)
                test_matvec(ti, &m, NTOK[ni], "packed rows");
            if (type == LILAC_F32 || type == LILAC_F16 || type == LILAC_BF16) { /* cuda_gemm.cu's tiles and edges */
                test_matvec(ti, &m, 40, "packed rows, gemm");
                test_matvec(ti, &m, 130, "packed rows, gemm"); /* 32 x 32 tiles: too few 64 x 64 ones */
                if (ri == 3 && ci == 0)                           /* a grid of 64 x 64 tiles that fills the GPU */
                    test_matvec(ti, &m, 600, "packed rows, gemm 64 x 64 tiles");
            }
            if (ci == 3 && ri == 2) {
                const int32_t R[] = {0, 166, 332, 333, -1}; /* the last two out of range: NaN */
                for (int i = 0; i < 5; i++)
                    test_get_row(ti, &m, R[i]);
            }
            if (ci == 0 && ri == 3)
                test_get_row(ti, &m, 2047);
            tmat_free(&m);
        }

    /* Layouts: misaligned data (the realigning loads, or the scalar kernel
     * for float types), padded rows (Q6_K's 16-aligned path at any width),
     * values from the quantizers, several column tiles. */
    const size_t rb4096 = lilac_dtype_row_bytes(type, 4096), rb512 = lilac_dtype_row_bytes(type, 512);
    const size_t mis = type == LILAC_F32 ? 4 : 2;
    if (!tmat_make(&m, type, 333, 4096, rb4096, mis, 0)) {
        test_matvec(ti, &m, 1, "data 2 or 4 bytes past 16-byte alignment");
        test_matvec(ti, &m, 5, "data 2 or 4 bytes past 16-byte alignment");
        if (type == LILAC_F32) /* the GEMM's rows not 16-byte aligned: k_gemm_f, not the tensor cores */
            test_matvec(ti, &m, 40, "data 4 bytes past 16-byte alignment, gemm");
        test_get_row(ti, &m, 17);
        tmat_free(&m);
    }
    if (!tmat_make(&m, type, 333, 512, (rb512 + 15) / 16 * 16 + 16, 0, 0)) {
        test_matvec(ti, &m, 1, "rows padded to 16 bytes + 16");
        test_matvec(ti, &m, 3, "rows padded to 16 bytes + 16");
        if (type == LILAC_F32) /* F32 on the tensor cores: row_bytes past cols * 4 */
            test_matvec(ti, &m, 40, "rows padded to 16 bytes + 16, gemm");
        tmat_free(&m);
    }
    if (!tmat_make(&m, type, 333, 4096, rb4096, 0, 1)) {
        test_matvec(ti, &m, 1, "quantized gaussian values");
        test_matvec(ti, &m, 2, "quantized gaussian values");
        test_matvec(ti, &m, 8, "quantized gaussian values");
        test_get_row(ti, &m, 100);
        tmat_free(&m);
    }
    if (!tmat_make(&m, type, 65, 20480, lilac_dtype_row_bytes(type, 20480), 0, 0)) {
        test_matvec(ti, &m, 1, "several column tiles");
        test_matvec(ti, &m, 3, "several column tiles");
        tmat_free(&m);
    }
    if (type == LILAC_F32 || type == LILAC_F16 || type == LILAC_BF16) { /* not a multiple of 16 values: scalar kernel */
        if (!tmat_make(&m, type, 7, 100, lilac_dtype_row_bytes(type, 100), 0, 0)) {
            test_matvec(ti, &m, 1, "100 columns");
            test_matvec(ti, &m, 2, "100 columns");
            test_matvec(ti, &m, 40, "100 columns, gemm"); /* F32's tensor cores: a last column tile of 4 */
            test_get_row(ti, &m, 6);
            tmat_free(&m);
        }
    }
    /* the prefill's MoE router, F32 on the tensor cores: a prompt's tokens in 1000-token chunks */
    if (type == LILAC_F32 && !tmat_make(&m, type, 256, 2048, lilac_dtype_row_bytes(type, 2048), 0, 0)) {
        test_matvec(ti, &m, 1000, "the MoE router's shape, gemm");
        tmat_free(&m);
    }
    test_experts(ti, type, 96, 512, 0, 0);
    test_experts(ti, type, 96, 512, 1, 0);
    test_experts(ti, type, 333, 2048, 1, 0);
    test_experts(ti, type, 96, 512, 1, 1);
    test_experts(ti, type, 40, 2048, 0, 1);
}

/* LILAC_CUDA_TEST_PARTS (cudatest.h): matvec (the products, experts and get_row), down_sum, norm, refusals */
static void test_like(int type);

/* The float types (no block structure: no down+sum case). */
static bool float_type(int type) { return type == LILAC_F32 || type == LILAC_F16 || type == LILAC_BF16; }

static void test_type(int ti)
{
    const int type = TYPES[ti];
    if (ct_part("matvec"))
        test_type_matvec(ti);
    if (ct_part("like"))
        test_like(type);
    if (!float_type(type) && ct_part("down_sum")) {
        /* the 35B-A3B's shape: bit for bit at either rows a lane group (LILAC_CUDA_DOWN_SUM_R=1: k_mv's one) */
        test_down_sum(type, 2048, 512, 8, 1, 1, 1);
        test_down_sum(type, 200, 256, 3, 0, 1, 0);
        test_down_sum(type, 96, 1024, 8, 1, 0, 0);
    }
}

/* y (n floats, device) into host h and bit for bit against want: 1 when equal; reports the first difference. */
static int same_bits(const char *what, const float *dy, float *h, const float *want, size_t n)
{
    char msg[512];
    const char *err = check_msg();
    if (err || lilac_cuda_download(h, dy, sizeof(float) * n, NULL, msg, sizeof msg)) {
        CHECKF(0, "%s: %s", what, err ? err : msg);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (memcmp(&h[i], &want[i], sizeof(float))) {
            CHECKF(0, "%s: value %zu is %.9g (0x%08x), the one-token product's %.9g", what, i, h[i],
                   (unsigned)(*(const uint32_t *)&h[i]), want[i]);
            return 0;
        }
    tu_checks++;
    return 1;
}

/* lilac_cuda_matvec_like (the exact batched decode's products) against the one-token products it stands for,
 * bit for bit: n tokens through W as one-token products of `like` (W's rows first of it: the step's joined
 * matrices), plain, with the SwiGLU input and with y +=; and n tokens' k experts as n k pairs against each token's
 * product of its k slots. Token counts that take 2, 4 and 8 tokens a pass and leave some of a pass empty. */
static int like_cases;
static void test_like(int type)
{
    enum { NT = 13, K = 8, N_EXP = 12 };
    static const int NTOK[] = {2, 3, 5, 8, NT};
    static const int64_t SHAPE[][3] = {{256, 2048, 3}, {2048, 2048, 1}, {96, 4096, 2}, {512, 512, 1}};
    char what[256], msg[512];
    for (size_t si = 0; si < sizeof SHAPE / sizeof SHAPE[0]; si++) {
        const int64_t rows = SHAPE[si][0], cols = SHAPE[si][1], lrows = rows * SHAPE[si][2];
        tmat L;
        if (tmat_make(&L, type, lrows, cols, lilac_dtype_row_bytes(type, cols), 0, 0))
            continue;
        lilac_cuda_mat W = L.m; /* the first rows of like */
        W.rows = rows;
        const size_t nx = (size_t)NT * cols, ny = (size_t)NT * lrows;
        float *x = malloc(sizeof(float) * nx), *x2 = malloc(sizeof(float) * nx), *want = malloc(sizeof(float) * ny);
        float *h = malloc(sizeof(float) * ny);
        for (size_t i = 0; i < nx; i++)
            x[i] = ldexpf(rnd_sym(), (int)(rnd() % 9) - 4), x2[i] = rnd_sym();
        float *dx = dev_floats(x, nx), *dx2 = dev_floats(x2, nx), *dy = dev_floats(NULL, ny);
        float *d1 = dev_floats(NULL, (size_t)lrows);
        if (dx && dx2 && dy && d1) {
            for (int mode = 0; mode < 3; mode++) { /* plain, SwiGLU input, y += */
                /* the reference: each token alone through like (lrows rows), W's rows of it kept */
                for (int t = 0; t < NT; t++) {
                    if (mode == 2)
                        lilac_cuda_upload(d1, x2, sizeof(float) * (size_t)lrows, msg, sizeof msg);
                    lilac_cuda_matvec_fused(&L.m, 0, NULL, 1, dx + (size_t)t * cols, mode == 1 ? dx2 + t * cols : NULL,
                                            0, d1, mode == 2, NULL);
                    lilac_cuda_download(want + (size_t)t * rows, d1, sizeof(float) * (size_t)rows, NULL, msg,
                                        sizeof msg);
                }
                for (size_t ni = 0; ni < sizeof NTOK / sizeof NTOK[0]; ni++) {
                    const int n = NTOK[ni];
                    if (mode == 2)
                        for (int t = 0; t < n; t++)
                            lilac_cuda_upload(dy + (size_t)t * rows, x2, sizeof(float) * (size_t)rows, msg, sizeof msg);
                    lilac_cuda_matvec_like(&W, 0, NULL, 1, dx, 0, mode == 1 ? dx2 : NULL, dy, n, mode == 2, &L.m, 0, 1,
                                           NULL);
                    snprintf(what, sizeof what, "%s like %lld of %lld x %lld rows, %d tokens, %s", tname(type),
                             (long long)rows, (long long)lrows, (long long)cols, n,
                             mode == 0 ? "plain" : mode == 1 ? "SwiGLU input" : "y +=");
                    like_cases += same_bits(what, dy, h, want, (size_t)n * rows);
                }
            }
        }
        lilac_cuda_free(dx), lilac_cuda_free(dy), lilac_cuda_free(dx2), lilac_cuda_free(d1);
        free(x), free(x2), free(want), free(h);
        tmat_free(&L);
    }
    /* experts: n tokens' K slots as n K pairs (x a pair) against each token's product of 2K slots (gate and up in
     * one allocation: K = gate slots, the up ones after) */
    const int64_t rows = 512, cols = 2048;
    const size_t rb = lilac_dtype_row_bytes(type, cols), stride = (size_t)rows * rb + 64;
    uint8_t *host;
    float *deq;
    experts_make(type, rows, cols, stride, N_EXP, &host, &deq);
    int32_t idx[NT * 2 * K], pidx[NT * K];
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < K; j++) {
            const int e = (int)(rnd() % (N_EXP / 2));
            idx[t * 2 * K + j] = e, idx[t * 2 * K + K + j] = e + N_EXP / 2, pidx[t * K + j] = e;
        }
    float *x = malloc(sizeof(float) * (size_t)(NT * K * cols)), *want = malloc(sizeof(float) * (size_t)(NT * K * rows));
    float *h = malloc(sizeof(float) * (size_t)(NT * K * rows));
    for (int t = 0; t < NT; t++)
        for (int64_t c = 0; c < cols; c++) {
            const float v = ldexpf(rnd_sym(), (int)(rnd() % 9) - 4);
            for (int j = 0; j < K; j++)
                x[((size_t)t * K + j) * cols + c] = v; /* a pair's x row: its token's */
        }
    void *dw = NULL, *didx = NULL, *dpidx = NULL;
    float *dx = dev_floats(x, (size_t)(NT * K * cols)), *dy = dev_floats(NULL, (size_t)(NT * 2 * K * rows));
    if (!dx || !dy || lilac_cuda_malloc(&dw, stride * N_EXP, msg, sizeof msg) ||
        lilac_cuda_upload(dw, host, stride * N_EXP, msg, sizeof msg) ||
        lilac_cuda_malloc(&didx, sizeof idx, msg, sizeof msg) || lilac_cuda_upload(didx, idx, sizeof idx, msg, sizeof msg) ||
        lilac_cuda_malloc(&dpidx, sizeof pidx, msg, sizeof msg) ||
        lilac_cuda_upload(dpidx, pidx, sizeof pidx, msg, sizeof msg)) {
        CHECKF(0, "%s like experts: %s", tname(type), msg);
    } else {
        const lilac_cuda_mat m = {.data = dw, .type = type, .rows = rows, .cols = cols, .row_bytes = rb};
        for (int t = 0; t < NT; t++) { /* token t: 2K slots over its x (shared), the gate slots kept */
            lilac_cuda_matvec_experts(&m, stride, (const int32_t *)didx + t * 2 * K, 2 * K, dx + (size_t)t * K * cols,
                                      0, dy, NULL);
            lilac_cuda_download(want + (size_t)t * K * rows, dy, sizeof(float) * (size_t)(K * rows), NULL, msg,
                                sizeof msg);
        }
        lilac_cuda_matvec_like(&m, stride, dpidx, NT * K, dx, 1, NULL, dy, 1, 0, &m, stride, 2 * K, NULL);
        snprintf(what, sizeof what, "%s like experts: %d tokens of %d pairs", tname(type), NT, K);
        like_cases += same_bits(what, dy, h, want, (size_t)NT * K * rows);
    }
    lilac_cuda_free(dw), lilac_cuda_free(didx), lilac_cuda_free(dpidx), lilac_cuda_free(dx), lilac_cuda_free(dy);
    free(host), free(deq), free(x), free(want), free(h);
}

/* lilac_cuda_moe_down_sum (the decode step's down product, the experts' sum and the next norm in one kernel)
 * against the two kernels it replaces, lilac_cuda_matvec_fused over k slots and lilac_cuda_moe_sum_norm_grid:
 * exact (the 35B-A3B's 512 columns, where k_mv takes 4 lanes a row as the fused kernel does): x bit for bit,
 * the same dots added in the same order, and xn within 1e-6 of each value (its sum of squares in other parts);
 * else x within 1e-6 of max |x| (a row's lanes may split otherwise), xn of max |xn|. rows not a multiple of 16 leave the last
 * block part-filled; k under 8 leaves warps idle. Quantized types only (the others return -1). */
static int ds_cases, ds_bad;
static void test_down_sum(int type, int64_t rows, int64_t cols, int k, int shared, int normed, int exact)
{
    enum { N_EXP = 16 };
    static const int32_t IDX[8] = {3, 15, 0, 3, 7, 7, 12, 1};
    char what[256], msg[512];
    snprintf(what, sizeof what, "%s down+sum, %d of %d experts of %lld x %lld%s%s", tname(type), k, N_EXP,
             (long long)rows, (long long)cols, shared ? ", shared expert" : "", normed ? ", norm" : "");
    const size_t rb = lilac_dtype_row_bytes(type, cols), stride = (size_t)rows * rb + 64;
    uint8_t *host;
    float *deq;
    experts_make(type, rows, cols, stride, N_EXP, &host, &deq);
    const size_t ng = (size_t)k * (size_t)cols;
    float *g = malloc(sizeof(float) * ng), *u = malloc(sizeof(float) * ng), *wt = malloc(sizeof(float) * 9);
    float *x0 = malloc(sizeof(float) * (size_t)rows), *sh = malloc(sizeof(float) * (size_t)rows);
    float *nw = malloc(sizeof(float) * (size_t)rows);
    float *xa = malloc(sizeof(float) * (size_t)rows), *xb = malloc(sizeof(float) * (size_t)rows);
    float *na = malloc(sizeof(float) * (size_t)rows), *nb = malloc(sizeof(float) * (size_t)rows);
    for (size_t i = 0; i < ng; i++)
        g[i] = 4 * rnd_sym(), u[i] = rnd_sym();
    for (int i = 0; i < 9; i++)
        wt[i] = 0.05f + 0.2f * (rnd_sym() + 1);
    for (int64_t r = 0; r < rows; r++)
        x0[r] = 2 * rnd_sym(), sh[r] = rnd_sym(), nw[r] = 1 + 0.5f * rnd_sym();
    void *dw = NULL, *didx = NULL, *dcnt = NULL;
    float *dg = dev_floats(g, ng), *du = dev_floats(u, ng), *dwt = dev_floats(wt, 9), *dsh = dev_floats(sh, rows);
    float *dnw = dev_floats(nw, rows), *dxa = dev_floats(x0, rows), *dxb = dev_floats(x0, rows);
    float *dna = dev_floats(NULL, rows), *dnb = dev_floats(NULL, rows), *dex = dev_floats(NULL, (size_t)k * rows);
    float *dpart = dev_floats(NULL, LILAC_CUDA_DOWN_SUM_MAXB);
    if (lilac_cuda_malloc(&dw, stride * N_EXP, msg, sizeof msg) ||
        lilac_cuda_upload(dw, host, stride * N_EXP, msg, sizeof msg) ||
        lilac_cuda_malloc(&didx, sizeof IDX, msg, sizeof msg) ||
        lilac_cuda_upload(didx, IDX, sizeof IDX, msg, sizeof msg) ||
        lilac_cuda_malloc(&dcnt, 2 * sizeof(unsigned), msg, sizeof msg)) {
        CHECKF(0, "%s: %s", what, msg);
    } else if (dg && du && dwt && dsh && dnw && dxa && dxb && dna && dnb && dex && dpart) {
        lilac_cuda_memset(dcnt, 0, 2 * sizeof(unsigned), NULL);
        lilac_cuda_memset(dna, 0, sizeof(float) * (size_t)rows, NULL);
        lilac_cuda_memset(dnb, 0, sizeof(float) * (size_t)rows, NULL);
        const lilac_cuda_mat m = {.data = dw, .type = type, .rows = rows, .cols = cols, .row_bytes = rb};
        unsigned *cnt = dcnt;
        lilac_cuda_matvec_fused(&m, stride, didx, k, dg, du, 1, dex, 0, NULL);
        const int ra = lilac_cuda_moe_sum_norm_grid(dxa, dex, dwt, k, shared ? dsh : NULL, dwt + k,
                                                    normed ? dnw : NULL, dna, (int)rows, 1e-6f, dpart, cnt, NULL);
        const long before = lilac_cuda_fused_launches(LILAC_CUDA_FUSED_DOWN_SUM);
        const int rb2 = lilac_cuda_moe_down_sum(&m, stride, didx, k, dg, du, dwt, shared ? dsh : NULL, dxb,
                                                normed ? dnw : NULL, dnb, 1e-6f, dpart, cnt + 1, NULL);
        const char *err = check_msg();
        unsigned cnts[2] = {1, 1};
        if (err || ra || rb2) {
            CHECKF(0, "%s: %s (sum kernel %d, fused %d)", what, err ? err : "not taken", ra, rb2);
        } else if (lilac_cuda_download(xa, dxa, sizeof(float) * (size_t)rows, NULL, msg, sizeof msg) ||
                   lilac_cuda_download(xb, dxb, sizeof(float) * (size_t)rows, NULL, msg, sizeof msg) ||
                   lilac_cuda_download(na, dna, sizeof(float) * (size_t)rows, NULL, msg, sizeof msg) ||
                   lilac_cuda_download(nb, dnb, sizeof(float) * (size_t)rows, NULL, msg, sizeof msg) ||
                   lilac_cuda_download(cnts, dcnt, sizeof cnts, NULL, msg, sizeof msg)) {
            CHECKF(0, "%s: download: %s", what, msg);
        } else {
            CHECKF(lilac_cuda_fused_launches(LILAC_CUDA_FUSED_DOWN_SUM) == before + 1, "%s: not counted", what);
            CHECKF(cnts[0] == 0 && cnts[1] == 0, "%s: counters left at %u, %u (must be zero)", what, cnts[0],
                   cnts[1]);
            int xdiff = 0, ndiff = 0;
            double xmax = 0, nmax = 0;
            for (int64_t r = 0; r < rows; r++)
                xmax = fmax(xmax, fabs((double)xa[r])), nmax = fmax(nmax, fabs((double)na[r]));
            for (int64_t r = 0; r < rows; r++) {
                xdiff += exact ? memcmp(&xa[r], &xb[r], sizeof(float)) != 0
                               : !(fabs((double)xa[r] - xb[r]) <= 1e-6 * xmax);
                /* the same x: xn within 1e-6 of itself (only the norm's scale differs); else of max |xn| */
                const double e = fabs((double)na[r] - nb[r]), mag = exact ? fabs((double)na[r]) : nmax;
                ndiff += !(e <= 1e-6 * mag + 1e-30);
            }
            CHECKF(xdiff == 0, "%s: x differs from the two kernels' (%s) in %d of %lld rows", what,
                   exact ? "bit for bit" : "1e-6 of max |x|", xdiff, (long long)rows);
            CHECKF(ndiff == 0, "%s: xn differs by more than 1e-6 in %d of %lld rows", what, ndiff, (long long)rows);
            ds_cases++;
            ds_bad += xdiff + ndiff > 0;
        }
    }
    lilac_cuda_free(dw), lilac_cuda_free(didx), lilac_cuda_free(dcnt);
    lilac_cuda_free(dg), lilac_cuda_free(du), lilac_cuda_free(dwt), lilac_cuda_free(dsh), lilac_cuda_free(dnw);
    lilac_cuda_free(dxa), lilac_cuda_free(dxb), lilac_cuda_free(dna), lilac_cuda_free(dnb), lilac_cuda_free(dex);
    lilac_cuda_free(dpart);
    free(host), free(deq), free(g), free(u), free(wt), free(x0), free(sh), free(nw), free(xa), free(xb), free(na),
        free(nb);
}

/* Refused calls are reported by lilac_cuda_check. */
static void test_refusals(void)
{
    char msg[512];
    lilac_cuda_check(msg, sizeof msg); /* clear */
    const lilac_cuda_mat bad = {.data = (void *)16, .type = LILAC_Q4_1, .rows = 4, .cols = 32, .row_bytes = 20};
    float *d = dev_floats(NULL, 64);
    lilac_cuda_matvec(&bad, d, d, 1, NULL);
    msg[0] = 0;
    CHECKF(lilac_cuda_check(msg, sizeof msg) == -1 && strstr(msg, "type"), "unsupported type not reported: '%s'", msg);
    const lilac_cuda_mat shape = {.data = d, .type = LILAC_Q4_K, .rows = 4, .cols = 100, .row_bytes = 144};
    lilac_cuda_matvec(&shape, d, d, 1, NULL);
    msg[0] = 0;
    CHECKF(lilac_cuda_check(msg, sizeof msg) == -1 && strstr(msg, "shape"), "bad shape not reported: '%s'", msg);
    CHECKF(lilac_cuda_check(msg, sizeof msg) == 0, "lilac_cuda_check did not clear: '%s'", msg);
    CHECK(!lilac_cuda_type_supported(LILAC_Q4_1) && lilac_cuda_type_supported(LILAC_Q6_K));
    lilac_cuda_free(d);
}

/* The 35B-A3B's LM head (Q6_K 248,320 x 2048, 417 MB) one token at a time through k_mv_pipe and each k_mv_ring
 * configuration: ms and GB/s. Printed, not checked. */
static void bench_lm_head(void)
{
    const int64_t rows = 248320, cols = 2048;
    const size_t rb = lilac_dtype_row_bytes(LILAC_Q6_K, cols), bytes = (size_t)rows * rb;
    char msg[512];
    void *dev = NULL;
    uint8_t *host = malloc(bytes);
    if (!host || lilac_cuda_malloc(&dev, bytes, msg, sizeof msg)) {
        printf("bench lm_head: no memory: %s\n", host ? msg : "host");
        free(host);
        return;
    }
    fill_matrix(LILAC_Q6_K, rows, cols, rb, 0, host);
    if (lilac_cuda_upload(dev, host, bytes, msg, sizeof msg) == 0) {
        const lilac_cuda_mat m = {.data = dev, .type = LILAC_Q6_K, .rows = rows, .cols = cols, .row_bytes = rb};
        for (int ring = 0; ring <= lilac_cuda_mv_ring_count(); ring++) {
            const int prev = lilac_cuda_mv_ring_set(ring);
            const double t = lilac_cuda_bench_matvec(&m, 1, 20);
            lilac_cuda_mv_ring_set(prev);
            if (t > 0)
                printf("bench lm_head Q6_K %lld x %lld, ring %d: %8.1f us, %7.1f GB/s\n", (long long)rows,
                       (long long)cols, ring, t * 1e6, bytes / t / 1e9);
            else
                printf("bench lm_head ring %d: failed\n", ring);
        }
    }
    lilac_cuda_free(dev);
    free(host);
}

/* GB/s of one-token products over ~256 MiB of each type (weights read once
 * a product), and of 2 to 16 tokens for some. Printed, not checked. */
static void bench(void)
{
    bench_lm_head();
    const int64_t cols = 4096;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = TYPES[ti];
        const size_t rb = lilac_dtype_row_bytes(type, cols);
        const int64_t rows = (int64_t)((256u << 20) / rb);
        const size_t bytes = (size_t)rows * rb;
        char msg[512];
        void *dev = NULL;
        uint8_t *host = malloc(bytes);
        if (!host || lilac_cuda_malloc(&dev, bytes, msg, sizeof msg)) {
            printf("bench %s: no memory: %s\n", tname(type), host ? msg : "host");
            free(host);
            continue;
        }
        for (size_t i = 0; i < bytes; i += 8) { /* fast random bytes */
            const uint64_t v = rnd();
            memcpy(host + i, &v, bytes - i < 8 ? bytes - i : 8);
        }
        const lilac_dtype_info *inf = lilac_dtype_get(type);
        for (size_t b = 0; inf->blck > 1 && b < bytes / inf->size; b++) { /* sane scales */
            uint8_t *blk = host + b * inf->size;
            put16(type == LILAC_Q6_K ? blk + 208 : blk, rnd_scale());
            if (type == LILAC_Q4_K || type == LILAC_Q5_K)
                put16(blk + 2, rnd_scale());
        }
        if (type == LILAC_F16 || type == LILAC_BF16) /* finite values */
            for (size_t i = 0; i + 1 < bytes; i += 2)
                host[i + 1] &= 0x3F;
        if (type == LILAC_F32)
            for (size_t i = 0; i + 3 < bytes; i += 4)
                host[i + 3] &= 0x3F;
        if (lilac_cuda_upload(dev, host, bytes, msg, sizeof msg) == 0) {
            const lilac_cuda_mat m = {.data = dev, .type = type, .rows = rows, .cols = cols, .row_bytes = rb};
            const int ntoks[] = {1, 2, 4, 8, 16};
            const int multi = type == LILAC_Q4_K || type == LILAC_Q8_0 || type == LILAC_Q6_K || type == LILAC_F16;
            for (int ni = 0; ni < (multi ? 5 : 1); ni++) {
                const double s = lilac_cuda_bench_matvec(&m, ntoks[ni], 20);
                if (s > 0)
                    printf("bench %-5s %lld x %lld (%.1f MiB), n_tok %2d: %8.4f ms, %7.1f GB/s, %7.2f GFLOP/s\n",
                           tname(type), (long long)rows, (long long)cols, bytes / 1048576.0, ntoks[ni], s * 1e3,
                           bytes / s / 1e9, 2.0 * rows * cols * ntoks[ni] / s / 1e9);
                else
                    printf("bench %s n_tok %d: failed\n", tname(type), ntoks[ni]);
            }
        }
        lilac_cuda_free(dev);
        free(host);
    }
}

/* lilac_cuda_gated_norm over rows of dv values: o = o / sqrt(mean(o^2) + eps) * w * silu(z), against float64,
 * each value within 2e-6 of its magnitude (a few float32 roundings, rsqrtf's and expf's 2 ulp); dv 130 is not
 * a multiple of 4 (the block kernel whichever switch). cuda_ops.h's calls exist in CUDA builds only (the
 * others skip before them). */
#ifdef LILAC_CUDA
static void test_gated_norm(void)
{
    static const int DVS[] = {128, 96, 512, 130, 4};
    double worst = 0;
    for (size_t di = 0; di < sizeof DVS / sizeof DVS[0]; di++) {
        const int dv = DVS[di], rows = 37;
        const size_t n = (size_t)rows * dv;
        float *o = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float)), *w = malloc(dv * sizeof(float)),
              *got = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            o[i] = rnd_normal() * (i % 7 == 0 ? 10.0f : 1.0f), z[i] = rnd_normal();
        for (int i = 0; i < dv; i++)
            w[i] = 1 + 0.1f * rnd_normal();
        float *d_o = ct_dmalloc(n * sizeof(float)), *d_z = ct_dmalloc(n * sizeof(float)),
              *d_w = ct_dmalloc(dv * sizeof(float));
        ct_up(d_o, o, n * sizeof(float));
        ct_up(d_z, z, n * sizeof(float));
        ct_up(d_w, w, dv * sizeof(float));
        lilac_cuda_gated_norm(d_o, d_z, d_w, rows, dv, 1e-6f, NULL);
        const char *m = check_msg();
        CHECKF(m == NULL, "gated norm dv %d: %s", dv, m ? m : "");
        ct_down(got, d_o, n * sizeof(float));
        for (int r = 0; r < rows; r++) {
            double ss = 0;
            for (int i = 0; i < dv; i++)
                ss += (double)o[(size_t)r * dv + i] * o[(size_t)r * dv + i];
            const double rs = 1 / sqrt(ss / dv + 1e-6);
            for (int i = 0; i < dv; i++) {
                const size_t k = (size_t)r * dv + i;
                const double g = z[k], ref = o[k] * rs * w[i] * (g / (1 + exp(-g)));
                const double e = fabs(got[k] - ref) / (fabs(ref) + 1e-30);
                worst = fmax(worst, isnan(got[k]) ? INFINITY : e);
            }
        }
        lilac_cuda_free(d_o), lilac_cuda_free(d_z), lilac_cuda_free(d_w);
        free(o), free(z), free(w), free(got);
    }
    CHECKF(worst <= 2e-6, "gated norm: relative error %.3g", worst);
    printf("gated norm (%s kernel): max relative error %.3g\n",
           getenv("LILAC_CUDA_PF_WARP_NORM") && !atoi(getenv("LILAC_CUDA_PF_WARP_NORM")) ? "block" : "warp", worst);
}
#else
static void test_gated_norm(void) {}
#endif

/* A stream's scratch buffers go with it (lilac_cuda_stream_free): one a kind, grown and reused, given back; and
 * 40 streams in turn (more than the 16 slots there are) each get theirs. */
static void test_scratch_release(void)
{
    char msg[512];
    lilac_cuda_stream *s = NULL;
    CHECKF(lilac_cuda_stream_new(&s, msg, sizeof msg) == 0, "stream: %s", msg);
    if (!s)
        return;
    const int n0 = lilac_cuda_scratch_entries();
    void *a = lilac_cuda_scratch(s, LILAC_CUDA_SCR_MMA, (size_t)1 << 20);
    void *b = lilac_cuda_scratch(s, LILAC_CUDA_SCR_ATTN, (size_t)3 << 20);
    CHECK(a && b && a != b);
    CHECK(lilac_cuda_scratch(s, LILAC_CUDA_SCR_ATTN, (size_t)1 << 20) == b); /* big enough already: the same */
    CHECK(lilac_cuda_scratch_entries() == n0 + 2);
    lilac_cuda_stream_free(s);
    CHECK(lilac_cuda_scratch_entries() == n0);
    int got = 0;
    for (int i = 0; i < 40; i++) {
        lilac_cuda_stream *t = NULL;
        if (lilac_cuda_stream_new(&t, msg, sizeof msg))
            break;
        got += lilac_cuda_scratch(t, LILAC_CUDA_SCR_ATTN, (size_t)1 << 20) != NULL;
        lilac_cuda_stream_free(t);
    }
    CHECKF(got == 40, "scratch for %d of 40 streams in turn", got);
    CHECK(lilac_cuda_scratch_entries() == n0);
}

/* k_mv_pipe (lilac_cuda_mv_pipe_set): one token through matrices of more row tiles than the grid has blocks
 * (40,001 rows: the LM head's kind; the last tile part full), streamed through shared memory two tiles ahead,
 * gives the plain kernel's bits (the same dots), for y = and y +=; and it ran. */
static void test_pipe(void)
{
    static const int PT[] = {LILAC_Q4_K, LILAC_Q6_K, LILAC_Q5_K, LILAC_Q8_0};
    const int64_t rows = 40001, cols = 2048;
    char msg[512];
    int n_same = 0, n_cases = 0;
    for (size_t ti = 0; ti < sizeof PT / sizeof PT[0]; ti++) {
        const int type = PT[ti];
        const size_t rb = lilac_dtype_row_bytes(type, cols), bytes = (size_t)rows * rb;
        uint8_t *host = malloc(bytes);
        float *x = malloc(sizeof(float) * (size_t)cols), *base = malloc(sizeof(float) * (size_t)rows);
        float *y0 = malloc(sizeof(float) * (size_t)rows), *y1 = malloc(sizeof(float) * (size_t)rows);
        void *dw = NULL;
        if (!host || !x || !base || !y0 || !y1 || lilac_cuda_malloc(&dw, bytes, msg, sizeof msg)) {
            CHECKF(0, "pipe %s: buffers", tname(type));
            free(host), free(x), free(base), free(y0), free(y1);
            return;
        }
        fill_matrix(type, rows, cols, rb, 0, host);
        for (int64_t c = 0; c < cols; c++)
            x[c] = ldexpf(rnd_sym(), (int)(rnd() % 9) - 4);
        for (int64_t r = 0; r < rows; r++)
            base[r] = rnd_sym();
        float *dx = dev_floats(x, (size_t)cols), *da = dev_floats(NULL, (size_t)rows), *db = dev_floats(NULL, (size_t)rows);
        if (dx && da && db && lilac_cuda_upload(dw, host, bytes, msg, sizeof msg) == 0) {
            const lilac_cuda_mat m = {.data = dw, .type = type, .rows = rows, .cols = cols, .row_bytes = rb};
            for (int acc = 0; acc < 2; acc++) {
                lilac_cuda_upload(da, base, sizeof(float) * (size_t)rows, msg, sizeof msg);
                lilac_cuda_upload(db, base, sizeof(float) * (size_t)rows, msg, sizeof msg);
                const int prev = lilac_cuda_mv_pipe_set(0);
                lilac_cuda_matvec_fused(&m, 0, NULL, 1, dx, NULL, 0, da, acc, NULL);
                lilac_cuda_mv_pipe_set(prev);
                if (check_msg() ||
                    lilac_cuda_download(y0, da, sizeof(float) * (size_t)rows, NULL, msg, sizeof msg)) {
                    CHECKF(0, "pipe %s: the plain kernel failed", tname(type));
                    continue;
                }
                /* k_mv_pipe (ring 0), then each k_mv_ring configuration, over the same base */
                for (int ring = 0; ring <= lilac_cuda_mv_ring_count(); ring++) {
                    lilac_cuda_upload(db, base, sizeof(float) * (size_t)rows, msg, sizeof msg);
                    const int prev_on = lilac_cuda_mv_pipe_set(1), prev_ring = lilac_cuda_mv_ring_set(ring);
                    const long n0 = lilac_cuda_mv_pipe_launches();
                    lilac_cuda_matvec_fused(&m, 0, NULL, 1, dx, NULL, 0, db, acc, NULL);
                    const long n1 = lilac_cuda_mv_pipe_launches();
                    lilac_cuda_mv_ring_set(prev_ring);
                    lilac_cuda_mv_pipe_set(prev_on);
                    const char *err = check_msg();
                    CHECKF(!err, "pipe %s ring %d: %s", tname(type), ring, err ? err : "");
                    if (err || lilac_cuda_download(y1, db, sizeof(float) * (size_t)rows, NULL, msg, sizeof msg))
                        continue;
                    int64_t bad = -1;
                    for (int64_t r = 0; r < rows && bad < 0; r++)
                        if (memcmp(&y0[r], &y1[r], sizeof(float)) != 0)
                            bad = r;
                    CHECKF(bad < 0, "pipe %s ring %d (acc %d): row %lld %.9g vs the plain kernel's %.9g", tname(type),
                           ring, acc, (long long)bad, bad < 0 ? 0.0 : (double)y1[bad], bad < 0 ? 0.0 : (double)y0[bad]);
                    CHECKF(!lilac_cuda_mv_pipe_usable() || n1 > n0, "pipe %s ring %d: k_mv_pipe did not run",
                           tname(type), ring);
                    n_same += bad < 0 && n1 > n0;
                    n_cases++;
                }
            }
        }
        lilac_cuda_free(dx), lilac_cuda_free(da), lilac_cuda_free(db), lilac_cuda_free(dw);
        free(host), free(x), free(base), free(y0), free(y1);
    }
    printf("one-token products streamed through shared memory (k_mv_pipe, k_mv_ring's %d): %d of %d cases bit-equal "
           "to k_mv\n", lilac_cuda_mv_ring_count(), n_same, n_cases);
}

int main(void)
{
    char msg[512];
    ct_require_cuda(msg, sizeof msg);
    char name[256];
    size_t total = 0, avail = 0;
    int maj = 0, min = 0;
    lilac_cuda_device_info(name, sizeof name, &total, &avail, &maj, &min);
    printf("%s\ndevice: %s, cc %d.%d, %zu MiB of %zu MiB free\n", msg, name, maj, min, avail >> 20, total >> 20);
    /* dependent launches only where the code that runs was compiled for sm_90 or later (griddep_wait waits) */
    const int arch = lilac_cuda_code_arch(), pdl_env = !getenv("LILAC_CUDA_PDL") || atoi(getenv("LILAC_CUDA_PDL"));
    printf("code compiled for %d; dependent launches %s\n", arch, lilac_cuda_pdl() ? "on" : "off");
    CHECKF(arch >= 50 && arch <= 10 * maj + min, "code architecture %d on a cc %d.%d device", arch, maj, min);
    CHECKF(lilac_cuda_pdl() == (pdl_env && maj >= 9 && arch >= 90), "dependent launches %d: code %d, cc %d.%d",
           lilac_cuda_pdl(), arch, maj, min);

    const int bench_only = getenv("LILAC_CUDA_BENCH_ONLY") != NULL;
    /* The float GEMM splits K into parts in the tensor-core scratch (unless LILAC_CUDA_GEMM_SPLIT=0), which it
     * borrows and does not grow: give the default stream's 64 MiB of it first, and require that the split ran */
    const int split = !getenv("LILAC_CUDA_GEMM_SPLIT") || atoi(getenv("LILAC_CUDA_GEMM_SPLIT"));
    if (split)
        CHECKF(lilac_cuda_mma_reserve(NULL, (size_t)64 << 20) == 0, "could not reserve the tensor-core scratch");
    static const char *const PARTS[] = {"matvec", "down_sum", "norm", "refusals", "like", "pipe"};
    int parts = 0;
    for (size_t i = 0; i < sizeof PARTS / sizeof PARTS[0]; i++)
        parts += ct_part(PARTS[i]);
    CHECKF(parts > 0,
           "LILAC_CUDA_TEST_PARTS=%s names none of this test's parts (matvec, down_sum, norm, refusals, like, pipe)",
           getenv("LILAC_CUDA_TEST_PARTS"));
    if (!bench_only && ct_part("refusals"))
        test_refusals();
    if (!bench_only && ct_part("norm"))
        test_gated_norm();
    for (int ti = 0; ti < N_TYPES && !bench_only; ti++) {
        if (!ct_type(TYPES[ti]))
            continue;
        test_type(ti);
        printf("%-5s matvec: %3d cases, max error %.3g of sum|w x|; experts: max %.3g; get_row: %s\n",
               tname(TYPES[ti]), cases[ti], worst_mv[ti], worst_ex[ti], gr_bad[ti] ? "MISMATCH" : "bit-exact");
        fflush(stdout);
    }
    if (!bench_only && ct_part("refusals"))
        test_scratch_release();
    if (!bench_only && ct_part("pipe"))
        test_pipe();
    if (!bench_only && ct_part("like")) {
        printf("products as the one-token step's (matvec_like): %d cases bit for bit\n", like_cases);
        CHECKF(like_cases > 0, "no case of lilac_cuda_matvec_like matched");
    }
    bool block_types = false; /* (the down+sum's cases are the block types') */
    for (int ti = 0; ti < N_TYPES; ti++)
        block_types |= !float_type(TYPES[ti]) && ct_type(TYPES[ti]);
    if (!bench_only && ct_part("down_sum") && block_types) {
        printf("down product with the experts' sum and norm: %d cases, %d differ from the two kernels\n", ds_cases,
               ds_bad);
        CHECKF(ds_cases > 0, "no case of the down product with the experts' sum ran");
    }
#ifdef LILAC_CUDA
    /* (the float types' cases make these launches: checked where all of them ran) */
    const bool floats = ct_type(LILAC_F32) && ct_type(LILAC_F16) && ct_type(LILAC_BF16);
    if (split && !bench_only && ct_part("matvec") && floats) {
        const long n = lilac_cuda_gemm_split_launches();
        printf("float GEMM with K split: %ld launches\n", n);
        CHECKF(n > 0, "the GEMM's K split is on, yet no GEMM split K");
    }
    /* F32's GEMM cases on the tensor cores unless LILAC_CUDA_GEMM_TC=0 (or LILAC_CUDA_GEMM=0) */
    if (!bench_only && ct_part("matvec") && floats) {
        const int tc = lilac_env_switch("LILAC_CUDA_GEMM_TC", true) && lilac_env_switch("LILAC_CUDA_GEMM", true);
        const long n = lilac_cuda_gemm_tc_launches();
        printf("F32 GEMM on the tensor cores: %ld launches\n", n);
        CHECKF(tc ? n > 0 : n == 0, "F32 GEMM on the tensor cores %s, yet %ld launches", tc ? "on" : "off", n);
    }
#endif
    if (!getenv("LILAC_CUDA_NO_BENCH"))
        bench();
    TEST_END();
}
