/* The AVX-512 kernel set (F, BW, VL, DQ + VNNI): float32, float16 and
 * bfloat16 dot products in sixteen float32 lanes with four accumulators
 * and a masked tail; the precise block-type dots are the AVX2 ones
 * (quant_avx2.c: decoding, not arithmetic, bounds them), the fast path is
 * qfast_avx512.c. Activations stay float32 for the float types: a bf16
 * weight is widened exactly, never the activation narrowed. */
#include <immintrin.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qfast.h"
#include "kernels/cpu/quant.h"

static inline __m512 load_f32(const void *p, int64_t i) { return _mm512_loadu_ps((const float *)p + i); }
/* two 256-bit conversions: the 512-bit vcvtph2ps is slower than two of
 * them on AMD Zen 4 (18.8 against 24 GB/s streamed, one thread) */
static inline __m512 load_f16(const void *p, int64_t i)
{
    const uint16_t *h = (const uint16_t *)p + i;
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h))),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 8))), 1);
}
static inline __m512 load_bf16(const void *p, int64_t i)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The last m < 16 values, zero beyond. */
static inline __m512 tail_f32(const void *p, int64_t i, __mmask16 k)
{
    return _mm512_maskz_loadu_ps(k, (const float *)p + i);
}
static inline __m512 tail_f16(const void *p, int64_t i, __mmask16 k)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i));
}
static inline __m512 tail_bf16(const void *p, int64_t i, __mmask16 k)
{
    __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define DOT512(LOAD, TAIL)                                                            \
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                       \
    int64_t i = 0;                                                                    \
    for (; i + 64 <= n; i += 64) {                                                    \
        a0 = _mm512_fmadd_ps(LOAD(row, i), _mm512_loadu_ps(x + i), a0);               \
        a1 = _mm512_fmadd_ps(LOAD(row, i + 16), _mm512_loadu_ps(x + i + 16), a1);     \
        a2 = _mm512_fmadd_ps(LOAD(row, i + 32), _mm512_loadu_ps(x + i + 32), a2);     \
        a3 = _mm512_fmadd_ps(LOAD(row, i + 48), _mm512_loadu_ps(x + i + 48), a3);     \
    }                                                                                 \
    for (; i + 16 <= n; i += 16)                                                      \
        a0 = _mm512_fmadd_ps(LOAD(row, i), _mm512_loadu_ps(x + i), a0);               \
    if (i < n) {                                                                      \
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);                               \
        a1 = _mm512_fmadd_ps(TAIL(row, i, k), _mm512_maskz_loadu_ps(k, x + i), a1);   \
    }                                                                                 \
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));

static float dot_f32(const void *row, const float *x, int64_t n) { DOT512(load_f32, tail_f32) }
static float dot_f16(const void *row, const float *x, int64_t n) { DOT512(load_f16, tail_f16) }
static float dot_bf16(const void *row, const float *x, int64_t n) { DOT512(load_bf16, tail_bf16) }

/* y += a * x: one rounding per element (fma), as a * x + y rounds once less
 * than the scalar oracle's two; the tests allow for it. */
static void axpy_f32(float *y, float a, const float *x, int64_t n)
{
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 t = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i));
        _mm512_mask_storeu_ps(y + i, k, t);
    }
}

const lilac_cpu_kernels lilac_cpu_avx512 = {
    .name = "avx512",
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .attn_f32 = lilac_attn_f32_avx512,
    .attn_f16 = lilac_attn_f16_avx512,
    .gemm_f32 = lilac_gemm_f32_avx512,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = lilac_dot_q8_0_avx2,
    .dot_q4_0 = lilac_dot_q4_0_avx2,
    .dot_q4_K = lilac_dot_q4_K_avx2,
    .dot_q5_K = lilac_dot_q5_K_avx2,
    .dot_q6_K = lilac_dot_q6_K_avx2,
    .qx_quantize = lilac_qx_quantize_avx512,
    .qr16_q4_K = lilac_qr16_q4_K_avx512,
    .qr16_q6_K = lilac_qr16_q6_K_avx512,
    .qdot_q8_0 = lilac_qdot_q8_0_avx512,
    .qdot_q4_0 = lilac_qdot_q4_0_avx512,
    .qdot_q4_K = lilac_qdot_q4_K_avx512,
    .qdot_q5_K = lilac_qdot_q5_K_avx512,
    .qdot_q6_K = lilac_qdot_q6_K_avx512,
    .qdotn_q4_K = lilac_qdotn_q4_K_avx512,
    .qdotn_q6_K = lilac_qdotn_q6_K_avx512,
};
