// cuda_prefill: the kernels of the batched forward pass (prefill), where the
// n tokens of a chunk, at positions pos0 .. pos0 + n - 1 of one sequence, go
// through a layer together. The math is cuda_ops.cu's one-token kernels',
// row by row, with the same reductions where they decide a result (the
// block sums of the norms, the top-k's probabilities), so that prefill and
// the token path agree to float32 rounding. Activations are [n][width]
// row-major. No float atomics: every result is deterministic.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_sizes.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_tc.cuh"
#include "util/env.h"

#define CS(s) ((cudaStream_t)(s))

namespace {

// warp_sum, block_sum, silu, ... are cuda_dev.cuh's (the same reductions as
// the one-token kernels', so the same sums).

// ---- attention ----

// Head blockIdx.x of token blockIdx.y: RMSNorm over hd with w, then NeoX
// rotary on the first rot dims at position pos0 + token (as k_norm_rope_kv).
__global__ void k_pf_norm_rope(float *v, const float *w, int step, long long tok_stride, int hd, int rot, int pos0,
                               float theta, float eps)
{
    float *x = v + (long long)blockIdx.y * tok_stride + (long long)blockIdx.x * step;
    dev_norm_rope(x, w, hd, rot, pos0 + (int)blockIdx.y, theta, eps);
}

// Causal attention of a tile of PA_BQ queries (tokens t0 ..) of head h over
// key tiles of PA_BK, with an online softmax (flash attention): per tile the
// scores, the running max m and sum l per query, and o = o * exp(m_old -
// m_new) + P V. Query t sees keys 0 .. pos0 + t. Thread tid holds the
// output elements tid + e * PA_THREADS (e < NE) of the tile's [PA_BQ][hd].
#define PA_BQ 16
#define PA_BK 32 /* a lane a key in the softmax */
#define PA_THREADS 256
#define PA_MAX_HD 512

template <int NE>
__global__ void __launch_bounds__(PA_THREADS)
    k_pf_attention(const float *q, int q_step, long long q_tok, const float *K, const float *V, int kvw, int hd,
                   int group, int pos0, int n, float *out, long long out_tok, int gated)
{
    extern __shared__ float4 pa_smem4[];
    float *const Qs = reinterpret_cast<float *>(pa_smem4); // [PA_BQ][HS]
    const int HS = hd + 4; // rows padded: float4-aligned, adjacent rows in other banks
    float *const Ks = Qs + PA_BQ * HS;     // [PA_BK][HS]
    float *const Vs = Ks + PA_BK * HS;     // [PA_BK][hd]
    float *const Ps = Vs + PA_BK * hd;     // [PA_BQ][PA_BK] scores, then probabilities
    float *const Ms = Ps + PA_BQ * PA_BK;  // [PA_BQ] running max
    float *const Ls = Ms + PA_BQ;          // [PA_BQ] running sum
    float *const As = Ls + PA_BQ;          // [PA_BQ] this tile's rescale of o
    const int h = blockIdx.y, kvh = h / group, t0 = blockIdx.x * PA_BQ;
    const int nq = min(PA_BQ, n - t0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float scale = rsqrtf((float)hd);
    for (int i = tid; i < PA_BQ * hd; i += PA_THREADS) {
        const int r = i / hd, d = i - r * hd;
        Qs[r * HS + d] = r < nq ? q[(long long)(t0 + r) * q_tok + (long long)h * q_step + d] : 0.f;
    }
    if (tid < PA_BQ)
        Ms[tid] = -INFINITY, Ls[tid] = 0.f;
    float o[NE];
#pragma unroll
    for (int e = 0; e < NE; e++)
        o[e] = 0.f;
    // The last query's keys; every query sees key 0, so after the first tile every max is finite
    // (rows past n have zero queries and see key 0 too).
    const int n_keys = pos0 + t0 + nq;
    __syncthreads();
    for (int k0 = 0; k0 < n_keys; k0 += PA_BK) {
        const int nk = min(PA_BK, n_keys - k0);
        for (int i = tid; i < PA_BK * hd; i += PA_THREADS) {
            const int r = i / hd, d = i - r * hd;
            const long long at = (long long)(k0 + r) * kvw + (long long)kvh * hd + d;
            Ks[r * HS + d] = r < nk ? K[at] : 0.f;
            Vs[r * hd + d] = r < nk ? V[at] : 0.f;
        }
        __syncthreads();
        for (int i = tid; i < PA_BQ * PA_BK; i += PA_THREADS) { // a warp a query row, a lane a key
            const int r = i / PA_BK, c = i - r * PA_BK;
            float s = -INFINITY;
            if (c < nk && k0 + c <= pos0 + t0 + r) {
                const float4 *a = reinterpret_cast<const float4 *>(Qs + r * HS);
                const float4 *b = reinterpret_cast<const float4 *>(Ks + c * HS);
                float d = 0.f;
                for (int j = 0; j < hd / 4; j++) {
                    const float4 x = a[j], y = b[j];
                    d += x.x * y.x;
                    d += x.y * y.y;
                    d += x.z * y.z;
                    d += x.w * y.w;
                }
                s = d * scale;
            }
            Ps[r * PA_BK + c] = s;
        }
        __syncthreads();
        for (int r = warp; r < PA_BQ; r += PA_THREADS / 32) {
            const float s = Ps[r * PA_BK + lane];
            const float m_old = Ms[r], m_new = fmaxf(m_old, warp_max(s));
            const float p = s == -INFINITY ? 0.f : expf(s - m_new);
            const float l = warp_sum(p);
            Ps[r * PA_BK + lane] = p;
            __syncwarp(); // every lane has read Ms[r]
            if (lane == 0) {
                const float a = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
                As[r] = a;
                Ms[r] = m_new;
                Ls[r] = Ls[r] * a + l;
            }
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < NE; e++) {
            const int i = tid + e * PA_THREADS;
            if (i < PA_BQ * hd) {
                const int r = i / hd, d = i - r * hd;
                const float *pr = Ps + r * PA_BK;
                float acc = o[e] * As[r];
                for (int c = 0; c < nk; c++)
                    acc += pr[c] * Vs[c * hd + d];
                o[e] = acc;
            }
        }
        __syncthreads(); // Ks, Vs, Ps and As are rewritten by the next tile
    }
#pragma unroll
    for (int e = 0; e < NE; e++) {
        const int i = tid + e * PA_THREADS;
        if (i < PA_BQ * hd) {
            const int r = i / hd, d = i - r * hd;
            if (r < nq) {
                float v = o[e] / Ls[r];
                if (gated)
                    v *= sigmoidf_(q[(long long)(t0 + r) * q_tok + (long long)h * q_step + hd + d]);
                out[(long long)(t0 + r) * out_tok + (long long)h * hd + d] = v;
            }
        }
    }
}

template <int NE>
void launch_attention(const float *q, int q_step, long long q_tok, const float *K, const float *V, int n_head,
                      int n_head_kv, int hd, int pos0, int n, float *out, int gated, cudaStream_t st)
{
    const size_t smem = sizeof(float) * ((size_t)(PA_BQ + PA_BK) * (hd + 4) + (size_t)PA_BK * hd +
                                         (size_t)PA_BQ * PA_BK + 3 * PA_BQ);
    if (smem > 48 * 1024)
        cudaFuncSetAttribute(k_pf_attention<NE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const dim3 grid((unsigned)((n + PA_BQ - 1) / PA_BQ), (unsigned)n_head);
    k_pf_attention<NE><<<grid, PA_THREADS, smem, st>>>(q, q_step, q_tok, K, V, n_head_kv * hd, hd,
                                                        n_head / n_head_kv, pos0, n, out, (long long)n_head * hd,
                                                        gated);
}

// ---- Gated DeltaNet ----

// The causal depthwise conv of channel c (thread) over tokens [blockIdx.y *
// PC_T, ..) of the chunk, SiLU after: input tau < 0 is state row K - 1 + tau
// (the last K - 1 inputs before the chunk). The state is updated after, by
// k_pf_conv_state, once every token has read it.
// Up to PC_KR taps: the thread's PC_T + PC_KR - 1 inputs all loaded first (in flight at once) into registers,
// the taps right-aligned in PC_KR with zeros before them (adding fmaf(0, 0, s) leaves s as it was: the same
// bits as the loop below). That loop waited one memory round trip a token (the store to out may alias the
// next token's loads): 43 us a call at 512 tokens and 8192 channels (ncu, H200, 2026-11-30).
#define PC_T 32
#define PC_KR 4
__global__ void k_pf_conv(const float *in, const float *state, const float *w, float *out, int C, int K, int n)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    const float *wc = w + (size_t)c * K;
    const int t0 = blockIdx.y * PC_T, t1 = min(n, t0 + PC_T);
    if (K <= PC_KR) {
        float wv[PC_KR], xv[PC_T + PC_KR - 1];
#pragma unroll
        for (int j = 0; j < PC_KR; j++)
            wv[j] = j >= PC_KR - K ? wc[j - (PC_KR - K)] : 0.f;
#pragma unroll
        for (int i = 0; i < PC_T + PC_KR - 1; i++) { /* input tau = t0 - (PC_KR - 1) + i */
            const int tau = t0 - (PC_KR - 1) + i;
            xv[i] = tau < t0 - (K - 1) || tau >= t1 ? 0.f : tau >= 0 ? in[(size_t)tau * C + c]
                                                                   : state[(size_t)(K - 1 + tau) * C + c];
        }
#pragma unroll
        for (int t = 0; t < PC_T; t++) {
            float s = 0;
#pragma unroll
            for (int j = 0; j < PC_KR; j++)
                s += wv[j] * xv[t + j];
            if (t0 + t < t1)
                out[(size_t)(t0 + t) * C + c] = silu(s);
        }
        return;
    }
    for (int t = t0; t < t1; t++) {
        float s = 0;
        for (int i = 0; i < K; i++) {
            const int tau = t - (K - 1) + i;
            s += wc[i] * (tau >= 0 ? in[(size_t)tau * C + c] : state[(size_t)(K - 1 + tau) * C + c]);
        }
        out[(size_t)t * C + c] = silu(s);
    }
}

// State row r becomes input n - (K - 1) + r: from the chunk, or an older
// state row n + r > r, not yet overwritten (rows go up).
__global__ void k_pf_conv_state(const float *in, float *state, int C, int K, int n)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (int r = 0; r < K - 1; r++) {
        const int tau = n - (K - 1) + r;
        state[(size_t)r * C + c] = tau >= 0 ? in[(size_t)tau * C + c] : state[(size_t)(K - 1 + tau) * C + c];
    }
}

// Key head blockIdx.x of token blockIdx.y: q and k L2-normalized, q scaled by 1/sqrt(dk).
__global__ void k_pf_dn_qk_norm(float *conv, int C, int nk, int dk)
{
    const int h = blockIdx.x;
    float *row = conv + (size_t)blockIdx.y * C;
    for (int which = 0; which < 2; which++) {
        float *x = row + (size_t)(which * nk + h) * dk;
        float ss = 0;
        for (int i = threadIdx.x; i < dk; i += blockDim.x)
            ss += x[i] * x[i];
        ss = block_sum(ss);
        float r = rsqrtf(ss + 1e-6f) * (which == 0 ? rsqrtf((float)dk) : 1.0f);
        for (int i = threadIdx.x; i < dk; i += blockDim.x)
            x[i] *= r;
        __syncthreads();
    }
}

// k_pf_dn_qk_norm a warp a head row (pf_warp_norm): warp w of the grid takes row w % (2 nk) (q heads, then k
// heads) of token w / (2 nk).
template <int NQ> __global__ void k_pf_dn_qk_norm_warp(float *conv, int C, int nk, int dk, int n)
{
    const long long w = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (w >= (long long)2 * nk * n)
        return;
    const int t = (int)(w / (2 * nk)), hw = (int)(w - (long long)t * 2 * nk);
    dev_norm_row_warp<NQ, false>(conv + (size_t)t * C + (size_t)hw * dk, nullptr, nullptr, dk, 1e-6f,
                                 hw < nk ? rsqrtf((float)dk) : 1.0f);
}

// Element e of a and b ([n][w] each) from ab's row e / w ([n][2 w]: a's columns, then b's).
__global__ void k_pf_split_cols(const float *ab, int w, float *a, float *b, long long total)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total)
        return;
    const long long t = e / w, c = e - t * w;
    a[e] = ab[2 * w * t + c];
    b[e] = ab[2 * w * t + w + c];
}

// g = ssm_a * softplus(a + dt), beta = sigmoid(b), for the [n][nv] gates.
__global__ void k_pf_dn_gates(float *a, float *b, const float *ssm_a, const float *ssm_dt, int nv, int total)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    const int j = i % nv;
    float x = a[i] + ssm_dt[j];
    float sp = x > 20.0f ? x : log1pf(expf(x));
    a[i] = ssm_a[j] * sp;
    b[i] = sigmoidf_(b[i]);
}

// The delta rule of value head j = blockIdx.x over the chunk's tokens in
// order: per token S *= exp(g); S += k (beta (v - S^T k))^T; o = S^T q.
// The columns of S are independent: block y takes columns PD_BC y ..
// PD_BC (y + 1) - 1. PD_LPC lanes share a column, lane s of it holding rows
// s, s + PD_LPC, ... in registers for the whole chunk, so the two sums over
// rows are a few shuffles and a token costs no barrier: the chain a token
// is two short reductions, one with KQ below (the time of this kernel is
// its latency, tokens in sequence). q, k, v, g, beta of up to PD_TT tokens are staged in
// shared memory at a time, so no global load sits in a token's chain.
#define PD_LPC 8                  /* lanes a column */
#define PD_CPW (32 / PD_LPC)      /* columns a warp */
#define PD_NW 4                   /* warps a block */
#define PD_BC (PD_CPW * PD_NW)    /* columns a block */
#define PD_ROWS 32                /* dk / PD_LPC at most */
#define PD_LD 8                   /* staging loads a thread issues before it stores them */
#define PD_TT 32                  /* tokens staged at a time, at most (fewer where 48 KiB would not hold them) */
// KQ: one pass a token instead of two. With S the state before the token,
// S^T k and S^T q are summed together (one reduction), and since
// S' = e^g S + k delta^T, o = S'^T q = e^g (S^T q) + (k . q) delta, k . q
// computed at staging: the chain a token is one sum and one shuffle round,
// and the state update, no longer in the chain, is one FMA a row. The same
// math as !KQ up to float32 rounding (LILAC_CUDA_DN_KQ=0: the two-pass form).
template <int ROWS, bool KQ> // rows a lane, at least dk / PD_LPC: a compile-time bound keeps sr in registers
__global__ void __launch_bounds__(32 * PD_NW)
    k_pf_dn_recurrent(float *S_all, const float *conv, int C, const float *g, const float *beta, float *o_all, int nk,
                      int nv, int dk, int dv, int tiled, int n, int TT)
{
    const int j = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane % PD_LPC, cl = warp * PD_CPW + lane / PD_LPC, c0 = blockIdx.y * PD_BC, c = c0 + cl;
    const int kh = tiled ? j % nk : j / (nv / nk);
    extern __shared__ float pd_sh[]; // q[TT][dk], k[TT][dk], v[TT][PD_BC], g[TT], beta[TT], kq[TT]
    float *const qs = pd_sh, *const ks = qs + TT * dk, *const vs = ks + TT * dk, *const gs = vs + TT * PD_BC,
                 *const bs = gs + TT, *const kqs = bs + TT;
    float *S = S_all + (size_t)j * dk * dv;
    float sr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int i = sub + r * PD_LPC;
        sr[r] = i < dk ? S[(size_t)i * dv + c] : 0.f;
    }
    const float *vb = conv + (size_t)2 * nk * dk + (size_t)j * dv + c0;
    for (int t0 = 0; t0 < n; t0 += TT) {
        const int tn = min(TT, n - t0);
        __syncthreads(); // the previous tokens' q, k, v, g, beta are consumed
        /* PD_LD loads in flight a thread before their stores (a loop of load, store would wait a
         * memory latency an element: the compiler cannot move a load past a store that might alias) */
        for (int i0 = threadIdx.x; i0 < tn * dk; i0 += PD_LD * blockDim.x) {
            float qv[PD_LD], kv[PD_LD];
#pragma unroll
            for (int u = 0; u < PD_LD; u++) {
                const int i = i0 + u * blockDim.x, tt = i / dk, d = i - tt * dk;
                const float *row = conv + (size_t)(t0 + tt) * C;
                qv[u] = i < tn * dk ? __ldg(row + (size_t)kh * dk + d) : 0.f;
                kv[u] = i < tn * dk ? __ldg(row + (size_t)(nk + kh) * dk + d) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < PD_LD; u++) {
                const int i = i0 + u * blockDim.x;
                if (i < tn * dk)
                    qs[i] = qv[u], ks[i] = kv[u];
            }
        }
        for (int i0 = threadIdx.x; i0 < tn * PD_BC; i0 += PD_LD * blockDim.x) {
            float vv[PD_LD];
#pragma unroll
            for (int u = 0; u < PD_LD; u++) {
                const int i = i0 + u * blockDim.x, tt = i / PD_BC, cc = i - tt * PD_BC;
                vv[u] = i < tn * PD_BC ? __ldg(vb + (size_t)(t0 + tt) * C + cc) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < PD_LD; u++) {
                const int i = i0 + u * blockDim.x;
                if (i < tn * PD_BC)
                    vs[i] = vv[u];
            }
        }
        for (int i = threadIdx.x; i < tn; i += blockDim.x) {
            gs[i] = g[(size_t)(t0 + i) * nv + j];
            bs[i] = beta[(size_t)(t0 + i) * nv + j];
        }
        __syncthreads();
        if (KQ) { // k . q of each staged token, a warp a token
            for (int tt = warp; tt < tn; tt += PD_NW) {
                float d = 0;
                for (int i = lane; i < dk; i += 32)
                    d += ks[tt * dk + i] * qs[tt * dk + i];
                d = warp_sum(d);
                if (lane == 0)
                    kqs[tt] = d;
            }
            __syncthreads();
        }
        for (int tt = 0; tt < tn; tt++) {
            const float *qt = qs + tt * dk, *kt = ks + tt * dk;
            const float decay = expf(gs[tt]);
            if (KQ) {
                float sk = 0, sq = 0;
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    const int i = sub + r * PD_LPC;
                    if (i < dk) {
                        sk += sr[r] * kt[i];
                        sq += sr[r] * qt[i];
                    }
                }
#pragma unroll
                for (int m = PD_LPC / 2; m; m >>= 1) {
                    sk += __shfl_xor_sync(0xffffffffu, sk, m);
                    sq += __shfl_xor_sync(0xffffffffu, sq, m);
                }
                const float delta = (vs[tt * PD_BC + cl] - decay * sk) * bs[tt];
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    const int i = sub + r * PD_LPC;
                    if (i < dk)
                        sr[r] = fmaf(sr[r], decay, kt[i] * delta);
                }
                if (sub == 0)
                    o_all[(size_t)(t0 + tt) * nv * dv + (size_t)j * dv + c] = fmaf(decay, sq, kqs[tt] * delta);
                continue;
            }
            float kv = 0;
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const int i = sub + r * PD_LPC;
                if (i < dk) {
                    sr[r] *= decay;
                    kv += sr[r] * kt[i];
                }
            }
#pragma unroll
            for (int o = PD_LPC / 2; o; o >>= 1)
                kv += __shfl_xor_sync(0xffffffffu, kv, o);
            const float delta = (vs[tt * PD_BC + cl] - kv) * bs[tt];
            float o = 0;
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const int i = sub + r * PD_LPC;
                if (i < dk) {
                    sr[r] += kt[i] * delta;
                    o += sr[r] * qt[i];
                }
            }
#pragma unroll
            for (int m = PD_LPC / 2; m; m >>= 1)
                o += __shfl_xor_sync(0xffffffffu, o, m);
            if (sub == 0)
                o_all[(size_t)(t0 + tt) * nv * dv + (size_t)j * dv + c] = o;
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int i = sub + r * PD_LPC;
        if (i < dk)
            S[(size_t)i * dv + c] = sr[r];
    }
}

// One thread a column, S in global memory, rows in sequence: the shapes the split kernel does not take.
__global__ void k_pf_dn_recurrent1(float *S_all, const float *conv, int C, const float *g, const float *beta,
                                   float *o_all, int nk, int nv, int dk, int dv, int tiled, int n)
{
    const int j = blockIdx.x, c = threadIdx.x;
    const int kh = tiled ? j % nk : j / (nv / nk);
    extern __shared__ float pd1_sh[]; // q[dk], k[dk]
    float *const qs = pd1_sh, *const ks = pd1_sh + dk;
    float *S = S_all + (size_t)j * dk * dv;
    for (int t = 0; t < n; t++) {
        const float *row = conv + (size_t)t * C;
        __syncthreads(); // the previous token's q and k are consumed
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            qs[i] = row[(size_t)kh * dk + i];
            ks[i] = row[(size_t)(nk + kh) * dk + i];
        }
        __syncthreads();
        if (c < dv) {
            const float v = row[(size_t)2 * nk * dk + (size_t)j * dv + c];
            const float decay = expf(g[(size_t)t * nv + j]);
            float kv = 0;
            for (int i = 0; i < dk; i++) {
                float sv = S[(size_t)i * dv + c] * decay;
                S[(size_t)i * dv + c] = sv;
                kv += sv * ks[i];
            }
            const float delta = (v - kv) * beta[(size_t)t * nv + j];
            float o = 0;
            for (int i = 0; i < dk; i++) {
                float sv = S[(size_t)i * dv + c] + ks[i] * delta;
                S[(size_t)i * dv + c] = sv;
                o += sv * qs[i];
            }
            o_all[(size_t)t * nv * dv + (size_t)j * dv + c] = o;
        }
    }
}

// The same recurrence in the chunked form (LILAC_CUDA_DN_CHUNK=1), the math
// of model/deltanet.c's lilac_dn_chunk: sub-chunks of DC_L tokens, and per
// sub-chunk, with S the state before it, G_i = g_0 + .. + g_i,
//   A_im = -beta_i (k_i . k_m) e^{G_i - G_m} (m < i),  T = (I - A)^-1,
//   X = diag(beta) (V - diag(e^G) K S),  V' = T X     (the deltas, = U - W S)
//   o = diag(e^G) Q S + P V',  P_im = (q_i . k_m) e^{G_i - G_m} (m <= i),
//   S = e^{G_last} S + (diag(e^{G_last - G}) K)^T V'.
// A block takes value head j = blockIdx.x and DC_BC columns of S (blockIdx.y),
// its S slice in shared memory for the whole chunk; A, T and P depend on
// k, q, g, beta only: given a buffer, k_pf_dn_tp computes them first for
// every head and sub-chunk at once (dc_tp), else each block of the head
// computes them for itself, sub-chunk after sub-chunk. T is built
// from the inverses of the four 16 x 16 diagonal blocks of I - A (a thread a
// column, forward substitution in registers), then block row b of T from
// the rows above: T_bc = T_bb sum_{c <= e < b} A_be T_ec. Every product is
// float32 CUDA-core FMAs, a thread a small register tile; no atomics.
#define DC_L LILAC_CUDA_DN_SUB /* tokens a sub-chunk (64) */
#define DC_BC 32  /* columns of S a block */
#define DC_T 256  /* threads a block */
#define DC_SS 36  /* row stride of the S slice */
#define DC_TS 68  /* row stride of A / T and P */
#define DC_XS 48  /* row stride of X, V' and the 16-row scratch */
#define DC_MAXDK 192
#define DC_MIN_TOKENS 16 /* lilac_cuda_pf_deltanet's: fewer go to the recurrent kernel */

static size_t dn_chunk_smem(int dk)
{
    return sizeof(float) * ((size_t)2 * DC_L * (dk + 4) + (size_t)dk * DC_SS + (size_t)2 * DC_L * DC_TS +
                            (size_t)2 * DC_L * DC_XS + (size_t)16 * DC_XS + 4 * DC_L);
}

/* k_pf_dn_tp's: q, k, A/T, P, the 16-row scratch, G, e^G, e^{G_L - G}, beta */
static size_t dn_tp_smem(int dk)
{
    return sizeof(float) * ((size_t)2 * DC_L * (dk + 4) + (size_t)2 * DC_L * DC_TS + (size_t)16 * DC_XS + 4 * DC_L);
}

__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }

// acc[r][s] += sum over m of A[hi + HS r][m] B[m][lo + 16 s] (HS = 64 / R: a thread's R rows) for a
// block-lower-triangular A (64 x 64, rows DC_TS floats apart: the rows of 16-row block b reach column blocks
// <= b) and B (64 rows DC_XS floats apart): T X and P V'. Each sum in m order whatever R.
template <int R>
__device__ __forceinline__ void dc_tri_mm(const float *A, const float *B, int hi, int lo, float (&acc)[R][2])
{
    constexpr int HS = DC_L / R;
#pragma unroll
    for (int mb = 0; mb < 4; mb++)
#pragma unroll 2
        for (int m = 16 * mb; m < 16 * mb + 16; m += 4) {
            float xv[4][2];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                xv[u][0] = B[(m + u) * DC_XS + lo];
                xv[u][1] = B[(m + u) * DC_XS + lo + 16];
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int blk = R == 4 ? r : (hi + HS * r) / 16; /* the row's 16-row block (hi < HS) */
                if (blk < mb) /* above the diagonal: compile-time at R 4, warp-uniform at 2 */
                    continue;
                const float4 t = ld4(A + (hi + HS * r) * DC_TS + m);
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    acc[r][s] = fmaf(t.x, xv[0][s], acc[r][s]);
                    acc[r][s] = fmaf(t.y, xv[1][s], acc[r][s]);
                    acc[r][s] = fmaf(t.z, xv[2][s], acc[r][s]);
                    acc[r][s] = fmaf(t.w, xv[3][s], acc[r][s]);
                }
            }
        }
}

// q and k of rows t0 .. t0 + DC_L (qb, kb: the head's columns of row 0, rows C floats apart) into Qs, Ks
// ([DC_L][KS]); rows past L zero. Every thread.
template <int NTH = DC_T>
__device__ __forceinline__ void dc_stage_qk(const float *qb, const float *kb, int C, int t0, int L, int dk, float *Qs,
                                            float *Ks, int KS, int tid)
{
    const int q4 = dk >> 2;
    for (int e0 = tid; e0 < DC_L * q4; e0 += 8 * NTH) {
        float4 qv[8], kv[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int e = e0 + u * NTH, i = e / q4, d4 = e - i * q4;
            qv[u] = kv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (e < DC_L * q4 && i < L) {
                const size_t off = (size_t)(t0 + i) * C + 4 * d4;
                qv[u] = __ldg(reinterpret_cast<const float4 *>(qb + off));
                kv[u] = __ldg(reinterpret_cast<const float4 *>(kb + off));
            }
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int e = e0 + u * NTH, i = e / q4, d4 = e - i * q4;
            if (e < DC_L * q4) {
                *reinterpret_cast<float4 *>(Qs + i * KS + 4 * d4) = qv[u];
                *reinterpret_cast<float4 *>(Ks + i * KS + 4 * d4) = kv[u];
            }
        }
    }
}

// Value head j's gates of tokens t0 + 2 lane, + 1 (zero past L) into r: a, a', beta, beta'. Warp 0.
__device__ __forceinline__ void dc_gb_load(const float *g, const float *beta, int nv, int j, int t0, int L, int tid,
                                           float (&r)[4])
{
    if (tid < 32) {
        const int i0 = 2 * tid;
        r[0] = i0 < L ? g[(size_t)(t0 + i0) * nv + j] : 0.f;
        r[1] = i0 + 1 < L ? g[(size_t)(t0 + i0 + 1) * nv + j] : 0.f;
        r[2] = i0 < L ? beta[(size_t)(t0 + i0) * nv + j] : 0.f;
        r[3] = i0 + 1 < L ? beta[(size_t)(t0 + i0 + 1) * nv + j] : 0.f;
    }
}

// From dc_gb_load's r: G_i = g_0 + .. + g_i over the sub-chunk, e^G, e^{G_L-1 - G} and beta. Warp 0.
__device__ __forceinline__ void dc_gb_put(const float (&r)[4], int L, float *Gs, float *eG, float *eK, float *Bs,
                                          int tid)
{
    if (tid < 32) { // G: a lane two tokens, a scan over the lanes
        const int i0 = 2 * tid;
        const float a0 = r[0], a1 = r[1];
        float sc = a0 + a1;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, sc, o);
            if (tid >= o)
                sc += y;
        }
        float ex = __shfl_up_sync(0xffffffffu, sc, 1);
        ex = tid ? ex : 0.f;
        Gs[i0] = ex + a0;
        Gs[i0 + 1] = ex + a0 + a1;
        Bs[i0] = r[2];
        Bs[i0 + 1] = r[3];
        __syncwarp();
        const float gl = Gs[L - 1];
        for (int i = tid; i < DC_L; i += 32) {
            eG[i] = expf(Gs[i]);
            eK[i] = expf(gl - Gs[i]);
        }
    }
}

// Value head j's G, e^G, e^{G_L-1 - G} and beta of the sub-chunk at t0 (zero past L). Warp 0.
__device__ __forceinline__ void dc_stage_gb(const float *g, const float *beta, int nv, int j, int t0, int L, float *Gs,
                                            float *eG, float *eK, float *Bs, int tid)
{
    float r[4];
    dc_gb_load(g, beta, nv, j, t0, L, tid, r);
    dc_gb_put(r, L, Gs, eG, eK, Bs, tid);
}

// From the staged q, k, G and beta: P (Ps) and T = (I - A)^-1 (Ts), both [DC_L][DC_TS], block lower triangular
// (zeros above); Ms scratch. Every thread, after the staging's barrier; ends with a barrier.
__device__ __forceinline__ void dc_tp(const float *Ks, const float *Qs, int KS, int dk, const float *Gs,
                                      const float *Bs, float *Ts, float *Ps, float *Ms, int hi, int lo, int tid)
{
    // ---- k_i . k_m and q_i . k_m, m <= i: tiles (r, s) with s > r lie above the diagonal ----
    {
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < 4; s++)
                kk[r][s] = qk[r][s] = 0.f;
        for (int d = 0; d < dk; d += 4) {
            float4 kr[4], qr[4], km[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                kr[r] = ld4(Ks + (hi + 16 * r) * KS + d);
                qr[r] = ld4(Qs + (hi + 16 * r) * KS + d);
                km[r] = ld4(Ks + (lo + 16 * r) * KS + d);
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int s = 0; s <= r; s++) {
                    kk[r][s] = fmaf(kr[r].x, km[s].x, kk[r][s]);
                    kk[r][s] = fmaf(kr[r].y, km[s].y, kk[r][s]);
                    kk[r][s] = fmaf(kr[r].z, km[s].z, kk[r][s]);
                    kk[r][s] = fmaf(kr[r].w, km[s].w, kk[r][s]);
                    qk[r][s] = fmaf(qr[r].x, km[s].x, qk[r][s]);
                    qk[r][s] = fmaf(qr[r].y, km[s].y, qk[r][s]);
                    qk[r][s] = fmaf(qr[r].z, km[s].z, qk[r][s]);
                    qk[r][s] = fmaf(qr[r].w, km[s].w, qk[r][s]);
                }
        }
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const int i = hi + 16 * r, m = lo + 16 * s;
                float a = 0.f, p = 0.f;
                if (s <= r && m <= i) {
                    const float dec = expf(Gs[i] - Gs[m]);
                    p = qk[r][s] * dec;
                    if (m < i)
                        a = -Bs[i] * kk[r][s] * dec;
                }
                Ts[i * DC_TS + m] = a;
                Ps[i * DC_TS + m] = p;
            }
    }
    __syncthreads();
    // ---- T = (I - A)^-1: the diagonal 16 x 16 blocks, thread (b, m) column m of block b ----
    {
        float x[16];
        const int b16 = (tid >> 4) * 16, m = tid & 15;
        if (tid < 64) {
            const float *Ab = Ts + b16 * DC_TS + b16;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                float s = i == m ? 1.f : 0.f;
#pragma unroll
                for (int r = 0; r < i; r++)
                    s = fmaf(Ab[i * DC_TS + r], x[r], s);
                x[i] = s;
            }
        }
        __syncthreads();
        if (tid < 64) {
#pragma unroll
            for (int i = 0; i < 16; i++)
                Ts[(b16 + i) * DC_TS + b16 + m] = x[i];
        }
        __syncthreads();
    }
    // block row b: M_c = sum_{16c <= k < 16b} A[16b + row][k] T[k][16c + col], then T_bc = T_bb M_c
#pragma unroll
    for (int b = 1; b < 4; b++) {
        const float *Arow = Ts + (16 * b + hi) * DC_TS;
#pragma unroll
        for (int c = 0; c < b; c++) {
            float s = 0.f;
#pragma unroll 8
            for (int k = 16 * c; k < 16 * b; k++)
                s = fmaf(Arow[k], Ts[k * DC_TS + 16 * c + lo], s);
            Ms[hi * DC_XS + 16 * c + lo] = s;
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < b; c++) {
            float s = 0.f;
#pragma unroll
            for (int x = 0; x < 16; x++)
                s = fmaf(Arow[16 * b + x], Ms[x * DC_XS + 16 * c + lo], s);
            Ts[(16 * b + hi) * DC_TS + 16 * c + lo] = s;
        }
        __syncthreads();
    }
}

// tp's layout (k_pf_dn_tp writes it, k_pf_dn_chunk<true> reads it): value head j's sub-chunk sc at
// dc_tp_slice, T then P, [DC_L][DC_L] each; float4 e of a slice is at dc_tp_smem in shared memory (Ts, Ps:
// DC_TS-float rows). Thread tid of nth moves float4s tid + u nth, u < DC_TP_U(nth).
#define DC_TP_U(nth) (2 * DC_L * DC_L / 4 / (nth))
__device__ __forceinline__ size_t dc_tp_slice(int j, int nsub, int sc)
{
    return ((size_t)j * nsub + sc) * 2 * DC_L * DC_L;
}
__device__ __forceinline__ float4 *dc_tp_smem(float *Ts, float *Ps, int e)
{
    const int m = e / (DC_L * DC_L / 4), r = e - m * (DC_L * DC_L / 4), i = r / (DC_L / 4), c4 = r - i * (DC_L / 4);
    return reinterpret_cast<float4 *>((m ? Ps : Ts) + i * DC_TS + 4 * c4);
}

// V's DC_BC columns of rows t0 .. t0 + DC_L (vb: row 0's, rows C floats apart) into Xs (rows XS floats apart); rows
// past L zero. Every thread.
template <int NTH>
__device__ __forceinline__ void dc_stage_v(const float *vb, int C, int t0, int L, float *Xs, int XS, int tid)
{
#pragma unroll
    for (int u = 0; u < DC_L * DC_BC / 4 / NTH; u++) {
        const int e = tid + u * NTH, i = e / (DC_BC / 4), c4 = e - i * (DC_BC / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < L)
            v = __ldg(reinterpret_cast<const float4 *>(vb + (size_t)(t0 + i) * C + 4 * c4));
        *reinterpret_cast<float4 *>(Xs + i * XS + 4 * c4) = v;
    }
}

// A block's DC_BC columns of value head j's state S (rows dv floats apart) into Ss (rows SS floats apart), or
// (BACK) Ss back into S. Every thread.
template <bool BACK, int NTH>
__device__ __forceinline__ void dc_state_copy(float *S, int dv, float *Ss, int SS, int dk, int tid)
{
    for (int e = tid; e < dk * DC_BC; e += NTH) {
        const int d = e / DC_BC, c = e - d * DC_BC;
        if (BACK)
            S[(size_t)d * dv + c] = Ss[d * SS + c];
        else
            Ss[d * SS + c] = S[(size_t)d * dv + c];
    }
}

// T and P of value head j's sub-chunk sc (k_pf_dn_tp's) into Ts, Ps. Every thread.
template <int NTH>
__device__ __forceinline__ void dc_stage_tp(const float *tp, int j, int nsub, int sc, float *Ts, float *Ps, int tid)
{
    const float4 *src = reinterpret_cast<const float4 *>(tp + dc_tp_slice(j, nsub, sc));
#pragma unroll
    for (int u = 0; u < DC_TP_U(NTH); u++)
        *dc_tp_smem(Ts, Ps, tid + u * NTH) = __ldg(src + tid + u * NTH);
}

// PRE: T and P precomputed by k_pf_dn_tp into tp (nsub sub-chunks a value head); else computed here, by each
// of a head's dv / DC_BC blocks. NTH threads (DC_T, or 2 DC_T with PRE): thread (hi, lo) = (tid / 16, tid % 16)
// takes rows hi + HS r (r < R, HS = NTH / 16) and columns lo + 16 s of a sub-chunk's 64 x DC_BC products, and
// rows 4 hi + 4 HS h + u of the state's update; every sum in the same order whatever NTH (the same bits). The
// block's shared memory (~150 KB) holds one block an SM: 2 DC_T threads, twice the warps, to hide the FMAs'
// and shared loads' latency (8 warps an SM issued at ~0.4 an SM sub-partition and cycle, ncu, session 11).
template <bool PRE, int NTH = DC_T>
__global__ void __launch_bounds__(NTH, 1)
    k_pf_dn_chunk(float *S_all, const float *conv, int C, const float *g, const float *beta, float *o_all, int nk,
                  int nv, int dk, int dv, int tiled, int n, const float *tp, int nsub)
{
    extern __shared__ float4 dc_sh4[];
    const int KS = dk + 4; // q, k rows padded: float4-aligned, rows 4 banks apart
    float *const Ks = reinterpret_cast<float *>(dc_sh4); // [DC_L][KS]
    float *const Qs = Ks + DC_L * KS;                     // [DC_L][KS]
    float *const Ss = Qs + DC_L * KS;                     // [dk][DC_SS] this block's columns of S
    float *const Ts = Ss + dk * DC_SS;                    // [DC_L][DC_TS] A, then T
    float *const Ps = Ts + DC_L * DC_TS;                  // [DC_L][DC_TS] P
    float *const Xs = Ps + DC_L * DC_TS;                  // [DC_L][DC_XS] V, then X
    float *const Vn = Xs + DC_L * DC_XS;                  // [DC_L][DC_XS] V'
    float *const Ms = Vn + DC_L * DC_XS;                  // [16][DC_XS] sum_e A_be T_ec
    float *const Gs = Ms + 16 * DC_XS, *const eG = Gs + DC_L, *const eK = eG + DC_L, *const Bs = eK + DC_L;
    const int j = blockIdx.x, c0 = blockIdx.y * DC_BC, tid = threadIdx.x;
    static_assert(NTH == DC_T || (PRE && NTH == 2 * DC_T), "dc_tp's tiles are DC_T threads'");
    constexpr int HS = NTH / 16, R = DC_L / HS, NH = (DC_MAXDK + 4 * HS - 1) / (4 * HS);
    const int hi = tid >> 4, lo = tid & 15; // tiles: rows hi + HS r, columns lo + 16 s
    const int kh = tiled ? j % nk : j / (nv / nk);
    float *S = S_all + (size_t)j * dk * dv + c0;
    dc_state_copy<false, NTH>(S, dv, Ss, DC_SS, dk, tid);
    const float *qb = conv + (size_t)kh * dk, *kb = conv + (size_t)(nk + kh) * dk;
    const float *vb = conv + (size_t)2 * nk * dk + (size_t)j * dv + c0;
    for (int t0 = 0; t0 < n; t0 += DC_L) {
        const int L = min(DC_L, n - t0);
        __syncthreads(); // the previous sub-chunk's k, V' and S are consumed
        dc_stage_qk<NTH>(qb, kb, C, t0, L, dk, Qs, Ks, KS, tid);
        dc_stage_v<NTH>(vb, C, t0, L, Xs, DC_XS, tid);
        dc_stage_gb(g, beta, nv, j, t0, L, Gs, eG, eK, Bs, tid);
        if (PRE) // T and P of this sub-chunk from k_pf_dn_tp
            dc_stage_tp<NTH>(tp, j, nsub, t0 / DC_L, Ts, Ps, tid);
        __syncthreads();
        if (!PRE)
            dc_tp(Ks, Qs, KS, dk, Gs, Bs, Ts, Ps, Ms, hi, lo, tid);
        // ---- K S and Q S (the state before the sub-chunk): X, and o's first term ----
        float oa[R][2];
        {
            float ks[R][2], qs[R][2];
#pragma unroll
            for (int r = 0; r < R; r++)
                ks[r][0] = ks[r][1] = qs[r][0] = qs[r][1] = 0.f;
            for (int d = 0; d < dk; d += 4) {
                float sv[4][2];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    sv[u][0] = Ss[(d + u) * DC_SS + lo];
                    sv[u][1] = Ss[(d + u) * DC_SS + lo + 16];
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float4 kr = ld4(Ks + (hi + HS * r) * KS + d), qr = ld4(Qs + (hi + HS * r) * KS + d);
#pragma unroll
                    for (int s = 0; s < 2; s++) {
                        ks[r][s] = fmaf(kr.x, sv[0][s], ks[r][s]);
                        ks[r][s] = fmaf(kr.y, sv[1][s], ks[r][s]);
                        ks[r][s] = fmaf(kr.z, sv[2][s], ks[r][s]);
                        ks[r][s] = fmaf(kr.w, sv[3][s], ks[r][s]);
                        qs[r][s] = fmaf(qr.x, sv[0][s], qs[r][s]);
                        qs[r][s] = fmaf(qr.y, sv[1][s], qs[r][s]);
                        qs[r][s] = fmaf(qr.z, sv[2][s], qs[r][s]);
                        qs[r][s] = fmaf(qr.w, sv[3][s], qs[r][s]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int i = hi + HS * r;
                const float eg = eG[i], bt = Bs[i];
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    float *xp = Xs + i * DC_XS + lo + 16 * s;
                    *xp = bt * (*xp - eg * ks[r][s]);
                    oa[r][s] = eg * qs[r][s];
                }
            }
        }
        __syncthreads();
        // ---- V' = T X (T lower triangular: row block r reaches column blocks <= r) ----
        {
            float vn[R][2];
#pragma unroll
            for (int r = 0; r < R; r++)
                vn[r][0] = vn[r][1] = 0.f;
            dc_tri_mm<R>(Ts, Xs, hi, lo, vn);
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int s = 0; s < 2; s++)
                    Vn[(hi + HS * r) * DC_XS + lo + 16 * s] = vn[r][s];
        }
        __syncthreads();
        // ---- o += P V' ----
        dc_tri_mm<R>(Ps, Vn, hi, lo, oa);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = hi + HS * r;
            if (i < L) {
                float *orow = o_all + (size_t)(t0 + i) * nv * dv + (size_t)j * dv + c0 + lo;
                orow[0] = oa[r][0];
                orow[16] = oa[r][1];
            }
        }
        // ---- S = e^{G_last} S + (diag(e^{G_last - G}) K)^T V': rows 4 hi + 4 HS h + u, columns lo + 16 s ----
        {
            float sa[NH][4][2];
#pragma unroll
            for (int h = 0; h < NH; h++)
#pragma unroll
                for (int u = 0; u < 4; u++)
                    sa[h][u][0] = sa[h][u][1] = 0.f;
            for (int i = 0; i < L; i++) {
                const float ek = eK[i], v0 = Vn[i * DC_XS + lo] * ek, v1 = Vn[i * DC_XS + lo + 16] * ek;
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    if (4 * hi + 4 * HS * h < dk) {
                        const float4 kv = ld4(Ks + i * KS + 4 * hi + 4 * HS * h);
                        sa[h][0][0] = fmaf(kv.x, v0, sa[h][0][0]);
                        sa[h][0][1] = fmaf(kv.x, v1, sa[h][0][1]);
                        sa[h][1][0] = fmaf(kv.y, v0, sa[h][1][0]);
                        sa[h][1][1] = fmaf(kv.y, v1, sa[h][1][1]);
                        sa[h][2][0] = fmaf(kv.z, v0, sa[h][2][0]);
                        sa[h][2][1] = fmaf(kv.z, v1, sa[h][2][1]);
                        sa[h][3][0] = fmaf(kv.w, v0, sa[h][3][0]);
                        sa[h][3][1] = fmaf(kv.w, v1, sa[h][3][1]);
                    }
                }
            }
            const float el = eG[L - 1];
#pragma unroll
            for (int h = 0; h < NH; h++)
                if (4 * hi + 4 * HS * h < dk) {
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        float *sp = Ss + (4 * hi + 4 * HS * h + u) * DC_SS + lo;
                        sp[0] = fmaf(el, sp[0], sa[h][u][0]);
                        sp[16] = fmaf(el, sp[16], sa[h][u][1]);
                    }
                }
        }
    }
    __syncthreads();
    dc_state_copy<true, NTH>(S, dv, Ss, DC_SS, dk, tid);
}

// ---- the chunked delta rule on the tensor cores (LILAC_CUDA_DN_TC; session 19) ----
//
// k_pf_dn_chunk<true>'s steps a sub-chunk, each product on mma.sync m16n8k8 in the 3xTF32 form (every operand
// split hi + lo as it is loaded into a fragment; c += a_lo b_hi + a_hi b_lo + a_hi b_hi, float32 accumulation:
// float32's result to a few roundings, not its bits): K S and Q S (64 tokens x DC_BC columns, over dk), V' = T X
// and P V' (over the sub-chunk's tokens; T and P block lower triangular: a token tile reads the tiles up to its
// own), and the state's update S = e^{G_L} S + K^T diag(e^{G_L - G}) V' (dk x DC_BC, over the tokens). On the CUDA
// cores these were ~0.9 M FMAs a block a sub-chunk, ~24 us at 4096 tokens (ncu, session 18, ~15 % of fp32 peak).
// 16 warps: warp w's tile of every 64 x DC_BC product is token rows 16 (w % 4) .., columns 8 (w / 4) ..; of the
// state's update dims 16 (w % 4) .. and 16 (w % 4 + 4) .. of the same columns. Fragments (g = lane / 4, t = lane
// % 4): A rows g, g + 8 and columns t, t + 4; B rows t, t + 4 and column g; C rows g, g + 8 and columns 2t, 2t + 1.
// Strides: q, k, T and P rows 4 banks apart (A loads conflict-free), S, X and V' rows 8 apart (B loads).
// Where it stands (ncu at 4096 tokens, session 19): 1.08 ms a layer (8 % of pp4096), issue slots 60 % busy, the
// tensor pipe 18 %: bound by instructions, a third of them the operands' splits (each warp splits what it loads,
// K and S again in several warps), and ~10 M shared-memory bank conflicts (the state update's transposed K
// reads, the C-layout stores).
#define DT_SS 40  /* row stride of S, X and V' */
#define DT_MAXDK 128

// PF: q and k double-buffered (the next sub-chunk's copied while this one is computed), V, T and P copied
// (cp.async) into their buffers as soon as this sub-chunk is done with them, the gates loaded a sub-chunk ahead.
static size_t dn_tc_smem(int dk, bool pf)
{
    return sizeof(float) * ((size_t)(pf ? 4 : 2) * DC_L * (dk + 4) + (size_t)dk * DT_SS + (size_t)2 * DC_L * DC_TS +
                            (size_t)2 * DC_L * DT_SS + 4 * DC_L);
}

// PF's copies of the sub-chunk at t0 (L tokens; rows past L zeros): q and k (QK), V into Xs (V), T (T), P (P).
template <int NTH>
__device__ __forceinline__ void dt_copy_qk(const float *qb, const float *kb, int C, int t0, int L, int dk, float *Qs,
                                           float *Ks, int KS, int tid)
{
    const int q4 = dk >> 2;
    for (int e = tid; e < DC_L * q4; e += NTH) {
        const int i = e / q4, d4 = e - i * q4;
        const size_t off = i < L ? (size_t)(t0 + i) * C + 4 * d4 : 0;
        cp16(Qs + i * KS + 4 * d4, qb + off, i < L);
        cp16(Ks + i * KS + 4 * d4, kb + off, i < L);
    }
}
template <int NTH>
__device__ __forceinline__ void dt_copy_v(const float *vb, int C, int t0, int L, float *Xs, int tid)
{
#pragma unroll
    for (int u = 0; u < DC_L * DC_BC / 4 / NTH; u++) {
        const int e = tid + u * NTH, i = e / (DC_BC / 4), c4 = e - i * (DC_BC / 4);
        cp16(Xs + i * DT_SS + 4 * c4, vb + (i < L ? (size_t)(t0 + i) * C + 4 * c4 : 0), i < L);
    }
}
// half 0: T, half 1: P (dc_tp_smem's float4s e of the slice: the first half T's, the second P's)
template <int NTH>
__device__ __forceinline__ void dt_copy_tp(const float *tp, int j, int nsub, int sc, float *Ts, float *Ps, int half,
                                           int tid)
{
    const float *src = tp + dc_tp_slice(j, nsub, sc);
    constexpr int U = DC_TP_U(NTH) / 2;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int e = tid + (half * U + u) * NTH;
        cp16(reinterpret_cast<float *>(dc_tp_smem(Ts, Ps, e)), src + 4 * e, true);
    }
}

// The A fragment of rows r, r + 8 and columns k, k + 4 of a row-major matrix (rows st floats apart) at a, split.
__device__ __forceinline__ void dt_frag_a(const float *a, int st, uint32_t (&h)[4], uint32_t (&l)[4])
{
    tf32_split(a[0], h[0], l[0]);
    tf32_split(a[8 * st], h[1], l[1]);
    tf32_split(a[4], h[2], l[2]);
    tf32_split(a[8 * st + 4], h[3], l[3]);
}

// c += the block-lower-triangular A (DC_L x DC_L, rows DC_TS apart; the warp's row tile mi reads column tiles
// <= mi) times B (DC_L rows DT_SS apart), the warp's tile: rows 16 mi + g (+ 8), B's column nb + g.
// Two chains of mma's (even and odd 8-token steps, added at the end), as in K S and Q S and the state's update:
// test_cuda_dn's timing 139.0/137.9 us against 143.0 with one chain (H200, session 19).
__device__ __forceinline__ void dt_tri_mm(const float *A, const float *B, int mi, int nb, int g, int t, float (&c)[4])
{
    const float *a = A + (16 * mi + g) * DC_TS + t, *b = B + t * DT_SS + nb + g;
    float c2[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k0 = 0; k0 < 16 * mi + 16; k0 += 16) {
        uint32_t ah[4], al[4], bh0, bl0, bh1, bl1, dh[4], dl[4], eh0, el0, eh1, el1;
        dt_frag_a(a + k0, DC_TS, ah, al);
        dt_frag_a(a + k0 + 8, DC_TS, dh, dl);
        tf32_split(b[k0 * DT_SS], bh0, bl0);
        tf32_split(b[(k0 + 4) * DT_SS], bh1, bl1);
        tf32_split(b[(k0 + 8) * DT_SS], eh0, el0);
        tf32_split(b[(k0 + 12) * DT_SS], eh1, el1);
        mma3(c, ah, al, bh0, bh1, bl0, bl1);
        mma3(c2, dh, dl, eh0, eh1, el0, el1);
    }
#pragma unroll
    for (int e = 0; e < 4; e++)
        c[e] += c2[e];
}

// DK: dk at compile time (the loops over it unrolled, the strides constants), or 0: dk_ at run time.
template <bool PF, int DK>
__global__ void __launch_bounds__(2 * DC_T, 1)
    k_pf_dn_chunk_tc(float *S_all, const float *conv, int C, const float *g, const float *beta, float *o_all, int nk,
                     int nv, int dk_, int dv, int tiled, int n, const float *tp, int nsub)
{
    const int dk = DK > 0 ? DK : dk_;
    constexpr int NTH = 2 * DC_T;
    static_assert(NTH == 512 && DC_L == 64 && DC_BC == 32, "16 warps: 4 token tiles x 4 column tiles");
    static_assert(DC_TP_U(NTH) % 2 == 0 && DC_TP_U(NTH) * NTH == 2 * DC_L * DC_L / 4, "T, then P: a half each");
    extern __shared__ float4 dtc_sh4[];
    const int KS = dk + 4;
    float *const Kb = reinterpret_cast<float *>(dtc_sh4);  // [PF ? 2 : 1][DC_L][KS]
    float *const Qb = Kb + (PF ? 2 : 1) * DC_L * KS;       // [PF ? 2 : 1][DC_L][KS]
    float *const Ss = Qb + (PF ? 2 : 1) * DC_L * KS;       // [dk][DT_SS] this block's columns of S
    float *const Ts = Ss + dk * DT_SS;                     // [DC_L][DC_TS] T
    float *const Ps = Ts + DC_L * DC_TS;                   // [DC_L][DC_TS] P
    float *const Xs = Ps + DC_L * DC_TS;                   // [DC_L][DT_SS] V, then X
    float *const Vn = Xs + DC_L * DT_SS;                   // [DC_L][DT_SS] V'
    float *const Gs = Vn + DC_L * DT_SS, *const eG = Gs + DC_L, *const eK = eG + DC_L, *const Bs = eK + DC_L;
    const int j = blockIdx.x, c0 = blockIdx.y * DC_BC, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3, mi = warp & 3, ni = warp >> 2;
    const int r0 = 16 * mi + gq, cc = 8 * ni + 2 * tq; // C: rows r0, r0 + 8, columns cc, cc + 1
    const int kh = tiled ? j % nk : j / (nv / nk);
    float *S = S_all + (size_t)j * dk * dv + c0;
    const float *qb = conv + (size_t)kh * dk, *kb = conv + (size_t)(nk + kh) * dk;
    const float *vb = conv + (size_t)2 * nk * dk + (size_t)j * dv + c0;
    float gr[4]; // PF: the next sub-chunk's gates (warp 0)
    if (PF) {
        const int L0 = min(DC_L, n);
        dt_copy_qk<NTH>(qb, kb, C, 0, L0, dk, Qb, Kb, KS, tid);
        dt_copy_v<NTH>(vb, C, 0, L0, Xs, tid);
        dt_copy_tp<NTH>(tp, j, nsub, 0, Ts, Ps, 0, tid);
        dt_copy_tp<NTH>(tp, j, nsub, 0, Ts, Ps, 1, tid);
        cp_commit();
        dc_gb_load(g, beta, nv, j, 0, L0, tid, gr);
    }
    dc_state_copy<false, NTH>(S, dv, Ss, DT_SS, dk, tid);
    for (int t0 = 0, sc = 0; t0 < n; t0 += DC_L, sc++) {
        const int L = min(DC_L, n - t0), t1 = t0 + DC_L, L1 = min(DC_L, n - t1); // L1: the next one's (<= 0: none)
        float *const Ks = Kb + (PF ? (sc & 1) : 0) * DC_L * KS, *const Qs = Qb + (PF ? (sc & 1) : 0) * DC_L * KS;
        __syncthreads(); // the previous sub-chunk's q, k, V', S and gates are consumed
        if (PF) {
            if (L1 > 0) // into the buffer the previous sub-chunk read
                dt_copy_qk<NTH>(qb, kb, C, t1, L1, dk, Qb + ((sc + 1) & 1) * DC_L * KS,
                                Kb + ((sc + 1) & 1) * DC_L * KS, KS, tid);
            cp_commit();
            dc_gb_put(gr, L, Gs, eG, eK, Bs, tid);
            if (L1 > 0)
                dc_gb_load(g, beta, nv, j, t1, L1, tid, gr);
            cp_wait<1>(); // all but the next q and k
        } else {
            dc_stage_qk<NTH>(qb, kb, C, t0, L, dk, Qs, Ks, KS, tid);
            dc_stage_v<NTH>(vb, C, t0, L, Xs, DT_SS, tid);
            dc_stage_gb(g, beta, nv, j, t0, L, Gs, eG, eK, Bs, tid);
            dc_stage_tp<NTH>(tp, j, nsub, sc, Ts, Ps, tid);
        }
        __syncthreads();
        // ---- K S and Q S (the state before the sub-chunk): X = beta (V - e^G K S), and o's first term e^G Q S ----
        float oa[4] = {0.f, 0.f, 0.f, 0.f};
        {
            // two chains each (even and odd 8-dim steps; dk a multiple of 16), added at the end
            float ks[4] = {0.f, 0.f, 0.f, 0.f}, ks2[4] = {0.f, 0.f, 0.f, 0.f}, oa2[4] = {0.f, 0.f, 0.f, 0.f};
            const float *ka = Ks + r0 * KS + tq, *qa = Qs + r0 * KS + tq, *sb = Ss + tq * DT_SS + 8 * ni + gq;
            for (int k0 = 0; k0 < dk; k0 += 16) {
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    uint32_t kh4[4], kl4[4], qh4[4], ql4[4], bh0, bl0, bh1, bl1;
                    const int k = k0 + 8 * u;
                    dt_frag_a(ka + k, KS, kh4, kl4);
                    dt_frag_a(qa + k, KS, qh4, ql4);
                    tf32_split(sb[k * DT_SS], bh0, bl0);
                    tf32_split(sb[(k + 4) * DT_SS], bh1, bl1);
                    mma3(u ? ks2 : ks, kh4, kl4, bh0, bh1, bl0, bl1);
                    mma3(u ? oa2 : oa, qh4, ql4, bh0, bh1, bl0, bl1);
                }
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = r0 + 8 * (e >> 1);
                float *xp = Xs + i * DT_SS + cc + (e & 1);
                *xp = Bs[i] * (*xp - eG[i] * (ks[e] + ks2[e]));
                oa[e] = eG[i] * (oa[e] + oa2[e]);
            }
        }
        __syncthreads();
        // ---- V' = T X ----
        {
            float vn[4] = {0.f, 0.f, 0.f, 0.f};
            dt_tri_mm(Ts, Xs, mi, 8 * ni, gq, tq, vn);
#pragma unroll
            for (int e = 0; e < 4; e++)
                Vn[(r0 + 8 * (e >> 1)) * DT_SS + cc + (e & 1)] = vn[e];
        }
        __syncthreads();
        if (PF) { // X and T are free: the next sub-chunk's V and T
            if (L1 > 0) {
                dt_copy_v<NTH>(vb, C, t1, L1, Xs, tid);
                dt_copy_tp<NTH>(tp, j, nsub, sc + 1, Ts, Ps, 0, tid);
            }
            cp_commit();
        }
        // ---- o += P V' ----
        dt_tri_mm(Ps, Vn, mi, 8 * ni, gq, tq, oa);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = r0 + 8 * h;
            if (i < L)
                *reinterpret_cast<float2 *>(o_all + (size_t)(t0 + i) * nv * dv + (size_t)j * dv + c0 + cc) =
                    make_float2(oa[2 * h], oa[2 * h + 1]);
        }
        if (PF) { // P is free once every warp's P V' is done: the next sub-chunk's
            __syncthreads();
            if (L1 > 0)
                dt_copy_tp<NTH>(tp, j, nsub, sc + 1, Ts, Ps, 1, tid);
            cp_commit();
        }
        // ---- S = e^{G_last} S + K^T diag(e^{G_last - G}) V': A[d][i] = K[i][d], B[i][c] = e^{G_L - G_i} V'[i][c] ----
        {
            const float el = eG[L - 1];
            const int kend = (L + 7) & ~7; // rows past L: K and V' zero
            // the warp's two tiles (dims 16 mi .. and 16 (mi + 4) ..) share B and run as two chains
            const bool two = 16 * (mi + 4) < dk;
            if (16 * mi < dk) {
                float *sp = Ss + (16 * mi + gq) * DT_SS + cc, *sp2 = sp + 64 * DT_SS;
                float sa[4] = {el * sp[0], el * sp[1], el * sp[8 * DT_SS], el * sp[8 * DT_SS + 1]};
                float sb2[4] = {0.f, 0.f, 0.f, 0.f};
                if (two) {
                    sb2[0] = el * sp2[0], sb2[1] = el * sp2[1];
                    sb2[2] = el * sp2[8 * DT_SS], sb2[3] = el * sp2[8 * DT_SS + 1];
                }
                const float *ka = Ks + tq * KS + 16 * mi + gq, *vb8 = Vn + tq * DT_SS + 8 * ni + gq;
                for (int k0 = 0; k0 < kend; k0 += 8) {
                    uint32_t ah[4], al[4], bh0, bl0, bh1, bl1;
                    const float *a = ka + k0 * KS;
                    tf32_split(vb8[k0 * DT_SS] * eK[k0 + tq], bh0, bl0);
                    tf32_split(vb8[(k0 + 4) * DT_SS] * eK[k0 + tq + 4], bh1, bl1);
                    tf32_split(a[0], ah[0], al[0]);
                    tf32_split(a[8], ah[1], al[1]);
                    tf32_split(a[4 * KS], ah[2], al[2]);
                    tf32_split(a[4 * KS + 8], ah[3], al[3]);
                    mma3(sa, ah, al, bh0, bh1, bl0, bl1);
                    if (two) {
                        tf32_split(a[64], ah[0], al[0]);
                        tf32_split(a[72], ah[1], al[1]);
                        tf32_split(a[4 * KS + 64], ah[2], al[2]);
                        tf32_split(a[4 * KS + 72], ah[3], al[3]);
                        mma3(sb2, ah, al, bh0, bh1, bl0, bl1);
                    }
                }
                sp[0] = sa[0], sp[1] = sa[1], sp[8 * DT_SS] = sa[2], sp[8 * DT_SS + 1] = sa[3];
                if (two)
                    sp2[0] = sb2[0], sp2[1] = sb2[1], sp2[8 * DT_SS] = sb2[2], sp2[8 * DT_SS + 1] = sb2[3];
            }
        }
    }
    if (PF)
        cp_wait<0>(); // nothing left in flight (the last sub-chunk's copies are empty groups)
    __syncthreads();
    dc_state_copy<true, NTH>(S, dv, Ss, DT_SS, dk, tid);
}

// ---- mixture of experts ----

// dev_route's softmax for token blockIdx.x (a block of 256 threads, as there, so the
// probabilities are the same floats): softmax over E router logits, the top
// k (ties to the lower index) sorted by expert index, weights renormalized
// if asked. Where no candidate compares (NaN logits) the lowest free expert
// is taken, so that idx always names an expert.
#define PT_MAXK 64
__global__ void k_pf_topk(const float *logits_all, int E, int k, int norm, int32_t *idx_all, float *w_all)
{
    extern __shared__ float pt_p[]; // [E]
    __shared__ int chosen[PT_MAXK];
    __shared__ float cw[PT_MAXK];
    __shared__ float wv[32];
    __shared__ int wi[32];
    const float *logits = logits_all + (size_t)blockIdx.x * E;
    int32_t *idx = idx_all + (size_t)blockIdx.x * k;
    float *w = w_all + (size_t)blockIdx.x * k;
    float *p = pt_p;
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        mx = fmaxf(mx, logits[e]);
    mx = block_max(mx);
    float sum = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        p[e] = expf(logits[e] - mx);
        sum += p[e];
    }
    sum = block_sum(sum);
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        p[e] /= sum;
    __syncthreads();
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int r = 0; r < k; r++) {
        float bv = -1.0f;
        int bi = 0x7fffffff;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (p[e] > bv || (p[e] == bv && e < bi))
                bv = p[e], bi = e;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi))
                bv = ov, bi = oi;
        }
        if (lane == 0)
            wv[wid] = bv, wi[wid] = bi;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int q = 1; q < nw; q++)
                if (wv[q] > bv || (wv[q] == bv && wi[q] < bi))
                    bv = wv[q], bi = wi[q];
            if (bi < 0 || bi >= E) { // nothing compared: the lowest expert not taken
                bi = 0;
                for (bool taken = true; taken && bi < E;) {
                    taken = false;
                    for (int q = 0; q < r; q++)
                        taken |= chosen[q] == bi;
                    bi += taken;
                }
                bi = bi < E ? bi : E - 1;
            }
            chosen[r] = bi;
            cw[r] = p[bi];
            p[bi] = -2.0f; // taken
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        for (int i = 1; i < k; i++) // by expert index
            for (int q = i; q > 0 && chosen[q - 1] > chosen[q]; q--) {
                int t = chosen[q];
                chosen[q] = chosen[q - 1];
                chosen[q - 1] = t;
                float tw = cw[q];
                cw[q] = cw[q - 1];
                cw[q - 1] = tw;
            }
        float tot = 0;
        for (int i = 0; i < k; i++)
            tot += cw[i];
        for (int i = 0; i < k; i++) {
            idx[i] = chosen[i];
            w[i] = norm ? cw[i] / tot : cw[i];
        }
    }
}

// The (token, slot) pairs grouped by expert, a block an expert (e =
// blockIdx.x), all in parallel: the expert's offset is the number of
// entries naming a lower expert, then the block walks the tokens in order,
// PG_T at a time, and places those that chose e by ballots and a scan of
// the warps' counts, so the order is the tokens' whatever the schedule.
// pair_tok[i]: the token (x row) of pair i; tok_pair[t * k + s]: the pair
// of token t's slot s. No atomics.
// dup (gate and up in one product): the pairs again as 2E virtual
// experts, expert E + e's at P + offsets[e] with P the pairs in all
// (offsets [2E + 1], pair_tok [2P]: the second half the first's copy).
#define PG_T 256
__global__ void __launch_bounds__(PG_T) k_pf_moe_group(const int32_t *idx, int n, int k, int E, int32_t *offsets,
                                                       int32_t *pair_tok, int32_t *tok_pair, int dup)
{
    __shared__ int wc[PG_T / 32], wa[PG_T / 32];
    const int e = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int below = 0, all = 0;
    for (int i = tid; i < n * k; i += PG_T) {
        const int v = idx[i];
        below += v >= 0 && v < e;
        all += v >= 0 && v < E;
    }
    for (int o = 16; o; o >>= 1) {
        below += __shfl_xor_sync(0xffffffffu, below, o);
        all += __shfl_xor_sync(0xffffffffu, all, o);
    }
    if (lane == 0)
        wc[warp] = below, wa[warp] = all;
    __syncthreads();
    int base = 0, P = 0;
    for (int w = 0; w < PG_T / 32; w++)
        base += wc[w], P += wa[w];
    if (tid == 0) {
        offsets[e] = base;
        if (dup)
            offsets[E + e] = P + base;
    }
    for (int t0 = 0; t0 < n; t0 += PG_T) {
        __syncthreads(); // wc is read
        const int t = t0 + tid;
        int slot = -1;
        if (t < n)
            for (int s = 0; s < k; s++)
                if (idx[(size_t)t * k + s] == e)
                    slot = s;
        const unsigned m = __ballot_sync(0xffffffffu, slot >= 0);
        if (lane == 0)
            wc[warp] = __popc(m);
        __syncthreads();
        int before = 0, tot = 0;
        for (int w = 0; w < PG_T / 32; w++) {
            before += w < warp ? wc[w] : 0;
            tot += wc[w];
        }
        if (slot >= 0) {
            const int at = base + before + __popc(m & ((1u << lane) - 1u));
            pair_tok[at] = t;
            if (dup)
                pair_tok[P + at] = t;
            tok_pair[(size_t)t * k + slot] = at;
        }
        base += tot;
    }
    if (e == E - 1 && tid == 0) {
        offsets[E] = base;
        if (dup)
            offsets[2 * E] = 2 * base;
    }
}

// Token blockIdx.x: x += sum over its k slots (expert-index order) of w *
// the expert's output row, then + sigmoid(dot(gate_inp, xn)) sh when sh is
// set: k_moe_sum_norm's order (experts by index, then the shared one).
__global__ void k_pf_moe_sum(float *x_all, const float *ex, const float *w_all, const int32_t *tok_pair, int k,
                             const float *sh_all, const float *gate_inp, const float *xn_all, int E)
{
    __shared__ int tp[PT_MAXK];
    __shared__ float tw[PT_MAXK];
    const size_t t = blockIdx.x;
    float *x = x_all + t * E;
    const float *xn = xn_all + t * E;
    const float *sh = sh_all ? sh_all + t * E : nullptr;
    if ((int)threadIdx.x < k) {
        tp[threadIdx.x] = tok_pair[t * k + threadIdx.x];
        tw[threadIdx.x] = w_all[t * k + threadIdx.x];
    }
    __syncthreads();
    float gsh = 0;
    if (sh) {
        float d = 0;
        for (int i = threadIdx.x; i < E; i += blockDim.x)
            d += gate_inp[i] * xn[i];
        gsh = sigmoidf_(block_sum(d));
    }
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float o = 0;
        for (int i = 0; i < k; i++)
            o += tw[i] * ex[(size_t)tp[i] * E + e];
        if (sh)
            o += gsh * sh[e];
        x[e] += o;
    }
}

} // namespace

extern "C" void lilac_cuda_pf_norm_rope(float *v, const float *w, int n_heads, int step, long long tok_stride, int hd,
                                        int rot, int pos0, float theta, float eps, int n, lilac_cuda_stream *s)
{
    if (n < 1 || n_heads < 1)
        return;
    k_pf_norm_rope<<<dim3((unsigned)n_heads, (unsigned)n), 128, 0, CS(s)>>>(v, w, step, tok_stride, hd, rot, pos0,
                                                                            theta, eps);
}

extern "C" int lilac_cuda_pf_attention_supported(int hd) { return hd >= 4 && hd % 4 == 0 && hd <= PA_MAX_HD; }

extern "C" int lilac_cuda_pf_attention(const float *q, int q_step, long long q_tok, const float *K, const float *V,
                                       int n_head, int n_head_kv, int hd, int pos0, int n, float *out, int gated,
                                       lilac_cuda_stream *s)
{
    if (lilac_cuda_attn_mma_enabled() &&
        lilac_cuda_pf_attention_mma(q, q_step, q_tok, K, V, n_head, n_head_kv, hd, pos0, n, out, gated, s) == 0)
        return 0;
    return lilac_cuda_pf_attention_simt(q, q_step, q_tok, K, V, n_head, n_head_kv, hd, pos0, n, out, gated, s);
}

extern "C" int lilac_cuda_pf_attention_simt(const float *q, int q_step, long long q_tok, const float *K,
                                            const float *V, int n_head, int n_head_kv, int hd, int pos0, int n,
                                            float *out, int gated, lilac_cuda_stream *s)
{
    if (!lilac_cuda_pf_attention_supported(hd) || n_head_kv < 1 || n_head % n_head_kv || n < 1 || pos0 < 0)
        return -1;
    const cudaStream_t st = CS(s);
    const int need = (PA_BQ * hd + PA_THREADS - 1) / PA_THREADS; // output elements a thread
    if (need <= 2)
        launch_attention<2>(q, q_step, q_tok, K, V, n_head, n_head_kv, hd, pos0, n, out, gated, st);
    else if (need <= 4)
        launch_attention<4>(q, q_step, q_tok, K, V, n_head, n_head_kv, hd, pos0, n, out, gated, st);
    else if (need <= 8)
        launch_attention<8>(q, q_step, q_tok, K, V, n_head, n_head_kv, hd, pos0, n, out, gated, st);
    else if (need <= 16)
        launch_attention<16>(q, q_step, q_tok, K, V, n_head, n_head_kv, hd, pos0, n, out, gated, st);
    else
        launch_attention<32>(q, q_step, q_tok, K, V, n_head, n_head_kv, hd, pos0, n, out, gated, st);
    return 0;
}

extern "C" void lilac_cuda_pf_conv(const float *in, float *state, const float *w, float *out, int C, int K, int n,
                                   lilac_cuda_stream *s)
{
    if (n < 1 || C < 1 || K < 1)
        return;
    const dim3 grid((unsigned)((C + 255) / 256), (unsigned)((n + PC_T - 1) / PC_T));
    k_pf_conv<<<grid, 256, 0, CS(s)>>>(in, state, w, out, C, K, n);
    if (K > 1)
        k_pf_conv_state<<<(C + 255) / 256, 256, 0, CS(s)>>>(in, state, C, K, n);
}

namespace {

// T and P of value head blockIdx.x's sub-chunk blockIdx.y (k_pf_dn_chunk<true>'s), into tp: [nv][nsub] of T then
// P, [DC_L][DC_L] each. They depend on q, k, g and beta alone: computed once a head and all sub-chunks at once,
// instead of serially in each of a head's dv / DC_BC blocks (session 10's profile: the chunked kernel 285 us a
// layer at pp512, one block an SM, about 40 % of its arithmetic this part).
__global__ void __launch_bounds__(DC_T, 2)
    k_pf_dn_tp(const float *conv, int C, const float *g, const float *beta, int nk, int nv, int dk, int tiled, int n,
               float *tp)
{
    extern __shared__ float4 dt_sh4[];
    const int KS = dk + 4;
    float *const Ks = reinterpret_cast<float *>(dt_sh4); // [DC_L][KS]
    float *const Qs = Ks + DC_L * KS;                     // [DC_L][KS]
    float *const Ts = Qs + DC_L * KS;                     // [DC_L][DC_TS]
    float *const Ps = Ts + DC_L * DC_TS;                  // [DC_L][DC_TS]
    float *const Ms = Ps + DC_L * DC_TS;                  // [16][DC_XS]
    float *const Gs = Ms + 16 * DC_XS, *const eG = Gs + DC_L, *const eK = eG + DC_L, *const Bs = eK + DC_L;
    const int j = blockIdx.x, sc = blockIdx.y, t0 = sc * DC_L, L = min(DC_L, n - t0), tid = threadIdx.x;
    const int kh = tiled ? j % nk : j / (nv / nk);
    dc_stage_qk(conv + (size_t)kh * dk, conv + (size_t)(nk + kh) * dk, C, t0, L, dk, Qs, Ks, KS, tid);
    dc_stage_gb(g, beta, nv, j, t0, L, Gs, eG, eK, Bs, tid);
    __syncthreads();
    dc_tp(Ks, Qs, KS, dk, Gs, Bs, Ts, Ps, Ms, tid >> 4, tid & 15, tid);
    float4 *dst = reinterpret_cast<float4 *>(tp + dc_tp_slice(j, gridDim.y, sc));
#pragma unroll
    for (int u = 0; u < DC_TP_U(DC_T); u++)
        dst[tid + u * DC_T] = *dc_tp_smem(Ts, Ps, tid + u * DC_T);
}

} // namespace

/* k_pf_dn_chunk<true> on 2 DC_T threads (the same bits): pp512 9,423 against 9,385, pp4096 10,628 against
 * 10,598 (H200, alternated in one call, session 12). LILAC_CUDA_DN_WIDE=0: on DC_T. Read once. */
static bool dn_wide()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_DN_WIDE", true);
}

/* LILAC_CUDA_DN_TC=0: the chunked delta rule with T and P first on the CUDA cores (k_pf_dn_chunk<true>), not the
 * tensor cores (k_pf_dn_chunk_tc, dk <= 128 and a multiple of 16). On: test_cuda_dn's timing (512 tokens, 32 heads
 * of 128 x 128) 143.0 us against 175.0; pp4096 13,359/13,377 against 12,981/12,972, pp512 10,844/10,891 against
 * 10,663/10,666 (H200, alternated in one call, session 19). */
extern "C" int lilac_cuda_dn_tc_enabled(void)
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_DN_TC", true);
}

/* LILAC_CUDA_DN_PF=0: k_pf_dn_chunk_tc stages each sub-chunk after the one before (q, k, V, the gates, T and P
 * loaded, then a barrier), instead of copying it while the one before is computed. On: test_cuda_dn's timing
 * 143.0 us against 147.8; pp4096 13,359/13,377 against 13,251/13,260, pp512 the same (H200, session 19). Read
 * once. */
static bool dn_pf()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_DN_PF", true);
}

/* LILAC_CUDA_DN_DK=0: k_pf_dn_chunk_tc with dk at run time for dk 128 too (on: its instance for 128, the loops over
 * dk unrolled; ncu had the kernel issue-bound, 3.4 k instructions a warp a sub-chunk). Written in session 19
 * without a GPU run. Read once. */
static bool dn_dk128()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_DN_DK", true);
}

// The chunked kernel for this shape, or -1 (nothing launched) where it does not take it: dk and dv multiples
// of 32, dk <= DC_MAXDK, q, k and v rows float4-aligned, the shared memory granted.
static int launch_dn_chunk(float *S, const float *conv, int C, const float *g, const float *beta, float *o, int nk,
                           int nv, int dk, int dv, int tiled, int n, float *tp, cudaStream_t st)
{
    if (dk < 32 || dk % 32 || dk > DC_MAXDK || dv < DC_BC || dv % DC_BC || C % 4 ||
        ((uintptr_t)conv & 15) != 0 || ((uintptr_t)tp & 15) != 0)
        return -1;
    // The kernels that take this call, fastest first; the first whose shared memory the device grants runs (a
    // device with less than the 207 KB of the prefetching one gets the next, not the recurrent form).
    using Kern = void (*)(float *, const float *, int, const float *, const float *, float *, int, int, int, int, int,
                          int, const float *, int);
    struct Cand {
        Kern k;
        size_t smem;
        int threads;
        bool tp;
    } cand[5];
    int nc = 0;
    const bool tc = tp && dk <= DT_MAXDK && dk % 16 == 0 && lilac_cuda_dn_tc_enabled();
    const bool dk128 = dk == 128 && dn_dk128();
    if (tc && dn_pf())
        cand[nc++] = {dk128 ? k_pf_dn_chunk_tc<true, 128> : k_pf_dn_chunk_tc<true, 0>, dn_tc_smem(dk, true), 2 * DC_T,
                      true};
    if (tc)
        cand[nc++] = {dk128 ? k_pf_dn_chunk_tc<false, 128> : k_pf_dn_chunk_tc<false, 0>, dn_tc_smem(dk, false),
                      2 * DC_T, true};
    if (tp && dn_wide())
        cand[nc++] = {k_pf_dn_chunk<true, 2 * DC_T>, dn_chunk_smem(dk), 2 * DC_T, true};
    if (tp)
        cand[nc++] = {k_pf_dn_chunk<true>, dn_chunk_smem(dk), DC_T, true};
    cand[nc++] = {k_pf_dn_chunk<false>, dn_chunk_smem(dk), DC_T, false};
    const size_t smem_tp = dn_tp_smem(dk);
    const bool tp_ok = tp && (smem_tp <= 48 * 1024 || cudaFuncSetAttribute(k_pf_dn_tp,
                                                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                             (int)smem_tp) == cudaSuccess);
    (void)cudaGetLastError();
    const Cand *c = nullptr;
    for (int i = 0; i < nc && !c; i++) {
        if (cand[i].tp && !tp_ok)
            continue;
        if (cand[i].smem <= 48 * 1024 ||
            cudaFuncSetAttribute(cand[i].k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cand[i].smem) ==
                cudaSuccess)
            c = &cand[i];
        (void)cudaGetLastError();
    }
    if (!c)
        return -1;
    const int nsub = (n + DC_L - 1) / DC_L;
    if (c->tp)
        k_pf_dn_tp<<<dim3((unsigned)nv, (unsigned)nsub), DC_T, smem_tp, st>>>(conv, C, g, beta, nk, nv, dk, tiled, n,
                                                                             tp);
    const dim3 grid((unsigned)nv, (unsigned)(dv / DC_BC));
    c->k<<<grid, c->threads, c->smem, st>>>(S, conv, C, g, beta, o, nk, nv, dk, dv, tiled, n, c->tp ? tp : nullptr,
                                            nsub);
    return 0;
}

extern "C" int lilac_cuda_pf_deltanet_form(float *conv_out, int C, float *a, float *b, const float *ssm_a,
                                           const float *ssm_dt, float *S, float *o, const float *z,
                                           const float *norm_w, int nk, int nv, int dk, int dv, int tiled, float eps,
                                           int n, int chunked, float *tp, lilac_cuda_stream *s)
{
    if (n < 1)
        return 0;
    const cudaStream_t st = CS(s);
    if (pf_warp_norm() && dk % 4 == 0 && dk <= 512 && C % 4 == 0 && ((uintptr_t)conv_out & 15) == 0) {
        const unsigned grid = (unsigned)(((long long)2 * nk * n + 7) / 8);
        norm_row_warp_nq(dk, [&](auto nq) {
            k_pf_dn_qk_norm_warp<decltype(nq)::value><<<grid, 256, 0, st>>>(conv_out, C, nk, dk, n);
        });
    } else {
        k_pf_dn_qk_norm<<<dim3((unsigned)nk, (unsigned)n), 128, 0, st>>>(conv_out, C, nk, dk);
    }
    k_pf_dn_gates<<<(n * nv + 127) / 128, 128, 0, st>>>(a, b, ssm_a, ssm_dt, nv, n * nv);
    int took = 0;
    if (chunked && launch_dn_chunk(S, conv_out, C, a, b, o, nk, nv, dk, dv, tiled, n, tp, st) == 0) {
        took = 1;
    } else if (dv % PD_BC == 0 && dk <= PD_LPC * PD_ROWS) {
        int tt = PD_TT;
        while (tt > 1 && sizeof(float) * ((size_t)2 * tt * dk + (size_t)tt * PD_BC + 3 * tt) > 48 * 1024)
            tt /= 2;
        const size_t smem = sizeof(float) * ((size_t)2 * tt * dk + (size_t)tt * PD_BC + 3 * tt);
        const dim3 grid((unsigned)nv, (unsigned)(dv / PD_BC));
        static int kq = -1; /* LILAC_CUDA_DN_KQ=0: the two-pass form, to compare */
        if (kq < 0)
            kq = lilac_env_switch("LILAC_CUDA_DN_KQ", true);
        auto kern = dk <= 16 * PD_LPC ? (kq ? k_pf_dn_recurrent<16, true> : k_pf_dn_recurrent<16, false>)
                                      : (kq ? k_pf_dn_recurrent<PD_ROWS, true> : k_pf_dn_recurrent<PD_ROWS, false>);
        kern<<<grid, 32 * PD_NW, smem, st>>>(S, conv_out, C, a, b, o, nk, nv, dk, dv, tiled, n, tt);
    } else {
        const int threads = dv < 32 ? 32 : (dv + 31) / 32 * 32;
        k_pf_dn_recurrent1<<<nv, threads, (size_t)2 * dk * sizeof(float), st>>>(S, conv_out, C, a, b, o, nk, nv, dk,
                                                                               dv, tiled, n);
    }
    if (norm_w)
        lilac_cuda_gated_norm(o, z, norm_w, n * nv, dv, eps, s);
    return took;
}

extern "C" void lilac_cuda_pf_split_cols(const float *ab, int w, float *a, float *b, int n, lilac_cuda_stream *s)
{
    const long long total = (long long)n * w;
    if (total > 0)
        k_pf_split_cols<<<(unsigned)((total + 255) / 256), 256, 0, CS(s)>>>(ab, w, a, b, total);
}

extern "C" void lilac_cuda_pf_deltanet(float *conv_out, int C, float *a, float *b, const float *ssm_a,
                                       const float *ssm_dt, float *S, float *o, const float *z, const float *norm_w,
                                       int nk, int nv, int dk, int dv, int tiled, float eps, int n, float *tp,
                                       lilac_cuda_stream *s)
{
    /* the chunked form (k_pf_dn_chunk), for DC_MIN_TOKENS tokens or more: a sub-chunk costs about what 10 - 15
     * tokens of the recurrent kernel do, whatever its length. pp512 6,168 tok/s against 5,828 with the
     * recurrent form (H200, 2026-11-30). LILAC_CUDA_DN_CHUNK=0: the recurrent form for every length. */
    static int chunked = -1;
    if (chunked < 0)
        chunked = lilac_env_switch("LILAC_CUDA_DN_CHUNK", true);
    (void)lilac_cuda_pf_deltanet_form(conv_out, C, a, b, ssm_a, ssm_dt, S, o, z, norm_w, nk, nv, dk, dv, tiled, eps,
                                      n, chunked && n >= DC_MIN_TOKENS, tp, s);
}

extern "C" int lilac_cuda_pf_moe_supported(int n_expert, int k)
{
    return k >= 1 && k <= PT_MAXK && k <= n_expert && (size_t)(n_expert + 1) * sizeof(int) <= 48 * 1024;
}

extern "C" void lilac_cuda_pf_topk(const float *logits, int E, int k, int norm, int n, int32_t *idx, float *w,
                                   lilac_cuda_stream *s)
{
    if (n < 1 || !lilac_cuda_pf_moe_supported(E, k))
        return;
    k_pf_topk<<<n, 256, (size_t)E * sizeof(float), CS(s)>>>(logits, E, k, norm, idx, w);
}

extern "C" void lilac_cuda_pf_moe_group(const int32_t *idx, int n, int k, int E, int32_t *offsets, int32_t *pair_tok,
                                        int32_t *tok_pair, lilac_cuda_stream *s)
{
    if (n < 1 || !lilac_cuda_pf_moe_supported(E, k))
        return;
    k_pf_moe_group<<<E, PG_T, 0, CS(s)>>>(idx, n, k, E, offsets, pair_tok, tok_pair, 0);
}

extern "C" void lilac_cuda_pf_moe_group_gu(const int32_t *idx, int n, int k, int E, int32_t *offsets,
                                           int32_t *pair_tok, int32_t *tok_pair, lilac_cuda_stream *s)
{
    if (n < 1 || !lilac_cuda_pf_moe_supported(E, k))
        return;
    k_pf_moe_group<<<E, PG_T, 0, CS(s)>>>(idx, n, k, E, offsets, pair_tok, tok_pair, 1);
}

/* Pair i = t k + j (token t's j-th expert) gets token t's row of x; tok_pair the identity. */
__global__ void k_pf_pair_rows(const float *x, int k, int E, float *xp, int32_t *tok_pair)
{
    const size_t i = blockIdx.x, t = i / (size_t)k;
    if (threadIdx.x == 0)
        tok_pair[i] = (int32_t)i;
    const float4 *src = reinterpret_cast<const float4 *>(x + t * E);
    float4 *dst = reinterpret_cast<float4 *>(xp + i * E);
    for (int e = threadIdx.x; e < E / 4; e += blockDim.x)
        dst[e] = src[e];
}

extern "C" void lilac_cuda_pf_pair_rows(const float *x, int n, int k, int E, float *xp, int32_t *tok_pair,
                                        lilac_cuda_stream *s)
{
    if (n < 1 || k < 1 || E % 4)
        return;
    k_pf_pair_rows<<<n * k, 256, 0, CS(s)>>>(x, k, E, xp, tok_pair);
}

extern "C" void lilac_cuda_pf_moe_sum(float *x, const float *ex, const float *w, const int32_t *tok_pair, int k,
                                      const float *sh, const float *gate_inp, const float *xn, int E, int n,
                                      lilac_cuda_stream *s)
{
    if (n < 1 || k < 0 || k > PT_MAXK)
        return;
    k_pf_moe_sum<<<n, 1024, 0, CS(s)>>>(x, ex, w, tok_pair, k, sh, gate_inp, xn, E);
}
