/* dn_ref: the DeltaNet chunked form as lilac ran it before the gemm kernels
 * (per-element loops, expf in inner loops), kept verbatim as a reference
 * for tests/test_deltanet.c and bench/dn_bench.c. buf: dn_old_floats. */
#ifndef LILAC_TESTS_DN_REF_H
#define LILAC_TESTS_DN_REF_H

#include <math.h>
#include <string.h>

#define DN_OLD_CHUNK 64

static inline size_t dn_old_floats(int dk, int dv)
{
    size_t chunk = DN_OLD_CHUNK;
    return chunk * chunk * 2 + chunk * ((size_t)dk * 3 + (size_t)dv * 4) + (size_t)dk + (size_t)dv + chunk;
}

static float dn_old_dotf(const float *a, const float *b, int n)
{
    float s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void dn_chunk_old(float *S, const float *const *q, const float *const *k, const float *const *v,
                     const float *g, const float *beta, int L, int dk, int dv, float *const *o, float *buf)
{
    float *G = buf;             /* [L] cumulative log-decay */
    float *A = G + DN_OLD_CHUNK;    /* [L][L] */
    float *row = A + DN_OLD_CHUNK * DN_OLD_CHUNK; /* [L] */
    float *U = row + DN_OLD_CHUNK;  /* [L][dv] */
    float *W = U + (size_t)DN_OLD_CHUNK * dv; /* [L][dk] */
    float *Vn = W + (size_t)DN_OLD_CHUNK * dk; /* [L][dv] */

    for (int i = 0; i < L; i++)
        G[i] = (i ? G[i - 1] : 0.0f) + g[i];
    /* A = -(beta_i k_i . k_m) exp(G_i - G_m), strictly lower triangular */
    for (int i = 0; i < L; i++)
        for (int mm = 0; mm < L; mm++)
            A[i * DN_OLD_CHUNK + mm] = mm < i ? -beta[i] * dn_old_dotf(k[i], k[mm], dk) * expf(G[i] - G[mm]) : 0.0f;
    /* forward substitution: T = (I - A')^-1 built row by row from the rows above */
    for (int i = 1; i < L; i++) {
        for (int mm = 0; mm < i; mm++) {
            float s = A[i * DN_OLD_CHUNK + mm];
            for (int r = mm + 1; r < i; r++)
                s += A[i * DN_OLD_CHUNK + r] * A[r * DN_OLD_CHUNK + mm];
            row[mm] = s;
        }
        memcpy(A + i * DN_OLD_CHUNK, row, (size_t)i * sizeof(float));
    }
    for (int i = 0; i < L; i++)
        A[i * DN_OLD_CHUNK + i] = 1.0f;
    /* U = T (beta v);  W = T (beta exp(G) k) */
    for (int i = 0; i < L; i++) {
        float *u = U + (size_t)i * dv, *w = W + (size_t)i * dk;
        memset(u, 0, (size_t)dv * sizeof(float));
        memset(w, 0, (size_t)dk * sizeof(float));
        for (int mm = 0; mm <= i; mm++) {
            float a = A[i * DN_OLD_CHUNK + mm] * beta[mm];
            float ag = a * expf(G[mm]);
            for (int c = 0; c < dv; c++)
                u[c] += a * v[mm][c];
            for (int d = 0; d < dk; d++)
                w[d] += ag * k[mm][d];
        }
    }
    /* v_new = U - W S;  o_i = exp(G_i) q_i S + sum_{m<=i} (q_i.k_m) exp(G_i - G_m) v_new_m */
    for (int i = 0; i < L; i++) {
        float *vn = Vn + (size_t)i * dv, *oi = o[i];
        const float *w = W + (size_t)i * dk;
        memcpy(vn, U + (size_t)i * dv, (size_t)dv * sizeof(float));
        memset(oi, 0, (size_t)dv * sizeof(float));
        float eg = expf(G[i]);
        for (int d = 0; d < dk; d++) {
            const float *Sd = S + (size_t)d * dv;
            float wd = w[d], qd = q[i][d] * eg;
            for (int c = 0; c < dv; c++) {
                vn[c] -= wd * Sd[c];
                oi[c] += qd * Sd[c];
            }
        }
    }
    for (int i = 0; i < L; i++) {
        float *oi = o[i];
        for (int mm = 0; mm <= i; mm++) {
            float a = dn_old_dotf(q[i], k[mm], dk) * expf(G[i] - G[mm]);
            const float *vn = Vn + (size_t)mm * dv;
            for (int c = 0; c < dv; c++)
                oi[c] += a * vn[c];
        }
    }
    /* S = exp(G_last) S + sum_i exp(G_last - G_i) k_i v_new_i^T */
    float gl = G[L - 1], el = expf(gl);
    for (int d = 0; d < dk; d++) {
        float *Sd = S + (size_t)d * dv;
        for (int c = 0; c < dv; c++)
            Sd[c] *= el;
        for (int i = 0; i < L; i++) {
            float kd = k[i][d] * expf(gl - G[i]);
            const float *vn = Vn + (size_t)i * dv;
            for (int c = 0; c < dv; c++)
                Sd[c] += kd * vn[c];
        }
    }
}

#endif
