/* The scalar attention kernels (kernels/cpu/attn.h): plain loops, the
 * oracle for the SIMD versions. */
#include <string.h>

#include "kernels/cpu/attn.h"
#include "kernels/cpu/cpu.h"

static inline float kv_at(const void *row, int d, int f16)
{
    return f16 ? lilac_f16_to_f32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}

static void attn(const lilac_attn_in *a, float *o, float *m, float *l, int f16)
{
    int g = a->g, hd = a->hd;
    size_t es = f16 ? 2 : 4;
    float S[LILAC_ATTN_MAX_G][LILAC_ATTN_BLOCK], alpha[LILAC_ATTN_MAX_G];
    memset(o, 0, (size_t)g * hd * sizeof(float));
    for (int i = 0; i < g; i++)
        m[i] = -INFINITY, l[i] = 0.0f;
    for (int j0 = 0; j0 < a->n; j0 += LILAC_ATTN_BLOCK) {
        int nb = a->n - j0 < LILAC_ATTN_BLOCK ? a->n - j0 : LILAC_ATTN_BLOCK;
        for (int j = 0; j < nb; j++) {
            const void *k = (const char *)a->k + (size_t)(j0 + j) * (size_t)a->stride * es;
            for (int i = 0; i < g; i++) {
                const float *q = a->q + (size_t)i * a->q_step;
                float s = 0;
                for (int d = 0; d < hd; d++)
                    s += q[d] * kv_at(k, d, f16);
                S[i][j] = s * a->scale;
            }
        }
        for (int i = 0; i < g; i++) {
            float bm = S[i][0];
            for (int j = 1; j < nb; j++)
                bm = S[i][j] > bm ? S[i][j] : bm;
            float mn = m[i] > bm ? m[i] : bm, sum = 0;
            for (int j = 0; j < nb; j++) {
                S[i][j] = lilac_attn_exp(S[i][j] - mn);
                sum += S[i][j];
            }
            alpha[i] = lilac_attn_exp(m[i] - mn);
            l[i] = l[i] * alpha[i] + sum;
            m[i] = mn;
            for (int d = 0; d < hd; d++)
                o[(size_t)i * hd + d] *= alpha[i];
        }
        for (int j = 0; j < nb; j++) {
            const void *v = (const char *)a->v + (size_t)(j0 + j) * (size_t)a->stride * es;
            for (int i = 0; i < g; i++)
                for (int d = 0; d < hd; d++)
                    o[(size_t)i * hd + d] += S[i][j] * kv_at(v, d, f16);
        }
    }
}

void lilac_attn_f32_scalar(const lilac_attn_in *a, float *o, float *m, float *l) { attn(a, o, m, l, 0); }
void lilac_attn_f16_scalar(const lilac_attn_in *a, float *o, float *m, float *l) { attn(a, o, m, l, 1); }
