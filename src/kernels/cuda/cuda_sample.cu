/* cuda_sample: the sampler's reduction of one position's logits on the GPU
 * (lilac_cuda_logits_top): the k best tokens, best first (equal logits: the
 * lower id first), and log sum_i e^logit_i, so that 1 KB comes back to the
 * host instead of the vocabulary's 1 MB, and the host's passes over it (the
 * log-sum-exp, the top k) are gone. lilac_logits_top_of (sampler.c) is the
 * oracle: the same candidates in the same order; the log-sum-exp agrees to
 * float rounding (its sums go in another order).
 *
 * Two kernels: each block of the first sorts a slice of LILAC_CUDA_TOP_SLICE
 * logits (a bitonic sort of 64-bit keys in shared memory: the logit's bits
 * made to order as unsigned, then the complement of the id) and keeps its k
 * best keys and its slice's max and sum of e^(logit - max); one block of the
 * second sorts all the slices' keys the same way and combines the sums. */
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_sizes.h"
#include "lilac.h"

#define CS(s) ((cudaStream_t)(s))

static_assert(sizeof(lilac_logits_top) <= LILAC_CUDA_TOP_OUT, "cuda_sizes.h's room for the result");

namespace {

constexpr int TOP_THREADS = 1024;

/* A logit's bits as an unsigned that orders as the floats do (NaN as -inf, -0 as +0: equal floats, one key). */
__device__ __forceinline__ uint32_t ord_bits(float v)
{
    const uint32_t u = __float_as_uint(v != v ? -INFINITY : v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float ord_float(uint32_t o)
{
    return __uint_as_float((o & 0x80000000u) ? o & 0x7fffffffu : ~o);
}
/* Descending keys: logit descending, then id ascending. 0 pads: ord_bits is at least that of -inf, 0x007FFFFF. */
__device__ __forceinline__ unsigned long long top_key(float v, uint32_t id)
{
    return ((unsigned long long)ord_bits(v) << 32) | (0xFFFFFFFFu - id);
}

/* Sort k[0..N) descending (N a power of two), the block's threads over its N/2 pairs a pass. */
__device__ void bitonic_desc(unsigned long long *k, int N)
{
    for (int size = 2; size <= N; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < N / 2; t += blockDim.x) {
                const int i = 2 * t - (t & (stride - 1)), j = i + stride;
                const bool desc = (i & size) == 0;
                const unsigned long long a = k[i], b = k[j];
                if ((a < b) == desc)
                    k[i] = b, k[j] = a;
            }
        }
    __syncthreads();
}

/* Block b of row blockIdx.y: the row's logits [b SLICE, ..) into its k best keys (keys + b k) and its max and
 * sum (ms + 2 b); a row's logits `stride` floats on, its keys nb k, its ms 2 nb. */
__global__ void __launch_bounds__(TOP_THREADS) k_top_part(const float *logits, long long stride, int V, int k,
                                                          unsigned long long *keys, float *ms)
{
    extern __shared__ unsigned long long sk[];
    const int b = blockIdx.x, base = b * LILAC_CUDA_TOP_SLICE;
    logits += blockIdx.y * stride, keys += (size_t)blockIdx.y * gridDim.x * k, ms += 2 * (size_t)blockIdx.y * gridDim.x;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < LILAC_CUDA_TOP_SLICE; i += blockDim.x) {
        const int g = base + i;
        const float v = g < V ? logits[g] : 0.0f;
        sk[i] = g < V ? top_key(v, (uint32_t)g) : 0ull;
        if (g < V)
            mx = fmaxf(mx, v); /* NaN passed over here; the sum below carries it */
    }
    mx = block_max(mx);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < LILAC_CUDA_TOP_SLICE; i += blockDim.x) {
        const int g = base + i;
        if (g < V && mx > -INFINITY)
            sum += expf(logits[g] - mx);
    }
    sum = block_sum(sum);
    bitonic_desc(sk, LILAC_CUDA_TOP_SLICE);
    for (int i = threadIdx.x; i < k; i += blockDim.x)
        keys[(size_t)b * k + i] = sk[i];
    if (threadIdx.x == 0)
        ms[2 * b] = mx, ms[2 * b + 1] = sum;
}

/* A block a row: the nb slices' keys sorted at once (N, a power of two, >= nb k), the best k into the row's out,
 * and log sum e^logit = M + log sum_b s_b e^(m_b - M) (M the largest m_b), the slices' terms added in double. */
__global__ void __launch_bounds__(TOP_THREADS) k_top_merge(const unsigned long long *keys, const float *ms, int nb,
                                                           int k, int N, int V, char *outs)
{
    extern __shared__ unsigned long long sk[];
    keys += (size_t)blockIdx.x * nb * k, ms += 2 * (size_t)blockIdx.x * nb;
    lilac_logits_top *out = (lilac_logits_top *)(outs + (size_t)blockIdx.x * LILAC_CUDA_TOP_OUT);
    for (int i = threadIdx.x; i < N; i += blockDim.x)
        sk[i] = i < nb * k ? keys[i] : 0ull;
    bitonic_desc(sk, N);
    const int n = k < V ? k : V;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const unsigned long long key = sk[i];
        out->id[i] = (int32_t)(0xFFFFFFFFu - (uint32_t)(key & 0xFFFFFFFFu));
        out->logit[i] = ord_float((uint32_t)(key >> 32));
    }
    if (threadIdx.x == 0) {
        float M = -INFINITY;
        for (int b = 0; b < nb; b++)
            M = fmaxf(M, ms[2 * b]);
        double S = 0.0;
        for (int b = 0; b < nb; b++)
            if (ms[2 * b] > -INFINITY || ms[2 * b + 1] != ms[2 * b + 1])
                S += (double)ms[2 * b + 1] * exp((double)ms[2 * b] - (double)M);
        out->lse = M > -INFINITY ? (double)M + log(S) : (double)M;
        out->n = n;
    }
}

} // namespace

extern "C" int lilac_cuda_logits_top(const float *logits, int V, int rows, long long stride, int k, void *scratch,
                                     lilac_cuda_stream *s)
{
    const int nb = (V + LILAC_CUDA_TOP_SLICE - 1) / LILAC_CUDA_TOP_SLICE;
    if (V < 1 || k < 1 || k > LILAC_TOP_MAX || (long long)nb * k > LILAC_CUDA_TOP_MERGE || rows < 1 ||
        rows > 65535 || (rows > 1 && stride < V))
        return -1;
    int N = 1;
    while (N < nb * k)
        N <<= 1;
    /* the scratch as cuda_sizes.h lays it out: the rows' results, then their keys, then their maxima and sums */
    char *outs = (char *)scratch;
    unsigned long long *keys = (unsigned long long *)(outs + (size_t)rows * LILAC_CUDA_TOP_OUT);
    float *ms = (float *)(keys + (size_t)rows * nb * k);
    /* the merge's shared memory may be over the default 48 KiB (a device without that much: -1, the caller's
     * host path) */
    if (N * sizeof(unsigned long long) > 48 * 1024 &&
        cudaFuncSetAttribute(k_top_merge, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)(N * sizeof(unsigned long long))) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    k_top_part<<<dim3(nb, rows), TOP_THREADS, LILAC_CUDA_TOP_SLICE * sizeof(unsigned long long), CS(s)>>>(
        logits, stride, V, k, keys, ms);
    k_top_merge<<<rows, TOP_THREADS, (size_t)N * sizeof(unsigned long long), CS(s)>>>(keys, ms, nb, k, N, V, outs);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
