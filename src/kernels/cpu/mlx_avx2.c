/* mlx_avx2: the MLX affine dot product with AVX2 + FMA + F16C, for 4- and
 * 8-bit codes (other widths take the scalar path). Per group: the codes as
 * float32 times x, and x alone, summed in vectors; then scale and bias
 * weigh the two sums. */
#include <immintrin.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/mlx.h"

static inline float load_scale(const void *p, int type, int64_t g)
{
    switch (type) {
    case LILAC_F16: return _cvtsh_ss(((const uint16_t *)p)[g]);
    case LILAC_BF16: return lilac_bf16_to_f32(((const uint16_t *)p)[g]);
    default: {
        float f;
        memcpy(&f, (const uint8_t *)p + (size_t)g * sizeof f, sizeof f);
        return f;
    }
    }
}

static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float lilac_mlx_dot_avx2(const lilac_mat *W, int64_t r, const float *x)
{
    if (W->bits != 4 && W->bits != 8)
        return lilac_mlx_dot_scalar(W, r, x);
    const uint8_t *row = lilac_mat_row(W, r);
    const uint8_t *sc = (const uint8_t *)W->scales + (size_t)r * W->scale_row_bytes;
    const uint8_t *bi = (const uint8_t *)W->biases + (size_t)r * W->scale_row_bytes;
    int64_t gs = W->group_size, ng = W->cols / gs;
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i nib = _mm256_set1_epi32(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const float *xg = x + g * gs;
        __m256 aq0 = _mm256_setzero_ps(), aq1 = _mm256_setzero_ps(), ax = _mm256_setzero_ps();
        if (W->bits == 4) {
            const uint8_t *q = row + (size_t)(g * gs / 2);
            for (int64_t j = 0; j < gs; j += 16) {
                uint32_t w0, w1;
                memcpy(&w0, q + j / 2, 4);
                memcpy(&w1, q + j / 2 + 4, 4);
                __m256 q0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w0), shifts), nib));
                __m256 q1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w1), shifts), nib));
                __m256 x0 = _mm256_loadu_ps(xg + j), x1 = _mm256_loadu_ps(xg + j + 8);
                aq0 = _mm256_fmadd_ps(q0, x0, aq0);
                aq1 = _mm256_fmadd_ps(q1, x1, aq1);
                ax = _mm256_add_ps(ax, _mm256_add_ps(x0, x1));
            }
        } else {
            const uint8_t *q = row + (size_t)(g * gs);
            for (int64_t j = 0; j < gs; j += 16) {
                __m128i b = _mm_loadu_si128((const __m128i *)(q + j));
                __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
                __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
                __m256 x0 = _mm256_loadu_ps(xg + j), x1 = _mm256_loadu_ps(xg + j + 8);
                aq0 = _mm256_fmadd_ps(q0, x0, aq0);
                aq1 = _mm256_fmadd_ps(q1, x1, aq1);
                ax = _mm256_add_ps(ax, _mm256_add_ps(x0, x1));
            }
        }
        __m256 s = _mm256_set1_ps(load_scale(sc, W->scale_type, g));
        __m256 b = _mm256_set1_ps(load_scale(bi, W->scale_type, g));
        acc = _mm256_fmadd_ps(s, _mm256_add_ps(aq0, aq1), acc);
        acc = _mm256_fmadd_ps(b, ax, acc);
    }
    return hsum(acc);
}
