/* The scalar oracles of the fast path (qfast.h): the activation quantizer
 * and one dot product per block type. Each weight block is decoded to its
 * integer quants in value order (the order of quant_scalar.c's
 * dequantizers), each weight group's integer sum with the activations'
 * 16-bit Q is formed exactly in int32, and only then are the float32
 * scales applied. The SIMD versions do the same integer math in other
 * registers. */
#include <float.h>
#include <math.h>

#include "format/dtype.h"

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qfast.h"
#include "kernels/cpu/quant.h"

int lilac_qx_layout(int type)
{
    return type == LILAC_Q4_K || type == LILAC_Q5_K ? LILAC_QX_KQ : LILAC_QX_NATURAL;
}

void lilac_qx_quantize_scalar(const float *x, int64_t n, const lilac_qx *q)
{
    for (int64_t b = 0; b < n / LILAC_QX_BLOCK; b++) {
        const float *xb = x + b * LILAC_QX_BLOCK;
        float amax = 0;
        int finite = 1;
        for (int i = 0; i < LILAC_QX_BLOCK; i++) {
            float a = fabsf(xb[i]);
            finite &= a <= FLT_MAX; /* false for NaN and infinities */
            amax = a > amax ? a : amax;
        }
        int32_t sum[2] = {0, 0};
        float unit = 0, id256 = 0;
        if (!finite) {
            unit = NAN; /* the block's products are NaN, as on the precise path */
        } else if (amax >= LILAC_QX_TINY) {
            const float d = amax / 127.0f, id = 127.0f / amax;
            id256 = id * 256.0f;
            unit = d * (1.0f / 256.0f);
        }
        for (int i = 0; i < LILAC_QX_BLOCK; i++) {
            int32_t Q = 0;
            if (id256 != 0) {
                Q = (int32_t)lrintf(xb[i] * id256); /* |Q| <= 32512 */
                if (((uint32_t)Q & 255u) == 128u)   /* keep lo off -128 */
                    Q -= Q > 0 ? 1 : -1;
            }
            const int32_t h = (Q + 128 + 32768) / 256 - 128; /* floor((Q + 128) / 256) */
            const int64_t at = lilac_qx_pos(q->layout, b * LILAC_QX_BLOCK + i);
            q->hi[at] = (int8_t)h;
            q->lo[at] = (int8_t)(Q - 256 * h);
            sum[i / 16] += Q;
        }
        q->unit[b] = unit;
        q->sum16[2 * b] = sum[0];
        q->sum16[2 * b + 1] = sum[1];
        q->sum32[b] = sum[0] + sum[1];
    }
}

/* Q of value i. */
static inline int32_t qx_at(const lilac_qx *x, int64_t i)
{
    const int64_t at = lilac_qx_pos(x->layout, i);
    return 256 * (int32_t)x->hi[at] + (int32_t)x->lo[at];
}

/* sum of q[l] * Q over m values from value `at` */
static inline int32_t isum_u8(const uint8_t *q, const lilac_qx *x, int64_t at, int m)
{
    int32_t s = 0;
    for (int l = 0; l < m; l++)
        s += (int32_t)q[l] * qx_at(x, at + l);
    return s;
}

float lilac_qdot_q8_0_scalar(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q8_0 *w = row;
    float s = 0;
    for (int64_t b = 0; b < n / LILAC_QK8_0; b++) {
        int32_t is = 0;
        for (int l = 0; l < LILAC_QK8_0; l++)
            is += (int32_t)w[b].qs[l] * qx_at(x, b * LILAC_QK8_0 + l);
        s += (lilac_f16_to_f32(w[b].d) * x->unit[b]) * (float)is;
    }
    return s;
}

float lilac_qdot_q4_0_scalar(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q4_0 *w = row;
    float s = 0;
    for (int64_t b = 0; b < n / LILAC_QK4_0; b++) {
        int32_t is = 0;
        for (int l = 0; l < 16; l++) {
            is += ((int32_t)(w[b].qs[l] & 0xF) - 8) * qx_at(x, b * LILAC_QK4_0 + l);
            is += ((int32_t)(w[b].qs[l] >> 4) - 8) * qx_at(x, b * LILAC_QK4_0 + 16 + l);
        }
        s += (lilac_f16_to_f32(w[b].d) * x->unit[b]) * (float)is;
    }
    return s;
}

/* The 4- or 5-bit quants of a Q4_K/Q5_K block in value order. */
static void kq_quants(const uint8_t *qs, const uint8_t *qh, uint8_t q[LILAC_QK_K])
{
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
            q[64 * j + l] = qs[32 * j + l] & 0xF;
            q[64 * j + 32 + l] = qs[32 * j + l] >> 4;
            if (qh) {
                q[64 * j + l] |= (uint8_t)(((qh[l] >> (2 * j)) & 1) << 4);
                q[64 * j + 32 + l] |= (uint8_t)(((qh[l] >> (2 * j + 1)) & 1) << 4);
            }
        }
}

/* One Q4_K/Q5_K super-block: 8 groups of 32, value = d*sc*q - dmin*m. */
static float kq_block(uint16_t dh, uint16_t dminh, const uint8_t *scales, const uint8_t q[LILAC_QK_K],
                      const lilac_qx *x, int64_t at)
{
    const float d = lilac_f16_to_f32(dh), dmin = lilac_f16_to_f32(dminh);
    uint8_t sc[8], m[8];
    lilac_kq_scales(scales, sc, m);
    float s = 0;
    for (int g = 0; g < 8; g++) {
        const int64_t a = at + 32 * g;
        const int32_t is = isum_u8(q + 32 * g, x, a, 32);
        const int32_t ms = x->sum32[a / 32];
        const float u = x->unit[a / 32];
        s += (d * (float)sc[g] * u) * (float)is - (dmin * (float)m[g] * u) * (float)ms;
    }
    return s;
}

float lilac_qdot_q4_K_scalar(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q4_K *w = row;
    uint8_t q[LILAC_QK_K];
    float s = 0;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        kq_quants(w[i].qs, NULL, q);
        s += kq_block(w[i].d, w[i].dmin, w[i].scales, q, x, i * LILAC_QK_K);
    }
    return s;
}

void lilac_qdotn_q4_K_scalar(const void *row, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const block_q4_K *w = row;
    uint8_t q[LILAC_QK_K];
    float s[LILAC_QDOT_NT] = {0};
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        kq_quants(w[i].qs, NULL, q); /* once for all rows */
        for (int t = 0; t < nt; t++)
            s[t] += kq_block(w[i].d, w[i].dmin, w[i].scales, q, &x[t], i * LILAC_QK_K);
    }
    for (int t = 0; t < nt; t++)
        out[t] = s[t];
}

float lilac_qdot_q5_K_scalar(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q5_K *w = row;
    uint8_t q[LILAC_QK_K];
    float s = 0;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        kq_quants(w[i].qs, w[i].qh, q);
        s += kq_block(w[i].d, w[i].dmin, w[i].scales, q, x, i * LILAC_QK_K);
    }
    return s;
}

/* Q6_K: the unsigned 6-bit quants (value + 32) in value order; group
 * v / 16 takes scale v / 16. */
void lilac_q6_K_quants(const block_q6_K *b, uint8_t q[LILAC_QK_K])
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        uint8_t *y = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            y[l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            y[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            y[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            y[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

/* One Q6_K super-block against one activation row. */
static float q6_block(const block_q6_K *b, const uint8_t q[LILAC_QK_K], const lilac_qx *x, int64_t at)
{
    const float d = lilac_f16_to_f32(b->d);
    float sb = 0;
    for (int k = 0; k < 16; k++) {
        const int64_t a = at + 16 * k;
        /* sum (q - 32) * Q: exact in int32 */
        const int32_t is = isum_u8(q + 16 * k, x, a, 16) - 32 * x->sum16[a / 16];
        sb += (d * (float)b->scales[k] * x->unit[a / 32]) * (float)is;
    }
    return sb;
}

float lilac_qdot_q6_K_scalar(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q6_K *w = row;
    uint8_t q[LILAC_QK_K];
    float s = 0;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        lilac_q6_K_quants(&w[i], q);
        s += q6_block(&w[i], q, x, i * LILAC_QK_K);
    }
    return s;
}

void lilac_qdotn_q6_K_scalar(const void *row, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const block_q6_K *w = row;
    uint8_t q[LILAC_QK_K];
    float s[LILAC_QDOT_NT] = {0};
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        lilac_q6_K_quants(&w[i], q); /* once for all rows */
        for (int t = 0; t < nt; t++)
            s[t] += q6_block(&w[i], q, &x[t], i * LILAC_QK_K);
    }
    for (int t = 0; t < nt; t++)
        out[t] = s[t];
}
