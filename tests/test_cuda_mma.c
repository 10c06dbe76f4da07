/* test_cuda_mma: the tensor-core products (kernels/cuda/cuda_mma.cu)
 * against a float64 dot of the rows lilac_row_to_f32 decodes, within
 * TOL * sum |x| (|w| + |offset part of w|) (row_offsets_to_f32), and
 * against the CUDA-core kernels (the same bound twice over): dense products of several shapes and token counts, layouts
 * (2-byte-misaligned data, padded rows), NaN / Inf / zero activations, and
 * the grouped product over experts with uneven pair counts (0, 1, more than
 * two tiles), rows_of_x NULL and a map (x converted a row, n_x given, and
 * a pair: the same bits), at each tile width. Also that the
 * dispatch of lilac_cuda_matvec / lilac_cuda_matvec_grouped takes the
 * tensor-core path (the same bits) and that LILAC_CUDA_MMA off does not,
 * and that lilac_cuda_matvec_multi's shared conversion of x gives each
 * product's own bits.
 *
 * Without a usable CUDA device it skips (exit 77), saying why, unless
 * LILAC_REQUIRE_CUDA=1 is set: then it fails. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_sizes.h"
#include "cudatest.h"

#define TOL 1e-5

static const int TYPES[] = {LILAC_Q4_K, LILAC_Q5_K, LILAC_Q6_K, LILAC_Q8_0, LILAC_Q4_0};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

static void *dev_copy(const void *host, size_t bytes)
{
    char msg[512];
    void *d = NULL;
    if (lilac_cuda_malloc(&d, bytes ? bytes : 1, msg, sizeof msg) ||
        (host && lilac_cuda_upload(d, host, bytes, msg, sizeof msg))) {
        CHECKF(0, "device buffer of %zu bytes: %s", bytes, msg);
        lilac_cuda_free(d);
        return NULL;
    }
    return d;
}

static int download(float *dst, const float *src, size_t n, const char *what)
{
    char msg[512];
    const char *err = check_msg();
    if (err) {
        CHECKF(0, "%s: %s", what, err);
        return -1;
    }
    if (lilac_cuda_download(dst, src, n * sizeof(float), NULL, msg, sizeof msg)) {
        CHECKF(0, "%s: download: %s", what, msg);
        return -1;
    }
    return 0;
}

/* The offset part of a row's weights: the row decoded with every quant
 * zeroed, i.e. -dmin m (K-quants with minimums), -32 d sc (Q6_K), -8 d
 * (Q4_0), 0 (Q8_0). A float32 kernel sums the quant part and the offset
 * part apart (w = a q - b), so its rounding scales with sum |x| (|w| + |b|),
 * not sum |w x|: where they cancel in w, that is the honest magnitude. */
static void row_offsets_to_f32(int type, const uint8_t *row, float *out, int64_t cols)
{
    int blck = 256, bsz = 0, q0 = 0, q1 = 0; /* bytes q0 .. q1 - 1 of each block are quants */
    switch (type) {
    case LILAC_Q4_K: bsz = 144, q0 = 16, q1 = 144; break;
    case LILAC_Q5_K: bsz = 176, q0 = 16, q1 = 176; break;
    case LILAC_Q6_K: bsz = 210, q0 = 0, q1 = 192; break;
    case LILAC_Q4_0: blck = 32, bsz = 18, q0 = 2, q1 = 18; break;
    case LILAC_Q8_0: blck = 32, bsz = 34, q0 = 2, q1 = 34; break;
    default: memset(out, 0, sizeof(float) * (size_t)cols); return;
    }
    const size_t nb = (size_t)(cols / blck);
    uint8_t *tmp = malloc(nb * (size_t)bsz);
    memcpy(tmp, row, nb * (size_t)bsz);
    for (size_t b = 0; b < nb; b++)
        memset(tmp + b * (size_t)bsz + q0, 0, (size_t)(q1 - q0));
    lilac_row_to_f32(type, tmp, out, cols);
    free(tmp);
}

static double worst[N_TYPES];
static int n_cases[N_TYPES];

/* y row i against the float64 dot of deq rows with x row xrow[i] (i without xrow): the largest error / sum |x|
 * (|w| + |off|).
 * nan_rows[i]: 1: row i must be all NaN; 2: x row out of the CUDA-core kernels' range (other not compared).
 * other: a second result, compared within 2 TOL (NULL: none). */
static double compare(const char *what, const float *deq, const float *off, int64_t rows, int64_t cols, const float *x,
                      const int *xrow, const float *y, const float *other, int n, const unsigned char *nan_rows)
{
    double w_rel = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const float *xt = x + (size_t)(xrow ? xrow[i] : i) * (size_t)cols;
        for (int64_t r = 0; r < rows; r++) {
            const float got = y[(size_t)i * (size_t)rows + (size_t)r];
            if (nan_rows && nan_rows[i] == 1) {
                if (!isnan(got) && bad++ < 5)
                    CHECKF(0, "%s: y[%d][%lld] = %.9g, expected NaN (x row has a NaN or Inf)", what, i, (long long)r,
                           got);
                continue;
            }
            const float *w = deq + r * cols, *wo = off + r * cols;
            double dot = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                dot += (double)w[c] * xt[c];
                mag += fabs((double)xt[c]) * (fabs((double)w[c]) + fabs((double)wo[c]));
            }
            const double err = fabs(got - dot), rel = mag > 0 ? err / mag : err;
            if (!(rel <= w_rel))
                w_rel = isnan(rel) ? INFINITY : rel;
            if (!(err <= TOL * mag + 1e-30)) {
                if (bad++ < 5)
                    CHECKF(0, "%s: y[%d][%lld] = %.9g, expected %.9g (|err| %.3g > %.0e * sum|w x| = %.3g)", what, i,
                           (long long)r, got, dot, err, TOL, TOL * mag);
            }
            if (other && !(nan_rows && nan_rows[i] == 2)) {
                const double o = other[(size_t)i * (size_t)rows + (size_t)r];
                if (!(fabs(o - got) <= 2 * TOL * mag + 1e-30) && bad++ < 5)
                    CHECKF(0, "%s: y[%d][%lld]: tensor cores %.9g, CUDA cores %.9g", what, i, (long long)r, got, o);
            }
        }
    }
    if (bad > 5)
        CHECKF(0, "%s: %d results wrong in all", what, bad);
    tu_checks++;
    return w_rel;
}

/* x rows of mixed magnitude, 2^-4 .. 2^4, and some special rows. */
static void fill_x(float *x, int n, int64_t cols, unsigned char *nan_rows, int specials)
{
    for (size_t i = 0; i < (size_t)n * (size_t)cols; i++)
        x[i] = ldexpf(rnd_sym(), (int)(rnd() % 9) - 4);
    memset(nan_rows, 0, (size_t)n);
    if (!specials)
        return;
    if (n > 0) /* a zero row */
        memset(x, 0, sizeof(float) * (size_t)cols);
    if (n > 3)
        x[3 * cols + 100 % cols] = NAN, nan_rows[3] = 1;
    if (n > 5)
        x[5 * cols + 7] = INFINITY, nan_rows[5] = 1;
    if (n > 9) /* tiny and huge rows: the scale's range (beyond what the CUDA-core kernels take) */
        for (int64_t c = 0; c < cols; c++)
            x[9 * cols + c] *= 0x1p-100f, nan_rows[9] = 2;
    if (n > 10)
        for (int64_t c = 0; c < cols; c++)
            x[10 * cols + c] *= 0x1p90f, nan_rows[10] = 2;
    if (n > 11) /* one large value in a row of small ones; the CUDA-core kernels round such a row more than
                 * 2 TOL (their own test bounds them), so only the float64 reference judges it */
        for (int64_t c = 0; c < cols; c++)
            x[11 * cols + c] = c == 5 ? 1e4f : x[11 * cols + c] * 1e-3f, nan_rows[11] = 2;
}

/* A rows x cols matrix of `type` (rows row_bytes apart, fill_matrix's mode) in *host, its rows decoded in *deq and
 * their offset parts in *off (the caller frees all three). */
static void ref_matrix(int type, int64_t rows, int64_t cols, size_t row_bytes, int mode, uint8_t **host, float **deq,
                       float **off)
{
    *host = malloc((size_t)rows * row_bytes);
    *deq = malloc(sizeof(float) * (size_t)(rows * cols));
    *off = malloc(sizeof(float) * (size_t)(rows * cols));
    fill_matrix(type, rows, cols, row_bytes, mode, *host);
    for (int64_t r = 0; r < rows; r++)
        lilac_row_to_f32(type, *host + (size_t)r * row_bytes, *deq + r * cols, cols),
            row_offsets_to_f32(type, *host + (size_t)r * row_bytes, *off + r * cols, cols);
}

static void test_dense(int ti, int64_t rows, int64_t cols, size_t row_bytes, size_t offset, int mode,
                       const int *ntoks, int n_ntok, const char *layout)
{
    const int type = TYPES[ti];
    char what[256], msg[512];
    const size_t bytes = (size_t)rows * row_bytes;
    uint8_t *host;
    float *deq, *off;
    ref_matrix(type, rows, cols, row_bytes, mode, &host, &deq, &off);
    void *dw = NULL;
    if (lilac_cuda_malloc(&dw, bytes + offset + 16, msg, sizeof msg) ||
        lilac_cuda_upload((uint8_t *)dw + offset, host, bytes, msg, sizeof msg)) {
        CHECKF(0, "%s: %s", tname(type), msg);
        goto out;
    }
    const lilac_cuda_mat m = {.data = (uint8_t *)dw + offset, .type = type, .rows = rows, .cols = cols,
                              .row_bytes = row_bytes};
    for (int k = 0; k < n_ntok; k++) {
        const int n = ntoks[k];
        snprintf(what, sizeof what, "%s mma %lld x %lld, n_tok %d (%s)", tname(type), (long long)rows,
                 (long long)cols, n, layout);
        const size_t nx = (size_t)n * (size_t)cols, ny = (size_t)n * (size_t)rows;
        float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny), *yo = malloc(sizeof(float) * ny),
              *yd = malloc(sizeof(float) * ny);
        unsigned char *nanr = malloc((size_t)n);
        fill_x(x, n, cols, nanr, 1);
        float *dx = dev_copy(x, sizeof(float) * nx), *dy = dev_copy(NULL, sizeof(float) * ny);
        if (dx && dy) {
            lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
            const int rc = lilac_cuda_matvec_mma(&m, dx, dy, n, NULL);
            CHECKF(rc == 0, "%s: the tensor-core path refused the call", what);
            if (rc == 0 && !download(y, dy, ny, what)) {
                /* the CUDA cores (mma off), and the dispatch (mma on: the same bits from 16 tokens on) */
                const int was = lilac_cuda_mma_set_enabled(0);
                lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
                lilac_cuda_matvec(&m, dx, dy, n, NULL);
                const int ok_o = !download(yo, dy, ny, what);
                lilac_cuda_mma_set_enabled(1);
                lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
                lilac_cuda_matvec(&m, dx, dy, n, NULL);
                if (!download(yd, dy, ny, what) && n >= lilac_cuda_mma_min_tokens())
                    CHECKF(memcmp(y, yd, sizeof(float) * ny) == 0, "%s: lilac_cuda_matvec did not take the tensor "
                                                                   "cores (results differ)", what);
                lilac_cuda_mma_set_enabled(was);
                const double w = compare(what, deq, off, rows, cols, x, NULL, y, ok_o ? yo : NULL, n, nanr);
                if (!(w <= worst[ti]))
                    worst[ti] = w;
                n_cases[ti]++;
                for (int i = 0; i < n && i < 1; i++) /* the zero row: exactly zero */
                    for (int64_t r = 0; r < rows; r++)
                        if (y[r] != 0.f) {
                            CHECKF(0, "%s: zero x row gives y[0][%lld] = %g", what, (long long)r, y[r]);
                            break;
                        }
            }
        }
        lilac_cuda_free(dx);
        lilac_cuda_free(dy);
        free(x);
        free(y);
        free(yo);
        free(yd);
        free(nanr);
    }
out:
    lilac_cuda_free(dw);
    free(host);
    free(deq);
    free(off);
}

/* n_expert experts of rows x cols; counts[e] pairs each; map: pair -> x row (n_x rows) or NULL. */
static void test_grouped(int ti, int n_expert, int64_t rows, int64_t cols, const int *counts, int use_map,
                         const char *label)
{
    const int type = TYPES[ti];
    char what[256];
    const size_t rb = lilac_dtype_row_bytes(type, cols), stride = ((size_t)rows * rb + 15) / 16 * 16 + 16;
    uint8_t *host = malloc(stride * (size_t)n_expert);
    float *deq = malloc(sizeof(float) * (size_t)n_expert * (size_t)(rows * cols)),
          *off = malloc(sizeof(float) * (size_t)n_expert * (size_t)(rows * cols));
    for (int e = 0; e < n_expert; e++) {
        fill_matrix(type, rows, cols, rb, e & 1, host + (size_t)e * stride);
        for (int64_t r = 0; r < rows; r++)
            lilac_row_to_f32(type, host + (size_t)e * stride + r * rb, deq + ((size_t)e * rows + r) * cols, cols),
                row_offsets_to_f32(type, host + (size_t)e * stride + r * rb, off + ((size_t)e * rows + r) * cols,
                                   cols);
    }
    int32_t *offsets = malloc(sizeof(int32_t) * (size_t)(n_expert + 1));
    int n_pairs = 0, max_pairs = 0;
    for (int e = 0; e < n_expert; e++) {
        offsets[e] = n_pairs;
        n_pairs += counts[e];
        if (counts[e] > max_pairs)
            max_pairs = counts[e];
    }
    offsets[n_expert] = n_pairs;
    const int n_x = use_map ? 300 : n_pairs;
    int32_t *map = malloc(sizeof(int32_t) * (size_t)(n_pairs + 1));
    int *xrow = malloc(sizeof(int) * (size_t)(n_pairs + 1));
    for (int i = 0; i < n_pairs; i++)
        map[i] = xrow[i] = use_map ? (int)(rnd() % (uint64_t)n_x) : i;
    float *x = malloc(sizeof(float) * (size_t)n_x * (size_t)cols);
    unsigned char *nanx = malloc((size_t)n_x), *nanr = malloc((size_t)n_pairs + 1);
    fill_x(x, n_x, cols, nanx, 1);
    for (int i = 0; i < n_pairs; i++)
        nanr[i] = nanx[xrow[i]];
    const size_t ny = (size_t)n_pairs * (size_t)rows;
    float *y = malloc(sizeof(float) * ny), *yo = malloc(sizeof(float) * ny), *yd = malloc(sizeof(float) * ny);
    void *dw = dev_copy(host, stride * (size_t)n_expert);
    int32_t *doff = dev_copy(offsets, sizeof(int32_t) * (size_t)(n_expert + 1));
    int32_t *dmap = use_map ? dev_copy(map, sizeof(int32_t) * (size_t)n_pairs) : NULL;
    float *dx = dev_copy(x, sizeof(float) * (size_t)n_x * (size_t)cols), *dy = dev_copy(NULL, sizeof(float) * ny);
    snprintf(what, sizeof what, "%s grouped %d experts of %lld x %lld, %d pairs (max %d), %s (%s)", tname(type),
             n_expert, (long long)rows, (long long)cols, n_pairs, max_pairs, use_map ? "rows_of_x" : "no map", label);
    if (dw && doff && dx && dy && (!use_map || dmap)) {
        const lilac_cuda_mat m = {.data = dw, .type = type, .rows = rows, .cols = cols, .row_bytes = rb};
        lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
        /* with a map: x converted a row (n_x rows) */
        const int nx_arg = use_map ? n_x : 0;
        const int rc = lilac_cuda_matvec_grouped_mma(&m, stride, n_expert, doff, dmap, nx_arg, max_pairs, n_pairs, dx,
                                                     cols, dy, NULL);
        CHECKF(rc == 0, "%s: the tensor-core path refused the call", what);
        if (rc == 0 && !download(y, dy, ny, what)) {
            if (use_map) { /* x converted a pair (n_x unknown): the same digits, the same bits */
                lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
                const int rc2 = lilac_cuda_matvec_grouped_mma(&m, stride, n_expert, doff, dmap, 0, max_pairs, n_pairs,
                                                              dx, cols, dy, NULL);
                CHECKF(rc2 == 0, "%s: the tensor-core path refused the call without n_x", what);
                if (rc2 == 0 && !download(yd, dy, ny, what))
                    CHECKF(memcmp(y, yd, sizeof(float) * ny) == 0,
                           "%s: x converted a pair and a row give different results", what);
            }
            const int was = lilac_cuda_mma_set_enabled(0);
            lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
            lilac_cuda_matvec_grouped(&m, stride, n_expert, doff, dmap, nx_arg, max_pairs, n_pairs, dx, cols, dy, NULL);
            const int ok_o = !download(yo, dy, ny, what);
            lilac_cuda_mma_set_enabled(1);
            lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
            lilac_cuda_matvec_grouped(&m, stride, n_expert, doff, dmap, nx_arg, max_pairs, n_pairs, dx, cols, dy, NULL);
            if (!download(yd, dy, ny, what) && max_pairs >= lilac_cuda_mma_min_pairs())
                CHECKF(memcmp(y, yd, sizeof(float) * ny) == 0,
                       "%s: lilac_cuda_matvec_grouped did not take the tensor cores (results differ)", what);
            lilac_cuda_mma_set_enabled(was);
            /* expert by expert against the reference */
            double w = 0;
            for (int e = 0; e < n_expert; e++) {
                if (!counts[e])
                    continue;
                const int q0 = offsets[e];
                char w2[320];
                snprintf(w2, sizeof w2, "%s, expert %d (%d pairs)", what, e, counts[e]);
                const double we = compare(w2, deq + (size_t)e * rows * cols, off + (size_t)e * rows * cols, rows, cols, x, xrow + q0,
                                          y + (size_t)q0 * rows, ok_o ? yo + (size_t)q0 * rows : NULL, counts[e],
                                          nanr + q0);
                if (!(we <= w))
                    w = we;
            }
            if (!(w <= worst[ti]))
                worst[ti] = w;
            n_cases[ti]++;
        }
    } else {
        CHECKF(0, "%s: device buffers", what);
    }
    lilac_cuda_free(dw);
    lilac_cuda_free(doff);
    lilac_cuda_free(dmap);
    lilac_cuda_free(dx);
    lilac_cuda_free(dy);
    free(host);
    free(deq);
    free(off);
    free(offsets);
    free(map);
    free(xrow);
    free(x);
    free(nanx);
    free(nanr);
    free(y);
    free(yo);
    free(yd);
}

static void test_type(int ti)
{
    const int type = TYPES[ti];
    const int all[] = {1, 16, 17, 64, 100}, big[] = {512}, few[] = {16, 33};
    const bool quick = ct_quick(); /* a case of each path */
    test_dense(ti, 256, 256, lilac_dtype_row_bytes(type, 256), 0, 0, all, 5, "packed rows");
    if (quick) {
        test_dense(ti, 200, 1024, lilac_dtype_row_bytes(type, 1024), 2, 0, few, 2, "data 2 bytes past 16-alignment");
        int c[64];
        for (int e = 0; e < 64; e++)
            c[e] = e % 7 == 0 ? 0 : e % 31 == 1 ? 70 : (int)(rnd() % 33);
        test_grouped(ti, 64, 64, 512, c, 1, "quick, mean ~19 pairs");
        return;
    }
    test_dense(ti, 1024, 2048, lilac_dtype_row_bytes(type, 2048), 0, 0, all + 1, 3, "packed rows");
    test_dense(ti, 2048 + 16, 512, lilac_dtype_row_bytes(type, 512), 0, 1, big, 1, "quantized values");
    test_dense(ti, 333, 4096, lilac_dtype_row_bytes(type, 4096), 0, 0, few, 2, "packed rows");
    test_dense(ti, 200, 1024, lilac_dtype_row_bytes(type, 1024), 2, 0, few, 2, "data 2 bytes past 16-alignment");
    test_dense(ti, 130, 768, (lilac_dtype_row_bytes(type, 768) + 15) / 16 * 16 + 18, 0, 0, few, 2,
               "rows padded to 16 bytes + 18");

    /* 256 experts: empty ones, single pairs, about 16, and some over two tiles of any width */
    int counts[256];
    for (int e = 0; e < 256; e++)
        counts[e] = e % 7 == 0 ? 0 : e % 31 == 1 ? 130 + e % 5 : e % 13 == 2 ? 1 : (int)(rnd() % 33);
    test_grouped(ti, 256, 64, 512, counts, 1, "mean ~19 pairs");
    test_grouped(ti, 256, 64, 512, counts, 0, "mean ~19 pairs");
    /* fewer experts with more pairs: the wider tiles */
    int c2[16];
    for (int e = 0; e < 16; e++)
        c2[e] = e == 3 ? 0 : 20 + (int)(rnd() % 50);
    test_grouped(ti, 16, 160, 1024, c2, 1, "mean ~40 pairs");
    for (int e = 0; e < 16; e++)
        c2[e] = e == 5 ? 0 : 60 + (int)(rnd() % 90);
    test_grouped(ti, 16, 130, 256, c2, 0, "mean ~100 pairs");
    test_grouped(ti, 16, 130, 256, c2, 1, "mean ~100 pairs"); /* 64-token tiles over x rows */
}

/* lilac_cuda_matvec_multi: several matrices over one x, the tensor-core products converting x once, give the
 * bits of each product alone; and after x changes in place, a call whose first matrix does not take the
 * tensor cores (F32) converts the new x rather than reusing the digits the last call left for the same
 * pointer. */
static void test_multi(void)
{
    enum { NM = 3, n = 100 };
    const int types[NM] = {LILAC_Q4_K, LILAC_F32, LILAC_Q8_0};
    const int64_t rows[NM] = {300, 64, 96}, cols = 2048; /* 64 rows or more: the tensor cores take them */
    lilac_cuda_mat m[NM];
    void *dw[NM] = {0};
    for (int i = 0; i < NM; i++) {
        const size_t rb = lilac_dtype_row_bytes(types[i], cols), bytes = (size_t)rows[i] * rb;
        uint8_t *host = malloc(bytes);
        fill_matrix(types[i], rows[i], cols, rb, 0, host);
        dw[i] = dev_copy(host, bytes);
        free(host);
        m[i] = (lilac_cuda_mat){.data = dw[i], .type = types[i], .rows = rows[i], .cols = cols, .row_bytes = rb};
    }
    const size_t nx = (size_t)n * cols;
    float *x = malloc(sizeof(float) * nx);
    unsigned char nanr[n];
    float *dx = dev_copy(NULL, sizeof(float) * nx), *dy[NM] = {0}, *host_y[NM] = {0}, *host_1[NM] = {0};
    for (int i = 0; i < NM; i++) {
        dy[i] = dev_copy(NULL, sizeof(float) * (size_t)n * rows[i]);
        host_y[i] = malloc(sizeof(float) * (size_t)n * rows[i]);
        host_1[i] = malloc(sizeof(float) * (size_t)n * rows[i]);
    }
    /* orders: the first a tensor-core one, then (x changed) the F32 one first, then (x changed) reuse again */
    static const int order[3][NM] = {{0, 1, 2}, {1, 2, 0}, {2, 0, 1}};
    for (int round = 0; round < 3 && dx && dw[0] && dw[1] && dw[2]; round++) {
        fill_x(x, n, cols, nanr, 0);
        for (size_t i = 0; i < nx; i++)
            x[i] *= (float)(round + 1);
        char msg[512];
        if (lilac_cuda_upload(dx, x, sizeof(float) * nx, msg, sizeof msg)) {
            CHECKF(0, "multi: upload: %s", msg);
            break;
        }
        const lilac_cuda_mat *W[NM];
        float *Y[NM];
        for (int j = 0; j < NM; j++)
            W[j] = &m[order[round][j]], Y[j] = dy[order[round][j]];
        lilac_cuda_matvec_multi(W, Y, NM, dx, n, NULL);
        for (int i = 0; i < NM; i++)
            if (download(host_y[i], dy[i], (size_t)n * rows[i], "multi"))
                goto out;
        for (int i = 0; i < NM; i++) {
            lilac_cuda_matvec(&m[i], dx, dy[i], n, NULL);
            if (download(host_1[i], dy[i], (size_t)n * rows[i], "multi, alone"))
                goto out;
            CHECKF(memcmp(host_y[i], host_1[i], sizeof(float) * (size_t)n * rows[i]) == 0,
                   "multi, round %d: %s matrix %d differs from its product alone", round, tname(types[i]), i);
        }
    }
out:
    for (int i = 0; i < NM; i++) {
        lilac_cuda_free(dw[i]);
        lilac_cuda_free(dy[i]);
        free(host_y[i]);
        free(host_1[i]);
    }
    lilac_cuda_free(dx);
    free(x);
}

/* The pre-pass with four lanes a run (k_mma_prep_q, LILAC_CUDA_PREP_QUARTER) gives k_mma_prep's bytes: digits,
 * sums and exponents, over row lengths that fill a block, leave it short (K 256: 32 threads) and pass it (K
 * 16384: each thread two parts), with and without the SwiGLU's up rows, rows padded (x_stride > K) and
 * misaligned (x one float off: the scalar loads), zero, NaN, Inf, tiny and huge rows (fill_x's specials). */
static void test_prep_quarter(void)
{
    static const int SHAPES[][2] = {{1, 256}, {7, 512}, {64, 2048}, {33, 4096}, {12, 16384}, {130, 768}};
    int n_same = 0;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++)
        for (int glu = 0; glu < 2; glu++)
            for (int mis = 0; mis < 2; mis++) {
                const int n = SHAPES[si][0], K = SHAPES[si][1], stride = K + (mis ? 8 : 0);
                const size_t nx = (size_t)n * stride + 1, bytes = lilac_cuda_xq_bytes((size_t)n, (size_t)K);
                float *x = malloc(sizeof(float) * nx), *u = malloc(sizeof(float) * nx);
                unsigned char *nan_rows = malloc(nx / (size_t)K + 1); /* fill_x's rows of K */
                uint8_t *a = malloc(bytes), *b = malloc(bytes);
                if (!x || !u || !nan_rows || !a || !b) {
                    CHECK(0);
                    free(x), free(u), free(nan_rows), free(a), free(b);
                    return;
                }
                fill_x(x, (int)(nx / (size_t)K), K, nan_rows, 1);
                fill_x(u, (int)(nx / (size_t)K), K, nan_rows, 0);
                float *dx = dev_copy(x, sizeof(float) * nx), *du = dev_copy(u, sizeof(float) * nx);
                void *da = dev_copy(NULL, bytes), *db = dev_copy(NULL, bytes);
                char msg[512];
                if (dx && du && da && db) {
                    memset(a, 0x5a, bytes), memset(b, 0xa5, bytes);
                    CHECK(lilac_cuda_upload(da, a, bytes, msg, sizeof msg) == 0); /* the pad bytes agree too */
                    CHECK(lilac_cuda_upload(db, a, bytes, msg, sizeof msg) == 0);
                    const float *xs = dx + mis, *us = glu ? du + mis : NULL;
                    CHECK(lilac_cuda_mma_prep_into(xs, us, stride, n, K, 0, da, NULL) == 0);
                    CHECK(lilac_cuda_mma_prep_into(xs, us, stride, n, K, 1, db, NULL) == 0);
                    const char *err = check_msg();
                    CHECKF(!err, "pre-pass %d x %d: %s", n, K, err ? err : "");
                    if (!err && lilac_cuda_download(a, da, bytes, NULL, msg, sizeof msg) == 0 &&
                        lilac_cuda_download(b, db, bytes, NULL, msg, sizeof msg) == 0) {
                        size_t at = 0;
                        while (at < bytes && a[at] == b[at])
                            at++;
                        CHECKF(at == bytes, "pre-pass %d x %d (glu %d, misaligned %d): quarter lanes differ at byte %zu "
                               "of %zu", n, K, glu, mis, at, bytes);
                        n_same += at == bytes;
                        /* and both wrote: row 0's exponent (after the digits and the sums) is no longer the fill */
                        const size_t nb = (size_t)n * (size_t)(K / 32), at_exp = nb * LILAC_CUDA_XQ_BLOCK + ((nb * 4 + 255) & ~(size_t)255);
                        int e0;
                        memcpy(&e0, a + at_exp, sizeof e0);
                        CHECKF(at_exp + sizeof e0 <= bytes && e0 != 0x5a5a5a5a, "pre-pass %d x %d: no exponent written",
                               n, K);
                    }
                }
                CHECK(lilac_cuda_mma_prep_into(dx, NULL, K - 1, n, K, 1, da, NULL) == -1); /* stride under K */
                CHECK(lilac_cuda_mma_prep_into(dx, NULL, K, n, 100, 1, da, NULL) == -1);   /* K not 256's */
                lilac_cuda_free(dx), lilac_cuda_free(du), lilac_cuda_free(da), lilac_cuda_free(db);
                free(x), free(u), free(nan_rows), free(a), free(b);
            }
    printf("pre-pass, four lanes a run: %d shapes bit-equal to a lane a run\n", n_same);
}

/* The decode product on the tensor cores (k_mvt, LILAC_CUDA_MV_TC): Q4_K rows against the float64 reference and
 * the CUDA-core product (fill_x's specials: zero, NaN, Inf, tiny and huge token rows), row counts that leave a
 * block short, K from one super-block (fewer than a block's warps) to 4096 (two a warp); every token of an
 * n-token call the bits of its one-token call (chunks of 8 included), accumulate = y + the product exactly,
 * lilac_cuda_matvec (up to 8 tokens) and lilac_cuda_matvec_like (any count, like = W) taking it with the switch
 * on, and neither with it off; misaligned rows and other types refused. Then (unless LILAC_CUDA_NO_BENCH) the
 * qkv+z, shared-expert and output shapes of the 35B-A3B file timed against k_mv in bursts of 50. */
static void test_mvt_shape(int64_t rows, int64_t cols, int mode)
{
    const int type = LILAC_Q4_K, ns[] = {1, 2, 3, 8, 11};
    const size_t rb = lilac_dtype_row_bytes(type, cols), bytes = (size_t)rows * rb;
    uint8_t *host;
    float *deq, *off;
    ref_matrix(type, rows, cols, rb, mode, &host, &deq, &off);
    void *dw = dev_copy(host, bytes);
    const lilac_cuda_mat m = {.data = dw, .type = type, .rows = rows, .cols = cols, .row_bytes = rb};
    const int nmax = 11;
    const size_t nx = (size_t)nmax * (size_t)cols, ny = (size_t)nmax * (size_t)rows;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny),
          *yo = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny), *ya = malloc(sizeof(float) * ny);
    unsigned char nanr[11];
    fill_x(x, nmax, cols, nanr, 1);
    for (size_t i = 0; i < ny; i++)
        y0[i] = rnd_sym();
    float *dx = dev_copy(x, sizeof(float) * nx), *dy = dev_copy(NULL, sizeof(float) * ny);
    char what[256];
    if (!dw || !dx || !dy)
        goto out;
    lilac_cuda_mv_tc_set(1);
    /* LILAC_CUDA_MV_TC_MIN_ROWS: a matrix of fewer rows refused, one of as many taken */
    const int min0 = lilac_cuda_mv_tc_min_rows_set((int)rows + 1);
    CHECKF(!lilac_cuda_matvec_tc_takes(&m), "mvt: %lld rows taken under a minimum of %lld", (long long)rows,
           (long long)rows + 1);
    lilac_cuda_mv_tc_min_rows_set((int)rows);
    CHECKF(lilac_cuda_matvec_tc_takes(&m), "mvt: %lld x %lld Q4_K not taken", (long long)rows, (long long)cols);
    lilac_cuda_mv_tc_min_rows_set(min0);
    /* each token alone: the reference bits */
    for (int t = 0; t < nmax; t++) {
        CHECK(lilac_cuda_matvec_tc(&m, dx + (size_t)t * cols, dy + (size_t)t * rows, 1, 0, NULL) == 0);
    }
    if (download(y1, dy, ny, "mvt one token"))
        goto out;
    lilac_cuda_mma_set_enabled(0);
    lilac_cuda_mv_tc_set(0);
    lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
    lilac_cuda_matvec(&m, dx, dy, nmax, NULL); /* the CUDA cores */
    const int ok_o = !download(yo, dy, ny, "mvt: k_mv");
    lilac_cuda_mma_set_enabled(1);
    snprintf(what, sizeof what, "mvt %lld x %lld (%s), one token a call", (long long)rows, (long long)cols,
             mode ? "quantized values" : "random bytes");
    const double w = compare(what, deq, off, rows, cols, x, NULL, y1, ok_o ? yo : NULL, nmax, nanr);
    printf("%s: max error %.3g of sum |x| (|w| + |off|)\n", what, w);
    CHECKF(lilac_cuda_matvec_tc(&m, dx, dy, 1, 0, NULL) == -1, "mvt: taken with LILAC_CUDA_MV_TC off");
    lilac_cuda_mv_tc_set(1);
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int n = ns[k];
        const size_t nyn = (size_t)n * (size_t)rows;
        lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
        CHECK(lilac_cuda_matvec_tc(&m, dx, dy, n, 0, NULL) == 0);
        if (download(y, dy, nyn, "mvt n tokens"))
            goto out;
        CHECKF(memcmp(y, y1, sizeof(float) * nyn) == 0, "mvt %lld x %lld: %d tokens a call differ from one a call",
               (long long)rows, (long long)cols, n);
        /* accumulate: y0 + the product, exactly */
        char msg[256];
        if (lilac_cuda_upload(dy, y0, sizeof(float) * nyn, msg, sizeof msg)) {
            CHECKF(0, "mvt: upload: %s", msg);
            goto out;
        }
        CHECK(lilac_cuda_matvec_tc(&m, dx, dy, n, 1, NULL) == 0);
        if (download(ya, dy, nyn, "mvt accumulate"))
            goto out;
        int bad = 0;
        for (size_t i = 0; i < nyn; i++) {
            const float want = y0[i] + y1[i];
            bad += memcmp(&ya[i], &want, sizeof want) != 0 && !(isnan(ya[i]) && isnan(want));
        }
        CHECKF(!bad, "mvt %lld x %lld, %d tokens: %d accumulated results are not y + the product", (long long)rows,
               (long long)cols, n, bad);
        /* the dispatch: lilac_cuda_matvec up to 8 tokens, lilac_cuda_matvec_like at any count */
        lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
        if (n <= 8) {
            lilac_cuda_matvec(&m, dx, dy, n, NULL);
            if (!download(y, dy, nyn, "mvt via lilac_cuda_matvec"))
                CHECKF(memcmp(y, y1, sizeof(float) * nyn) == 0,
                       "mvt: lilac_cuda_matvec at %d tokens did not take the tensor-core decode product", n);
        }
        lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
        lilac_cuda_matvec_like(&m, 0, NULL, 1, dx, 0, NULL, dy, n, 0, &m, 0, 1, NULL);
        if (!download(y, dy, nyn, "mvt via lilac_cuda_matvec_like"))
            CHECKF(memcmp(y, y1, sizeof(float) * nyn) == 0,
                   "mvt: lilac_cuda_matvec_like at %d tokens did not give the one-token bits", n);
    }
    /* 16-row blocks (one m16 tile a warp) and the automatic choice: the same bits */
    for (int rs = 0; rs <= 16; rs += 16) {
        const int was_rows = lilac_cuda_mv_tc_rows_set(rs);
        lilac_cuda_memset(dy, 0xFF, sizeof(float) * ny, NULL);
        CHECK(lilac_cuda_matvec_tc(&m, dx, dy, nmax, 0, NULL) == 0);
        if (!download(y, dy, ny, "mvt rows"))
            CHECKF(memcmp(y, y1, sizeof(float) * ny) == 0, "mvt %lld x %lld: %s-row blocks differ from 32-row ones",
                   (long long)rows, (long long)cols, rs ? "16" : "automatic");
        lilac_cuda_mv_tc_rows_set(was_rows);
    }
    lilac_cuda_mv_tc_set(0);
out:
    lilac_cuda_free(dw);
    lilac_cuda_free(dx);
    lilac_cuda_free(dy);
    free(host), free(deq), free(off), free(x), free(y), free(y1), free(yo), free(y0), free(ya);
}

static void test_mvt_bench(void);

static void test_mvt(void)
{
    const int was = lilac_cuda_mv_tc_set(0);
    test_mvt_shape(1000, 2048, 0);
    test_mvt_shape(33, 256, 0);
    test_mvt_shape(70, 4096, 1);
    if (!ct_quick())
        test_mvt_shape(320, 1536, 1);
    /* refusals: other types, rows off 16-alignment, the switch off */
    lilac_cuda_mv_tc_set(1);
    uint8_t dummy[16];
    lilac_cuda_mat q = {.data = dummy, .type = LILAC_Q6_K, .rows = 4, .cols = 256, .row_bytes = 210};
    CHECK(!lilac_cuda_matvec_tc_takes(&q));
    q = (lilac_cuda_mat){.data = dummy + 2, .type = LILAC_Q4_K, .rows = 4, .cols = 256, .row_bytes = 144};
    CHECK(!lilac_cuda_matvec_tc_takes(&q));
    q.data = dummy, q.row_bytes = 146;
    CHECK(!lilac_cuda_matvec_tc_takes(&q));
    lilac_cuda_mv_tc_set(0);
    q.row_bytes = 144;
    CHECK(!lilac_cuda_matvec_tc_takes(&q));
    lilac_cuda_mv_tc_set(was);
    if (!getenv("LILAC_CUDA_NO_BENCH"))
        test_mvt_bench();
}

/* The qkv+z, shared-expert and output shapes of the 35B-A3B file through k_mvt and k_mv, in bursts of 50. */
static void test_mvt_bench(void)
{
    static const int64_t SH[][2] = {{12288, 2048}, {1024, 2048}, {2048, 4096}, {8192, 2048}};
    const int was = lilac_cuda_mv_tc_set(1);
    for (size_t i = 0; i < sizeof SH / sizeof SH[0]; i++) {
        const size_t rb = lilac_dtype_row_bytes(LILAC_Q4_K, SH[i][1]), bytes = (size_t)SH[i][0] * rb;
        uint8_t *h = malloc(bytes);
        fill_matrix(LILAC_Q4_K, SH[i][0], SH[i][1], rb, 0, h);
        void *d = dev_copy(h, bytes);
        free(h);
        if (!d)
            continue;
        const lilac_cuda_mat b = {.data = d, .type = LILAC_Q4_K, .rows = SH[i][0], .cols = SH[i][1], .row_bytes = rb};
        const double tc = lilac_cuda_bench_matvec_burst(&b, 1, 50, 5), mv = lilac_cuda_bench_matvec_burst(&b, 0, 50, 5);
        CHECKF(tc > 0 && mv > 0, "bench mvt %lld x %lld: a burst failed", (long long)SH[i][0], (long long)SH[i][1]);
        printf("bench mvt Q4_K %lld x %lld (%.1f MiB), one token: k_mvt %.2f us (%.0f GB/s), k_mv %.2f us (%.0f GB/s)\n",
               (long long)SH[i][0], (long long)SH[i][1], bytes / 1048576.0, tc * 1e6, bytes / tc * 1e-9, mv * 1e6,
               bytes / mv * 1e-9);
        lilac_cuda_free(d);
    }
    lilac_cuda_mv_tc_set(was);
}

int main(void)
{
    char msg[512];
    ct_rng = 0x2545F4914F6CDD1Dull;
    ct_require_cuda(msg, sizeof msg);
    printf("%s\n", msg);
    if (getenv("LILAC_CUDA_BENCH_ONLY")) { /* the decode product's bench lines alone (a profiler's run) */
        test_mvt_bench();
        TEST_END();
    }
    for (int ti = 0; ti < N_TYPES; ti++) {
        CHECK(lilac_cuda_mma_supported(TYPES[ti]));
        test_type(ti);
        printf("%-5s mma: %3d cases, max error %.3g of sum |x| (|w| + |off|)\n", tname(TYPES[ti]), n_cases[ti], worst[ti]);
        fflush(stdout);
    }
    CHECK(!lilac_cuda_mma_supported(LILAC_F32) && !lilac_cuda_mma_supported(LILAC_F16));
    test_multi();
    test_prep_quarter();
    test_mvt();
    TEST_END();
}
