/* The NEON kernel set (AArch64 with the ARMv8.2 dot-product extension:
 * every Apple M-series core, Neoverse N1 and later): the fast path
 * (qfast.h) with sdot, float32/float16/bfloat16 dot products in four
 * float32x4 accumulators; the precise block-type dots are the scalar
 * ones. Built only for aarch64, with -march=armv8.2-a+dotprod for this
 * file; chosen at run time when the CPU reports the extension.
 *
 * sdot multiplies signed bytes by signed bytes, four products per 32-bit
 * lane, so weights enter as their signed values (q - 8, q - 32) and no
 * offsets or sign tricks are needed:
 *     lane = (sum w * hi) << 8, then += sum w * lo  =  sum w * Q, exact.
 * Each run of 16 weights below belongs to one weight group, so a group's
 * lanes are scaled once, in float32. */
#if defined(__APPLE__) && !defined(_DARWIN_C_SOURCE)
#define _DARWIN_C_SOURCE /* sysctlbyname under _POSIX_C_SOURCE */
#endif
#include <arm_neon.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qfast.h"
#include "kernels/cpu/quant.h"

bool lilac_cpu_neon_dotprod(void)
{
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0)
        return v != 0;
    return true; /* every Apple silicon core has it */
#else
    return false;
#endif
}

/* ---- float types (precise) ---- */

static float dot_f32(const void *row, const float *x, int64_t n)
{
    const float *w = row;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(w + i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, vld1q_f32(w + i + 4), vld1q_f32(x + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(w + i + 8), vld1q_f32(x + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(w + i + 12), vld1q_f32(x + i + 12));
    }
    for (; i + 4 <= n; i += 4)
        a0 = vfmaq_f32(a0, vld1q_f32(w + i), vld1q_f32(x + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++)
        s += w[i] * x[i];
    return s;
}

static inline float32x4_t load_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline float32x4_t load_bf16(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

#define DOT_HALF(LOAD, SCALAR)                                                    \
    const uint16_t *w = row;                                                      \
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;                   \
    int64_t i = 0;                                                                \
    for (; i + 16 <= n; i += 16) {                                                \
        a0 = vfmaq_f32(a0, LOAD(w + i), vld1q_f32(x + i));                        \
        a1 = vfmaq_f32(a1, LOAD(w + i + 4), vld1q_f32(x + i + 4));                \
        a2 = vfmaq_f32(a2, LOAD(w + i + 8), vld1q_f32(x + i + 8));                \
        a3 = vfmaq_f32(a3, LOAD(w + i + 12), vld1q_f32(x + i + 12));              \
    }                                                                             \
    for (; i + 4 <= n; i += 4)                                                    \
        a0 = vfmaq_f32(a0, LOAD(w + i), vld1q_f32(x + i));                        \
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));        \
    for (; i < n; i++)                                                            \
        s += SCALAR(w[i]) * x[i];                                                 \
    return s;

static float dot_f16(const void *row, const float *x, int64_t n) { DOT_HALF(load_f16, lilac_f16_to_f32) }
static float dot_bf16(const void *row, const float *x, int64_t n) { DOT_HALF(load_bf16, lilac_bf16_to_f32) }

/* ---- the fast path ---- */

static inline float h2f(uint16_t h) { return lilac_f16_to_f32(h); }

/* 16 int32 to 16 int8 (all within -127..127) */
static inline int8x16_t narrow16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d)
{
    int16x8_t ab = vcombine_s16(vmovn_s32(a), vmovn_s32(b)), cd = vcombine_s16(vmovn_s32(c), vmovn_s32(d));
    return vcombine_s8(vmovn_s16(ab), vmovn_s16(cd));
}

void lilac_qx_quantize_neon(const float *x, int64_t n, const lilac_qx *q)
{
    const int32x4_t c128 = vdupq_n_s32(128), c255 = vdupq_n_s32(255), one = vdupq_n_s32(1);
    for (int64_t b = 0; b < n / LILAC_QX_BLOCK; b++) {
        const float *xb = x + b * LILAC_QX_BLOCK;
        float32x4_t xv[8];
        float32x4_t m = vdupq_n_f32(0);
        uint32x4_t ok = vdupq_n_u32(~0u);
        for (int k = 0; k < 8; k++) {
            xv[k] = vld1q_f32(xb + 4 * k);
            const float32x4_t a = vabsq_f32(xv[k]);
            ok = vandq_u32(ok, vcleq_f32(a, vdupq_n_f32(FLT_MAX))); /* false for NaN, infinities */
            m = vmaxnmq_f32(m, a);
        }
        const float amax = vmaxvq_f32(m);
        float unit = 0, id256 = 0;
        if (vminvq_u32(ok) == 0) {
            unit = NAN; /* the block's products are NaN, as on the precise path */
        } else if (amax >= LILAC_QX_TINY) {
            const float d = amax / 127.0f, id = 127.0f / amax;
            id256 = id * 256.0f;
            unit = d * (1.0f / 256.0f);
        }
        int32x4_t hv[8], lv[8];
        int32_t sum[2] = {0, 0};
        for (int k = 0; k < 8; k++) {
            int32x4_t v = id256 != 0 ? vcvtnq_s32_f32(vmulq_n_f32(xv[k], id256)) : vdupq_n_s32(0);
            /* Q = 128 (mod 256): one step toward zero */
            uint32x4_t tie = vceqq_s32(vandq_s32(v, c255), c128);
            int32x4_t step = vorrq_s32(vshrq_n_s32(v, 31), one);
            v = vsubq_s32(v, vandq_s32(vreinterpretq_s32_u32(tie), step));
            hv[k] = vshrq_n_s32(vaddq_s32(v, c128), 8);
            lv[k] = vsubq_s32(v, vshlq_n_s32(hv[k], 8));
            sum[k / 4] += vaddvq_s32(v);
        }
        for (int h = 0; h < 2; h++) {
            const int64_t at = lilac_qx_pos(q->layout, b * LILAC_QX_BLOCK + 16 * h);
            vst1q_s8(q->hi + at, narrow16(hv[4 * h], hv[4 * h + 1], hv[4 * h + 2], hv[4 * h + 3]));
            vst1q_s8(q->lo + at, narrow16(lv[4 * h], lv[4 * h + 1], lv[4 * h + 2], lv[4 * h + 3]));
        }
        q->unit[b] = unit;
        q->sum16[2 * b] = sum[0];
        q->sum16[2 * b + 1] = sum[1];
        q->sum32[b] = sum[0] + sum[1];
    }
}

/* sum w * Q per lane over the 16-value runs w0 (at hi/lo) and w1 (at hi1/lo1) */
static inline int32x4_t wq32(int8x16_t w0, int8x16_t w1, const int8_t *h0, const int8_t *h1, const int8_t *l0,
                             const int8_t *l1)
{
    int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(h0)), w1, vld1q_s8(h1));
    s = vshlq_n_s32(s, 8);
    return vdotq_s32(vdotq_s32(s, w0, vld1q_s8(l0)), w1, vld1q_s8(l1));
}

float lilac_qdot_q8_0_neon(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q8_0 *b = row;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0;
    for (int64_t i = 0; i < n / LILAC_QK8_0; i++) {
        const int8_t *h = x->hi + 32 * i, *l = x->lo + 32 * i;
        int32x4_t s = wq32(vld1q_s8(b[i].qs), vld1q_s8(b[i].qs + 16), h, h + 16, l, l + 16);
        const float f = h2f(b[i].d) * x->unit[i];
        if (i & 1)
            acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(s), f);
        else
            acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(s), f);
    }
    return vaddvq_f32(vaddq_f32(acc0, acc1));
}

float lilac_qdot_q4_0_neon(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q4_0 *b = row;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0;
    for (int64_t i = 0; i < n / LILAC_QK4_0; i++) {
        const uint8x16_t raw = vld1q_u8(b[i].qs);
        const int8x16_t w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, m4)), eight);
        const int8x16_t w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight);
        const int8_t *h = x->hi + 32 * i, *l = x->lo + 32 * i;
        int32x4_t s = wq32(w0, w1, h, h + 16, l, l + 16);
        const float f = h2f(b[i].d) * x->unit[i];
        if (i & 1)
            acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(s), f);
        else
            acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(s), f);
    }
    return vaddvq_f32(vaddq_f32(acc0, acc1));
}

/* Q4_K and Q5_K over the KQ layout: activation piece m (64 bytes at 64m)
 * holds, at 16r, the values 16 (m % 2) .. of run r's low (m < 2) or high
 * (m >= 2) nibbles: group 2r + (m >= 2). */
static inline float qdot_kq(const uint8_t *blocks, size_t bsize, size_t off_qs, size_t off_qh, int has_qh,
                            const lilac_qx *x, int64_t n)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F), sixteen = vdupq_n_u8(16);
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, accm = acc0, accm1 = acc0;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const uint8_t *blk = blocks + (size_t)i * bsize;
        uint16_t dh, dminh;
        memcpy(&dh, blk + offsetof(block_q4_K, d), 2);
        memcpy(&dminh, blk + offsetof(block_q4_K, dmin), 2);
        const float d = h2f(dh), dmin = h2f(dminh);
        uint8_t sc[8], mn[8];
        lilac_kq_scales(blk + offsetof(block_q4_K, scales), sc, mn);
        const int8_t *xh = x->hi + 256 * i, *xl = x->lo + 256 * i;
        const float *u = x->unit + 8 * i;
        /* the minimums: dmin * m * unit against the sums of each 32 */
        float fm[8];
        for (int g = 0; g < 8; g++)
            fm[g] = dmin * (float)mn[g] * u[g];
        const int32_t *s32 = x->sum32 + 8 * i;
        accm = vfmaq_f32(accm, vld1q_f32(fm), vcvtq_f32_s32(vld1q_s32(s32)));
        accm1 = vfmaq_f32(accm1, vld1q_f32(fm + 4), vcvtq_f32_s32(vld1q_s32(s32 + 4)));
        const uint8_t *qs = blk + off_qs;
        uint8x16_t qh0 = vdupq_n_u8(0), qh1 = qh0;
        if (has_qh) {
            qh0 = vld1q_u8(blk + off_qh);
            qh1 = vld1q_u8(blk + off_qh + 16);
        }
        for (int r = 0; r < 4; r++) {
            const uint8x16_t a = vld1q_u8(qs + 32 * r), c = vld1q_u8(qs + 32 * r + 16);
            uint8x16_t e0 = vandq_u8(a, m4), e1 = vandq_u8(c, m4); /* group 2r */
            uint8x16_t o0 = vshrq_n_u8(a, 4), o1 = vshrq_n_u8(c, 4); /* group 2r + 1 */
            if (has_qh) {
                const uint8x16_t be = vdupq_n_u8((uint8_t)(1u << (2 * r))), bo = vdupq_n_u8((uint8_t)(2u << (2 * r)));
                e0 = vorrq_u8(e0, vandq_u8(vtstq_u8(qh0, be), sixteen));
                e1 = vorrq_u8(e1, vandq_u8(vtstq_u8(qh1, be), sixteen));
                o0 = vorrq_u8(o0, vandq_u8(vtstq_u8(qh0, bo), sixteen));
                o1 = vorrq_u8(o1, vandq_u8(vtstq_u8(qh1, bo), sixteen));
            }
            const int p = 16 * r;
            int32x4_t se = wq32(vreinterpretq_s8_u8(e0), vreinterpretq_s8_u8(e1), xh + p, xh + 64 + p, xl + p,
                                xl + 64 + p);
            int32x4_t so = wq32(vreinterpretq_s8_u8(o0), vreinterpretq_s8_u8(o1), xh + 128 + p, xh + 192 + p,
                                xl + 128 + p, xl + 192 + p);
            /* d * sc * unit: the oracle's order */
            acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(se), d * (float)sc[2 * r] * u[2 * r]);
            acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(so), d * (float)sc[2 * r + 1] * u[2 * r + 1]);
        }
    }
    return vaddvq_f32(vaddq_f32(acc0, acc1)) - vaddvq_f32(vaddq_f32(accm, accm1));
}

float lilac_qdot_q4_K_neon(const void *row, const lilac_qx *x, int64_t n)
{
    return qdot_kq(row, sizeof(block_q4_K), offsetof(block_q4_K, qs), 0, 0, x, n);
}

float lilac_qdot_q5_K_neon(const void *row, const lilac_qx *x, int64_t n)
{
    return qdot_kq(row, sizeof(block_q5_K), offsetof(block_q5_K, qs), offsetof(block_q5_K, qh), 1, x, n);
}

/* sum w * Q per lane over one run of 16 */
static inline int32x4_t wq16(int8x16_t w, const int8_t *h, const int8_t *l)
{
    int32x4_t s = vshlq_n_s32(vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(h)), 8);
    return vdotq_s32(s, w, vld1q_s8(l));
}

float lilac_qdot_q6_K_neon(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q6_K *b = row;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), three = vdupq_n_u8(3);
    const int8x16_t c32 = vdupq_n_s8(32);
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0;
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const float d = h2f(b[i].d);
        const int8_t *xh = x->hi + 256 * i, *xl = x->lo + 256 * i;
        const float *u = x->unit + 8 * i;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            for (int c = 0; c < 2; c++) {
                const uint8x16_t qa = vld1q_u8(ql + 16 * c), qb = vld1q_u8(ql + 32 + 16 * c);
                const uint8x16_t hb = vld1q_u8(qh + 16 * c);
                uint8x16_t v[4];
                v[0] = vorrq_u8(vandq_u8(qa, m4), vshlq_n_u8(vandq_u8(hb, three), 4));
                v[1] = vorrq_u8(vandq_u8(qb, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), three), 4));
                v[2] = vorrq_u8(vshrq_n_u8(qa, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), three), 4));
                v[3] = vorrq_u8(vshrq_n_u8(qb, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
                for (int k = 0; k < 4; k++) {
                    /* values 128h + 32k + 16c .. +15: group 8h + 2k + c */
                    const int64_t a = 128 * h + 32 * k + 16 * c;
                    const int g = (int)(a / 16);
                    int32x4_t s = wq16(vsubq_s8(vreinterpretq_s8_u8(v[k]), c32), xh + a, xl + a);
                    const float f = d * (float)b[i].scales[g] * u[g / 2];
                    if (k & 1)
                        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(s), f);
                    else
                        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(s), f);
                }
            }
        }
    }
    return vaddvq_f32(vaddq_f32(acc0, acc1));
}

static void axpy_f32(float *y, float a, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++)
        y[i] += a * x[i];
}

const lilac_cpu_kernels lilac_cpu_neon = {
    .name = "neon",
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .attn_f32 = lilac_attn_f32_scalar, /* no NEON version yet */
    .attn_f16 = lilac_attn_f16_scalar,
    .gemm_f32 = lilac_gemm_f32_scalar, /* no NEON version yet: the oracle itself */
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = lilac_dot_q8_0_scalar,
    .dot_q4_0 = lilac_dot_q4_0_scalar,
    .dot_q4_K = lilac_dot_q4_K_scalar,
    .dot_q5_K = lilac_dot_q5_K_scalar,
    .dot_q6_K = lilac_dot_q6_K_scalar,
    .qx_quantize = lilac_qx_quantize_neon,
    .qdot_q8_0 = lilac_qdot_q8_0_neon,
    .qdot_q4_0 = lilac_qdot_q4_0_neon,
    .qdot_q4_K = lilac_qdot_q4_K_neon,
    .qdot_q5_K = lilac_qdot_q5_K_neon,
    .qdot_q6_K = lilac_qdot_q6_K_neon,
    .qr16_q4_K = lilac_qr16_q4_K_neon,
    .qr16_q6_K = lilac_qr16_q6_K_neon,
};
