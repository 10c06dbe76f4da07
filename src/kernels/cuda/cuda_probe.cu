/* cuda_probe: what a boundary between two steps of the decode step costs, two ways (lilac_cuda_sync_probe), to
 * decide whether a persistent step kernel (docs/architecture.md) pays before writing one:
 *  - a chain of kernels, one a phase, each launched dependent (PDL) and the chain captured as a CUDA graph, as the
 *    decode step runs today;
 *  - one persistent kernel, a block an SM (a cooperative launch: all resident), the phases ordered by device-scope
 *    counters: a block's thread 0 bumps phase p's counter (red.release.gpu) after the block's writes, the next
 *    phase's blocks spin on it (ld.acquire.gpu) until every block has.
 * Each phase a block reads WORK bytes of its own (a product's weights) and every block's value of the phase before
 * (the product's input), and writes its value: v[p + 1][b] = (31 sum_b' v[p][b'] + b + p + xor of its words)
 * mod 2^31, which the caller checks against the host's (so an ordering bug shows). Either way the work can be
 * loaded before the wait (the staged products, a prefetching persistent kernel) or after it. */
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int PR_THREADS = 256;
constexpr int PR_MAXW = 16; /* uint4 a thread: WORK up to 64 KB a block */

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release(unsigned *p, unsigned v)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* This thread's nw uint4 of block b's work in phase p. */
__device__ __forceinline__ void pr_load(const uint4 *work, int p, int b, int nb, int nw, uint4 (&w)[PR_MAXW])
{
    const uint4 *src = work + ((size_t)p * nb + b) * (size_t)nw * PR_THREADS + threadIdx.x;
#pragma unroll
    for (int i = 0; i < PR_MAXW; i++)
        if (i < nw)
            w[i] = __ldcs(src + (size_t)i * PR_THREADS);
}

/* Phase p of block b, after its wait: v[p + 1][b] from v[p][*] and the loaded words. */
__device__ void pr_phase(int p, int b, int nb, int nw, const uint4 (&w)[PR_MAXW], int *vals)
{
    __shared__ unsigned red_x[PR_THREADS / 32], red_s[PR_THREADS / 32];
    unsigned x = 0, s = 0;
#pragma unroll
    for (int i = 0; i < PR_MAXW; i++)
        if (i < nw)
            x ^= w[i].x ^ w[i].y ^ w[i].z ^ w[i].w;
    for (int i = threadIdx.x; i < nb; i += PR_THREADS)
        s += (unsigned)__ldcg(vals + (size_t)p * nb + i);
    for (int o = 16; o; o >>= 1) {
        x ^= __shfl_xor_sync(0xffffffffu, x, o);
        s += __shfl_xor_sync(0xffffffffu, s, o);
    }
    if ((threadIdx.x & 31) == 0)
        red_x[threadIdx.x >> 5] = x, red_s[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < PR_THREADS / 32; i++)
            x ^= red_x[i], s += red_s[i];
        vals[(size_t)(p + 1) * nb + b] = (int)((31u * s + (unsigned)b + (unsigned)p + x) & 0x7fffffffu);
    }
}

template <bool PRE> __global__ void __launch_bounds__(PR_THREADS) k_probe_phase(const uint4 *work, int nw, int p, int *vals)
{
    uint4 w[PR_MAXW];
    if (PRE)
        pr_load(work, p, blockIdx.x, gridDim.x, nw, w);
    griddep_launch_dependents();
    griddep_wait();
    if (!PRE)
        pr_load(work, p, blockIdx.x, gridDim.x, nw, w);
    pr_phase(p, blockIdx.x, gridDim.x, nw, w, vals);
}

/* base: the counters' value before this launch (they only grow: no reset between launches). */
template <bool PRE>
__global__ void __launch_bounds__(PR_THREADS) k_probe_persist(const uint4 *work, int nw, int phases, int *vals,
                                                              unsigned *cnt, unsigned base)
{
    const int b = blockIdx.x, nb = gridDim.x;
    for (int p = 0; p < phases; p++) {
        uint4 w[PR_MAXW];
        if (PRE)
            pr_load(work, p, b, nb, nw, w);
        if (p > 0) {
            if (threadIdx.x == 0)
                while (ld_acquire(cnt + p - 1) < base + (unsigned)nb) {
                }
            __syncthreads();
        }
        if (!PRE)
            pr_load(work, p, b, nb, nw, w);
        pr_phase(p, b, nb, nw, w, vals);
        if (threadIdx.x == 0) /* after the block's barrier in pr_phase and thread 0's own write */
            red_release(cnt + p, 1u);
    }
}

__global__ void k_probe_fill(uint32_t *w, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        w[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 7);
}

} // namespace

extern "C" int lilac_cuda_sync_probe(int phases, int reps, int work_bytes, lilac_cuda_sync_probe_result *r,
                                     char *msg, size_t cap)
{
    *r = lilac_cuda_sync_probe_result{};
    int dev = 0, sms = 0, coop = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev)) {
        (void)cudaGetLastError();
        snprintf(msg, cap, "no device attributes");
        return -1;
    }
    const int nw = work_bytes / (16 * PR_THREADS);
    if (phases < 1 || reps < 1 || nw < 0 || nw > PR_MAXW || nw * 16 * PR_THREADS != work_bytes || !coop) {
        snprintf(msg, cap, "bad probe arguments (phases %d, reps %d, work %d bytes a block: a multiple of %d up to %d)%s",
                 phases, reps, work_bytes, 16 * PR_THREADS, 16 * PR_THREADS * PR_MAXW, coop ? "" : "; no cooperative launch");
        return -1;
    }
    const int nb = sms;
    const size_t words = (size_t)phases * nb * nw * PR_THREADS * 4;
    uint32_t *work = nullptr;
    int *vals = nullptr;
    unsigned *cnt = nullptr;
    cudaStream_t st = nullptr;
    cudaGraph_t graph[2] = {};
    cudaGraphExec_t exec[2] = {};
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    int rc = -1;
    auto fail = [&](const char *what) {
        snprintf(msg, cap, "%s: %s", what, cudaGetErrorString(cudaGetLastError()));
        return -1;
    };
    if (cudaMalloc(&work, (words ? words : 1) * 4) || cudaMalloc(&vals, sizeof(int) * (size_t)(phases + 1) * nb) ||
        cudaMalloc(&cnt, sizeof(unsigned) * (size_t)phases) || cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) ||
        cudaEventCreate(&e0) || cudaEventCreate(&e1)) {
        rc = fail("allocation");
        goto done;
    }
    if (words)
        k_probe_fill<<<1024, 256, 0, st>>>(work, words);
    cudaMemsetAsync(vals, 0, sizeof(int) * (size_t)(phases + 1) * nb, st);
    cudaMemsetAsync(cnt, 0, sizeof(unsigned) * (size_t)phases, st);
    r->blocks = nb;
    {
        const uint4 *w4 = reinterpret_cast<const uint4 *>(work);
        /* the chains, as graphs: all phases once */
        for (int pre = 0; pre < 2; pre++) {
            if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal)) {
                rc = fail("capture");
                goto done;
            }
            for (int p = 0; p < phases; p++)
                launch_dependent(pre ? k_probe_phase<true> : k_probe_phase<false>, dim3(nb), dim3(PR_THREADS), 0, st,
                                 w4, nw, p, vals);
            if (cudaStreamEndCapture(st, &graph[pre]) || cudaGraphInstantiate(&exec[pre], graph[pre], 0)) {
                rc = fail("graph");
                goto done;
            }
        }
        float ms[4] = {};
        unsigned base = 0;
        for (int v = 0; v < 4; v++) { /* chain, chain staged, persistent, persistent prefetching */
            for (int rep = -1; rep < reps; rep++) { /* rep -1: a warm-up */
                if (rep == 0)
                    cudaEventRecord(e0, st);
                if (v < 2) {
                    cudaGraphLaunch(exec[v], st);
                } else {
                    void *args[] = {(void *)&w4, (void *)&nw, (void *)&phases, (void *)&vals, (void *)&cnt, (void *)&base};
                    if (cudaLaunchCooperativeKernel(v == 3 ? (const void *)k_probe_persist<true>
                                                           : (const void *)k_probe_persist<false>,
                                                    dim3(nb), dim3(PR_THREADS), args, 0, st)) {
                        rc = fail("cooperative launch");
                        goto done;
                    }
                    base += (unsigned)nb;
                }
            }
            cudaEventRecord(e1, st);
            if (cudaEventSynchronize(e1) || cudaEventElapsedTime(&ms[v], e0, e1)) {
                rc = fail("timing");
                goto done;
            }
            /* the last phase's values, for the caller's check (every variant writes the same) */
            if (cudaMemcpy(r->last + 0, vals + (size_t)phases * nb, sizeof(int) * (size_t)(nb < 256 ? nb : 256),
                           cudaMemcpyDeviceToHost) != cudaSuccess) {
                rc = fail("download");
                goto done;
            }
            for (int i = 0; i < (nb < 256 ? nb : 256); i++)
                r->check[v] = r->check[v] * 1000003u + (unsigned)r->last[i];
        }
        r->us_chain = 1000.0 * ms[0] / ((double)reps * phases);
        r->us_chain_staged = 1000.0 * ms[1] / ((double)reps * phases);
        r->us_persist = 1000.0 * ms[2] / ((double)reps * phases);
        r->us_persist_prefetch = 1000.0 * ms[3] / ((double)reps * phases);
        rc = 0;
    }
done:
    for (int i = 0; i < 2; i++) {
        if (exec[i])
            cudaGraphExecDestroy(exec[i]);
        if (graph[i])
            cudaGraphDestroy(graph[i]);
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (st)
        cudaStreamDestroy(st);
    cudaFree(work);
    cudaFree(vals);
    cudaFree(cnt);
    (void)cudaGetLastError();
    return rc;
}
