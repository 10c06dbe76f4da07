/* AVX2 + FMA + F16C dot products of the GGUF block types on the precise
 * path: each block is decoded into registers to the very float32 values
 * the scalar oracle produces (same multiplies and subtractions, never
 * fused), then fused-multiply-added with x in four accumulators of eight
 * lanes. Only the order of the sum differs from the oracle. */
#include <immintrin.h>

#include "kernels/cpu/quant.h"

static inline float hsum(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* The low 8 bytes of v as floats, signed or unsigned. */
static inline __m256 i8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
static inline __m256 u8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

/* acc[k] += (scale * q[8k..8k+8)) * x[8k..8k+8) for the 32 signed bytes q. */
static inline void fma_i8x32(__m256i q, __m256 scale, const float *x, __m256 acc[4])
{
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    acc[0] = _mm256_fmadd_ps(_mm256_mul_ps(i8x8_ps(lo), scale), _mm256_loadu_ps(x), acc[0]);
    acc[1] = _mm256_fmadd_ps(_mm256_mul_ps(i8x8_ps(_mm_srli_si128(lo, 8)), scale), _mm256_loadu_ps(x + 8), acc[1]);
    acc[2] = _mm256_fmadd_ps(_mm256_mul_ps(i8x8_ps(hi), scale), _mm256_loadu_ps(x + 16), acc[2]);
    acc[3] = _mm256_fmadd_ps(_mm256_mul_ps(i8x8_ps(_mm_srli_si128(hi, 8)), scale), _mm256_loadu_ps(x + 24), acc[3]);
}

/* The same for 16 signed bytes (the low 128 bits) over two accumulators. */
static inline void fma_i8x16(__m128i q, __m256 scale, const float *x, __m256 *a0, __m256 *a1)
{
    *a0 = _mm256_fmadd_ps(_mm256_mul_ps(i8x8_ps(q), scale), _mm256_loadu_ps(x), *a0);
    *a1 = _mm256_fmadd_ps(_mm256_mul_ps(i8x8_ps(_mm_srli_si128(q, 8)), scale), _mm256_loadu_ps(x + 8), *a1);
}

/* acc[k] += (d * q - m) * x for the 32 unsigned bytes q: the K-quant
 * decode d1 * q - m1, product and difference rounded apart as in ggml. */
static inline void fma_u8x32_min(__m256i q, __m256 d, __m256 m, const float *x, __m256 acc[4])
{
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    __m256 w0 = _mm256_sub_ps(_mm256_mul_ps(u8x8_ps(lo), d), m);
    __m256 w1 = _mm256_sub_ps(_mm256_mul_ps(u8x8_ps(_mm_srli_si128(lo, 8)), d), m);
    __m256 w2 = _mm256_sub_ps(_mm256_mul_ps(u8x8_ps(hi), d), m);
    __m256 w3 = _mm256_sub_ps(_mm256_mul_ps(u8x8_ps(_mm_srli_si128(hi, 8)), d), m);
    acc[0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[0]);
    acc[1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc[1]);
    acc[2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), acc[2]);
    acc[3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), acc[3]);
}

static inline float sum4(const __m256 acc[4])
{
    return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

float lilac_dot_q8_0_avx2(const void *row, const float *x, int64_t n)
{
    const block_q8_0 *b = row;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / LILAC_QK8_0; i++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)b[i].qs);
        fma_i8x32(q, _mm256_set1_ps(h2f(b[i].d)), x + i * LILAC_QK8_0, acc);
    }
    return sum4(acc);
}

float lilac_dot_q4_0_avx2(const void *row, const float *x, int64_t n)
{
    const block_q4_0 *b = row;
    const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / LILAC_QK4_0; i++) {
        __m128i raw = _mm_loadu_si128((const __m128i *)b[i].qs);
        __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, low4), eight);                    /* values 0..15 */
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), eight); /* values 16..31 */
        fma_i8x32(_mm256_set_m128i(hi, lo), _mm256_set1_ps(h2f(b[i].d)), x + i * LILAC_QK4_0, acc);
    }
    return sum4(acc);
}

float lilac_dot_q4_K_avx2(const void *row, const float *x, int64_t n)
{
    const block_q4_K *b = row;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        const float *xb = x + i * LILAC_QK_K;
        uint8_t sc[8], m[8];
        lilac_kq_scales(b[i].scales, sc, m);
        for (int j = 0; j < 4; j++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * j));
            __m256i lo = _mm256_and_si256(raw, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            fma_u8x32_min(lo, _mm256_set1_ps(d * (float)sc[2 * j]), _mm256_set1_ps(dmin * (float)m[2 * j]),
                          xb + 64 * j, acc);
            fma_u8x32_min(hi, _mm256_set1_ps(d * (float)sc[2 * j + 1]), _mm256_set1_ps(dmin * (float)m[2 * j + 1]),
                          xb + 64 * j + 32, acc);
        }
    }
    return sum4(acc);
}

float lilac_dot_q5_K_avx2(const void *row, const float *x, int64_t n)
{
    const block_q5_K *b = row;
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        const float *xb = x + i * LILAC_QK_K;
        uint8_t sc[8], m[8];
        lilac_kq_scales(b[i].scales, sc, m);
        /* qh shifts right by 2 per run of 64, so bits 0 and 1 of each byte
         * are always this run's (ggml's u1, u2); 16-bit shifts of at most 7
         * never carry a neighbour's bits into those two. */
        __m256i qh = _mm256_loadu_si256((const __m256i *)b[i].qh);
        for (int j = 0; j < 4; j++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * j));
            __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
            __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(raw, low4), h_lo);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low4), h_hi);
            fma_u8x32_min(lo, _mm256_set1_ps(d * (float)sc[2 * j]), _mm256_set1_ps(dmin * (float)m[2 * j]),
                          xb + 64 * j, acc);
            fma_u8x32_min(hi, _mm256_set1_ps(d * (float)sc[2 * j + 1]), _mm256_set1_ps(dmin * (float)m[2 * j + 1]),
                          xb + 64 * j + 32, acc);
            qh = _mm256_srli_epi16(qh, 2);
        }
    }
    return sum4(acc);
}

float lilac_dot_q6_K_avx2(const void *row, const float *x, int64_t n)
{
    const block_q6_K *b = row;
    const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const float d = h2f(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qhp = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            const float *xb = x + i * LILAC_QK_K + 128 * h;
            __m256i qla = _mm256_loadu_si256((const __m256i *)ql);
            __m256i qlb = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)qhp);
            /* the four runs of 32: low/high nibbles of ql[0..32) and
             * ql[32..64), topped by bit pairs 0, 1, 2, 3 of qh */
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(qla, low4), _mm256_slli_epi16(_mm256_and_si256(qh, three), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(qlb, low4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), three), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qla, 4), low4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), three), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qlb, 4), low4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), three), 4));
            for (int k = 0; k < 4; k++) {
                __m256i v = _mm256_sub_epi8(q[k], off); /* -32..31 */
                __m256 s0 = _mm256_set1_ps(d * (float)sc[2 * k]), s1 = _mm256_set1_ps(d * (float)sc[2 * k + 1]);
                fma_i8x16(_mm256_castsi256_si128(v), s0, xb + 32 * k, &acc[0], &acc[1]);
                fma_i8x16(_mm256_extracti128_si256(v, 1), s1, xb + 32 * k + 16, &acc[2], &acc[3]);
            }
        }
    }
    return sum4(acc);
}
