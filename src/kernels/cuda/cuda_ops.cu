// cuda_ops: the model's elementwise and per-head operations on the GPU
// (norms, rotary, attention, the Gated DeltaNet step, routing, gating), as
// the CPU decoder computes them (src/model/decoder.c is the reference).
// Matrix products are cuda_quant.cu's.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/cuda/cuda.h"

#define CS(s) ((cudaStream_t)(s))

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The sum (or max) over a block of up to 1024 threads; every thread gets it.
static __device__ float block_sum(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (w == 0) {
        float s = lane < (int)((blockDim.x + 31) >> 5) ? part[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0)
            total = s;
    }
    __syncthreads();
    return total;
}

static __device__ float block_max(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (w == 0) {
        float s = lane < (int)((blockDim.x + 31) >> 5) ? part[lane] : -INFINITY;
        s = warp_max(s);
        if (lane == 0)
            total = s;
    }
    __syncthreads();
    return total;
}

static __device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
static __device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// ---- norms ----

// y = x / sqrt(mean(x^2) + eps) * w (w may be NULL), one block per row.
__global__ void k_rmsnorm(const float *x, const float *w, float *y, int n, float eps)
{
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss);
    float r = rsqrtf(ss / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = xr[i] * r * (w ? w[i] : 1.0f);
}

extern "C" void lilac_cuda_rmsnorm(const float *x, const float *w, float *y, int rows, int n, float eps,
                                   lilac_cuda_stream *s)
{
    k_rmsnorm<<<rows, 256, 0, CS(s)>>>(x, w, y, n, eps);
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

// Per head h (block): RMSNorm over hd with w, then NeoX rotary on the first
// rot dims at position pos. Heads are `step` floats apart.
__global__ void k_norm_rope(float *v, const float *w, int step, int hd, int rot, int pos, float theta, float eps)
{
    float *x = v + (size_t)blockIdx.x * step;
    float ss = 0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        ss += x[i] * x[i];
    ss = block_sum(ss);
    float r = rsqrtf(ss / hd + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        x[i] = x[i] * r * w[i];
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

extern "C" void lilac_cuda_norm_rope(float *v, const float *w, int n_heads, int step, int hd, int rot, int pos,
                                     float theta, float eps, lilac_cuda_stream *s)
{
    k_norm_rope<<<n_heads, 128, 0, CS(s)>>>(v, w, step, hd, rot, pos, theta, eps);
}

// One block per query head: scores over n_keys keys into scratch, softmax,
// the weighted sum of values, then the output gate sigmoid(g) if given.
__global__ void k_attention(const float *q, int q_step, const float *K, const float *V, int n_keys, int kvw, int hd,
                            int group, float *out, float *scratch, int scratch_stride, int gated)
{
    int h = blockIdx.x, kvh = h / group;
    const float *qh = q + (size_t)h * q_step;
    float *sc = scratch + (size_t)h * scratch_stride;
    extern __shared__ float qs[];
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        qs[i] = qh[i];
    __syncthreads();
    float scale = rsqrtf((float)hd), mx = -INFINITY;
    // a warp per key: lanes over dims
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int p = wid; p < n_keys; p += nw) {
        const float *k = K + (size_t)p * kvw + (size_t)kvh * hd;
        float d = 0;
        for (int i = lane; i < hd; i += 32)
            d += qs[i] * k[i];
        d = warp_sum(d) * scale;
        if (lane == 0)
            sc[p] = d;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < n_keys; p += blockDim.x)
        mx = fmaxf(mx, sc[p]);
    mx = block_max(mx);
    float sum = 0;
    for (int p = threadIdx.x; p < n_keys; p += blockDim.x) {
        float e = expf(sc[p] - mx);
        sc[p] = e;
        sum += e;
    }
    sum = block_sum(sum);
    float inv = 1.0f / sum;
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0;
        for (int p = 0; p < n_keys; p++)
            o += sc[p] * V[(size_t)p * kvw + (size_t)kvh * hd + d];
        o *= inv;
        if (gated)
            o *= sigmoidf_(qh[hd + d]);
        out[(size_t)h * hd + d] = o;
    }
}

extern "C" void lilac_cuda_attention(const float *q, int q_step, const float *K, const float *V, int n_keys, int n_head,
                                     int n_head_kv, int hd, float *out, float *scratch, int scratch_stride, int gated,
                                     lilac_cuda_stream *s)
{
    k_attention<<<n_head, 256, (size_t)hd * sizeof(float), CS(s)>>>(q, q_step, K, V, n_keys, n_head_kv * hd, hd,
                                                                     n_head / n_head_kv, out, scratch, scratch_stride,
                                                                     gated);
}

// ---- Gated DeltaNet, one token ----

// Causal depthwise conv over time, one thread per channel: the state holds
// the last K-1 inputs; SiLU after.
__global__ void k_conv_step(const float *in, float *state, const float *w, float *out, int C, int K)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    const float *wc = w + (size_t)c * K;
    float s = 0;
    for (int i = 0; i < K - 1; i++)
        s += wc[i] * state[(size_t)i * C + c];
    s += wc[K - 1] * in[c];
    for (int i = 0; i + 1 < K - 1; i++)
        state[(size_t)i * C + c] = state[(size_t)(i + 1) * C + c];
    if (K > 1)
        state[(size_t)(K - 2) * C + c] = in[c];
    out[c] = silu(s);
}

extern "C" void lilac_cuda_conv_step(const float *in, float *state, const float *w, float *out, int C, int K,
                                     lilac_cuda_stream *s)
{
    k_conv_step<<<(C + 255) / 256, 256, 0, CS(s)>>>(in, state, w, out, C, K);
}

// Per key head (block): L2-normalize q and k (x / sqrt(sum x^2 + 1e-6)), q scaled by 1/sqrt(dk).
__global__ void k_dn_qk_norm(float *conv, int nk, int dk)
{
    int h = blockIdx.x;
    for (int which = 0; which < 2; which++) {
        float *x = conv + (size_t)(which * nk + h) * dk;
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

// g = a_log_neg * softplus(a + dt) (the log-decay), beta = sigmoid(b), per value head.
__global__ void k_dn_gates(float *a, float *b, const float *ssm_a, const float *ssm_dt, int nv)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= nv)
        return;
    float x = a[j] + ssm_dt[j];
    float sp = x > 20.0f ? x : log1pf(expf(x));
    a[j] = ssm_a[j] * sp;
    b[j] = sigmoidf_(b[j]);
}

// The recurrent delta rule for value head j (block), a thread per value
// column c: S *= exp(g); S += k (beta (v - S^T k))^T; o = S^T q.
__global__ void k_dn_recurrent(float *S_all, const float *conv, const float *g, const float *beta, float *o_all,
                               int nk, int nv, int dk, int dv, int tiled)
{
    int j = blockIdx.x, c = threadIdx.x;
    int kh = tiled ? j % nk : j / (nv / nk);
    extern __shared__ float sh[]; // q[dk], k[dk]
    float *qs = sh, *ks = sh + dk;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        qs[i] = conv[(size_t)kh * dk + i];
        ks[i] = conv[(size_t)(nk + kh) * dk + i];
    }
    __syncthreads();
    if (c >= dv)
        return;
    float *S = S_all + (size_t)j * dk * dv;
    float v = conv[(size_t)2 * nk * dk + (size_t)j * dv + c];
    float decay = expf(g[j]), kv = 0;
    for (int i = 0; i < dk; i++) {
        float sv = S[(size_t)i * dv + c] * decay;
        S[(size_t)i * dv + c] = sv;
        kv += sv * ks[i];
    }
    float delta = (v - kv) * beta[j], o = 0;
    for (int i = 0; i < dk; i++) {
        float sv = S[(size_t)i * dv + c] + ks[i] * delta;
        S[(size_t)i * dv + c] = sv;
        o += sv * qs[i];
    }
    o_all[(size_t)j * dv + c] = o;
}

// Per value head: RMSNorm(o) * w * silu(z).
__global__ void k_gated_norm(float *o, const float *z, const float *w, int dv, float eps)
{
    float *x = o + (size_t)blockIdx.x * dv;
    const float *zz = z + (size_t)blockIdx.x * dv;
    float ss = 0;
    for (int i = threadIdx.x; i < dv; i += blockDim.x)
        ss += x[i] * x[i];
    ss = block_sum(ss);
    float r = rsqrtf(ss / dv + eps);
    for (int i = threadIdx.x; i < dv; i += blockDim.x)
        x[i] = x[i] * r * w[i] * silu(zz[i]);
}

extern "C" void lilac_cuda_deltanet_step(float *conv_out, float *a, float *b, const float *ssm_a, const float *ssm_dt,
                                         float *S, float *o, const float *z, const float *norm_w, int nk, int nv,
                                         int dk, int dv, int tiled, float eps, lilac_cuda_stream *s)
{
    k_dn_qk_norm<<<nk, 128, 0, CS(s)>>>(conv_out, nk, dk);
    k_dn_gates<<<(nv + 127) / 128, 128, 0, CS(s)>>>(a, b, ssm_a, ssm_dt, nv);
    int threads = dv < 32 ? 32 : (dv + 31) / 32 * 32;
    k_dn_recurrent<<<nv, threads, (size_t)2 * dk * sizeof(float), CS(s)>>>(S, conv_out, a, b, o, nk, nv, dk, dv, tiled);
    k_gated_norm<<<nv, 128, 0, CS(s)>>>(o, z, norm_w, dv, eps);
}

// ---- mixture of experts ----

// Softmax over E router logits, the top k (ties to the lower index), in
// expert-index order as the CPU adds them, weights renormalized if asked.
__global__ void k_topk(const float *logits, int E, int k, int norm, int32_t *idx, float *w)
{
    extern __shared__ float p[]; // [E]
    __shared__ int chosen[64];
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
    if (threadIdx.x == 0) {
        // k rounds of argmax: k and E are small (8 of 256)
        for (int i = 0; i < k; i++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int q = 0; q < i; q++)
                    taken |= chosen[q] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            chosen[i] = best;
        }
        for (int i = 1; i < k; i++) // by expert index
            for (int q = i; q > 0 && chosen[q - 1] > chosen[q]; q--) {
                int t = chosen[q];
                chosen[q] = chosen[q - 1];
                chosen[q - 1] = t;
            }
        float tot = 0;
        for (int i = 0; i < k; i++)
            tot += p[chosen[i]];
        for (int i = 0; i < k; i++) {
            idx[i] = chosen[i];
            w[i] = norm ? p[chosen[i]] / tot : p[chosen[i]];
        }
    }
}

extern "C" void lilac_cuda_topk(const float *logits, int E, int k, int norm, int32_t *idx, float *w,
                                lilac_cuda_stream *s)
{
    k_topk<<<1, 256, (size_t)E * sizeof(float), CS(s)>>>(logits, E, k, norm, idx, w);
}

__global__ void k_swiglu(float *g, const float *u, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        g[i] = silu(g[i]) * u[i];
}

extern "C" void lilac_cuda_swiglu(float *g, const float *u, int n, lilac_cuda_stream *s)
{
    k_swiglu<<<(n + 255) / 256, 256, 0, CS(s)>>>(g, u, n);
}

// x += sum_i w[i] ex[i] (+ sigmoid(dot(gate_inp, xn)) sh when sh is set), one block.
__global__ void k_moe_sum(float *x, const float *ex, const float *w, int k, const float *sh, const float *gate_inp,
                          const float *xn, int E)
{
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
            o += w[i] * ex[(size_t)i * E + e];
        if (sh)
            o += gsh * sh[e];
        x[e] += o;
    }
}

extern "C" void lilac_cuda_moe_sum(float *x, const float *ex, const float *w, int k, const float *sh,
                                   const float *gate_inp, const float *xn, int E, lilac_cuda_stream *s)
{
    k_moe_sum<<<1, 1024, 0, CS(s)>>>(x, ex, w, k, sh, gate_inp, xn, E);
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
