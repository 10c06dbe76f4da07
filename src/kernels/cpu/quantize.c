/* quantize: llama.cpp's reference quantizers (ggml-quants.c,
 * quantize_row_*_ref), reproduced operation for operation so that the
 * bytes match: the same float32 expressions in the same order (the build
 * is strict C11, so nothing is contracted into FMAs), the same
 * round-to-nearest trick (nearest_int), the same float16 rounding of the
 * scales. Where ggml's C relies on what x86 does with a float that does
 * not fit an integer (a NaN, an infinite reciprocal of a subnormal scale),
 * to_int below does the same thing without undefined behaviour.
 *
 * Beyond the reference: a block holding NaN or infinities is quantized as
 * if they were 0 and +-FLT_MAX, and a float16 scale that would overflow is
 * saturated at 65504; both make the row function return false (llama.cpp
 * rejects such rows when it validates them). */
#include "kernels/cpu/quantize.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"

#define QMIN(a, b) ((a) < (b) ? (a) : (b))
#define QMAX(a, b) ((a) > (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

/* The fallback types of llama.cpp's mixes (rows that are not a whole
 * number of 256-value super-blocks): ggml-common.h's layouts. */
typedef struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_0;
typedef struct block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_1;
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 is 22 bytes");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 is 24 bytes");

/* ---- scalar conversions ---- */

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t lilac_f32_to_f16(float f)
{
    /* ggml_compute_fp32_to_fp16 (after Maratyszcza's FP16 library) */
    const float scale_to_inf = u2f(0x77800000u);
    const float scale_to_zero = u2f(0x08800000u);
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = f2u(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u)
        bias = 0x71000000u;
    base = u2f((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f2u(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

uint16_t lilac_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* A block scale as float16; a finite value beyond the half range saturates
 * (and the row is reported). */
static uint16_t scale_f16(float d, bool *ok)
{
    uint16_t h = lilac_f32_to_f16(d);
    if ((h & 0x7C00u) == 0x7C00u) {
        *ok = false;
        h = isnan(d) ? 0 : (uint16_t)((h & 0x8000u) | 0x7BFFu);
    }
    return h;
}

/* ggml's nearest_int: round to nearest even through the float mantissa
 * (valid for |fval| <= 4194303; beyond it gives the same garbage). */
static inline int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* float -> int32 truncating as x86's cvttss2si does: NaN and values out of
 * range give INT32_MIN. (What C does with them is undefined.) */
static inline int32_t to_int(float v)
{
    if (!(v > -2147483648.0f && v < 2147483648.0f))
        return INT32_MIN;
    return (int32_t)v;
}

/* The block's values, or a sanitized copy in tmp when some are not finite.
 * Values beyond 1e19 are reported too: every type's float16 scale
 * overflows long before, and the k-quants' sums of squares overflow there,
 * which makes ggml's reference write an all-zero block without a word. */
static const float *clean_block(const float *x, int n, float *tmp, bool *ok)
{
    int i = 0;
    while (i < n && isfinite(x[i])) {
        if (fabsf(x[i]) > 1e19f)
            *ok = false;
        i++;
    }
    if (i == n)
        return x;
    *ok = false;
    for (i = 0; i < n; i++)
        tmp[i] = isnan(x[i]) ? 0.0f : isinf(x[i]) ? copysignf(FLT_MAX, x[i]) : x[i];
    return tmp;
}

/* ---- plain types ---- */

bool lilac_quantize_row_f32(const float *x, void *y, int64_t n)
{
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        ok = ok && isfinite(x[i]);
    memcpy(y, x, (size_t)n * sizeof(float));
    return ok;
}

bool lilac_quantize_row_f16(const float *x, void *y, int64_t n)
{
    bool ok = true;
    uint8_t *o = y;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = lilac_f32_to_f16(x[i]);
        ok = ok && (h & 0x7C00u) != 0x7C00u;
        memcpy(o + 2 * i, &h, 2);
    }
    return ok;
}

bool lilac_quantize_row_bf16(const float *x, void *y, int64_t n)
{
    bool ok = true;
    uint8_t *o = y;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = lilac_f32_to_bf16(x[i]);
        ok = ok && (b & 0x7F80u) != 0x7F80u;
        memcpy(o + 2 * i, &b, 2);
    }
    return ok;
}

/* ---- 32-value blocks ---- */

bool lilac_quantize_row_q8_0(const float *xr, void *yr, int64_t n)
{
    block_q8_0 *y = yr;
    bool ok = true;
    float tmp[LILAC_QK8_0];
    for (int64_t i = 0; i < n / LILAC_QK8_0; i++) {
        const float *x = clean_block(xr + i * LILAC_QK8_0, LILAC_QK8_0, tmp, &ok);
        float amax = 0.0f;
        for (int j = 0; j < LILAC_QK8_0; j++)
            amax = QMAX(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = scale_f16(d, &ok);
        for (int j = 0; j < LILAC_QK8_0; j++)
            y[i].qs[j] = (int8_t)to_int(roundf(x[j] * id));
    }
    return ok;
}

bool lilac_quantize_row_q4_0(const float *xr, void *yr, int64_t n)
{
    enum { qk = LILAC_QK4_0 };
    block_q4_0 *y = yr;
    bool ok = true;
    float tmp[qk];
    for (int64_t i = 0; i < n / qk; i++) {
        const float *x = clean_block(xr + i * qk, qk, tmp, &ok);
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = scale_f16(d, &ok);
        for (int j = 0; j < qk / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[qk / 2 + j] * id;
            const uint8_t xi0 = (uint8_t)QMIN(15, (int8_t)to_int(x0 + 8.5f));
            const uint8_t xi1 = (uint8_t)QMIN(15, (int8_t)to_int(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
    return ok;
}

bool lilac_quantize_row_q5_0(const float *xr, void *yr, int64_t n)
{
    enum { qk = 32 };
    block_q5_0 *y = yr;
    bool ok = true;
    float tmp[qk];
    for (int64_t i = 0; i < n / qk; i++) {
        const float *x = clean_block(xr + i * qk, qk, tmp, &ok);
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = scale_f16(d, &ok);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[qk / 2 + j] * id;
            const uint8_t xi0 = (uint8_t)QMIN(31, (int8_t)to_int(x0 + 16.5f));
            const uint8_t xi1 = (uint8_t)QMIN(31, (int8_t)to_int(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
        }
        for (int k = 0; k < 4; k++)
            y[i].qh[k] = (uint8_t)(qh >> (8 * k)); /* little-endian, as memcpy on ggml's hosts */
    }
    return ok;
}

bool lilac_quantize_row_q5_1(const float *xr, void *yr, int64_t n)
{
    enum { qk = 32 };
    block_q5_1 *y = yr;
    bool ok = true;
    float tmp[qk];
    for (int64_t i = 0; i < n / qk; i++) {
        const float *x = clean_block(xr + i * qk, qk, tmp, &ok);
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < qk; j++) {
            const float v = x[j];
            if (v < min)
                min = v;
            if (v > max)
                max = v;
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = scale_f16(d, &ok);
        y[i].m = scale_f16(min, &ok);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[qk / 2 + j] - min) * id;
            const uint8_t xi0 = (uint8_t)to_int(x0 + 0.5f);
            const uint8_t xi1 = (uint8_t)to_int(x1 + 0.5f);
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
        }
        for (int k = 0; k < 4; k++)
            y[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
    return ok;
}

/* ---- k-quants: 256-value super-blocks ---- */

/* ggml's make_qx_quants with rmse_type 1 and no weights (the only use the
 * reference quantizers make of it: Q6_K's 16-value groups). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++)
            L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = QMAX(-nmax, QMIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = QMAX(-nmax, QMIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + QMAX(-nmax, QMIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's make_qkx2_quants: an affine fit (scale, min) of n values to
 * 0..nmax, searched over nstep + 1 trial scales, weighted. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++)
            L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)QMAX(0, QMIN(nmax, l));
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = QMAX(0, QMIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++)
                    L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The 6-bit scales and mins of Q4_K/Q5_K, packed as get_scale_min_k4
 * reads them; then the final levels of every group from the stored
 * (float16-rounded) scales. */
static void kq_pack_scales(const float *scales, const float *mins, float max_scale, float max_min, uint8_t *packed,
                           uint16_t *d16, uint16_t *dmin16, bool *ok)
{
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < LILAC_QK_K / 32; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = QMIN(63, ls);
        lm = QMIN(63, lm);
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = scale_f16(max_scale / 63.f, ok);
    *dmin16 = scale_f16(max_min / 63.f, ok);
}

static void kq_levels(const float *x, const uint8_t *packed, uint16_t d16, uint16_t dmin16, int nmax, uint8_t *L)
{
    for (int j = 0; j < LILAC_QK_K / 32; j++) {
        uint8_t sc, m;
        lilac_kq_scale_min(j, packed, &sc, &m);
        const float d = lilac_f16_to_f32(d16) * (float)sc;
        if (!d)
            continue;
        const float dm = lilac_f16_to_f32(dmin16) * (float)m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            l = QMAX(0, QMIN(nmax, l));
            L[32 * j + ii] = (uint8_t)l;
        }
    }
}

/* Scales and mins of the eight 32-value groups of a Q4_K/Q5_K block. */
static void kq_fit_groups(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *L, float *scales,
                          float *mins, float *max_scale, float *max_min)
{
    uint8_t Laux[32];
    float weights[32];
    *max_scale = 0;
    *max_min = 0;
    for (int j = 0; j < LILAC_QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep,
                                     false);
        if (scales[j] > *max_scale)
            *max_scale = scales[j];
        if (mins[j] > *max_min)
            *max_min = mins[j];
    }
}

bool lilac_quantize_row_q4_K(const float *xr, void *yr, int64_t n)
{
    block_q4_K *y = yr;
    bool ok = true;
    float tmp[LILAC_QK_K];
    uint8_t L[LILAC_QK_K];
    float mins[LILAC_QK_K / 32], scales[LILAC_QK_K / 32];
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const float *x = clean_block(xr + i * LILAC_QK_K, LILAC_QK_K, tmp, &ok);
        float max_scale, max_min;
        kq_fit_groups(x, 15, -1.f, 0.1f, 20, L, scales, mins, &max_scale, &max_min);
        memset(y[i].scales, 0, sizeof y[i].scales);
        kq_pack_scales(scales, mins, max_scale, max_min, y[i].scales, &y[i].d, &y[i].dmin, &ok);
        kq_levels(x, y[i].scales, y[i].d, y[i].dmin, 15, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < LILAC_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
    return ok;
}

bool lilac_quantize_row_q5_K(const float *xr, void *yr, int64_t n)
{
    block_q5_K *y = yr;
    bool ok = true;
    float tmp[LILAC_QK_K];
    uint8_t L[LILAC_QK_K];
    float mins[LILAC_QK_K / 32], scales[LILAC_QK_K / 32];
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const float *x = clean_block(xr + i * LILAC_QK_K, LILAC_QK_K, tmp, &ok);
        float max_scale, max_min;
        kq_fit_groups(x, 31, -0.5f, 0.1f, 15, L, scales, mins, &max_scale, &max_min);
        memset(y[i].scales, 0, sizeof y[i].scales);
        kq_pack_scales(scales, mins, max_scale, max_min, y[i].scales, &y[i].d, &y[i].dmin, &ok);
        kq_levels(x, y[i].scales, y[i].d, y[i].dmin, 31, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, LILAC_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int nn = 0; nn < LILAC_QK_K; nn += 64) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[nn + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[nn + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
            ql += 32;
        }
    }
    return ok;
}

bool lilac_quantize_row_q6_K(const float *xr, void *yr, int64_t n)
{
    block_q6_K *y = yr;
    bool ok = true;
    float tmp[LILAC_QK_K];
    int8_t L[LILAC_QK_K];
    float scales[LILAC_QK_K / 16];
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const float *x = clean_block(xr + i * LILAC_QK_K, LILAC_QK_K, tmp, &ok);
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < LILAC_QK_K / 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = lilac_f32_to_f16(0.f);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = scale_f16(1 / iscale, &ok);
        for (int ib = 0; ib < LILAC_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)QMIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < LILAC_QK_K / 16; j++) {
            float d = lilac_f16_to_f32(y[i].d) * (float)y[i].scales[j];
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = QMAX(-32, QMIN(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < LILAC_QK_K; j += 128) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
    }
    return ok;
}

lilac_quantize_fn lilac_quantizer_for(int type)
{
    switch (type) {
    case LILAC_F32: return lilac_quantize_row_f32;
    case LILAC_F16: return lilac_quantize_row_f16;
    case LILAC_BF16: return lilac_quantize_row_bf16;
    case LILAC_Q8_0: return lilac_quantize_row_q8_0;
    case LILAC_Q4_0: return lilac_quantize_row_q4_0;
    case LILAC_Q5_0: return lilac_quantize_row_q5_0;
    case LILAC_Q5_1: return lilac_quantize_row_q5_1;
    case LILAC_Q4_K: return lilac_quantize_row_q4_K;
    case LILAC_Q5_K: return lilac_quantize_row_q5_K;
    case LILAC_Q6_K: return lilac_quantize_row_q6_K;
    default: return NULL;
    }
}

typedef struct rows_job {
    lilac_quantize_fn q;
    const float *x;
    uint8_t *y;
    int64_t n_rows, n, rows_per_task;
    size_t row_bytes;
    bool *ok; /* per task */
} rows_job;

static void rows_task(void *ctx, int task, int thread)
{
    (void)thread;
    rows_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->n_rows)
        r1 = j->n_rows;
    bool ok = true;
    for (int64_t r = r0; r < r1; r++)
        ok &= j->q(j->x + r * j->n, j->y + (size_t)r * j->row_bytes, j->n);
    j->ok[task] = ok;
}

bool lilac_quantize_rows(lilac_pool *pool, int type, const float *x, void *y, int64_t n_rows, int64_t n)
{
    rows_job j = {lilac_quantizer_for(type), x, y, n_rows, n, n_rows, lilac_dtype_row_bytes(type, n), NULL};
    bool one = true;
    int threads = pool ? lilac_pool_size(pool) : 1;
    int n_tasks = threads > 1 && n_rows > 1 ? threads * 4 : 1;
    if (n_tasks > n_rows)
        n_tasks = n_rows > 0 ? (int)n_rows : 1;
    j.rows_per_task = (n_rows + n_tasks - 1) / n_tasks;
    if (j.rows_per_task < 1)
        j.rows_per_task = 1;
    n_tasks = (int)((n_rows + j.rows_per_task - 1) / j.rows_per_task);
    if (n_tasks <= 1) {
        j.ok = &one;
        if (n_rows > 0)
            rows_task(&j, 0, 0);
        return one;
    }
    bool oks[1024];
    if (n_tasks > 1024) { /* a pool of more than 256 threads: fewer, larger tasks */
        j.rows_per_task = (n_rows + 1023) / 1024;
        n_tasks = (int)((n_rows + j.rows_per_task - 1) / j.rows_per_task);
    }
    j.ok = oks;
    lilac_pool_run(pool, n_tasks, rows_task, &j);
    for (int t = 0; t < n_tasks; t++)
        one &= oks[t];
    return one;
}
