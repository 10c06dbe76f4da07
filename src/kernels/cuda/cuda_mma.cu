/* cuda_mma: the many-token products (prefill) on the tensor cores, for the
 * quantized types Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0, with results that agree
 * with float32 to rounding.
 *
 * Exactness. Neither operand is rounded to 16 bits:
 *  - weights: the integer codes of a block are exact in fp16 (Q4_K q, and
 *    q * sc with the 6-bit sub-block scale folded in: at most 945; Q5_K
 *    q * sc, at most 1953; Q6_K q - 32; Q8_0 q; Q4_0 q - 8). The float
 *    scales are applied in float32 to the mma result of the run of values
 *    they scale (a Q4_K/Q5_K super-block, a Q8_0/Q4_0 block, 16 values of
 *    Q6_K); the K-quant minimum, -dmin sum_s m_s sum(x over run s), as one
 *    more mma a super-block: the 6-bit m exact in fp16, the run sums as
 *    fp16 hi + lo of sum 2^-6 (22 bits; xsum_put), times dmin 2^6 in
 *    float32;
 *  - activations: a pre-pass (k_mma_prep) scales each row of x by a power
 *    of two 2^sh (exact) so that its largest |value| lies in [2^13, 2^14),
 *    and splits every value v into hi = fp16(v) and lo = fp16(v - hi): two
 *    mma's (hi, lo) into the same fragment. hi + lo keeps 22 bits of every
 *    value within 2^-16 of the row's largest; smaller ones keep an absolute
 *    error under 2^-38 of it (fp16 is floating point: a power-of-two scale
 *    only has to keep the values in its range, and the large one keeps lo
 *    out of fp16's subnormals). The result is scaled back by 2^-sh once.
 *  The tensor cores multiply fp16 exactly and accumulate in float32; the
 *  errors are float32 roundings of sums of |terms| (test_cuda_mma checks
 *  1e-5 * sum |w x| against a float64 reference). A NaN or Inf in a row of x
 *  makes that row's outputs NaN; an all-zero row gives zeros.
 *
 * Kernel (k_mma): a block of 8 warps (4 along the rows, 2 along the tokens;
 * for 16- and 24-token tiles, 8 x 1) computes BM = 128 weight rows x BN = TN
 * tokens (16, 24, 32 or 64); a warp 32 rows (two m16 tiles) x TN / 2 tokens
 * (TN / 16 n8 tiles), or 16 rows x TN. K goes by 256 columns (a K-quant
 * super-block, 8 Q8_0/Q4_0 blocks): the rows' raw bytes (the 16-byte
 * granules around them, cp.async) and the tokens' hi/lo digits go to shared
 * memory, double-buffered (a half-warp copies a row's granules, the
 * addresses set up once an item); per-row scales are decoded once a stage
 * into small tables, a thread a row; every thread then decodes its A fragments from the raw
 * bytes (a LOP3 and an HFMA2 per two values: 1024 + q as fp16 is the code
 * bits ORed into 0x6400) and reads its B fragments with one 16-byte load
 * per n-tile, the pre-pass having stored the digits in fragment order.
 *
 * Grouped (experts): the tiles are (expert, run of BN of its pairs) x row
 * tiles. Every block builds the prefix of tiles per expert from offsets in
 * shared memory (a few hundred ints), and walks items blockIdx.x,
 * blockIdx.x + gridDim.x, ...: the grid is what fits on the device, sized on
 * the host without knowing the counts; nothing goes back to the host.
 * Where the caller gives rows_of_x and the rows of x (n_x: gate and up,
 * whose pairs map to token rows), the pre-pass converts each x row once and
 * the tile finds pair i's digits, sums and exponent at row rows_of_x[i] (a
 * table of the tile's BN rows in shared memory); else (down: x a pair) it
 * writes a pair's digits at the pair's index. LILAC_CUDA_MMA_XROWS=0: a
 * pair's digits at its index always (the same digits: the same bits).
 * Tiles of 16 tokens (the usual expert tile: ~16 pairs an expert)
 * put the 8 warps along the rows (see Lay) and ask for two blocks an SM;
 * LILAC_CUDA_MMA_W8=0 keeps the 4 x 2 layout.
 *
 * Scratch: the digits live in a device buffer per (device, stream), grown
 * at a call that needs more (outside graph capture; a call being captured
 * that would need to grow it takes the CUDA-core path instead). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "format/dtype.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_sizes.h"
#include "kernels/cuda/cuda_trace.cuh"
#include "util/env.h"

LILAC_TRACE_TU(mma)

namespace {

constexpr int MM_WARPS_M = 4, MM_WARPS_N = 2;
constexpr int MM_THREADS = 32 * MM_WARPS_M * MM_WARPS_N;
constexpr int BM = 32 * MM_WARPS_M;  /* weight rows a block */
constexpr int XB = LILAC_CUDA_XQ_BLOCK; /* 128 bytes of digits a token and 32 columns: hi[32], lo[32] */
constexpr int XROW = 8 * XB + 64;    /* a token's 256 columns in shared memory, padded (bank spread) */
constexpr int MAX_EXPERT = 1024;     /* grouped: experts the tile prefix in shared memory holds */
/* lilac_cuda_matvec: fewer tokens stay on the CUDA cores. From 16 on the H200, batched decode of the
 * 35B-A3B file gave 673-695 tok/s at 32 sequences (k_mv: 793) and 1038-1075 at 64 (k_mv: 931). */
constexpr int MIN_TOK = 48;
constexpr int MIN_PAIRS = 64;        /* lilac_cuda_matvec_grouped: max_pairs below this too */

enum { KIND_SB, KIND_32, KIND_16 }; /* where the float scales apply: super-block, 32 values, 16 values */

template <int TYPE> struct MQ;
/* BYTES: one 256-column chunk of a row; SLOT: shared memory a row's chunk
 * takes (the 16-byte granules around BYTES at any 2-aligned start, rounded
 * to 16 times an odd number: rows g = 0..7 then fall in distinct banks);
 * NTAB: float scale table entries a row. */
template <> struct MQ<LILAC_Q4_K> {
    static constexpr int BYTES = 144, SLOT = 176, KIND = KIND_SB, NTAB = 8;
};
template <> struct MQ<LILAC_Q5_K> {
    static constexpr int BYTES = 176, SLOT = 208, KIND = KIND_SB, NTAB = 8;
};
template <> struct MQ<LILAC_Q6_K> {
    static constexpr int BYTES = 210, SLOT = 240, KIND = KIND_16, NTAB = 16;
};
template <> struct MQ<LILAC_Q8_0> {
    static constexpr int BYTES = 272, SLOT = 304, KIND = KIND_32, NTAB = 8;
};
template <> struct MQ<LILAC_Q4_0> {
    static constexpr int BYTES = 144, SLOT = 176, KIND = KIND_32, NTAB = 8;
};

/* ------------------------------------------------------------------ */
/* device helpers */

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared; src_bytes 0 writes zeros (src must still be a valid address). */
__device__ __forceinline__ void cp16(void *dst, const void *src, int src_bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* A 32-bit word of shared memory at p: 4-aligned (A4) or only 2-aligned. */
template <bool A4> __device__ __forceinline__ uint32_t ld32(const uint8_t *p)
{
    if (A4)
        return *reinterpret_cast<const uint32_t *>(p);
    const unsigned short *q = reinterpret_cast<const unsigned short *>(p);
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}
__device__ __forceinline__ float h2f_s(const uint8_t *p) /* an fp16 at a 2-aligned shared address */
{
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(p)));
}

__device__ __forceinline__ uint32_t h2u(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 u2h(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }
__device__ __forceinline__ uint32_t pk(float a, float b) { return h2u(__floats2half2_rn(a, b)); }

/* fma.rn.f16x2: the product and sum in infinite precision, one rounding
 * (exact here: every result is a small integer). */
__device__ __forceinline__ uint32_t hfma2u(uint32_t a, uint32_t b, uint32_t c)
{
    return h2u(__hfma2(u2h(a), u2h(b), u2h(c)));
}

/* Sub-block i (0..7) of a K-quant super-block: its 6-bit scale and minimum from the 12 scale bytes as words s0,
 * s1, s2 (lilac_kq_scale_min's packing). */
__device__ __forceinline__ void kq_sc_m(uint32_t s0, uint32_t s1, uint32_t s2, int i, int &sc, int &m)
{
    const int j = i & 3, sa = (s0 >> (8 * j)) & 0xFF, sm = (s1 >> (8 * j)) & 0xFF;
    if (i < 4) {
        sc = sa & 63, m = sm & 63;
    } else {
        const int hi4 = (s2 >> (8 * j)) & 0xFF;
        sc = (hi4 & 0xF) | ((sa >> 6) << 4), m = (hi4 >> 4) | ((sm >> 6) << 4);
    }
}

/* The (mult, add) half2 pair Dec folds sub-block i's scale sc in with: (1024 + q) sc - 1024 sc, or for odd Q4_K
 * sub-blocks (codes seen as 16 q) (1024 + 16 q) sc / 16 - 64 sc. */
template <int TYPE> __device__ __forceinline__ uint2 kq_tab(int i, int sc)
{
    const bool hiq = TYPE == LILAC_Q4_K && (i & 1);
    const float f = (float)sc;
    const float mul = hiq ? f * 0.0625f : f, add = hiq ? -64.f * f : -1024.f * f;
    return make_uint2(pk(mul, mul), pk(add, add));
}

/* (a & m) | c as one lop3 of three registers: written as & and |, with m and c constants, ptxas made two LOP3s
 * of it (a LOP3 takes one immediate), ~2.1 a Dec where 1 does (ncu of k_mvt, session 26); the same bits, pp512
 * 11,897/11,905 against 11,743/11,762 (H200, session 27). */
__device__ __forceinline__ uint32_t mask_or(uint32_t a, uint32_t m, uint32_t c)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
    return d;
}

/* Codes of values v = 16h + 4tig + {0, 1, 2, 3} of sub-block s (32 values)
 * of a row's 256-column chunk at b (shared memory), as fp16 pairs (v0, v2)
 * and (v1, v3): the A fragment's two registers of that row. For Q4_K/Q5_K,
 * tab holds the (mult, add) half2 pair that folds sc in. */
template <int TYPE, bool A4> struct Dec;

template <bool A4> struct Dec<LILAC_Q4_K, A4> {
    static __device__ __forceinline__ void run(const uint8_t *b, int s, int h, int tig, uint2 ma, uint32_t &p02,
                                               uint32_t &p13)
    {
        const uint32_t w = ld32<A4>(b + 16 + 32 * (s >> 1) + 16 * h + 4 * tig);
        const uint32_t m = (s & 1) ? 0x00F000F0u : 0x000F000Fu;
        p02 = hfma2u(mask_or(w, m, 0x64006400u), ma.x, ma.y);
        p13 = hfma2u(mask_or(w >> 8, m, 0x64006400u), ma.x, ma.y);
    }
};
template <bool A4> struct Dec<LILAC_Q5_K, A4> {
    static __device__ __forceinline__ void run(const uint8_t *b, int s, int h, int tig, uint2 ma, uint32_t &p02,
                                               uint32_t &p13)
    {
        const uint32_t w = ld32<A4>(b + 48 + 32 * (s >> 1) + 16 * h + 4 * tig);
        const uint32_t u = ld32<A4>(b + 16 + 16 * h + 4 * tig);
        const uint32_t q = (((s & 1) ? w >> 4 : w) & 0x0F0F0F0Fu) | (((u >> s) << 4) & 0x10101010u);
        p02 = hfma2u(mask_or(q, 0x00FF00FFu, 0x64006400u), ma.x, ma.y);
        p13 = hfma2u(mask_or(q >> 8, 0x00FF00FFu, 0x64006400u), ma.x, ma.y);
    }
};
template <bool A4> struct Dec<LILAC_Q6_K, A4> {
    static __device__ __forceinline__ void run(const uint8_t *b, int s, int h, int tig, uint2, uint32_t &p02,
                                               uint32_t &p13)
    {
        const int n = s >> 2, Q = s & 3;
        const uint32_t ql = ld32<A4>(b + 64 * n + 32 * (Q & 1) + 16 * h + 4 * tig);
        const uint32_t qh = ld32<A4>(b + 128 + 32 * n + 16 * h + 4 * tig);
        const uint32_t q = (((Q & 2) ? ql >> 4 : ql) & 0x0F0F0F0Fu) | (((qh >> (2 * Q)) & 0x03030303u) << 4);
        const uint32_t one = 0x3C003C00u, off = 0xE420E420u; /* 1.0, -1056.0 */
        p02 = hfma2u(mask_or(q, 0x00FF00FFu, 0x64006400u), one, off);
        p13 = hfma2u(mask_or(q >> 8, 0x00FF00FFu, 0x64006400u), one, off);
    }
};
template <bool A4> struct Dec<LILAC_Q8_0, A4> {
    static __device__ __forceinline__ void run(const uint8_t *b, int s, int h, int tig, uint2, uint32_t &p02,
                                               uint32_t &p13)
    {
        const uint32_t u = ld32<false>(b + 34 * s + 2 + 16 * h + 4 * tig) ^ 0x80808080u; /* q + 128 */
        const uint32_t one = 0x3C003C00u, off = 0xE480E480u;                              /* 1.0, -1152.0 */
        p02 = hfma2u(mask_or(u, 0x00FF00FFu, 0x64006400u), one, off);
        p13 = hfma2u(mask_or(u >> 8, 0x00FF00FFu, 0x64006400u), one, off);
    }
};
template <bool A4> struct Dec<LILAC_Q4_0, A4> {
    static __device__ __forceinline__ void run(const uint8_t *b, int s, int h, int tig, uint2, uint32_t &p02,
                                               uint32_t &p13)
    {
        const uint32_t w = ld32<false>(b + 18 * s + 2 + 4 * tig);
        /* h = 0: low nibbles, 1024 + q, minus 1032; h = 1: high ones, (1024 + 16 q) / 16 - 72 */
        const uint32_t m = h ? 0x00F000F0u : 0x000F000Fu;
        const uint32_t mul = h ? 0x2C002C00u : 0x3C003C00u; /* 1/16, 1.0 */
        const uint32_t off = h ? 0xD480D480u : 0xE408E408u; /* -72.0, -1032.0 */
        p02 = hfma2u(mask_or(w, m, 0x64006400u), mul, off);
        p13 = hfma2u(mask_or(w >> 8, m, 0x64006400u), mul, off);
    }
};

/* ------------------------------------------------------------------ */
/* the pre-pass */

/* Row i < count (count = min(n, *n_dev) when n_dev is set) of x (x row map[i],
 * or i) to digits: xq + i * (K / 32) * XB, each 32 columns hi[32] then
 * lo[32] with value 16h + 4t + {0, 2, 1, 3} at position 8t + 4h + {0, 1, 2,
 * 3} (the fragment order), xsum (the sums of the scaled values over each 32 columns, as the B
 * fragment of the K-quant minimum's mma: see xsum_put) and xexp[i] (y = acc * 2^xexp; INT_MAX: the row had a
 * NaN or Inf).
 *
 * A block a row (grid-strided), a thread a run of 32 columns: its 32 loads in flight at once (VEC: as 8
 * 16-byte loads), the row's largest |value| reduced over the block, then the thread converts the run it
 * holds. Where the row has more runs than the block threads (K > 32 * blockDim), a thread takes several and
 * loads each again to convert it. Session 9's kernel (a warp a row, 8 rows a block, the largest |value| a
 * strided loop of one load at a time) took ~22 us for 512 x 2048 (ncu, H200): 64 blocks, each load a
 * memory round trip; the digits, sums and exponents are the same bits. */
/* Sum s of run blk of row `row` (NB runs a row) into xsum as fp16 hi and lo halves of s 2^-6 (|s| < 2^19 would
 * overflow fp16; hi + lo keeps 22 bits, or an absolute 2^-19 where lo is subnormal): per 256 columns 8 words,
 * word 2i the hi pair of runs 2i and 2i + 1, word 2i + 1 their lo pair, i.e. the B fragment (k = run, hi then
 * lo) a thread of tig = i loads with one 8-byte read. */
__device__ __forceinline__ void xsum_put(float *xsum, int NB, int row, int blk, float s)
{
    const float v = s * 0.015625f;
    const __half h = __float2half_rn(v), l = __float2half_rn(v - __half2float(h));
    __half *d =
        reinterpret_cast<__half *>(xsum) + ((size_t)row * NB + (blk & ~7) + 2 * ((blk & 7) >> 1)) * 2 + (blk & 1);
    d[0] = h;
    d[2] = l;
}

template <bool VEC, int N> __device__ __forceinline__ void prep_load(const float *s, float (&v)[N])
{
    if constexpr (VEC) {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const float4 f = reinterpret_cast<const float4 *>(s)[i];
            v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = s[i];
    }
}

/* prep_load, or with u (the up projection's run beside the gate's s) the SwiGLU glu(s, u): k_swiglu's bits. */
template <bool VEC, int N> __device__ __forceinline__ void prep_load2(const float *s, const float *u, float (&v)[N])
{
    prep_load<VEC>(s, v);
    if (u) {
        float w[N];
        prep_load<VEC>(u, w);
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = glu(v[i], w[i]);
    }
}

/* The pre-pass's row maximum: a thread's values into amax, and whether one is a NaN or an Inf. */
template <int N> __device__ __forceinline__ void prep_max(const float (&v)[N], float &amax, bool &bad)
{
#pragma unroll
    for (int i = 0; i < N; i++) {
        const float a = fabsf(v[i]);
        bad |= !(a <= FLT_MAX);
        amax = fmaxf(amax, a);
    }
}

/* The row's scale 2^sh from the block's threads' maxima (red: a float a warp), bad made the block's; thread 0
 * writes the row's exponent (INT_MAX where bad). Ends with the block's barrier (red ordered). */
__device__ __forceinline__ int prep_shift(float amax, bool &bad, float *red, int *xexp, int row)
{
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int o = 16; o; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((tid & 31) == 0)
        red[tid >> 5] = amax;
    bad = __syncthreads_or(bad); /* also orders red */
    amax = 0.f;
    for (int w = 0; w < (nt + 31) / 32; w++)
        amax = fmaxf(amax, red[w]);
    int e = 0;
    if (amax > 0.f)
        (void)frexpf(amax, &e); /* amax in [2^(e-1), 2^e) */
    const int sh = 14 - e;      /* scaled: max in [2^13, 2^14) */
    if (tid == 0)
        xexp[row] = bad ? INT_MAX : -sh;
    return sh;
}

/* x2 (or NULL): the SwiGLU's up rows at x's layout, x the gate's: the rows converted are silu(x) x2. */
template <bool VEC>
__global__ void __launch_bounds__(256) k_mma_prep(const float *x, const float *x2, long long x_stride,
                                                  const int32_t *map, int n, const int32_t *n_dev, int K, uint8_t *xq,
                                                  float *xsum, int *xexp)
{
    __shared__ float red[8];
    const int count = n_dev ? min(n, __ldg(n_dev)) : n;
    const int NB = K / 32, tid = threadIdx.x, nt = blockDim.x;
    const bool held = NB <= nt; /* each thread at most one run: it keeps its values between the passes */
    for (int row = blockIdx.x; row < count; row += gridDim.x) {
        const long long off = (long long)(map ? __ldg(map + row) : row) * x_stride;
        const float *src = x + off, *src2 = x2 ? x2 + off : nullptr;
        float v[32];
        float amax = 0.f;
        bool bad = false;
        for (int blk = tid; blk < NB; blk += nt) {
            prep_load2<VEC>(src + 32 * blk, src2 ? src2 + 32 * blk : nullptr, v);
            prep_max(v, amax, bad);
        }
        const int sh = prep_shift(amax, bad, red, xexp, row);
        for (int blk = tid; blk < NB; blk += nt) {
            if (!held)
                prep_load2<VEC>(src + 32 * blk, src2 ? src2 + 32 * blk : nullptr, v);
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < 32; i++) {
                v[i] = bad ? 0.f : ldexpf(v[i], sh);
                sum += v[i];
            }
            uint32_t hi[16], lo[16];
#pragma unroll
            for (int t = 0; t < 4; t++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int k = 0; k < 2; k++) { /* word 4t + 2h + k: values 16h + 4t + k and + k + 2 */
                        const float a = v[16 * h + 4 * t + k], b = v[16 * h + 4 * t + k + 2];
                        const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
                        const __half la = __float2half_rn(a - __half2float(ha)),
                                     lb = __float2half_rn(b - __half2float(hb));
                        hi[4 * t + 2 * h + k] = h2u(__halves2half2(ha, hb));
                        lo[4 * t + 2 * h + k] = h2u(__halves2half2(la, lb));
                    }
            uint4 *d = reinterpret_cast<uint4 *>(xq + ((size_t)row * NB + blk) * XB);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                d[i] = make_uint4(hi[4 * i], hi[4 * i + 1], hi[4 * i + 2], hi[4 * i + 3]);
                d[4 + i] = make_uint4(lo[4 * i], lo[4 * i + 1], lo[4 * i + 2], lo[4 * i + 3]);
            }
            xsum_put(xsum, NB, row, blk, sum);
        }
        __syncthreads(); /* red is the next row's */
    }
}

/* Part q (values 8 q .. 8 q + 7, already scaled) of a run of 32 as its digits at d (the run's XB bytes, global
 * or shared memory), four adjacent lanes a run; returns the run's sum, added in k_mma_prep's order (value 0 to
 * 31: quad_run_sum). */
__device__ __forceinline__ float prep_part_put(const float (&v)[8], int q, int lane, uint8_t *d)
{
    const float run = quad_run_sum(v, q, lane);
    /* word 4t + 2h + k of the run: values 16h + 4t + k and + 2; this lane's values 8q .. are h = q / 2,
     * t = 2 (q % 2) + tt, its values 4 tt + k and + 2 */
#pragma unroll
    for (int tt = 0; tt < 2; tt++) {
        uint32_t hi[2], lo[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const float a = v[4 * tt + k], b = v[4 * tt + k + 2];
            const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
            const __half la = __float2half_rn(a - __half2float(ha)), lb = __float2half_rn(b - __half2float(hb));
            hi[k] = h2u(__halves2half2(ha, hb));
            lo[k] = h2u(__halves2half2(la, lb));
        }
        const int w = 4 * (2 * (q & 1) + tt) + 2 * (q >> 1);
        *reinterpret_cast<uint2 *>(d + 4 * w) = make_uint2(hi[0], hi[1]);
        *reinterpret_cast<uint2 *>(d + XB / 2 + 4 * w) = make_uint2(lo[0], lo[1]);
    }
    return run;
}

/* k_mma_prep with four adjacent lanes a run, each 8 of its values (the default; LILAC_CUDA_PREP_QUARTER=0 off): four times the
 * threads a row, for the rows of a 512-token chunk (a block a row of 2048 columns had 64 threads: ~8 warps an
 * SM, each load a round trip). The same digits, sums and exponents, bit for bit: the largest |value| is a
 * maximum (any order), and the run's sum is added in k_mma_prep's order, value 0 to 31, each lane adding its
 * 8 to the sum the lane before passed it. Needs K / 32 a multiple of 8 (whole warps a row). */
template <bool VEC>
__global__ void __launch_bounds__(256) k_mma_prep_q(const float *x, const float *x2, long long x_stride,
                                                    const int32_t *map, int n, const int32_t *n_dev, int K,
                                                    uint8_t *xq, float *xsum, int *xexp)
{
    __shared__ float red[8];
    const int count = n_dev ? min(n, __ldg(n_dev)) : n;
    const int NP = K / 8, tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, q = tid & 3;
    const bool held = NP <= nt; /* each thread at most one part of a run: it keeps its values between passes */
    for (int row = blockIdx.x; row < count; row += gridDim.x) {
        const long long off = (long long)(map ? __ldg(map + row) : row) * x_stride;
        const float *src = x + off, *src2 = x2 ? x2 + off : nullptr;
        float v[8];
        float amax = 0.f;
        bool bad = false;
        for (int pi = tid; pi < NP; pi += nt) { /* part pi: run pi / 4, its values 8 q .. 8 q + 7 */
            prep_load2<VEC>(src + 8 * pi, src2 ? src2 + 8 * pi : nullptr, v);
            prep_max(v, amax, bad);
        }
        const int sh = prep_shift(amax, bad, red, xexp, row);
        for (int pi = tid; pi < NP; pi += nt) { /* every lane of a warp the same passes: NP, nt multiples of 32 */
            if (!held)
                prep_load2<VEC>(src + 8 * pi, src2 ? src2 + 8 * pi : nullptr, v);
#pragma unroll
            for (int i = 0; i < 8; i++)
                v[i] = bad ? 0.f : ldexpf(v[i], sh);
            const float run = prep_part_put(v, q, lane, xq + ((size_t)row * (K / 32) + pi / 4) * XB);
            if (q == 0)
                xsum_put(xsum, K / 32, row, pi / 4, run);
        }
        __syncthreads(); /* red is the next row's */
    }
}

/* ------------------------------------------------------------------ */
/* the product */

struct MM {
    const uint8_t *w; /* matrix (expert 0) */
    size_t row_bytes, expert_stride;
    const int32_t *offsets; /* grouped: n_expert + 1; NULL: one group of n_tok */
    const int32_t *xrow;    /* grouped: pair i's digits at row xrow[i] (< n_x); NULL: at row i */
    int n_expert, n_tok, n_x;
    const uint8_t *xq;
    const float *xsum; /* xsum_put's fp16 pairs */
    const int *xexp;
    float *y;
    int rows, K, row_tiles;
    int wtab; /* W8 tiles (unless LILAC_CUDA_MMA_WTAB=0): each warp decodes its own 16 rows' scale tables */
    int narrow; /* W8 tiles (unless LILAC_CUDA_MMA_NARROW=0): a tile of few pairs leaves its last n8 tile out */
};

/* A block's shared memory at TN tokens a tile. */
template <int TYPE, int TN> struct Smem {
    using Q = MQ<TYPE>;
    static constexpr int BN = TN;
    static constexpr int W = 2 * BM * Q::SLOT;
    static constexpr int X = 2 * BN * XROW;
    static constexpr int XS = Q::KIND == KIND_SB ? 2 * BN * 8 * 4 : 0;
    /* float table [NTAB][BM]; KIND_SB: the minima's fp16 pairs [4][BM] and dmin [BM] in its place, which at
     * 24 tokens is all it takes (two blocks an SM; the other widths keep the layout last run on a GPU) */
    static constexpr int TF = (Q::KIND == KIND_SB && TN == 24 ? 5 : Q::NTAB) * BM * 4;
    static constexpr int TH = Q::KIND == KIND_SB ? 8 * BM * 8 : 0;   /* (mult, add) [8][BM] */
    static constexpr int TD = Q::KIND == KIND_SB ? BM * 4 : 0;       /* d [BM] */
    static constexpr int TP = (MAX_EXPERT + 4) * 4;                  /* tile prefix */
    static constexpr int XR = 4 * BN * 4; /* digit rows of the tile's pairs [2][BN], then their exponents [2][BN] */
    static constexpr int TOTAL = W + X + XS + TF + TH + TD + TP + XR;
};

/* The warps of a block: W8 = false, 4 along the rows (two m16 tiles, 32 rows, each) x 2 along the tokens
 * (TN / 16 n8 tiles each); W8 = true, 8 along the rows (one m16 tile each) x 1 (TN / 8 n8 tiles). The grouped
 * products' tiles of 16 tokens take W8 (and 24-token ones, which only it divides): in the 4 x 2 layout both
 * warps of a row range decode the same A fragments for 8 tokens each, and the decode (a shared load, a LOP3 and two HFMA2 per 4 values)
 * is about half of a stage's instructions there; in 8 x 1 each row is decoded once per block for its 16
 * tokens, for two more 16-byte B loads a step (per warp and 32 values: 4 decodes and 4 B loads instead of
 * 8 and 2, the 4 mma's the same). Those products are bound by instruction issue (a 16-token tile does
 * ~1k instructions a thread per 256 columns against 18 KB of weights), not by DRAM. */
template <int TN, bool W8> struct Lay {
    static constexpr int WM = W8 ? 8 : MM_WARPS_M, WN = MM_THREADS / 32 / WM, MT = BM / 16 / WM;
    static constexpr int BN = TN, NW = BN / (8 * WN); /* n8 tiles a warp */
    static_assert(WM * WN * 32 == MM_THREADS && WM * MT * 16 == BM && NW * 8 * WN == BN, "warp layout");
};

/* TN tokens a tile. 16-token tiles fit two blocks an SM in shared memory (Q6_K, the largest: 106 KB), and
 * 24-token Q4_K ones (113 KB); ask for the registers of two as well (they use 108-115 without the bound). */
template <int TYPE, bool A4, int TN, bool W8>
__global__ void __launch_bounds__(MM_THREADS, TN <= 24 ? 2 : 1) k_mma(const MM p)
{
    using Q = MQ<TYPE>;
    using SM = Smem<TYPE, TN>;
    using LY = Lay<TN, W8>;
    constexpr int BN = SM::BN, SLOT = Q::SLOT, G = SLOT / 16;
    constexpr int MT = LY::MT, NW = LY::NW, WM = LY::WM, NR = 2 * MT; /* NR: rows a thread (per k) */
    static_assert(BN == LY::BN, "tile width");
    extern __shared__ uint4 smem4[];
    uint8_t *const wbuf = reinterpret_cast<uint8_t *>(smem4);
    uint8_t *const xbuf = wbuf + SM::W;
    float *const sbuf = reinterpret_cast<float *>(xbuf + SM::X);
    float *const tabf = reinterpret_cast<float *>(xbuf + SM::X + SM::XS);
    uint2 *const tabh = reinterpret_cast<uint2 *>(xbuf + SM::X + SM::XS + SM::TF);
    float *const tabd = reinterpret_cast<float *>(xbuf + SM::X + SM::XS + SM::TF + SM::TH);
    /* KIND_SB: in tabf's place, the minima m as fp16 pairs [4][BM] (the min mma's A) and dmin 2^6 [BM] */
    uint32_t *const tabm = reinterpret_cast<uint32_t *>(tabf);
    float *const tabdm = tabf + 4 * BM;
    int *const tp = reinterpret_cast<int *>(xbuf + SM::X + SM::XS + SM::TF + SM::TH + SM::TD);
    int *const xrs = tp + SM::TP / 4;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wm = warp % WM, wn = warp / WM;
    const int NB = p.K / 32, NK = p.K / 256;

    /* tiles: the prefix of ceil(pairs / BN) over experts */
    int ntiles;
    if (p.offsets) {
        for (int e = tid; e < p.n_expert; e += MM_THREADS) {
            const int c = __ldg(p.offsets + e + 1) - __ldg(p.offsets + e);
            tp[e + 1] = c > 0 ? (c + BN - 1) / BN : 0;
        }
        __syncthreads();
        if (warp == 0) {
            const int per = (p.n_expert + 31) / 32, e0 = lane * per, e1 = min(p.n_expert, e0 + per);
            int sum = 0;
            for (int e = e0; e < e1; e++)
                sum += tp[e + 1];
            int incl = sum;
            for (int o = 1; o < 32; o <<= 1) {
                const int v = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o)
                    incl += v;
            }
            int run = incl - sum;
            for (int e = e0; e < e1; e++) {
                run += tp[e + 1];
                tp[e + 1] = run;
            }
            if (lane == 0)
                tp[0] = 0;
        }
        __syncthreads();
        ntiles = tp[p.n_expert];
    } else {
        ntiles = (p.n_tok + BN - 1) / BN;
    }
    const long long items = (long long)ntiles * p.row_tiles;

    int par = 0;
    for (long long item = blockIdx.x; item < items; item += gridDim.x, par ^= 1) {
        const int tile = (int)(item / p.row_tiles), rt = (int)(item - (long long)tile * p.row_tiles);
        int c0, cnt;
        const uint8_t *W = p.w;
        if (p.offsets) {
            int lo = 0, hi = p.n_expert; /* the last expert e with tp[e] <= tile */
            while (hi - lo > 1) {
                const int mid = (lo + hi) >> 1;
                if (tp[mid] <= tile)
                    lo = mid;
                else
                    hi = mid;
            }
            const int q0 = __ldg(p.offsets + lo), q1 = __ldg(p.offsets + lo + 1);
            c0 = q0 + (tile - tp[lo]) * BN;
            cnt = min(min(BN, q1 - c0), p.n_tok - c0); /* n_tok: the pairs the pre-pass converted */
            W += (size_t)lo * p.expert_stride;
        } else {
            c0 = tile * BN;
            cnt = min(BN, p.n_tok - c0);
        }
        const int row0 = rt * BM;
        /* the digits' row of the tile's pair t (-1: t >= cnt or out of range), its BN entries in shared memory,
         * by item parity: the epilogue of the item before last read the other half, and every item has a
         * barrier a stage between. */
        int *const xr = xrs + par * BN, *const xe = xrs + (2 + par) * BN; /* xe: the row's exponent (y = acc 2^xe) */
        for (int t = tid; t < BN; t += MM_THREADS) {
            int r = -1;
            if (t < cnt) {
                r = p.xrow ? __ldg(p.xrow + c0 + t) : c0 + t;
                r = !p.xrow || (r >= 0 && r < p.n_x) ? r : -1;
            }
            xr[t] = r;
            xe[t] = r >= 0 ? __ldg(p.xexp + r) : INT_MAX;
        }
        __syncthreads();

        /* The weights' copies, set up once an item (until session 11 the issue loop divided by G and multiplied 64-bit
         * row addresses for every granule of every stage: a fifth of the grouped product's instructions):
         * warp w's half-warp hf copies rows wr + 2k (k < 8, wr = 16 w + hf), lane gl granules gl + 16 gp.
         * A4 (every row's chunk 16-aligned): BYTES / 16 granules from the chunk's start; else each chunk's
         * own 16-byte granules around it. */
        static_assert(MM_THREADS == 2 * BM && BM == 16 * (MM_THREADS / 32),
                      "a warp copies 16 rows, a thread a table row");
        constexpr int GP = (G + 15) / 16;
        const int wr = warp * 16 + (lane >> 4), gl = lane & 15;
        const uint8_t *const wsrc = W + (size_t)(row0 + wr) * p.row_bytes;
        const size_t wstep = 2 * p.row_bytes;
        unsigned wok = 0;
#pragma unroll
        for (int k = 0; k < 8; k++)
            wok |= (row0 + wr + 2 * k < p.rows ? 1u : 0u) << k;
        /* a row's first chunk's alignment (0 under A4; the first row's for rows past the matrix): its chunk of
         * stage kb sits (al + kb BYTES) & 15 into its first granule */
        auto row_al = [&](int row) {
            return A4 ? 0 : (int)(reinterpret_cast<uintptr_t>(W + (size_t)(row < p.rows ? row : 0) * p.row_bytes) & 15);
        };
        /* the scale tables' row (a thread a row and half its sub-blocks); p.wtab in the 8 x 1 layout: lane l of
         * warp w takes row 16 w + l % 16, the warp's own rows (which its own lanes copied, see issue), so that a
         * warp barrier, not the block's, stands between the tables and their readers */
        const bool wt = W8 && p.wtab;
        static_assert(!W8 || BM == 16 * (MM_THREADS / 32), "W8: a warp 16 rows");
        const int tr = wt ? 16 * warp + (lane & 15) : tid & (BM - 1), jb = wt ? lane >> 4 : tid >> 7;
        const bool tok = row0 + tr < p.rows;
        const int tal = row_al(row0 + tr);

        auto issue = [&](int kb, int buf) {
            uint8_t *const wd = wbuf + buf * BM * SLOT + wr * SLOT + 16 * gl;
            const uint8_t *sk = wsrc + (size_t)kb * Q::BYTES;
#pragma unroll
            for (int k = 0; k < 8; k++, sk += wstep) {
                int a = 0, n = Q::BYTES / 16;
                if (!A4) {
                    a = (int)(reinterpret_cast<uintptr_t>(sk) & 15);
                    n = ((a + Q::BYTES - 1) >> 4) + 1;
                }
#pragma unroll
                for (int gp = 0; gp < GP; gp++) {
                    const int gi = gl + 16 * gp;
                    if (((wok >> k) & 1) && gi < n)
                        cp16(wd + 2 * k * SLOT + 256 * gp, sk - a + 16 * gi, 16);
                }
            }
            uint8_t *const xb = xbuf + buf * BN * XROW;
            const int q = tid & 63;
#pragma unroll
            for (int j = 0; j < BN / 4; j++) {
                const int t = (tid >> 6) + 4 * j, xt = xr[t];
                const bool ok = xt >= 0;
                const uint8_t *src = p.xq + (ok ? ((size_t)xt * NB + (size_t)kb * 8) * XB + 16 * q : 0);
                cp16(xb + t * XROW + 16 * q, src, ok ? 16 : 0);
            }
            if (Q::KIND == KIND_SB && tid < 2 * BN) {
                float *sb = sbuf + buf * BN * 8;
                const int t = tid >> 1, h = tid & 1, xt = xr[t];
                const bool ok = xt >= 0;
                const float *src = p.xsum + (ok ? (size_t)xt * NB + (size_t)kb * 8 + 4 * h : 0);
                cp16(sb + t * 8 + 4 * h, src, ok ? 16 : 0);
            }
            cp_commit();
        };

        /* The tile's work with NWX of a warp's NW n8 tiles (the 8 x 1 layout, where a warp takes all of the tile's
         * tokens): a tile of at most 8 (NW - 1) pairs (at pp512 over half the 24-token expert tiles: Poisson(16)
         * pairs an expert) leaves its last n8 tile out, its B loads and mma's, as an instance of its own chosen
         * once an item (a block-uniform branch; guards inside the loop had cost the default path 4-8 %, session
         * 18). The tiles it keeps do the same arithmetic: the same bits. LILAC_CUDA_MMA_NARROW=0: always NW. */
        auto tile_work = [&](auto nw_c) {
            constexpr int NWX = decltype(nw_c)::value;
            float acc[MT][NWX][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NWX; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        acc[mt][nt][e] = 0.f;

            /* this thread's rows (r = 2 mt + half: row g + 8 half of m-tile mt) */
            int lrow[NR], roff[NR], ral[NR]; /* ral: row_al of the row */
#pragma unroll
            for (int r = 0; r < NR; r++) {
                lrow[r] = wm * 16 * MT + (r >> 1) * 16 + (r & 1) * 8 + g;
                roff[r] = 0;
                ral[r] = row_al(row0 + lrow[r]);
            }

            issue(0, 0);
            for (int kb = 0; kb < NK; kb++) {
                const int buf = kb & 1;
                if (kb + 1 < NK) {
                    issue(kb + 1, buf ^ 1);
                    cp_wait<1>();
                } else {
                    cp_wait<0>();
                }
                __syncthreads();
                const uint8_t *wb = wbuf + buf * BM * SLOT;
                /* the scale tables of this stage: thread (tr, jb) row tr's sub-blocks jb, jb + 2, ... */
                if (tok) {
                    const uint8_t *b = wb + tr * SLOT + (A4 ? 0 : (tal + kb * Q::BYTES) & 15);
                    if (Q::KIND == KIND_SB) { /* thread (tr, jb): sub-blocks 4 jb .. 4 jb + 3 */
                        /* d, dmin and lilac_kq_scale_min's 12 bytes as words (A4: one 16-byte load; the rows'
                         * byte loads had taken ~14 loads a thread, 4-way bank conflicts: ~5 M a 24-token
                         * grouped launch at pp512, ncu session 21) */
                        float d, dmin;
                        uint32_t s0, s1, s2; /* scale bytes 0-3, 4-7, 8-11 */
                        if (A4) {
                            const uint4 w = *reinterpret_cast<const uint4 *>(b);
                            d = __half2float(__ushort_as_half((unsigned short)(w.x & 0xFFFFu)));
                            dmin = __half2float(__ushort_as_half((unsigned short)(w.x >> 16)));
                            s0 = w.y, s1 = w.z, s2 = w.w;
                        } else {
                            d = h2f_s(b), dmin = h2f_s(b + 2);
                            s0 = ld32<false>(b + 4), s1 = ld32<false>(b + 8), s2 = ld32<false>(b + 12);
                        }
                        int scv[4], mv[4];
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            kq_sc_m(s0, s1, s2, 4 * jb + i, scv[i], mv[i]);
                            tabh[(4 * jb + i) * BM + tr] = kq_tab<TYPE>(i, scv[i]);
                        }
                        tabm[(2 * jb) * BM + tr] = pk((float)mv[0], (float)mv[1]);
                        tabm[(2 * jb + 1) * BM + tr] = pk((float)mv[2], (float)mv[3]);
                        if (jb == 0) {
                            tabd[tr] = d;
                            tabdm[tr] = dmin * 64.f; /* xsum_put's 2^-6 */
                        }
                    } else if (Q::KIND == KIND_16) {
                        const float d = h2f_s(b + 208);
#pragma unroll
                        for (int m = 0; m < 8; m++)
                            tabf[(jb + 2 * m) * BM + tr] = d * (float)(int8_t)b[192 + jb + 2 * m];
                    } else {
#pragma unroll
                        for (int m = 0; m < 4; m++)
                            tabf[(jb + 2 * m) * BM + tr] = h2f_s(b + (TYPE == LILAC_Q8_0 ? 34 : 18) * (jb + 2 * m));
                    }
                }
#pragma unroll
                for (int r = 0; r < NR; r++)
                    roff[r] = lrow[r] * SLOT + (A4 ? 0 : (ral[r] + kb * Q::BYTES) & 15);
                if (wt)
                    __syncwarp();
                else
                    __syncthreads();

                const uint8_t *xb = xbuf + buf * BN * XROW + (wn * NW * 8 + g) * XROW + 16 * tig;
                float frag[MT][NWX][4];
                auto fzero = [&]() {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int nt = 0; nt < NWX; nt++)
#pragma unroll
                            for (int e = 0; e < 4; e++)
                                frag[mt][nt][e] = 0.f;
                };
                /* acc += scale(row) * frag */
                auto fold = [&](const float *tab) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        const float s0 = tab[lrow[2 * mt]], s1 = tab[lrow[2 * mt + 1]];
#pragma unroll
                        for (int nt = 0; nt < NWX; nt++) {
                            acc[mt][nt][0] = fmaf(s0, frag[mt][nt][0], acc[mt][nt][0]);
                            acc[mt][nt][1] = fmaf(s0, frag[mt][nt][1], acc[mt][nt][1]);
                            acc[mt][nt][2] = fmaf(s1, frag[mt][nt][2], acc[mt][nt][2]);
                            acc[mt][nt][3] = fmaf(s1, frag[mt][nt][3], acc[mt][nt][3]);
                        }
                    }
                };
                if (Q::KIND == KIND_SB)
                    fzero();
#pragma unroll 2
                for (int s = 0; s < 8; s++) { /* unrolled by two: fully, the B loads hoisted spill */
                    uint4 bh[NWX], bl[NWX];
#pragma unroll
                    for (int nt = 0; nt < NWX; nt++) {
                        bh[nt] = *reinterpret_cast<const uint4 *>(xb + nt * 8 * XROW + s * XB);
                        bl[nt] = *reinterpret_cast<const uint4 *>(xb + nt * 8 * XROW + s * XB + 64);
                    }
                    uint2 ma[NR] = {};
                    if (Q::KIND == KIND_SB)
#pragma unroll
                        for (int r = 0; r < NR; r++)
                            ma[r] = tabh[s * BM + lrow[r]];
                    if (Q::KIND == KIND_32)
                        fzero();
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (Q::KIND == KIND_16)
                            fzero();
                        uint32_t a[2][4];
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            Dec<TYPE, A4>::run(wb + roff[2 * mt], s, h, tig, ma[2 * mt], a[mt][0], a[mt][2]);
                            Dec<TYPE, A4>::run(wb + roff[2 * mt + 1], s, h, tig, ma[2 * mt + 1], a[mt][1], a[mt][3]);
                        }
#pragma unroll
                        for (int mt = 0; mt < MT; mt++)
#pragma unroll
                            for (int nt = 0; nt < NWX; nt++) {
                                mma16816(frag[mt][nt], a[mt], h ? bh[nt].z : bh[nt].x, h ? bh[nt].w : bh[nt].y);
                                mma16816(frag[mt][nt], a[mt], h ? bl[nt].z : bl[nt].x, h ? bl[nt].w : bl[nt].y);
                            }
                        if (Q::KIND == KIND_16)
                            fold(tabf + (2 * s + h) * BM);
                    }
                    if (Q::KIND == KIND_32)
                        fold(tabf + s * BM);
                }
                if (Q::KIND == KIND_SB) { /* the minimum: acc -= dmin (row) sum_s m_s (row) xsum_s (token), one mma of
                                             k = the 8 runs' hi then lo sums (A: the m pairs twice) */
                    const uint32_t *sw = reinterpret_cast<const uint32_t *>(sbuf + buf * BN * 8) + (wn * NW * 8 + g) * 8 + 2 * tig;
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        uint32_t am[4];
                        am[0] = am[2] = tabm[tig * BM + lrow[2 * mt]];
                        am[1] = am[3] = tabm[tig * BM + lrow[2 * mt + 1]];
                        const float d0 = tabdm[lrow[2 * mt]], d1 = tabdm[lrow[2 * mt + 1]];
#pragma unroll
                        for (int nt = 0; nt < NWX; nt++) {
                            const uint2 bw = *reinterpret_cast<const uint2 *>(sw + nt * 64);
                            float f[4] = {0.f, 0.f, 0.f, 0.f};
                            mma16816(f, am, bw.x, bw.y);
                            acc[mt][nt][0] = fmaf(-d0, f[0], acc[mt][nt][0]);
                            acc[mt][nt][1] = fmaf(-d0, f[1], acc[mt][nt][1]);
                            acc[mt][nt][2] = fmaf(-d1, f[2], acc[mt][nt][2]);
                            acc[mt][nt][3] = fmaf(-d1, f[3], acc[mt][nt][3]);
                        }
                    }
                }
                if (Q::KIND == KIND_SB)
                    fold(tabd);
                __syncthreads(); /* the stage's buffers and tables are free */
            }

            /* y = acc * 2^xexp: a product by the power of two where that is a normal float (the same rounding as
             * ldexpf's), ldexpf where it is not; NaN for a row of x with a NaN or Inf */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NWX; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = row0 + lrow[2 * mt + (e >> 1)];
                        const int t = wn * NW * 8 + nt * 8 + 2 * tig + (e & 1);
                        if (row < p.rows && t < cnt) {
                            const int x2 = xe[t];
                            const float v = acc[mt][nt][e];
                            p.y[(size_t)(c0 + t) * p.rows + row] =
                                x2 == INT_MAX                 ? __int_as_float(0x7fc00000)
                                : x2 >= -126 && x2 <= 127 ? v * __int_as_float((127 + x2) << 23)
                                                              : ldexpf(v, x2);
                        }
                    }
        };
        if constexpr (W8 && NW > 1) {
            if (p.narrow && cnt <= 8 * (NW - 1))
                tile_work(std::integral_constant<int, NW - 1>{});
            else
                tile_work(std::integral_constant<int, NW>{});
        } else {
            tile_work(std::integral_constant<int, NW>{});
        }
    }
}

/* ------------------------------------------------------------------ */
/* The one-token product on the tensor cores (k_mvt; LILAC_CUDA_MV_TC=1) */

/* Decode products of Q4_K rows for up to TV_MAXT tokens, the weights as the A operand of m16n8k16 (k_mma's
 * decode: Dec) and each token as two n8 columns, its x's hi then lo fp16 digits: one mma a step for both
 * (k_mma adds them in one column with two), the column sums added at the end. Why: the CUDA-core k_mv is bound
 * by instruction issue once its rows are staged (ncu, session 24: ~3.6 lane instructions a weight in its dot
 * loop, ~1,640 a warp for the qkv+z product); the decode here is ~1.5 (a LOP3 and an HFMA2 per two values, a
 * shared load and a shift per four) and the products are the tensor pipe's.
 *
 * A block: 16 MT rows, 8 warps; warp w takes super-blocks w, w + 8, ... of every row, MT m16 tiles. The rows
 * are bulk-copied into shared memory before griddepcontrol.wait (a row a lane of warp 0, each in a slot of an
 * odd number of 16-byte granules: the 8 rows a fragment load touches fall in distinct banks). After the wait a
 * warp converts the x of its own super-block into its own digits (k_mma_prep_q's conversion) scaled by a power of
 * two of that super-block's largest |value| (no block barrier: nothing but the warp reads them), and applies
 * the power back to the super-block's partial sum; the warps' partial sums are added in warp order. A token's
 * result depends on its own x and the row only (the columns of an mma are independent): any token count gives
 * each token the bits of a one-token call. Errors: float32 roundings of sums of |w x| (test_cuda_mma). */
constexpr int TV_THREADS = 256, TV_WARPS = TV_THREADS / 32, TV_MAXT = 8;

struct TV {
    const uint8_t *w;
    size_t row_bytes;
    const float *x;
    float *y;
    int rows, K, n_tok, acc, slot; /* slot: a staged row's bytes in shared memory */
};

/* Shared memory of a block of R rows (bytes), at T tokens: the staged rows, then a warp's: digits and run sums
 * of its super-block for T tokens, scale tables; then the warps' sums. */
struct TvSmem {
    int w, x, xs, th, tm, td, per_warp, red, total;
    __host__ __device__ TvSmem(int slot, int T, int rows)
    {
        w = rows * slot;
        x = T * 8 * XB;    /* a token's 8 runs */
        xs = T * 8 * 4;    /* their sums (xsum_put's 8 words) */
        th = 8 * rows * 8; /* (mult, add) [8][rows] */
        tm = 4 * rows * 4; /* minima pairs [4][rows] */
        td = 2 * rows * 4; /* d, dmin 2^6 [rows] */
        per_warp = x + xs + th + tm + td;
        red = TV_WARPS * rows * T * 4;
        total = w + TV_WARPS * per_warp + red;
    }
};

/* v[i] 2^k (exact where the result is a normal float: a product by the power of two where that is a normal
 * float, else ldexpf's rounding), a branch on k (the same for the warp, or nearly: ldexpf's code, inlined,
 * stays off the common path). */
template <int N> __device__ __forceinline__ void tv_pow2(float (&v)[N], int k)
{
    if (k >= -126 && k <= 127) {
        const float f = __int_as_float((127 + k) << 23);
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] *= f;
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = ldexpf(v[i], k);
    }
}

/* The exponent e of a finite a > 0 with a in [2^(e-1), 2^e) (frexpf's), from its bits where it is normal. */
__device__ __forceinline__ int tv_exp(float a)
{
    const int be = (__float_as_int(a) >> 23) & 0xFF;
    if (be)
        return be - 126;
    int e = 0;
    (void)frexpf(a, &e);
    return e;
}

/* T tokens at most, MT m16 tiles a warp (a block's rows: 16 MT; a row's bits are the same at either) */
template <int T, int MT> __global__ void __launch_bounds__(TV_THREADS) k_mvt(const TV p)
{
    constexpr int NW = (2 * T + 7) / 8, TV_ROWS = 16 * MT; /* n8 tiles: two columns a token */
    TRACE_START(LILAC_TK_MVT);
    griddep_launch_dependents();
    extern __shared__ uint4 smem4[];
    __shared__ uint64_t bar;
    __shared__ unsigned sbad;
    const TvSmem L(p.slot, T, TV_ROWS);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
    uint8_t *const wbuf = reinterpret_cast<uint8_t *>(smem4);
    uint8_t *const mine = wbuf + L.w + warp * L.per_warp; /* this warp's */
    uint8_t *const xbuf = mine;
    float *const sbuf = reinterpret_cast<float *>(mine + L.x);
    uint2 *const th = reinterpret_cast<uint2 *>(mine + L.x + L.xs);
    uint32_t *const tm = reinterpret_cast<uint32_t *>(mine + L.x + L.xs + L.th);
    float *const td = reinterpret_cast<float *>(mine + L.x + L.xs + L.th + L.tm), *const tdm = td + TV_ROWS;
    float *const red = reinterpret_cast<float *>(wbuf + L.w + TV_WARPS * L.per_warp);
    const int NSB = p.K / 256;
    const int row0 = blockIdx.x * TV_ROWS, nr = min(TV_ROWS, p.rows - row0);
    const uint32_t b = dev_smem_addr(&bar);

    /* the rows, before the wait (no kernel before writes them) */
    if (warp == 0) {
        if (lane == 0) {
            dev_stage_init(b);
            dev_stage_expect(b, (uint32_t)(nr * p.row_bytes));
        }
        __syncwarp();
        if (lane < nr)
            dev_stage_copy(wbuf + lane * p.slot, p.w + (size_t)(row0 + lane) * p.row_bytes, (uint32_t)p.row_bytes, b);
    }
    if (tid == 0)
        sbad = 0;
    __syncthreads(); /* the barrier initialized before anyone waits on it */
    griddep_wait();
    TRACE_WAITED(LILAC_TK_MVT);

    float acc[MT][NW][4] = {};
    unsigned bad = 0; /* tokens with a NaN or Inf */
    for (int sb = warp; sb < NSB; sb += TV_WARPS) {
        /* x of this super-block, lane l its values 8 l .. 8 l + 7 of each token (in flight before the rows' wait) */
        float v[T][8];
#pragma unroll
        for (int t = 0; t < T; t++)
            if (t < p.n_tok)
                prep_load<true>(p.x + (size_t)t * p.K + sb * 256 + 8 * lane, v[t]);
        if (sb == warp) { /* the warp's first super-block: the rows arrived */
            dev_stage_wait(b, 0);
            TRACE_MARK2(LILAC_TK_MVT);
        }
        if (lane < TV_ROWS) { /* the scale tables, lane = row */
            const uint4 w4 = *reinterpret_cast<const uint4 *>(wbuf + lane * p.slot + sb * 144);
            int sc[8], m[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                kq_sc_m(w4.y, w4.z, w4.w, i, sc[i], m[i]);
                th[i * TV_ROWS + lane] = kq_tab<LILAC_Q4_K>(i, sc[i]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++)
                tm[j * TV_ROWS + lane] = pk((float)m[2 * j], (float)m[2 * j + 1]);
            td[lane] = __half2float(__ushort_as_half((unsigned short)(w4.x & 0xFFFFu)));
            tdm[lane] = __half2float(__ushort_as_half((unsigned short)(w4.x >> 16))) * 64.f; /* xsum_put's 2^-6 */
        }
        /* the digits: each token's values scaled by 2^sh (its largest |value| of the super-block in [2^13, 2^14)) */
        int sh[T];
#pragma unroll
        for (int t = 0; t < T; t++) {
            sh[t] = 0;
            if (t >= p.n_tok)
                continue;
            float amax = 0.f;
            bool bt = false;
            prep_max(v[t], amax, bt);
            amax = warp_max(amax);
            bt = __any_sync(0xffffffffu, bt);
            sh[t] = 14 - (amax > 0.f && !bt ? tv_exp(amax) : 0);
            bad |= bt ? 1u << t : 0u;
            if (bt)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    v[t][i] = 0.f;
            else
                tv_pow2(v[t], sh[t]);
            const float run = prep_part_put(v[t], lane & 3, lane, xbuf + t * 8 * XB + (lane >> 2) * XB);
            if ((lane & 3) == 0)
                xsum_put(sbuf, 8, t, lane >> 2, run);
        }
        __syncwarp();

        float frag[MT][NW][4] = {};
        /* column g of n8 tile nw: token 4 nw + g / 2, its hi (g even) or lo digits */
        const uint8_t *xb[NW];
        bool tk[NW];
#pragma unroll
        for (int nw = 0; nw < NW; nw++) {
            const int t = 4 * nw + (g >> 1);
            tk[nw] = t < p.n_tok;
            xb[nw] = xbuf + (tk[nw] ? t : 0) * 8 * XB + 16 * tig + (g & 1) * 64;
        }
        const uint8_t *const sb0 = wbuf + g * p.slot + sb * 144;
#pragma unroll 2
        for (int s = 0; s < 8; s++) {
            uint4 bx[NW];
#pragma unroll
            for (int nw = 0; nw < NW; nw++)
                bx[nw] = tk[nw] ? *reinterpret_cast<const uint4 *>(xb[nw] + s * XB) : make_uint4(0, 0, 0, 0);
            uint2 ma[2 * MT];
#pragma unroll
            for (int r = 0; r < 2 * MT; r++)
                ma[r] = th[s * TV_ROWS + 8 * r + g];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint8_t *r0 = sb0 + 16 * mt * p.slot;
                    Dec<LILAC_Q4_K, true>::run(r0, s, h, tig, ma[2 * mt], a[mt][0], a[mt][2]);
                    Dec<LILAC_Q4_K, true>::run(r0 + 8 * p.slot, s, h, tig, ma[2 * mt + 1], a[mt][1], a[mt][3]);
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int nw = 0; nw < NW; nw++)
                        mma16816(frag[mt][nw], a[mt], h ? bx[nw].z : bx[nw].x, h ? bx[nw].w : bx[nw].y);
            }
        }
        /* the minimum (k_mma's: one mma of the 8 runs' hi then lo sums, in a token's hi column), the scales, and
         * the super-block's power of two back */
#pragma unroll
        for (int nw = 0; nw < NW; nw++) {
            const int t = 4 * nw + (g >> 1);
            uint2 bw = make_uint2(0, 0);
            if (tk[nw] && !(g & 1))
                bw = *reinterpret_cast<const uint2 *>(sbuf + t * 8 + 2 * tig);
            const int to = 4 * nw + tig; /* the token of this lane's output columns 2 tig, 2 tig + 1 */
            int k = 0; /* -sh[to], by selects (a runtime index would put sh in local memory) */
#pragma unroll
            for (int t2 = 0; t2 < T; t2++)
                k = t2 == to ? -sh[t2] : k;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int ra = 16 * mt + g, rb = ra + 8;
                uint32_t am[4];
                am[0] = am[2] = tm[tig * TV_ROWS + ra];
                am[1] = am[3] = tm[tig * TV_ROWS + rb];
                float f[4] = {0.f, 0.f, 0.f, 0.f}, part[4];
                mma16816(f, am, bw.x, bw.y);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e < 2 ? ra : rb;
                    part[e] = fmaf(td[r], frag[mt][nw][e], -tdm[r] * f[e]);
                }
                tv_pow2(part, k);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[mt][nw][e] += part[e];
            }
        }
        __syncwarp(); /* the digits and tables are the next super-block's */
    }

    /* a lane's columns 2 tig (hi) and 2 tig + 1 (lo) of tile nw: token 4 nw + tig; the warps' sums in warp order */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nw = 0; nw < NW; nw++) {
            const int t = 4 * nw + tig;
            if (t < T) {
                red[(warp * TV_ROWS + 16 * mt + g) * T + t] = acc[mt][nw][0] + acc[mt][nw][1];
                red[(warp * TV_ROWS + 16 * mt + g + 8) * T + t] = acc[mt][nw][2] + acc[mt][nw][3];
            }
        }
    /* a token is NaN where any warp saw a NaN or Inf in its x (the barrier also orders red) */
    if (lane == 0 && bad)
        atomicOr(&sbad, bad);
    __syncthreads();
    const unsigned nan_tok = sbad;
    const int nw_used = NSB < TV_WARPS ? NSB : TV_WARPS;
    for (int i = tid; i < TV_ROWS * T; i += TV_THREADS) {
        const int r = i / T, t = i - r * T;
        if (r >= nr || t >= p.n_tok)
            continue;
        float v = red[r * T + t];
        for (int w = 1; w < nw_used; w++)
            v += red[(w * TV_ROWS + r) * T + t];
        if ((nan_tok >> t) & 1u)
            v = __int_as_float(0x7fc00000);
        float *yp = p.y + (size_t)t * p.rows + row0 + r;
        *yp = p.acc ? *yp + v : v;
    }
    TRACE_END(LILAC_TK_MVT);
}

/* ------------------------------------------------------------------ */
/* host side */

inline cudaStream_t S(lilac_cuda_stream *s) { return reinterpret_cast<cudaStream_t>(s); }


/* The buffer of a (device, stream, kind): LILAC_CUDA_SCR_MMA the products' digits, LILAC_CUDA_SCR_ATTN the
 * prefill attention's split K and V. */
struct Scratch {
    int dev, kind;
    cudaStream_t st;
    void *p;
    size_t cap;
    unsigned gen; /* allocations so far: a graph captured with p is stale once it moves */
    /* what the last pre-pass into p converted, when it was rows 0..mn-1 of mx (mn 0: nothing reusable) */
    const float *mx;
    long long mstride;
    int mn, mK;
};
std::mutex g_scr_mu;
Scratch g_scr[16];
int g_n_scr;

/* The scratch of st of that kind on the current device (under g_scr_mu), and that device (-1: none current):
 * NULL where st has none yet. */
Scratch *scratch_of(cudaStream_t st, int *devp, int kind = LILAC_CUDA_SCR_MMA)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        dev = -1;
    }
    if (devp)
        *devp = dev;
    for (int i = 0; dev >= 0 && i < g_n_scr; i++)
        if (g_scr[i].dev == dev && g_scr[i].st == st && g_scr[i].kind == kind)
            return &g_scr[i];
    return nullptr;
}

/* Scratch of at least bytes for st: NULL when it would have to grow while st is being captured, or on failure. */
void *scratch(cudaStream_t st, size_t bytes, int kind = LILAC_CUDA_SCR_MMA)
{
    std::lock_guard<std::mutex> lk(g_scr_mu);
    int dev = -1;
    Scratch *sc = scratch_of(st, &dev, kind);
    if (dev < 0)
        return nullptr;
    if (sc && sc->cap >= bytes)
        return sc->p;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return nullptr;
    }
    if (!sc) {
        if (g_n_scr == 16)
            return nullptr;
        sc = &g_scr[g_n_scr++];
        *sc = Scratch{dev, kind, st, nullptr, 0, 0, nullptr, 0, 0, 0};
    }
    if (sc->p) { /* earlier products on st may still read it */
        if (cudaStreamSynchronize(st) != cudaSuccess) {
            (void)cudaGetLastError();
            return nullptr;
        }
        cudaFree(sc->p);
        sc->p = nullptr, sc->cap = 0, sc->mn = 0;
    }
    bytes = lilac_cuda_scratch_round(bytes);
    if (cudaMalloc(&sc->p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        sc->p = nullptr;
        return nullptr;
    }
    sc->cap = bytes;
    sc->gen++;
    return sc->p;
}

/* Digits, sums and exponents of n rows of K columns in one buffer. */
struct XQ {
    uint8_t *xq;
    float *xsum;
    int *xexp;
};
/* The digits, sums and exponents of n rows of K columns in base (lilac_cuda_xq_bytes of them). */
XQ xq_at(uint8_t *base, int n, int K)
{
    const size_t nb = (size_t)n * (K / 32);
    const size_t b_xq = nb * XB, b_sum = (nb * 4 + 255) & ~(size_t)255;
    return XQ{base, reinterpret_cast<float *>(base + b_xq), reinterpret_cast<int *>(base + b_xq + b_sum)};
}
bool xq_get(cudaStream_t st, int n, int K, XQ &q)
{
    uint8_t *base = static_cast<uint8_t *>(scratch(st, lilac_cuda_xq_bytes((size_t)n, (size_t)K)));
    if (!base)
        return false;
    q = xq_at(base, n, K);
    return true;
}

/* The pre-pass with four lanes a run (k_mma_prep_q; the same bytes: test_cuda_mma); LILAC_CUDA_PREP_QUARTER=0: a
 * lane a run (k_mma_prep). H200: pp512 11,395 vs 11,199, pp4096 14,249 vs 14,020 (one call, one round each).
 * Read once. */
bool prep_quarter_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_PREP_QUARTER", true);
}

/* The pre-pass over n rows (count: min(n, *n_dev) when n_dev is set): a block a row (at most 65535 blocks,
 * grid-strided past that); k_mma_prep a thread a run of 32 columns (whole warps, at most 256), or where quarter
 * (and K / 32 a multiple of 8) k_mma_prep_q four threads a run. */
void launch_prep(const float *x, long long x_stride, const int32_t *map, int n, const int32_t *n_dev, int K,
                 const XQ &q, cudaStream_t st, const float *x2 = nullptr, bool quarter = prep_quarter_enabled())
{
    const int nb = K / 32;
    const unsigned grid = (unsigned)(n < 65535 ? n : 65535);
    if (grid < 1)
        return;
    const bool vec =
        (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(x2) & 15) == 0 && x_stride % 4 == 0;
    if (quarter && nb % 8 == 0) {
        const int threads = 4 * nb >= 256 ? 256 : 4 * nb;
        auto kern = vec ? k_mma_prep_q<true> : k_mma_prep_q<false>;
        kern<<<grid, threads, 0, st>>>(x, x2, x_stride, map, n, n_dev, K, q.xq, q.xsum, q.xexp);
        return;
    }
    const int threads = nb >= 256 ? 256 : (nb + 31) / 32 * 32;
    auto kern = vec ? k_mma_prep<true> : k_mma_prep<false>;
    kern<<<grid, threads, 0, st>>>(x, x2, x_stride, map, n, n_dev, K, q.xq, q.xsum, q.xexp);
}

/* The pre-pass of a product into q (xq_get's, just taken for n rows of K). same_x: the caller says x has not
 * changed since the last product on st read it; then when st's scratch still holds rows 0..n-1 of that x at
 * that stride (the last pre-pass converted exactly them: neither a map nor a device count), the pre-pass is
 * skipped: the same digits (lilac_cuda_matvec_multi: a prefill's qkv, z, alpha and beta of one normed x). */
void prep(const float *x, long long x_stride, const int32_t *map, int n, const int32_t *n_dev, int K, const XQ &q,
          cudaStream_t st, bool same_x, const float *x2 = nullptr)
{
    const bool plain = !map && !n_dev && !x2;
    {
        std::lock_guard<std::mutex> lk(g_scr_mu);
        Scratch *sc = scratch_of(st, nullptr);
        if (sc && sc->p == q.xq && same_x && plain && sc->mn == n && sc->mx == x && sc->mstride == x_stride &&
            sc->mK == K)
            return;
        if (sc) { /* what this pre-pass leaves */
            sc->mx = x, sc->mstride = x_stride, sc->mK = K;
            sc->mn = plain ? n : 0;
        }
    }
    launch_prep(x, x_stride, map, n, n_dev, K, q, st, x2);
}

int blocks_per_sm(const void *kern, int smem)
{
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, MM_THREADS, (size_t)smem) != cudaSuccess || per < 1) {
        (void)cudaGetLastError();
        per = 1;
    }
    return per;
}

/* LILAC_CUDA_MMA_W8=0: 16-token tiles in the 4 x 2 warp layout too (k_mma's W8). Read once. */
bool w8_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_MMA_W8", true);
}

/* LILAC_CUDA_MMA_WTAB=0: the block's barrier between the scale tables and the mma loop in the 8 x 1 layout too
 * (MM.wtab; on: pp512 10,417/10,416 against 10,354/10,354, pp4096 the same, H200, 2026-12-01). Read once.
 * Measured and removed in session 18 (H200, alternated in one call each; the code in commits a7e135e, 8517848,
 * a616aa9): an L2 prefetch of the weights P stages ahead (a prefetch.global.L2 a thread a stage, into the
 * block's next item at the end): pp512 10,035/10,040 at P = 2 against 10,293/10,322 (9,997 at 4, 9,970 at 8),
 * pp4096 11,805 against 11,975 -- the products are not bound by DRAM latency; a warp's n8 tiles past the
 * tile's pairs skipping their B loads and mma's (runtime guards in the loop): +1 % switched on, but the guards
 * cost the default path 4-8 % (pp512 9,888 against 10,326, pp4096 10,957 against 11,942); a warp with none of
 * the tile's pairs skipping the stage (the 4 x 2 tiles, an instance of its own): 10,377/10,382 against
 * 10,416/10,429, pp4096 the same; the lo digits' products into accumulators of their own in the 8 x 1 layout
 * (twice the independent mma chains): 9,814 against 9,888; the 64-token tiles in 5 x 2 warps (160 rows, 320
 * threads, where the shared memory fits them; commit efdb447), for 10 warps an SM instead of 8: pp4096 10,992
 * against 11,965, pp512 9,869 against 10,467. */
bool wtab_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_MMA_WTAB", true);
}

/* LILAC_CUDA_MMA_NARROW=0: a W8 tile of few pairs does all its n8 tiles (MM.narrow). Read once. */
bool narrow_enabled()
{
    static std::atomic<int> on{-1};
    return env_switch_once(on, "LILAC_CUDA_MMA_NARROW", true);
}

template <int TYPE, bool A4, int TN, bool W8> bool launch_k(MM p, long long max_items, cudaStream_t st)
{
    auto kern = k_mma<TYPE, A4, TN, W8>;
    p.wtab = W8 && wtab_enabled();
    p.narrow = W8 && narrow_enabled();
    constexpr int smem = Smem<TYPE, TN>::TOTAL;
    static std::atomic<int> per_sm{0};
    int per = per_sm.load(std::memory_order_relaxed);
    if (!per) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        /* all of L1 as shared memory: two 16-token blocks an SM need ~2 x 107 KB (a preference; ignored if refused) */
        if (cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100) != cudaSuccess)
            (void)cudaGetLastError();
        per = blocks_per_sm(reinterpret_cast<const void *>(kern), smem);
        per_sm.store(per, std::memory_order_relaxed);
    }
    const long long cap = (long long)per * dev_sm_count();
    const long long grid = max_items < cap ? max_items : cap;
    if (grid < 1)
        return true;
    kern<<<(unsigned)grid, MM_THREADS, smem, st>>>(p);
    return true;
}

template <int TYPE, bool A4, int TN> bool launch_mma(MM p, long long max_items, cudaStream_t st)
{
    /* 32- and 64-token tiles in the 8 x 1 layout too (LILAC_CUDA_MMA_W8_WIDE, session 10): pp512 7,451 against
     * 7,612, pp4096 6,955 against 7,108 (H200, one call): removed. So was wgmma (LILAC_CUDA_MMA_WGMMA, sessions
     * 11-12, commit 4d82488): 64-token K-quant tiles in the 8 x 1 layout, a warpgroup's 64 rows x the 64 tokens'
     * hi and lo digits by one wgmma m64n128k16 a 16-column step, A from the registers Dec makes (double-buffered,
     * 1, 2 or 4 steps a commit), B the digits as no-swizzle K-major core matrices: pp512 8,900 against 9,385,
     * pp4096 9,830 against 10,600 (H200, alternated in one call); test_cuda_wgmma keeps its layout checked. */
    if constexpr (TN == 24) { /* three n8 tiles a warp: the 8 x 1 layout only */
        return launch_k<TYPE, A4, TN, true>(p, max_items, st);
    } else {
        if (TN == 16 && w8_enabled())
            return launch_k<TYPE, A4, TN, true>(p, max_items, st);
        return launch_k<TYPE, A4, TN, false>(p, max_items, st);
    }
}

template <int TN> bool launch_type(const MM &p, bool a16, long long max_items, cudaStream_t st, int type)
{
    if constexpr (TN == 24) { /* Q4_K alone fits two blocks an SM at 24 tokens (t24_takes) */
        return type == LILAC_Q4_K && (a16 ? launch_mma<LILAC_Q4_K, true, TN>(p, max_items, st)
                                          : launch_mma<LILAC_Q4_K, false, TN>(p, max_items, st));
    } else {
        switch (type) {
        case LILAC_Q4_K:
            return a16 ? launch_mma<LILAC_Q4_K, true, TN>(p, max_items, st)
                       : launch_mma<LILAC_Q4_K, false, TN>(p, max_items, st);
        case LILAC_Q5_K:
            return a16 ? launch_mma<LILAC_Q5_K, true, TN>(p, max_items, st)
                       : launch_mma<LILAC_Q5_K, false, TN>(p, max_items, st);
        case LILAC_Q6_K: return launch_mma<LILAC_Q6_K, false, TN>(p, max_items, st);
        case LILAC_Q8_0: return launch_mma<LILAC_Q8_0, false, TN>(p, max_items, st);
        case LILAC_Q4_0: return launch_mma<LILAC_Q4_0, false, TN>(p, max_items, st);
        default: return false;
        }
    }
}

/* launch_type at tn tokens a tile (16, 24 (Q4_K), 32 or 64). */
bool launch_tn(int tn, const MM &p, bool a16, long long max_items, cudaStream_t st, int type)
{
    return tn == 64   ? launch_type<64>(p, a16, max_items, st, type)
           : tn == 32 ? launch_type<32>(p, a16, max_items, st, type)
           : tn == 24 ? launch_type<24>(p, a16, max_items, st, type)
                      : launch_type<16>(p, a16, max_items, st, type);
}

size_t chunk_bytes(int type)
{
    switch (type) {
    case LILAC_Q4_K: return MQ<LILAC_Q4_K>::BYTES;
    case LILAC_Q5_K: return MQ<LILAC_Q5_K>::BYTES;
    case LILAC_Q6_K: return MQ<LILAC_Q6_K>::BYTES;
    case LILAC_Q8_0: return MQ<LILAC_Q8_0>::BYTES;
    case LILAC_Q4_0: return MQ<LILAC_Q4_0>::BYTES;
    default: return 0;
    }
}

/* Shapes the kernel takes: a supported type, K a multiple of 256, rows
 * packed no shorter than K's blocks, 2-aligned data. a16: every row's
 * chunks 16-aligned (the 4-byte reads of Q4_K/Q5_K). */
bool shape_ok(const lilac_cuda_mat *W, size_t expert_stride, bool *a16)
{
    const size_t cb = chunk_bytes(W->type);
    if (!cb || !W->data || W->rows < 1 || W->rows > INT_MAX / 2 || W->cols < 256 || W->cols % 256 ||
        W->cols > (1 << 24) || W->row_bytes < (size_t)(W->cols / 256) * cb)
        return false;
    const uintptr_t al = reinterpret_cast<uintptr_t>(W->data) | W->row_bytes | expert_stride;
    if (al & 1)
        return false;
    *a16 = (al & 15) == 0 && cb % 16 == 0;
    return true;
}

/* n8 tiles a warp (tokens a tile: 16 NT) of a one-matrix product of n_tok tokens over row_tiles tiles of BM
 * rows: 4, unless its tiles would leave more than half the multiprocessors without one (a block an SM at
 * NT 4 and 2; two at NT 1): a 512-token prefill's narrow matrices (the DeltaNet alpha and beta, 32 rows, 8
 * tiles; the shared expert's gate and up and attention's k and v, 4 row tiles, 32) took 68 us and ~40 us on 8
 * and 32 blocks (ncu, H200). LILAC_CUDA_MMA_DENSE_NT=4 (or 2, 1): that NT always (read once). */
int dense_nt(int n_tok, int row_tiles)
{
    static std::atomic<int> forced{-1};
    const int f = env_int_once(forced, "LILAC_CUDA_MMA_DENSE_NT", 0, 0, 4);
    if (f == 4 || f == 2 || f == 1)
        return f;
    const long long sms = dev_sm_count();
    auto items = [&](int nt) { return (long long)((n_tok + 16 * nt - 1) / (16 * nt)) * row_tiles; };
    return 2 * items(4) >= sms ? 4 : 2 * items(2) >= sms ? 2 : 1;
}

/* Whether a product of `type` at LILAC_CUDA_MMA_T24 level `level` takes 24-token tiles. The switch: 1 (the
 * default), the grouped Q4_K products' (see lilac_cuda_matvec_grouped_mma); 2, the dense Q4_K ones' 64-token
 * tiles too (two blocks of 8 warps an SM, each weight decoded once per 24 tokens, where the 64-token 4 x 2 tiles
 * hold one block an SM and decode each weight twice per 64): slower, pp512 9,031/9,006 and pp4096
 * 10,321/10,271 against 9,440/9,445 and 10,722/10,679 (H200, one call, 2026-11-30); 0, neither. Read once. */
bool t24_takes(int type, int level)
{
    static std::atomic<int> mode{-1};
    return type == LILAC_Q4_K && env_int_once(mode, "LILAC_CUDA_MMA_T24", 1, 0, 2) >= level;
}

std::atomic<int> g_mma_on{-1};
std::atomic<int> g_xrows_on{-1};

/* LILAC_CUDA_MMA_XROWS=0: grouped products convert x per pair even when they are told the x rows (the
 * pre-pass over pairs, as before). Read once. */
bool xrows_enabled()
{
    return env_switch_once(g_xrows_on, "LILAC_CUDA_MMA_XROWS", true);
}

/* Whether k_mvt<T, MT> fits p's shape in a block's shared memory (every narrower instance then does: a block's
 * shared memory grows with T). */
template <int T, int MT> bool tv_fits(const TV &p) { return TvSmem(p.slot, T, 16 * MT).total <= dev_smem_most<k_mvt<T, MT>>(); }

template <int T, int MT> void tv_go(const TV &p, cudaStream_t st)
{
    (void)dev_smem_most<k_mvt<T, MT>>(); /* the attribute (tv_fits may have asked a wider instance only) */
    launch_dependent(k_mvt<T, MT>, dim3((unsigned)((p.rows + 16 * MT - 1) / (16 * MT))), dim3(TV_THREADS),
                     (size_t)TvSmem(p.slot, T, 16 * MT).total, st, p);
}

/* The matvec_tc launches of p's chunks at MT m16 tiles a warp. false: no instance fits (nothing launched). */
template <int MT> bool tv_run(TV p, const float *x, float *y, int n_tok, cudaStream_t st)
{
    /* chunks of up to the widest instance that fits (8 tokens at most), each in the narrowest that holds it:
     * every token gets its one-token bits whatever the chunk */
    static_assert(TV_MAXT == 8, "the instances below");
    const int tmax = tv_fits<8, MT>(p) ? 8 : tv_fits<4, MT>(p) ? 4 : tv_fits<2, MT>(p) ? 2 : tv_fits<1, MT>(p) ? 1 : 0;
    if (!tmax)
        return false;
    for (int t0 = 0; t0 < n_tok; t0 += p.n_tok) {
        p.n_tok = n_tok - t0 < tmax ? n_tok - t0 : tmax;
        p.x = x + (size_t)t0 * p.K, p.y = y + (size_t)t0 * p.rows;
        if (p.n_tok == 1)
            tv_go<1, MT>(p, st);
        else if (p.n_tok == 2)
            tv_go<2, MT>(p, st);
        else if (p.n_tok <= 4)
            tv_go<4, MT>(p, st);
        else
            tv_go<8, MT>(p, st);
    }
    return true;
}

/* LILAC_CUDA_MV_TC_ROWS: k_mvt's rows a block, 32 (the default: two m16 tiles a warp) or 16 (one); 0: 16 where
 * 32-row blocks would be fewer than two a multiprocessor (the output products, 64 blocks; the shared expert's
 * gate+up, 32), else 32. Any of them gives a row the same bits. Read once. */
std::atomic<int> g_tv_rows{-1};
int tv_rows_setting()
{
    const int r = env_int_once(g_tv_rows, "LILAC_CUDA_MV_TC_ROWS", 32, 0, 32);
    return r == 0 || r == 16 ? r : 32;
}
int tv_rows(long long rows)
{
    int r = tv_rows_setting();
    if (r == 0)
        r = (rows + 31) / 32 < 2LL * dev_sm_count() ? 16 : 32;
    return r;
}

/* LILAC_CUDA_MV_TC=1: the one-token products of Q4_K rows through k_mvt (lilac_cuda_matvec_tc_takes). Read once;
 * lilac_cuda_mv_tc_set sets it. */
std::atomic<int> g_tv{-1};

/* LILAC_CUDA_MV_TC_MIN_ROWS=N (default 0: any): k_mvt only for matrices of N rows or more. Why: in session 26's
 * bursts k_mvt was 12 % ahead of k_mv on the 12288- and 8192-row products (qkv+z, the attention's q) but in the
 * step's chain behind it on the narrow ones (the output product, 2048 rows; the shared expert's gate+up), and
 * tg128 as a whole 382.4/381.0 against 385.4/385.0 (session 27). A matrix's kernel depends on its shape alone:
 * the batched step still gets each token's one-token bits. Read once. */
std::atomic<int> g_tv_min{-1};
int tv_min_rows() { return env_int_once(g_tv_min, "LILAC_CUDA_MV_TC_MIN_ROWS", 0, 0, 1 << 30); }

} // namespace

extern "C" {

int lilac_cuda_mma_supported(int type) { return chunk_bytes(type) != 0; }

int lilac_cuda_mma_reserve(lilac_cuda_stream *s, size_t bytes) { return scratch(S(s), bytes) ? 0 : -1; }

void *lilac_cuda_scratch(lilac_cuda_stream *s, int kind, size_t bytes) { return scratch(S(s), bytes, kind); }

void lilac_cuda_scratch_release(lilac_cuda_stream *s)
{
    std::lock_guard<std::mutex> lk(g_scr_mu);
    const cudaStream_t st = S(s);
    for (int i = 0; i < g_n_scr;) {
        if (g_scr[i].st != st) {
            i++;
            continue;
        }
        if (g_scr[i].p) { /* the stream's last products may still read it */
            if (cudaStreamSynchronize(st) != cudaSuccess || cudaFree(g_scr[i].p) != cudaSuccess)
                (void)cudaGetLastError();
        }
        g_scr[i] = g_scr[--g_n_scr]; /* no Scratch pointer outlives the lock */
    }
}

int lilac_cuda_scratch_entries(void)
{
    std::lock_guard<std::mutex> lk(g_scr_mu);
    return g_n_scr;
}

int lilac_cuda_mma_prep_into(const float *x, const float *x2, long long x_stride, int n, int K, int quarter,
                             void *out, lilac_cuda_stream *s)
{
    if (!x || !out || n < 1 || K < 256 || K % 256 || x_stride < K)
        return -1;
    launch_prep(x, x_stride, nullptr, n, nullptr, K, xq_at(static_cast<uint8_t *>(out), n, K), S(s), x2,
                quarter != 0);
    return 0;
}

void *lilac_cuda_mma_scratch_borrow(lilac_cuda_stream *s, size_t bytes)
{
    std::lock_guard<std::mutex> lk(g_scr_mu);
    Scratch *sc = scratch_of(S(s), nullptr);
    if (!sc || !sc->p || sc->cap < bytes)
        return nullptr;
    sc->mn = 0; /* its digits are about to be overwritten: no pre-pass may skip on them */
    return sc->p;
}

unsigned lilac_cuda_mma_scratch_gen(lilac_cuda_stream *s)
{
    std::lock_guard<std::mutex> lk(g_scr_mu);
    const Scratch *sc = scratch_of(S(s), nullptr);
    return sc ? sc->gen : 0;
}

int lilac_cuda_mma_enabled(void)
{
    return env_switch_once(g_mma_on, "LILAC_CUDA_MMA", true);
}

int lilac_cuda_mma_set_enabled(int on)
{
    const int old = lilac_cuda_mma_enabled();
    g_mma_on.store(on ? 1 : 0, std::memory_order_relaxed);
    return old;
}

int lilac_cuda_mma_min_tokens(void) { return MIN_TOK; }
int lilac_cuda_mma_min_pairs(void) { return MIN_PAIRS; }

int lilac_cuda_matvec_mma(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s)
{
    return lilac_cuda_matvec_mma_x(W, x, y, n_tok, 0, s);
}

int lilac_cuda_matvec_mma_x(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, int same_x,
                            lilac_cuda_stream *s)
{
    bool a16 = false;
    if (!W || !x || !y || n_tok < 1 || !shape_ok(W, 0, &a16))
        return -1;
    const cudaStream_t st = S(s);
    const int K = (int)W->cols;
    XQ q;
    if (!xq_get(st, n_tok, K, q))
        return -1;
    MM p{};
    p.w = static_cast<const uint8_t *>(W->data);
    p.row_bytes = W->row_bytes;
    p.offsets = nullptr;
    p.n_expert = 1;
    p.n_tok = n_tok;
    p.xq = q.xq, p.xsum = q.xsum, p.xexp = q.xexp;
    p.y = y;
    p.rows = (int)W->rows;
    p.K = K;
    p.row_tiles = (p.rows + BM - 1) / BM;
    prep(x, K, nullptr, n_tok, nullptr, K, q, st, same_x != 0);
    const int nt = dense_nt(n_tok, p.row_tiles);
    const int BN = nt == 4 && t24_takes(W->type, 2) ? 24 : 16 * nt;
    const long long items = (long long)((n_tok + BN - 1) / BN) * p.row_tiles;
    return launch_tn(BN, p, a16, items, st, W->type) ? 0 : -1;
}

/* lilac_cuda_matvec_grouped_mma's, x2 (or NULL) lilac_cuda_matvec_grouped_glu's up rows. */
static int grouped_mma(const lilac_cuda_mat *W, size_t expert_stride, int n_expert, const int32_t *offsets,
                       const int32_t *rows_of_x, int n_x, int max_pairs, int n_pairs, const float *x, const float *x2,
                       long long x_stride, float *y, lilac_cuda_stream *s)
{
    bool a16 = false;
    if (!W || !offsets || !x || !y || n_expert < 1 || n_expert > MAX_EXPERT || max_pairs < 1 || n_pairs < 1 ||
        x_stride < W->cols || !shape_ok(W, expert_stride, &a16) ||
        (n_expert > 1 && expert_stride < (size_t)W->rows * W->row_bytes))
        return -1;
    const cudaStream_t st = S(s);
    const int K = (int)W->cols;
    /* the digits of the n_x rows of x, once (pairs share rows: gate and up read each token's row k times),
     * or of the pairs' rows, a row a pair */
    const bool by_row = rows_of_x && n_x > 0 && xrows_enabled();
    XQ q;
    if (!xq_get(st, by_row ? n_x : n_pairs, K, q))
        return -1;
    MM p{};
    p.w = static_cast<const uint8_t *>(W->data);
    p.row_bytes = W->row_bytes;
    p.expert_stride = expert_stride;
    p.xrow = by_row ? rows_of_x : nullptr;
    p.n_x = by_row ? n_x : 0;
    p.offsets = offsets;
    p.n_expert = n_expert;
    p.n_tok = n_pairs;
    p.xq = q.xq, p.xsum = q.xsum, p.xexp = q.xexp;
    p.y = y;
    p.rows = (int)W->rows;
    p.K = K;
    p.row_tiles = (p.rows + BM - 1) / BM;
    if (by_row) /* x row r's digits at row r */
        prep(x, x_stride, nullptr, n_x, nullptr, K, q, st, false, x2);
    else /* pair i's digits at row i; the pairs in all are offsets[n_expert] (read on the device) */
        prep(x, x_stride, rows_of_x, n_pairs, offsets + n_expert, K, q, st, false, x2);
    /* tokens a tile from the mean pairs of an expert; items: sum ceil(c_e / BN) <= n_expert + n_pairs / BN.
     * Measured and removed: experts of over 16 pairs in a second launch of 32-token tiles with the 8 warps
     * along the rows (each weight decoded once for up to 32 tokens; one block an SM, 134 KB of shared memory):
     * pp512 7,205 against 7,449 (H200, one call, 2026-11-30).
     * Q4_K experts of 12 to 23 pairs on average in 24-token tiles (8 x 1 warps, three n8 tiles a warp; two blocks
     * an SM still fit; LILAC_CUDA_MMA_T24=0: 16): at pp512 (Poisson(16) pairs an expert) ~1.02 tiles an expert
     * instead of ~1.43, so each weight is decoded ~30 % fewer times for ~7 % more tensor-core work. pp512
     * 9,721/9,718 against 9,440/9,445 (H200, one call, 2026-11-30; pp4096, whose experts take 64, the same). */
    const long long mean = n_pairs / n_expert;
    const int BN = mean >= 48 ? 64 : mean >= 24 ? 32 : mean >= 12 && t24_takes(W->type, 1) ? 24 : 16;
    long long tiles = (long long)n_expert + n_pairs / BN + 1, tiles2 = (long long)n_expert * ((max_pairs + BN - 1) / BN);
    if (tiles2 < tiles)
        tiles = tiles2;
    const long long items = tiles * p.row_tiles;
    return launch_tn(BN, p, a16, items, st, W->type) ? 0 : -1;
}

int lilac_cuda_matvec_grouped_mma(const lilac_cuda_mat *W, size_t expert_stride, int n_expert,
                                  const int32_t *offsets, const int32_t *rows_of_x, int n_x, int max_pairs, int n_pairs,
                                  const float *x, long long x_stride, float *y, lilac_cuda_stream *s)
{
    return grouped_mma(W, expert_stride, n_expert, offsets, rows_of_x, n_x, max_pairs, n_pairs, x, nullptr, x_stride,
                       y, s);
}

int lilac_cuda_matvec_grouped_glu_mma(const lilac_cuda_mat *W, size_t expert_stride, int n_expert,
                                      const int32_t *offsets, int max_pairs, int n_pairs, const float *g,
                                      const float *u, long long x_stride, float *y, lilac_cuda_stream *s)
{
    if (!u)
        return -1;
    return grouped_mma(W, expert_stride, n_expert, offsets, nullptr, 0, max_pairs, n_pairs, g, u, x_stride, y, s);
}

int lilac_cuda_mv_tc_set(int on)
{
    const int old = env_switch_once(g_tv, "LILAC_CUDA_MV_TC", false) ? 1 : 0;
    g_tv.store(on ? 1 : 0, std::memory_order_relaxed);
    return old;
}

int lilac_cuda_mv_tc_rows_set(int rows)
{
    const int old = tv_rows_setting(); /* the environment's setting read */
    g_tv_rows.store(rows == 0 || rows == 16 ? rows : 32, std::memory_order_relaxed);
    return old;
}

int lilac_cuda_mv_tc_min_rows_set(int rows)
{
    const int old = tv_min_rows(); /* the environment's setting read */
    g_tv_min.store(rows > 0 ? rows : 0, std::memory_order_relaxed);
    return old;
}

int lilac_cuda_matvec_tc_takes(const lilac_cuda_mat *W)
{
    return W && W->data && W->type == LILAC_Q4_K && W->rows >= 1 && W->cols >= 256 && W->cols % 256 == 0 &&
           W->cols <= (1 << 20) && W->row_bytes % 16 == 0 && W->row_bytes >= (size_t)(W->cols / 256) * 144 &&
           W->row_bytes <= (1u << 20) && (reinterpret_cast<uintptr_t>(W->data) & 15) == 0 &&
           env_switch_once(g_tv, "LILAC_CUDA_MV_TC", false) && W->rows >= tv_min_rows() && dev_cc_major() >= 9;
}

int lilac_cuda_matvec_tc(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, int accumulate,
                         lilac_cuda_stream *s)
{
    if (!lilac_cuda_matvec_tc_takes(W) || !x || !y || n_tok < 1 || (reinterpret_cast<uintptr_t>(x) & 15))
        return -1;
    TV p{};
    p.w = static_cast<const uint8_t *>(W->data);
    p.row_bytes = W->row_bytes;
    p.rows = (int)W->rows, p.K = (int)W->cols, p.acc = accumulate != 0;
    p.slot = (int)(W->row_bytes / 16 % 2 ? W->row_bytes : W->row_bytes + 16); /* an odd number of granules */
    const cudaStream_t st = S(s);
    const bool ok = tv_rows(W->rows) == 16 ? tv_run<1>(p, x, y, n_tok, st) : tv_run<2>(p, x, y, n_tok, st);
    return ok ? 0 : -1;
}

} // extern "C"
