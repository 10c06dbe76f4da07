/* attn: the attention kernels. One call takes the g query heads that share
 * a KV head (GQA) over a range of n keys and returns their softmax state
 * over that range, unnormalized:
 *
 *   m[i] = max_j s_ij,  l[i] = sum_j exp(s_ij - m[i]),
 *   o[i] = sum_j exp(s_ij - m[i]) v_j,      s_ij = scale * (q_i . k_j),
 *
 * so that ranges computed apart (threads, flash-decoding) merge exactly as
 * one pass would (lilac_attn_merge). Each key and value row is read once
 * for all g heads. Keys go in blocks of LILAC_ATTN_BLOCK: the block's
 * scores, then an online-softmax update (the running o rescaled when the
 * maximum grows), then its values. K and V are float32 or IEEE half.
 *
 * Every set computes the same math in the same block order; the SIMD sets
 * differ from the scalar oracle only in how the dot products and sums are
 * associated (float32 rounding), and all use the exponential below. */
#ifndef LILAC_KERNELS_CPU_ATTN_H
#define LILAC_KERNELS_CPU_ATTN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define LILAC_ATTN_BLOCK 32 /* keys per softmax update */
#define LILAC_ATTN_MAX_G 32 /* query heads per call (callers slice wider groups) */

typedef struct lilac_attn_in {
    const float *q; /* query head i at q + i * q_step, hd floats */
    int q_step;
    int g, hd;       /* 1 <= g <= LILAC_ATTN_MAX_G; hd even */
    const void *k;   /* key row 0 of the range: float32 or half, as the kernel's type */
    const void *v;   /* value row 0 */
    int64_t stride;  /* elements from one row to the next (K and V alike) */
    int n;           /* keys, >= 1 */
    float scale;     /* applied to the dot products */
} lilac_attn_in;

/* o: [g][hd], m, l: [g]; all written (see above). */
typedef void (*lilac_attn_fn)(const lilac_attn_in *in, float *o, float *m, float *l);

void lilac_attn_f32_scalar(const lilac_attn_in *in, float *o, float *m, float *l);
void lilac_attn_f16_scalar(const lilac_attn_in *in, float *o, float *m, float *l);
#if defined(LILAC_X86)
void lilac_attn_f32_avx2(const lilac_attn_in *in, float *o, float *m, float *l);
void lilac_attn_f16_avx2(const lilac_attn_in *in, float *o, float *m, float *l);
void lilac_attn_f32_avx512(const lilac_attn_in *in, float *o, float *m, float *l);
void lilac_attn_f16_avx512(const lilac_attn_in *in, float *o, float *m, float *l);
#endif

/* exp(x) for the softmax, x <= 0 in use: Cephes' expf (range reduction by
 * ln 2 in two parts, degree-6 polynomial), within ~2 ulp of libm's expf
 * over (-87.3, 0]; 0 below -87.3 (where expf gives 0 or a subnormal: a
 * weight under 1e-38 of the largest one). The SIMD sets compute the same
 * formula lane by lane (with fused multiply-adds). */
#define LILAC_EXP_LO (-87.33654f) /* ln(2^-126): the smallest normal result */
#define LILAC_EXP_LOG2E 1.44269504088896341f
#define LILAC_EXP_LN2_HI 0.693359375f
#define LILAC_EXP_LN2_LO (-2.12194440e-4f)
#define LILAC_EXP_P0 1.9875691500E-4f
#define LILAC_EXP_P1 1.3981999507E-3f
#define LILAC_EXP_P2 8.3334519073E-3f
#define LILAC_EXP_P3 4.1665795894E-2f
#define LILAC_EXP_P4 1.6666665459E-1f
#define LILAC_EXP_P5 5.0000001201E-1f

static inline float lilac_attn_exp(float x)
{
    if (!(x >= LILAC_EXP_LO)) /* -inf (an empty running max) too */
        return 0.0f;
    float n = nearbyintf(x * LILAC_EXP_LOG2E);
    float r = x - n * LILAC_EXP_LN2_HI;
    r = r - n * LILAC_EXP_LN2_LO;
    float p = LILAC_EXP_P0;
    p = p * r + LILAC_EXP_P1;
    p = p * r + LILAC_EXP_P2;
    p = p * r + LILAC_EXP_P3;
    p = p * r + LILAC_EXP_P4;
    p = p * r + LILAC_EXP_P5;
    float y = p * r * r + r + 1.0f;
    union { uint32_t u; float f; } s = {(uint32_t)((int32_t)n + 127) << 23};
    return y * s.f;
}

/* Fold a range's state (o2, m2, l2) into a running one (o, m, l) of g heads
 * of hd values. The same plain arithmetic whatever the kernel set, so a
 * context split over threads gives bitwise what one thread gives when the
 * ranges are folded in the same order. */
static inline void lilac_attn_merge(float *o, float *m, float *l, const float *o2, const float *m2,
                                    const float *l2, int g, int hd)
{
    for (int i = 0; i < g; i++) {
        float mx = m[i] > m2[i] ? m[i] : m2[i];
        float a = lilac_attn_exp(m[i] - mx), b = lilac_attn_exp(m2[i] - mx);
        float *oi = o + (size_t)i * hd;
        const float *pi = o2 + (size_t)i * hd;
        for (int d = 0; d < hd; d++)
            oi[d] = oi[d] * a + pi[d] * b;
        l[i] = l[i] * a + l2[i] * b;
        m[i] = mx;
    }
}

#endif
