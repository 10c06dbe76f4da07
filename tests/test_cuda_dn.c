/* test_cuda_dn: the prefill's Gated DeltaNet recurrence in its chunked form
 * (k_pf_dn_chunk, 64-token sub-chunks, LILAC_CUDA_DN_CHUNK=1) against the
 * recurrent kernel (a token at a time), through lilac_cuda_pf_deltanet_form
 * without the gated norm, so that the recurrence's own output is compared:
 * random conv_out rows (q, k, v), gates a and b, ssm_a in -[0.007, 2.7]
 * (slow and fast decay), a random initial state; head shapes dk x dv of
 * 128 x 128 (32 value heads over 16 key heads, tiled and grouped: the
 * target model), and small ones; chunks of 1, 7, 64, 65, 200 and 512
 * tokens. Bound: o and the final state each within
 *   max |d| <= 2e-5 * max |ref|
 * of the recurrent kernel's (float32 rounding of two orders of the same
 * sums). For two small shapes both forms are also compared with a float64
 * recurrence on the CPU (same bound). Shapes the chunked form does not take
 * (dk 48, dk 256) must say so and fall back to the recurrent kernel. Then
 * lilac_cuda_pf_deltanet under LILAC_CUDA_DN_CHUNK=1 (with the gated norm)
 * must give what the chunked form gives, bit for bit, and so must the
 * chunked form with T and P first (its kernel on twice the threads, unless
 * LILAC_CUDA_DN_WIDE=0) where it runs on the CUDA cores (LILAC_CUDA_DN_TC=0,
 * or dk over 128); on the tensor cores, the bound; then a timing line
 * of both forms at 128 x 128, 32 heads, 512 tokens (informative). And the
 * decode step's kernel (lilac_cuda_deltanet_fused) a token at a time
 * against the recurrent kernel over the same tokens, the same bound.
 *
 * Without a usable CUDA device it skips (exit 77), unless
 * LILAC_REQUIRE_CUDA=1. LILAC_CUDA_TEST_QUICK=1 (the sanitizer runs') runs a
 * few cases and no timing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "cudatest.h"

#ifdef LILAC_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_sizes.h"

#define REL 2e-5

typedef struct {
    int dk, dv, nk, nv, tiled, n, C;
    float *conv, *a, *b, *ssm_a, *ssm_dt, *S0, *z, *w; /* host inputs */
    float *dconv, *da, *db, *dssm_a, *dssm_dt, *dS, *do_, *dz, *dw;
} dcase;

static void case_new(dcase *c, int dk, int dv, int nk, int nv, int tiled, int n)
{
    memset(c, 0, sizeof *c);
    c->dk = dk, c->dv = dv, c->nk = nk, c->nv = nv, c->tiled = tiled, c->n = n;
    c->C = 2 * nk * dk + nv * dv;
    const size_t nc = (size_t)n * c->C, ng = (size_t)n * nv, ns = (size_t)nv * dk * dv, no = (size_t)n * nv * dv;
    c->conv = malloc(nc * sizeof(float));
    c->a = malloc(ng * sizeof(float));
    c->b = malloc(ng * sizeof(float));
    c->ssm_a = malloc(nv * sizeof(float));
    c->ssm_dt = malloc(nv * sizeof(float));
    c->S0 = malloc(ns * sizeof(float));
    c->z = malloc(no * sizeof(float));
    c->w = malloc(dv * sizeof(float));
    for (size_t i = 0; i < nc; i++)
        c->conv[i] = rnd_normal();
    for (size_t i = 0; i < ng; i++)
        c->a[i] = rnd_normal(), c->b[i] = rnd_normal();
    for (int j = 0; j < nv; j++) {
        c->ssm_a[j] = -expf((float)(6 * rnd_unit() - 5)); /* -[0.007, 2.7] */
        c->ssm_dt[j] = rnd_sym();
    }
    for (size_t i = 0; i < ns; i++)
        c->S0[i] = 0.5f * rnd_normal();
    for (size_t i = 0; i < no; i++)
        c->z[i] = rnd_normal();
    for (int i = 0; i < dv; i++)
        c->w[i] = 1 + 0.1f * rnd_sym();
    /* the output buffer with a guard after it */
    c->dconv = ct_dmalloc(nc * sizeof(float));
    c->da = ct_dmalloc(ng * sizeof(float));
    c->db = ct_dmalloc(ng * sizeof(float));
    c->dssm_a = ct_dmalloc(nv * sizeof(float));
    c->dssm_dt = ct_dmalloc(nv * sizeof(float));
    c->dS = ct_dmalloc(ns * sizeof(float));
    c->do_ = ct_dmalloc((no + 1024) * sizeof(float));
    c->dz = ct_dmalloc(no * sizeof(float));
    c->dw = ct_dmalloc(dv * sizeof(float));
    ct_up(c->dssm_a, c->ssm_a, nv * sizeof(float));
    ct_up(c->dssm_dt, c->ssm_dt, nv * sizeof(float));
    ct_up(c->dz, c->z, no * sizeof(float));
    ct_up(c->dw, c->w, dv * sizeof(float));
}

static void case_free(dcase *c)
{
    free(c->conv), free(c->a), free(c->b), free(c->ssm_a), free(c->ssm_dt), free(c->S0), free(c->z), free(c->w);
    lilac_cuda_free(c->dconv), lilac_cuda_free(c->da), lilac_cuda_free(c->db), lilac_cuda_free(c->dssm_a);
    lilac_cuda_free(c->dssm_dt), lilac_cuda_free(c->dS), lilac_cuda_free(c->do_), lilac_cuda_free(c->dz);
    lilac_cuda_free(c->dw);
}

/* Fresh inputs (the call normalizes conv_out and turns a, b into the gates in place), o NaN-filled. */
static void reset(const dcase *c)
{
    const size_t nc = (size_t)c->n * c->C, ng = (size_t)c->n * c->nv, no = (size_t)c->n * c->nv * c->dv;
    ct_up(c->dconv, c->conv, nc * sizeof(float));
    ct_up(c->da, c->a, ng * sizeof(float));
    ct_up(c->db, c->b, ng * sizeof(float));
    ct_up(c->dS, c->S0, (size_t)c->nv * c->dk * c->dv * sizeof(float));
    lilac_cuda_memset(c->do_, 0xFF, (no + 1024) * sizeof(float), NULL);
}

/* One call of the form (tp: the T and P buffer, or NULL); o (n * nv * dv) and S (nv * dk * dv) on the host; the
 * return value of the call. */
static int run_form_tp(const dcase *c, int chunked, int normed, float *tp, float *o, float *S)
{
    reset(c);
    const int took = lilac_cuda_pf_deltanet_form(c->dconv, c->C, c->da, c->db, c->dssm_a, c->dssm_dt, c->dS, c->do_,
                                                 c->dz, normed ? c->dw : NULL, c->nk, c->nv, c->dk, c->dv, c->tiled,
                                                 1e-6f, c->n, chunked, tp, NULL);
    const char *m = check_msg();
    CHECKF(m == NULL, "dk %d dv %d n %d chunked %d: %s", c->dk, c->dv, c->n, chunked, m ? m : "");
    ct_down(o, c->do_, (size_t)c->n * c->nv * c->dv * sizeof(float));
    ct_down(S, c->dS, (size_t)c->nv * c->dk * c->dv * sizeof(float));
    float guard[1024];
    ct_down(guard, c->do_ + (size_t)c->n * c->nv * c->dv, sizeof guard);
    for (int i = 0; i < 1024; i++) {
        uint32_t u;
        memcpy(&u, &guard[i], 4);
        if (u != 0xFFFFFFFFu) {
            CHECKF(0, "dk %d dv %d n %d chunked %d: wrote past o", c->dk, c->dv, c->n, chunked);
            break;
        }
    }
    return took;
}

static int run_form(const dcase *c, int chunked, int normed, float *o, float *S)
{
    return run_form_tp(c, chunked, normed, NULL, o, S);
}

/* max |got - ref| (NaN: infinity) against REL * max |ref|; the ratio. */
static double compare(const char *what, const dcase *c, const float *got, const float *ref, size_t cnt)
{
    double mx = 0, d = 0;
    for (size_t i = 0; i < cnt; i++) {
        const double r = fabs((double)ref[i]), e = fabs((double)got[i] - (double)ref[i]);
        if (r > mx)
            mx = r;
        if (!(e <= d))
            d = isnan(e) || isnan(r) ? INFINITY : e;
    }
    const double ratio = mx > 0 ? d / (REL * mx) : (d > 0 ? INFINITY : 0);
    CHECKF(ratio <= 1, "dk %d dv %d nk %d nv %d tiled %d n %d: %s: max|d| %.4g > %.0e x max|ref| %.4g", c->dk,
           c->dv, c->nk, c->nv, c->tiled, c->n, what, d, REL, mx);
    return ratio;
}

/* The recurrence in float64 on the CPU, after qk_norm and the gates as the kernels compute them. */
static void reference(const dcase *c, float *o, float *Sf)
{
    const int dk = c->dk, dv = c->dv, nk = c->nk, nv = c->nv, C = c->C;
    double *S = malloc(sizeof(double) * (size_t)nv * dk * dv), *q = malloc(sizeof(double) * dk),
           *k = malloc(sizeof(double) * dk), *kv = malloc(sizeof(double) * dv);
    for (size_t i = 0; i < (size_t)nv * dk * dv; i++)
        S[i] = c->S0[i];
    for (int t = 0; t < c->n; t++) {
        const float *row = c->conv + (size_t)t * C;
        for (int j = 0; j < nv; j++) {
            const int kh = c->tiled ? j % nk : j / (nv / nk);
            double sq = 0, sk = 0;
            for (int d = 0; d < dk; d++) {
                q[d] = row[(size_t)kh * dk + d], k[d] = row[(size_t)(nk + kh) * dk + d];
                sq += q[d] * q[d], sk += k[d] * k[d];
            }
            const double rq = 1 / sqrt(sq + 1e-6) / sqrt((double)dk), rk = 1 / sqrt(sk + 1e-6);
            for (int d = 0; d < dk; d++)
                q[d] *= rq, k[d] *= rk;
            const double x = (double)c->a[(size_t)t * nv + j] + c->ssm_dt[j];
            const double g = c->ssm_a[j] * (x > 20 ? x : log1p(exp(x)));
            const double beta = 1 / (1 + exp(-(double)c->b[(size_t)t * nv + j]));
            const double decay = exp(g);
            double *Sj = S + (size_t)j * dk * dv;
            const float *v = row + (size_t)2 * nk * dk + (size_t)j * dv;
            for (int e = 0; e < dv; e++)
                kv[e] = 0;
            for (int d = 0; d < dk; d++)
                for (int e = 0; e < dv; e++) {
                    Sj[(size_t)d * dv + e] *= decay;
                    kv[e] += Sj[(size_t)d * dv + e] * k[d];
                }
            for (int e = 0; e < dv; e++)
                kv[e] = (v[e] - kv[e]) * beta;
            for (int e = 0; e < dv; e++) {
                double s = 0;
                for (int d = 0; d < dk; d++) {
                    Sj[(size_t)d * dv + e] += k[d] * kv[e];
                    s += Sj[(size_t)d * dv + e] * q[d];
                }
                o[(size_t)t * nv * dv + (size_t)j * dv + e] = (float)s;
            }
        }
    }
    for (size_t i = 0; i < (size_t)nv * dk * dv; i++)
        Sf[i] = (float)S[i];
    free(S), free(q), free(k), free(kv);
}

static double worst = 0;
static int n_cases = 0;

static void test_case(int dk, int dv, int nk, int nv, int tiled, int n, int expect_taken, int with_ref)
{
    dcase c;
    case_new(&c, dk, dv, nk, nv, tiled, n);
    const size_t no = (size_t)n * nv * dv, ns = (size_t)nv * dk * dv;
    float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float)), *S1 = malloc(ns * sizeof(float)),
          *S2 = malloc(ns * sizeof(float));
    const int took_rec = run_form(&c, 0, 0, o1, S1);
    const int took = run_form(&c, 1, 0, o2, S2);
    CHECKF(took_rec == 0, "dk %d dv %d: the recurrent form said chunked", dk, dv);
    CHECKF(took == expect_taken, "dk %d dv %d nk %d nv %d: chunked form %s", dk, dv, nk, nv,
           took ? "taken, not expected" : "not taken");
    double r = compare("o, chunked vs recurrent", &c, o2, o1, no);
    double rs = compare("S, chunked vs recurrent", &c, S2, S1, ns);
    /* T and P first (k_pf_dn_tp): within the same bound, and nothing written past lilac_cuda_dn_tp_floats */
    const size_t ntp = lilac_cuda_dn_tp_floats(nv, n);
    float *dtp = ct_dmalloc((ntp + 1024) * sizeof(float)), *o4 = malloc(no * sizeof(float)),
          *S4 = malloc(ns * sizeof(float));
    lilac_cuda_memset(dtp, 0xFF, (ntp + 1024) * sizeof(float), NULL);
    CHECKF(run_form_tp(&c, 1, 0, dtp, o4, S4) == expect_taken, "dk %d dv %d: with T and P first: taken %d", dk, dv,
           !expect_taken);
    r = fmax(r, compare("o, chunked with T and P first vs recurrent", &c, o4, o1, no));
    rs = fmax(rs, compare("S, chunked with T and P first vs recurrent", &c, S4, S1, ns));
    const int same = memcmp(o4, o2, no * sizeof(float)) == 0 && memcmp(S4, S2, ns * sizeof(float)) == 0;
    /* the same sums in the same order (on twice the threads unless LILAC_CUDA_DN_WIDE=0); on the tensor cores
     * (LILAC_CUDA_DN_TC, the shapes it takes) other roundings, the bound above */
    const int tc = lilac_cuda_dn_tc_enabled() && dk <= 128 && dk % 16 == 0;
    CHECKF(same || tc, "dk %d dv %d n %d: T and P first gave other bits than the chunked kernel alone", dk, dv, n);
    uint32_t gu[1024];
    ct_down(gu, dtp + ntp, sizeof gu);
    int past = 0;
    for (int i = 0; i < 1024; i++)
        past |= gu[i] != 0xFFFFFFFFu;
    CHECKF(!past, "dk %d dv %d n %d: T and P written past lilac_cuda_dn_tp_floats", dk, dv, n);
    lilac_cuda_free(dtp), free(o4), free(S4);
    double rr = 0, rrs = 0;
    if (with_ref) {
        float *o3 = malloc(no * sizeof(float)), *S3 = malloc(ns * sizeof(float));
        reference(&c, o3, S3);
        rr = fmax(compare("o, recurrent vs float64", &c, o1, o3, no), compare("o, chunked vs float64", &c, o2, o3, no));
        rrs = fmax(compare("S, recurrent vs float64", &c, S1, S3, ns),
                   compare("S, chunked vs float64", &c, S2, S3, ns));
        free(o3), free(S3);
    }
    printf("dk %3d dv %3d nk %2d nv %2d %-7s n %3d %s: error/bound o %.3f S %.3f (T and P first: %s bits)%s", dk, dv,
           nk, nv, tiled ? "tiled" : "grouped", n, took ? "chunked" : "fallbk", r, rs, same ? "the same" : "other",
           with_ref ? "" : "\n");
    if (with_ref)
        printf(", vs float64 o %.3f S %.3f\n", rr, rrs);
    worst = fmax(worst, fmax(fmax(r, rs), fmax(rr, rrs)));
    n_cases++;
    free(o1), free(o2), free(S1), free(S2);
    case_free(&c);
}

/* The decode step's DeltaNet kernel (lilac_cuda_deltanet_fused, a token a call, the gated norm on) over n tokens
 * in order against the recurrent prefill kernel over the same n tokens: o and the final state within the bound
 * (its state's rows in registers where dk is 128 unless LILAC_CUDA_DN_REG=0: run.sh's dn-reg0). */
static void test_decode(int dk, int dv, int nk, int nv, int tiled, int n)
{
    dcase c;
    case_new(&c, dk, dv, nk, nv, tiled, n);
    const size_t no = (size_t)n * nv * dv, ns = (size_t)nv * dk * dv;
    float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float)), *S1 = malloc(ns * sizeof(float)),
          *S2 = malloc(ns * sizeof(float));
    CHECK(run_form(&c, 0, 1, o1, S1) == 0);
    reset(&c);
    for (int t = 0; t < n; t++) {
        /* each call after the last has ended: the kernel loads its state before its wait (launched dependent),
         * which the decode step's other kernels between two of a layer's calls allow, and two calls back to back
         * do not (session 32: the second read the state before the first wrote it) */
        const char *m = check_msg();
        CHECKF(m == NULL, "decode dk %d dv %d: %s", dk, dv, m ? m : "");
        CHECKF(lilac_cuda_deltanet_fused(c.dconv + (size_t)t * c.C, c.da + (size_t)t * nv, c.db + (size_t)t * nv,
                                         c.dssm_a, c.dssm_dt, c.dS, c.do_ + (size_t)t * nv * dv,
                                         c.dz + (size_t)t * nv * dv, c.dw, nk, nv, dk, dv, tiled, 1e-6f, NULL) == 0,
               "dk %d dv %d: lilac_cuda_deltanet_fused refused the shape", dk, dv);
    }
    const char *m = check_msg();
    CHECKF(m == NULL, "decode dk %d dv %d: %s", dk, dv, m ? m : "");
    ct_down(o2, c.do_, no * sizeof(float));
    ct_down(S2, c.dS, ns * sizeof(float));
    const double r = fmax(compare("o, decode kernel vs recurrent", &c, o2, o1, no),
                          compare("S, decode kernel vs recurrent", &c, S2, S1, ns));
    printf("decode kernel dk %3d dv %3d nk %2d nv %2d %-7s %d tokens: error/bound %.3f\n", dk, dv, nk, nv,
           tiled ? "tiled" : "grouped", n, r);
    worst = fmax(worst, r);
    n_cases++;
    free(o1), free(o2), free(S1), free(S2);
    case_free(&c);
}

/* lilac_cuda_pf_deltanet under LILAC_CUDA_DN_CHUNK=1 (read at its first call: this is the first) against the
 * chunked form, the gated norm on: the same kernels, the same bits. */
static void test_env(void)
{
    dcase c;
    case_new(&c, 128, 128, 16, 32, 1, 200);
    const size_t no = (size_t)c.n * c.nv * c.dv, ns = (size_t)c.nv * c.dk * c.dv;
    float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float)), *S1 = malloc(ns * sizeof(float)),
          *S2 = malloc(ns * sizeof(float));
    CHECK(run_form(&c, 1, 1, o1, S1) == 1);
    setenv("LILAC_CUDA_DN_CHUNK", "1", 1);
    reset(&c);
    lilac_cuda_pf_deltanet(c.dconv, c.C, c.da, c.db, c.dssm_a, c.dssm_dt, c.dS, c.do_, c.dz, c.dw, c.nk, c.nv, c.dk,
                           c.dv, c.tiled, 1e-6f, c.n, NULL, NULL);
    const char *m = check_msg();
    CHECKF(m == NULL, "lilac_cuda_pf_deltanet: %s", m ? m : "");
    ct_down(o2, c.do_, no * sizeof(float));
    ct_down(S2, c.dS, ns * sizeof(float));
    CHECKF(memcmp(o1, o2, no * sizeof(float)) == 0 && memcmp(S1, S2, ns * sizeof(float)) == 0,
           "LILAC_CUDA_DN_CHUNK=1: lilac_cuda_pf_deltanet differs from the chunked form");
    printf("LILAC_CUDA_DN_CHUNK=1 lilac_cuda_pf_deltanet (gated norm): the chunked form's bits\n");
    free(o1), free(o2), free(S1), free(S2);
    case_free(&c);
}

/* Per call of each form at the target shape, n = 512 (inputs not reset between calls: timing only). */
static void bench(void)
{
    dcase c;
    case_new(&c, 128, 128, 16, 32, 1, 512);
    reset(&c);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float *dtp = ct_dmalloc(lilac_cuda_dn_tp_floats(c.nv, c.n) * sizeof(float));
    for (int form = 0; form < 3; form++) { /* recurrent, chunked, chunked with T and P first */
        const int reps = 20, chunked = form > 0;
        float *tp = form == 2 ? dtp : NULL;
        for (int w = 0; w < 3; w++)
            lilac_cuda_pf_deltanet_form(c.dconv, c.C, c.da, c.db, c.dssm_a, c.dssm_dt, c.dS, c.do_, c.dz, NULL, c.nk,
                                        c.nv, c.dk, c.dv, c.tiled, 1e-6f, c.n, chunked, tp, NULL);
        cudaEventRecord(e0, 0);
        for (int r = 0; r < reps; r++)
            lilac_cuda_pf_deltanet_form(c.dconv, c.C, c.da, c.db, c.dssm_a, c.dssm_dt, c.dS, c.do_, c.dz, NULL, c.nk,
                                        c.nv, c.dk, c.dv, c.tiled, 1e-6f, c.n, chunked, tp, NULL);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("timing: %s form, dk = dv = 128, 32 value heads, 512 tokens (with qk_norm and gates): %.1f us a call\n",
               form == 2 ? "chunked, T and P first," : chunked ? "chunked" : "recurrent", 1000.0 * ms / reps);
    }
    lilac_cuda_free(dtp);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const char *m = check_msg();
    CHECKF(m == NULL, "bench: %s", m ? m : "");
    case_free(&c);
}
#endif

int main(void)
{
    char msg[512];
    ct_rng = 0x6A09E667F3BCC909ull;
    ct_require_cuda(msg, sizeof msg);
#ifdef LILAC_CUDA
    const bool quick = ct_quick();
    static const int N[] = {1, 7, 64, 65, 200, 512};
    /* dk, dv, nk, nv, tiled, taken */
    static const int SH[][6] = {
        {128, 128, 16, 32, 1, 1}, {128, 128, 16, 32, 0, 1}, {64, 64, 2, 4, 0, 1}, {32, 32, 1, 2, 1, 1},
        {64, 128, 2, 6, 1, 1},    {96, 64, 3, 6, 0, 1},     {192, 64, 1, 2, 0, 1}, {128, 32, 4, 8, 1, 1},
        {48, 32, 1, 2, 0, 0},     {256, 64, 1, 2, 1, 0},
    };
    test_env();
    test_decode(128, 128, 16, 32, 1, 5);
    test_decode(128, 128, 16, 32, 0, 5);
    test_decode(64, 64, 2, 4, 0, 5);
    for (size_t s = 0; s < sizeof SH / sizeof SH[0]; s++)
        for (int i = 0; i < 6; i++) {
            if (quick && !((s == 0 || s == 3) && (N[i] == 7 || N[i] == 65)))
                continue;
            test_case(SH[s][0], SH[s][1], SH[s][2], SH[s][3], SH[s][4], N[i], SH[s][5], 0);
        }
    /* against the float64 recurrence */
    test_case(64, 64, 2, 4, 0, 200, 1, 1);
    test_case(32, 32, 1, 2, 1, 130, 1, 1);
    printf("%d cases; worst error/bound %.3f (bound: max|d| <= %.0e x max|ref|)\n", n_cases, worst, REL);
    if (!quick)
        bench();
#else
    SKIP("built without CUDA");
#endif
    TEST_END();
}
