/* AVX2 + FMA + F16C kernels: eight float32 lanes, four accumulators so
 * the FMA latency is hidden. */
#include <immintrin.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"

static inline float hsum(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline __m256 load_bf16(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }

/* One body for the three types: LOAD turns 8 weights into 8 floats. */
#define DOT_BODY(T, LOAD, TAIL)                                              \
    const T *w = row;                                                        \
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;              \
    int64_t i = 0;                                                           \
    for (; i + 32 <= n; i += 32) {                                           \
        a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);       \
        a1 = _mm256_fmadd_ps(LOAD(w + i + 8), _mm256_loadu_ps(x + i + 8), a1); \
        a2 = _mm256_fmadd_ps(LOAD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2); \
        a3 = _mm256_fmadd_ps(LOAD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3); \
    }                                                                        \
    for (; i + 8 <= n; i += 8)                                               \
        a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);       \
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
    for (; i < n; i++)                                                       \
        s += TAIL(w[i]) * x[i];                                              \
    return s;

static inline float id_f32(float v) { return v; }

static float dot_f32(const void *row, const float *x, int64_t n) { DOT_BODY(float, load_f32, id_f32) }
static float dot_f16(const void *row, const float *x, int64_t n) { DOT_BODY(uint16_t, load_f16, lilac_f16_to_f32) }
static float dot_bf16(const void *row, const float *x, int64_t n) { DOT_BODY(uint16_t, load_bf16, lilac_bf16_to_f32) }

static void axpy_f32(float *y, float a, const float *x, int64_t n)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

const lilac_cpu_kernels lilac_cpu_avx2 = {
    .name = "avx2",
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .attn_f32 = lilac_attn_f32_avx2,
    .attn_f16 = lilac_attn_f16_avx2,
    .gemm_f32 = lilac_gemm_f32_avx2,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = lilac_dot_q8_0_avx2,
    .dot_q4_0 = lilac_dot_q4_0_avx2,
    .dot_q4_K = lilac_dot_q4_K_avx2,
    .dot_q5_K = lilac_dot_q5_K_avx2,
    .dot_q6_K = lilac_dot_q6_K_avx2,
    .qx_quantize = lilac_qx_quantize_avx2,
    .qr16_q4_K = lilac_qr16_q4_K_avx2,
    .qr16_q6_K = lilac_qr16_q6_K_avx2,
    .qdot_q8_0 = lilac_qdot_q8_0_avx2,
    .qdot_q4_0 = lilac_qdot_q4_0_avx2,
    .qdot_q4_K = lilac_qdot_q4_K_avx2,
    .qdot_q5_K = lilac_qdot_q5_K_avx2,
    .qdot_q6_K = lilac_qdot_q6_K_avx2,
};
