/* The AVX-512 attention kernels (kernels/cpu/attn.h). Scores in tiles of
 * 4 heads x 4 keys: sixteen accumulators of 16 lanes over head_dim (4 key
 * loads and 4 query loads per 16 FMAs), then one transpose-reduction of
 * the sixteen into one vector (45 shuffles and adds per 16 dot products,
 * not 16 horizontal sums). Values in tiles of 4 heads x 64 dims: per key,
 * 4 value loads and 4 broadcast weights per 16 FMAs, the running output
 * rescaled as it is loaded. Head dims that are not a multiple of 64 go to
 * the scalar oracle. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/attn.h"

#define BK LILAC_ATTN_BLOCK
#define PF_BLOCKS 1 /* 2 or 3 measured no better */

static inline __attribute__((always_inline)) __m512 ldkv(const void *row, int d, bool f16)
{
    if (!f16)
        return _mm512_loadu_ps((const float *)row + d);
    /* two 256-bit conversions: faster than one 512-bit on Zen 4 (kernels_avx512.c) */
    const uint16_t *h = (const uint16_t *)row + d;
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h))),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 8))), 1);
}

/* lilac_attn_exp lane by lane */
static inline __m512 exp512(__m512 x)
{
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LILAC_EXP_LO), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(LILAC_EXP_LO));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LILAC_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LILAC_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LILAC_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(LILAC_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LILAC_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LILAC_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LILAC_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LILAC_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LILAC_EXP_P5));
    __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, y, _mm512_castsi512_ps(e));
}

/* x[0..15] -> one vector whose lane 4L + m is the sum of x[L + 4m]. */
static inline __m512 reduce16(__m512 *x)
{
    __m512 v[8], w[4];
    for (int i = 0; i < 8; i++)
        v[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xDD));
    __m512 c0 = _mm512_add_ps(_mm512_unpacklo_ps(w[0], w[1]), _mm512_unpackhi_ps(w[0], w[1]));
    __m512 c1 = _mm512_add_ps(_mm512_unpacklo_ps(w[2], w[3]), _mm512_unpackhi_ps(w[2], w[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(c0, c1, 0x44), _mm512_shuffle_ps(c0, c1, 0xEE));
}

/* S[i][j] for the block's nb keys: 4 x 4 tiles; a tile's missing heads or
 * keys repeat its last real one and are not stored. */
/* The next block's rows go to L2 while this one is computed (kn, vn: its
 * first K and V rows, NULL after the last block): from memory, the hardware
 * prefetcher alone kept one core at ~7 GB/s of K/V, a third of its FMA peak
 * at depth 8192. */
static inline __attribute__((always_inline)) void prefetch(const char *p) { _mm_prefetch(p, _MM_HINT_T1); }

static inline __attribute__((always_inline)) void scores(const lilac_attn_in *a, const char *k0, int nb, size_t rs,
                                                         bool f16, float S[][BK], const char *knext, int nbn)
{
    int g = a->g, hd = a->hd;
    __m512 scale = _mm512_set1_ps(a->scale);
    for (int i0 = 0; i0 < g; i0 += 4) {
        int hn = g - i0 < 4 ? g - i0 : 4;
        const float *q[4];
        for (int h = 0; h < 4; h++)
            q[h] = a->q + (size_t)(i0 + (h < hn ? h : hn - 1)) * a->q_step;
        for (int j = 0; j < nb; j += 4) {
            int kn = nb - j < 4 ? nb - j : 4;
            const char *kr[4];
            for (int c = 0; c < 4; c++)
                kr[c] = k0 + (size_t)(j + (c < kn ? c : kn - 1)) * rs;
            __m512 acc[16];
            for (int x = 0; x < 16; x++)
                acc[x] = _mm512_setzero_ps();
            bool pf = knext && i0 == 0;
            for (int d = 0; d < hd; d += 16) {
                if (pf && (!f16 || d % 32 == 0))
                    for (int c = 0; c < 4 && j + c < nbn; c++)
                        prefetch(knext + (size_t)(j + c) * rs + (size_t)d * (f16 ? 2 : 4));
                __m512 kv0 = ldkv(kr[0], d, f16), kv1 = ldkv(kr[1], d, f16);
                __m512 kv2 = ldkv(kr[2], d, f16), kv3 = ldkv(kr[3], d, f16);
                for (int h = 0; h < 4; h++) {
                    __m512 qv = _mm512_loadu_ps(q[h] + d);
                    acc[0 + h] = _mm512_fmadd_ps(qv, kv0, acc[0 + h]);
                    acc[4 + h] = _mm512_fmadd_ps(qv, kv1, acc[4 + h]);
                    acc[8 + h] = _mm512_fmadd_ps(qv, kv2, acc[8 + h]);
                    acc[12 + h] = _mm512_fmadd_ps(qv, kv3, acc[12 + h]);
                }
            }
            /* acc[c * 4 + h]: lane 4h + c is head h's score of key c */
            float t[16];
            _mm512_storeu_ps(t, _mm512_mul_ps(reduce16(acc), scale));
            for (int h = 0; h < hn; h++)
                memcpy(&S[i0 + h][j], t + 4 * h, (size_t)kn * sizeof(float));
        }
    }
}

/* o[i] = o[i] * alpha[i] + sum_j S[i][j] v_j for H heads from i0, 64 dims at a time */
static inline __attribute__((always_inline)) void values(const lilac_attn_in *a, float *o, int i0, int H,
                                                         const float *alpha, const char *v0, int nb, size_t rs,
                                                         bool f16, float S[][BK], const char *vn, int nbn)
{
    int hd = a->hd;
    for (int d = 0; d < hd; d += 64) {
        bool pf = vn && i0 == 0;
        __m512 acc[4][4];
        for (int h = 0; h < H; h++) {
            __m512 al = _mm512_set1_ps(alpha[i0 + h]);
            for (int c = 0; c < 4; c++)
                acc[h][c] = _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)(i0 + h) * hd + d + 16 * c), al);
        }
        for (int j = 0; j < nb; j++) {
            const char *vr = v0 + (size_t)j * rs;
            if (pf && j < nbn) {
                const char *pn = vn + (size_t)j * rs + (size_t)d * (f16 ? 2 : 4);
                prefetch(pn), prefetch(pn + 64);
                if (!f16)
                    prefetch(pn + 128), prefetch(pn + 192);
            }
            __m512 x0 = ldkv(vr, d, f16), x1 = ldkv(vr, d + 16, f16);
            __m512 x2 = ldkv(vr, d + 32, f16), x3 = ldkv(vr, d + 48, f16);
            for (int h = 0; h < H; h++) {
                __m512 p = _mm512_set1_ps(S[i0 + h][j]);
                acc[h][0] = _mm512_fmadd_ps(p, x0, acc[h][0]);
                acc[h][1] = _mm512_fmadd_ps(p, x1, acc[h][1]);
                acc[h][2] = _mm512_fmadd_ps(p, x2, acc[h][2]);
                acc[h][3] = _mm512_fmadd_ps(p, x3, acc[h][3]);
            }
        }
        for (int h = 0; h < H; h++)
            for (int c = 0; c < 4; c++)
                _mm512_storeu_ps(o + (size_t)(i0 + h) * hd + d + 16 * c, acc[h][c]);
    }
}

static inline __attribute__((always_inline)) void attn(const lilac_attn_in *a, float *o, float *m, float *l,
                                                       bool f16)
{
    int g = a->g, hd = a->hd;
    size_t rs = (size_t)a->stride * (f16 ? 2 : 4);
    float S[LILAC_ATTN_MAX_G][BK], alpha[LILAC_ATTN_MAX_G];
    memset(o, 0, (size_t)g * hd * sizeof(float));
    for (int i = 0; i < g; i++)
        m[i] = -INFINITY, l[i] = 0.0f;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int j0 = 0; j0 < a->n; j0 += BK) {
        int nb = a->n - j0 < BK ? a->n - j0 : BK;
        const char *k0 = (const char *)a->k + (size_t)j0 * rs, *v0 = (const char *)a->v + (size_t)j0 * rs;
        int nbn = a->n - j0 - PF_BLOCKS * BK; /* the keys of the block prefetched */
        nbn = nbn < 0 ? 0 : nbn < BK ? nbn : BK;
        const char *kn = nbn ? k0 + (size_t)PF_BLOCKS * BK * rs : NULL;
        const char *vn = nbn ? v0 + (size_t)PF_BLOCKS * BK * rs : NULL;
        scores(a, k0, nb, rs, f16, S, kn, nbn);
        __mmask16 m0 = nb >= 16 ? 0xffff : (__mmask16)((1u << nb) - 1);
        __mmask16 m1 = nb >= 32 ? 0xffff : nb > 16 ? (__mmask16)((1u << (nb - 16)) - 1) : 0;
        for (int i = 0; i < g; i++) {
            __m512 s0 = _mm512_mask_loadu_ps(ninf, m0, S[i]), s1 = _mm512_mask_loadu_ps(ninf, m1, S[i] + 16);
            float bm = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
            float mn = m[i] > bm ? m[i] : bm;
            __m512 vm = _mm512_set1_ps(mn);
            __m512 p0 = exp512(_mm512_sub_ps(s0, vm)), p1 = exp512(_mm512_sub_ps(s1, vm));
            _mm512_storeu_ps(S[i], p0);
            _mm512_storeu_ps(S[i] + 16, p1);
            alpha[i] = lilac_attn_exp(m[i] - mn);
            l[i] = l[i] * alpha[i] + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
            m[i] = mn;
        }
        int i0 = 0;
        for (; i0 + 4 <= g; i0 += 4)
            values(a, o, i0, 4, alpha, v0, nb, rs, f16, S, vn, nbn);
        switch (g - i0) {
        case 3: values(a, o, i0, 3, alpha, v0, nb, rs, f16, S, vn, nbn); break;
        case 2: values(a, o, i0, 2, alpha, v0, nb, rs, f16, S, vn, nbn); break;
        case 1: values(a, o, i0, 1, alpha, v0, nb, rs, f16, S, vn, nbn); break;
        default: break;
        }
    }
}

void lilac_attn_f32_avx512(const lilac_attn_in *a, float *o, float *m, float *l)
{
    if (a->hd % 64)
        lilac_attn_f32_scalar(a, o, m, l);
    else
        attn(a, o, m, l, false);
}

void lilac_attn_f16_avx512(const lilac_attn_in *a, float *o, float *m, float *l)
{
    if (a->hd % 64)
        lilac_attn_f16_scalar(a, o, m, l);
    else
        attn(a, o, m, l, true);
}
