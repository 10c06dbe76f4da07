// cuda_gemm: products of float weights (F32, F16, BF16) with many tokens at
// once (prefill chunks, batched decode): y[t][r] = W[r] . x[t] as a tiled
// float32 GEMM on the CUDA cores. k_mv (cuda_quant.cu) streams weights for a
// few tokens a pass and reads them again from L2 for the next few: for the
// F32 router (256 x 2048) and 512 tokens that was 138 us a call on the H200
// (~4 TFLOPS). Here a block holds a 64 x 32 tile of W and of x in shared
// memory and each thread accumulates 4 x 4 outputs: every weight is read
// once per 64 tokens. Plain float32 FMAs in k order: results agree with
// k_mv's to float32 rounding (summation order differs).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "format/dtype.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"
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

} // namespace

extern "C" {

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
    case LILAC_F32: launch_t<LILAC_F32>(w, W->row_bytes, rows, K, x, n_tok, y, s); break;
    case LILAC_F16: launch_t<LILAC_F16>(w, W->row_bytes, rows, K, x, n_tok, y, s); break;
    default: launch_t<LILAC_BF16>(w, W->row_bytes, rows, K, x, n_tok, y, s); break;
    }
    return 0;
}

} // extern "C"
