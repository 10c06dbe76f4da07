/* qr16 Q6_K (qr16.h): the repacking to and from the 16-row interleaved
 * layout, and the scalar oracle of its dot product. */
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qr16.h"
#include "kernels/cpu/quant.h"

_Static_assert(sizeof(block_q6_Kx16) == 16 * sizeof(block_q6_K), "block_q6_Kx16 is 16 block_q6_K");

/* The inverse of lilac_q6_K_quants (quant.h). */
static void q6_put(const uint8_t q[LILAC_QK_K], block_q6_K *b)
{
    for (int h = 0; h < 2; h++) {
        uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        const uint8_t *y = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((y[l] & 0xF) | (y[l + 64] & 0xF) << 4);
            ql[l + 32] = (uint8_t)((y[l + 32] & 0xF) | (y[l + 96] & 0xF) << 4);
            qh[l] = (uint8_t)((y[l] >> 4) | (y[l + 32] >> 4) << 2 | (y[l + 64] >> 4) << 4 | (y[l + 96] >> 4) << 6);
        }
    }
}

/* q of row r, column c (0..255) of an x16 block */
static inline uint8_t x16_q(const block_q6_Kx16 *b, int r, int c)
{
    const int g = c / 16, j = c % 16, lane = 4 * r + j % 4;
    if (j < 12)
        return b->q[g][j / 4][lane] & 0x3F;
    uint8_t v = 0;
    for (int k = 0; k < 3; k++)
        v |= (uint8_t)((b->q[g][k][lane] >> 6) << (2 * k));
    return v;
}

void lilac_qr16_pack_q6_K(const void *src, size_t row_bytes, int64_t n, void *dst)
{
    block_q6_Kx16 *out = dst;
    uint8_t q[LILAC_QK_K];
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        block_q6_Kx16 *o = &out[i];
        for (int r = 0; r < LILAC_QR16_ROWS; r++) {
            const block_q6_K *b = (const block_q6_K *)(const void *)((const uint8_t *)src + (size_t)r * row_bytes) + i;
            lilac_q6_K_quants(b, q);
            o->d[r] = b->d;
            for (int g = 0; g < 16; g++) {
                o->sc[g][r] = b->scales[g];
                for (int j = 0; j < 4; j++) {
                    const uint8_t q3 = q[16 * g + 12 + j];
                    for (int k = 0; k < 3; k++)
                        o->q[g][k][4 * r + j] = (uint8_t)(q[16 * g + 4 * k + j] | ((q3 >> (2 * k)) & 3) << 6);
                }
            }
        }
    }
}

void lilac_qr16_unpack_q6_K(const void *src, int64_t n, void *dst, size_t row_bytes)
{
    const block_q6_Kx16 *in = src;
    uint8_t q[LILAC_QK_K];
    for (int64_t i = 0; i < n / LILAC_QK_K; i++)
        for (int r = 0; r < LILAC_QR16_ROWS; r++) {
            block_q6_K *b = (block_q6_K *)(void *)((uint8_t *)dst + (size_t)r * row_bytes) + i;
            for (int c = 0; c < LILAC_QK_K; c++)
                q[c] = x16_q(&in[i], r, c);
            q6_put(q, b);
            b->d = in[i].d[r];
            for (int g = 0; g < 16; g++)
                b->scales[g] = in[i].sc[g][r];
        }
}

void lilac_qr16_q6_K_scalar(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const block_q6_Kx16 *blk = w;
    for (int t = 0; t < nt; t++) {
        const lilac_qx *xt = &x[t];
        for (int r = 0; r < LILAC_QR16_ROWS; r++) {
            float s = 0;
            for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
                const block_q6_Kx16 *b = &blk[i];
                const float d = lilac_f16_to_f32(b->d[r]);
                for (int g = 0; g < 16; g++) {
                    const int64_t at = LILAC_QK_K * i + 16 * g; /* NATURAL: value v at v */
                    int32_t is = 0;
                    for (int c = 0; c < 16; c++)
                        is += (int32_t)x16_q(b, r, 16 * g + c) * (256 * (int32_t)xt->hi[at + c] + xt->lo[at + c]);
                    is -= 32 * xt->sum16[at / 16]; /* the offset: (q - 32) * Q, exact */
                    s += (d * (float)b->sc[g][r] * xt->unit[at / 32]) * (float)is;
                }
            }
            out[t * LILAC_QR16_ROWS + r] = s;
        }
    }
}
