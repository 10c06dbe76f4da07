/* cuda_trace: the decode step's kernels record their own timeline
 * (LILAC_CUDA_TRACE=1; model/cuda_trace.h makes the table). Thread 0 of a
 * block writes an event (%globaltimer, %gridid, %smid, the block) at the
 * block's start, right after its griddepcontrol.wait, and at thread 0's end
 * (no barrier: other warps may still run). Each event takes a slot of the
 * ring with one atomicAdd: while tracing, warp 0 waits for that atomic.
 *
 * Off, it costs a compare of a __constant__ pointer with null by thread 0:
 * a uniform branch, no register held across the kernel (the event's values
 * are computed inside the branch). The pointer is per .cu file (static:
 * there is no relocatable device code): each file that includes this one
 * says LILAC_TRACE_TU(name) once, and cuda_trace.cu sets them all. */
#ifndef LILAC_KERNELS_CUDA_CUDA_TRACE_CUH
#define LILAC_KERNELS_CUDA_CUDA_TRACE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "model/cuda_trace.h"

struct lilac_trace_dev {
    lilac_trace_ev *ev; /* null: off */
    unsigned *n;        /* events taken (may pass cap: the rest dropped) */
    unsigned cap;
};

static __constant__ lilac_trace_dev c_trace;

#define LILAC_TRACE_TU(name)                                                                                   \
    extern "C" int lilac_cuda_trace_set_##name(const struct lilac_trace_dev *d)                               \
    {                                                                                                          \
        return cudaMemcpyToSymbol(c_trace, d, sizeof *d) == cudaSuccess ? 0 : -1;                              \
    }

static __device__ __forceinline__ void trace_ev(int kind, int kernel)
{
    if (c_trace.ev && threadIdx.x == 0) {
        uint64_t t, gid;
        uint32_t sm;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        const unsigned i = atomicAdd(c_trace.n, 1u);
        if (i < c_trace.cap) {
            asm volatile("mov.u64 %0, %%gridid;" : "=l"(gid));
            asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
            lilac_trace_ev e;
            e.gridid = gid;
            e.t = t;
            e.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
            e.smid = (uint16_t)sm;
            e.kind = (uint8_t)kind;
            e.kernel = (uint8_t)kernel;
            c_trace.ev[i] = e;
        }
    }
}
#define TRACE_START(k) trace_ev(LILAC_TRACE_START, k)
#define TRACE_WAITED(k) trace_ev(LILAC_TRACE_WAITED, k)
#define TRACE_END(k) trace_ev(LILAC_TRACE_END, k)
#define TRACE_MARK1(k) trace_ev(LILAC_TRACE_MARK1, k)
#define TRACE_MARK2(k) trace_ev(LILAC_TRACE_MARK2, k)

#endif
