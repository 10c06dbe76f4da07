// cuda_ops: the model's elementwise and per-head operations on the GPU
// (norms, rotary, attention, the Gated DeltaNet step, routing, gating), as
// the CPU decoder computes them (src/model/decoder.c is the reference).
// Matrix products are cuda_quant.cu's.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_sizes.h"
#include "kernels/cuda/cuda_trace.cuh"

LILAC_TRACE_TU(ops)

#define CS(s) ((cudaStream_t)(s))

// ---- norms ----

// y = x / sqrt(mean(x^2) + eps) * w (w may be NULL), one block per row.
__global__ void k_rmsnorm(const float *x, const float *w, float *y, int n, float eps)
{
    TRACE_START(LILAC_TK_RMSNORM);
    griddep_launch_dependents(); // the next product may start fetching its weights
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    dev_rmsnorm(x + (size_t)blockIdx.x * n, w, y + (size_t)blockIdx.x * n, n, eps);
    TRACE_END(LILAC_TK_RMSNORM);
}

extern "C" void lilac_cuda_rmsnorm(const float *x, const float *w, float *y, int rows, int n, float eps,
                                   lilac_cuda_stream *s)
{
    launch_pdl(PDL_RMSNORM, k_rmsnorm, dim3(rows), dim3(256), 0, CS(s), x, w, y, n, eps);
}

__global__ void k_add(float *x, const float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += y[i];
}

extern "C" void lilac_cuda_add(float *x, const float *y, int n, lilac_cuda_stream *s)
{
    k_add<<<(n + 255) / 256, 256, 0, CS(s)>>>(x, y, n);
}

// ---- attention ----

// A step captured once and replayed (launch overhead off the decode path).
extern "C" int lilac_cuda_capture_begin(lilac_cuda_stream *s)
{
    return cudaStreamBeginCapture(CS(s), cudaStreamCaptureModeThreadLocal) == cudaSuccess ? 0 : -1;
}

/* The captured step's joins (cudaStreamWaitEvent of the second stream) into a kernel launched dependent are
 * programmatic edges already (session 28, H200: 469 of the graph's 570 edges programmatic, 119 dependent kernels
 * with a join, none of their edges from a kernel left full), yet the routed down+sum kernel, whose edges are the
 * gate+up product's and the shared expert's down product's, starts ~1.2 us after the gate+up product ends, its
 * wait 0.5 us: a kernel with two programmatic upstreams is not started early. (The rewrite that looked for full
 * join edges, LILAC_CUDA_JOIN_PDL, found none to change: code at 77d4e63.) */
extern "C" int lilac_cuda_capture_end(lilac_cuda_stream *s, void **exec)
{
    cudaGraph_t g = NULL;
    *exec = NULL;
    static int told; /* once a process: the step then runs kernel by kernel, slower but the same */
    cudaError_t st = cudaStreamEndCapture(CS(s), &g);
    if (st != cudaSuccess || !g) {
        if (!told++)
            fprintf(stderr, "cuda: the decode step could not be captured as a graph (%s); kernel by kernel\n",
                    cudaGetErrorString(st));
        cudaGetLastError();
        return -1;
    }
    cudaGraphExec_t e = NULL;
    st = cudaGraphInstantiate(&e, g, 0);
    cudaGraphDestroy(g);
    if (st != cudaSuccess) {
        if (!told++)
            fprintf(stderr, "cuda: the decode step's graph could not be instantiated (%s); kernel by kernel\n",
                    cudaGetErrorString(st));
        cudaGetLastError();
        return -1;
    }
    *exec = e;
    return 0;
}

extern "C" int lilac_cuda_graph_launch(void *exec, lilac_cuda_stream *s)
{
    return cudaGraphLaunch((cudaGraphExec_t)exec, CS(s)) == cudaSuccess ? 0 : -1;
}

extern "C" void lilac_cuda_graph_free(void *exec)
{
    if (exec)
        cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

// Split-K attention for one query position (flash decoding): block (h, sp)
// takes keys [sp * chunk, (sp + 1) * chunk) of head h: scores into scratch,
// its max m, sum l of exp(score - m) and o = sum exp(score - m) v into part.
#define ATT_SPLIT LILAC_CUDA_ATT_SPLIT /* the most ranges: 512 (cuda_sizes.h: the plan counts their parts) */
#define ATT_SPLIT_V1 256              /* the most ranges of k_attention_gqa / k_attention_part (their combine's) */
#define ATT_TILE 64
// The key ranges in use at n_keys keys: at most nsplit, of at least min_keys
// keys each, so that a short context does not pay for nsplit mostly empty
// blocks and parts; but a short context (under 8 min_keys) takes up to
// ATT_SHORT ranges of at least 16 keys, whose blocks each walk fewer keys
// (tg128 at depth 0 with 16 keys a range: 325.0 against 319.2 and 320.3,
// 338.8 against 335.9 on a rerun, H200, 2026-11-30; at depth 8192 16 keys a
// range lost: 295.1 against 316.1).
#define ATT_SHORT 8
static __host__ __device__ __forceinline__ int att_splits(int n_keys, int nsplit, int min_keys)
{
    const int by_min = (n_keys + min_keys - 1) / min_keys, short_ctx = min((n_keys + 15) / 16, ATT_SHORT);
    return min(nsplit, max(by_min, short_ctx));
}

static bool att_v2();
static __host__ __device__ __forceinline__ int att2_splits(int n_keys, int nsplit, int min_keys);
extern "C" int lilac_cuda_attention_ranges_used(int n_keys, int nsplit, int min_keys)
{
    return att_v2() ? att2_splits(n_keys, nsplit, min_keys) : att_splits(n_keys, min(nsplit, ATT_SPLIT_V1), min_keys);
}
__global__ void k_attention_part(const float *q, int q_step, const float *K, const float *V, const int *pos_dev, int kvw,
                                 int hd, int group, float *scratch, int scratch_stride, float *part, int nsplit,
                                 int min_keys)
{
    TRACE_START(LILAC_TK_ATT_PART);
    int h = blockIdx.x, sp = blockIdx.y, kvh = h / group;
    int n_keys = *pos_dev + 1, ns = att_splits(n_keys, nsplit, min_keys), chunk = (n_keys + ns - 1) / ns;
    if (sp >= ns) {
        TRACE_END(LILAC_TK_ATT_PART);
        return;
    }
    int p0 = sp * chunk, p1 = min(n_keys, p0 + chunk);
    float *pt = part + ((size_t)h * nsplit + sp) * (hd + 2);
    const float *qh = q + (size_t)h * q_step;
    float *sc = scratch + (size_t)h * scratch_stride;
    extern __shared__ float qs[];
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        qs[i] = qh[i];
    __syncthreads();
    float scale = rsqrtf((float)hd), mx = -INFINITY;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int p = p0 + wid; p < p1; p += nw) {
        const float *k = K + (size_t)p * kvw + (size_t)kvh * hd;
        float d = 0;
        for (int i = lane; i < hd; i += 32)
            d += qs[i] * k[i];
        d = warp_sum(d) * scale;
        if (lane == 0)
            sc[p] = d;
    }
    __syncthreads();
    for (int p = p0 + threadIdx.x; p < p1; p += blockDim.x)
        mx = fmaxf(mx, sc[p]);
    mx = block_max(mx);
    float sum = 0;
    for (int p = p0 + threadIdx.x; p < p1; p += blockDim.x) {
        float e = expf(sc[p] - mx);
        sc[p] = e;
        sum += e;
    }
    sum = block_sum(sum);
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0;
        for (int p = p0; p < p1; p++)
            o += sc[p] * V[(size_t)p * kvw + (size_t)kvh * hd + d];
        pt[2 + d] = o;
    }
    if (threadIdx.x == 0)
        pt[0] = p1 > p0 ? mx : -INFINITY, pt[1] = sum;
    TRACE_END(LILAC_TK_ATT_PART);
}

// The same split, a block per (KV head, key range) for all G query heads
// of its group: each K and V row is read once for the group, not G times.
// Keys go in tiles of ATT_TILE with a running max (online softmax); a warp
// scores ATT_TILE / 8 keys, 4 at a time, a lane holding hd / 32 dims of
// each; a thread then owns output dim d of the G heads. The part written
// per query head is k_attention_part's (m, l, o), merged the same way.
/* Head w's online softmax after a tile, by its warp: the tile's sum of exp(s - mn) (mn the new running max, mo
 * the old) merged into l_run[w], m_run[w] = mn, and alpha[w] the factor the outputs so far take. */
static __device__ __forceinline__ void att_merge_tile(int w, int lane, float mo, float mn, float sum, float *alpha,
                                                      float *l_run, float *m_run)
{
    __syncwarp(); // every lane has read m_run[w] (a shuffle orders no memory: racecheck)
    if (lane == 0) {
        const float a = mo == -INFINITY ? 0.0f : expf(mo - mn);
        alpha[w] = a;
        l_run[w] = l_run[w] * a + sum;
        m_run[w] = mn;
    }
}
#define ATT_GMAX 8
#define ATT_DPL 8 /* dims a lane: hd <= 256 */
#define ATT_VL 8 /* V rows (the combine: ranges) a thread loads at once; 16 measured the same (tg128 331.8 and
                  * 329.3 against 332.9 and 331.0, depth 8192 316.6 and 314.1 against 315.6 and 313.0, H200) */
// Batched (blockIdx.z a row of its own sequence): q, part advanced by the
// row's strides, K and V from Kp, Vp when given, the position pos_dev[row].
// Measured and removed (session 31, LILAC_CUDA_ATT_PF=1, code at 1cdce60): each block prefetching its K and V
// rows toward L2 before its wait (prefetch.global.L2, a line a thread): tg128 at depth 8192 360.8/360.8 against
// 360.9/362.3 (H200, alternated in one call).
__global__ void __launch_bounds__(256) k_attention_gqa(const float *q, int q_step, long long q_tok, const float *K,
                                                      const float *V, float *const *Kp, float *const *Vp,
                                                      const int *pos_dev, int kvw, int hd, int G, float *part,
                                                      long long part_tok, int nsplit, int min_keys, int spread)
{
    TRACE_START(LILAC_TK_ATT_GQA);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    const int kvh = blockIdx.x, sp = blockIdx.y, row = blockIdx.z;
    q += row * q_tok, part += row * part_tok;
    if (Kp)
        K = Kp[row], V = Vp[row];
    /* spread: a block that can work at a short context (sp < ATT_SHORT) loads its first DEV_NR q values a thread
     * beside the position, not one round trip after it (at most ATT_SHORT idle blocks a head load them) */
    const bool early = spread && sp < ATT_SHORT;
    auto q_at = [&](int i) { return i < G * hd ? q[(size_t)(kvh * G + i / hd) * q_step + i % hd] : 0.0f; };
    float q0[DEV_NR];
#pragma unroll
    for (int j = 0; j < DEV_NR; j++)
        q0[j] = early ? q_at(j * blockDim.x + threadIdx.x) : 0.0f;
    const int n_keys = pos_dev[row] + 1, ns = att_splits(n_keys, nsplit, min_keys), chunk = (n_keys + ns - 1) / ns;
    if (sp >= ns) {
        TRACE_END(LILAC_TK_ATT_GQA);
        return;
    }
    const int p0 = sp * chunk, p1 = min(n_keys, p0 + chunk);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, dpl = hd / 32;
    __shared__ float qs[ATT_GMAX][ATT_DPL * 32], sc[ATT_GMAX][ATT_TILE], m_run[ATT_GMAX], l_run[ATT_GMAX],
        alpha[ATT_GMAX];
    const float scale = rsqrtf((float)hd);
    /* DEV_NR loads a thread in flight at once (a plain strided loop waits one L2 round trip a value) */
    for (int i0 = 0; i0 < G * hd; i0 += DEV_NR * (int)blockDim.x) {
        float qv[DEV_NR];
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int i = i0 + j * blockDim.x + threadIdx.x;
            qv[j] = early && i0 == 0 ? q0[j] : q_at(i);
        }
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int i = i0 + j * blockDim.x + threadIdx.x;
            if (i < G * hd)
                qs[i / hd][i % hd] = qv[j] * scale;
        }
    }
    if (threadIdx.x < G)
        m_run[threadIdx.x] = -INFINITY, l_run[threadIdx.x] = 0.0f;
    float o[ATT_GMAX];
#pragma unroll
    for (int g = 0; g < ATT_GMAX; g++)
        o[g] = 0.0f;
    __syncthreads();
    const size_t koff = (size_t)kvh * hd;
    for (int t0 = p0; t0 < p1; t0 += ATT_TILE) {
        const int nt = min(ATT_TILE, p1 - t0);
        for (int it = 0; it < ATT_TILE / 32; it++) {
            /* warp w's keys: 8 w .. 8 w + 7 of the tile, or (spread, att_spread()) 4 w .. 4 w + 3 and 32 on, so
             * that a range of 32 keys or fewer takes one step of every warp it needs, not two of a quarter of them;
             * a step without a live key writes its scores' -inf alone. Each key's dot is the same either way. */
            const int kb = spread ? 4 * wid + 32 * it : wid * (ATT_TILE / 8) + 4 * it;
            if (spread && kb >= nt) {
                if (lane < 4 * G)
                    sc[lane >> 2][kb + (lane & 3)] = -INFINITY;
                continue;
            }
            float part_d[4][ATT_GMAX];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float kr[ATT_DPL];
                const bool live = kb + j < nt;
                const float *kp = K + (size_t)(t0 + kb + j) * kvw + koff;
#pragma unroll
                for (int i = 0; i < ATT_DPL; i++)
                    kr[i] = live && i < dpl ? kp[lane + 32 * i] : 0.0f;
#pragma unroll
                for (int g = 0; g < ATT_GMAX; g++) {
                    float d = 0;
#pragma unroll
                    for (int i = 0; i < ATT_DPL; i++)
                        d += i < dpl && g < G ? kr[i] * qs[g][lane + 32 * i] : 0.0f;
                    part_d[j][g] = d;
                }
            }
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int g = 0; g < ATT_GMAX; g++) {
                    const float d = warp_sum(part_d[j][g]);
                    if (lane == 0 && g < G)
                        sc[g][kb + j] = kb + j < nt ? d : -INFINITY;
                }
        }
        __syncthreads();
        if (wid < G) { // warp g: the running softmax of head g over this tile
            const float s0 = sc[wid][lane], s1 = sc[wid][lane + 32];
            const float mt = warp_max(fmaxf(s0, s1)), mo = m_run[wid], mn = fmaxf(mo, mt);
            const float e0 = lane < nt ? expf(s0 - mn) : 0.0f, e1 = lane + 32 < nt ? expf(s1 - mn) : 0.0f;
            sc[wid][lane] = e0, sc[wid][lane + 32] = e1;
            att_merge_tile(wid, lane, mo, mn, warp_sum(e0 + e1), alpha, l_run, m_run);
        }
        __syncthreads();
        const int d = threadIdx.x;
        if (d < hd) {
#pragma unroll
            for (int g = 0; g < ATT_GMAX; g++)
                o[g] *= g < G ? alpha[g] : 0.0f;
            const float *vp = V + (size_t)t0 * kvw + koff + d;
            /* ATT_VL rows of V a step, the next step's in flight ("#pragma unroll" over i < nt kept its exit
             * test between the loads: one memory round trip a key) */
            dev_pipelined<ATT_VL>(
                nt,
                [&](float(&v)[ATT_VL], int i0) {
#pragma unroll
                    for (int j = 0; j < ATT_VL; j++)
                        v[j] = i0 + j < nt ? vp[(size_t)(i0 + j) * kvw] : 0.0f;
                },
                [&](const float(&v)[ATT_VL], int i0) {
#pragma unroll
                    for (int j = 0; j < ATT_VL; j++)
                        if (i0 + j < nt)
#pragma unroll
                            for (int g = 0; g < ATT_GMAX; g++)
                                o[g] += sc[g < G ? g : 0][i0 + j] * v[j];
                });
        }
        __syncthreads();
    }
    const int d = threadIdx.x;
    for (int g = 0; g < G; g++) {
        float *pt = part + ((size_t)(kvh * G + g) * nsplit + sp) * (hd + 2);
        if (d < hd)
            pt[2 + d] = o[g];
        if (d == 0)
            pt[0] = p1 > p0 ? m_run[g] : -INFINITY, pt[1] = l_run[g];
    }
    TRACE_END(LILAC_TK_ATT_GQA);
}

// Per head: the parts combined with their maxima, then the gate sigmoid(g).
// The ranges' weights exp(m - M) are computed once, a thread a range, into
// shared memory; then a thread a dim sums the ranges with all loads in flight.
__global__ void k_attention_combine(const float *q, int q_step, long long q_tok, int hd, const float *part,
                                    long long part_tok, float *out, long long out_tok, int gated, const int *pos_dev,
                                    int nsplit, int min_keys)
{
    TRACE_START(LILAC_TK_ATT_COMBINE);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    const int row = blockIdx.y;
    q += row * q_tok, part += row * part_tok, out += row * out_tok;
    int h = blockIdx.x, ns = att_splits(pos_dev[row] + 1, nsplit, min_keys);
    const float *ph = part + (size_t)h * nsplit * (hd + 2);
    static_assert(ATT_SPLIT_V1 <= 256, "a thread of the 256 a range's weight");
    __shared__ float wsp[ATT_SPLIT_V1];
    /* a range's m and l loaded together */
    float m = threadIdx.x < ns ? ph[(size_t)threadIdx.x * (hd + 2)] : -INFINITY;
    const float lr = threadIdx.x < ns ? ph[(size_t)threadIdx.x * (hd + 2) + 1] : 0.0f;
    const float M = block_max(m);
    float l = 0;
    if (threadIdx.x < ns) {
        const float wgt = m > -INFINITY ? expf(m - M) : 0.0f;
        wsp[threadIdx.x] = wgt;
        l = wgt > 0 ? lr * wgt : 0.0f;
    }
    const float L = block_sum(l);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        const float gq = gated ? q[(size_t)h * q_step + hd + d] : 0.0f; /* in flight with the parts */
        /* ATT_VL ranges a step, the next step's in flight ("#pragma unroll" over sp < ns kept its exit test
         * between the loads: at 8192 keys, 128 ranges, 128 L2 round trips one after another) */
        float o = 0;
        dev_pipelined<ATT_VL>(
            ns,
            [&](float(&pv)[ATT_VL], int sp0) {
#pragma unroll
                for (int j = 0; j < ATT_VL; j++)
                    pv[j] = sp0 + j < ns ? ph[(size_t)(sp0 + j) * (hd + 2) + 2 + d] : 0.0f;
            },
            [&](const float(&pv)[ATT_VL], int sp0) {
#pragma unroll
                for (int j = 0; j < ATT_VL; j++)
                    if (sp0 + j < ns)
                        o += wsp[sp0 + j] * pv[j];
            });
        o /= L;
        if (gated)
            o *= sigmoidf_(gq);
        out[(size_t)h * hd + d] = o;
    }
    TRACE_END(LILAC_TK_ATT_COMBINE);
}

/* LILAC_CUDA_ATT_V2 (on; see att_v2): the decode attention in small code, every load of a step issued at once.
 * k_attention_gqa is 5,856 instructions (94 KB of sm_90a code) of straight-line code (its loops over 8 heads, 4
 * keys and 8 dims unrolled), run once by each working block: the per-block trace put one block of 16 keys at 11-26
 * us (H200), its phases microseconds each whatever their work. The likely cause (not yet confirmed by ncu's
 * instruction-fetch stalls): the decode step streams ~48 MB of weights a layer through the 50 MB L2, so a kernel's
 * code comes from memory again each layer, one instruction-cache miss after another, and code run once costs its
 * size. Here the loops over the heads are not unrolled (a thread's outputs in shared memory, os) and the kernel is
 * 1,688 instructions (27 KB): one block of 16 keys 8.6 us, tg128 418.8 against 388.3, at depth 8192 387.9 against
 * 359.2 (one H200, alternated in one call, session 33). A block takes steps of ATT2_KEYS = 32 keys (8 warps x
 * ATT2_KW = 4): each thread loads its 32 V values (dim threadIdx.x of the 32 rows) beside its warp's 4 K rows, so a
 * step waits one round trip; ranges are of 32 keys (a block's latency is one step's, so shorter ranges buy
 * nothing), up to ATT_SPLIT of them. The parts are laid out for vector loads: the ranges' o rows
 * [n_head][nsplit][hd], then their (m, l) pairs [n_head][nsplit][2]. */
#define ATT2_KW 4
#define ATT2_KEYS (8 * ATT2_KW)
static __host__ __device__ __forceinline__ int att2_splits(int n_keys, int nsplit, int min_keys)
{
    return min(nsplit, (n_keys + min_keys - 1) / min_keys);
}

__global__ void __launch_bounds__(256, 2) k_attention_gqa2(const float *q, int q_step, long long q_tok,
                                                           const float *K, const float *V, float *const *Kp,
                                                           float *const *Vp, const int *pos_dev, int kvw, int hd,
                                                           int G, float *part, long long part_tok, int nsplit,
                                                           int min_keys)
{
    TRACE_START(LILAC_TK_ATT_GQA);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    const int kvh = blockIdx.x, sp = blockIdx.y, row = blockIdx.z, n_head = gridDim.x * G;
    q += row * q_tok, part += row * part_tok;
    if (Kp)
        K = Kp[row], V = Vp[row];
    const int n_keys = pos_dev[row] + 1, ns = att2_splits(n_keys, nsplit, min_keys), chunk = (n_keys + ns - 1) / ns;
    if (sp >= ns) {
        TRACE_END(LILAC_TK_ATT_GQA);
        return;
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, dpl = hd / 32, d = threadIdx.x, nq = G * hd;
    /* q flat as [G][hd]; os: thread d's outputs of the G heads (in shared memory, so that the loops over the
     * heads need not be unrolled to keep them in registers: the code stays small) */
    __shared__ __align__(16) float qs[ATT_GMAX * ATT_DPL * 32], sc[ATT_GMAX][ATT2_KEYS],
        os[ATT_GMAX][ATT_DPL * 32];
    __shared__ float m_run[ATT_GMAX], l_run[ATT_GMAX], alpha[ATT_GMAX];
    {
        const float scale = rsqrtf((float)hd), rhd = 1.0f / (float)hd;
        float qv[DEV_NR]; // nq <= DEV_NR x 256: one pass; index clamped, not branched around
#pragma unroll
        for (int j = 0; j < DEV_NR; j++) {
            const int i = min(j * (int)blockDim.x + d, nq - 1), g = (int)(((float)i + 0.5f) * rhd); // i / hd
            qv[j] = q[(size_t)(kvh * G + g) * q_step + (i - g * hd)];
        }
#pragma unroll
        for (int j = 0; j < DEV_NR; j++)
            if (j * (int)blockDim.x + d < nq)
                qs[j * blockDim.x + d] = qv[j] * scale;
    }
    const size_t koff = (size_t)kvh * hd;
    const int kb = ATT2_KW * wid; // this warp's keys of a step
    float *po = part + (size_t)kvh * G * nsplit * hd, *pml = part + (size_t)n_head * nsplit * hd;
    /* ranges sp, sp + gridDim.y, ...: the grid is what fits at once (ranges past it would wait for a block) */
    for (int r = sp; r < ns; r += gridDim.y) {
        const int p0 = r * chunk, p1 = min(n_keys, p0 + chunk);
        __syncthreads(); // the range before has read m_run, l_run (and the first: qs written)
        if (threadIdx.x < G)
            m_run[threadIdx.x] = -INFINITY, l_run[threadIdx.x] = 0.0f;
        for (int t0 = p0; t0 < p1; t0 += ATT2_KEYS) {
            const int nt = min(ATT2_KEYS, p1 - t0);
            /* every load of the step before any use: V (dim d of the step's rows), then the warp's K rows; rows
             * past the step's read as its last (unconditional loads: no branch between them), unused */
            float vr[ATT2_KEYS];
            const float *vp = V + (size_t)t0 * kvw + koff + min(d, hd - 1);
#pragma unroll
            for (int k = 0; k < ATT2_KEYS; k++)
                vr[k] = vp[(size_t)min(k, nt - 1) * kvw];
            float kr[ATT2_KW][ATT_DPL];
#pragma unroll
            for (int j = 0; j < ATT2_KW; j++) {
                const float *kp = K + (size_t)(t0 + min(kb + j, nt - 1)) * kvw + koff + lane;
#pragma unroll
                for (int i = 0; i < ATT_DPL; i++)
                    kr[j][i] = kp[32 * min(i, dpl - 1)];
            }
            __syncthreads(); // sc free (the step before has read it)
#pragma unroll 1
            for (int g = 0; g < G; g++) { // head g's scores of the warp's keys: its q values read once
                float dot[ATT2_KW] = {};
#pragma unroll
                for (int i = 0; i < ATT_DPL; i++) {
                    const float qv = qs[g * hd + lane + 32 * min(i, dpl - 1)];
#pragma unroll
                    for (int j = 0; j < ATT2_KW; j++)
                        dot[j] += i < dpl ? kr[j][i] * qv : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < ATT2_KW; j++)
                    dot[j] = warp_sum(dot[j]);
                if (lane < ATT2_KW) {
                    float v = dot[0];
#pragma unroll
                    for (int j = 1; j < ATT2_KW; j++)
                        v = lane == j ? dot[j] : v;
                    sc[g][kb + lane] = kb + lane < nt ? v : -INFINITY;
                }
            }
            __syncthreads();
            TRACE_MARK1(LILAC_TK_ATT_GQA); // the loads are in, the dots done
            if (wid < G) { // warp g: the running softmax of head g over this step's 32 keys
                const float s = sc[wid][lane];
                const float mt = warp_max(s), mo = m_run[wid], mn = fmaxf(mo, mt);
                const float e = lane < nt ? expf(s - mn) : 0.0f; // 0 past nt: the sums below need no test
                sc[wid][lane] = e;
                att_merge_tile(wid, lane, mo, mn, warp_sum(e), alpha, l_run, m_run);
            }
            __syncthreads();
            TRACE_MARK2(LILAC_TK_ATT_GQA);
            if (d < hd) {
                const bool first = t0 == p0;
#pragma unroll 1
                for (int g = 0; g < G; g++) {
                    const float o0 = os[g][d];
                    float acc = first ? 0.0f : o0 * alpha[g]; // a select: the first step reads no stale value
                    const float4 *e4 = (const float4 *)sc[g];
#pragma unroll
                    for (int k = 0; k < ATT2_KEYS / 4; k++) {
                        const float4 e = e4[k];
                        acc += e.x * vr[4 * k], acc += e.y * vr[4 * k + 1];
                        acc += e.z * vr[4 * k + 2], acc += e.w * vr[4 * k + 3];
                    }
                    os[g][d] = acc;
                }
            }
        }
        if (d < hd)
#pragma unroll 1
            for (int g = 0; g < G; g++)
                po[((size_t)g * nsplit + r) * hd + d] = os[g][d];
        if (d < G) {
            const size_t i = (size_t)(kvh * G + d) * nsplit + r;
            pml[2 * i] = p1 > p0 ? m_run[d] : -INFINITY, pml[2 * i + 1] = l_run[d];
        }
    }
    TRACE_END(LILAC_TK_ATT_GQA);
}

/* The parts of k_attention_gqa2 combined: block (head, 16 dims, row); its 256 threads load every range's (m, l)
 * beside the position (the buffer holds nsplit ranges; those past the row's are masked), then 64 groups of 4
 * threads each sum a 64th of the ranges over 4 dims a thread (float4 loads, 8 ranges in flight: all of them
 * up to 512 ranges), the groups' sums added in order. A (head, dim)'s sum is the same whatever the grid. */
#define ATT2_CD 16 /* dims a block */
#define ATT2_CG (256 / (ATT2_CD / 4)) /* groups of ranges: 64 */
__global__ void __launch_bounds__(256) k_attention_combine2(const float *q, int q_step, long long q_tok, int hd,
                                                            const float *part, long long part_tok, float *out,
                                                            long long out_tok, int gated, const int *pos_dev,
                                                            int nsplit, int min_keys)
{
    TRACE_START(LILAC_TK_ATT_COMBINE);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    static_assert(ATT_SPLIT <= 512, "two ranges' weights a thread");
    const int h = blockIdx.x, n_head = gridDim.x, d0 = blockIdx.y * ATT2_CD, row = blockIdx.z, t = threadIdx.x;
    q += row * q_tok, part += row * part_tok, out += row * out_tok;
    const float *po = part + (size_t)h * nsplit * hd;
    const float *pml = part + (size_t)n_head * nsplit * hd + 2 * (size_t)h * nsplit;
    __shared__ float wsp[2 * 256];
    __shared__ float4 red[ATT2_CG][ATT2_CD / 4];
    const int c = t % (ATT2_CD / 4), rg = t / (ATT2_CD / 4), dd = d0 + 4 * c; // its 4 dims, its group of ranges
    float4 gq = make_float4(0, 0, 0, 0);
    if (gated && rg == 0 && dd < hd)
        gq = *(const float4 *)(q + (size_t)h * q_step + hd + dd);
    float2 ml0 = make_float2(-INFINITY, 0.0f), ml1 = ml0;
    if (t < nsplit)
        ml0 = *(const float2 *)(pml + 2 * t);
    if (t + 256 < nsplit)
        ml1 = *(const float2 *)(pml + 2 * (t + 256));
    const int ns = att2_splits(pos_dev[row] + 1, nsplit, min_keys);
    const float m0 = t < ns ? ml0.x : -INFINITY, m1 = t + 256 < ns ? ml1.x : -INFINITY;
    const float M = block_max(fmaxf(m0, m1));
    const float w0 = m0 > -INFINITY ? expf(m0 - M) : 0.0f, w1 = m1 > -INFINITY ? expf(m1 - M) : 0.0f;
    wsp[t] = w0, wsp[t + 256] = w1;
    const float L = block_sum((w0 > 0 ? ml0.y * w0 : 0.0f) + (w1 > 0 ? ml1.y * w1 : 0.0f)); // syncs: wsp written
    float4 acc = make_float4(0, 0, 0, 0);
    if (dd < hd) {
        const int nr = ns > rg ? (ns - rg + ATT2_CG - 1) / ATT2_CG : 0; // ranges rg, rg + ATT2_CG, ...
#define ATT2_CN 8
        for (int i0 = 0; i0 < nr; i0 += ATT2_CN) {
            float4 v[ATT2_CN];
#pragma unroll
            for (int j = 0; j < ATT2_CN; j++) { // loads from a range in use, unconditional (no branch between)
                const int r = rg + ATT2_CG * min(i0 + j, nr - 1);
                v[j] = *(const float4 *)(po + (size_t)r * hd + dd);
            }
#pragma unroll
            for (int j = 0; j < ATT2_CN; j++) {
                /* past nr: w = 0 and v a range in use (finite), acc + 0: no branch, which ptxas would sink the
                 * loads into (34 registers: a round trip each) */
                const float wr = wsp[rg + ATT2_CG * min(i0 + j, nr - 1)], w = i0 + j < nr ? wr : 0.0f;
                acc.x += w * v[j].x, acc.y += w * v[j].y, acc.z += w * v[j].z, acc.w += w * v[j].w;
            }
        }
#undef ATT2_CN
    }
    red[rg][c] = acc;
    __syncthreads();
    if (rg == 0 && dd < hd) {
        float4 s = red[0][c];
        for (int g = 1; g < ATT2_CG; g++) {
            const float4 r = red[g][c];
            s.x += r.x, s.y += r.y, s.z += r.z, s.w += r.w;
        }
        s.x /= L, s.y /= L, s.z /= L, s.w /= L;
        if (gated)
            s.x *= sigmoidf_(gq.x), s.y *= sigmoidf_(gq.y), s.z *= sigmoidf_(gq.z), s.w *= sigmoidf_(gq.w);
        *(float4 *)(out + (size_t)h * hd + dd) = s;
    }
    TRACE_END(LILAC_TK_ATT_COMBINE);
}

extern "C" size_t lilac_cuda_attention_part_floats(int n_head, int hd) { return lilac_cuda_att_part_floats(n_head, hd); }

/* LILAC_CUDA_ATT_SPREAD (on; =0 the old split): k_attention_gqa's warps take a tile's keys four apiece across all
 * eight warps (see there) instead of eight apiece: at tg128's ranges of 16 keys or fewer, four warps score them in
 * one step where two took two steps, each a memory round trip and 32 warp sums; and the blocks that can work at a
 * short context load q beside the position. The same bits. tg128 394.7/394.7/395.5 against 388.9/387.8/387.6
 * (H200, alternated in one call, session 32). Read once. */
static int att_spread()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_ATT_SPREAD", true) ? 1 : 0;
}

/* LILAC_CUDA_ATT_V2 (on; =0 k_attention_gqa and k_attention_combine): the decode attention as k_attention_gqa2
 * and k_attention_combine2, in the one-token step and the batched rows alike (the same bits a row). Measured
 * and removed (session 33): k_attention_gqa into k_attention_combine2's layout, tg128 387.2 against 388.3 for
 * the old pair and 418.8 for the new (one H200, one call; on another machine 1 % under the old pair at depth 0,
 * 1.3 % over it at depth 8192, where the old combine's 16 blocks took 11 us against 6). Read once. */
static bool att_v2()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_ATT_V2", true);
}
/* The most key ranges the decode attention's kernels take (their combine's bound). */
static int att_max_ranges() { return att_v2() ? ATT_SPLIT : ATT_SPLIT_V1; }

/* k_attention_gqa2's blocks a (KV head, row) for the ranges of nsplit: those that fit the device at once with
 * n of those pairs (at least one; each block walks every gridDim.y-th range). The bits do not depend on it. */
static int att2_grid(int nsplit, int n)
{
    static std::atomic<int> fit{0};
    int per = fit.load();
    if (per == 0) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_attention_gqa2, 256, 0) != cudaSuccess || per < 1)
            per = 1;
        per *= dev_sm_count();
        fit.store(per);
    }
    return max(1, min(nsplit, per / max(1, n)));
}

// Whether k_attention_gqa takes the shape (query heads a KV head, head size).
static bool attention_gqa_takes(int n_head, int n_head_kv, int hd)
{
    const int G = n_head_kv > 0 ? n_head / n_head_kv : 0;
    return G >= 1 && G <= ATT_GMAX && n_head % n_head_kv == 0 && hd % 32 == 0 && hd <= 32 * ATT_DPL;
}
/* Key ranges a row of a batched call: the batch's rows fill the device, and each holds its parts. */
#define ATT_SPLIT_ROWS LILAC_CUDA_ATT_SPLIT_ROWS /* 16 */

/* The ranges: at most LILAC_CUDA_ATT_RANGES (1..ATT_SPLIT, default 512), of at least LILAC_CUDA_ATT_KEYS keys
 * (1..4096, default k_attention_gqa2's step, 32). With LILAC_CUDA_ATT_V2=0: at most 256, default a tile, 64 (for
 * k_attention_gqa, whose figures follow). tg128 at depth 8192 (8193..8320 keys, H200, one call, 2026-11-30): 256
 * ranges (one tile each) 302.9 and 300.5 against 291.9 and 290.7 with 128 (65 keys a range, the second tile nearly
 * empty); with 16 or 32 keys a range at 256 ranges 295.1 and 293.3 against 316.1 at 64. At depth 0, 16 keys a range
 * 325.0 against 319.2/320.3 (within the machine's spread on a rerun: 338.8 against 335.9). Read at each call: the
 * host calls this only while capturing the step's graph or without one. */
extern "C" void lilac_cuda_attention_ranges(int *nsplit, int *min_keys)
{
    *nsplit = lilac_env_int("LILAC_CUDA_ATT_RANGES", att_max_ranges(), 1, att_max_ranges());
    *min_keys = lilac_env_int("LILAC_CUDA_ATT_KEYS", att_v2() ? ATT2_KEYS : ATT_TILE, 1, 4096);
}

/* launch_pdl (the one-token step's: its PDL set) or a plain launch (a batched call's, as before) */
template <typename... Exp, typename... Act>
static void att_launch(bool pdl, unsigned cls, void (*kern)(Exp...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t st, Act &&...args)
{
    if (pdl)
        launch_pdl(cls, kern, grid, block, smem, st, static_cast<Act &&>(args)...);
    else
        kern<<<grid, block, smem, st>>>(static_cast<Act &&>(args)...);
}
/* The decode attention's two kernels (att_v2: k_attention_gqa2 and k_attention_combine2, else k_attention_gqa
 * and k_attention_combine), grid z a row of n; the one-token step's by launch_pdl. Both calls go through here:
 * the same kernels and ranges give a row of a batched call the one-token call's bits. */
static void attention_launch(const float *q, int q_step, long long q_tok, const float *K, const float *V,
                             float *const *Kp, float *const *Vp, const int *pos, int n_head, int n_head_kv, int hd,
                             float *out, float *part, long long part_tok, int gated, int n, int nsplit, int min_keys,
                             bool pdl, cudaStream_t st)
{
    const int G = n_head / n_head_kv;
    const long long out_tok = (long long)n_head * hd;
    if (att_v2()) {
        att_launch(pdl, PDL_ATTN, k_attention_gqa2, dim3(n_head_kv, att2_grid(nsplit, n_head_kv * n), n),
                   dim3(256), 0, st, q, q_step, q_tok, K, V, Kp, Vp, pos, n_head_kv * hd, hd, G, part, part_tok,
                   nsplit, min_keys);
        att_launch(pdl, PDL_COMBINE, k_attention_combine2, dim3(n_head, (hd + ATT2_CD - 1) / ATT2_CD, n),
                   dim3(256), 0, st, q, q_step, q_tok, hd, (const float *)part, part_tok, out, out_tok, gated, pos,
                   nsplit, min_keys);
        return;
    }
    att_launch(pdl, PDL_ATTN, k_attention_gqa, dim3(n_head_kv, nsplit, n), dim3(256), 0, st, q, q_step, q_tok, K,
               V, Kp, Vp, pos, n_head_kv * hd, hd, G, part, part_tok, nsplit, min_keys, att_spread());
    att_launch(pdl, PDL_COMBINE, k_attention_combine, dim3(n_head, n), dim3(256), 0, st, q, q_step, q_tok, hd,
               (const float *)part, part_tok, out, out_tok, gated, pos, nsplit, min_keys);
}

extern "C" void lilac_cuda_attention(const float *q, int q_step, const float *K, const float *V, const int *pos,
                                     int n_head, int n_head_kv, int hd, float *out, float *scratch, int scratch_stride,
                                     float *part, int gated, lilac_cuda_stream *s)
{
    int nsplit, min_keys;
    lilac_cuda_attention_ranges(&nsplit, &min_keys);
    if (attention_gqa_takes(n_head, n_head_kv, hd)) {
        attention_launch(q, q_step, 0LL, K, V, NULL, NULL, pos, n_head, n_head_kv, hd, out, part, 0LL, gated, 1,
                         nsplit, min_keys, true, CS(s));
        return;
    }
    nsplit = min(nsplit, ATT_SPLIT_V1);
    k_attention_part<<<dim3(n_head, nsplit), 256, (size_t)hd * sizeof(float), CS(s)>>>(
        q, q_step, K, V, pos, n_head_kv * hd, hd, n_head / n_head_kv, scratch, scratch_stride, part, nsplit,
        min_keys);
    launch_pdl(PDL_COMBINE, k_attention_combine, dim3(n_head), dim3(256), 0, CS(s), q, q_step, 0LL, hd,
               (const float *)part, 0LL, out, 0LL, gated, pos, nsplit, min_keys);
}

extern "C" size_t lilac_cuda_attention_rows_part_floats(int n_head, int hd, int n)
{
    return lilac_cuda_att_rows_part_floats(n_head, hd, n);
}

extern "C" int lilac_cuda_attention_rows(const float *q, int q_step, long long q_tok, float *const *Kp,
                                         float *const *Vp, const int *pos, int n_head, int n_head_kv, int hd,
                                         float *out, float *part, int gated, int n, int nsplit, int min_keys,
                                         lilac_cuda_stream *s)
{
    if (!nsplit)
        nsplit = ATT_SPLIT_ROWS, min_keys = ATT_TILE;
    if (!attention_gqa_takes(n_head, n_head_kv, hd) || n < 1 || n > 65535 || nsplit < 1 ||
        nsplit > att_max_ranges() || min_keys < 1)
        return -1;
    attention_launch(q, q_step, q_tok, NULL, NULL, Kp, Vp, pos, n_head, n_head_kv, hd, out, part,
                     (long long)n_head * nsplit * (hd + 2), gated, n, nsplit, min_keys, false, CS(s));
    return 0;
}

// ---- Gated DeltaNet, one token ----

#define CONV_KR 8 /* taps k_conv_step keeps in registers */
// Causal depthwise conv over time, one thread per channel: the state holds
// the last K-1 inputs; SiLU after.
// Batched: blockIdx.y a row, in and out C floats on, its state statep[row].
__global__ void k_conv_step(const float *in, float *state, const float *w, float *out, int C, int K,
                            float *const *statep)
{
    TRACE_START(LILAC_TK_CONV_STEP);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    const int row = blockIdx.y;
    in += (size_t)row * C, out += (size_t)row * C;
    if (statep)
        state = statep[row];
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    const float *wc = w + (size_t)c * K;
    float s = 0;
    if (K <= CONV_KR) { /* taps and state in registers, every load at once (the loop below: one after another) */
        float wv[CONV_KR], sv[CONV_KR];
#pragma unroll
        for (int i = 0; i < CONV_KR; i++) {
            wv[i] = i < K ? wc[i] : 0.0f;
            sv[i] = i < K - 1 ? state[(size_t)i * C + c] : 0.0f;
        }
        const float x = in[c];
#pragma unroll
        for (int i = 0; i < CONV_KR; i++) /* the loop's sums in its order */
            if (i < K - 1)
                s += wv[i] * sv[i];
            else if (i == K - 1)
                s += wv[i] * x;
#pragma unroll
        for (int i = 0; i < CONV_KR - 1; i++)
            if (i + 1 < K - 1)
                state[(size_t)i * C + c] = sv[i + 1];
            else if (i + 1 == K - 1)
                state[(size_t)i * C + c] = x;
        out[c] = silu(s);
        TRACE_END(LILAC_TK_CONV_STEP);
        return;
    }
    for (int i = 0; i < K - 1; i++)
        s += wc[i] * state[(size_t)i * C + c];
    s += wc[K - 1] * in[c];
    for (int i = 0; i + 1 < K - 1; i++)
        state[(size_t)i * C + c] = state[(size_t)(i + 1) * C + c];
    if (K > 1)
        state[(size_t)(K - 2) * C + c] = in[c];
    out[c] = silu(s);
    TRACE_END(LILAC_TK_CONV_STEP); // thread 0 (c = blockIdx.x * blockDim.x < C) does not return early
}

extern "C" void lilac_cuda_conv_step(const float *in, float *state, const float *w, float *out, int C, int K,
                                     lilac_cuda_stream *s)
{
    launch_pdl(PDL_CONV, k_conv_step, dim3((C + 255) / 256), dim3(256), 0, CS(s), in, state, w, out, C, K,
               (float *const *)NULL);
}

extern "C" void lilac_cuda_conv_step_rows(const float *in, float *const *statep, const float *w, float *out, int C,
                                          int K, int n, lilac_cuda_stream *s)
{
    k_conv_step<<<dim3((C + 255) / 256, n), 256, 0, CS(s)>>>(in, NULL, w, out, C, K, statep);
}

// The split of the delta rule over a block (k_dn_fused): thread (part, c)
// holds column c of rows part, part + DN_P, ... of a value head's state.
#define DN_P 8
#define DN_ROWS 32 /* dk / DN_P at most */
// Whether k_dn_fused takes the heads' shape.
static bool dn_fused_takes(int dk, int dv) { return dv * DN_P <= 1024 && dv % 32 == 0 && dk <= DN_P * DN_ROWS; }

// Per row of dv (a value head, of a token): RMSNorm(o) * w * silu(z).
__global__ void k_gated_norm(float *o, const float *z, const float *w, int dv, float eps)
{
    float *x = o + (size_t)blockIdx.x * dv;
    dev_rmsnorm(x, w, x, dv, eps, z + (size_t)blockIdx.x * dv);
}

// k_gated_norm a warp a row (pf_warp_norm), 8 rows a block.
template <int NQ>
__global__ void k_gated_norm_warp(float *o, const float *z, const float *w, int rows, int dv, float eps)
{
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row < rows)
        dev_norm_row_warp<NQ, true>(o + (size_t)row * dv, w, z + (size_t)row * dv, dv, eps, 1.0f);
}

extern "C" void lilac_cuda_gated_norm(float *o, const float *z, const float *w, int rows, int dv, float eps,
                                      lilac_cuda_stream *s)
{
    if (rows < 1)
        return;
    if (pf_warp_norm() && dv % 4 == 0 && dv <= 512 && ((uintptr_t)o & 15) == 0 && ((uintptr_t)z & 15) == 0 &&
        ((uintptr_t)w & 15) == 0) {
        const unsigned grid = (unsigned)((rows + 7) / 8);
        norm_row_warp_nq(dv, [&](auto nq) {
            k_gated_norm_warp<decltype(nq)::value><<<grid, 256, 0, CS(s)>>>(o, z, w, rows, dv, eps);
        });
        return;
    }
    k_gated_norm<<<rows, 128, 0, CS(s)>>>(o, z, w, dv, eps);
}


// ---- mixture of experts ----

__global__ void k_swiglu(float *g, const float *u, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        g[i] = glu(g[i], u[i]);
}

extern "C" void lilac_cuda_swiglu(float *g, const float *u, int n, lilac_cuda_stream *s)
{
    k_swiglu<<<(n + 255) / 256, 256, 0, CS(s)>>>(g, u, n);
}

extern "C" int lilac_cuda_copy(void *dst, const void *src, size_t bytes, lilac_cuda_stream *s)
{
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, CS(s)) == cudaSuccess ? 0 : -1;
}

extern "C" int lilac_cuda_upload_async(void *dst, const void *src, size_t bytes, lilac_cuda_stream *s)
{
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, CS(s)) == cudaSuccess ? 0 : -1;
}

extern "C" int lilac_cuda_last_error(char *msg, size_t cap)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return 0;
    if (msg && cap)
        snprintf(msg, cap, "CUDA: %s", cudaGetErrorString(e));
    return -1;
}

// ---- the fused one-token step (decoder_cuda.c's step): fewer, fuller kernels ----

// Streams and events: the step forks independent products onto a second
// stream and joins them back, which a captured graph keeps as branches.
extern "C" int lilac_cuda_event_new(void **ev)
{
    cudaEvent_t e = NULL;
    *ev = NULL;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    *ev = e;
    return 0;
}

extern "C" void lilac_cuda_event_free(void *ev)
{
    if (ev)
        cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" void lilac_cuda_fork(lilac_cuda_stream *from, lilac_cuda_stream *to, void *ev)
{
    cudaEventRecord((cudaEvent_t)ev, CS(from));
    cudaStreamWaitEvent(CS(to), (cudaEvent_t)ev, 0);
}

// The router's softmax, top-k and weights (the CPU's choice and order) by one
// block (dev_route; E <= 512, k <= 32). With
// up_offset > 0, idx[k + i] = idx[i] + up_offset as well (the up matrices
// stored after the gate ones: one product over 2k slots). With gate_inp,
// w[k] = sigmoid(gate_inp . xn) (the shared expert's gate).
// Batched (lilac_cuda_route_rows): block b routes row b, its logits (and gate logit), idx, w l_row, i_row and
// w_row elements on, its xn n_embd; the same kernel as one token's (the same bits).
__global__ void k_route(const float *logits, int E, int k, int norm, int32_t *idx, float *w, int up_offset,
                        const float *gate_inp, const float *xn, int n_embd, const float *gate_logit,
                        long long l_row, long long i_row, long long w_row)
{
    TRACE_START(LILAC_TK_ROUTE);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    const long long b = blockIdx.x;
    logits += b * l_row, idx += b * i_row, w += b * w_row;
    if (xn)
        xn += b * n_embd;
    if (gate_logit)
        gate_logit += b * l_row;
    dev_route(logits, E, k, norm, idx, w, up_offset, gate_inp, xn, n_embd, gate_inp ? nullptr : gate_logit);
    TRACE_END(LILAC_TK_ROUTE);
}

/* Tried and removed (session 8): the route kernel following the routing with bulk L2 prefetches
 * (cp.async.bulk.prefetch.L2, 64 KiB pieces) of the chosen experts and the next layer's dense weights, for the
 * latency-bound products after it: tg128 108 against 284 tok/s (H200, 2026-11-30). */

extern "C" int lilac_cuda_route(const float *logits, int E, int k, int norm, int32_t *idx, float *w, int up_offset,
                                const float *gate_inp, const float *xn, int n_embd, const float *gate_logit,
                                lilac_cuda_stream *s)
{
    if (!route_takes(E, k))
        return -1;
    launch_pdl(PDL_ROUTE, k_route, dim3(1), dim3(ROUTE_NT), 0, CS(s), logits, E, k, norm, idx, w, up_offset, gate_inp, xn,
               n_embd, gate_logit, 0LL, 0LL, 0LL);
    return 0;
}

extern "C" int lilac_cuda_route_rows(const float *logits, int E, int k, int norm, int32_t *idx, float *w,
                                     int up_offset, const float *gate_inp, const float *xn, int n_embd,
                                     const float *gate_logit, int n, long long l_row, long long i_row,
                                     long long w_row, lilac_cuda_stream *s)
{
    if (!route_takes(E, k) || n < 1 || l_row < 0 || i_row < 0 || w_row < 0)
        return -1;
    k_route<<<dim3((unsigned)n), dim3(ROUTE_NT), 0, CS(s)>>>(logits, E, k, norm, idx, w, up_offset, gate_inp, xn,
                                                            n_embd, gate_logit, l_row, i_row, w_row);
    return 0;
}

// The post-attention norm and a float32 router in one kernel (one kernel
// boundary less on the step's critical path): dev_norm_router over the grid,
// each warp's first NR_PF float4 of its router row in flight before the kernel
// that writes x has finished. With r.idx set, the last block to finish routes
// (dev_route): the route kernel's launch, and its wait, off the chain.
static_assert(32 * NR_WARPS == ROUTE_NT, "k_norm_router's last block routes (dev_route)");
__global__ void __launch_bounds__(32 * NR_WARPS) k_norm_router(const float *x, const float *norm_w, float *xn,
                                                               const float *W, long long row_floats, int n_exp,
                                                               float *logits, int n, float eps,
                                                               const lilac_cuda_route_args r, long long l_row)
{
    TRACE_START(LILAC_TK_NORM_ROUTER);
    griddep_launch_dependents();
    { /* batched (lilac_cuda_norm_router_rows): blockIdx.y a row, the same kernel as one token's */
        const long long b = blockIdx.y;
        x += b * n, xn += b * n, logits += b * l_row;
    }
    dev_norm_router<true>(x, norm_w, xn, W, row_floats, n_exp, logits, n, eps, blockIdx.x, gridDim.x);
    if (r.idx && dev_last_block(r.count)) /* the whole block: dev_route's block reductions */
        dev_route(logits, r.E, r.k, r.norm, r.idx, r.w, r.up_offset, nullptr, nullptr, 0,
                  r.shared_row ? logits + r.E : nullptr);
    TRACE_END(LILAC_TK_NORM_ROUTER);
}

// Whether k_norm_router takes the shape: x of n floats (a multiple of 4, in shared memory), n_exp rows of
// row_floats floats (a multiple of 4) from a 16-aligned W.
static bool norm_router_takes(int n, long long row_floats, const float *W, int n_exp)
{
    return n >= 4 && n % 4 == 0 && row_floats % 4 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 && n_exp >= 1 &&
           (size_t)n * sizeof(float) <= 48 * 1024;
}

extern "C" int lilac_cuda_norm_router(const float *x, const float *norm_w, float *xn, const float *W,
                                      long long row_floats, int n_exp, float *logits, int n, float eps,
                                      const lilac_cuda_route_args *route, lilac_cuda_stream *s)
{
    if (!norm_router_takes(n, row_floats, W, n_exp))
        return -1;
    lilac_cuda_route_args r = {};
    if (route) {
        r = *route;
        if (!route_takes(r.E, r.k) || !r.idx || !r.w || !r.count || n_exp != r.E + (r.shared_row ? 1 : 0))
            return -1;
    }
    launch_dependent(k_norm_router, dim3((unsigned)((n_exp + NR_WARPS - 1) / NR_WARPS)), dim3(32 * NR_WARPS),
                     (size_t)n * sizeof(float), CS(s), x, norm_w, xn, W, row_floats, n_exp, logits, n, eps, r, 0LL);
    return 0;
}

extern "C" int lilac_cuda_norm_router_rows(const float *x, const float *norm_w, float *xn, const float *W,
                                           long long row_floats, int n_exp, float *logits, long long l_row, int n,
                                           float eps, int rows, lilac_cuda_stream *s)
{
    if (!norm_router_takes(n, row_floats, W, n_exp) || rows < 1 || rows > 65535 || l_row < n_exp)
        return -1;
    const lilac_cuda_route_args r = {};
    k_norm_router<<<dim3((unsigned)((n_exp + NR_WARPS - 1) / NR_WARPS), (unsigned)rows), dim3(32 * NR_WARPS),
                    (size_t)n * sizeof(float), CS(s)>>>(x, norm_w, xn, W, row_floats, n_exp, logits, n, eps, r, l_row);
    return 0;
}

// Row b of a batched expert sum (lilac_cuda_moe_sum_norm_rows, _grid_rows: the one-token kernels launched for
// every row): x, sh and xn E floats on, ex ex_row, w and gsh w_row.
static __device__ __forceinline__ void sum_row(long long b, int E, long long ex_row, long long w_row, float *&x,
                                               const float *&ex, const float *&w, const float *&sh, const float *&gsh,
                                               float *&xn)
{
    x += b * E, ex += b * ex_row, w += b * w_row;
    if (sh)
        sh += b * E;
    if (gsh)
        gsh += b * w_row;
    if (xn)
        xn += b * E;
}

// k_moe_sum_norm's threads: 256, DEV_NR values each for E <= 2048, every load of an expert's group in flight at
// once; 1024 over that.
static int sum_threads(int E) { return E <= DEV_NR * 256 ? 256 : 1024; }

// 1024 threads for E over 2048: at most 64 registers (its loads in flight took 80, too many to launch)
__global__ void __launch_bounds__(1024)
    k_moe_sum_norm(float *x, const float *ex, const float *w, int k, const float *sh, const float *gsh,
                   const float *norm_w, float *xn, int E, float eps, long long ex_row, long long w_row)
{
    TRACE_START(LILAC_TK_MOE_SUM_NORM);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    sum_row(blockIdx.x, E, ex_row, w_row, x, ex, w, sh, gsh, xn); /* batched: block b a row */
    dev_moe_sum_norm(x, ex, w, k, sh, gsh, norm_w, xn, E, eps);
    TRACE_END(LILAC_TK_MOE_SUM_NORM);
}

// lilac_cuda_moe_sum_norm over a grid of SNG_T-value blocks: a one-block kernel spends most of its time
// waiting on its own chain of loads and reductions (17k cycles at 1.5 GHz, ncu). Each block sums its values
// (dev_moe_sum_norm's order: the experts by index, the shared one, then x) and its part of the squares; the
// last block to finish adds the parts in block order and writes xn.
#define SNG_T LILAC_CUDA_SUM_GRID_T
#define SNG_MAXB LILAC_CUDA_SUM_GRID_MAXB /* cuda_sizes.h: the plan sizes the part buffer by it */
__global__ void __launch_bounds__(SNG_T) k_moe_sum_norm_grid(float *x, const float *ex, const float *w, int k,
                                                             const float *sh, const float *gsh,
                                                             const float *norm_w, float *xn, int E, float eps,
                                                             float *part, unsigned *count, long long ex_row,
                                                             long long w_row)
{
    TRACE_START(LILAC_TK_MOE_SUM_NORM);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    sum_row(blockIdx.y, E, ex_row, w_row, x, ex, w, sh, gsh, xn); /* batched: blockIdx.y a row */
    part += blockIdx.y * LILAC_CUDA_PART_MAXB, count += blockIdx.y;
    const int e = blockIdx.x * SNG_T + threadIdx.x;
    float o = 0.0f;
    if (e < E) {
        const float xv = __ldcg(x + e), sv = sh ? __ldcg(sh + e) : 0.0f, g = sh ? __ldcg(gsh) : 0.0f;
        constexpr int G = 8; /* experts' loads in flight at once */
        for (int i0 = 0; i0 < k; i0 += G) {
            float v[G], wi[G];
#pragma unroll
            for (int ii = 0; ii < G; ii++) {
                v[ii] = i0 + ii < k ? __ldcg(ex + (size_t)(i0 + ii) * E + e) : 0.0f;
                wi[ii] = i0 + ii < k ? __ldcg(w + i0 + ii) : 0.0f;
            }
#pragma unroll
            for (int ii = 0; ii < G; ii++)
                if (i0 + ii < k) /* explicit FMAs: lilac_cuda_moe_down_sum's bits (cuda_quant.cu's kq_fold) */
                    o = __fmaf_rn(wi[ii], v[ii], o);
        }
        if (sh)
            o = __fmaf_rn(g, sv, o);
        o = __fadd_rn(o, xv);
        x[e] = o;
    }
    if (!norm_w) {
        TRACE_END(LILAC_TK_MOE_SUM_NORM);
        return;
    }
    const float ss = block_sum(e < E ? __fmul_rn(o, o) : 0.0f);
    if (threadIdx.x == 0)
        part[blockIdx.x] = ss;
    if (dev_last_block(count)) /* the parts' loads issued at once, and with x's (dev_scale_store_with): this tail
                                    was ~16 L2 round trips in a row, a part, then a value */
        dev_scale_store_with(x, norm_w, xn, E, [&] {
            float pv[SNG_MAXB];
#pragma unroll
            for (int b = 0; b < SNG_MAXB; b++)
                pv[b] = b < (int)gridDim.x ? __ldcg(part + b) : 0.0f;
            float t = 0;
#pragma unroll
            for (int b = 0; b < SNG_MAXB; b++) /* the parts in block order: the same sum every run */
                if (b < (int)gridDim.x)
                    t += pv[b];
            return rsqrtf(t / E + eps);
        });
    TRACE_END(LILAC_TK_MOE_SUM_NORM);
}

extern "C" int lilac_cuda_moe_sum_norm_grid(float *x, const float *ex, const float *w, int k, const float *sh,
                                            const float *gsh, const float *norm_w, float *xn, int E, float eps,
                                            float *part, unsigned *count, lilac_cuda_stream *s)
{
    const int nb = (E + SNG_T - 1) / SNG_T;
    if (E < 1 || nb > SNG_MAXB || k < 0 || !part || !count)
        return -1;
    launch_pdl(PDL_SUM, k_moe_sum_norm_grid, dim3((unsigned)nb), dim3(SNG_T), 0, CS(s), x, ex, w, k, sh, gsh, norm_w,
               xn, E, eps, part, count, 0LL, 0LL);
    return 0;
}

extern "C" int lilac_cuda_moe_sum_norm_grid_rows(float *x, const float *ex, const float *w, int k, const float *sh,
                                                 const float *gsh, const float *norm_w, float *xn, int E, float eps,
                                                 float *part, unsigned *count, int n, long long ex_row,
                                                 long long w_row, lilac_cuda_stream *s)
{
    const int nb = (E + SNG_T - 1) / SNG_T;
    if (E < 1 || nb > SNG_MAXB || k < 0 || !part || !count || n < 1 || n > 65535)
        return -1;
    k_moe_sum_norm_grid<<<dim3((unsigned)nb, (unsigned)n), dim3(SNG_T), 0, CS(s)>>>(x, ex, w, k, sh, gsh, norm_w, xn,
                                                                                   E, eps, part, count, ex_row, w_row);
    return 0;
}

extern "C" void lilac_cuda_moe_sum_norm(float *x, const float *ex, const float *w, int k, const float *sh,
                                        const float *gsh, const float *norm_w, float *xn, int E, float eps,
                                        lilac_cuda_stream *s)
{
    launch_pdl(PDL_SUM, k_moe_sum_norm, dim3(1), dim3(sum_threads(E)), 0, CS(s), x, ex, w, k, sh, gsh, norm_w, xn, E,
               eps, 0LL, 0LL);
}

extern "C" void lilac_cuda_moe_sum_norm_rows(float *x, const float *ex, const float *w, int k, const float *sh,
                                             const float *gsh, const float *norm_w, float *xn, int E, float eps,
                                             int n, long long ex_row, long long w_row, lilac_cuda_stream *s)
{
    k_moe_sum_norm<<<dim3((unsigned)n), dim3(sum_threads(E)), 0, CS(s)>>>(x, ex, w, k, sh, gsh, norm_w, xn, E, eps,
                                                                         ex_row, w_row);
}

// Blocks [0, nh): q head b, RMSNorm and rotary; blocks [nh, nh + nkv): k
// head b - nh the same, then its K and V rows stored into the caches.
// Batched: blockIdx.y a row, its q, k, v tok floats on, its caches Kp, Vp.
__global__ void k_norm_rope_kv(float *q, const float *q_norm, int q_step, int nh, float *k, const float *v,
                               const float *k_norm, float *K, float *V, int nkv, int hd, int rot, const int *pos_dev,
                               float theta, float eps, long long q_tok, long long kv_tok, float *const *Kp,
                               float *const *Vp)
{
    TRACE_START(LILAC_TK_NORM_ROPE_KV);
    griddep_launch_dependents();
    griddep_wait(); // launched dependent (launch_pdl): everything below reads what came before
    const int row = blockIdx.y, b = blockIdx.x, pos = pos_dev[row];
    q += row * q_tok, k += row * kv_tok, v += row * kv_tok;
    if (Kp)
        K = Kp[row], V = Vp[row];
    const bool isq = b < nh;
    float *x = isq ? q + (size_t)b * q_step : k + (size_t)(b - nh) * hd;
    dev_norm_rope(x, isq ? q_norm : k_norm, hd, rot, pos, theta, eps);
    if (isq) {
        TRACE_END(LILAC_TK_NORM_ROPE_KV);
        return;
    }
    __syncthreads();
    const size_t at = (size_t)pos * nkv * hd + (size_t)(b - nh) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        K[at + i] = x[i];
        V[at + i] = v[(size_t)(b - nh) * hd + i];
    }
    TRACE_END(LILAC_TK_NORM_ROPE_KV);
}

extern "C" void lilac_cuda_norm_rope_kv(float *q, const float *q_norm, int q_step, int nh, float *k, const float *v,
                                        const float *k_norm, float *K, float *V, int nkv, int hd, int rot,
                                        const int *pos, float theta, float eps, lilac_cuda_stream *s)
{
    launch_pdl(PDL_ROPE, k_norm_rope_kv, dim3(nh + nkv), dim3(128), 0, CS(s), q, q_norm, q_step, nh, k, v, k_norm, K,
               V, nkv, hd, rot, pos, theta, eps, 0LL, 0LL, (float *const *)NULL, (float *const *)NULL);
}

extern "C" void lilac_cuda_norm_rope_kv_rows(float *q, const float *q_norm, int q_step, long long q_tok, int nh,
                                             float *k, const float *v, long long kv_tok, const float *k_norm,
                                             float *const *Kp, float *const *Vp, int nkv, int hd, int rot,
                                             const int *pos, float theta, float eps, int n, lilac_cuda_stream *s)
{
    k_norm_rope_kv<<<dim3(nh + nkv, n), 128, 0, CS(s)>>>(q, q_norm, q_step, nh, k, v, k_norm, NULL, NULL, nkv, hd, rot,
                                                         pos, theta, eps, q_tok, kv_tok, Kp, Vp);
}

// q and k (dk each, shared memory) L2-normalized in place, q also by
// 1/sqrt(dk): warps 0 and 1 take the sums. Called by the whole block; what
// the block wrote before (q, k, the gates) is ordered by its first barrier.
static __device__ void dn_norm_qk(float *qs, float *ks, int dk)
{
    __shared__ float nrm[2];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    __syncthreads();
    if (wid < 2) {
        const float *x = wid == 0 ? qs : ks;
        float ss = 0;
        for (int i = lane; i < dk; i += 32)
            ss += x[i] * x[i];
        ss = warp_sum(ss);
        if (lane == 0)
            nrm[wid] = rsqrtf(ss + 1e-6f) * (wid == 0 ? rsqrtf((float)dk) : 1.0f);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        qs[i] *= nrm[0];
        ks[i] *= nrm[1];
    }
    __syncthreads();
}

// The log-decay g = ssm_a softplus(a + dt) and beta = sigmoid(b) of value head j.
static __device__ void dn_gates(const float *a, const float *b, const float *ssm_a, const float *ssm_dt, int j,
                                float *g_beta)
{
    float x = a[j] + ssm_dt[j];
    float sp = x > 20.0f ? x : log1pf(expf(x));
    g_beta[0] = ssm_a[j] * sp;
    g_beta[1] = sigmoidf_(b[j]);
}

// One value head's delta rule and gated norm, by the P * dv threads that hold
// it: thread (part, c) has column c of rows part, part + P, ... of the state
// S in sr (loaded, not yet decayed). S *= exp(g); S += k (beta (v - S^T k))^T;
// then o = RMSNorm(S^T q) * nw * silu(zc) into o_h[c] (nw, zc: column c of
// the norm's weights and of z, loaded by the caller with v). rd holds P * dv
// floats, opart dv / 32 (the head's own). Called by the whole block.
// f(n, i) over a thread's rows i = part, part + P, ... below dk (n: its index in sr). NR > 0: dk = NR * P
// exactly, the loop unrolled, so that sr stays in registers (NR 0: a loop to dk, sr on the stack).
template <int NR, class F> static __device__ __forceinline__ void dn_rows(int part, int P, int dk, F &&f)
{
    if constexpr (NR > 0) {
#pragma unroll
        for (int n = 0; n < NR; n++)
            f(n, part + n * P);
    } else {
        int n = 0;
        for (int i = part; i < dk; i += P, n++)
            f(n, i);
    }
}

// NR: dn_rows's; the same sums either way.
template <int NR>
static __device__ void dn_head(float (&sr)[NR > 0 ? NR : DN_ROWS], float *S, const float *qs, const float *ks,
                               float v, float g, float beta, int part, int c, int P, int dk, int dv, float *rd,
                               float *opart, float nw, float zc, float eps, float *o_h)
{
    float decay = expf(g), kv = 0;
    dn_rows<NR>(part, P, dk, [&](int n, int i) {
        sr[n] *= decay;
        kv += sr[n] * ks[i];
    });
    rd[part * dv + c] = kv;
    __syncthreads();
    kv = 0;
    for (int q = 0; q < P; q++)
        kv += rd[q * dv + c];
    float delta = (v - kv) * beta, o = 0;
    dn_rows<NR>(part, P, dk, [&](int n, int i) {
        sr[n] += ks[i] * delta;
        S[(size_t)i * dv + c] = sr[n];
        o += sr[n] * qs[i];
    });
    __syncthreads();
    rd[part * dv + c] = o;
    __syncthreads();
    if (part == 0) { // the sum over parts, then the norm over the dv columns (part 0: whole warps)
        o = 0;
        for (int q = 0; q < P; q++)
            o += rd[q * dv + c];
        float ss = warp_sum(o * o);
        if ((threadIdx.x & 31) == 0)
            opart[c / 32] = ss;
    }
    __syncthreads();
    if (part == 0) {
        float ss = 0;
        for (int q = 0; q < dv / 32; q++)
            ss += opart[q];
        const float r = rsqrtf(ss / dv + eps);
        o_h[c] = o * r * nw * silu(zc);
    }
}

// The DeltaNet step after the conv in one kernel, per value head j (block):
// q and k of its key head L2-normalized (not written back: two value heads
// share a key head), its gates, the delta
// rule (thread (part, c) holds column c of rows part, part + DN_P, ...), and
// the gated RMSNorm of its output (k_gated_norm).
// Batched: blockIdx.y a row with its state Sp[row]; conv C floats on, a and
// b nv, z and o nv * dv.
// Measured and removed (session 31, LILAC_CUDA_DN_LATE=1, code at 8f5a43b): the kernel after it (the output
// product, which copies its rows before its wait) let launch once q and k are normed, not at the start: tg128
// 389.0/386.0/389.6 against 386.2/388.4/389.2 (H200, alternated in one call).
// Measured and removed (session 32, LILAC_CUDA_DN_CONV=1, code at 1a92678): the conv before it inside this kernel,
// the two value heads of a key head one cluster of two blocks (each rank convolving half the key head's q and k
// channels, reading the other half from its peer's shared memory after a cluster barrier): the same bits, tg128
// 391.9/386.9/388.6 (390.1/389.6/386.3 launched dependent on the qkv product) against 398.7/396.1/397.8, at depth
// 8192 355.5 against 362.4 (H200, alternated in one call): this kernel's state loads then wait for the product's
// end rather than run under the conv kernel, and the cluster barrier sits on the chain.
// Measured and removed (LILAC_CUDA_DN_AB=1): warp 2 computing the head's alpha and beta dots from xn before
// the wait, their product off the second branch: tg128 208.9 against 319.2/320.3 tok/s (H200, 2026-11-30),
// one warp doing 64 dots of 2048 columns in series.
// NR: dn_rows's (16: dk = 16 DN_P, the state's rows in registers; 0: any dk).
template <int NR>
__global__ void k_dn_fused(float *S_all, const float *conv, const float *a, const float *b, const float *ssm_a,
                           const float *ssm_dt, const float *z, const float *norm_w, float *o_all, int nk, int nv,
                           int dk, int dv, int tiled, float eps, float *const *Sp)
{
    TRACE_START(LILAC_TK_DN_FUSED);
    {
        const int row = blockIdx.y;
        conv += (size_t)row * (2 * nk * dk + nv * dv), a += (size_t)row * nv, b += (size_t)row * nv;
        z += (size_t)row * nv * dv, o_all += (size_t)row * nv * dv;
        if (Sp)
            S_all = Sp[row];
    }
    const int j = blockIdx.x, c = threadIdx.x % dv, part = threadIdx.x / dv;
    const int kh = tiled ? j % nk : j / (nv / nk);
    extern __shared__ float sh[]; // q[dk], k[dk], red[DN_P][dv]
    float *qs = sh, *ks = sh + dk, *red = sh + 2 * dk;
    __shared__ float gate[2], opart[32];
    griddep_launch_dependents();
    // the state is this kernel's alone: in flight before the conv that feeds q, k, v has finished
    float *S = S_all + (size_t)j * dk * dv;
    float sr[NR > 0 ? NR : DN_ROWS];
    dn_rows<NR>(part, DN_P, dk, [&](int n, int i) { sr[n] = S[(size_t)i * dv + c]; });
    const float nw = norm_w[c];
    griddep_wait();
    TRACE_WAITED(LILAC_TK_DN_FUSED);
    /* v and z with q and k: one L2 round trip (loaded where they are used, they were two more after the norms) */
    const float v = conv[(size_t)2 * nk * dk + (size_t)j * dv + c], zc = z[(size_t)j * dv + c];
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        qs[i] = conv[(size_t)kh * dk + i];
        ks[i] = conv[(size_t)(nk + kh) * dk + i];
    }
    if (threadIdx.x == 64) // warp 2: warps 0 and 1 take the norms
        dn_gates(a, b, ssm_a, ssm_dt, j, gate);
    dn_norm_qk(qs, ks, dk);
    dn_head<NR>(sr, S, qs, ks, v, gate[0], gate[1], part, c, DN_P, dk, dv, red, opart, nw, zc, eps,
                o_all + (size_t)j * dv);
    TRACE_END(LILAC_TK_DN_FUSED);
}

/* LILAC_CUDA_DN_REG (on; =0 the loop to dk): where dk = 16 DN_P (the target model's 128), the kernel with the
 * state's 16 rows a thread in registers, its loops unrolled (a loop to dk keeps them on the stack: a local load and
 * store a row in each of dn_head's two passes); the same sums, the same bits (the 35B file's decode logits
 * byte-equal). tg128 414.7/415.3/415.0 against 358.5/358.3/357.8, depth 8192 375.9 against 330.9 (H200, alternated
 * in one call, session 32; the other form there looped to DN_ROWS with a break at dk, now this loop again, which
 * ran 395.8-398.7 that day on three other machines). 64 registers a thread at 1024 threads: the whole register
 * file, no spill (ptxas -v). Read once. */
static std::atomic<int> g_dn_reg{-1};
typedef void (*dn_fused_fn)(float *, const float *, const float *, const float *, const float *, const float *,
                            const float *, const float *, float *, int, int, int, int, int, float, float *const *);
/* (k_dn_fused<16> also where its registers allow the block: 64 a thread at 1,024 threads, which another compiler
 * might exceed; its attributes say, read once.) */
static dn_fused_fn dn_fused_kernel(int dk, int threads)
{
    static std::atomic<int> max_threads{-1};
    int mt = max_threads.load(std::memory_order_relaxed);
    if (mt < 0) {
        cudaFuncAttributes fa;
        mt = cudaFuncGetAttributes(&fa, k_dn_fused<16>) == cudaSuccess ? fa.maxThreadsPerBlock : 0;
        (void)cudaGetLastError();
        max_threads.store(mt, std::memory_order_relaxed);
    }
    return dk == 16 * DN_P && threads <= mt && env_switch_once(g_dn_reg, "LILAC_CUDA_DN_REG", true) ? k_dn_fused<16>
                                                                                                  : k_dn_fused<0>;
}

extern "C" int lilac_cuda_deltanet_fused(const float *conv_out, const float *a, const float *b, const float *ssm_a,
                                         const float *ssm_dt, float *S, float *o, const float *z, const float *norm_w,
                                         int nk, int nv, int dk, int dv, int tiled, float eps, lilac_cuda_stream *s)
{
    if (!dn_fused_takes(dk, dv))
        return -1;
    launch_dependent(dn_fused_kernel(dk, dv * DN_P), dim3(nv), dim3(dv * DN_P),
                     (size_t)(2 * dk + DN_P * dv) * sizeof(float), CS(s), S, conv_out, a, b, ssm_a, ssm_dt, z,
                     norm_w, o, nk, nv, dk, dv, tiled, eps, (float *const *)NULL);
    return 0;
}

extern "C" int lilac_cuda_deltanet_rows(const float *conv_out, const float *a, const float *b, const float *ssm_a,
                                        const float *ssm_dt, float *const *Sp, float *o, const float *z,
                                        const float *norm_w, int nk, int nv, int dk, int dv, int tiled, float eps,
                                        int n, lilac_cuda_stream *s)
{
    if (!dn_fused_takes(dk, dv) || !Sp || n < 1 || n > 65535)
        return -1;
    dn_fused_kernel(dk, dv * DN_P)<<<dim3(nv, n), dv * DN_P, (size_t)(2 * dk + DN_P * dv) * sizeof(float), CS(s)>>>(
        (float *)NULL, conv_out, a, b, ssm_a, ssm_dt, z, norm_w, o, nk, nv, dk, dv, tiled, eps, Sp);
    return 0;
}
