/* gemm: small dense float32 matrix products, row-major with row strides,
 *
 *   C[M][N] = (accumulate ? C : 0) + A[M][K] B[K][N],
 *
 * element (i, j) of A at A[i * lda + j], likewise B and C (strides in
 * floats, >= the row's width). Sized for the DeltaNet chunk (M, N, K up to
 * a few hundred, operands in L1/L2), not for large matrices: no packing.
 * C must not overlap A or B.
 *
 * Every set sums each element's products in k order, starting from C (or
 * 0); the SIMD sets fuse each multiply-add (one rounding instead of two),
 * which is their only difference from the scalar oracle. */
#ifndef LILAC_KERNELS_CPU_GEMM_H
#define LILAC_KERNELS_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

typedef void (*lilac_gemm_f32_fn)(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb,
                                  float *C, int64_t ldc, bool accumulate);

void lilac_gemm_f32_scalar(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                           int64_t ldc, bool accumulate);
#if defined(LILAC_X86)
void lilac_gemm_f32_avx2(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                         int64_t ldc, bool accumulate);
void lilac_gemm_f32_avx512(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                           int64_t ldc, bool accumulate);
#endif

#endif
