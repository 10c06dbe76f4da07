/* The Gated DeltaNet forms (model/deltanet.h): the chunked form of every
 * kernel set, the recurrent form and the chunked form lilac ran before
 * (tests/dn_ref.h) against a double-precision recurrence, token by token,
 * on random inputs shaped as the model's (q, k L2-normalized, q scaled by
 * 1/sqrt(dk), beta in (0, 1), log-decays from mild to strong, a random
 * starting state), over several chunks and a partial last one.
 *
 * Bound: each output and state element is, per chunk, a few chained sums
 * of ~n = dk + L float32 products (the WY solve, v_new, o, the state
 * update), and the state carries its error to the next chunk. With |k| = 1
 * and beta < 1 the triangular solve is well conditioned. The worst case of
 * such a sum is n u of its magnitude (u = 2^-24); rounding errors of
 * random data add up like a random walk, ~sqrt(n) u (Higham & Mary's
 * probabilistic bound), which is what the old code and the recurrent form
 * show (~1e-7 to 1e-6 of max |o|, max |S|). The check allows
 * 8 sqrt(n) u per chunk (2e-5 after 3 chunks of the model's shape), that
 * the new form is no worse than twice the old one plus the recurrent
 * form's own error, and, for the scalar set on x86, that it is the old
 * code bit for bit. Strong decays (g down to -30, where exp(G_i) exp(-G_m)
 * would overflow) must stay finite. */
#include <math.h>
#include <stdbool.h>

#include "dn_ref.h"
#include "model/deltanet.h"
#include "testutil.h"

static uint64_t rng = 0x13198a2e03707344ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void normalize(float *x, int n, float scale)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(s + 1e-6)) * scale;
    for (int i = 0; i < n; i++)
        x[i] *= r;
}

typedef struct {
    double o, S;
} errs;

static double maxabs_d(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static errs compare(const float *o, const float *S, const double *o_ref, const double *S_ref, int nt, int dv,
                    int dk)
{
    double mo = maxabs_d(o_ref, (size_t)nt * dv), ms = maxabs_d(S_ref, (size_t)dk * dv);
    errs e = {0, 0};
    for (size_t i = 0; i < (size_t)nt * dv; i++)
        e.o = fmax(e.o, isfinite(o[i]) ? fabs(o[i] - o_ref[i]) / mo : INFINITY);
    for (size_t i = 0; i < (size_t)dk * dv; i++)
        e.S = fmax(e.S, isfinite(S[i]) ? fabs(S[i] - S_ref[i]) / ms : INFINITY);
    return e;
}

static void run_case(int dk, int dv, int nt, float gmin, float gmax)
{
    int64_t ldx = 2 * dk + dv + 5, ldo = dv + 3;
    float *X = malloc((size_t)nt * ldx * sizeof(float)), *g = malloc((size_t)nt * sizeof(float));
    float *beta = malloc((size_t)nt * sizeof(float)), *S0 = malloc((size_t)dk * dv * sizeof(float));
    float *S = malloc((size_t)dk * dv * sizeof(float)), *o = malloc((size_t)nt * ldo * sizeof(float));
    float *od = malloc((size_t)nt * dv * sizeof(float)), *o_rec = malloc((size_t)nt * dv * sizeof(float));
    double *o_ref = malloc((size_t)nt * dv * sizeof(double)), *S_ref = malloc((size_t)dk * dv * sizeof(double));
    double *kv = malloc((size_t)dv * sizeof(double));
    size_t nbuf = lilac_dn_scratch_floats(dk, dv), nold = dn_old_floats(dk, dv);
    float *buf = malloc((nbuf > nold ? nbuf : nold) * sizeof(float));
    for (int t = 0; t < nt; t++) {
        float *x = X + t * ldx;
        for (int64_t c = 0; c < ldx; c++)
            x[c] = frand();
        normalize(x, dk, 1.0f / sqrtf((float)dk));
        normalize(x + dk, dk, 1.0f);
        g[t] = gmin + (gmax - gmin) * (0.5f + 0.5f * frand());
        beta[t] = 0.5f + 0.49f * frand();
    }
    for (size_t i = 0; i < (size_t)dk * dv; i++)
        S0[i] = 0.5f * frand();

    /* the truth: the recurrence in double */
    for (size_t i = 0; i < (size_t)dk * dv; i++)
        S_ref[i] = S0[i];
    for (int t = 0; t < nt; t++) {
        const float *q = X + t * ldx, *k = q + dk, *v = q + 2 * dk;
        double dec = exp((double)g[t]);
        for (int c = 0; c < dv; c++)
            kv[c] = 0;
        for (int i = 0; i < dk; i++)
            for (int c = 0; c < dv; c++) {
                S_ref[(size_t)i * dv + c] *= dec;
                kv[c] += S_ref[(size_t)i * dv + c] * k[i];
            }
        for (int c = 0; c < dv; c++)
            kv[c] = (v[c] - kv[c]) * beta[t];
        for (int c = 0; c < dv; c++)
            o_ref[(size_t)t * dv + c] = 0;
        for (int i = 0; i < dk; i++)
            for (int c = 0; c < dv; c++) {
                S_ref[(size_t)i * dv + c] += k[i] * kv[c];
                o_ref[(size_t)t * dv + c] += S_ref[(size_t)i * dv + c] * q[i];
            }
    }

    /* the recurrent form */
    memcpy(S, S0, (size_t)dk * dv * sizeof(float));
    for (int t = 0; t < nt; t++) {
        const float *q = X + t * ldx;
        lilac_dn_recurrent(S, q, q + dk, q + 2 * dk, g[t], beta[t], dk, dv, o_rec + (size_t)t * dv, buf);
    }
    errs e_rec = compare(o_rec, S, o_ref, S_ref, nt, dv, dk);

    /* the old chunked form */
    memcpy(S, S0, (size_t)dk * dv * sizeof(float));
    for (int t0 = 0; t0 < nt; t0 += DN_OLD_CHUNK) {
        int L = nt - t0 < DN_OLD_CHUNK ? nt - t0 : DN_OLD_CHUNK;
        const float *qs[DN_OLD_CHUNK], *ks[DN_OLD_CHUNK], *vs[DN_OLD_CHUNK];
        float *os[DN_OLD_CHUNK];
        for (int i = 0; i < L; i++) {
            qs[i] = X + (t0 + i) * ldx, ks[i] = qs[i] + dk, vs[i] = qs[i] + 2 * dk;
            os[i] = od + (size_t)(t0 + i) * dv;
        }
        dn_chunk_old(S, qs, ks, vs, g + t0, beta + t0, L, dk, dv, os, buf);
    }
    errs e_old = compare(od, S, o_ref, S_ref, nt, dv, dk);
    float *o_old = malloc((size_t)nt * dv * sizeof(float)), *S_old = malloc((size_t)dk * dv * sizeof(float));
    memcpy(o_old, od, (size_t)nt * dv * sizeof(float));
    memcpy(S_old, S, (size_t)dk * dv * sizeof(float));
    int chunks = (nt + LILAC_DN_CHUNK - 1) / LILAC_DN_CHUNK;
    double tol = 8.0 * sqrt((double)(dk + LILAC_DN_CHUNK)) * 0x1p-24 * chunks;
    printf("dk %d dv %d tokens %d g in [%g, %g]: error / max |ref|  o, S:  recurrent %.2e %.2e  old chunk %.2e %.2e"
           "  (bound %.2e)\n",
           dk, dv, nt, gmin, gmax, e_rec.o, e_rec.S, e_old.o, e_old.S, tol);

    const lilac_cpu_kernels *sets[] = {&lilac_cpu_scalar,
#if defined(LILAC_X86)
                                       &lilac_cpu_avx2, &lilac_cpu_avx512,
#endif
#if defined(__aarch64__)
                                       &lilac_cpu_neon,
#endif
    };
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        if (!lilac_cpu_runs(sets[si]))
            continue;
        memcpy(S, S0, (size_t)dk * dv * sizeof(float));
        for (int t0 = 0; t0 < nt; t0 += LILAC_DN_CHUNK) {
            int L = nt - t0 < LILAC_DN_CHUNK ? nt - t0 : LILAC_DN_CHUNK;
            const float *x = X + t0 * ldx;
            lilac_dn_chunk(sets[si], S, x, x + dk, x + 2 * dk, ldx, g + t0, beta + t0, L, dk, dv, o + t0 * ldo,
                           ldo, buf);
        }
        for (int t = 0; t < nt; t++)
            memcpy(od + (size_t)t * dv, o + t * ldo, (size_t)dv * sizeof(float));
        errs e = compare(od, S, o_ref, S_ref, nt, dv, dk);
        if (sets[si] == &lilac_cpu_scalar) {
            /* the scalar set does the old code's arithmetic in its order:
             * bit for bit on x86 (no FMA contraction in either) */
            bool same = !memcmp(od, o_old, (size_t)nt * dv * sizeof(float)) &&
                        !memcmp(S, S_old, (size_t)dk * dv * sizeof(float));
            printf("  scalar  new chunk bitwise the old one: %s\n", same ? "yes" : "no");
#if defined(LILAC_X86)
            CHECKF(same, "scalar dk %d dv %d nt %d: new chunk not bitwise the old one", dk, dv, nt);
#endif
        }
        double vs_rec = 0, mo = maxabs_d(o_ref, (size_t)nt * dv);
        for (size_t i = 0; i < (size_t)nt * dv; i++)
            vs_rec = fmax(vs_rec, fabs(od[i] - o_rec[i]) / mo);
        printf("  %-7s new chunk %.2e %.2e, against the recurrent form token by token %.2e\n", sets[si]->name, e.o,
               e.S, vs_rec);
        CHECKF(e.o <= tol && e.S <= tol, "%s dk %d dv %d nt %d: chunk error o %.3g S %.3g over %.3g", sets[si]->name,
               dk, dv, nt, e.o, e.S, tol);
        CHECKF(e.o <= 2 * e_old.o + e_rec.o + 1e-7 && e.S <= 2 * e_old.S + e_rec.S + 1e-7,
               "%s dk %d dv %d nt %d: chunk error o %.3g S %.3g, the old form's %.3g %.3g", sets[si]->name, dk, dv,
               nt, e.o, e.S, e_old.o, e_old.S);
        CHECKF(vs_rec <= tol + e_rec.o, "%s: chunk against recurrent %.3g", sets[si]->name, vs_rec);
    }
    free(X), free(g), free(beta), free(S0), free(S), free(o), free(od), free(o_rec), free(o_ref), free(S_ref);
    free(kv), free(buf), free(o_old), free(S_old);
}

int main(void)
{
    run_case(128, 128, 3 * LILAC_DN_CHUNK, -1.0f, -0.001f); /* the model's shape, whole chunks */
    run_case(128, 128, 150, -4.0f, -0.01f);                 /* a partial last chunk */
    run_case(48, 40, 2 * LILAC_DN_CHUNK + 1, -1.0f, -0.01f); /* odd sizes, a last chunk of one token */
    run_case(32, 72, 37, -30.0f, -5.0f);                     /* strong decay */
    run_case(16, 24, 2, -0.5f, -0.1f);
    TEST_END();
}
