/* Scalar dequantizers and dot products of the GGUF block types: the
 * oracles of the SIMD versions. Each block is decoded with ggml-quants.c's
 * float32 operations (dequantize_row_*), in its order, so the values match
 * llama.cpp bit for bit. (The products are exact in float32 anyway: an
 * 11-bit fp16 mantissa times integers of at most 13 bits together; only the
 * K-quant "- m" rounds. Each product is still its own statement, so a
 * compiler that contracts expressions has nothing to fuse.) */
#include "kernels/cpu/quant.h"

#include "kernels/cpu/cpu.h"

static void block_q8_0_f32(const block_q8_0 *b, float *y)
{
    const float d = lilac_f16_to_f32(b->d);
    for (int j = 0; j < LILAC_QK8_0; j++)
        y[j] = (float)b->qs[j] * d;
}

static void block_q4_0_f32(const block_q4_0 *b, float *y)
{
    const float d = lilac_f16_to_f32(b->d);
    for (int j = 0; j < LILAC_QK4_0 / 2; j++) {
        const int x0 = (b->qs[j] & 0x0F) - 8;
        const int x1 = (b->qs[j] >> 4) - 8;
        y[j] = (float)x0 * d;
        y[j + LILAC_QK4_0 / 2] = (float)x1 * d;
    }
}

static void block_q4_K_f32(const block_q4_K *b, float *y)
{
    const float d = lilac_f16_to_f32(b->d);
    const float dmin = lilac_f16_to_f32(b->dmin);
    const uint8_t *q = b->qs;
    uint8_t sc[8], m[8];
    lilac_kq_scales(b->scales, sc, m);
    for (int j = 0; j < 4; j++, q += 32) {
        const float d1 = d * (float)sc[2 * j], m1 = dmin * (float)m[2 * j];
        const float d2 = d * (float)sc[2 * j + 1], m2 = dmin * (float)m[2 * j + 1];
        for (int l = 0; l < 32; l++) {
            float v = d1 * (float)(q[l] & 0xF);
            *y++ = v - m1;
        }
        for (int l = 0; l < 32; l++) {
            float v = d2 * (float)(q[l] >> 4);
            *y++ = v - m2;
        }
    }
}

static void block_q5_K_f32(const block_q5_K *b, float *y)
{
    const float d = lilac_f16_to_f32(b->d);
    const float dmin = lilac_f16_to_f32(b->dmin);
    const uint8_t *ql = b->qs, *qh = b->qh;
    uint8_t sc[8], m[8];
    lilac_kq_scales(b->scales, sc, m);
    unsigned u1 = 1, u2 = 2;
    for (int j = 0; j < 4; j++, ql += 32, u1 <<= 2, u2 <<= 2) {
        const float d1 = d * (float)sc[2 * j], m1 = dmin * (float)m[2 * j];
        const float d2 = d * (float)sc[2 * j + 1], m2 = dmin * (float)m[2 * j + 1];
        for (int l = 0; l < 32; l++) {
            float v = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0));
            *y++ = v - m1;
        }
        for (int l = 0; l < 32; l++) {
            float v = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0));
            *y++ = v - m2;
        }
    }
}

static void block_q6_K_f32(const block_q6_K *b, float *y)
{
    const float d = lilac_f16_to_f32(b->d);
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    for (int n = 0; n < LILAC_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            /* ggml: d * sc[is] * q, i.e. (d * sc) * q */
            const float s1 = d * (float)sc[is + 0], s2 = d * (float)sc[is + 2];
            const float s3 = d * (float)sc[is + 4], s4 = d * (float)sc[is + 6];
            y[l + 0] = s1 * (float)q1;
            y[l + 32] = s2 * (float)q2;
            y[l + 64] = s3 * (float)q3;
            y[l + 96] = s4 * (float)q4;
        }
    }
}

/* A row decoder and a dot product for each type, from its block decoder:
 * the dot sums each block in float32, then adds the block sums. */
#define QUANT_ROW_FNS(NAME, BLOCK, QK)                                          \
    void lilac_dequant_##NAME(const void *row, float *out, int64_t n)          \
    {                                                                          \
        const BLOCK *b = row;                                                  \
        for (int64_t i = 0; i < n / (QK); i++)                                 \
            BLOCK##_f32(&b[i], out + i * (QK));                                \
    }                                                                          \
    float lilac_dot_##NAME##_scalar(const void *row, const float *x, int64_t n) \
    {                                                                          \
        const BLOCK *b = row;                                                  \
        float w[QK], s = 0;                                                    \
        for (int64_t i = 0; i < n / (QK); i++) {                               \
            BLOCK##_f32(&b[i], w);                                             \
            const float *xb = x + i * (QK);                                    \
            float sb = 0;                                                      \
            for (int j = 0; j < (QK); j++)                                     \
                sb += w[j] * xb[j];                                            \
            s += sb;                                                           \
        }                                                                      \
        return s;                                                              \
    }

QUANT_ROW_FNS(q8_0, block_q8_0, LILAC_QK8_0)
QUANT_ROW_FNS(q4_0, block_q4_0, LILAC_QK4_0)
QUANT_ROW_FNS(q4_K, block_q4_K, LILAC_QK_K)
QUANT_ROW_FNS(q5_K, block_q5_K, LILAC_QK_K)
QUANT_ROW_FNS(q6_K, block_q6_K, LILAC_QK_K)
