/* test_cuda_route: the decode step's MoE glue kernels. The routing done by the last block of the
 * norm+router kernel (lilac_cuda_norm_router with lilac_cuda_route_args:
 * dev_route) against a float64 oracle on the CPU over the kernel's own
 * logits, and against the route kernel (lilac_cuda_route) on them:
 * - experts 8, 60, 256, 512 (the most either takes); k 1, 2, 8 and 32;
 *   weights renormalized or not; the shared expert's gate as the router's
 *   extra row or none; gate and up slots (up_offset) or gate only;
 * - ties: duplicated router rows give equal logits, which both kernels and
 *   the CPU order by the lower expert index;
 * - the kernel launched three times in a row (its counter must be back to
 *   zero for each launch, as a replayed graph needs);
 * - NaN logits: still k valid experts (what the expert products read).
 * Bounds: the chosen experts and their order exactly; weights within 1e-6
 * of the oracle's (relative to the largest); the shared gate within 1e-6.
 * The experts' product that routes for itself (lilac_cuda_matvec_experts_routed)
 * against the route kernel and then the product over its choice: the same
 * experts, weights and outputs bit for bit (test_routed). Then the experts'
 * weighted sum and the next norm over a grid of blocks against the one-block
 * kernel (test_sum).
 *
 * Without a usable CUDA device it skips (exit 77), unless
 * LILAC_REQUIRE_CUDA=1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudatest.h"
#include "kernels/cuda/cuda.h"

#ifdef LILAC_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_sizes.h"

/* The CPU's routing over logits (src/model/decoder.c's order): softmax, the k largest (ties to the lower
 * index) listed in index order, weights renormalized when norm. */
static void oracle(const float *lg, int E, int k, int norm, int *idx, double *w)
{
    double mx = -INFINITY, sum = 0;
    double *p = malloc((size_t)E * sizeof *p);
    char *chosen = calloc((size_t)E, 1);
    for (int e = 0; e < E; e++)
        mx = lg[e] > mx ? lg[e] : mx;
    for (int e = 0; e < E; e++)
        sum += p[e] = exp((double)lg[e] - mx);
    for (int r = 0; r < k; r++) {
        int b = -1;
        for (int e = 0; e < E; e++)
            if (!chosen[e] && (b < 0 || lg[e] > lg[b])) /* the logits' order is the probabilities' */
                b = e;
        chosen[b] = 1;
    }
    double tot = 0;
    for (int e = 0, i = 0; e < E; e++)
        if (chosen[e])
            idx[i] = e, w[i] = p[e] / sum, tot += w[i], i++;
    for (int i = 0; norm && i < k; i++)
        w[i] /= tot;
    free(p);
    free(chosen);
}

static double worst_w;

static void test_case(int E, int k, int norm, int shared, int gu, int nan_logits)
{
    const int n = 64, R = E + shared, reps = 3;
    float *x = malloc(sizeof(float) * n), *nw = malloc(sizeof(float) * n), *W = malloc(sizeof(float) * R * n);
    float *lg = malloc(sizeof(float) * R), *w = malloc(sizeof(float) * (k + 1)), *w2 = malloc(sizeof(float) * (k + 1));
    int32_t *idx = malloc(sizeof(int32_t) * 2 * k), *idx2 = malloc(sizeof(int32_t) * 2 * k);
    int *oi = malloc(sizeof(int) * k);
    double *ow = malloc(sizeof(double) * k);
    for (int i = 0; i < n; i++)
        nw[i] = 0.5f + (float)rnd_unit();
    for (int i = 0; i < R * n; i++)
        W[i] = rnd_sym() * 0.3f;
    for (int r = 1; r + 2 < E; r += 7) /* ties: row r + 2 a copy of row r */
        memcpy(W + (size_t)(r + 2) * n, W + (size_t)r * n, sizeof(float) * n);
    float *dx = ct_dmalloc(sizeof(float) * n), *dnw = ct_dmalloc(sizeof(float) * n);
    float *dxn = ct_dmalloc(sizeof(float) * n);
    float *dW = ct_dmalloc(sizeof(float) * R * n), *dlg = ct_dmalloc(sizeof(float) * R);
    float *dw = ct_dmalloc(sizeof(float) * (k + 1)), *dw2 = ct_dmalloc(sizeof(float) * (k + 1));
    int32_t *didx = ct_dmalloc(sizeof(int32_t) * 2 * k), *didx2 = ct_dmalloc(sizeof(int32_t) * 2 * k);
    unsigned *dcount = ct_dmalloc(sizeof(unsigned));
    lilac_cuda_memset(dcount, 0, sizeof(unsigned), NULL);
    ct_up(dnw, nw, sizeof(float) * n);
    ct_up(dW, W, sizeof(float) * R * n);
    const int up_offset = gu ? E : 0;
    const lilac_cuda_route_args ra = {E, k, norm, up_offset, shared, didx, dw, dcount};
    char what[160];
    snprintf(what, sizeof what, "E %d k %d norm %d shared %d gu %d%s", E, k, norm, shared, gu,
             nan_logits ? " NaN" : "");
    for (int rep = 0; rep < reps; rep++) {
        for (int i = 0; i < n; i++)
            x[i] = nan_logits ? NAN : rnd_normal();
        ct_up(dx, x, sizeof(float) * n);
        int rc = lilac_cuda_norm_router(dx, dnw, dxn, dW, n, R, dlg, n, 1e-6f, &ra, NULL);
        CHECKF(rc == 0, "%s: the norm+router kernel takes the routing", what);
        if (rc)
            break;
        ct_down(lg, dlg, sizeof(float) * R);
        ct_down(idx, didx, sizeof(int32_t) * 2 * k);
        ct_down(w, dw, sizeof(float) * (k + 1));
        const char *m = check_msg();
        CHECKF(!m, "%s: %s", what, m ? m : "");
        if (nan_logits) { /* nothing to order: k experts in range (what the products then read) */
            int ok = 1;
            for (int i = 0; i < k; i++)
                ok &= idx[i] >= 0 && idx[i] < E && (!gu || idx[k + i] == idx[i] + up_offset);
            CHECKF(ok, "%s: valid experts", what);
            continue;
        }
        /* the route kernel on the same logits, with the shared gate from gate_inp . xn */
        rc = lilac_cuda_route(dlg, E, k, norm, didx2, dw2, up_offset, shared ? dW + (size_t)E * n : NULL, dxn, n,
                              NULL, NULL);
        CHECKF(rc == 0, "%s: the route kernel runs", what);
        ct_down(idx2, didx2, sizeof(int32_t) * 2 * k);
        ct_down(w2, dw2, sizeof(float) * (k + 1));
        m = check_msg();
        CHECKF(!m, "%s: the route kernel: %s", what, m ? m : "");
        if (shared) { /* the gate from its logit (the router's row E, as the decode step gives it): the tail's bits */
            float *w3 = malloc(sizeof(float) * (k + 1));
            int32_t *idx3 = malloc(sizeof(int32_t) * 2 * k);
            lilac_cuda_memset(dw2, 0, sizeof(float) * (k + 1), NULL);
            rc = lilac_cuda_route(dlg, E, k, norm, didx2, dw2, up_offset, NULL, NULL, 0, dlg + E, NULL);
            ct_down(idx3, didx2, sizeof(int32_t) * 2 * k);
            ct_down(w3, dw2, sizeof(float) * (k + 1));
            m = check_msg();
            CHECKF(rc == 0 && !m, "%s: the route kernel with the gate's logit: %s", what, m ? m : "");
            CHECKF(!memcmp(idx3, idx, sizeof(int32_t) * (gu ? 2 : 1) * k) && !memcmp(w3, w, sizeof(float) * (k + 1)),
                   "%s: the route kernel with the gate's logit differs from the norm+router's routing", what);
            free(w3), free(idx3);
        }
        oracle(lg, E, k, norm, oi, ow);
        int same = 1, same2 = 1;
        double dmax = 0, wmax = 0, d2 = 0;
        for (int i = 0; i < k; i++) {
            same &= idx[i] == oi[i] && (!gu || idx[k + i] == oi[i] + up_offset);
            same2 &= idx[i] == idx2[i] && (!gu || idx[k + i] == idx2[k + i]);
            dmax = fmax(dmax, fabs(w[i] - ow[i]));
            d2 = fmax(d2, fabs((double)w[i] - w2[i]));
            wmax = fmax(wmax, fabs(ow[i]));
        }
        CHECKF(same, "%s (launch %d): the experts chosen or their order differ from the CPU's", what, rep);
        CHECKF(same2, "%s (launch %d): the experts differ from the route kernel's", what, rep);
        CHECKF(dmax <= 1e-6 * wmax && d2 <= 1e-6 * wmax, "%s: weights off by %.3g (route kernel %.3g) of %.3g", what,
               dmax, d2, wmax);
        worst_w = fmax(worst_w, dmax / wmax);
        if (shared) {
            const double g = 1 / (1 + exp(-(double)lg[E]));
            CHECKF(fabs(w[k] - g) <= 1e-6 && fabs(w[k] - w2[k]) <= 1e-6, "%s: shared gate %.7f, %.7f, oracle %.7f",
                   what, w[k], w2[k], g);
        }
    }
    free(x), free(nw), free(W), free(lg), free(w), free(w2), free(idx), free(idx2), free(oi), free(ow);
    lilac_cuda_free(dx), lilac_cuda_free(dnw), lilac_cuda_free(dxn), lilac_cuda_free(dW), lilac_cuda_free(dlg);
    lilac_cuda_free(dw), lilac_cuda_free(dw2), lilac_cuda_free(didx), lilac_cuda_free(didx2), lilac_cuda_free(dcount);
}

/* lilac_cuda_matvec_experts_routed over E float32 experts (gate and up: 2E matrices of ff x n) against
 * lilac_cuda_route and lilac_cuda_matvec_experts on the same logits: idx, w and y bit for bit, two launches in
 * a row. gu: 2k slots (the up matrices at E); shared: the gate's logit at logits[E]. */
static void test_routed(int E, int k, int norm, int shared, int gu)
{
    const int n = 64, ff = 48, nm = gu ? 2 * E : E, slots = gu ? 2 * k : k;
    const size_t one = (size_t)ff * n;
    float *W = malloc(sizeof(float) * one * nm), *x = malloc(sizeof(float) * n), *lg = malloc(sizeof(float) * (E + 1));
    float *y = malloc(sizeof(float) * ff * slots), *y2 = malloc(sizeof(float) * ff * slots);
    float *w = malloc(sizeof(float) * (k + 1)), *w2 = malloc(sizeof(float) * (k + 1));
    int32_t *idx = malloc(sizeof(int32_t) * 2 * k), *idx2 = malloc(sizeof(int32_t) * 2 * k);
    for (size_t i = 0; i < one * nm; i++)
        W[i] = rnd_sym();
    for (int i = 0; i < n; i++)
        x[i] = rnd_normal();
    float *dW = ct_dmalloc(sizeof(float) * one * nm), *dx = ct_dmalloc(sizeof(float) * n);
    float *dlg = ct_dmalloc(sizeof(float) * (E + 1)), *dy = ct_dmalloc(sizeof(float) * ff * slots);
    float *dy2 = ct_dmalloc(sizeof(float) * ff * slots), *dw = ct_dmalloc(sizeof(float) * (k + 1));
    float *dw2 = ct_dmalloc(sizeof(float) * (k + 1));
    int32_t *didx = ct_dmalloc(sizeof(int32_t) * 2 * k), *didx2 = ct_dmalloc(sizeof(int32_t) * 2 * k);
    ct_up(dW, W, sizeof(float) * one * nm), ct_up(dx, x, sizeof(float) * n);
    const lilac_cuda_mat M = {dW, LILAC_F32, ff, n, sizeof(float) * n};
    const lilac_cuda_route_args ra = {E, k, norm, gu ? E : 0, shared, didx2, dw2, NULL};
    char what[128];
    snprintf(what, sizeof what, "routed product E %d k %d norm %d shared %d gu %d", E, k, norm, shared, gu);
    for (int rep = 0; rep < 2; rep++) {
        for (int e = 0; e <= E; e++)
            lg[e] = e % 5 == 3 && e > 0 ? lg[e - 1] : rnd_normal() * 2; /* ties */
        ct_up(dlg, lg, sizeof(float) * (E + 1));
        lilac_cuda_memset(dw2, 0, sizeof(float) * (k + 1), NULL);
        int rc = lilac_cuda_route(dlg, E, k, norm, didx, dw, gu ? E : 0, NULL, NULL, 0, shared ? dlg + E : NULL, NULL);
        lilac_cuda_matvec_experts(&M, sizeof(float) * one, didx, slots, dx, 0, dy, NULL);
        const int rc2 = lilac_cuda_matvec_experts_routed(&M, sizeof(float) * one, dlg, &ra, dx, dy2, NULL);
        ct_down(idx, didx, sizeof(int32_t) * slots), ct_down(idx2, didx2, sizeof(int32_t) * slots);
        ct_down(w, dw, sizeof(float) * (k + 1)), ct_down(w2, dw2, sizeof(float) * (k + 1));
        ct_down(y, dy, sizeof(float) * ff * slots), ct_down(y2, dy2, sizeof(float) * ff * slots);
        const char *m = check_msg();
        CHECKF(rc == 0 && rc2 == 0 && !m, "%s: launches (%d, %d): %s", what, rc, rc2, m ? m : "");
        CHECKF(!memcmp(idx, idx2, sizeof(int32_t) * slots), "%s (launch %d): experts differ from the route kernel's",
               what, rep);
        CHECKF(!memcmp(w, w2, sizeof(float) * (k + shared)), "%s (launch %d): weights differ from the route kernel's",
               what, rep);
        CHECKF(!memcmp(y, y2, sizeof(float) * ff * slots), "%s (launch %d): outputs differ from the product's", what,
               rep);
    }
    free(W), free(x), free(lg), free(y), free(y2), free(w), free(w2), free(idx), free(idx2);
    lilac_cuda_free(dW), lilac_cuda_free(dx), lilac_cuda_free(dlg), lilac_cuda_free(dy), lilac_cuda_free(dy2);
    lilac_cuda_free(dw), lilac_cuda_free(dw2), lilac_cuda_free(didx), lilac_cuda_free(didx2);
}

/* The experts' weighted sum into x and the next norm over a grid of blocks (lilac_cuda_moe_sum_norm_grid)
 * against the one-block kernel: x bit for bit, xn within 1e-6 of its largest value, three launches in a row
 * (the counter back to zero each time). */
static void test_sum(int E, int k, int shared)
{
    const size_t nx = (size_t)E, nex = (size_t)k * E;
    float *x = malloc(sizeof(float) * nx), *ex = malloc(sizeof(float) * nex), *sh = malloc(sizeof(float) * nx);
    float *w = malloc(sizeof(float) * (k + 1)), *nw = malloc(sizeof(float) * nx);
    float *x1 = malloc(sizeof(float) * nx), *x2 = malloc(sizeof(float) * nx), *n1 = malloc(sizeof(float) * nx),
          *n2 = malloc(sizeof(float) * nx);
    for (size_t i = 0; i < nx; i++)
        x[i] = rnd_normal(), sh[i] = rnd_normal(), nw[i] = 0.5f + (float)rnd_unit();
    for (size_t i = 0; i < nex; i++)
        ex[i] = rnd_normal();
    for (int i = 0; i <= k; i++)
        w[i] = (float)rnd_unit();
    float *dx1 = ct_dmalloc(sizeof(float) * nx), *dx2 = ct_dmalloc(sizeof(float) * nx);
    float *dex = ct_dmalloc(sizeof(float) * nex), *dsh = ct_dmalloc(sizeof(float) * nx);
    float *dw = ct_dmalloc(sizeof(float) * (k + 1)), *dnw = ct_dmalloc(sizeof(float) * nx);
    float *dn1 = ct_dmalloc(sizeof(float) * nx), *dn2 = ct_dmalloc(sizeof(float) * nx);
    float *dpart = ct_dmalloc(sizeof(float) * LILAC_CUDA_SUM_GRID_MAXB);
    unsigned *dcount = ct_dmalloc(sizeof(unsigned));
    lilac_cuda_memset(dcount, 0, sizeof(unsigned), NULL);
    ct_up(dx1, x, sizeof(float) * nx), ct_up(dx2, x, sizeof(float) * nx), ct_up(dex, ex, sizeof(float) * nex);
    ct_up(dsh, sh, sizeof(float) * nx), ct_up(dw, w, sizeof(float) * (k + 1)), ct_up(dnw, nw, sizeof(float) * nx);
    int ok = 1;
    double dn = 0, mn = 0;
    for (int rep = 0; rep < 3; rep++) { /* x accumulates: each launch adds the experts again */
        lilac_cuda_moe_sum_norm(dx1, dex, dw, k, shared ? dsh : NULL, dw + k, dnw, dn1, E, 1e-6f, NULL);
        ok &= lilac_cuda_moe_sum_norm_grid(dx2, dex, dw, k, shared ? dsh : NULL, dw + k, dnw, dn2, E, 1e-6f, dpart,
                                           dcount, NULL) == 0;
        ct_down(x1, dx1, sizeof(float) * nx), ct_down(x2, dx2, sizeof(float) * nx);
        ct_down(n1, dn1, sizeof(float) * nx), ct_down(n2, dn2, sizeof(float) * nx);
        ok &= !memcmp(x1, x2, sizeof(float) * nx);
        for (size_t i = 0; i < nx; i++)
            dn = fmax(dn, fabs(n1[i] - n2[i])), mn = fmax(mn, fabs(n1[i]));
    }
    const char *m = check_msg();
    CHECKF(!m, "sum E %d k %d: %s", E, k, m ? m : "");
    CHECKF(ok, "sum E %d k %d shared %d: x differs from the one-block kernel's", E, k, shared);
    CHECKF(dn <= 1e-6 * mn, "sum E %d k %d shared %d: xn off by %.3g of %.3g", E, k, shared, dn, mn);
    free(x), free(ex), free(sh), free(w), free(nw), free(x1), free(x2), free(n1), free(n2);
    lilac_cuda_free(dx1), lilac_cuda_free(dx2), lilac_cuda_free(dex), lilac_cuda_free(dsh), lilac_cuda_free(dw);
    lilac_cuda_free(dnw), lilac_cuda_free(dn1), lilac_cuda_free(dn2), lilac_cuda_free(dpart), lilac_cuda_free(dcount);
}
#endif

int main(void)
{
    char msg[512];
    ct_rng = 0xBB67AE8584CAA73Bull;
    ct_require_cuda(msg, sizeof msg);
#ifdef LILAC_CUDA
    static const int EK[][2] = {{8, 1}, {8, 2}, {60, 8}, {256, 8}, {256, 1}, {256, 32}, {512, 8}, {512, 32}};
    int cases = 0;
    for (size_t i = 0; i < sizeof EK / sizeof EK[0]; i++)
        for (int v = 0; v < 8; v++, cases++)
            test_case(EK[i][0], EK[i][1], v & 1, (v >> 1) & 1, (v >> 2) & 1, 0);
    test_case(256, 8, 1, 1, 1, 1);
    test_case(8, 2, 0, 0, 0, 1);
    printf("%d cases of 3 launches; worst weight error %.3g of the largest\n", cases, worst_w);
    for (size_t i = 0; i < sizeof EK / sizeof EK[0]; i++)
        for (int v = 0; v < 8; v++)
            test_routed(EK[i][0], EK[i][1], v & 1, (v >> 1) & 1, (v >> 2) & 1);
    static const int SK[][2] = {{2048, 8}, {256, 2}, {100, 1}, {4096, 9}, {2048, 0}};
    for (size_t i = 0; i < sizeof SK / sizeof SK[0]; i++)
        for (int shared = 0; shared < 2; shared++)
            test_sum(SK[i][0], SK[i][1], shared);
#else
    SKIP("built without CUDA");
#endif
    TEST_END();
}
