/* The scalar gemm (kernels/cpu/gemm.h): the oracle of the SIMD ones. Row by
 * row, k outer and j inner, so that each C element still sums its products
 * in k order (the order the SIMD sets use) while the inner loop runs along
 * contiguous rows of B and C. */
#include <string.h>

#include "kernels/cpu/gemm.h"

void lilac_gemm_f32_scalar(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                           int64_t ldc, bool accumulate)
{
    for (int i = 0; i < M; i++) {
        float *c = C + (int64_t)i * ldc;
        const float *a = A + (int64_t)i * lda;
        if (!accumulate)
            memset(c, 0, (size_t)N * sizeof(float));
        for (int p = 0; p < K; p++) {
            const float ap = a[p], *b = B + (int64_t)p * ldb;
            for (int j = 0; j < N; j++)
                c[j] += ap * b[j];
        }
    }
}
