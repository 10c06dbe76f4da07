// cuda_gemm: products of float weights (F32, F16, BF16) with many tokens at
// once (prefill chunks, batched decode): y[t][r] = W[r] . x[t] as a tiled
// float32 GEMM on the CUDA cores. k_mv (cuda_quant.cu) streams weights for a
// few tokens a pass and reads them again from L2 for the next few: for the
// F32 router (256 x 2048) and 512 tokens that was 138 us a call on the H200
// (~4 TFLOPS). Here a block holds a 64 x 32 tile of W and of x in shared
// memory and each thread accumulates 4 x 4 outputs: every weight is read
// once per 64 tokens. Plain float32 FMAs in k order: results agree with
// k_mv's to float32 rounding (summation order differs).
// F32 weights (16-byte rows, K a multiple of 4) go to the tensor cores instead, k_gemm_tc: 3xTF32 mma.sync, the
// float32 GEMM's results to rounding (LILAC_CUDA_GEMM_TC=0: k_gemm_f as before).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "format/dtype.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_tc.cuh"
#include "util/env.h"

namespace {

/* columns a tile: 32 at TT 4 (64 x 64 tiles), 128 at TT 2; rows and tokens a tile: 16 TT (TT x TT outputs a
 * thread) */
__host__ __device__ constexpr int gk_of(int TT) { return TT == 2 ? 128 : 32; }
constexpr int G_THREADS = 256; /* 16 x 16 threads */
constexpr int MIN_TOK = 32;              /* lilac_cuda_matvec: fewer tokens stay with k_mv */

template <int TYPE> __device__ __forceinline__ float ldw(const uint8_t *row, int k);
template <> __device__ __forceinline__ float ldw<LILAC_F32>(const uint8_t *row, int k)
{
    return __ldg(reinterpret_cast<const float *>(row) + k);
}
template <> __device__ __forceinline__ float ldw<LILAC_F16>(const uint8_t *row, int k)
{
    return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short *>(row) + k)));
}
template <> __device__ __forceinline__ float ldw<LILAC_BF16>(const uint8_t *row, int k)
{
    return __uint_as_float((uint32_t)__ldg(reinterpret_cast<const unsigned short *>(row) + k) << 16);
}

// Block (bx, by): rows GM bx .., tokens GN by ... (GM = GN = 16 TT). Thread (tx, ty) = (tid % 16, tid / 16)
// owns rows tx + 16 i and tokens ty + 16 j (i, j < TT): a warp's stores are runs of 16 rows, its shared reads
// conflict-free. TT 4 where the grid fills the GPU; 2 for narrow matrices (the F32 router: 256 rows and 512
// tokens make 32 blocks of 64 x 64, 243 us a call against 138 for k_mv; 128 blocks of 32 x 32).
// The next tile's loads are issued before the current one is computed. At TT 2 a tile is 128 columns: the
// router's 2048 were 64 tiles of 32, each a memory round trip one after another (123 us a call, ncu, H200,
// 2026-11-30). Each output is a float32 FMA chain in k order whatever the tile: the same bits.
// Split K (gridDim.z > 1, k_gemm_sum after): block z sums columns [kc z, kc (z + 1)) into part z (y's layout,
// n rows apart), still in k order; the parts are then added in z order.
template <int TYPE, int TT>
__global__ void __launch_bounds__(G_THREADS) k_gemm_f(const uint8_t *w, size_t row_bytes, int rows, int K,
                                                      const float *x, int n, float *y, int kc)
{
    constexpr int GM = 16 * TT, GN = 16 * TT, GK = gk_of(TT), NL = GM * GK / G_THREADS;
    static_assert(GM == GN && NL * G_THREADS == GM * GK, "tile shape");
    __shared__ float Ws[GK][GM + 1], Xs[GK][GN + 1]; /* [k][row], [k][token]; +1: the transposing stores spread */
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int r0 = blockIdx.x * GM, t0 = blockIdx.y * GN;
    const int kb = blockIdx.z * kc, ke = min(K, kb + kc); /* this block's columns (all of them unsplit) */
    y += (size_t)blockIdx.z * n * rows;
    float acc[TT][TT];
#pragma unroll
    for (int i = 0; i < TT; i++)
#pragma unroll
        for (int j = 0; j < TT; j++)
            acc[i][j] = 0.f;
    float wv[NL], xv[NL];
    auto load = [&](int k0) { /* all loads in flight at once */
#pragma unroll
        for (int l = 0; l < NL; l++) {
            const int e = tid + l * G_THREADS, rr = e / GK, kk = e % GK, k = k0 + kk;
            const int r = r0 + rr, t = t0 + rr;
            wv[l] = r < rows && k < ke ? ldw<TYPE>(w + (size_t)r * row_bytes, k) : 0.f;
            xv[l] = t < n && k < ke ? __ldg(x + (size_t)t * K + k) : 0.f;
        }
    };
    load(kb);
    for (int k0 = kb; k0 < ke; k0 += GK) {
        __syncthreads(); /* the previous tile is consumed */
#pragma unroll
        for (int l = 0; l < NL; l++) {
            const int e = tid + l * G_THREADS, rr = e / GK, kk = e % GK;
            Ws[kk][rr] = wv[l];
            Xs[kk][rr] = xv[l];
        }
        __syncthreads();
        if (k0 + GK < ke)
            load(k0 + GK); /* in flight while this tile is computed */
#pragma unroll 8
        for (int kk = 0; kk < GK; kk++) {
            float a[TT], b[TT];
#pragma unroll
            for (int i = 0; i < TT; i++)
                a[i] = Ws[kk][tx + 16 * i], b[i] = Xs[kk][ty + 16 * i];
#pragma unroll
            for (int i = 0; i < TT; i++)
#pragma unroll
                for (int j = 0; j < TT; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }
#pragma unroll
    for (int j = 0; j < TT; j++) {
        const int t = t0 + ty + 16 * j;
        if (t >= n)
            continue;
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const int r = r0 + tx + 16 * i;
            if (r < rows)
                y[(size_t)t * rows + r] = acc[i][j];
        }
    }
}

// y[i] = part[0][i] + part[1][i] + ... (nz parts of m floats each, in order).
__global__ void k_gemm_sum(const float *part, int nz, size_t m, float *y)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m)
        return;
    float v = part[i];
    for (int z = 1; z < nz; z++)
        v += part[(size_t)z * m + i];
    y[i] = v;
}

// ---- F32 weights on the tensor cores ----
// pp4096 13,368/13,377 against 13,209/13,220 with k_gemm_f (LILAC_CUDA_GEMM_TC=0), pp512 10,844/10,891 against
// 10,787/10,796 (H200, alternated in one call, session 19); ncu: 132 us a call at 4096 tokens, tensor pipe 41 %.
// test_cuda_kernels' F32 cases' worst error 2.4e-7 of sum |w x| (k_gemm_f's 5.3e-7).
// Block (bx, by, z): rows TC_M bx .., tokens TC_N by .., columns [kc z, kc (z + 1)) (split K as k_gemm_f's).
// 8 warps of 32 rows x 32 tokens (warp w: rows 32 (w % 4), tokens 32 (w / 4)): 2 m16 x 4 n8 tiles of
// m16n8k8 tf32, W the A operand (row-major), x the B operand (its rows are B's columns), y[t][r] = C[r][t].
// K in tiles of TC_K columns, W's and x's staged in shared memory by cp.async in TC_STAGES stages: the next
// three tiles' copies fly while one is computed (one barrier a tile). 147 registers (ptxas, no spill; at 128,
// two blocks an SM, 232 bytes spilled) make it one block an SM, whose own copies in flight must cover L2's
// latency: 4 stages of 24 KiB rather than 2. 256 rows x 4096 tokens: 128 blocks.
// Shared rows are TC_K = 32 floats unpadded, their 16-byte chunks swizzled (chunk c of row r at c ^ 4 (r & 1)):
// a fragment's float4 loads, rows g = lane / 4 and chunks lane % 4 (+ 4), then take rows g and g + 1 of a
// quarter warp from opposite halves of the banks, and a row's 8 cp16 stores all 32 banks.
// k permuted within 16 columns as in k_attn_mma: thread t's float4 at column 16c + 4t is k8 slice 2c's slots
// t, t + 4 (.x, .y) and slice 2c + 1's (.z, .w), the same for A and B, so each thread reads 16 bytes at once.
// Each value is split to tf32 hi + lo once as it leaves shared memory (a W value is loaded by the 2 warps of its
// rows, an x value by 4: cheaper than a pass over the tile and twice its shared memory).
// Float32 to rounding, deterministic: each tile's 4 slices accumulate from zero in one chain of 12 mma (lo hi,
// hi lo, hi hi a slice: mma3), then add into the float32 sums by FADD, tile after tile. The tensor cores'
// accumulation truncates (k_attn_mma's note): one chain over K = 2048 (768 mma) could bias a sum by up to 768
// units in its last place, ~1e-4 (the test's bound is 1e-5 of sum |w x|); 12 at a time, 12 units.
constexpr int TC_M = 128, TC_N = 64, TC_K = 32, TC_THREADS = 256, TC_STAGES = 4;
constexpr int TC_STAGE = (TC_M + TC_N) * TC_K;                           /* floats: W's rows, then x's */
constexpr size_t TC_SMEM = (size_t)TC_STAGES * TC_STAGE * sizeof(float); /* 96 KiB, dynamic */

__global__ void __launch_bounds__(TC_THREADS, 1)
    k_gemm_tc(const uint8_t *__restrict__ w, size_t row_bytes, int rows, int K, const float *__restrict__ x, int n,
              float *__restrict__ y, int kc)
{
    static_assert(TC_K == 32 && TC_M == 128 && TC_N == 64 && TC_THREADS == 256, "the warp layout below");
    extern __shared__ float4 tc_smem4[];
    float *const sm = reinterpret_cast<float *>(tc_smem4); /* [stage][W's TC_M rows, x's TC_N][TC_K], swizzled */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int wm = warp & 3, wn = warp >> 2;
    const int r0 = blockIdx.x * TC_M, t0 = blockIdx.y * TC_N;
    const int kb = blockIdx.z * kc, ke = min(K, kb + kc);
    y += (size_t)blockIdx.z * n * rows;

    // Chunk e of a tile: row e / 8, chunk e % 8 (4 floats; K % 4 == 0, so a chunk is all in or all out).
    // Past the rows, tokens or columns: zeros (the source is then w or x itself, mapped).
    auto load = [&](int st, int k0) {
#pragma unroll
        for (int l = 0; l < TC_M * TC_K / 4 / TC_THREADS; l++) {
            const int e = tid + l * TC_THREADS, r = e >> 3, c = e & 7, k = k0 + 4 * c;
            const bool ok = r0 + r < rows && k < ke;
            const float *src = ok ? reinterpret_cast<const float *>(w + (size_t)(r0 + r) * row_bytes) + k
                                  : reinterpret_cast<const float *>(w);
            cp16(sm + st * TC_STAGE + r * TC_K + 4 * (c ^ ((r & 1) << 2)), src, ok);
        }
#pragma unroll
        for (int l = 0; l < TC_N * TC_K / 4 / TC_THREADS; l++) {
            const int e = tid + l * TC_THREADS, r = e >> 3, c = e & 7, k = k0 + 4 * c;
            const bool ok = t0 + r < n && k < ke;
            const float *src = ok ? x + (size_t)(t0 + r) * K + k : x;
            cp16(sm + st * TC_STAGE + (TC_M + r) * TC_K + 4 * (c ^ ((r & 1) << 2)), src, ok);
        }
    };

    float acc[2][4][4] = {};
    // A warp whose rows or tokens are all past the edge computes nothing (a 257-row router's third row block).
    const bool busy = r0 + 32 * wm < rows && t0 + 32 * wn < n;
    // This thread's float4s: rows 32 wm + g (+ 8, 16, 24) of W, 32 wn + g (+ 8 j) of x, chunk tq (+ 4) swizzled
    // by g's parity (every one of those rows has it).
    const int sw = (g & 1) << 2, oc0 = 4 * (tq ^ sw), oc1 = 4 * ((4 + tq) ^ sw);
    const int wa = (32 * wm + g) * TC_K, xa = (TC_M + 32 * wn + g) * TC_K;

    // Tile i in stage i % TC_STAGES, in commit group i (empty groups past the part's end keep the count).
#pragma unroll
    for (int i = 0; i < TC_STAGES - 1; i++) {
        if (kb + i * TC_K < ke)
            load(i, kb + i * TC_K);
        cp_commit();
    }
    int st = 0, fill = TC_STAGES - 1; /* the stage computed, the stage copied into */
    for (int k0 = kb; k0 < ke; k0 += TC_K) {
        cp_wait<TC_STAGES - 2>(); /* this thread's copies of this tile */
        __syncthreads();          /* everyone's; and every warp is done with stage fill (the previous tile) */
        if (k0 + (TC_STAGES - 1) * TC_K < ke)
            load(fill, k0 + (TC_STAGES - 1) * TC_K);
        cp_commit();
        const float *ws = sm + st * TC_STAGE + wa, *xs = sm + st * TC_STAGE + xa;
        st = st + 1 == TC_STAGES ? 0 : st + 1;
        fill = fill + 1 == TC_STAGES ? 0 : fill + 1;
        if (!busy)
            continue;
        float u[2][4][4] = {}; /* this tile's products, from zero */
#pragma unroll
        for (int c = 0; c < 2; c++) { /* columns 16c .. 16c + 15: slices 2c, 2c + 1 */
            const int oc = c ? oc1 : oc0;
            uint32_t ah[2][2][4], al[2][2][4]; /* [m16 tile][slice][a0..a3] */
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float4 p = *reinterpret_cast<const float4 *>(ws + 16 * i * TC_K + oc);       /* row g */
                const float4 q = *reinterpret_cast<const float4 *>(ws + (16 * i + 8) * TC_K + oc); /* row g + 8 */
                tf32_split(p.x, ah[i][0][0], al[i][0][0]);
                tf32_split(q.x, ah[i][0][1], al[i][0][1]);
                tf32_split(p.y, ah[i][0][2], al[i][0][2]);
                tf32_split(q.y, ah[i][0][3], al[i][0][3]);
                tf32_split(p.z, ah[i][1][0], al[i][1][0]);
                tf32_split(q.z, ah[i][1][1], al[i][1][1]);
                tf32_split(p.w, ah[i][1][2], al[i][1][2]);
                tf32_split(q.w, ah[i][1][3], al[i][1][3]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float4 v = *reinterpret_cast<const float4 *>(xs + 8 * j * TC_K + oc); /* token 8j + g */
                uint32_t bh0, bl0, bh1, bl1;
                tf32_split(v.x, bh0, bl0);
                tf32_split(v.y, bh1, bl1);
#pragma unroll
                for (int i = 0; i < 2; i++)
                    mma3<false>(u[i][j], ah[i][0], al[i][0], bh0, bh1, bl0, bl1);
                tf32_split(v.z, bh0, bl0);
                tf32_split(v.w, bh1, bl1);
#pragma unroll
                for (int i = 0; i < 2; i++)
                    mma3<false>(u[i][j], ah[i][1], al[i][1], bh0, bh1, bl0, bl1);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[i][j][e] += u[i][j][e];
    }
    cp_wait<0>(); /* the last (empty) groups: nothing left in flight at exit */
    if (!busy)
        return;
    // C's (c0, c1) are row g, tokens 2 tq, 2 tq + 1; (c2, c3) row g + 8: a store of a warp writes 8 consecutive
    // rows (32 bytes) of 4 tokens.
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = r0 + 32 * wm + 16 * i + g;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int t = t0 + 32 * wn + 8 * j + 2 * tq;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int rr = r + (e >> 1) * 8, tt = t + (e & 1);
                if (rr < rows && tt < n)
                    y[(size_t)tt * rows + rr] = acc[i][j][e];
            }
        }
    }
}

int esize(int type) { return type == LILAC_F32 ? 4 : type == LILAC_F16 || type == LILAC_BF16 ? 2 : 0; }

template <int TYPE, int TT>
void launch(const uint8_t *w, size_t row_bytes, int rows, int K, const float *x, int n, float *y, cudaStream_t st,
            int nz = 1, int kc = 0)
{
    const dim3 grid((unsigned)((rows + 16 * TT - 1) / (16 * TT)), (unsigned)((n + 16 * TT - 1) / (16 * TT)),
                    (unsigned)nz);
    k_gemm_f<TYPE, TT><<<grid, G_THREADS, 0, st>>>(w, row_bytes, rows, K, x, n, y, nz > 1 ? kc : K);
}

/* LILAC_CUDA_GEMM_SPLIT (on; =0 off): where the 64 x 64 tiles leave the GPU
 * short of two blocks an SM, K split over blockIdx.z into parts in the tensor-core products' scratch (borrowed:
 * no growth; without room, the 32 x 32 tiles as before), added by k_gemm_sum in part order. The prefill's F32
 * router (257 x 2048, 512 tokens: 40 tiles of 64 x 64) takes 6 parts of 352 columns, 240 blocks (two an SM at
 * 128 registers) of 16 FMAs a thread per 8 shared loads, where its 32 x 32 tiles (144 blocks) do 4 FMAs per 4
 * loads (4.3 % of pp512 in ncu, session 12). pp512 9,605/9,631 and pp4096 10,900/10,831 against 9,440/9,445 and
 * 10,722/10,679 (H200, one call, 2026-11-30). Read once. */
std::atomic<long> g_split{0}; /* launches that split K (lilac_cuda_gemm_split_launches) */

bool split_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_GEMM_SPLIT", true);
}

template <int TYPE>
void launch_t(const uint8_t *w, size_t row_bytes, int rows, int K, const float *x, int n, float *y,
              lilac_cuda_stream *s)
{
    const cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
    const long long big = (long long)((rows + 63) / 64) * ((n + 63) / 64), sms = dev_sm_count();
    if (big >= sms) {
        launch<TYPE, 4>(w, row_bytes, rows, K, x, n, y, st);
        return;
    }
    constexpr int GK = gk_of(4);
    const int tiles = (K + GK - 1) / GK; /* column tiles */
    /* parts: the grid within two blocks an SM (one wave), each a whole number of column tiles */
    const int want = (int)(2 * sms / big) < tiles ? (int)(2 * sms / big) : tiles;
    if (split_enabled() && want > 1) {
        const int kc = (tiles + want - 1) / want * GK, nz = (K + kc - 1) / kc;
        const size_t m = (size_t)n * rows;
        float *part = static_cast<float *>(lilac_cuda_mma_scratch_borrow(s, (size_t)nz * m * sizeof(float)));
        if (part) {
            launch<TYPE, 4>(w, row_bytes, rows, K, x, n, part, st, nz, kc);
            k_gemm_sum<<<(unsigned)((m + 255) / 256), 256, 0, st>>>(part, nz, m, y);
            g_split.fetch_add(1, std::memory_order_relaxed);
            return;
        }
    }
    launch<TYPE, 2>(w, row_bytes, rows, K, x, n, y, st);
}

/* LILAC_CUDA_GEMM_TC (on; =0 off): F32 weights on the tensor cores (k_gemm_tc), where they fit it. Read once. */
std::atomic<long> g_tc{0}; /* k_gemm_tc's launches (lilac_cuda_gemm_tc_launches) */

bool tc_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_GEMM_TC", true);
}

/* cp16 copies 16 bytes: W's rows and x's at 16-byte addresses (x's rows are K floats apart). */
bool tc_fits(const uint8_t *w, size_t row_bytes, int K, const float *x, int n)
{
    return n >= MIN_TOK && K % 4 == 0 && row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

/* Where the tiles leave multiprocessors without a block (the router's 256 rows x 512 tokens: 16 tiles), K split
 * into parts as for k_gemm_f (LILAC_CUDA_GEMM_SPLIT, the borrowed scratch, k_gemm_sum in part order): about one
 * block an SM, each part whole tiles of TC_K columns (512 tokens: 8 parts of 256 columns, 128 blocks). One block
 * an SM rather than two: the parts' round trip through the scratch grows with their number. Unmeasured. */
bool launch_tc(const uint8_t *w, size_t row_bytes, int rows, int K, const float *x, int n, float *y,
               lilac_cuda_stream *s)
{
    if (cudaFuncSetAttribute(k_gemm_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)TC_SMEM) != cudaSuccess) {
        (void)cudaGetLastError(); /* a device without 96 KiB a block: k_gemm_f */
        return false;
    }
    const cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
    const long long gx = (rows + TC_M - 1) / TC_M, gy = (n + TC_N - 1) / TC_N, sms = dev_sm_count();
    const int tiles = (K + TC_K - 1) / TC_K;
    const long long room = sms / (gx * gy); /* grids of this size a wave holds at one block an SM */
    const int want = room < tiles ? (int)room : tiles;
    int nz = 1, kc = K;
    float *out = y;
    const size_t m = (size_t)n * rows;
    if (want > 1 && split_enabled()) {
        const int kc2 = (tiles + want - 1) / want * TC_K, nz2 = (K + kc2 - 1) / kc2;
        void *part = nz2 > 1 ? lilac_cuda_mma_scratch_borrow(s, (size_t)nz2 * m * sizeof(float)) : nullptr;
        if (part)
            nz = nz2, kc = kc2, out = static_cast<float *>(part);
    }
    k_gemm_tc<<<dim3((unsigned)gx, (unsigned)gy, (unsigned)nz), TC_THREADS, TC_SMEM, st>>>(w, row_bytes, rows, K,
                                                                                          x, n, out, kc);
    if (nz > 1) {
        k_gemm_sum<<<(unsigned)((m + 255) / 256), 256, 0, st>>>(out, nz, m, y);
        g_split.fetch_add(1, std::memory_order_relaxed);
    }
    g_tc.fetch_add(1, std::memory_order_relaxed);
    return true;
}

} // namespace

extern "C" {

/* k_gemm_tc's launches so far (for tests: that F32 products took the tensor cores). */
long lilac_cuda_gemm_tc_launches(void) { return g_tc.load(std::memory_order_relaxed); }

long lilac_cuda_gemm_split_launches(void) { return g_split.load(std::memory_order_relaxed); }

int lilac_cuda_gemm_min_tokens(void)
{
    static int off = -1; /* LILAC_CUDA_GEMM=0: k_mv for every token count */
    if (off < 0)
        off = !lilac_env_switch("LILAC_CUDA_GEMM", true);
    return off ? 0x7fffffff : MIN_TOK;
}

int lilac_cuda_matvec_gemm(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s)
{
    const int es = W ? esize(W->type) : 0;
    if (!es || !x || !y || !W->data || n_tok < 1 || W->rows < 1 || W->cols < 1 || W->rows > 0x7fffffff ||
        W->cols > 0x7fffffff || W->row_bytes < (size_t)W->cols * es || W->row_bytes % es ||
        reinterpret_cast<uintptr_t>(W->data) % es || (n_tok + 31) / 32 > 65535)
        return -1;
    const uint8_t *w = static_cast<const uint8_t *>(W->data);
    const int rows = (int)W->rows, K = (int)W->cols;
    switch (W->type) {
    case LILAC_F32:
        if (!tc_enabled() || !tc_fits(w, W->row_bytes, K, x, n_tok) ||
            !launch_tc(w, W->row_bytes, rows, K, x, n_tok, y, s))
            launch_t<LILAC_F32>(w, W->row_bytes, rows, K, x, n_tok, y, s);
        break;
    case LILAC_F16: launch_t<LILAC_F16>(w, W->row_bytes, rows, K, x, n_tok, y, s); break;
    default: launch_t<LILAC_BF16>(w, W->row_bytes, rows, K, x, n_tok, y, s); break;
    }
    return 0;
}

} // extern "C"
