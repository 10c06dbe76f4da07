/* Q4_K and Q6_K, 16 rows interleaved (qr16.h), NEON + dotprod.
 *
 * A NEON register has 4 lanes of 32 bits, so the 16 rows are 4 registers
 * ("quarters", rows 4j .. 4j + 3 in register j): bytes 16j .. 16j + 15 of
 * each 64-byte weight run. vdotq_laneq_s32(acc, w, x, k) adds to each
 * row's lane its 4 weight bytes times the 4 activation bytes of lane k of
 * x: the broadcast the layout is made for. Weights (0..15, 0..63) fit int8
 * and activation digits are -127..127, so signed sdot is exact. Integer
 * sums per group are exact in int32 as in the scalar oracles, and the
 * float steps per row and token are the oracles' (qr16_q4k.c,
 * qr16_q6k.c), in their order, so each token's result does not depend on
 * nt or on the other tokens. */
#include <arm_neon.h>
#include <stddef.h>

#include "kernels/cpu/qr16.h"
#include "kernels/cpu/quant.h"

#define QR16_INLINE static inline __attribute__((always_inline))

/* the f16 values of rows 4j .. 4j + 3, exactly */
QR16_INLINE float32x4_t load_f16x4(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

/* byte k of each 32-bit lane, as float (shift counts must be constants) */
#define BYTE_F(v, k) vcvtq_f32_u32(vandq_u32(vshrq_n_u32((v), 8 * (k)), vdupq_n_u32(0xFF)))

/* ---- Q4_K ---- */

/* (H << 8) + L = sum q * Q over one group, for the 4 rows of quarter j */
QR16_INLINE int32x4_t q4k_group(const int8x16_t wl[4], const int8x16_t wh[4], int8x16_t h0, int8x16_t h1,
                                int8x16_t l0, int8x16_t l1)
{
    /* low nibbles of register p are columns 4p .. 4p + 3 (lane p of the
     * first 16 digits), high nibbles 16 + 4p .. (lane p of the next 16) */
    int32x4_t H = vdupq_n_s32(0), L = vdupq_n_s32(0);
    H = vdotq_laneq_s32(H, wl[0], h0, 0);
    L = vdotq_laneq_s32(L, wl[0], l0, 0);
    H = vdotq_laneq_s32(H, wh[0], h1, 0);
    L = vdotq_laneq_s32(L, wh[0], l1, 0);
    H = vdotq_laneq_s32(H, wl[1], h0, 1);
    L = vdotq_laneq_s32(L, wl[1], l0, 1);
    H = vdotq_laneq_s32(H, wh[1], h1, 1);
    L = vdotq_laneq_s32(L, wh[1], l1, 1);
    H = vdotq_laneq_s32(H, wl[2], h0, 2);
    L = vdotq_laneq_s32(L, wl[2], l0, 2);
    H = vdotq_laneq_s32(H, wh[2], h1, 2);
    L = vdotq_laneq_s32(L, wh[2], l1, 2);
    H = vdotq_laneq_s32(H, wl[3], h0, 3);
    L = vdotq_laneq_s32(L, wl[3], l0, 3);
    H = vdotq_laneq_s32(H, wh[3], h1, 3);
    L = vdotq_laneq_s32(L, wh[3], l1, 3);
    return vaddq_s32(vshlq_n_s32(H, 8), L);
}

QR16_INLINE void qr16_q4k(const block_q4_Kx16 *blk, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const uint32x4_t m4 = vdupq_n_u32(0x0F0F0F0Fu), k3f = vdupq_n_u32(0x3F3F3F3Fu),
                     k30 = vdupq_n_u32(0x30303030u);
    const uint8x16_t n4 = vdupq_n_u8(0x0F);
    float32x4_t acc[LILAC_QR16_NT][4];
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 4; j++)
            acc[t][j] = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const block_q4_Kx16 *b = &blk[i];
        /* ggml's word trick on 4 rows at a time: byte g of sc03 / sc47 is
         * the scale of group g / g + 4, of m03 / m47 the minimum */
        float32x4_t scf[8][4], mf[8][4];
        for (int j = 0; j < 4; j++) {
            const uint32x4_t s0 = vld1q_u32(b->scales[0] + 4 * j), s1 = vld1q_u32(b->scales[1] + 4 * j),
                             s2 = vld1q_u32(b->scales[2] + 4 * j);
            const uint32x4_t sc03 = vandq_u32(s0, k3f), m03 = vandq_u32(s1, k3f);
            const uint32x4_t sc47 = vorrq_u32(vandq_u32(s2, m4), vandq_u32(vshrq_n_u32(s0, 2), k30));
            const uint32x4_t m47 = vorrq_u32(vandq_u32(vshrq_n_u32(s2, 4), m4), vandq_u32(vshrq_n_u32(s1, 2), k30));
            scf[0][j] = BYTE_F(sc03, 0), scf[1][j] = BYTE_F(sc03, 1);
            scf[2][j] = BYTE_F(sc03, 2), scf[3][j] = BYTE_F(sc03, 3);
            scf[4][j] = BYTE_F(sc47, 0), scf[5][j] = BYTE_F(sc47, 1);
            scf[6][j] = BYTE_F(sc47, 2), scf[7][j] = BYTE_F(sc47, 3);
            mf[0][j] = BYTE_F(m03, 0), mf[1][j] = BYTE_F(m03, 1);
            mf[2][j] = BYTE_F(m03, 2), mf[3][j] = BYTE_F(m03, 3);
            mf[4][j] = BYTE_F(m47, 0), mf[5][j] = BYTE_F(m47, 1);
            mf[6][j] = BYTE_F(m47, 2), mf[7][j] = BYTE_F(m47, 3);
        }

        float32x4_t a[LILAC_QR16_NT][4];
        for (int t = 0; t < nt; t++)
            for (int j = 0; j < 4; j++)
                a[t][j] = vdupq_n_f32(0);
        for (int g = 0; g < 8; g++) {
            /* weights of quarter j, register p: wl (low nibbles), wh (high) */
            int8x16_t wl[4][4], wh[4][4];
            for (int j = 0; j < 4; j++)
                for (int p = 0; p < 4; p++) {
                    const uint8x16_t v = vld1q_u8(b->qs[g][p] + 16 * j);
                    wl[j][p] = vreinterpretq_s8_u8(vandq_u8(v, n4));
                    wh[j][p] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
                }
            for (int t = 0; t < nt; t++) {
                const int8_t *xh = x[t].hi + 256 * i + 32 * g, *xl = x[t].lo + 256 * i + 32 * g;
                const int8x16_t h0 = vld1q_s8(xh), h1 = vld1q_s8(xh + 16), l0 = vld1q_s8(xl), l1 = vld1q_s8(xl + 16);
                const float u = x[t].unit[8 * i + g];
                for (int j = 0; j < 4; j++) {
                    const int32x4_t S = q4k_group(wl[j], wh[j], h0, h1, l0, l1);
                    /* a = fmaf(sc, S * u, a), as the oracle */
                    a[t][j] = vfmaq_f32(a[t][j], scf[g][j], vmulq_n_f32(vcvtq_f32_s32(S), u));
                }
            }
        }
        const float32x4_t d[4] = {load_f16x4(b->d), load_f16x4(b->d + 4), load_f16x4(b->d + 8),
                                  load_f16x4(b->d + 12)};
        const float32x4_t dmin[4] = {load_f16x4(b->dmin), load_f16x4(b->dmin + 4), load_f16x4(b->dmin + 8),
                                     load_f16x4(b->dmin + 12)};
        for (int t = 0; t < nt; t++) {
            /* the minimums: u * sum32 per group, rounded as the oracle does */
            float c[8];
            for (int g = 0; g < 8; g++)
                c[g] = x[t].unit[8 * i + g] * (float)x[t].sum32[8 * i + g];
            for (int j = 0; j < 4; j++) {
                float32x4_t bm = vdupq_n_f32(0);
                for (int g = 0; g < 8; g++)
                    bm = vfmaq_n_f32(bm, mf[g][j], c[g]);
                acc[t][j] = vfmaq_f32(acc[t][j], d[j], a[t][j]);
                acc[t][j] = vfmsq_f32(acc[t][j], dmin[j], bm); /* = fmaf(-dmin, bm, acc) */
            }
        }
    }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 4; j++)
            vst1q_f32(out + LILAC_QR16_ROWS * t + 4 * j, acc[t][j]);
}

void lilac_qr16_q4_K_neon(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    /* one copy per nt, so the token loops unroll */
    switch (nt) {
    case 8: qr16_q4k(w, x, 8, n, out); break;
    case 7: qr16_q4k(w, x, 7, n, out); break;
    case 6: qr16_q4k(w, x, 6, n, out); break;
    case 5: qr16_q4k(w, x, 5, n, out); break;
    case 4: qr16_q4k(w, x, 4, n, out); break;
    case 3: qr16_q4k(w, x, 3, n, out); break;
    case 2: qr16_q4k(w, x, 2, n, out); break;
    default: qr16_q4k(w, x, 1, n, out); break;
    }
}

/* ---- Q6_K ---- */

/* The four chunk registers of quarter j of group q (qr16.h): chunks 0..2
 * are bits 0..5 of the three registers; chunk 3 gathers their bits 6, 7. */
QR16_INLINE void q6k_unpack(const uint8_t *q, int j, int8x16_t c[4])
{
    const uint8x16_t m3f = vdupq_n_u8(0x3F), m0c = vdupq_n_u8(0x0C), m30 = vdupq_n_u8(0x30);
    const uint8x16_t r0 = vld1q_u8(q + 16 * j), r1 = vld1q_u8(q + 64 + 16 * j), r2 = vld1q_u8(q + 128 + 16 * j);
    c[0] = vreinterpretq_s8_u8(vandq_u8(r0, m3f));
    c[1] = vreinterpretq_s8_u8(vandq_u8(r1, m3f));
    c[2] = vreinterpretq_s8_u8(vandq_u8(r2, m3f));
    c[3] = vreinterpretq_s8_u8(
        vorrq_u8(vshrq_n_u8(r0, 6), vorrq_u8(vandq_u8(vshrq_n_u8(r1, 4), m0c), vandq_u8(vshrq_n_u8(r2, 2), m30))));
}

/* sum (q - 32) * Q of one group (16 columns, digits h, l: chunk k in lane
 * k) for 4 rows; off = -32 * sum16 of the group. Exact in int32. */
QR16_INLINE int32x4_t q6k_group(const int8x16_t c[4], int8x16_t h, int8x16_t l, int32_t off)
{
    int32x4_t H = vdotq_laneq_s32(vdupq_n_s32(0), c[0], h, 0);
    int32x4_t L = vdotq_laneq_s32(vdupq_n_s32(off), c[0], l, 0);
    H = vdotq_laneq_s32(H, c[1], h, 1);
    L = vdotq_laneq_s32(L, c[1], l, 1);
    H = vdotq_laneq_s32(H, c[2], h, 2);
    L = vdotq_laneq_s32(L, c[2], l, 2);
    H = vdotq_laneq_s32(H, c[3], h, 3);
    L = vdotq_laneq_s32(L, c[3], l, 3);
    return vaddq_s32(vshlq_n_s32(H, 8), L);
}

/* Per group, as the oracle: s += ((d * sc) * unit) * is, each product
 * and the sum rounded apart (d * sc is exact: an f16 times an int8). */
QR16_INLINE void qr16_q6k(const block_q6_Kx16 *blk, const lilac_qx *x, int nt, int64_t n, float *out)
{
    float32x4_t acc[LILAC_QR16_NT][4];
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 4; j++)
            acc[t][j] = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const block_q6_Kx16 *b = &blk[i];
        const float32x4_t d[4] = {load_f16x4(b->d), load_f16x4(b->d + 4), load_f16x4(b->d + 8),
                                  load_f16x4(b->d + 12)};
        for (int g = 0; g < 16; g++) {
            /* d * sc of the 16 rows */
            const int8x16_t sc8 = vld1q_s8(b->sc[g]);
            const int16x8_t sl = vmovl_s8(vget_low_s8(sc8)), sh = vmovl_s8(vget_high_s8(sc8));
            const float32x4_t ds[4] = {vmulq_f32(d[0], vcvtq_f32_s32(vmovl_s16(vget_low_s16(sl)))),
                                       vmulq_f32(d[1], vcvtq_f32_s32(vmovl_s16(vget_high_s16(sl)))),
                                       vmulq_f32(d[2], vcvtq_f32_s32(vmovl_s16(vget_low_s16(sh)))),
                                       vmulq_f32(d[3], vcvtq_f32_s32(vmovl_s16(vget_high_s16(sh))))};
            int8x16_t c[4][4];
            for (int j = 0; j < 4; j++)
                q6k_unpack(b->q[g][0], j, c[j]);
            for (int t = 0; t < nt; t++) {
                const int64_t at = LILAC_QK_K * i + 16 * g; /* NATURAL: value v at v */
                const int8x16_t h = vld1q_s8(x[t].hi + at), l = vld1q_s8(x[t].lo + at);
                const int32_t off = -32 * x[t].sum16[at / 16];
                const float u = x[t].unit[at / 32];
                for (int j = 0; j < 4; j++) {
                    const int32x4_t is = q6k_group(c[j], h, l, off);
                    const float32x4_t term = vmulq_f32(vmulq_n_f32(ds[j], u), vcvtq_f32_s32(is));
                    acc[t][j] = vaddq_f32(acc[t][j], term);
                }
            }
        }
    }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 4; j++)
            vst1q_f32(out + LILAC_QR16_ROWS * t + 4 * j, acc[t][j]);
}

void lilac_qr16_q6_K_neon(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    switch (nt) {
    case 8: qr16_q6k(w, x, 8, n, out); break;
    case 7: qr16_q6k(w, x, 7, n, out); break;
    case 6: qr16_q6k(w, x, 6, n, out); break;
    case 5: qr16_q6k(w, x, 5, n, out); break;
    case 4: qr16_q6k(w, x, 4, n, out); break;
    case 3: qr16_q6k(w, x, 3, n, out); break;
    case 2: qr16_q6k(w, x, 2, n, out); break;
    default: qr16_q6k(w, x, 1, n, out); break;
    }
}
