// cuda_attn: the prefill's causal attention on the tensor cores (flash
// attention), at float32 accuracy: both products, S = Q K^T and O += P V,
// run as 3xTF32 — each float32 operand a = a_hi + a_lo with a_hi = tf32(a)
// and a_lo = tf32(a - a_hi), and a b ~= a_lo b_hi + a_hi b_lo + a_hi b_hi
// summed in float32 by mma.sync m16n8k8 (the a_lo b_lo term, ~2^-22 a b, is
// dropped): about 1e-6 relative, what cuBLAS's 3xTF32 mode gives. The
// softmax (running max, expf, sums) is k_pf_attention's, in float32.
//
// A block takes the 64 rows of AT_ROWS / group query tokens x the group of
// query heads of one KV head (row r = token r / group, head r % group), so
// that each K/V tile is read once for the whole group. Four warps of 16
// rows; each keeps its rows' O (16 x hd) in registers as m16n8 accumulator
// fragments, and its scores S (16 x BK) too, whose accumulator layout is
// P's operand layout once the key order inside a k8 slice is permuted (key
// 2t <-> slot t, key 2t+1 <-> slot t + 4): P never goes through shared
// memory. Q (64 x hd) stays in shared memory; K and V tiles of BK keys go
// through one buffer each, loaded with cp.async one phase ahead (K of the
// next tile while this one's softmax and P V run, V of the next while its
// S runs). Within a k8 slice any order of the summed index serves as long
// as both operands agree, which the loads use: a thread's four values of
// head dims 16p + 4t .. + 3 are one 16-byte load (two k8 slices), and P V's
// output columns are permuted so that a thread's V values of four n8 tiles
// are one 16-byte load too; row strides pad to avoid bank conflicts.
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"

#define CS(s) ((cudaStream_t)(s))

namespace {

#define AT_ROWS 64    /* query rows (tokens x heads of the group) a block */
#define AT_THREADS 128 /* four warps of 16 rows */
#define AT_MAX_GROUP 8

// x = hi + lo in tf32 (round to nearest, ties away, as cuBLAS's 3xTF32).
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo)
{
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    const float r = x - __uint_as_float(hi); // exact
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(r));
}

// c += a b, m16n8k8, tf32 operands, float32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a b in 3xTF32: the small terms first, then the big one.
__device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0,
                                     uint32_t bh1, uint32_t bl0, uint32_t bl1)
{
    mma_tf32(c, al, bh0, bh1);
    mma_tf32(c, ah, bl0, bl1);
    mma_tf32(c, ah, bh0, bh1);
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (src must still be a mapped address).
__device__ __forceinline__ void cp16(float *dst, const float *src, bool valid)
{
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's groups are pending.
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Rows BK keys x D of K or V (rows kvw floats apart, head kvh) from key k0 into S (rows ST floats apart); keys
// past n_keys read as zeros.
template <int D, int BK, int ST>
__device__ __forceinline__ void load_kv(float *S, const float *src, int kvw, int kvh, int k0, int n_keys)
{
    constexpr int C4 = D / 4; // 16-byte pieces a row
    for (int i = threadIdx.x; i < BK * C4; i += AT_THREADS) {
        const int r = i / C4, c = i - r * C4, key = k0 + r;
        const bool ok = key < n_keys;
        cp16(S + r * ST + 4 * c, src + (long long)(ok ? key : 0) * kvw + (long long)kvh * D + 4 * c, ok);
    }
}

// Causal attention of the 64 rows of block (blockIdx.x, KV head blockIdx.y) over keys 0 .. pos0 + token, the
// contract of k_pf_attention: query head h = kvh * group + j of token t at q + t * q_tok + h * q_step (its
// gate's D values after it when gated), out[t][h * D + d].
template <int D, int BK>
__global__ void __launch_bounds__(AT_THREADS, 2)
    k_attn_mma(const float *__restrict__ q, int q_step, long long q_tok, const float *__restrict__ K,
               const float *__restrict__ V, int kvw, int group, int pos0, int n, float *__restrict__ out,
               long long out_tok, int gated)
{
    constexpr int SQ = D + 16; // Q and K row strides: = 16 mod 32 floats, 16-byte loads conflict-free
    constexpr int SK = D + 16;
    constexpr int SV = D + 4; // = 4 mod 32: V rows 2t, 2t + 1 of 16-byte loads conflict-free
    constexpr int NT = BK / 8; // key n8 tiles of S = k8 slices of P V
    constexpr int NO = D / 8;  // n8 tiles of O
    static_assert(D % 32 == 0 && BK % 8 == 0, "shape");
    extern __shared__ float4 at_smem4[];
    float *const Qs = reinterpret_cast<float *>(at_smem4); // [AT_ROWS][SQ]
    float *const Ks = Qs + AT_ROWS * SQ;                   // [BK][SK]
    float *const Vs = Ks + BK * SK;                        // [BK][SV]

    const int bq = AT_ROWS / group; // tokens a block
    const int t0 = (int)(gridDim.x - 1 - blockIdx.x) * bq; // the blocks with the most keys first
    const int kvh = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int last = min(t0 + bq, n) - 1; // the block's last token
    const int n_keys = pos0 + last + 1;
    const float scale = rsqrtf((float)D);

    // Q, rows past the block's tokens zero (they see key 0 like every row, and are not written).
    for (int i = tid; i < AT_ROWS * (D / 4); i += AT_THREADS) {
        const int r = i / (D / 4), c = i - r * (D / 4), tq = r / group, j = r - tq * group;
        const bool ok = tq < bq && t0 + tq < n;
        const float *src = ok ? q + (long long)(t0 + tq) * q_tok + (long long)(kvh * group + j) * q_step + 4 * c : q;
        cp16(Qs + r * SQ + 4 * c, src, ok);
    }
    load_kv<D, BK, SK>(Ks, K, kvw, kvh, 0, n_keys);
    cp_commit();
    load_kv<D, BK, SV>(Vs, V, kvw, kvh, 0, n_keys);
    cp_commit();

    // This thread's rows rA (accumulator elements 0, 1) and rB = rA + 8 (2, 3); the last key each sees (rows
    // past the tokens take the block's last token's), and the last any row of the warp sees (rows ascend).
    const int rA = warp * 16 + g, rB = rA + 8;
    const int limA = pos0 + min(t0 + min(rA / group, bq - 1), last);
    const int limB = pos0 + min(t0 + min(rB / group, bq - 1), last);
    const int wlim = pos0 + min(t0 + min((warp * 16 + 15) / group, bq - 1), last);

    float o[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f; // running max; this thread's part of the sum

    for (int k0 = 0; k0 < n_keys; k0 += BK) {
        // Key 0 is in the first tile and every row sees it: a warp that takes part takes part in the first
        // tile, and its maxima are finite from then on. A warp whose rows see no key of a tile skips it.
        const bool active = k0 <= wlim;
        float p[NT][4]; // scores, then probabilities: rows rA (0, 1), rB (2, 3), keys k0 + 8 j + 2 t (+1)
        cp_wait<1>(); // Q and this tile's K
        __syncthreads();
        if (active) {
            float s[2][NT][4]; // even and odd k8 slices apart: more independent accumulators
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[0][j][e] = s[1][j][e] = 0.f;
            const float *qa = Qs + rA * SQ + 4 * t, *qb = Qs + rB * SQ + 4 * t, *kr = Ks + g * SK + 4 * t;
#pragma unroll 2
            for (int c = 0; c < D / 16; c++) {
                // Head dims 16c + 4t + (0, 1) are slice 2c's slots t, t + 4; + (2, 3) slice 2c + 1's.
                const float4 xa = *reinterpret_cast<const float4 *>(qa + 16 * c);
                const float4 xb = *reinterpret_cast<const float4 *>(qb + 16 * c);
                uint32_t ah0[4], al0[4], ah1[4], al1[4];
                tf32_split(xa.x, ah0[0], al0[0]);
                tf32_split(xb.x, ah0[1], al0[1]);
                tf32_split(xa.y, ah0[2], al0[2]);
                tf32_split(xb.y, ah0[3], al0[3]);
                tf32_split(xa.z, ah1[0], al1[0]);
                tf32_split(xb.z, ah1[1], al1[1]);
                tf32_split(xa.w, ah1[2], al1[2]);
                tf32_split(xb.w, ah1[3], al1[3]);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const float4 y = *reinterpret_cast<const float4 *>(kr + j * 8 * SK + 16 * c); // key 8 j + g
                    uint32_t bh0, bl0, bh1, bl1;
                    tf32_split(y.x, bh0, bl0);
                    tf32_split(y.y, bh1, bl1);
                    mma3(s[0][j], ah0, al0, bh0, bh1, bl0, bl1);
                    tf32_split(y.z, bh0, bl0);
                    tf32_split(y.w, bh1, bl1);
                    mma3(s[1][j], ah1, al1, bh0, bh1, bl0, bl1);
                }
            }
            // Scale and mask: key k0 + 8 j + 2 t + (e & 1) of row rA (e < 2) or rB.
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + 8 * j + 2 * t + (e & 1);
                    const float d = s[0][j][e] + s[1][j][e];
                    p[j][e] = key <= (e < 2 ? limA : limB) ? d * scale : -INFINITY;
                }
        }
        __syncthreads(); // every warp is done with Ks
        if (k0 + BK < n_keys)
            load_kv<D, BK, SK>(Ks, K, kvw, kvh, k0 + BK, n_keys);
        cp_commit();
        if (active) {
            // The online softmax of k_pf_attention, a row's four threads (same g) reducing by shuffles.
            float xA = -INFINITY, xB = -INFINITY;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                xA = fmaxf(xA, fmaxf(p[j][0], p[j][1]));
                xB = fmaxf(xB, fmaxf(p[j][2], p[j][3]));
            }
            xA = fmaxf(xA, __shfl_xor_sync(0xffffffffu, xA, 1));
            xB = fmaxf(xB, __shfl_xor_sync(0xffffffffu, xB, 1));
            xA = fmaxf(xA, __shfl_xor_sync(0xffffffffu, xA, 2));
            xB = fmaxf(xB, __shfl_xor_sync(0xffffffffu, xB, 2));
            const float nA = fmaxf(mA, xA), nB = fmaxf(mB, xB);
            const float aA = mA == -INFINITY ? 0.f : expf(mA - nA);
            const float aB = mB == -INFINITY ? 0.f : expf(mB - nB);
            mA = nA, mB = nB;
            float sA = 0.f, sB = 0.f;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                p[j][0] = p[j][0] == -INFINITY ? 0.f : expf(p[j][0] - nA);
                p[j][1] = p[j][1] == -INFINITY ? 0.f : expf(p[j][1] - nA);
                p[j][2] = p[j][2] == -INFINITY ? 0.f : expf(p[j][2] - nB);
                p[j][3] = p[j][3] == -INFINITY ? 0.f : expf(p[j][3] - nB);
                sA += p[j][0] + p[j][1];
                sB += p[j][2] + p[j][3];
            }
            lA = lA * aA + sA;
            lB = lB * aB + sB;
#pragma unroll
            for (int i = 0; i < NO; i++) {
                o[i][0] *= aA;
                o[i][1] *= aA;
                o[i][2] *= aB;
                o[i][3] *= aB;
            }
        }
        cp_wait<1>(); // this tile's V (the next K may be pending)
        __syncthreads();
        if (active) {
#pragma unroll
            for (int j = 0; j < NT; j++) {
                // P's k8 slice j as the A operand: slot t = key 2t (accumulator elements 0, 2), slot t + 4 =
                // key 2t + 1 (1, 3); V rows k0 + 8 j + 2 t and + 1 are the B operand's slots t and t + 4.
                uint32_t ph[4], pl[4];
                tf32_split(p[j][0], ph[0], pl[0]);
                tf32_split(p[j][2], ph[1], pl[1]);
                tf32_split(p[j][1], ph[2], pl[2]);
                tf32_split(p[j][3], ph[3], pl[3]);
                const float *v0 = Vs + (8 * j + 2 * t) * SV + 4 * g, *v1 = v0 + SV;
#pragma unroll
                for (int c = 0; c < D / 32; c++) {
                    // O's n8 tile 4c + i, column g, is head dim 32c + 4g + i.
                    const float4 y0 = *reinterpret_cast<const float4 *>(v0 + 32 * c);
                    const float4 y1 = *reinterpret_cast<const float4 *>(v1 + 32 * c);
                    uint32_t bh0, bl0, bh1, bl1;
                    tf32_split(y0.x, bh0, bl0);
                    tf32_split(y1.x, bh1, bl1);
                    mma3(o[4 * c + 0], ph, pl, bh0, bh1, bl0, bl1);
                    tf32_split(y0.y, bh0, bl0);
                    tf32_split(y1.y, bh1, bl1);
                    mma3(o[4 * c + 1], ph, pl, bh0, bh1, bl0, bl1);
                    tf32_split(y0.z, bh0, bl0);
                    tf32_split(y1.z, bh1, bl1);
                    mma3(o[4 * c + 2], ph, pl, bh0, bh1, bl0, bl1);
                    tf32_split(y0.w, bh0, bl0);
                    tf32_split(y1.w, bh1, bl1);
                    mma3(o[4 * c + 3], ph, pl, bh0, bh1, bl0, bl1);
                }
            }
        }
        __syncthreads(); // every warp is done with Vs
        if (k0 + BK < n_keys)
            load_kv<D, BK, SV>(Vs, V, kvw, kvh, k0 + BK, n_keys);
        cp_commit();
    }
    cp_wait<0>();

    // The row sums over the row's four threads; then o / l (times the gate). Accumulator elements (i, 0) and
    // (i, 1) of n8 tile 4c + i are row rA's head dims 32c + 8t + i and 32c + 8t + 4 + i; (i, 2), (i, 3) row rB's.
    lA += __shfl_xor_sync(0xffffffffu, lA, 1);
    lB += __shfl_xor_sync(0xffffffffu, lB, 1);
    lA += __shfl_xor_sync(0xffffffffu, lA, 2);
    lB += __shfl_xor_sync(0xffffffffu, lB, 2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? rB : rA, tq = r / group, j = r - tq * group;
        if (tq >= bq || t0 + tq >= n)
            continue;
        const float l = half ? lB : lA;
        const int h = kvh * group + j;
        float *orow = out + (long long)(t0 + tq) * out_tok + (long long)h * D + 8 * t;
        const float *gate = q + (long long)(t0 + tq) * q_tok + (long long)h * q_step + D + 8 * t;
#pragma unroll
        for (int c = 0; c < D / 32; c++) {
            float v[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                v[i] = o[4 * c + i][2 * half] / l;
                v[4 + i] = o[4 * c + i][2 * half + 1] / l;
            }
            if (gated) {
                const float4 g0 = *reinterpret_cast<const float4 *>(gate + 32 * c);
                const float4 g1 = *reinterpret_cast<const float4 *>(gate + 32 * c + 4);
                v[0] *= sigmoidf_(g0.x), v[1] *= sigmoidf_(g0.y), v[2] *= sigmoidf_(g0.z), v[3] *= sigmoidf_(g0.w);
                v[4] *= sigmoidf_(g1.x), v[5] *= sigmoidf_(g1.y), v[6] *= sigmoidf_(g1.z), v[7] *= sigmoidf_(g1.w);
            }
            *reinterpret_cast<float4 *>(orow + 32 * c) = make_float4(v[0], v[1], v[2], v[3]);
            *reinterpret_cast<float4 *>(orow + 32 * c + 4) = make_float4(v[4], v[5], v[6], v[7]);
        }
    }
}

template <int D, int BK>
int launch_attn_mma(const float *q, int q_step, long long q_tok, const float *K, const float *V, int n_head,
                    int n_head_kv, int pos0, int n, float *out, int gated, cudaStream_t st)
{
    const size_t smem = sizeof(float) * ((size_t)AT_ROWS * (D + 16) + (size_t)BK * (D + 16) + (size_t)BK * (D + 4));
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(k_attn_mma<D, BK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    const int group = n_head / n_head_kv, bq = AT_ROWS / group;
    const dim3 grid((unsigned)((n + bq - 1) / bq), (unsigned)n_head_kv);
    k_attn_mma<D, BK><<<grid, AT_THREADS, smem, st>>>(q, q_step, q_tok, K, V, n_head_kv * D, group, pos0, n, out,
                                                      (long long)n_head * D, gated);
    return 0;
}

int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

extern "C" int lilac_cuda_attn_mma_enabled(void)
{
    static std::atomic<int> on{-1};
    int v = on.load(std::memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("LILAC_CUDA_ATTN_MMA");
        v = !(e && *e == '0');
        on.store(v, std::memory_order_relaxed);
    }
    return v;
}

extern "C" int lilac_cuda_pf_attention_mma(const float *q, int q_step, long long q_tok, const float *K,
                                           const float *V, int n_head, int n_head_kv, int hd, int pos0, int n,
                                           float *out, int gated, lilac_cuda_stream *s)
{
    if (n < 1 || pos0 < 0 || n_head_kv < 1 || n_head_kv > 65535 || n_head < n_head_kv || n_head % n_head_kv ||
        n_head / n_head_kv > AT_MAX_GROUP)
        return -1;
    // 16-byte loads and stores: the bases and every stride a multiple of four floats.
    if (!aligned16(q) || !aligned16(K) || !aligned16(V) || !aligned16(out) || q_step % 4 || q_tok % 4)
        return -1;
    const cudaStream_t st = CS(s);
    switch (hd) {
    case 64: return launch_attn_mma<64, 32>(q, q_step, q_tok, K, V, n_head, n_head_kv, pos0, n, out, gated, st);
    case 128: return launch_attn_mma<128, 32>(q, q_step, q_tok, K, V, n_head, n_head_kv, pos0, n, out, gated, st);
    case 256: return launch_attn_mma<256, 16>(q, q_step, q_tok, K, V, n_head, n_head_kv, pos0, n, out, gated, st);
    default: return -1;
    }
}
