/* The AVX2 gemm (kernels/cpu/gemm.h): the AVX-512 one's scheme at half the
 * width. A tile of up to 6 rows x 16 columns of C in 12 ymm accumulators
 * (16 registers: 12 + two B vectors + the broadcast); columns past N go
 * through vmaskmov, a last partial row tile through a kernel specialized
 * for its row count. */
#include <immintrin.h>

#include "kernels/cpu/gemm.h"

#define MR 6

static inline __m256i lane_mask(int n) /* lanes < n set */
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __attribute__((always_inline)) void tile(int mr, int K, const float *A, int64_t lda, const float *B,
                                                       int64_t ldb, float *C, int64_t ldc, __m256i m0, __m256i m1,
                                                       bool acc)
{
    __m256 c0[MR], c1[MR];
    for (int r = 0; r < mr; r++) {
        if (acc) {
            c0[r] = _mm256_maskload_ps(C + r * ldc, m0);
            c1[r] = _mm256_maskload_ps(C + r * ldc + 8, m1);
        } else {
            c0[r] = _mm256_setzero_ps();
            c1[r] = _mm256_setzero_ps();
        }
    }
    for (int p = 0; p < K; p++) {
        const float *b = B + p * ldb;
        __m256 b0 = _mm256_maskload_ps(b, m0), b1 = _mm256_maskload_ps(b + 8, m1);
        for (int r = 0; r < mr; r++) {
            __m256 a = _mm256_broadcast_ss(A + r * lda + p);
            c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
        }
    }
    for (int r = 0; r < mr; r++) {
        _mm256_maskstore_ps(C + r * ldc, m0, c0[r]);
        _mm256_maskstore_ps(C + r * ldc + 8, m1, c1[r]);
    }
}

#define TILES(ACC)                                                                                     \
    switch (mr) {                                                                                      \
    case 6: tile(6, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 5: tile(5, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 4: tile(4, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 3: tile(3, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 2: tile(2, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    default: tile(1, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                 \
    }

void lilac_gemm_f32_avx2(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                         int64_t ldc, bool accumulate)
{
    for (int j = 0; j < N; j += 16) {
        int n = N - j < 16 ? N - j : 16;
        __m256i m0 = lane_mask(n), m1 = lane_mask(n - 8);
        const float *b = B + j;
        for (int i = 0; i < M; i += MR) {
            int mr = M - i < MR ? M - i : MR;
            const float *a = A + (int64_t)i * lda;
            float *c = C + (int64_t)i * ldc + j;
            if (accumulate) {
                TILES(true)
            } else {
                TILES(false)
            }
        }
    }
}
