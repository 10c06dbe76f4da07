/* cuda_wgmma: Hopper's warpgroup matrix product (wgmma.mma_async, sm_90a), the pieces a tensor-core product
 * needs: the shared-memory matrix descriptor, the fences, and m64n128k16 f16 x f16 -> f32 with A from registers.
 * Checked on the H200 (session 12). No product uses it now: k_mma on wgmma was slower than on mma.sync (see
 * launch_mma in cuda_mma.cu; the code is in commit 4d82488).
 * Only where the target has the sm_90a features (__CUDA_ARCH_FEAT_SM90_ALL); LILAC_WGMMA says whether it does.
 *
 * What these assume (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"; checked on the GPU
 * by test_cuda_wgmma through lilac_cuda_wgmma_probe before any product relies on them):
 *  - A from registers: warp w of the warpgroup holds rows 16 w .. 16 w + 15 as mma.m16n8k16's A fragment
 *    (lane g = lane / 4, t = lane % 4: a0 = row g, k 2t and 2t + 1; a1 = row g + 8; a2 = row g, k 2t + 8, + 9;
 *    a3 = row g + 8, k 2t + 8, + 9; the lower k in the low half);
 *  - D: d[4 j + e] = row 16 w + g + 8 (e / 2), column 8 j + 2 t + e % 2 (mma's C fragment, an n8 block j);
 *  - B "K-major" (N x K, K contiguous) in shared memory without swizzle: core matrices of 8 rows (n) x 16
 *    bytes (8 k), 128 contiguous bytes; the descriptor's leading byte offset (LBO) is the distance between
 *    core matrices adjacent along K, the stride byte offset (SBO) between those adjacent along N.
 *    Descriptor: address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, layout type 0 (no
 *    swizzle) in 62-63;
 *  - shared memory written by the threads (st.shared, cp.async) is made visible to wgmma's reads (the async
 *    proxy) by fence.proxy.async.shared::cta before the barrier. */
#ifndef LILAC_KERNELS_CUDA_WGMMA_CUH
#define LILAC_KERNELS_CUDA_WGMMA_CUH

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#ifndef LILAC_CUDA_ARCHS
#define LILAC_CUDA_ARCHS "?"
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LILAC_WGMMA 1
#else
#define LILAC_WGMMA 0
#endif

/* Why wgmma cannot run here, into msg: the build has no sm_90a, there is no device, or the current one is not
 * compute capability 9.0; NULL where it can. */
static inline const char *wg_unavailable(char *msg, size_t cap)
{
    if (!strstr(LILAC_CUDA_ARCHS, "90a")) {
        snprintf(msg, cap, "built for %s, without sm_90a (wgmma)", LILAC_CUDA_ARCHS);
        return msg;
    }
    int dev = 0, maj = 0, min = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(msg, cap, "no CUDA device");
        return msg;
    }
    if (maj != 9 || min != 0) {
        snprintf(msg, cap, "wgmma needs compute capability 9.0 (this device: %d.%d)", maj, min);
        return msg;
    }
    return nullptr;
}

/* The descriptor of a no-swizzle K-major operand at shared address smem (16-aligned), lbo and sbo in bytes. */
__device__ __forceinline__ uint64_t wg_desc(const void *smem, uint32_t lbo, uint32_t sbo)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32);
}

#if LILAC_WGMMA
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared memory the threads wrote, visible to wgmma (call before the barrier that publishes it). */
__device__ __forceinline__ void wg_smem_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* d (64 floats a thread) = (accumulate ? d : 0) + A (a0..a3, registers) x B (desc: 128 n x 16 k). Issued by the
 * whole warpgroup; asynchronous: d and a0..a3 are not to be touched before wg_wait says it is done. */
__device__ __forceinline__ void wg_m64n128k16(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint64_t desc, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %69, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(accumulate), "l"(desc));
}
#endif

#endif
