/* cuda_tc: the tensor-core and async-copy building blocks that the float32-exact kernels share (the prefill
 * attention, the chunked delta rule): 3xTF32 or fp16 hi/lo products on mma.sync, 16-byte cp.async copies. */
#ifndef LILAC_CUDA_TC_CUH
#define LILAC_CUDA_TC_CUH

#include <cuda_runtime.h>
#include <stdint.h>

// x = hi + lo in tf32 (round to nearest, ties away, as cuBLAS's 3xTF32).
static __device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo)
{
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    const float r = x - __uint_as_float(hi); // exact
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(r));
}

// c += a b, float32 accumulators: m16n8k8 on tf32 operands, or (F16) m16n8k16 on fp16 pairs.
template <bool F16>
static __device__ __forceinline__ void mma_op(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if constexpr (F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a b on hi/lo operands (3xTF32, or fp16 hi/lo): the small terms first, then the big one.
template <bool F16 = false>
static __device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                            uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1)
{
    mma_op<F16>(c, al, bh0, bh1);
    mma_op<F16>(c, ah, bl0, bl1);
    mma_op<F16>(c, ah, bh0, bh1);
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (src must still be a mapped address).
static __device__ __forceinline__ void cp16(float *dst, const float *src, bool valid)
{
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's groups are pending.
template <int N> static __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif
