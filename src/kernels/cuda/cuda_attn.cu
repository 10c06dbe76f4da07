// cuda_attn: the prefill's causal attention on the tensor cores (flash
// attention), at float32 accuracy: both products, S = Q K^T and O += P V,
// run as 3xTF32 — each float32 operand a = a_hi + a_lo with a_hi = tf32(a)
// and a_lo = tf32(a - a_hi), and a b ~= a_lo b_hi + a_hi b_lo + a_hi b_hi
// summed in float32 by mma.sync m16n8k8 (the a_lo b_lo term, ~2^-22 a b, is
// dropped): about 1e-6 relative, what cuBLAS's 3xTF32 mode gives. The
// tensor cores' float32 accumulation truncates (rounds toward zero; Fasi et
// al. 2021, Khattak & Mikaitis 2025), a bias that grows with the length of
// a chain of mma into one accumulator, so no chain is long: a score sums 64
// head dims (24 mma) at a time and the chunks are added by FADD, and a key
// tile's P V (BK / 8 * 3 mma) starts from zero and enters O by one FFMA
// with the rescale, o = o * exp(m_old - m_new) + tile, rounded to nearest.
// The softmax (running max, expf, sums) is k_pf_attention's, in float32.
//
// A block takes the 64 rows of AT_ROWS / group query tokens x the group of
// query heads of one KV head (row r = token r / group, head r % group), so
// that each K/V tile is read once for the whole group. Its eight warps are
// two halves of four: the halves take the key tiles (BK keys) in turn, each
// with its own K and V buffers, barrier, and running max, sum and O for all
// 64 rows (a warp 16 rows), and half 1 hands its state to half 0 at the end
// (a merge of two online-softmax states): twice the warps of a block of 64
// rows, which matters at the prefill's 512-token chunks (n = 512, 8 heads a
// group: 128 blocks). A warp keeps its rows' O (16 x hd) in registers as
// m16n8 accumulator fragments, and its scores S (16 x BK) too, whose
// accumulator layout is P's operand layout once the key order inside a k8
// slice is permuted (key 2t <-> slot t, key 2t + 1 <-> slot t + 4): P never
// goes through shared memory. Q (64 x hd) stays in shared memory; a half's
// K and V tiles go through one buffer each, loaded with cp.async one phase
// ahead (K of its next tile while this one's softmax and P V run, V of the
// next while its S runs). Within a k8 slice any order of the summed index
// serves as long as both operands agree: a thread's Q and K values of head
// dims 16c + 4t .. + 3 are one 16-byte load (two k8 slices). Row strides
// are padded so that the loads are free of bank conflicts (Q, K: 16 mod 32
// floats; V: 4 mod 32). Q is split into hi/lo once, after its load, and
// kept split (its lo parts in a second buffer: 203 KB of shared memory at hd
// 256, BK 16); K and V are split as they are loaded from shared memory (a
// half's four warps each split the whole tile: stored split too, they would
// not fit beside Q's). At hd 256 a thread holds 128 O values: 255 registers,
// no spills (ptxas -v).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_sizes.h"
#include "kernels/cuda/cuda_tc.cuh"

#define CS(s) ((cudaStream_t)(s))

namespace {

#define AT_ROWS 64      /* query rows (tokens x heads of the group) a block */
#define AT_THREADS 256  /* two halves of four warps of 16 rows */
#define AT_HALF 128     /* threads a half */
#define AT_MAX_GROUP 8
#define AT_SCHUNK 4     /* 16-dim steps (64 head dims) of S summed by the tensor cores before a float32 add */

// The barrier of one half's 128 threads (ids 1, 2; __syncthreads is 0).
__device__ __forceinline__ void half_sync(int half) { asm volatile("bar.sync %0, %1;" ::"r"(half + 1), "n"(AT_HALF) : "memory"); }

// Rows BK keys x D of K or V (rows kvw floats apart, head kvh) from key k0 into S (rows ST floats apart), by the
// 128 threads of a half (ht = the thread's index in it); keys past n_keys read as zeros.
template <int D, int BK, int ST>
__device__ __forceinline__ void load_kv(float *S, const float *src, int kvw, int kvh, int k0, int n_keys, int ht)
{
    constexpr int C4 = D / 4; // 16-byte pieces a row
#pragma unroll 1
    for (int i = ht; i < BK * C4; i += AT_HALF) {
        const int r = i / C4, c = i - r * C4, key = k0 + r;
        const bool ok = key < n_keys;
        cp16(S + r * ST + 4 * c, src + (long long)(ok ? key : 0) * kvw + (long long)kvh * D + 4 * c, ok);
    }
}

// A thread's rows rA (accumulator elements 0, 1) and rB = rA + 8 (2, 3) of the block's 64, the last key each
// sees (rows past the tokens take the block's last token's), and the last any row of its warp sees (rows
// ascend).
struct AtRows {
    int rA, rB, limA, limB, wlim;
};
__device__ __forceinline__ AtRows at_rows(int wr, int g, int group, int bq, int t0, int last, int pos0)
{
    const int rA = wr * 16 + g, rB = rA + 8;
    return {rA, rB, pos0 + min(t0 + min(rA / group, bq - 1), last), pos0 + min(t0 + min(rB / group, bq - 1), last),
            pos0 + min(t0 + min((wr * 16 + 15) / group, bq - 1), last)};
}

// A block's tokens: bq (AT_ROWS / group) from t0, the grid's blocks in reverse (those with the most keys first),
// its last token and the keys that one sees.
struct AtBlock {
    int bq, t0, last, n_keys;
};
__device__ __forceinline__ AtBlock at_block(int group, int n, int pos0)
{
    const int bq = AT_ROWS / group, t0 = (int)(gridDim.x - 1 - blockIdx.x) * bq, last = min(t0 + bq, n) - 1;
    return {bq, t0, last, pos0 + last + 1};
}

// N accumulator fragments (m16n8: a thread's 4 floats each) zeroed; s += u.
template <int N> __device__ __forceinline__ void frag_zero(float (&f)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        f[i][0] = f[i][1] = f[i][2] = f[i][3] = 0.f;
}
template <int N> __device__ __forceinline__ void frag_add(float (&s)[N][4], const float (&u)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[i][e] += u[i][e];
}

// A key tile's scores: element e of n8 tile j, key k0 + 8 j + 2 t + (e & 1) of row A (e < 2) or B, as
// s (times rowA or rowB, times keyf[the key's index in the tile] where keyf is given) times scale, or -inf
// past the row's last key.
template <int NT>
__device__ __forceinline__ void at_scores(float (&p)[NT][4], const float (&s)[NT][4], int k0, int t, int limA,
                                          int limB, float scale, float rowA = 1.f, float rowB = 1.f,
                                          const float *keyf = nullptr)
{
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int kt = 8 * j + 2 * t + (e & 1);
            const float x = keyf ? s[j][e] * (e < 2 ? rowA : rowB) * keyf[kt] : s[j][e];
            p[j][e] = k0 + kt <= (e < 2 ? limA : limB) ? x * scale : -INFINITY;
        }
}

// The online softmax of k_pf_attention over a key tile's NT n8 tiles of scaled, masked scores p (a thread's
// rows A: elements 0, 1; B: 2, 3), a row's four threads (same g) reducing by shuffles: p becomes the
// probabilities, the running max m and this thread's part of the sum l move on, res is o's rescale.
template <int NT>
__device__ __forceinline__ void at_softmax(float (&p)[NT][4], float &mA, float &mB, float &lA, float &lB,
                                           float &resA, float &resB)
{
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
    resA = aA, resB = aB;
}

// The end of a block: half 1 hands its max, sum and O to the thread of half 0 that holds the same elements,
// through `hand` (Q's buffer, free now), which merges them as two tiles of the online softmax and writes o / l
// (times the gate) for its rows: token r / group, head kvh group + r % group.
template <int D>
__device__ __forceinline__ void at_finish(float (&o)[D / 8][4], float mA, float mB, float lA, float lB, float *hand,
                                          int half, int ht, int rA, int rB, int t, int group, int bq, int t0, int n,
                                          int kvh, const float *__restrict__ q, int q_step, long long q_tok,
                                          float *__restrict__ out, long long out_tok, int gated)
{
    constexpr int NO = D / 8;
    __syncthreads(); // both halves are done with Q's buffer (hand: [element][thread], conflict-free)
    if (half) {
#pragma unroll
        for (int i = 0; i < NO; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                hand[(i * 4 + e) * AT_HALF + ht] = o[i][e];
        hand[(NO * 4 + 0) * AT_HALF + ht] = mA;
        hand[(NO * 4 + 1) * AT_HALF + ht] = mB;
        hand[(NO * 4 + 2) * AT_HALF + ht] = lA;
        hand[(NO * 4 + 3) * AT_HALF + ht] = lB;
    }
    __syncthreads();
    if (half)
        return;
    {
        const float m1A = hand[(NO * 4 + 0) * AT_HALF + ht], m1B = hand[(NO * 4 + 1) * AT_HALF + ht];
        const float nA = fmaxf(mA, m1A), nB = fmaxf(mB, m1B); // finite: mA, mB are
        const float aA = expf(mA - nA), aB = expf(mB - nB);
        const float bA = m1A == -INFINITY ? 0.f : expf(m1A - nA), bB = m1B == -INFINITY ? 0.f : expf(m1B - nB);
        lA = lA * aA + hand[(NO * 4 + 2) * AT_HALF + ht] * bA;
        lB = lB * aB + hand[(NO * 4 + 3) * AT_HALF + ht] * bB;
#pragma unroll
        for (int i = 0; i < NO; i++) {
            o[i][0] = o[i][0] * aA + hand[(i * 4 + 0) * AT_HALF + ht] * bA;
            o[i][1] = o[i][1] * aA + hand[(i * 4 + 1) * AT_HALF + ht] * bA;
            o[i][2] = o[i][2] * aB + hand[(i * 4 + 2) * AT_HALF + ht] * bB;
            o[i][3] = o[i][3] * aB + hand[(i * 4 + 3) * AT_HALF + ht] * bB;
        }
    }

    // The row sums over the row's four threads; then o / l (times the gate). Accumulator elements (c, 0) and
    // (c, 1) are row rA's head dims 8c + 2t and 8c + 2t + 1; (c, 2), (c, 3) row rB's.
    lA += __shfl_xor_sync(0xffffffffu, lA, 1);
    lB += __shfl_xor_sync(0xffffffffu, lB, 1);
    lA += __shfl_xor_sync(0xffffffffu, lA, 2);
    lB += __shfl_xor_sync(0xffffffffu, lB, 2);
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = hr ? rB : rA, tq = r / group, j = r - tq * group;
        if (tq >= bq || t0 + tq >= n)
            continue;
        const float l = hr ? lB : lA;
        const int h = kvh * group + j;
        float *orow = out + (long long)(t0 + tq) * out_tok + (long long)h * D + 2 * t;
        const float *gate = q + (long long)(t0 + tq) * q_tok + (long long)h * q_step + D + 2 * t;
#pragma unroll
        for (int c = 0; c < NO; c++) {
            float2 v = make_float2(o[c][2 * hr] / l, o[c][2 * hr + 1] / l);
            if (gated) {
                const float2 x = *reinterpret_cast<const float2 *>(gate + 8 * c);
                v.x *= sigmoidf_(x.x), v.y *= sigmoidf_(x.y);
            }
            *reinterpret_cast<float2 *>(orow + 8 * c) = v;
        }
    }
}

// Causal attention of the 64 rows of block (blockIdx.x, KV head blockIdx.y) over keys 0 .. pos0 + token, the
// contract of k_pf_attention: query head h = kvh * group + j of token t at q + t * q_tok + h * q_step (its
// gate's D values after it when gated), out[t][h * D + d]. The key tiles alternate between the block's two
// halves (half 0 the even ones, from key 0), each of four warps over the 64 rows with its own K, V buffers,
// barrier and running max, sum and O; half 1 hands its state to half 0 through shared memory at the end.
// QS (unless LILAC_CUDA_ATTN_QSPLIT=0): Q split into tf32 hi and lo once, in shared memory (Qs's hi in place, the lo
// after the K/V buffers), not at every use: a warp re-split its 16 rows x D of Q for every key tile, 3 of its
// ~10 instructions a Q value a tile. The same splits, the same mma's: the same bits.
template <int D, int BK, bool QS = false>
__global__ void __launch_bounds__(AT_THREADS, 1)
    k_attn_mma(const float *__restrict__ q, int q_step, long long q_tok, const float *__restrict__ K,
               const float *__restrict__ V, int kvw, int group, int pos0, int n, float *__restrict__ out,
               long long out_tok, int gated)
{
    constexpr int SQ = D + 16; // Q and K row strides: = 16 mod 32 floats, 16-byte loads conflict-free
    constexpr int SK = D + 16;
    constexpr int SV = D + 4;  // = 4 mod 32: V rows 2t, 2t + 1 of 16-byte loads conflict-free
    constexpr int NT = BK / 8; // key n8 tiles of S = k8 slices of P V
    constexpr int NO = D / 8;  // n8 tiles of O
    static_assert(D % 32 == 0 && BK % 8 == 0 && (D / 16) % AT_SCHUNK == 0, "shape");
    static_assert(AT_ROWS * SQ >= NO * 4 * AT_HALF + 4 * AT_HALF, "half 1's hand-over fits in Qs");
    extern __shared__ float4 at_smem4[];
    float *const Qs = reinterpret_cast<float *>(at_smem4); // [AT_ROWS][SQ]
    const int tid = threadIdx.x, half = tid / AT_HALF, ht = tid % AT_HALF;
    float *const Ks = Qs + AT_ROWS * SQ + half * BK * (SK + SV); // this half's [BK][SK]
    float *const Vs = Ks + BK * SK;                              // [BK][SV]
    // QS: Q's lo parts [AT_ROWS][SQ] after both halves' K/V buffers; Qs holds the hi parts then (as floats' bits)
    float *const Ql = Qs + AT_ROWS * SQ + 2 * BK * (SK + SV);

    const auto [bq, t0, last, n_keys] = at_block(group, n, pos0);
    const int kvh = blockIdx.y;
    const int lane = tid & 31, wr = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const float scale = rsqrtf((float)D);

    // Q, rows past the block's tokens zero (they see key 0 like every row, and are not written).
    for (int i = tid; i < AT_ROWS * (D / 4); i += AT_THREADS) {
        const int r = i / (D / 4), c = i - r * (D / 4), tq = r / group, j = r - tq * group;
        const bool ok = tq < bq && t0 + tq < n;
        const float *src = ok ? q + (long long)(t0 + tq) * q_tok + (long long)(kvh * group + j) * q_step + 4 * c : q;
        cp16(Qs + r * SQ + 4 * c, src, ok);
    }
    cp_commit();
    int k0 = half * BK; // this half's first tile
    load_kv<D, BK, SK>(Ks, K, kvw, kvh, k0, n_keys, ht);
    cp_commit();
    load_kv<D, BK, SV>(Vs, V, kvw, kvh, k0, n_keys, ht);
    cp_commit();

    const auto [rA, rB, limA, limB, wlim] = at_rows(wr, g, group, bq, t0, last, pos0);

    float o[NO][4];
    frag_zero(o);
    float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f; // running max; this thread's part of the sum

    cp_wait<2>(); // Q
    __syncthreads();
    if constexpr (QS) { // each value by the thread that reads it: in place, no race
        for (int i = tid; i < AT_ROWS * (D / 4); i += AT_THREADS) {
            const int r = i / (D / 4), c = i - r * (D / 4);
            float4 *const ph = reinterpret_cast<float4 *>(Qs + r * SQ + 4 * c);
            const float4 x = *ph;
            uint32_t h[4], l[4];
            tf32_split(x.x, h[0], l[0]);
            tf32_split(x.y, h[1], l[1]);
            tf32_split(x.z, h[2], l[2]);
            tf32_split(x.w, h[3], l[3]);
            *ph = make_float4(__uint_as_float(h[0]), __uint_as_float(h[1]), __uint_as_float(h[2]),
                              __uint_as_float(h[3]));
            *reinterpret_cast<float4 *>(Ql + r * SQ + 4 * c) =
                make_float4(__uint_as_float(l[0]), __uint_as_float(l[1]), __uint_as_float(l[2]),
                            __uint_as_float(l[3]));
        }
        __syncthreads();
    }
    for (; k0 < n_keys; k0 += 2 * BK) {
        // A warp whose rows see no key of a tile skips it. Every row sees key 0, in half 0's first tile: half 0's
        // maxima are finite from then on. A row of half 1 may see no key at all (it then keeps m = -inf, l = 0,
        // o = 0: a = 0 and every p = 0 below, no NaN).
        const bool active = k0 <= wlim;
        float p[NT][4]; // scores, then probabilities: rows rA (0, 1), rB (2, 3), keys k0 + 8 j + 2 t (+1)
        float resA = 1.f, resB = 1.f; // the rescale of o by this tile's new max
        cp_wait<1>(); // this tile's K
        half_sync(half);
        if (active) {
            // Each 64 head dims (24 mma a tile) accumulate from zero, and the chunks are summed in float32 by
            // FADD: the tensor cores' accumulation truncates (rounds toward zero), which over one chain of all
            // hd would bias the score by up to hd / 8 * 3 units in the last place.
            float s[NT][4];
            frag_zero(s);
            const float *qa = Qs + rA * SQ + 4 * t, *qb = Qs + rB * SQ + 4 * t, *kr = Ks + g * SK + 4 * t;
#pragma unroll 1
            for (int c0 = 0; c0 < D / 16; c0 += AT_SCHUNK) {
                float u[NT][4];
                frag_zero(u);
#pragma unroll 1
                for (int c = c0; c < c0 + AT_SCHUNK; c++) {
                    // Head dims 16c + 4t + (0, 1) are slice 2c's slots t, t + 4; + (2, 3) slice 2c + 1's.
                    const float4 xa = *reinterpret_cast<const float4 *>(qa + 16 * c);
                    const float4 xb = *reinterpret_cast<const float4 *>(qb + 16 * c);
                    uint32_t ah0[4], al0[4], ah1[4], al1[4];
                    if constexpr (QS) { // xa, xb are the hi parts; the lo ones at the same place in Ql
                        const float4 la = *reinterpret_cast<const float4 *>(qa + (Ql - Qs) + 16 * c);
                        const float4 lb = *reinterpret_cast<const float4 *>(qb + (Ql - Qs) + 16 * c);
                        ah0[0] = __float_as_uint(xa.x), al0[0] = __float_as_uint(la.x);
                        ah0[1] = __float_as_uint(xb.x), al0[1] = __float_as_uint(lb.x);
                        ah0[2] = __float_as_uint(xa.y), al0[2] = __float_as_uint(la.y);
                        ah0[3] = __float_as_uint(xb.y), al0[3] = __float_as_uint(lb.y);
                        ah1[0] = __float_as_uint(xa.z), al1[0] = __float_as_uint(la.z);
                        ah1[1] = __float_as_uint(xb.z), al1[1] = __float_as_uint(lb.z);
                        ah1[2] = __float_as_uint(xa.w), al1[2] = __float_as_uint(la.w);
                        ah1[3] = __float_as_uint(xb.w), al1[3] = __float_as_uint(lb.w);
                    } else {
                        tf32_split(xa.x, ah0[0], al0[0]);
                        tf32_split(xb.x, ah0[1], al0[1]);
                        tf32_split(xa.y, ah0[2], al0[2]);
                        tf32_split(xb.y, ah0[3], al0[3]);
                        tf32_split(xa.z, ah1[0], al1[0]);
                        tf32_split(xb.z, ah1[1], al1[1]);
                        tf32_split(xa.w, ah1[2], al1[2]);
                        tf32_split(xb.w, ah1[3], al1[3]);
                    }
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        const float4 y = *reinterpret_cast<const float4 *>(kr + j * 8 * SK + 16 * c); // key 8j + g
                        uint32_t bh0, bl0, bh1, bl1;
                        tf32_split(y.x, bh0, bl0);
                        tf32_split(y.y, bh1, bl1);
                        mma3(u[j], ah0, al0, bh0, bh1, bl0, bl1);
                        tf32_split(y.z, bh0, bl0);
                        tf32_split(y.w, bh1, bl1);
                        mma3(u[j], ah1, al1, bh0, bh1, bl0, bl1);
                    }
                }
                frag_add(s, u);
            }
            at_scores<NT>(p, s, k0, t, limA, limB, scale);
        }
        half_sync(half); // every warp of the half is done with Ks
        if (k0 + 2 * BK < n_keys)
            load_kv<D, BK, SK>(Ks, K, kvw, kvh, k0 + 2 * BK, n_keys, ht);
        cp_commit();
        if (active) {
            at_softmax<NT>(p, mA, mB, lA, lB, resA, resB);
        }
        cp_wait<1>(); // this tile's V (the next K may be pending)
        half_sync(half);
        if (active) {
            // P's k8 slice j as the A operand: slot t = key 2t (accumulator elements 0, 2), slot t + 4 = key
            // 2t + 1 (1, 3); V rows k0 + 8j + 2t and + 1 are the B operand's slots t and t + 4. The tile's P V
            // accumulates from zero (NT * 3 mma) and goes into o by one FFMA, o * rescale + it: float32
            // rounding to nearest across the tiles, not the tensor cores' truncation.
            uint32_t ph[NT][4], pl[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                tf32_split(p[j][0], ph[j][0], pl[j][0]);
                tf32_split(p[j][2], ph[j][1], pl[j][1]);
                tf32_split(p[j][1], ph[j][2], pl[j][2]);
                tf32_split(p[j][3], ph[j][3], pl[j][3]);
            }
            const float *vr = Vs + 2 * t * SV + g;
#pragma unroll
            for (int c = 0; c < NO; c++) { // O's n8 tile c, column g, is head dim 8c + g
                float u[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    uint32_t bh0, bl0, bh1, bl1;
                    tf32_split(vr[8 * j * SV + 8 * c], bh0, bl0);
                    tf32_split(vr[(8 * j + 1) * SV + 8 * c], bh1, bl1);
                    mma3(u, ph[j], pl[j], bh0, bh1, bl0, bl1);
                }
                o[c][0] = fmaf(o[c][0], resA, u[0]);
                o[c][1] = fmaf(o[c][1], resA, u[1]);
                o[c][2] = fmaf(o[c][2], resB, u[2]);
                o[c][3] = fmaf(o[c][3], resB, u[3]);
            }
        }
        half_sync(half); // every warp of the half is done with Vs
        if (k0 + 2 * BK < n_keys)
            load_kv<D, BK, SV>(Vs, V, kvw, kvh, k0 + 2 * BK, n_keys, ht);
        cp_commit();
    }
    cp_wait<0>();

    at_finish<D>(o, mA, mB, lA, lB, Qs, half, ht, rA, rB, t, group, bq, t0, n, kvh, q, q_step, q_tok, out, out_tok,
                 gated);
}

// ---- fp16 hi/lo operands (the default since session 19; LILAC_CUDA_ATTN_F16=0 gives k_attn_mma) ----
//
// k_attn_f16: k_attn_mma's blocks, halves, 16-key tiles, online softmax and hand-over, with each operand
// a = 2^-e (a_hi + a_lo), a_hi = fp16(2^e a), a_lo = fp16(2^e a - a_hi), and a b ~= a_lo b_hi + a_hi b_lo +
// a_hi b_hi by mma.sync m16n8k16 (fp16 in, float32 accumulation): the 22 bits of tf32 hi/lo at twice the mma's
// depth (k16, not k8). The power of two keeps the values in fp16's normal range: a row of Q and a key of K are
// each scaled so that their largest |value| lies in [2^13, 2^14); V by head dim (a column of the tile's 16
// keys); P by 2^14 (p <= 1; a p under 2^-28 loses bits, weighing under 2^-28). S's element (row, key) is scaled
// back by qs_row ks_key, a tile's P V column d by vs_d. Q is split once a block, K and V once a tile, by all
// the threads together into shared memory (k_attn_mma splits K and V in each of a half's four warps).
// Split layouts, 32-bit words of two fp16: a row of Q or K, 16-dim slice c at words 8c .. 8c + 7, word 8c + 2t
// dims 16c + 2t, + 1 and word 8c + 2t + 1 dims 16c + 8 + 2t, + 1, so that a thread's A (Q) or B (K) fragment
// of a k16 step is one 8-byte load; V transposed, a head dim's 16 keys in 8 words, word 2t keys 2t, 2t + 1 and
// word 2t + 1 keys 8 + 2t, + 1 (P V's B fragment, one 8-byte load).
#define AF_BK 16
#define AF_HV 8 // words a head dim of a V tile

// e such that |x| max 2^e lies in [2^13, 2^14) (0 for 0 or a subnormal max), within [-126, 126] so that
// 2^-e is a normal float.
__device__ __forceinline__ int af_exp(float amax)
{
    const int E = (__float_as_int(amax) >> 23) & 255;
    return E == 0 ? 0 : max(-126, min(126, 140 - E));
}
__device__ __forceinline__ float af_pow2(int e) { return __int_as_float((127 + e) << 23); }

// (a, b) 2^e as fp16 pairs hi and lo.
__device__ __forceinline__ void af_split(float a, float b, float scale, uint32_t &hi, uint32_t &lo)
{
    const float x = a * scale, y = b * scale; // exact: scale is a power of two
    const __half xh = __float2half_rn(x), yh = __float2half_rn(y);
    const __half xl = __float2half_rn(x - __half2float(xh)), yl = __float2half_rn(y - __half2float(yh));
    hi = (uint32_t)__half_as_ushort(xh) | ((uint32_t)__half_as_ushort(yh) << 16);
    lo = (uint32_t)__half_as_ushort(xl) | ((uint32_t)__half_as_ushort(yl) << 16);
}

// The word of a V tile's head dim (8c + g) where thread t's keys 2t, 2t + 1 start: word 2t of the head dim's 8,
// with the head dim's two 16-byte halves swapped where its bit 2 is set (the V split's stores, conflict-free).
__device__ __forceinline__ int af_vsw(int g, int t) { return (2 * t) ^ (4 * ((g >> 2) & 1)); }

// The word of head dims d, d + 1 (d even) in a split row.
__device__ __forceinline__ int af_word(int d)
{
    const int c = d >> 4, r = d & 15;
    return 8 * c + (r < 8 ? r : r - 7);
}

template <int D> struct AfLay {
    static constexpr int SQ = D + 16, SV = D + 4; // the fp32 K and V tiles' rows (cp.async), as k_attn_mma's
    static constexpr int HQ = D / 2 + 8;          // a split row of Q or K in words: = 8 mod 32, loads conflict-free
    static constexpr int Q = 2 * AT_ROWS * HQ + AT_ROWS;                       // Qh, Ql, qs
    static constexpr int KST = 0, VST = KST + AF_BK * SQ, KH = VST + AF_BK * SV, KL = KH + AF_BK * HQ,
                         KS = KL + AF_BK * HQ, VH = KS + AF_BK, VL = VH + D * AF_HV, VS = VL + D * AF_HV,
                         HALF = VS + D; // a half's: K, V tiles, Kh, Kl, ks, Vh, Vl, vs
    static constexpr int WORDS = Q + 2 * HALF;
    static_assert(HALF % 4 == 0 && Q % 4 == 0 && VST % 4 == 0 && KH % 2 == 0 && VH % 2 == 0 && VS % 2 == 0,
                  "16-byte copies, 8-byte loads");
    static_assert(2 * AT_ROWS * HQ >= (D / 8) * 4 * AT_HALF + 4 * AT_HALF, "half 1's hand-over fits in Qh, Ql");
};

// Q split, once a block: warp w rows w, w + 8, ...; a lane the dim pairs lane + 32 i (rows past the tokens: zeros).
template <int D>
__device__ __forceinline__ void af_split_q(const float *__restrict__ q, int q_step, long long q_tok, int group, int bq,
                                           int t0, int n, int kvh, int warp, int lane, uint32_t *Qh, uint32_t *Ql,
                                           float *qs)
{
    constexpr int HQ = AfLay<D>::HQ;
    for (int r = warp; r < AT_ROWS; r += AT_THREADS / 32) {
        const int tq = r / group, j = r - tq * group;
        const bool ok = tq < bq && t0 + tq < n;
        const float *src = q + (long long)(t0 + tq) * q_tok + (long long)(kvh * group + j) * q_step;
        float2 v[D / 64];
        float amax = 0.f;
#pragma unroll
        for (int i = 0; i < D / 64; i++) {
            v[i] = ok ? *reinterpret_cast<const float2 *>(src + 2 * (lane + 32 * i)) : make_float2(0.f, 0.f);
            amax = fmaxf(amax, fmaxf(fabsf(v[i].x), fabsf(v[i].y)));
        }
        for (int o = 16; o; o >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const int e = af_exp(amax);
        const float up = af_pow2(e);
#pragma unroll
        for (int i = 0; i < D / 64; i++) {
            const int w = af_word(2 * (lane + 32 * i));
            af_split(v[i].x, v[i].y, up, Qh[r * HQ + w], Ql[r * HQ + w]);
        }
        if (lane == 0)
            qs[r] = af_pow2(-e);
    }
}

// A block's start, after its first K/V copies are issued: Q split (a barrier after it), the thread's rows and
// their limits (at_rows) and scales.
struct AfStart {
    int rA, rB, limA, limB, wlim;
    float qsA, qsB;
};
template <int D>
__device__ __forceinline__ AfStart af_begin(const float *__restrict__ q, int q_step, long long q_tok, int group,
                                            int bq, int t0, int last, int n, int pos0, int kvh, uint32_t *Qh,
                                            uint32_t *Ql, float *qs)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    af_split_q<D>(q, q_step, q_tok, group, bq, t0, n, kvh, warp, lane, Qh, Ql, qs);
    const AtRows r = at_rows(warp & 3, lane >> 2, group, bq, t0, last, pos0);
    __syncthreads(); // Q split
    return {r.rA, r.rB, r.limA, r.limB, r.wlim, qs[r.rA], qs[r.rB]};
}

// A key's split: its eight threads (sub 0 .. 7, adjacent lanes) each the dim pairs sub + 8 i of row (zeros where
// !valid), the key's largest |value| by shuffles; the hi/lo words to kh, kl at af_word's places, the key's 2^-e
// to *ks (by sub 0).
template <int D>
__device__ __forceinline__ void af_split_key(const float *row, bool valid, int sub, uint32_t *kh, uint32_t *kl,
                                             float *ks)
{
    float2 v[D / 16];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < D / 16; i++) {
        v[i] = valid ? *reinterpret_cast<const float2 *>(row + 2 * (sub + 8 * i)) : make_float2(0.f, 0.f);
        amax = fmaxf(amax, fmaxf(fabsf(v[i].x), fabsf(v[i].y)));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
    const int e = af_exp(amax);
    const float up = af_pow2(e);
#pragma unroll
    for (int i = 0; i < D / 16; i++) {
        const int w = af_word(2 * (sub + 8 * i));
        af_split(v[i].x, v[i].y, up, kh[w], kl[w]);
    }
    if (sub == 0)
        *ks = af_pow2(-e);
}

// A head dim's column of a V tile, AF_BK keys col[k * stride] (zeros from key `valid` on), split into words h,
// l (word 2t keys 2t, 2t + 1; word 2t + 1 keys 8 + 2t, + 1) at the column's 2^e; returns 2^-e times P's 2^-14
// (2^-e-14 may be subnormal: exact, not an exponent field).
__device__ __forceinline__ float af_split_v(const float *col, int stride, int valid, uint32_t (&h)[AF_HV],
                                            uint32_t (&l)[AF_HV])
{
    float v[AF_BK];
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < AF_BK; k++) {
        v[k] = k < valid ? col[(long long)k * stride] : 0.f;
        amax = fmaxf(amax, fabsf(v[k]));
    }
    const int e = af_exp(amax);
    const float up = af_pow2(e);
#pragma unroll
    for (int tt = 0; tt < 4; tt++) {
        af_split(v[2 * tt], v[2 * tt + 1], up, h[2 * tt], l[2 * tt]);
        af_split(v[8 + 2 * tt], v[9 + 2 * tt], up, h[2 * tt + 1], l[2 * tt + 1]);
    }
    return af_pow2(-e) * (1.f / 16384.f);
}

// A key tile's probabilities p for a thread's rows A and B: S = Q K^T on the hi/lo digits (qa, qb its rows' Q
// words, ql to their lo; kh key g's K words, kl to its lo), 64 dims a chain added in float32 (k_attn_mma's
// truncation), scaled back by the rows' and keys' 2^-e (qsA, qsB, ks) and masked, then the online softmax.
template <int D>
__device__ __forceinline__ void af_scores(float (&p)[AF_BK / 8][4], const uint32_t *qa, const uint32_t *qb, int ql,
                                          const uint32_t *kh, int kl, int k0, int t, int limA, int limB, float scale,
                                          float qsA, float qsB, const float *ks, float &mA, float &mB, float &lA,
                                          float &lB, float &resA, float &resB)
{
    constexpr int NT = AF_BK / 8, NC = D / 16, HQ = AfLay<D>::HQ;
    float s[NT][4];
    frag_zero(s);
#pragma unroll 1
    for (int c0 = 0; c0 < NC; c0 += AT_SCHUNK) {
        float u[NT][4];
        frag_zero(u);
#pragma unroll
        for (int c = c0; c < c0 + AT_SCHUNK; c++) {
            const uint2 ha = *reinterpret_cast<const uint2 *>(qa + 8 * c);
            const uint2 hb2 = *reinterpret_cast<const uint2 *>(qb + 8 * c);
            const uint2 la = *reinterpret_cast<const uint2 *>(qa + ql + 8 * c);
            const uint2 lb = *reinterpret_cast<const uint2 *>(qb + ql + 8 * c);
            const uint32_t ah[4] = {ha.x, hb2.x, ha.y, hb2.y}, al[4] = {la.x, lb.x, la.y, lb.y};
#pragma unroll
            for (int j = 0; j < NT; j++) { // key 8 j + g
                const uint2 bh = *reinterpret_cast<const uint2 *>(kh + j * 8 * HQ + 8 * c);
                const uint2 bl = *reinterpret_cast<const uint2 *>(kh + kl + j * 8 * HQ + 8 * c);
                mma3<true>(u[j], ah, al, bh.x, bh.y, bl.x, bl.y);
            }
        }
        frag_add(s, u);
    }
    at_scores<NT>(p, s, k0, t, limA, limB, scale, qsA, qsB, ks);
    at_softmax<NT>(p, mA, mB, lA, lB, resA, resB);
}

// A key tile's P V into o: P 2^14 as the A operand, (row g, keys 2t, 2t + 1) tile 0's elements 0, 1; row g + 8
// its 2, 3; keys 8 + 2t, + 1 tile 1's. The tile's P V from zero (3 mma) into o by one FFMA, o * rescale + it vs.
// vh: head dim g's V words of the thread (8 words a head dim; vl to the lo ones), vs the head dims' scales.
template <int D>
__device__ __forceinline__ void af_pv(float (&o)[D / 8][4], const float (&p)[AF_BK / 8][4], const uint32_t *vh, int vl,
                                      const float *vs, int t, float resA, float resB)
{
    uint32_t ph[4], pl[4];
    const float up = 16384.f;
    af_split(p[0][0], p[0][1], up, ph[0], pl[0]);
    af_split(p[0][2], p[0][3], up, ph[1], pl[1]);
    af_split(p[1][0], p[1][1], up, ph[2], pl[2]);
    af_split(p[1][2], p[1][3], up, ph[3], pl[3]);
#pragma unroll
    for (int c = 0; c < D / 8; c++) { // O's n8 tile c, column g: head dim 8c + g
        float u[4] = {0.f, 0.f, 0.f, 0.f};
        const uint2 bh = *reinterpret_cast<const uint2 *>(vh + 8 * c * AF_HV);
        const uint2 bl = *reinterpret_cast<const uint2 *>(vh + vl + 8 * c * AF_HV);
        mma3<true>(u, ph, pl, bh.x, bh.y, bl.x, bl.y);
        const float2 f = *reinterpret_cast<const float2 *>(vs + 8 * c + 2 * t);
        o[c][0] = fmaf(o[c][0], resA, u[0] * f.x);
        o[c][1] = fmaf(o[c][1], resA, u[1] * f.y);
        o[c][2] = fmaf(o[c][2], resB, u[2] * f.x);
        o[c][3] = fmaf(o[c][3], resB, u[3] * f.y);
    }
}

template <int D>
__global__ void __launch_bounds__(AT_THREADS, 1)
    k_attn_f16(const float *__restrict__ q, int q_step, long long q_tok, const float *__restrict__ K,
               const float *__restrict__ V, int kvw, int group, int pos0, int n, float *__restrict__ out,
               long long out_tok, int gated)
{
    using L = AfLay<D>;
    constexpr int BK = AF_BK, NT = BK / 8, NO = D / 8, NC = D / 16, HQ = L::HQ;
    static_assert(D % 64 == 0 && NC % AT_SCHUNK == 0 && AT_HALF == 8 * BK, "shape: eight threads a key");
    extern __shared__ float4 af_smem4[];
    uint32_t *const Qh = reinterpret_cast<uint32_t *>(af_smem4), *const Ql = Qh + AT_ROWS * HQ;
    float *const qs = reinterpret_cast<float *>(Ql + AT_ROWS * HQ);
    const int tid = threadIdx.x, half = tid / AT_HALF, ht = tid % AT_HALF;
    float *const hb = reinterpret_cast<float *>(af_smem4) + L::Q + half * L::HALF; // this half's
    float *const Kst = hb + L::KST, *const Vst = hb + L::VST, *const ks = hb + L::KS, *const vs = hb + L::VS;
    uint32_t *const Kh = reinterpret_cast<uint32_t *>(hb + L::KH), *const Kl = reinterpret_cast<uint32_t *>(hb + L::KL);
    uint32_t *const Vh = reinterpret_cast<uint32_t *>(hb + L::VH), *const Vl = reinterpret_cast<uint32_t *>(hb + L::VL);

    const auto [bq, t0, last, n_keys] = at_block(group, n, pos0);
    const int kvh = blockIdx.y;
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const float scale = rsqrtf((float)D);

    int k0 = half * BK;
    load_kv<D, BK, L::SQ>(Kst, K, kvw, kvh, k0, n_keys, ht);
    cp_commit();
    load_kv<D, BK, L::SV>(Vst, V, kvw, kvh, k0, n_keys, ht);
    cp_commit();

    const auto [rA, rB, limA, limB, wlim, qsA, qsB] =
        af_begin<D>(q, q_step, q_tok, group, bq, t0, last, n, pos0, kvh, Qh, Ql, qs);

    float o[NO][4];
    frag_zero(o);
    float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;

    for (; k0 < n_keys; k0 += 2 * BK) {
        const bool active = k0 <= wlim;
        float p[NT][4];
        float resA = 1.f, resB = 1.f;
        cp_wait<1>(); // this tile's K
        half_sync(half);
        { // K split: thread (key ht / 8, part ht % 8); a key's eight threads adjacent lanes
            const int kk = ht >> 3;
            af_split_key<D>(Kst + kk * L::SQ, true, ht & 7, Kh + kk * HQ, Kl + kk * HQ, ks + kk);
        }
        half_sync(half); // Kh, Kl, ks written; the K tile free
        if (k0 + 2 * BK < n_keys)
            load_kv<D, BK, L::SQ>(Kst, K, kvw, kvh, k0 + 2 * BK, n_keys, ht);
        cp_commit();
        if (active)
            af_scores<D>(p, Qh + rA * HQ + 2 * t, Qh + rB * HQ + 2 * t, Ql - Qh, Kh + g * HQ + 2 * t, Kl - Kh, k0, t,
                         limA, limB, scale, qsA, qsB, ks, mA, mB, lA, lB, resA, resB);
        cp_wait<1>(); // this tile's V (the next K may be pending)
        half_sync(half);
        // V split, transposed: thread ht head dims ht, ht + 128, ...: its 16 keys' largest |value|, the 2^14 of P
        // in vs
        for (int d = ht; d < D; d += AT_HALF) {
            uint32_t h[AF_HV], l[AF_HV];
            const float vsc = af_split_v(Vst + d, L::SV, BK, h, l);
            // a head dim's two 16-byte halves swapped where bit 2 of d is set (af_vsw): eight consecutive d's
            // stores then cover all 32 banks (they were two-way conflicts: ncu's 17 M a call at 4096 tokens)
            uint4 *dh = reinterpret_cast<uint4 *>(Vh + d * AF_HV), *dl = reinterpret_cast<uint4 *>(Vl + d * AF_HV);
            const int sw = (d >> 2) & 1;
            dh[sw] = make_uint4(h[0], h[1], h[2], h[3]);
            dh[sw ^ 1] = make_uint4(h[4], h[5], h[6], h[7]);
            dl[sw] = make_uint4(l[0], l[1], l[2], l[3]);
            dl[sw ^ 1] = make_uint4(l[4], l[5], l[6], l[7]);
            vs[d] = vsc;
        }
        half_sync(half); // Vh, Vl, vs written; the V tile free
        if (k0 + 2 * BK < n_keys)
            load_kv<D, BK, L::SV>(Vst, V, kvw, kvh, k0 + 2 * BK, n_keys, ht);
        cp_commit();
        if (active) // head dim 8c + g: bit 2 of it is g's (af_vsw)
            af_pv<D>(o, p, Vh + g * AF_HV + af_vsw(g, t), Vl - Vh, vs, t, resA, resB);
    }
    cp_wait<0>();
    at_finish<D>(o, mA, mB, lA, lB, reinterpret_cast<float *>(Qh), half, ht, rA, rB, t, group, bq, t0, n, kvh, q,
                 q_step, q_tok, out, out_tok, gated);
}

// k_attn_f16p: k_attn_f16 with K and V split once a call, not once a block. k_attn_f16's blocks each split every
// K and V tile they read (a block of 64 rows is 8 tokens x the 8 heads of a group: at 4096 tokens each tile was
// split by up to 512 blocks), ~40 % of a thread's instructions a tile. Here k_attn_presplit splits the call's keys
// (the same splits: a key's 2^e from its own values, a V tile's head dim's from the tile's 16 keys, zeros past
// the call's last key) into stream scratch (AfSplit), and a half copies its tiles' digits with cp.async into two
// stages, the next tile's while this one's are computed: one barrier a tile, not four. V's digits keep the
// natural word order in shared memory (af_vsw was for the split's stores). The result differs from k_attn_f16's
// only where a V tile holds keys past a block's last (that block's keys are zeros there, the call's keys here):
// the tile's scales, p 0 for those keys either way.
struct AfSplit {
    uint32_t *kh, *kl, *vh, *vl; // K: hi, lo words [kv head][key][D / 2]; V: [kv head][tile][D][AF_HV]
    float *ks, *vs;              // K's scale [kv head][key], V's [kv head][tile][D]
    int cap;                     // keys a head (whole tiles)
};

// The split of n_keys keys of n_kv heads of D dims in base (lilac_cuda_attn_split_bytes of them).
AfSplit af_split_in(void *base, int n_keys, int n_kv, int D)
{
    AfSplit sp;
    sp.cap = (n_keys + AF_BK - 1) / AF_BK * AF_BK;
    const size_t kw = (size_t)n_kv * sp.cap * (D / 2), vw = (size_t)n_kv * (sp.cap / AF_BK) * D * AF_HV;
    sp.kh = static_cast<uint32_t *>(base);
    sp.kl = sp.kh + kw;
    sp.ks = reinterpret_cast<float *>(sp.kl + kw);
    sp.vh = reinterpret_cast<uint32_t *>(sp.ks + (size_t)n_kv * sp.cap);
    sp.vl = sp.vh + vw;
    sp.vs = reinterpret_cast<float *>(sp.vl + vw);
    return sp;
}

// Keys 0 .. n_keys - 1 of K and V (rows kvw floats apart) split into sp: a block (AT_HALF threads) a 16-key tile
// and KV head, K a key to eight threads, V a head dim to a thread.
template <int D>
__global__ void __launch_bounds__(AT_HALF) k_attn_presplit(const float *__restrict__ K, const float *__restrict__ V,
                                                         int kvw, int n_keys, AfSplit sp)
{
    const int ht = threadIdx.x, kvh = blockIdx.y, k0 = blockIdx.x * AF_BK;
    {
        const int key = k0 + (ht >> 3);
        const size_t r = (size_t)kvh * sp.cap + key;
        af_split_key<D>(K + (long long)key * kvw + (long long)kvh * D, key < n_keys, ht & 7, sp.kh + r * (D / 2),
                        sp.kl + r * (D / 2), sp.ks + r);
    }
    for (int d = ht; d < D; d += AT_HALF) {
        uint32_t h[AF_HV], l[AF_HV];
        const float vsc = af_split_v(V + (long long)k0 * kvw + (long long)kvh * D + d, kvw, n_keys - k0, h, l);
        const size_t c = ((size_t)kvh * (sp.cap / AF_BK) + blockIdx.x) * D + d;
        uint4 *dh = reinterpret_cast<uint4 *>(sp.vh + c * AF_HV), *dl = reinterpret_cast<uint4 *>(sp.vl + c * AF_HV);
        dh[0] = make_uint4(h[0], h[1], h[2], h[3]);
        dh[1] = make_uint4(h[4], h[5], h[6], h[7]);
        dl[0] = make_uint4(l[0], l[1], l[2], l[3]);
        dl[1] = make_uint4(l[4], l[5], l[6], l[7]);
        sp.vs[c] = vsc;
    }
}

// k_attn_f16p's shared memory in words: Q as k_attn_f16's, then a half's two stages of a tile's digits (K's rows
// padded to HQ words as k_attn_f16's, V's head dims AF_HV words each, unpadded: P V's loads are conflict-free).
template <int D> struct AfpLay {
    static constexpr int HQ = AfLay<D>::HQ, Q = AfLay<D>::Q;
    static constexpr int KH = 0, KL = KH + AF_BK * HQ, KS = KL + AF_BK * HQ, VH = KS + AF_BK, VL = VH + D * AF_HV,
                         VS = VL + D * AF_HV, STAGE = VS + D;
    static constexpr int WORDS = Q + 4 * STAGE; // two halves of two stages
    static_assert(2 * STAGE >= (D / 8) * 4 * AT_HALF + 4 * AT_HALF, "half 1's hand-over fits in its stages");
    static_assert(KL % 4 == 0 && KS % 4 == 0 && VH % 4 == 0 && VL % 4 == 0 && VS % 4 == 0 && STAGE % 4 == 0 &&
                      Q % 4 == 0,
                  "16-byte copies");
};

__device__ __forceinline__ void cp16w(uint32_t *dst, const uint32_t *src)
{
    cp16(reinterpret_cast<float *>(dst), reinterpret_cast<const float *>(src), true);
}

// Tile k0 of KV head kvh's digits from sp into stage st, by a half's AT_HALF threads (cp.async; not committed).
template <int D>
__device__ __forceinline__ void af_stage(uint32_t *st, const AfSplit &sp, int kvh, int k0, int ht)
{
    using L = AfpLay<D>;
    constexpr int KP = D / 8; // 16-byte pieces of a key's hi (or lo) words
    const size_t kr = (size_t)kvh * sp.cap + k0, vr = ((size_t)kvh * (sp.cap / AF_BK) + k0 / AF_BK) * D;
    const uint32_t *gkh = sp.kh + kr * (D / 2), *gkl = sp.kl + kr * (D / 2);
#pragma unroll 4
    for (int i = ht; i < AF_BK * KP; i += AT_HALF) {
        const int r = i / KP, c = i - r * KP;
        cp16w(st + L::KH + r * L::HQ + 4 * c, gkh + r * (D / 2) + 4 * c);
        cp16w(st + L::KL + r * L::HQ + 4 * c, gkl + r * (D / 2) + 4 * c);
    }
    const uint32_t *gvh = sp.vh + vr * AF_HV, *gvl = sp.vl + vr * AF_HV;
#pragma unroll 4
    for (int i = ht; i < D * AF_HV / 4; i += AT_HALF) {
        cp16w(st + L::VH + 4 * i, gvh + 4 * i);
        cp16w(st + L::VL + 4 * i, gvl + 4 * i);
    }
    if (ht < AF_BK / 4)
        cp16w(st + L::KS + 4 * ht, reinterpret_cast<const uint32_t *>(sp.ks + kr) + 4 * ht);
    for (int i = ht; i < D / 4; i += AT_HALF)
        cp16w(st + L::VS + 4 * i, reinterpret_cast<const uint32_t *>(sp.vs + vr) + 4 * i);
}

template <int D>
__global__ void __launch_bounds__(AT_THREADS, 1)
    k_attn_f16p(const float *__restrict__ q, int q_step, long long q_tok, AfSplit sp, int group, int pos0, int n,
                float *__restrict__ out, long long out_tok, int gated)
{
    using L = AfpLay<D>;
    constexpr int BK = AF_BK, NT = BK / 8, NO = D / 8, HQ = L::HQ;
    static_assert(D % 64 == 0 && (D / 16) % AT_SCHUNK == 0 && AT_HALF == 8 * BK, "shape: eight threads a key");
    extern __shared__ float4 af_smem4[];
    uint32_t *const Qh = reinterpret_cast<uint32_t *>(af_smem4), *const Ql = Qh + AT_ROWS * HQ;
    float *const qs = reinterpret_cast<float *>(Ql + AT_ROWS * HQ);
    const int tid = threadIdx.x, half = tid / AT_HALF, ht = tid % AT_HALF;
    uint32_t *const hb = reinterpret_cast<uint32_t *>(af_smem4) + L::Q + half * 2 * L::STAGE; // this half's stages

    const auto [bq, t0, last, n_keys] = at_block(group, n, pos0);
    const int kvh = blockIdx.y;
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const float scale = rsqrtf((float)D);

    int k0 = half * BK;
    if (k0 < n_keys)
        af_stage<D>(hb, sp, kvh, k0, ht);
    cp_commit();

    const auto [rA, rB, limA, limB, wlim, qsA, qsB] =
        af_begin<D>(q, q_step, q_tok, group, bq, t0, last, n, pos0, kvh, Qh, Ql, qs);

    float o[NO][4];
    frag_zero(o);
    float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;

    for (int cur = 0; k0 < n_keys; k0 += 2 * BK, cur ^= 1) {
        cp_wait<0>(); // this tile's digits (this thread's copies)
        half_sync(half); // everyone's; and the other stage's last reads are done
        if (k0 + 2 * BK < n_keys)
            af_stage<D>(hb + (cur ^ 1) * L::STAGE, sp, kvh, k0 + 2 * BK, ht);
        cp_commit();
        if (k0 <= wlim) {
            const uint32_t *const st = hb + cur * L::STAGE;
            float p[NT][4];
            float resA, resB;
            af_scores<D>(p, Qh + rA * HQ + 2 * t, Qh + rB * HQ + 2 * t, Ql - Qh, st + L::KH + g * HQ + 2 * t,
                         L::KL - L::KH, k0, t, limA, limB, scale, qsA, qsB,
                         reinterpret_cast<const float *>(st + L::KS), mA, mB, lA, lB, resA, resB);
            af_pv<D>(o, p, st + L::VH + g * AF_HV + 2 * t, L::VL - L::VH, reinterpret_cast<const float *>(st + L::VS), t,
                     resA, resB);
        }
    }
    cp_wait<0>();
    // the hand-over through half 1's stages (at_finish's barrier first): not Q's buffer, which half 0 may read
    // until that barrier (racecheck reported Q's reads against the hand-over's writes there)
    at_finish<D>(o, mA, mB, lA, lB, reinterpret_cast<float *>(af_smem4) + L::Q + 2 * L::STAGE, half, ht, rA, rB, t,
                 group, bq, t0, n, kvh, q, q_step, q_tok, out, out_tok, gated);
}

// kern (k_attn_mma's or k_attn_f16's signature) over blocks of AT_ROWS / group tokens x the KV heads, with smem
// bytes of dynamic shared memory; -1 where the device refuses that much.
template <class Kern>
int launch_attn(Kern kern, size_t smem, const float *q, int q_step, long long q_tok, const float *K, const float *V,
                int n_head, int n_head_kv, int D, int pos0, int n, float *out, int gated, cudaStream_t st)
{
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    const int group = n_head / n_head_kv, bq = AT_ROWS / group;
    const dim3 grid((unsigned)((n + bq - 1) / bq), (unsigned)n_head_kv);
    kern<<<grid, AT_THREADS, smem, st>>>(q, q_step, q_tok, K, V, n_head_kv * D, group, pos0, n, out,
                                         (long long)n_head * D, gated);
    return 0;
}

int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* LILAC_CUDA_ATTN_F16=0: k_attn_mma (tf32 hi/lo) instead of k_attn_f16. On: test_cuda_attn's timing at hd 256, 512
 * tokens after 3584, 0.723 ms against 1.214 and worst error/bound 0.080 against 0.107; pp4096 12,816/12,826 against
 * 12,106/12,110, pp512 10,549/10,547 against 10,427/10,437 (H200, 2026-12-01). Read once. */
bool f16_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_ATTN_F16", true);
}

/* LILAC_CUDA_ATTN_QSPLIT=0 (with LILAC_CUDA_ATTN_F16=0): Q split at every use (k_attn_mma's QS off). On:
 * test_cuda_attn's timing at hd 256, 512 tokens after 3584, 1.204 ms against 1.277; pp4096 12,082 against 11,965,
 * pp512 10,488 against 10,467 (H200, one call, 2026-12-01). Read once. */
bool qsplit_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_ATTN_QSPLIT", true);
}


/* LILAC_CUDA_ATTN_PRE=0: k_attn_f16 (K and V split by every block) instead of k_attn_f16p (split once a call).
 * Read once. */
bool pre_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_ATTN_PRE", true);
}
std::atomic<long> g_pre{0}; /* k_attn_f16p's calls (lilac_cuda_attn_pre_launches) */

// k_attn_f16p over a call: K and V (keys 0 .. pos0 + n - 1) split into the stream's scratch, then the blocks; -1
// (nothing launched) where the device refuses the shared memory or the scratch is not to be had (it would grow
// while the stream is being captured, or the allocation failed).
template <int D>
int launch_attn_pre(const float *q, int q_step, long long q_tok, const float *K, const float *V, int n_head,
                    int n_head_kv, int pos0, int n, float *out, int gated, cudaStream_t st)
{
    const size_t smem = sizeof(float) * (size_t)AfpLay<D>::WORDS;
    if (cudaFuncSetAttribute(k_attn_f16p<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    const int n_keys = pos0 + n;
    const size_t grow = ((size_t)n_keys + LILAC_CUDA_ATT_GROW - 1) / LILAC_CUDA_ATT_GROW * LILAC_CUDA_ATT_GROW;
    void *base = lilac_cuda_scratch(reinterpret_cast<lilac_cuda_stream *>(st), LILAC_CUDA_SCR_ATTN,
                                    lilac_cuda_attn_split_bytes(grow, (size_t)n_head_kv, D));
    if (!base)
        return -1;
    const AfSplit sp = af_split_in(base, n_keys, n_head_kv, D);
    k_attn_presplit<D><<<dim3((unsigned)(sp.cap / AF_BK), (unsigned)n_head_kv), AT_HALF, 0, st>>>(
        K, V, n_head_kv * D, n_keys, sp);
    const int group = n_head / n_head_kv, bq = AT_ROWS / group;
    k_attn_f16p<D><<<dim3((unsigned)((n + bq - 1) / bq), (unsigned)n_head_kv), AT_THREADS, smem, st>>>(
        q, q_step, q_tok, sp, group, pos0, n, out, (long long)n_head * D, gated);
    g_pre.fetch_add(1, std::memory_order_relaxed);
    return 0;
}

// The attention kernel for head dim D (BK keys a tile in k_attn_mma) the switches choose.
template <int D, int BK>
int launch_attn_d(const float *q, int q_step, long long q_tok, const float *K, const float *V, int n_head,
                  int n_head_kv, int pos0, int n, float *out, int gated, cudaStream_t st)
{
    const size_t mma_smem = sizeof(float) * ((size_t)AT_ROWS * (D + 16) + 2 * (size_t)BK * (2 * D + 20));
    const size_t q_lo = sizeof(float) * (size_t)AT_ROWS * (D + 16); /* QS: Q's lo parts */
    // the fastest the switches allow whose shared memory the device grants (each falls back to the next)
    if (f16_enabled() && pre_enabled() &&
        launch_attn_pre<D>(q, q_step, q_tok, K, V, n_head, n_head_kv, pos0, n, out, gated, st) == 0)
        return 0;
    if (f16_enabled() && launch_attn(k_attn_f16<D>, sizeof(float) * (size_t)AfLay<D>::WORDS, q, q_step, q_tok, K, V,
                                     n_head, n_head_kv, D, pos0, n, out, gated, st) == 0)
        return 0;
    if (qsplit_enabled() && launch_attn(k_attn_mma<D, BK, true>, mma_smem + q_lo, q, q_step, q_tok, K, V, n_head,
                                        n_head_kv, D, pos0, n, out, gated, st) == 0)
        return 0;
    return launch_attn(k_attn_mma<D, BK, false>, mma_smem, q, q_step, q_tok, K, V, n_head, n_head_kv, D, pos0, n,
                       out, gated, st);
}

} // namespace

extern "C" long lilac_cuda_attn_pre_launches(void) { return g_pre.load(std::memory_order_relaxed); }
extern "C" int lilac_cuda_attn_pre_wanted(void) { return f16_enabled() && pre_enabled(); }

extern "C" int lilac_cuda_attn_mma_enabled(void)
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_ATTN_MMA", true);
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
    case 64: return launch_attn_d<64, 32>(q, q_step, q_tok, K, V, n_head, n_head_kv, pos0, n, out, gated, st);
    case 128: return launch_attn_d<128, 16>(q, q_step, q_tok, K, V, n_head, n_head_kv, pos0, n, out, gated, st);
    case 256: return launch_attn_d<256, 16>(q, q_step, q_tok, K, V, n_head, n_head_kv, pos0, n, out, gated, st);
    default: return -1;
    }
}
