/* cuda_dev: device helpers the .cu files share. */
#ifndef LILAC_KERNELS_CUDA_CUDA_DEV_CUH
#define LILAC_KERNELS_CUDA_CUDA_DEV_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <atomic>
#include <type_traits>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_trace.cuh" /* dev_norm_router records its wait */
#include "util/env.h"

/* A switch of the environment read once (lilac_env_switch) into cache (-1: not read yet); a cache another
 * setter may store into too (lilac_cuda_mma_set_enabled). */
static inline bool env_switch_once(std::atomic<int> &cache, const char *name, bool dflt)
{
    int v = cache.load(std::memory_order_relaxed);
    if (v < 0) {
        v = lilac_env_switch(name, dflt);
        cache.store(v, std::memory_order_relaxed);
    }
    return v != 0;
}

/* An integer of the environment read once (lilac_env_int: dflt where unset or outside lo..hi) into cache (-1: not
 * read yet; lo >= 0); a cache a setter may store into too (lilac_cuda_mv_tc_rows_set). */
static inline int env_int_once(std::atomic<int> &cache, const char *name, int dflt, int lo, int hi)
{
    int v = cache.load(std::memory_order_relaxed);
    if (v < 0) {
        v = lilac_env_int(name, dflt, lo, hi);
        cache.store(v, std::memory_order_relaxed);
    }
    return v;
}

/* The current device's multiprocessors (cached per device ordinal). */
static inline int dev_sm_count()
{
    static std::atomic<int> cache[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        dev = 0;
    int n = cache[dev].load(std::memory_order_relaxed);
    if (!n) {
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1)
            n = 1;
        cache[dev].store(n, std::memory_order_relaxed);
    }
    return n;
}

/* The dynamic shared memory a block of KERN may have on this device (the device's opt-in most, less KERN's
 * static shared memory), KERN's attribute set to that, once (cached per kernel); 0 where either fails. */
template <auto KERN> static int dev_smem_most()
{
    static std::atomic<int> most{0};
    int m = most.load(std::memory_order_relaxed);
    if (!m) {
        int dev = 0, optin = 0;
        cudaFuncAttributes fa{};
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
            cudaFuncGetAttributes(&fa, KERN) != cudaSuccess || optin - (int)fa.sharedSizeBytes < 1 ||
            cudaFuncSetAttribute(KERN, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 optin - (int)fa.sharedSizeBytes) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        m = optin - (int)fa.sharedSizeBytes;
        most.store(m, std::memory_order_relaxed);
    }
    return m;
}

/* The current device's compute capability major (0 where it cannot be read). */
static inline int dev_cc_major()
{
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        major = 0;
    }
    return major;
}

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

/* Bulk copies of global memory into a block's shared memory (sm_90's TMA, cp.async.bulk), completed on an
 * mbarrier: dev_stage_init (one thread, then a barrier of the block before anyone waits), dev_stage_expect (that
 * thread: the phase's bytes in all, under 1 MiB), dev_stage_copy (that thread, after: the bytes a multiple of 16,
 * both addresses 16-aligned), dev_stage_wait (every thread that reads the copies). Host code stages only on
 * sm_90 devices; code built for an older architecture (a device running it from PTX) copies with plain loads
 * instead, which a block barrier between copy and readers (every caller has one) makes visible, and the
 * barrier's calls are no-ops. */
static __device__ __forceinline__ uint32_t dev_smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
static __device__ __forceinline__ void dev_stage_init(uint32_t bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
static __device__ __forceinline__ void dev_stage_expect(uint32_t bar, uint32_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
static __device__ __forceinline__ void dev_stage_copy(void *dst, const void *src, uint32_t bytes, uint32_t bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     dev_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#else
    (void)bar;
    for (uint32_t i = 0; i < bytes / 16; i++)
        static_cast<uint4 *>(dst)[i] = static_cast<const uint4 *>(src)[i];
#endif
}
static __device__ __forceinline__ void dev_stage_wait(uint32_t bar, uint32_t parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
#endif
}

/* Reductions, activations and the one-block whole-vector steps of the
 * decode step (cuda_ops.cu's kernels are these over a grid). Vectors the
 * kernel before wrote are read with __ldcg (from L2, not through L1). */
// The sum (MAX: the max) over a warp; every lane gets it.
template <bool MAX> static __device__ __forceinline__ float warp_reduce(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    return v;
}
static __device__ __forceinline__ float warp_sum(float v) { return warp_reduce<false>(v); }
/* The sum of a run held by four adjacent lanes (q = lane % 4, N values each), added in the run's order: lane q
 * adds its values to what lane q - 1 passed, so that the sum is the one a single thread adding them all in order
 * gets (bit for bit). Every lane of the warp calls it; each gets the whole run's sum. */
template <int N> static __device__ __forceinline__ float quad_run_sum(const float (&v)[N], int q, int lane)
{
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float mine = s;
        if (q == j)
#pragma unroll
            for (int i = 0; i < N; i++)
                mine += v[i];
        s = __shfl_sync(0xffffffffu, mine, (lane & ~3) | j);
    }
    return s;
}
static __device__ __forceinline__ float warp_max(float v) { return warp_reduce<true>(v); }

// The same over a block of up to 1024 threads: warps, then warp 0 over their results.
template <bool MAX> static __device__ __noinline__ float block_reduce(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_reduce<MAX>(v);
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (w == 0) {
        float s = lane < (int)((blockDim.x + 31) >> 5) ? part[lane] : MAX ? -INFINITY : 0.0f;
        s = warp_reduce<MAX>(s);
        if (lane == 0)
            total = s;
    }
    __syncthreads();
    return total;
}
static __device__ __forceinline__ float block_sum(float v) { return block_reduce<false>(v); }
static __device__ __forceinline__ float block_max(float v) { return block_reduce<true>(v); }

static __device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
/* The SwiGLU activation silu(g) u, one rounding for the product: every kernel's (k_swiglu, k_mv's SwiGLU input,
 * the tensor-core pre-pass) so that their bits agree. */
static __device__ __forceinline__ float glu(float g, float u) { return __fmul_rn(silu(g), u); }
static __device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }


/* Values a thread keeps in registers in the one-block steps below: with a
 * vector of up to DEV_NR * blockDim values every load is issued at once
 * instead of one L2 round trip after another; longer ones take a loop. */
#define DEV_NR 8

/* A loop over i < n in steps of N whose loads go one step ahead of their use: load(v, i0) fills v[j] with
 * value i0 + j (what it likes past n), use(v, i0) takes values i0.. in order. A plain loop (or "#pragma
 * unroll" over one with an exit test) waits one memory round trip a step; this one about one in all. */
template <int N, class Load, class Use> static __device__ __forceinline__ void dev_pipelined(int n, Load load, Use use)
{
    float cur[N], nxt[N] = {};
    load(cur, 0);
    for (int i0 = 0; i0 < n; i0 += N) {
        if (i0 + N < n)
            load(nxt, i0 + N);
        use(cur, i0);
#pragma unroll
        for (int j = 0; j < N; j++)
            cur[j] = nxt[j];
    }
}

/* y[i] = x[i] * r * w[i] for i < n by the block, x (written by other blocks) from L2: DEV_NR values a thread
 * loaded before any is stored (a loop of load, store, load... waits one L2 round trip a value: y may alias x
 * for all the compiler knows). r = f(), by every thread of the block, once the first values' loads are
 * issued: f's own loads (a last block's parts) take the same L2 round trip, not one after them. */
template <class F>
static __device__ __forceinline__ void dev_scale_store_with(const float *x, const float *w, float *y, int n, F f)
{
    const int nb = blockDim.x;
    float r = 0.0f;
    for (int i0 = 0; i0 < n; i0 += DEV_NR * nb) {
        float xv[DEV_NR], wv[DEV_NR];
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int i = i0 + j * nb + threadIdx.x;
            xv[j] = i < n ? __ldcg(x + i) : 0.0f;
            wv[j] = i < n ? w[i] : 0.0f;
        }
        if (i0 == 0)
            r = f();
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int i = i0 + j * nb + threadIdx.x;
            if (i < n)
                y[i] = xv[j] * r * wv[j];
        }
    }
}
/* The same with r given. */
static __device__ __forceinline__ void dev_scale_store(const float *x, float r, const float *w, float *y, int n)
{
    dev_scale_store_with(x, w, y, n, [r] { return r; });
}

// y = x / sqrt(mean(x^2) + eps) * w (w may be NULL), times silu(gate) when
// gate is set (the gated norm of a DeltaNet head), by one block. y may be x:
// a thread writes only what it read.
static __device__ void dev_rmsnorm(const float *x, const float *w, float *y, int n, float eps,
                                   const float *gate = nullptr)
{
    const int nb = blockDim.x;
    float ss = 0;
    if (n <= DEV_NR * nb) {
        /* w and the gate loaded with x: in the store loop each store (y may be x or alias w for all the
         * compiler knows) held the next value's load back, one L2 round trip a value */
        float v[DEV_NR], wv[DEV_NR], gv[DEV_NR];
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int i = threadIdx.x + j * nb;
            v[j] = i < n ? __ldcg(x + i) : 0.0f;
            wv[j] = i < n && w ? w[i] : 1.0f;
            gv[j] = i < n && gate ? gate[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < DEV_NR; j++)
            ss += v[j] * v[j];
        ss = block_sum(ss);
        const float r = rsqrtf(ss / n + eps);
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int i = threadIdx.x + j * nb;
            if (i < n)
                y[i] = gate ? v[j] * r * wv[j] * silu(gv[j]) : v[j] * r * wv[j];
        }
        return;
    }
    for (int i = threadIdx.x; i < n; i += nb) {
        const float v = __ldcg(x + i);
        ss += v * v;
    }
    ss = block_sum(ss);
    const float r = rsqrtf(ss / n + eps);
    for (int i = threadIdx.x; i < n; i += nb)
        y[i] = gate ? __ldcg(x + i) * r * (w ? w[i] : 1.0f) * silu(gate[i]) : __ldcg(x + i) * r * (w ? w[i] : 1.0f);
}

// A row of n values at x (n % 4 == 0, n <= 128 NQ, x 16-aligned) normalized in place by one warp, as
// dev_rmsnorm (MEAN: r = 1 / sqrt(mean(x^2) + eps)) or k_pf_dn_qk_norm (r = post / sqrt(sum(x^2) + eps)) writes
// it: x r w silu(gate), w and gate may be NULL (else 16-aligned); the sum of squares in another order.
template <int NQ, bool MEAN>
static __device__ __forceinline__ void dev_norm_row_warp(float *x, const float *w, const float *gate, int n, float eps,
                                                         float post)
{
    const int lane = threadIdx.x & 31;
    float4 v[NQ], wv[NQ], gv[NQ];
    float ss = 0.f;
#pragma unroll
    for (int q = 0; q < NQ; q++) { /* every load in flight before the sum */
        const int i = 4 * (lane + 32 * q);
        const bool ok = i < n;
        v[q] = ok ? __ldcg(reinterpret_cast<const float4 *>(x + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
        wv[q] = ok && w ? *reinterpret_cast<const float4 *>(w + i) : make_float4(1.f, 1.f, 1.f, 1.f);
        gv[q] = ok && gate ? *reinterpret_cast<const float4 *>(gate + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int q = 0; q < NQ; q++)
        ss += v[q].x * v[q].x + v[q].y * v[q].y + v[q].z * v[q].z + v[q].w * v[q].w;
    ss = warp_sum(ss);
    const float r = MEAN ? rsqrtf(ss / n + eps) : rsqrtf(ss + eps) * post;
    auto f = [&](float a, float b, float c) { return gate ? a * r * b * silu(c) : a * r * b; };
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        const int i = 4 * (lane + 32 * q);
        if (i < n)
            *reinterpret_cast<float4 *>(x + i) = make_float4(f(v[q].x, wv[q].x, gv[q].x), f(v[q].y, wv[q].y, gv[q].y),
                                                             f(v[q].z, wv[q].z, gv[q].z), f(v[q].w, wv[q].w, gv[q].w));
    }
}

/* f(std::integral_constant<int, NQ>{}) with dev_norm_row_warp's NQ for rows of n values (n <= 512): the one
 * switch from a row's width to the kernel instance, for each kernel over it. */
template <class F> static inline void norm_row_warp_nq(int n, F &&f)
{
    switch ((n + 127) / 128) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
    }
}

/* The prefill's gated norm and q/k norm a warp a row (dev_norm_row_warp) instead of a block of 128 threads a row
 * (pp512: 16,384 blocks a call; the gated norm took 37 us, the q/k norm 14, ncu, session 10): pp512 9,423
 * against 9,292, pp4096 10,573 against 10,401 (H200, alternated in one call, session 12).
 * LILAC_CUDA_PF_WARP_NORM=0: the block kernels. Read once. */
static inline bool pf_warp_norm()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_PF_WARP_NORM", true);
}

// A head of hd values at x, in place: RMSNorm with w, then NeoX rotary on
// the first rot dims at position pos. By one block.
static __device__ void dev_norm_rope(float *x, const float *w, int hd, int rot, int pos, float theta, float eps)
{
    dev_rmsnorm(x, w, x, hd, eps);
    __syncthreads();
    int half = rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)rot);
        float ang = (float)pos * inv_freq, c, s;
        sincosf(ang, &s, &c);
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
    }
}

#define ROUTE_EMAX 512 /* experts dev_route takes */

/* Whether dev_route takes k of E experts (every routing launch checks it). */
static inline bool route_takes(int E, int k) { return E <= ROUTE_EMAX && k <= 32 && k >= 1 && k <= E; }

/* The routing's end, by one warp: sel/selw (shared) hold the k chosen experts in index order and their
 * probabilities; the weights summed in index order as the CPU adds them, and idx (with the up slots at
 * up_offset), w and w[k] = gate written. */
static __device__ void dev_route_write(const int *sel, const float *selw, int k, int norm, int32_t *idx, float *w,
                                       int up_offset, bool has_gate, float gate)
{
    const int lane = threadIdx.x & 31;
    __syncwarp();
    float tot = 0;
    if (lane == 0)
        for (int i = 0; i < k; i++)
            tot += selw[i];
    tot = __shfl_sync(0xffffffffu, tot, 0);
    if (lane < k) {
        idx[lane] = sel[lane];
        if (up_offset > 0)
            idx[k + lane] = sel[lane] + up_offset;
        w[lane] = norm ? selw[lane] / tot : selw[lane];
    }
    if (lane == 0 && has_gate)
        w[k] = gate;
}

#define ROUTE_NT 256                      /* the threads of every block that routes (dev_route) */
#define ROUTE_NW (ROUTE_NT / 32)          /* its warps */
#define ROUTE_EPT (ROUTE_EMAX / ROUTE_NT) /* experts a thread holds */
#define ROUTE_NG (ROUTE_EMAX / 32)        /* groups of 32 experts */

/* The block's warps' partial values (one a warp in red[], by lane 0) reduced in warp order by every thread:
 * the same bits in all of them, two barriers. */
template <bool MAX> static __device__ __forceinline__ float route_reduce(float v, float *red)
{
    v = warp_reduce<MAX>(v);
    __syncthreads(); /* red's last readers are done */
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < ROUTE_NW; w++)
        v = MAX ? fmaxf(v, red[w]) : v + red[w];
    return v;
}

/* Whether expert a (key ka) comes before expert b (key kb): the higher key, or the lower index among equals. */
static __device__ __forceinline__ bool route_before(unsigned ka, unsigned a, unsigned kb, unsigned b)
{
    return ka > kb || (ka == kb && a < b);
}

/* The routing's choice by a block of ROUTE_NT threads (every thread calls it): the softmax of E logits
 * (E <= ROUTE_EMAX), and the k most probable experts (k <= 32), ties to the lower index (the order of k rounds
 * of argmax, the CPU's), listed in index order in sel/selw (shared) with their probabilities. Probabilities
 * compare as their bits (all >= 0), NaN ones as the lowest. No step waits on another lane's result more than
 * once: each expert ranked within its group of 32 by shuffles (the first k of every group are candidates, at
 * slot group k + rank), each candidate ranked among the candidates, the chosen ones marked in a bitmap and
 * placed by the marks below them. The choice is the one order's first k whatever the steps, so any of the
 * ways to find it gives the same bits. (k rounds of a block-wide argmax, or of warp reductions, took ~5 us on
 * the step's chain; so did the earlier kernel: the softmax by block reductions, ranks by counting.) */
static __device__ void dev_route_choose(const float *logits, int E, int k, int *sel, float *selw)
{
    __shared__ float red[ROUTE_NW];
    __shared__ unsigned ckey[ROUTE_NG * 32], cidx[ROUTE_NG * 32];
    __shared__ unsigned mark[ROUTE_NG];
    const unsigned full = 0xffffffffu;
    const int t = threadIdx.x;
    if (t < ROUTE_NG)
        mark[t] = 0; /* the reductions' barriers order it before the marks */
    float l[ROUTE_EPT];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < ROUTE_EPT; j++) {
        const int e = t + j * ROUTE_NT;
        l[j] = e < E ? __ldcg(logits + e) : -INFINITY;
        mx = fmaxf(mx, l[j]);
    }
    mx = route_reduce<true>(mx, red);
    float v[ROUTE_EPT], sum = 0.0f;
#pragma unroll
    for (int j = 0; j < ROUTE_EPT; j++) {
        v[j] = t + j * ROUTE_NT < E ? expf(l[j] - mx) : 0.0f;
        sum += v[j];
    }
    sum = route_reduce<false>(sum, red);
    const int ng = (E + 31) >> 5;
#pragma unroll
    for (int j = 0; j < ROUTE_EPT; j++) {
        const unsigned e = (unsigned)(t + j * ROUTE_NT);
        if (j * ROUTE_NT >= E) /* the whole group (and warp) past E */
            break;
        const float p = v[j] / sum;
        const unsigned key = e >= (unsigned)E ? 0u : p != p ? 1u : __float_as_uint(p) + 2u;
        int rank = 0; /* within the group (the warp's 32 experts of this j) */
#pragma unroll 8
        for (int src = 0; src < 32; src++) {
            const unsigned ks = __shfl_sync(full, key, src);
            rank += route_before(ks, (e & ~31u) + src, key, e);
        }
        if (rank < k) /* ranks are a permutation of 0..31: every slot g k + r, r < k, written once */
            ckey[(e >> 5) * k + rank] = key, cidx[(e >> 5) * k + rank] = e;
    }
    __syncthreads();
    const int nc = ng * k;
    for (int c = t; c < nc; c += ROUTE_NT) { /* each candidate's rank among all of them */
        const unsigned kc = ckey[c], ec = cidx[c];
        int rank = 0;
#pragma unroll 8
        for (int i = 0; i < nc; i++)
            rank += route_before(ckey[i], cidx[i], kc, ec);
        if (rank < k)
            atomicOr(&mark[ec >> 5], 1u << (ec & 31));
    }
    __syncthreads();
    for (int c = t; c < nc; c += ROUTE_NT) { /* the chosen ones placed in index order */
        const unsigned kc = ckey[c], ec = cidx[c];
        if (!((mark[ec >> 5] >> (ec & 31)) & 1u))
            continue;
        int pos = __popc(mark[ec >> 5] & ((1u << (ec & 31)) - 1u));
        for (unsigned g = 0; g < (ec >> 5); g++)
            pos += __popc(mark[g]);
        sel[pos] = (int)ec;
        selw[pos] = kc == 1u ? __uint_as_float(0x7fc00000u) : __uint_as_float(kc - 2u);
    }
    __syncthreads();
}

// lilac_cuda_route (cuda_ops.h) by a block of ROUTE_NT threads (every thread calls it; dev_route_choose):
// idx/w as dev_route_write writes them. The shared expert's gate from gate_inp . xn, or from its logit
// computed elsewhere (gsh_logit: k_norm_router's extra row).
static __device__ void dev_route(const float *logits, int E, int k, int norm, int32_t *idx, float *w, int up_offset,
                                 const float *gate_inp, const float *xn, int n_embd, const float *gsh_logit = nullptr)
{
    __shared__ int sel[32];
    __shared__ float selw[32];
    float gsh = !gate_inp && gsh_logit ? __ldcg(gsh_logit) : 0.0f; /* in flight with the routing */
    if (gate_inp) { // the shared expert's gate
        /* DEV_NR values a thread loaded at once: "#pragma unroll" over the strided loop kept its exit test
         * between the loads, one L2 round trip a value (a third of the old kernel's stall samples in ncu) */
        float d = 0;
        for (int i0 = 0; i0 < n_embd; i0 += DEV_NR * ROUTE_NT) {
            float gv[DEV_NR], xv[DEV_NR];
#pragma unroll
            for (int j = 0; j < DEV_NR; j++) {
                const int i = i0 + j * ROUTE_NT + threadIdx.x;
                gv[j] = i < n_embd ? gate_inp[i] : 0.0f;
                xv[j] = i < n_embd ? __ldcg(xn + i) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < DEV_NR; j++)
                if (i0 + j * ROUTE_NT + (int)threadIdx.x < n_embd)
                    d += gv[j] * xv[j]; /* in i order */
        }
        gsh = block_sum(d);
    }
    dev_route_choose(logits, E, k, sel, selw);
    if (threadIdx.x < 32)
        dev_route_write(sel, selw, k, norm, idx, w, up_offset, gate_inp || gsh_logit,
                        gate_inp || gsh_logit ? sigmoidf_(gsh) : 0.0f);
}

/* The last-block pattern of a grid that ends with one block's work over every block's results: each block's
 * writes fenced (every thread's), then counted in *count; true, for the whole block, in the block that arrives
 * last, which may then read them all (__ldcg). That block sets the count back to zero (a replayed graph
 * launches the kernel again); *count is zero before the first launch. */
static __device__ __forceinline__ bool dev_last_block(unsigned *count)
{
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(count, 1u) == gridDim.x - 1;
        if (last)
            atomicExch(count, 0u);
    }
    __syncthreads();
    if (last)
        __threadfence(); /* the other blocks' writes, after their fences */
    return last;
}

/* The post-attention norm and a float32 router (k_norm_router): every block
 * computes the norm itself into shared memory (dev_rmsnorm with the block's threads: with 256, k_rmsnorm's
 * bits), block vb == 0 writes xn, and warp w of block vb takes router rows (vb + nvb i) NR_WARPS + w,
 * prefetching a row's first PF float4 (PDL: before griddep_wait, while the kernel before ends; the sums'
 * order is the same for any PF: a lane adds its float4 in column order). Needs n
 * floats of dynamic shared memory (16-byte aligned), blockDim 32 NR_WARPS, n % 4 == 0. */
#define NR_WARPS 8
#define NR_PF 16 /* float4 a lane prefetched: rows up to 2048 values */
template <bool PDL, int PF = NR_PF>
static __device__ __forceinline__ void dev_norm_router(const float *x, const float *norm_w, float *xn, const float *W,
                                                       long long row_floats, int n_exp, float *logits, int n,
                                                       float eps, int vb, int nvb)
{
    extern __shared__ float4 nr_sh4[];
    float *const xs = reinterpret_cast<float *>(nr_sh4);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n4 = n / 4;
    int row = vb * NR_WARPS + warp;
    const float4 *wr = reinterpret_cast<const float4 *>(W + (size_t)(row < n_exp ? row : 0) * row_floats);
    float4 wv[PF];
#pragma unroll
    for (int j = 0; j < PF; j++)
        wv[j] = lane + 32 * j < n4 ? __ldg(wr + lane + 32 * j) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (PDL) {
        griddep_wait();
        TRACE_WAITED(LILAC_TK_NORM_ROUTER);
    }
    dev_rmsnorm(x, norm_w, xs, n, eps);
    __syncthreads();
    if (vb == 0)
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            xn[i] = xs[i];
    for (;;) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < PF; j++)
            if (lane + 32 * j < n4) {
                const float4 v = nr_sh4[lane + 32 * j], w = wv[j];
                acc += w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
            }
        for (int i = lane + 32 * PF; i < n4; i += 32) {
            const float4 v = nr_sh4[i], w = __ldg(wr + i);
            acc += w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
        }
        acc = warp_sum(acc);
        if (lane == 0 && row < n_exp)
            logits[row] = acc;
        row += nvb * NR_WARPS; /* a grid smaller than the rows: the next row of this warp */
        if (row >= n_exp)
            break;
        wr = reinterpret_cast<const float4 *>(W + (size_t)row * row_floats);
#pragma unroll
        for (int j = 0; j < PF; j++)
            wv[j] = lane + 32 * j < n4 ? __ldg(wr + lane + 32 * j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

static __device__ void dev_moe_sum_norm(float *__restrict__ x, const float *__restrict__ ex,
                                        const float *__restrict__ w, int k, const float *__restrict__ sh,
                                        const float *__restrict__ gsh, const float *__restrict__ norm_w,
                                        float *__restrict__ xn, int E, float eps)
{
    __shared__ float ws[65]; // the k weights, then the shared expert's gate
    for (int i = threadIdx.x; i < k && i < 64; i += blockDim.x)
        ws[i] = __ldcg(w + i);
    if (threadIdx.x == 0)
        ws[64] = sh ? __ldcg(gsh) : 0.0f;
    __syncthreads();
    const int nb = blockDim.x;
    float ss = 0;
    if (E <= DEV_NR * nb && k <= 64) {
        float o[DEV_NR];
#pragma unroll
        for (int j = 0; j < DEV_NR; j++)
            o[j] = 0.0f;
        float xv[DEV_NR], sv[DEV_NR]; /* loaded first: in flight with the experts' first loads */
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int e = threadIdx.x + j * nb;
            xv[j] = e < E ? __ldcg(x + e) : 0.0f;
            sv[j] = e < E && sh ? __ldcg(sh + e) : 0.0f;
        }
        // expert by expert, as the CPU adds them; 4 experts' loads in flight (one L2 round trip each was most
        // of this kernel's time)
        constexpr int SN_EXP = 4;
        for (int i0 = 0; i0 < k; i0 += SN_EXP) {
            float v[SN_EXP][DEV_NR];
#pragma unroll
            for (int ii = 0; ii < SN_EXP; ii++)
#pragma unroll
                for (int j = 0; j < DEV_NR; j++) {
                    const int e = threadIdx.x + j * nb;
                    v[ii][j] = i0 + ii < k && e < E ? __ldcg(ex + (size_t)(i0 + ii) * E + e) : 0.0f;
                }
#pragma unroll
            for (int ii = 0; ii < SN_EXP; ii++)
                if (i0 + ii < k) {
                    const float wi = ws[i0 + ii];
#pragma unroll
                    for (int j = 0; j < DEV_NR; j++)
                        o[j] += wi * v[ii][j];
                }
        }
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int e = threadIdx.x + j * nb;
            if (e < E) {
                if (sh)
                    o[j] += ws[64] * sv[j];
                o[j] += xv[j];
                x[e] = o[j];
                ss += o[j] * o[j];
            }
        }
        if (!norm_w)
            return;
        ss = block_sum(ss);
        const float r = rsqrtf(ss / E + eps);
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int e = threadIdx.x + j * nb;
            if (e < E)
                xn[e] = o[j] * r * norm_w[e];
        }
        return;
    }
    for (int e = threadIdx.x; e < E; e += nb) {
        float o = 0;
        for (int i = 0; i < k; i++)
            o += __ldcg(w + i) * __ldcg(ex + (size_t)i * E + e);
        if (sh)
            o += __ldcg(gsh) * __ldcg(sh + e);
        const float v = __ldcg(x + e) + o;
        x[e] = v;
        ss += v * v;
    }
    if (!norm_w)
        return;
    ss = block_sum(ss);
    const float r = rsqrtf(ss / E + eps);
    for (int e = threadIdx.x; e < E; e += nb)
        xn[e] = x[e] * r * norm_w[e];
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
    lilac_cuda_launch_note(grid.x * grid.y * grid.z);
    cudaLaunchKernelEx(&cfg, kern, static_cast<Act &&>(args)...);
}

/* The decode step's small kernels that launch_pdl may launch dependent (they wait at their first line). */
enum {
    PDL_RMSNORM = 1,
    PDL_ATTN = 2,
    PDL_COMBINE = 4,
    PDL_CONV = 8,
    PDL_ROUTE = 16,
    PDL_SUM = 32,
    PDL_ROPE = 64,
};

/* Which of them launch dependent: LILAC_CUDA_PDL_ALL=1 all; LILAC_CUDA_PDL_SET=names (rmsnorm, attention,
 * combine, conv, route, sum, rope, comma-separated) those. None by default: measured on the H200, tg128 234
 * tok/s with all against 258 without (one run, 2026-11-30): the early-launched blocks hold SMs the products
 * before them want. The set is for finding the ones that pay alone (a kernel after a small one, not after a
 * product, holds nothing a product wants). */
static unsigned pdl_set()
{
    static int set = -1;
    if (set < 0) {
        static const struct {
            const char *name;
            int bit;
        } names[] = {{"rmsnorm", PDL_RMSNORM}, {"attention", PDL_ATTN}, {"combine", PDL_COMBINE},
                     {"conv", PDL_CONV},       {"route", PDL_ROUTE},    {"sum", PDL_SUM},
                     {"rope", PDL_ROPE}};
        int v = lilac_env_switch("LILAC_CUDA_PDL_ALL", false) ? 0x7f : 0;
        const char *e = getenv("LILAC_CUDA_PDL_SET");
        for (const auto &n : names)
            if (lilac_env_list_has(e, n.name))
                v |= n.bit;
        set = v;
    }
    return (unsigned)set;
}
template <typename... Exp, typename... Act>
static void launch_pdl(unsigned cls, void (*kern)(Exp...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                       Act &&...args)
{
    if (pdl_set() & cls)
        launch_dependent(kern, grid, block, smem, st, static_cast<Act &&>(args)...);
    else {
        lilac_cuda_launch_note(grid.x * grid.y * grid.z);
        kern<<<grid, block, smem, st>>>(static_cast<Act &&>(args)...);
    }
}

#endif
