/* cuda_trace: the decode step's kernels record their own timeline
 * (LILAC_CUDA_TRACE=1; model/cuda_trace.h makes the table). Thread 0 of a
 * block writes an event (%globaltimer, %gridid, %smid, the block) at the
 * block's start, right after its griddepcontrol.wait, at two marks a kernel
 * may set and at thread 0's end (no barrier: other warps may still run).
 * At its start a block takes a slot of the ring for each kind of event with
 * one atomicAdd (warp 0 waits for it there only: it used to take a slot,
 * and wait ~1 us for it, at every event, which put that much of warp 0's
 * time into each mark); each kind is written once (its first; the end: its
 * last) into its slot, the slots of kinds never written left as
 * lilac_cuda_trace_begin filled them (kind 0xFF, dropped when fetched).
 *
 * Off, it costs a compare of a __constant__ pointer with null by thread 0:
 * a uniform branch, no register held across the kernel (the event's values
 * are computed inside the branch; the block's slot and kinds written are in
 * 8 bytes of shared memory). The pointer is per .cu file (static: there is
 * no relocatable device code): each file that includes this one says
 * LILAC_TRACE_TU(name) once, and cuda_trace.cu sets them all. */
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

/* (Inlined with the kind a runtime value: ptxas gives every kernel the registers and spills it had with the
 * earlier slot-an-event code but four multi-token k_mv instances (Q5_K, Q6_K at 2 and 4 tokens: 4-16 bytes more
 * spill of 76-272) and k_route (one register fewer); the kind as a template argument moved them in most kernels,
 * out of line most took more registers.) */
static __device__ __forceinline__ void trace_ev(int kind, int kernel)
{
    if (c_trace.ev && threadIdx.x == 0) {
        __shared__ unsigned s_slot, s_kinds; /* the block's first slot, and the kinds it has written */
        uint64_t t, gid;
        uint32_t sm;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (kind == LILAC_TRACE_START)
            s_slot = atomicAdd(c_trace.n, (unsigned)LILAC_TRACE_KINDS), s_kinds = 0;
        const unsigned bit = 1u << kind;
        if (kind != LILAC_TRACE_END && (s_kinds & bit)) /* the first of its kind (the end: the last) */
            return;
        s_kinds |= bit;
        const unsigned i = s_slot + (unsigned)kind;
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
