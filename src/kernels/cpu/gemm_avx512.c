/* The AVX-512 gemm (kernels/cpu/gemm.h). A register-blocked micro-kernel:
 * a tile of up to 8 rows x 32 columns of C lives in 16 zmm accumulators;
 * per k, two 16-float loads of B's row and one broadcast of A per row feed
 * 16 independent FMAs (enough to cover the FMA latency on Zen 4, where a
 * zmm FMA issues once a cycle). Columns past N are masked; the rows of a
 * last partial tile take a kernel specialized for their count. For each
 * 32-column panel the tiles go down the rows, so the K x 32 panel of B
 * stays in L1. */
#include <immintrin.h>

#include "kernels/cpu/gemm.h"

#define MR 8

static inline __attribute__((always_inline)) void tile(int mr, int K, const float *A, int64_t lda, const float *B,
                                                       int64_t ldb, float *C, int64_t ldc, __mmask16 m0,
                                                       __mmask16 m1, bool acc)
{
    __m512 c0[MR], c1[MR];
    for (int r = 0; r < mr; r++) {
        if (acc) {
            c0[r] = _mm512_maskz_loadu_ps(m0, C + r * ldc);
            c1[r] = _mm512_maskz_loadu_ps(m1, C + r * ldc + 16);
        } else {
            c0[r] = _mm512_setzero_ps();
            c1[r] = _mm512_setzero_ps();
        }
    }
    for (int p = 0; p < K; p++) {
        const float *b = B + p * ldb;
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        for (int r = 0; r < mr; r++) {
            __m512 a = _mm512_set1_ps(A[r * lda + p]);
            c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
        }
    }
    for (int r = 0; r < mr; r++) {
        _mm512_mask_storeu_ps(C + r * ldc, m0, c0[r]);
        _mm512_mask_storeu_ps(C + r * ldc + 16, m1, c1[r]);
    }
}

/* acc as a constant in each instance, so the unused branch drops out */
#define TILES(ACC)                                                                                     \
    switch (mr) {                                                                                      \
    case 8: tile(8, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 7: tile(7, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 6: tile(6, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 5: tile(5, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 4: tile(4, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 3: tile(3, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    case 2: tile(2, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                  \
    default: tile(1, K, a, lda, b, ldb, c, ldc, m0, m1, ACC); break;                                 \
    }

void lilac_gemm_f32_avx512(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                           int64_t ldc, bool accumulate)
{
    for (int j = 0; j < N; j += 32) {
        int n = N - j < 32 ? N - j : 32;
        __mmask16 m0 = (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1);
        __mmask16 m1 = (__mmask16)(n >= 32 ? 0xffffu : n > 16 ? (1u << (n - 16)) - 1 : 0u);
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
