/* cuda_dev: device helpers the .cu files share. */
#ifndef LILAC_KERNELS_CUDA_CUDA_DEV_CUH
#define LILAC_KERNELS_CUDA_CUDA_DEV_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/cuda.h"

/* Programmatic dependent launch (sm_90): a kernel launched with it may start
 * while the one before it on the stream runs, and must wait here before it
 * reads what that one writes (or writes what it reads); elsewhere (older
 * devices, a plain launch) a no-op. launch_dependents lets the next such
 * kernel start before this one ends. */
static __device__ __forceinline__ void griddep_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void griddep_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* kern<<<grid, block, smem, st>>>(args...), launched dependent when
 * lilac_cuda_pdl() says so: kern must call griddep_wait() before it touches
 * what earlier kernels write. */
template <typename... Exp, typename... Act>
static void launch_dependent(void (*kern)(Exp...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                             Act &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = lilac_cuda_pdl() ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kern, static_cast<Act &&>(args)...);
}

#endif
