/* AVX-512 (F, BW, VL, DQ) + VNNI kernels of the fast path (qfast.h).
 *
 * The weights are decoded to unsigned bytes (the sign-trick for Q8_0 and
 * Q4_0: |w| against sign(w) * x) and multiplied with both activation
 * digits by vpdpbusd, each 32-bit lane summing four products:
 *     lane = (sum w * hi) << 8, then += sum w * lo,
 * which is sum w * Q over its four values, exact. Each lane is converted
 * to float32 (exactly: |lane| < 2^24) and multiplied into the float
 * accumulators by the scale of its group, d * sc * (activation unit),
 * picked per lane from the 16 scales of a super-block with vpermps.
 * K-quant minimums and the Q6_K offset of 32 are taken once per
 * super-block from the activations' integer sums per 16 values. */
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

void lilac_qx_quantize_avx512(const float *x, int64_t n, const lilac_qx *q)
{
    const __m512i c128 = _mm512_set1_epi32(128), c255 = _mm512_set1_epi32(255), one = _mm512_set1_epi32(1);
    const __m512 fmax = _mm512_set1_ps(FLT_MAX);
    for (int64_t b = 0; b < n / LILAC_QX_BLOCK; b++) {
        const float *xb = x + b * LILAC_QX_BLOCK;
        __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
        const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        const __mmask16 bad = _mm512_cmp_ps_mask(a0, fmax, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, fmax, _CMP_NLE_UQ);
        float unit = 0, id256 = 0;
        if (bad) {
            unit = NAN; /* NaN or infinite: the block's products are NaN */
        } else if (amax >= LILAC_QX_TINY) {
            const float d = amax / 127.0f, id = 127.0f / amax;
            id256 = id * 256.0f;
            unit = d * (1.0f / 256.0f);
        }
        const __m512 m = _mm512_set1_ps(id256);
        __m512i Q[2] = {_mm512_cvtps_epi32(_mm512_mul_ps(x0, m)), _mm512_cvtps_epi32(_mm512_mul_ps(x1, m))};
        int32_t sum[2];
        for (int h = 0; h < 2; h++) {
            __m512i v = id256 != 0 ? Q[h] : _mm512_setzero_si512();
            /* Q = 128 (mod 256): one step toward zero */
            __mmask16 k = _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, c255), c128);
            v = _mm512_mask_sub_epi32(v, k, v, _mm512_or_si512(_mm512_srai_epi32(v, 31), one));
            __m512i hv = _mm512_srai_epi32(_mm512_add_epi32(v, c128), 8);
            __m512i lv = _mm512_sub_epi32(v, _mm512_slli_epi32(hv, 8));
            const int64_t at = lilac_qx_pos(q->layout, b * LILAC_QX_BLOCK + 16 * h);
            _mm_storeu_si128((__m128i *)(q->hi + at), _mm512_cvtepi32_epi8(hv));
            _mm_storeu_si128((__m128i *)(q->lo + at), _mm512_cvtepi32_epi8(lv));
            sum[h] = _mm512_reduce_add_epi32(v);
        }
        q->unit[b] = unit;
        q->sum16[2 * b] = sum[0];
        q->sum16[2 * b + 1] = sum[1];
        q->sum32[b] = sum[0] + sum[1];
    }
}

/* sum w * Q per lane for 64 unsigned weight bytes against 64 activations */
static inline __m512i wq64(__m512i w, const int8_t *hi, const int8_t *lo)
{
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(hi));
    s = _mm512_slli_epi32(s, 8);
    return _mm512_dpbusd_epi32(s, w, _mm512_loadu_si512(lo));
}

/* the same for signed weight bytes (|w| <= 127, or -128 with |digits| <= 127) */
static inline __m512i wq64_signed(__m512i w, const int8_t *hi, const int8_t *lo)
{
    const __m512i z = _mm512_setzero_si512();
    __mmask64 neg = _mm512_movepi8_mask(w);
    __m512i aw = _mm512_abs_epi8(w);
    __m512i h = _mm512_loadu_si512(hi), l = _mm512_loadu_si512(lo);
    h = _mm512_mask_sub_epi8(h, neg, z, h);
    l = _mm512_mask_sub_epi8(l, neg, z, l);
    __m512i s = _mm512_dpbusd_epi32(z, aw, h);
    s = _mm512_slli_epi32(s, 8);
    return _mm512_dpbusd_epi32(s, aw, l);
}

/* 32-value (ymm) versions for an odd last block */
static inline __m256i wq32_signed(__m256i w, const int8_t *hi, const int8_t *lo)
{
    const __m256i z = _mm256_setzero_si256();
    __mmask32 neg = _mm256_movepi8_mask(w);
    __m256i aw = _mm256_abs_epi8(w);
    __m256i h = _mm256_loadu_si256((const __m256i *)hi), l = _mm256_loadu_si256((const __m256i *)lo);
    h = _mm256_mask_sub_epi8(h, neg, z, h);
    l = _mm256_mask_sub_epi8(l, neg, z, l);
    __m256i s = _mm256_dpbusd_epi32(z, aw, h);
    s = _mm256_slli_epi32(s, 8);
    return _mm256_dpbusd_epi32(s, aw, l);
}

/* lanes [lo-block scale x 8 | hi-block scale x 8] */
static inline __m512 pair_scale(float s0, float s1)
{
    return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

static inline float q8_0_last(const block_q8_0 *b, const lilac_qx *x, int64_t i)
{
    __m256i w = _mm256_loadu_si256((const __m256i *)b->qs);
    __m256i s = wq32_signed(w, x->hi + 32 * i, x->lo + 32 * i);
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(b->d) * x->unit[i]));
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

/* d * unit of blocks i .. i + 7, the oracle's product */
static inline __m512 scales8(const void *blocks, size_t bsize, const lilac_qx *x, int64_t i)
{
    const uint8_t *p = (const uint8_t *)blocks + (size_t)i * bsize; /* d leads Q8_0 and Q4_0 blocks */
    uint16_t d[8];
    for (int k = 0; k < 8; k++)
        memcpy(&d[k], p + (size_t)k * bsize, 2);
    __m256 s = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d)), _mm256_loadu_ps(x->unit + i));
    return _mm512_castps256_ps512(s);
}

/* lanes [block 2k scale x 8 | block 2k + 1 scale x 8] from scales8 */
static inline __m512i pair_idx(int k)
{
    return _mm512_inserti64x4(_mm512_set1_epi32(2 * k), _mm256_set1_epi32(2 * k + 1), 1);
}

float lilac_qdot_q8_0_avx512(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q8_0 *b = row;
    const int64_t nb = n / LILAC_QK8_0;
    const __m512i idx0 = pair_idx(0), idx1 = pair_idx(1), idx2 = pair_idx(2), idx3 = pair_idx(3);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        prefetch(b + i, 8 * sizeof(block_q8_0));
        const __m512 S = scales8(b, sizeof(block_q8_0), x, i);
        __m512i s[4];
        for (int k = 0; k < 4; k++) {
            const block_q8_0 *p = b + i + 2 * k;
            __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[0].qs)),
                                           _mm256_loadu_si256((const __m256i *)p[1].qs), 1);
            s[k] = wq64_signed(w, x->hi + 32 * (i + 2 * k), x->lo + 32 * (i + 2 * k));
        }
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), _mm512_permutexvar_ps(idx0, S), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1]), _mm512_permutexvar_ps(idx1, S), acc1);
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[2]), _mm512_permutexvar_ps(idx2, S), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[3]), _mm512_permutexvar_ps(idx3, S), acc1);
    }
    for (; i + 2 <= nb; i += 2) {
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[i].qs)),
                                       _mm256_loadu_si256((const __m256i *)b[i + 1].qs), 1);
        __m512i s = wq64_signed(w, x->hi + 32 * i, x->lo + 32 * i);
        __m512 f = pair_scale(h2f(b[i].d) * x->unit[i], h2f(b[i + 1].d) * x->unit[i + 1]);
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc0);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if (i < nb)
        s += q8_0_last(&b[i], x, i);
    return s;
}

static inline __m256i q4_0_bytes(const block_q4_0 *b)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

/* Q4_0 in runs of 8 blocks: the nibbles q unsigned against Q, and the
 * offset, sum (q - 8) * Q = sum q * Q - 8 * (sum of the block's Q), once
 * per run from the activations' sums; pairs and a last block as signed
 * values (|w| against sign(w) * Q). */
float lilac_qdot_q4_0_avx512(const void *row, const lilac_qx *x, int64_t n)
{
    const block_q4_0 *b = row;
    const int64_t nb = n / LILAC_QK4_0;
    const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    /* [qs0, qs0, qs1, qs1] by 128-bit lanes, odd lanes shifted to their high nibbles */
    const __m512i dup = _mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0);
    const __m512i idx0 = pair_idx(0), idx1 = pair_idx(1), idx2 = pair_idx(2), idx3 = pair_idx(3);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    __m256 corr = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        prefetch(b + i, 8 * sizeof(block_q4_0));
        const __m512 S = scales8(b, sizeof(block_q4_0), x, i);
        corr = _mm256_fmadd_ps(_mm512_castps512_ps256(S),
                               _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(x->sum32 + i))), corr);
        __m512i s[4];
        for (int k = 0; k < 4; k++) {
            const block_q4_0 *p = b + i + 2 * k;
            __m256i two = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p[0].qs)),
                                                  _mm_loadu_si128((const __m128i *)p[1].qs), 1);
            __m512i v = _mm512_permutexvar_epi64(dup, _mm512_castsi256_si512(two));
            v = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), m4);
            s[k] = wq64(v, x->hi + 32 * (i + 2 * k), x->lo + 32 * (i + 2 * k));
        }
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), _mm512_permutexvar_ps(idx0, S), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1]), _mm512_permutexvar_ps(idx1, S), acc1);
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[2]), _mm512_permutexvar_ps(idx2, S), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[3]), _mm512_permutexvar_ps(idx3, S), acc1);
    }
    for (; i + 2 <= nb; i += 2) {
        __m256i two = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)b[i].qs)),
                                              _mm_loadu_si128((const __m128i *)b[i + 1].qs), 1);
        __m512i v = _mm512_permutexvar_epi64(dup, _mm512_castsi256_si512(two));
        v = _mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4);
        v = _mm512_sub_epi8(_mm512_and_si512(v, m4), eight);
        __m512i s = wq64_signed(v, x->hi + 32 * i, x->lo + 32 * i);
        __m512 f = pair_scale(h2f(b[i].d) * x->unit[i], h2f(b[i + 1].d) * x->unit[i + 1]);
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc0);
    }
    __m128 c = _mm_add_ps(_mm256_castps256_ps128(corr), _mm256_extractf128_ps(corr, 1));
    c = _mm_add_ps(c, _mm_movehl_ps(c, c));
    c = _mm_add_ss(c, _mm_movehdup_ps(c));
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) - 8.0f * _mm_cvtss_f32(c);
    if (i < nb) {
        __m256i sv = wq32_signed(q4_0_bytes(&b[i]), x->hi + 32 * i, x->lo + 32 * i);
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(sv), _mm256_set1_ps(h2f(b[i].d) * x->unit[i]));
        __m128 r = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        s += _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
    }
    return s;
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

/* Lane l of 64-value vector j of a super-block (NATURAL layout) belongs
 * to 16-value group 4j + l / 4. */
static inline __m512i group_idx(int j)
{
    return _mm512_add_epi32(_mm512_set1_epi32(4 * j),
                            _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
}

/* Q4_K and Q5_K (KQ layout): w = d * sc * q - dmin * m per group of 32.
 * The 128 nibble bytes, as 128-bit pieces a0..a3 (runs 0, 1) and b0..b3
 * (runs 2, 3), regroup into Z = [a0 a2 b0 b2] (values 0..15 of each run)
 * and Z' = [a1 a3 b1 b3] (16..31): their low nibbles against activation
 * runs 0 and 1 are the even groups 2 (l / 4) of lane l, their high nibbles
 * against runs 2 and 3 the odd groups. */
#define QFAST_INLINE static inline __attribute__((always_inline))

/* nt rows of activations x[0 .. nt) against one weight row: the weights
 * are decoded once per super-block, and each row takes exactly the steps
 * it takes alone (so nt = 1 is the single-row dot, bit for bit). */
QFAST_INLINE void qdot_kq(const uint8_t *blocks, size_t bsize, size_t off_qs, size_t off_qh, int has_qh,
                          const lilac_qx *x, int nt, int64_t n, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    const __m512i even = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    /* Q5_K: bit 2r (even groups) or 2r + 1 (odd) of qh[l] for run r = 128-bit lane */
    const __m512i bits_e = _mm512_set_epi32(0x40404040, 0x40404040, 0x40404040, 0x40404040, 0x10101010, 0x10101010,
                                            0x10101010, 0x10101010, 0x04040404, 0x04040404, 0x04040404, 0x04040404,
                                            0x01010101, 0x01010101, 0x01010101, 0x01010101);
    const __m512i bits_o = _mm512_add_epi8(bits_e, bits_e);
    __m512 acc_e[LILAC_QDOT_NT], acc_o[LILAC_QDOT_NT];
    __m256 accm[LILAC_QDOT_NT];
    for (int t = 0; t < nt; t++) {
        acc_e[t] = _mm512_setzero_ps();
        acc_o[t] = acc_e[t];
        accm[t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const uint8_t *blk = blocks + (size_t)i * bsize;
        prefetch(blk, bsize);
        uint16_t dh, dminh; /* d, dmin and scales lead both block types */
        memcpy(&dh, blk + offsetof(block_q4_K, d), 2);
        memcpy(&dminh, blk + offsetof(block_q4_K, dmin), 2);
        __m128i sm = kq_scales_mins(blk + offsetof(block_q4_K, scales));
        const __m256 dsc = _mm256_mul_ps(_mm256_set1_ps(h2f(dh)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)));
        const __m256 dmn =
            _mm256_mul_ps(_mm256_set1_ps(h2f(dminh)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))));

        const __m512i L0 = _mm512_loadu_si512(blk + off_qs), L1 = _mm512_loadu_si512(blk + off_qs + 64);
        const __m512i Z = _mm512_shuffle_i64x2(L0, L1, _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i Z2 = _mm512_shuffle_i64x2(L0, L1, _MM_SHUFFLE(3, 1, 3, 1));
        __m512i w0 = _mm512_and_si512(Z, m4), w1 = _mm512_and_si512(Z2, m4);
        __m512i w2 = _mm512_and_si512(_mm512_srli_epi16(Z, 4), m4), w3 = _mm512_and_si512(_mm512_srli_epi16(Z2, 4), m4);
        if (has_qh) {
            const __m512i h0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk + off_qh)));
            const __m512i h1 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk + off_qh + 16)));
            w0 = _mm512_mask_add_epi8(w0, _mm512_test_epi8_mask(h0, bits_e), w0, sixteen);
            w1 = _mm512_mask_add_epi8(w1, _mm512_test_epi8_mask(h1, bits_e), w1, sixteen);
            w2 = _mm512_mask_add_epi8(w2, _mm512_test_epi8_mask(h0, bits_o), w2, sixteen);
            w3 = _mm512_mask_add_epi8(w3, _mm512_test_epi8_mask(h1, bits_o), w3, sixteen);
        }
        for (int t = 0; t < nt; t++) {
            const lilac_qx *xt = &x[t];
            const int8_t *xh = xt->hi + 256 * i, *xl = xt->lo + 256 * i;
            const __m256 u = _mm256_loadu_ps(xt->unit + 8 * i);
            /* per group: d * sc * unit, dmin * m * unit (the oracle's order) */
            const __m256 F = _mm256_mul_ps(dsc, u);
            const __m256 M = _mm256_mul_ps(dmn, u);
            accm[t] = _mm256_fmadd_ps(M, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(xt->sum32 + 8 * i))),
                                      accm[t]);
            const __m512i z = _mm512_setzero_si512();
            __m512i se = _mm512_dpbusd_epi32(z, w0, _mm512_loadu_si512(xh));
            __m512i so = _mm512_dpbusd_epi32(z, w2, _mm512_loadu_si512(xh + 128));
            se = _mm512_dpbusd_epi32(se, w1, _mm512_loadu_si512(xh + 64));
            so = _mm512_dpbusd_epi32(so, w3, _mm512_loadu_si512(xh + 192));
            se = _mm512_slli_epi32(se, 8);
            so = _mm512_slli_epi32(so, 8);
            se = _mm512_dpbusd_epi32(se, w0, _mm512_loadu_si512(xl));
            so = _mm512_dpbusd_epi32(so, w2, _mm512_loadu_si512(xl + 128));
            se = _mm512_dpbusd_epi32(se, w1, _mm512_loadu_si512(xl + 64));
            so = _mm512_dpbusd_epi32(so, w3, _mm512_loadu_si512(xl + 192));
            const __m512 F512 = _mm512_castps256_ps512(F);
            acc_e[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(se), _mm512_permutexvar_ps(even, F512), acc_e[t]);
            acc_o[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(so), _mm512_permutexvar_ps(odd, F512), acc_o[t]);
        }
    }
    /* one reduction: the minimums ride in the low half */
    for (int t = 0; t < nt; t++) {
        __m512 acc = _mm512_sub_ps(_mm512_add_ps(acc_e[t], acc_o[t]), _mm512_zextps256_ps512(accm[t]));
        out[t] = _mm512_reduce_add_ps(acc);
    }
}

float lilac_qdot_q4_K_avx512(const void *row, const lilac_qx *x, int64_t n)
{
    float s;
    qdot_kq(row, sizeof(block_q4_K), offsetof(block_q4_K, qs), 0, 0, x, 1, n, &s);
    return s;
}

void lilac_qdotn_q4_K_avx512(const void *row, const lilac_qx *x, int nt, int64_t n, float *out)
{
#define KQ4(NT) qdot_kq(row, sizeof(block_q4_K), offsetof(block_q4_K, qs), 0, 0, x, NT, n, out)
    switch (nt) {
    case 4: KQ4(4); break;
    case 3: KQ4(3); break;
    case 2: KQ4(2); break;
    default: KQ4(1); break;
    }
#undef KQ4
}

float lilac_qdot_q5_K_avx512(const void *row, const lilac_qx *x, int64_t n)
{
    float s;
    qdot_kq(row, sizeof(block_q5_K), offsetof(block_q5_K, qs), offsetof(block_q5_K, qh), 1, x, 1, n, &s);
    return s;
}

QFAST_INLINE void qdot_q6_K(const block_q6_K *b, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* 16-bit shift counts: [4 | 2] brings qh bits 0-1 / 2-3 to bits 4-5,
     * [0 | 2] bits 4-5 / 6-7 (values 32..63 of each half take the second) */
    const __m512i shA = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shB = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i idx0 = group_idx(0), idx1 = group_idx(1), idx2 = group_idx(2), idx3 = group_idx(3);
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512 acc0[LILAC_QDOT_NT], acc1[LILAC_QDOT_NT], acc2[LILAC_QDOT_NT], acc3[LILAC_QDOT_NT], accc[LILAC_QDOT_NT];
    for (int t = 0; t < nt; t++) {
        acc0[t] = _mm512_setzero_ps();
        acc1[t] = acc0[t], acc2[t] = acc0[t], acc3[t] = acc0[t], accc[t] = acc0[t];
    }
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        prefetch(b + i, sizeof(block_q6_K));
        const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[i].scales)));
        const __m512 dsc = _mm512_mul_ps(_mm512_set1_ps(h2f(b[i].d)), sc);
        __m512i w[4];
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(b[i].ql + 64 * h);
            __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h)));
            __m512i ha = _mm512_and_si512(_mm512_sllv_epi16(qh, shA), m30);
            __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, shB), m30);
            /* m4 ? low bits : high bits */
            w[2 * h] = _mm512_ternarylogic_epi32(m4, ql, ha, 0xCA);
            w[2 * h + 1] = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi16(ql, 4), hb, 0xCA);
        }
        for (int t = 0; t < nt; t++) {
            const lilac_qx *xt = &x[t];
            const int8_t *xh = xt->hi + 256 * i, *xl = xt->lo + 256 * i;
            /* the unit of each 16 values */
            const __m512 u = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(xt->unit + 8 * i)));
            const __m512 F = _mm512_mul_ps(dsc, u);
            /* the offset: q - 32 against Q is q * Q - 32 * Q */
            accc[t] = _mm512_fmadd_ps(F, _mm512_cvtepi32_ps(_mm512_loadu_si512(xt->sum16 + 16 * i)), accc[t]);
            acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(wq64(w[0], xh, xl)), _mm512_permutexvar_ps(idx0, F), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(wq64(w[1], xh + 64, xl + 64)), _mm512_permutexvar_ps(idx1, F),
                                      acc1[t]);
            acc2[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(wq64(w[2], xh + 128, xl + 128)),
                                      _mm512_permutexvar_ps(idx2, F), acc2[t]);
            acc3[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(wq64(w[3], xh + 192, xl + 192)),
                                      _mm512_permutexvar_ps(idx3, F), acc3[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        __m512 acc = _mm512_add_ps(_mm512_add_ps(acc0[t], acc1[t]), _mm512_add_ps(acc2[t], acc3[t]));
        out[t] = _mm512_reduce_add_ps(_mm512_fnmadd_ps(_mm512_set1_ps(32.0f), accc[t], acc));
    }
}

float lilac_qdot_q6_K_avx512(const void *row, const lilac_qx *x, int64_t n)
{
    float s;
    qdot_q6_K(row, x, 1, n, &s);
    return s;
}

void lilac_qdotn_q6_K_avx512(const void *row, const lilac_qx *x, int nt, int64_t n, float *out)
{
    switch (nt) {
    case 4: qdot_q6_K(row, x, 4, n, out); break;
    case 3: qdot_q6_K(row, x, 3, n, out); break;
    case 2: qdot_q6_K(row, x, 2, n, out); break;
    default: qdot_q6_K(row, x, 1, n, out); break;
    }
}
