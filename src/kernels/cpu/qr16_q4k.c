/* Q4_K in the 16-row interleaved layout (qr16.h): the repacking both
 * ways and the scalar oracle.
 *
 * The oracle's float steps are the ones every SIMD version takes, per row
 * and token, in this order (so they agree with it bit for bit, though the
 * tests only ask for float32 rounding):
 *   per super-block, a = sum_g sc[g] * (S[g] * unit[g]) and
 *                    b = sum_g m[g] * (unit[g] * sum32[g]), g = 0..7,
 *   then acc += d * a, acc -= dmin * b,
 * S[g] the exact integer sum of q * Q over group g. d and dmin multiply
 * once per super-block rather than once per group: with 16 rows in the
 * lanes the per-group steps are what competes with the integer
 * multiply-adds for the multiply pipes. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qr16.h"
#include "kernels/cpu/quant.h"

_Static_assert(sizeof(block_q4_Kx16) == 16 * sizeof(block_q4_K), "block_q4_Kx16 is 16 Q4_K blocks");

/* Column c (0..255) of a block_q4_K's nibbles: groups 2j and 2j + 1 are
 * the low and high nibbles of the same 32 bytes qs[32j ..]. */
static inline uint8_t q4k_at(const uint8_t *qs, int c)
{
    const int g = c / 32, t = c % 32;
    return (uint8_t)((qs[32 * (g / 2) + t] >> (4 * (g & 1))) & 0xF);
}

void lilac_qr16_pack_q4_K(const void *src, size_t row_bytes, int64_t n, void *dst)
{
    block_q4_Kx16 *out = dst;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        block_q4_Kx16 *o = &out[i];
        for (int r = 0; r < LILAC_QR16_ROWS; r++) {
            block_q4_K b;
            memcpy(&b, (const uint8_t *)src + (size_t)r * row_bytes + (size_t)i * sizeof b, sizeof b);
            o->d[r] = b.d;
            o->dmin[r] = b.dmin;
            for (int k = 0; k < 3; k++)
                memcpy(&o->scales[k][r], b.scales + 4 * k, 4);
            for (int g = 0; g < 8; g++)
                for (int p = 0; p < 4; p++)
                    for (int e = 0; e < 4; e++)
                        o->qs[g][p][4 * r + e] = (uint8_t)(q4k_at(b.qs, 32 * g + 4 * p + e) |
                                                           q4k_at(b.qs, 32 * g + 16 + 4 * p + e) << 4);
        }
    }
}

/* Column c of row r of an x16 block. */
static inline uint8_t q4kx16_at(const block_q4_Kx16 *b, int r, int c)
{
    const int g = c / 32, t = c % 32, p = (t % 16) / 4, e = t % 4;
    return (uint8_t)((b->qs[g][p][4 * r + e] >> (t < 16 ? 0 : 4)) & 0xF);
}

void lilac_qr16_unpack_q4_K(const void *src, int64_t n, void *dst, size_t row_bytes)
{
    const block_q4_Kx16 *in = src;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const block_q4_Kx16 *x = &in[i];
        for (int r = 0; r < LILAC_QR16_ROWS; r++) {
            block_q4_K b;
            b.d = x->d[r];
            b.dmin = x->dmin[r];
            for (int k = 0; k < 3; k++)
                memcpy(b.scales + 4 * k, &x->scales[k][r], 4);
            for (int j = 0; j < 4; j++)
                for (int t = 0; t < 32; t++)
                    b.qs[32 * j + t] =
                        (uint8_t)(q4kx16_at(x, r, 64 * j + t) | q4kx16_at(x, r, 64 * j + 32 + t) << 4);
            memcpy((uint8_t *)dst + (size_t)r * row_bytes + (size_t)i * sizeof b, &b, sizeof b);
        }
    }
}

void lilac_qr16_q4_K_scalar(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const block_q4_Kx16 *blk = w;
    for (int t = 0; t < nt; t++) {
        const lilac_qx *xt = &x[t];
        float acc[LILAC_QR16_ROWS] = {0};
        for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
            const block_q4_Kx16 *b = &blk[i];
            for (int r = 0; r < LILAC_QR16_ROWS; r++) {
                uint8_t scales[LILAC_K_SCALE_SIZE], sc[8], m[8];
                for (int k = 0; k < 3; k++)
                    memcpy(scales + 4 * k, &b->scales[k][r], 4);
                lilac_kq_scales(scales, sc, m);
                float a = 0, bm = 0;
                for (int g = 0; g < 8; g++) {
                    const int64_t blk32 = 8 * i + g;
                    int32_t S = 0; /* |S| <= 32 * 15 * 32512: exact */
                    for (int c = 0; c < 32; c++) {
                        const int64_t v = 256 * i + 32 * g + c; /* NATURAL layout */
                        S += (int32_t)q4kx16_at(b, r, 32 * g + c) * (256 * (int32_t)xt->hi[v] + (int32_t)xt->lo[v]);
                    }
                    const float u = xt->unit[blk32];
                    a = fmaf((float)sc[g], (float)S * u, a);
                    bm = fmaf((float)m[g], u * (float)xt->sum32[blk32], bm);
                }
                acc[r] = fmaf(lilac_f16_to_f32(b->d[r]), a, acc[r]);
                acc[r] = fmaf(-lilac_f16_to_f32(b->dmin[r]), bm, acc[r]);
            }
        }
        for (int r = 0; r < LILAC_QR16_ROWS; r++)
            out[t * LILAC_QR16_ROWS + r] = acc[r];
    }
}
