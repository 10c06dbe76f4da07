/* The AVX2 attention kernels (kernels/cpu/attn.h), the AVX-512 ones' shape
 * in 16 registers: scores in tiles of 2 heads x 4 keys (eight 8-lane
 * accumulators, one hadd transpose-reduction per tile), values in tiles of
 * 4 heads x 16 dims. Head dims that are not a multiple of 16 go to the
 * scalar oracle. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/attn.h"

#define BK LILAC_ATTN_BLOCK

static inline __attribute__((always_inline)) __m256 ldkv(const void *row, int d, bool f16)
{
    if (!f16)
        return _mm256_loadu_ps((const float *)row + d);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
}

/* lilac_attn_exp lane by lane */
static inline __m256 exp256(__m256 x)
{
    __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(LILAC_EXP_LO), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(LILAC_EXP_LO));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LILAC_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LILAC_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LILAC_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(LILAC_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LILAC_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LILAC_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LILAC_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LILAC_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LILAC_EXP_P5));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), ok);
}

static inline float hsum(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

static inline float hmax(__m256 v)
{
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

/* x[0..7] -> one vector whose lane e is the sum of x[e] */
static inline __m256 reduce8(const __m256 *x)
{
    __m256 t0 = _mm256_hadd_ps(x[0], x[1]), t1 = _mm256_hadd_ps(x[2], x[3]);
    __m256 t2 = _mm256_hadd_ps(x[4], x[5]), t3 = _mm256_hadd_ps(x[6], x[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* The next block's rows go to L2 while this one is computed (as the
 * AVX-512 kernels do; knext, vnext NULL after the last block). */
static inline __attribute__((always_inline)) void prefetch(const char *p) { _mm_prefetch(p, _MM_HINT_T1); }

static inline __attribute__((always_inline)) void scores(const lilac_attn_in *a, const char *k0, int nb, size_t rs,
                                                         bool f16, float S[][BK], const char *knext, int nbn)
{
    int g = a->g, hd = a->hd;
    __m256 scale = _mm256_set1_ps(a->scale);
    for (int i0 = 0; i0 < g; i0 += 2) {
        int hn = g - i0 < 2 ? g - i0 : 2;
        const float *q0 = a->q + (size_t)i0 * a->q_step, *q1 = a->q + (size_t)(i0 + hn - 1) * a->q_step;
        for (int j = 0; j < nb; j += 4) {
            int kn = nb - j < 4 ? nb - j : 4;
            const char *kr[4];
            for (int c = 0; c < 4; c++)
                kr[c] = k0 + (size_t)(j + (c < kn ? c : kn - 1)) * rs;
            __m256 acc[8];
            for (int x = 0; x < 8; x++)
                acc[x] = _mm256_setzero_ps();
            bool pf = knext && i0 == 0;
            for (int d = 0; d < hd; d += 8) {
                size_t db = (size_t)d * (f16 ? 2 : 4);
                if (pf && db % 64 == 0)
                    for (int c = 0; c < 4 && j + c < nbn; c++)
                        prefetch(knext + (size_t)(j + c) * rs + db);
                __m256 qa = _mm256_loadu_ps(q0 + d), qb = _mm256_loadu_ps(q1 + d);
                for (int c = 0; c < 4; c++) {
                    __m256 kv = ldkv(kr[c], d, f16);
                    acc[c] = _mm256_fmadd_ps(qa, kv, acc[c]);
                    acc[4 + c] = _mm256_fmadd_ps(qb, kv, acc[4 + c]);
                }
            }
            /* lane 4h + c: head h, key c */
            float t[8];
            _mm256_storeu_ps(t, _mm256_mul_ps(reduce8(acc), scale));
            for (int h = 0; h < hn; h++)
                memcpy(&S[i0 + h][j], t + 4 * h, (size_t)kn * sizeof(float));
        }
    }
}

static inline __attribute__((always_inline)) void values(const lilac_attn_in *a, float *o, int i0, int H,
                                                         const float *alpha, const char *v0, int nb, size_t rs,
                                                         bool f16, float S[][BK], const char *vnext, int nbn)
{
    int hd = a->hd;
    for (int d = 0; d < hd; d += 16) {
        size_t db = (size_t)d * (f16 ? 2 : 4);
        bool pf = vnext && i0 == 0 && db % 64 == 0;
        __m256 acc[4][2];
        for (int h = 0; h < H; h++) {
            __m256 al = _mm256_set1_ps(alpha[i0 + h]);
            for (int c = 0; c < 2; c++)
                acc[h][c] = _mm256_mul_ps(_mm256_loadu_ps(o + (size_t)(i0 + h) * hd + d + 8 * c), al);
        }
        for (int j = 0; j < nb; j++) {
            const char *vr = v0 + (size_t)j * rs;
            if (pf && j < nbn)
                prefetch(vnext + (size_t)j * rs + db);
            __m256 x0 = ldkv(vr, d, f16), x1 = ldkv(vr, d + 8, f16);
            for (int h = 0; h < H; h++) {
                __m256 p = _mm256_broadcast_ss(&S[i0 + h][j]);
                acc[h][0] = _mm256_fmadd_ps(p, x0, acc[h][0]);
                acc[h][1] = _mm256_fmadd_ps(p, x1, acc[h][1]);
            }
        }
        for (int h = 0; h < H; h++)
            for (int c = 0; c < 2; c++)
                _mm256_storeu_ps(o + (size_t)(i0 + h) * hd + d + 8 * c, acc[h][c]);
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
    for (int j0 = 0; j0 < a->n; j0 += BK) {
        int nb = a->n - j0 < BK ? a->n - j0 : BK;
        const char *k0 = (const char *)a->k + (size_t)j0 * rs, *v0 = (const char *)a->v + (size_t)j0 * rs;
        int nbn = a->n - j0 - BK; /* the next block's keys */
        nbn = nbn < 0 ? 0 : nbn < BK ? nbn : BK;
        const char *kn = nbn ? k0 + (size_t)BK * rs : NULL, *vn = nbn ? v0 + (size_t)BK * rs : NULL;
        scores(a, k0, nb, rs, f16, S, kn, nbn);
        for (int i = 0; i < g; i++) {
            for (int j = nb; j < BK; j++) /* the block's missing keys weigh nothing */
                S[i][j] = -INFINITY;
            __m256 s[BK / 8], mx = _mm256_set1_ps(-INFINITY);
            for (int c = 0; c < BK / 8; c++)
                mx = _mm256_max_ps(mx, s[c] = _mm256_loadu_ps(S[i] + 8 * c));
            float bm = hmax(mx), mn = m[i] > bm ? m[i] : bm;
            __m256 vm = _mm256_set1_ps(mn), sum = _mm256_setzero_ps();
            for (int c = 0; c < BK / 8; c++) {
                __m256 p = exp256(_mm256_sub_ps(s[c], vm));
                _mm256_storeu_ps(S[i] + 8 * c, p);
                sum = _mm256_add_ps(sum, p);
            }
            alpha[i] = lilac_attn_exp(m[i] - mn);
            l[i] = l[i] * alpha[i] + hsum(sum);
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

void lilac_attn_f32_avx2(const lilac_attn_in *a, float *o, float *m, float *l)
{
    if (a->hd % 16)
        lilac_attn_f32_scalar(a, o, m, l);
    else
        attn(a, o, m, l, false);
}

void lilac_attn_f16_avx2(const lilac_attn_in *a, float *o, float *m, float *l)
{
    if (a->hd % 16)
        lilac_attn_f16_scalar(a, o, m, l);
    else
        attn(a, o, m, l, true);
}
