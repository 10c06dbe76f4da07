/* deltanet: the Gated DeltaNet recurrence of one value head
 * (model/deltanet.h). */
#include "model/deltanet.h"

#include <math.h>
#include <string.h>

#define STRIP 8 /* rows per call for the products with a lower-triangular factor */

size_t lilac_dn_scratch_floats(int dk, int dv)
{
    size_t n = LILAC_DN_CHUNK;
    return 4 * n + 3 * n * n + n * (3 * (size_t)dk + (size_t)dv);
}

void lilac_dn_recurrent(float *S, const float *q, const float *k, const float *v, float g, float beta, int dk,
                        int dv, float *o, float *tmp)
{
    float decay = expf(g);
    float *kv_mem = tmp;
    memset(kv_mem, 0, (size_t)dv * sizeof(float));
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (int c = 0; c < dv; c++) {
            row[c] *= decay;
            kv_mem[c] += row[c] * k[i];
        }
    }
    for (int c = 0; c < dv; c++)
        kv_mem[c] = (v[c] - kv_mem[c]) * beta; /* now delta */
    memset(o, 0, (size_t)dv * sizeof(float));
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (int c = 0; c < dv; c++) {
            row[c] += k[i] * kv_mem[c];
            o[c] += row[c] * q[i];
        }
    }
}

static inline int imin(int a, int b) { return a < b ? a : b; }

/* The chunked form, as the reference's torch_chunk_gated_delta_rule. With
 * G_i = g_0 + ... + g_i (cumulative log-decay) and T = (I - A)^-1, A the
 * strictly lower-triangular A_im = -beta_i (k_i . k_m) exp(G_i - G_m):
 *
 *   U = T diag(beta) V,  W = T diag(beta exp(G)) K     (the WY form)
 *   v_new = U - W S
 *   o_i = exp(G_i) q_i S + sum_{m <= i} (q_i . k_m) exp(G_i - G_m) v_new_m
 *   S = exp(G_last) S + sum_i exp(G_last - G_i) k_i v_new_i^T
 *
 * Everything of size L x dk x dv is a gemm_f32 call; the exponentials are
 * one per token (exp(G_i), exp(G_last - G_i)) and one per pair m <= i
 * (exp(G_i - G_m), not split into exp(G_i) exp(-G_m), which can overflow
 * when the decay is strong). Products with a lower-triangular factor go
 * in strips of STRIP rows, each over the columns its rows can reach. */
void lilac_dn_chunk(const lilac_cpu_kernels *kern, float *S, const float *q, const float *k, const float *v,
                    int64_t ldx, const float *g, const float *beta, int L, int dk, int dv, float *o, int64_t ldo,
                    float *buf)
{
    const size_t n = LILAC_DN_CHUNK;
    float *G = buf, *eG = G + n, *ek = eG + n, *row = ek + n;
    float *A = row + n;                /* [L][L] k_i.k_m -> A -> T -> T diag(beta) */
    float *P = A + n * n;              /* [L][L] (q_i.k_m) exp(G_i - G_m), m <= i */
    float *Wc = P + n * n;             /* [L][L] -T diag(beta exp(G)) */
    float *Kt = Wc + n * n;            /* [dk][L] k^T */
    float *W = Kt + n * (size_t)dk;    /* [L][dk] -W; then [dk][L] k^T diag(exp(G_last - G)) */
    float *Qe = W + n * (size_t)dk;    /* [L][dk] diag(exp(G)) q */
    float *Vn = Qe + n * (size_t)dk;   /* [L][dv] U, then v_new */
    lilac_gemm_f32_fn gemm = kern->gemm_f32;

    for (int i = 0; i < L; i++)
        G[i] = (i ? G[i - 1] : 0.0f) + g[i];
    float gl = G[L - 1];
    for (int i = 0; i < L; i++) {
        eG[i] = expf(G[i]);
        ek[i] = expf(gl - G[i]);
    }
    for (int i = 0; i < L; i++)
        for (int d = 0; d < dk; d++)
            Kt[(size_t)d * L + i] = k[i * ldx + d];

    /* k_i.k_m and q_i.k_m for m <= i (a strip also computes a few m > i,
     * cleared below) */
    for (int i0 = 0; i0 < L; i0 += STRIP) {
        int mr = imin(STRIP, L - i0), nc = imin(L, i0 + STRIP);
        gemm(mr, nc, dk, k + i0 * ldx, ldx, Kt, L, A + (size_t)i0 * L, L, false);
        gemm(mr, nc, dk, q + i0 * ldx, ldx, Kt, L, P + (size_t)i0 * L, L, false);
    }
    for (int i = 0; i < L; i++) {
        float *Ai = A + (size_t)i * L, *Pi = P + (size_t)i * L;
        for (int m = 0; m < L; m++) {
            if (m <= i) {
                float d = expf(G[i] - G[m]);
                Pi[m] *= d;
                Ai[m] = m < i ? -beta[i] * Ai[m] * d : 0.0f;
            } else {
                Ai[m] = Pi[m] = 0.0f;
            }
        }
    }
    /* forward substitution, T = (I - A)^-1 row by row: row i of T below
     * the diagonal is A_i + sum_{m<r<i} A_ir T_r (rows r < i already T) */
    for (int i = 1; i < L; i++) {
        float *Ai = A + (size_t)i * L;
        memcpy(row, Ai, (size_t)i * sizeof(float));
        for (int r = 1; r < i; r++) {
            float a = Ai[r];
            const float *Tr = A + (size_t)r * L;
            for (int m = 0; m < r; m++)
                row[m] += a * Tr[m];
        }
        memcpy(Ai, row, (size_t)i * sizeof(float));
    }
    for (int i = 0; i < L; i++) {
        float *Ai = A + (size_t)i * L, *Wi = Wc + (size_t)i * L;
        Ai[i] = 1.0f;
        for (int m = 0; m <= i; m++) {
            Ai[m] *= beta[m];
            Wi[m] = -(Ai[m] * eG[m]);
        }
        for (int m = i + 1; m < L; m++)
            Wi[m] = 0.0f;
    }
    /* U = T diag(beta) V;  -W = -T diag(beta exp(G)) K */
    for (int i0 = 0; i0 < L; i0 += STRIP) {
        int mr = imin(STRIP, L - i0), kc = imin(L, i0 + STRIP);
        gemm(mr, dv, kc, A + (size_t)i0 * L, L, v, ldx, Vn + (size_t)i0 * dv, dv, false);
        gemm(mr, dk, kc, Wc + (size_t)i0 * L, L, k, ldx, W + (size_t)i0 * dk, dk, false);
    }
    /* v_new = U - W S */
    gemm(L, dv, dk, W, dk, S, dv, Vn, dv, true);
    /* o = diag(exp(G)) Q S + P v_new */
    for (int i = 0; i < L; i++)
        for (int d = 0; d < dk; d++)
            Qe[(size_t)i * dk + d] = q[i * ldx + d] * eG[i];
    gemm(L, dv, dk, Qe, dk, S, dv, o, ldo, false);
    for (int i0 = 0; i0 < L; i0 += STRIP) {
        int mr = imin(STRIP, L - i0), kc = imin(L, i0 + STRIP);
        gemm(mr, dv, kc, P + (size_t)i0 * L, L, Vn, dv, o + i0 * ldo, ldo, true);
    }
    /* S = exp(G_last) S + K'^T v_new, K' = diag(exp(G_last - G)) K */
    float *Kd = W;
    for (int d = 0; d < dk; d++)
        for (int i = 0; i < L; i++)
            Kd[(size_t)d * L + i] = Kt[(size_t)d * L + i] * ek[i];
    float el = eG[L - 1];
    for (size_t e = 0; e < (size_t)dk * dv; e++)
        S[e] *= el;
    gemm(dk, dv, L, Kd, L, Vn, dv, S, dv, true);
}
