/* AVX2 (+ FMA, F16C) kernels of the fast path (qfast.h), for processors
 * without AVX-512 VNNI.
 *
 * Weights are decoded to unsigned bytes (|w| against sign(w) * x for
 * Q8_0 and Q4_0) and multiplied with each activation digit by vpmaddubsw
 * into 16-bit pairs; vpmaddwd with 256 (high digit) and 1 (low digit)
 * widens and weighs them, so that each 32-bit lane holds sum w * Q over
 * four values, exactly: the digits are within -127..127 and the weights
 * within 0..128, so no 16-bit pair saturates (2 * 63 * 127 at most here,
 * and two such sums of the same lanes are added in 16 bits only where
 * the weights stay below 32). The lanes are converted to float32
 * (exactly, below 2^24) and multiplied by the scale of their group. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/qfast.h"
#include "kernels/cpu/quant.h"

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* Weights are read once per product, from memory: ask for them 4 KB
 * ahead, non-temporally (into L1, sparing L2 and L3 what is used once).
 * The hardware prefetcher alone leaves the kernels ~20 % short of their
 * in-cache speed; T0 at the same distance does about as well for Q4_K and
 * a few per cent worse for Q5_K and Q6_K, L2 (T1) clearly worse. */
#define PREFETCH_AHEAD 4096
static inline void prefetch(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + PREFETCH_AHEAD + o, _MM_HINT_NTA);
}

static inline float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

static inline int32_t hsum8_epi32(__m256i v)
{
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

void lilac_qx_quantize_avx2(const float *x, int64_t n, const lilac_qx *q)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), fmax = _mm256_set1_ps(FLT_MAX);
    const __m256i c128 = _mm256_set1_epi32(128), c255 = _mm256_set1_epi32(255), one = _mm256_set1_epi32(1);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / LILAC_QX_BLOCK; b++) {
        const float *xb = x + b * LILAC_QX_BLOCK;
        __m256 xv[4];
        for (int k = 0; k < 4; k++)
            xv[k] = _mm256_loadu_ps(xb + 8 * k);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, xv[0]), _mm256_andnot_ps(sign, xv[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, xv[2]), _mm256_andnot_ps(sign, xv[3])));
        __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        r = _mm_max_ps(r, _mm_movehl_ps(r, r));
        const float amax = _mm_cvtss_f32(_mm_max_ss(r, _mm_movehdup_ps(r)));
        __m256 bad = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++)
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_andnot_ps(sign, xv[k]), fmax, _CMP_NLE_UQ));
        float unit = 0, id256 = 0;
        if (_mm256_movemask_ps(bad)) {
            unit = NAN; /* NaN or infinite: the block's products are NaN */
        } else if (amax >= LILAC_QX_TINY) {
            const float d = amax / 127.0f, id = 127.0f / amax;
            id256 = id * 256.0f;
            unit = d * (1.0f / 256.0f);
        }
        const __m256 mul = _mm256_set1_ps(id256);
        __m256i hv[4], lv[4], s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int k = 0; k < 4; k++) {
            __m256i v = id256 != 0 ? _mm256_cvtps_epi32(_mm256_mul_ps(xv[k], mul)) : _mm256_setzero_si256();
            /* Q = 128 (mod 256): one step toward zero */
            __m256i tie = _mm256_cmpeq_epi32(_mm256_and_si256(v, c255), c128);
            __m256i step = _mm256_or_si256(_mm256_srai_epi32(v, 31), one);
            v = _mm256_sub_epi32(v, _mm256_and_si256(tie, step));
            hv[k] = _mm256_srai_epi32(_mm256_add_epi32(v, c128), 8);
            lv[k] = _mm256_sub_epi32(v, _mm256_slli_epi32(hv[k], 8));
            s[k / 2] = _mm256_add_epi32(s[k / 2], v);
        }
        /* 32 int32 to 32 bytes in order (the packs work per 128-bit lane) */
        __m256i h8 = _mm256_packs_epi16(_mm256_packs_epi32(hv[0], hv[1]), _mm256_packs_epi32(hv[2], hv[3]));
        __m256i l8 = _mm256_packs_epi16(_mm256_packs_epi32(lv[0], lv[1]), _mm256_packs_epi32(lv[2], lv[3]));
        h8 = _mm256_permutevar8x32_epi32(h8, order);
        l8 = _mm256_permutevar8x32_epi32(l8, order);
        for (int h = 0; h < 2; h++) {
            const int64_t at = lilac_qx_pos(q->layout, b * LILAC_QX_BLOCK + 16 * h);
            _mm_storeu_si128((__m128i *)(q->hi + at), h ? _mm256_extracti128_si256(h8, 1) : _mm256_castsi256_si128(h8));
            _mm_storeu_si128((__m128i *)(q->lo + at), h ? _mm256_extracti128_si256(l8, 1) : _mm256_castsi256_si128(l8));
        }
        const int32_t s0 = hsum8_epi32(s[0]), s1 = hsum8_epi32(s[1]);
        q->unit[b] = unit;
        q->sum16[2 * b] = s0;
        q->sum16[2 * b + 1] = s1;
        q->sum32[b] = s0 + s1;
    }
}

/* sum w * Q per 32-bit lane (four values) for 32 unsigned weight bytes */
static inline __m256i wq32(__m256i w, const int8_t *hi, const int8_t *lo)
{
    const __m256i c256 = _mm256_set1_epi16(256), c1 = _mm256_set1_epi16(1);
    __m256i ph = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)hi));
    __m256i pl = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)lo));
    return _mm256_add_epi32(_mm256_madd_epi16(ph, c256), _mm256_madd_epi16(pl, c1));
}

/* the same for signed weight bytes: |w| against sign(w) * digit */
static inline __m256i wq32_signed(__m256i w, const int8_t *hi, const int8_t *lo)
{
    const __m256i c256 = _mm256_set1_epi16(256), c1 = _mm256_set1_epi16(1);
    __m256i aw = _mm256_sign_epi8(w, w);
    __m256i ph = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)hi), w));
    __m256i pl = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)lo), w));
    return _mm256_add_epi32(_mm256_madd_epi16(ph, c256), _mm256_madd_epi16(pl, c1));
}

float lilac_qdot_q8_0_avx2(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q8_0 *b = row;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t i = 0, nb = n / LILAC_QK8_0;
    for (; i + 2 <= nb; i += 2) {
        prefetch(b + i, 2 * sizeof(block_q8_0));
        __m256i s0 = wq32_signed(_mm256_loadu_si256((const __m256i *)b[i].qs), x->hi + 32 * i, x->lo + 32 * i);
        __m256i s1 = wq32_signed(_mm256_loadu_si256((const __m256i *)b[i + 1].qs), x->hi + 32 * i + 32,
                                 x->lo + 32 * i + 32);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(h2f(b[i].d) * x->unit[i]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(h2f(b[i + 1].d) * x->unit[i + 1]), acc1);
    }
    if (i < nb) {
        __m256i s0 = wq32_signed(_mm256_loadu_si256((const __m256i *)b[i].qs), x->hi + 32 * i, x->lo + 32 * i);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(h2f(b[i].d) * x->unit[i]), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

static inline __m256i q4_0_values(const block_q4_0 *b)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

float lilac_qdot_q4_0_avx2(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q4_0 *b = row;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t i = 0, nb = n / LILAC_QK4_0;
    for (; i + 2 <= nb; i += 2) {
        prefetch(b + i, 2 * sizeof(block_q4_0));
        __m256i s0 = wq32_signed(q4_0_values(&b[i]), x->hi + 32 * i, x->lo + 32 * i);
        __m256i s1 = wq32_signed(q4_0_values(&b[i + 1]), x->hi + 32 * i + 32, x->lo + 32 * i + 32);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(h2f(b[i].d) * x->unit[i]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(h2f(b[i + 1].d) * x->unit[i + 1]), acc1);
    }
    if (i < nb) {
        __m256i s0 = wq32_signed(q4_0_values(&b[i]), x->hi + 32 * i, x->lo + 32 * i);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(h2f(b[i].d) * x->unit[i]), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* The eight 6-bit scales (bytes 0..7) and mins (bytes 8..15) of a
 * Q4_K/Q5_K block, by ggml's word trick. */
static inline __m128i kq_scales_mins(const uint8_t *scales)
{
    uint32_t u[4];
    memcpy(u, scales, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t m03 = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m03;
    u[0] &= k1;
    return _mm_loadu_si128((const __m128i *)u);
}

/* Q4_K and Q5_K over the KQ layout (see qfast_avx512.c): piece m of the
 * activations (64 bytes at 64m) meets, per 32-byte half h, the nibbles of
 * runs 2h and 2h + 1; lane l of half h belongs to group 2 (2h + l / 4) +
 * (m >= 2). Pieces m and m + 1 share their lanes' groups, so their 16-bit
 * pair sums are added before widening (4 * 31 * 127 at most). */
static inline float qdot_kq(const uint8_t *blocks, size_t bsize, size_t off_qs, size_t off_qh, int has_qh,
                            const lilac_qx *x, int64_t n)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), c256 = _mm256_set1_epi16(256), c1 = _mm256_set1_epi16(1);
    const __m256i sixteen = _mm256_set1_epi8(16);
    /* group of lane l, per parity p (even groups: low nibbles) and half h;
     * for Q5_K also the bit of qh that holds that group's fifth bits */
    const __m256i gidx[2][2] = {
        {_mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2), _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6)},
        {_mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3), _mm256_setr_epi32(5, 5, 5, 5, 7, 7, 7, 7)},
    };
    const __m256 zero = _mm256_setzero_ps();
    __m256 acc[2][2] = {{zero, zero}, {zero, zero}};
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const uint8_t *blk = blocks + (size_t)i * bsize;
        prefetch(blk, bsize);
        uint16_t dh, dminh;
        memcpy(&dh, blk + offsetof(block_q4_K, d), 2);
        memcpy(&dminh, blk + offsetof(block_q4_K, dmin), 2);
        const int8_t *xh = x->hi + 256 * i, *xl = x->lo + 256 * i;
        const __m256 u = _mm256_loadu_ps(x->unit + 8 * i);
        __m128i sm = kq_scales_mins(blk + offsetof(block_q4_K, scales));
        __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
        __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
        const __m256 F = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(h2f(dh)), sc), u);
        const __m256 M = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(h2f(dminh)), mn), u);
        const __m256i s32 = _mm256_loadu_si256((const __m256i *)(x->sum32 + 8 * i));
        accm = _mm256_fmadd_ps(M, _mm256_cvtepi32_ps(s32), accm);

        const uint8_t *qs = blk + off_qs;
        const __m256i *qv = (const __m256i *)qs;
        __m256i y0 = _mm256_loadu_si256(qv), y1 = _mm256_loadu_si256(qv + 1);
        __m256i y2 = _mm256_loadu_si256(qv + 2), y3 = _mm256_loadu_si256(qv + 3);
        /* z[k][h]: values 16k..16k+15 of runs 2h and 2h + 1 */
        __m256i z[2][2] = {{_mm256_permute2x128_si256(y0, y1, 0x20), _mm256_permute2x128_si256(y2, y3, 0x20)},
                           {_mm256_permute2x128_si256(y0, y1, 0x31), _mm256_permute2x128_si256(y2, y3, 0x31)}};
        __m256i qh[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        if (has_qh) {
            qh[0] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + off_qh)));
            qh[1] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + off_qh + 16)));
        }
        for (int p = 0; p < 2; p++)
            for (int h = 0; h < 2; h++) {
                __m256i ph = _mm256_setzero_si256(), pl = ph;
                for (int k = 0; k < 2; k++) {
                    const int m = 2 * p + k; /* activation piece */
                    __m256i w = p ? _mm256_srli_epi16(z[k][h], 4) : z[k][h];
                    w = _mm256_and_si256(w, m4);
                    if (has_qh) {
                        __m256i bit = _mm256_slli_epi16(_mm256_srlv_epi32(qh[k], gidx[p][h]), 4);
                        w = _mm256_or_si256(w, _mm256_and_si256(bit, sixteen));
                    }
                    const int64_t at = 64 * m + 32 * h;
                    ph = _mm256_add_epi16(ph, _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(xh + at))));
                    pl = _mm256_add_epi16(pl, _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(xl + at))));
                }
                __m256i s = _mm256_add_epi32(_mm256_madd_epi16(ph, c256), _mm256_madd_epi16(pl, c1));
                acc[p][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_permutevar8x32_ps(F, gidx[p][h]), acc[p][h]);
            }
    }
    __m256 a = _mm256_add_ps(_mm256_add_ps(acc[0][0], acc[0][1]), _mm256_add_ps(acc[1][0], acc[1][1]));
    return hsum8(a) - hsum8(accm);
}

float lilac_qdot_q4_K_avx2(const void *row, const lilac_qx *x, int64_t n)
{
    return qdot_kq(row, sizeof(block_q4_K), offsetof(block_q4_K, qs), 0, 0, x, n);
}

float lilac_qdot_q5_K_avx2(const void *row, const lilac_qx *x, int64_t n)
{
    return qdot_kq(row, sizeof(block_q5_K), offsetof(block_q5_K, qs), offsetof(block_q5_K, qh), 1, x, n);
}

float lilac_qdot_q6_K_avx2(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q6_K *b = row;
    const __m256i m4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    /* lanes 0-3 of a 32-value vector take the scale of its first 16 values */
    const __m256i idx[4] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
                            _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)};
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 accc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        prefetch(b + i, sizeof(block_q6_K));
        const int8_t *xh = x->hi + 256 * i, *xl = x->lo + 256 * i;
        const __m256 d = _mm256_set1_ps(h2f(b[i].d));
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[i].scales);
        const __m256 u8 = _mm256_loadu_ps(x->unit + 8 * i);
        /* F[h]: d * sc * unit of the 16-value groups 8h..8h+7 */
        __m256 F[2];
        F[0] = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))),
                             _mm256_permutevar8x32_ps(u8, dup));
        F[1] = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8)))),
                             _mm256_permutevar8x32_ps(u8, _mm256_add_epi32(dup, _mm256_set1_epi32(4))));
        const __m256i s0 = _mm256_loadu_si256((const __m256i *)(x->sum16 + 16 * i));
        const __m256i s1 = _mm256_loadu_si256((const __m256i *)(x->sum16 + 16 * i + 8));
        accc = _mm256_fmadd_ps(F[0], _mm256_cvtepi32_ps(s0), accc);
        accc = _mm256_fmadd_ps(F[1], _mm256_cvtepi32_ps(s1), accc);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qhp = b[i].qh + 32 * h;
            __m256i qla = _mm256_loadu_si256((const __m256i *)ql);
            __m256i qlb = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)qhp);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(qla, m4), _mm256_slli_epi16(_mm256_and_si256(qh, three), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(qlb, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), three), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qla, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), three), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qlb, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), three), 4));
            for (int k = 0; k < 4; k++) {
                const int64_t a = 128 * h + 32 * k;
                __m256i s = wq32(q[k], xh + a, xl + a);
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_permutevar8x32_ps(F[h], idx[k]), acc[k]);
            }
        }
    }
    __m256 a = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    return hsum8(a) - 32.0f * hsum8(accc);
}
