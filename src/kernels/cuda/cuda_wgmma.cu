/* cuda_wgmma: a probe of cuda_wgmma.cuh's assumptions on the GPU (lilac_cuda_wgmma_probe): one warpgroup
 * multiplies a 64 x K fp16 matrix A (from registers, in mma's fragment layout) by a 128 x K matrix B (shared
 * memory, no-swizzle K-major core matrices, the descriptor's leading byte offset along K) into 64 x 128 floats,
 * which the caller compares with its own product. Run on the H200 in session 12: bit-exact at K = 16 (the
 * strides swapped read past the buffer). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_wgmma.cuh"

namespace {

constexpr int PROBE_MAX_K = 64;

#if LILAC_WGMMA
__device__ __forceinline__ uint32_t pack2(__half lo, __half hi)
{
    return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);
}
#endif

/* B's core matrix (k chunk kc, n group ng) at (16 kc + ng) 128 bytes: 2048 bytes between neighbours along K
 * (LBO), 128 along N (SBO), as cuda_wgmma.cuh describes it. One block of 128 threads. */
__global__ void __launch_bounds__(128) k_wgmma_probe(const __half *A, const __half *B, float *D, int K)
{
#if LILAC_WGMMA
    __shared__ alignas(128) __half bs[128 * PROBE_MAX_K];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int i = tid; i < 128 * K; i += 128) {
        const int n = i / K, k = i - n * K, kc = k >> 3, ng = n >> 3;
        bs[(kc * 16 + ng) * 64 + (n & 7) * 8 + (k & 7)] = B[(size_t)n * K + k];
    }
    wg_smem_fence();
    __syncthreads();
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.f;
    const int r0 = 16 * warp + g, r1 = r0 + 8;
    for (int k0 = 0; k0 < K; k0 += 16) {
        const __half *a_r0 = A + (size_t)r0 * K + k0 + 2 * t, *a_r1 = A + (size_t)r1 * K + k0 + 2 * t;
        const uint32_t a0 = pack2(a_r0[0], a_r0[1]), a1 = pack2(a_r1[0], a_r1[1]);
        const uint32_t a2 = pack2(a_r0[8], a_r0[9]), a3 = pack2(a_r1[8], a_r1[9]);
        const __half *start = bs + (size_t)(k0 / 8) * 16 * 64;
        wg_fence();
        wg_m64n128k16(d, a0, a1, a2, a3, wg_desc(start, 2048, 128), k0 > 0);
        wg_commit();
        wg_wait<0>();
    }
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            D[(size_t)(16 * warp + g + 8 * (e >> 1)) * 128 + 8 * j + 2 * t + (e & 1)] = d[4 * j + e];
#else
    (void)A, (void)B, (void)D, (void)K;
#endif
}

__global__ void k_to_half(const float *x, __half *y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2half_rn(x[i]);
}

} // namespace

extern "C" int lilac_cuda_wgmma_probe(const float *a, const float *b, float *d, int K, char *msg,
                                      size_t cap)
{
    if (wg_unavailable(msg, cap))
        return -1;
    if (K < 16 || K > PROBE_MAX_K || K % 16) {
        snprintf(msg, cap, "K %d: a multiple of 16 up to %d", K, PROBE_MAX_K);
        return -1;
    }
    float *fa = nullptr, *fb = nullptr, *fd = nullptr;
    __half *ha = nullptr, *hb = nullptr;
    const int na = 64 * K, nb = 128 * K;
    int rc = -1;
    if (cudaMalloc(&fa, sizeof(float) * na) != cudaSuccess || cudaMalloc(&fb, sizeof(float) * nb) != cudaSuccess ||
        cudaMalloc(&fd, sizeof(float) * 64 * 128) != cudaSuccess || cudaMalloc(&ha, sizeof(__half) * na) != cudaSuccess ||
        cudaMalloc(&hb, sizeof(__half) * nb) != cudaSuccess) {
        snprintf(msg, cap, "cudaMalloc failed");
        goto done;
    }
    cudaMemcpy(fa, a, sizeof(float) * na, cudaMemcpyHostToDevice);
    cudaMemcpy(fb, b, sizeof(float) * nb, cudaMemcpyHostToDevice);
    k_to_half<<<(na + 255) / 256, 256>>>(fa, ha, na);
    k_to_half<<<(nb + 255) / 256, 256>>>(fb, hb, nb);
    cudaMemset(fd, 0xFF, sizeof(float) * 64 * 128);
    k_wgmma_probe<<<1, 128>>>(ha, hb, fd, K);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(d, fd, sizeof(float) * 64 * 128, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(msg, cap, "probe kernel: %s", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    snprintf(msg, cap, "built for %s", LILAC_CUDA_ARCHS);
    rc = 0;
done:
    (void)cudaGetLastError();
    cudaFree(fa), cudaFree(fb), cudaFree(fd), cudaFree(ha), cudaFree(hb);
    return rc;
}
