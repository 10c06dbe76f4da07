/* cuda_quant: the CUDA matrix-vector kernels over weights in their file
 * encoding (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), dequantized in
 * registers, and the memory/stream helpers of cuda.h.
 *
 * The product kernel (k_mv) is memory-bound at one token: a row of Q4_K is
 * 0.56 bytes a value, so at 4.8 TB/s an H200 multiprocessor has only about
 * 8 instructions per weight byte to spend. It is built around that budget:
 *
 *  - A lane owns a "unit" of a row (64 values of a K-quant block, a whole
 *    Q8_0/Q4_0 block, 16 floats) and reads it with 16-byte loads; adjacent
 *    lanes own adjacent units, so a warp's loads cover contiguous bytes. The
 *    same lane does the same unit of R rows, so each x value it loads from
 *    shared memory serves R rows.
 *  - Quants are never converted to float one by one (I2F is 1/8 rate, the
 *    usual magic-number trick costs two instructions, PRMT is slow). A
 *    small unsigned q at bit s of a word, masked out with one LOP3, is the
 *    float32 q * 2^(s - 149), a denormal, which FFMA multiplies exactly at
 *    full rate. x is stored in shared memory times 2^(64 - s) for the s its
 *    quant is found at, so every product is the normal float q * x * 2^-85;
 *    the block scale times 2^85 takes it back. One LOP3 and one FFMA a
 *    value.
 *  - Offsets (Q4_0's 8, Q8_0's sign, K-quant mins, Q6_K's 32) are taken out
 *    per run of 16 values with sums of x precomputed in shared memory:
 *    sum (d q - m) x = d sum(q x) - m sum(x).
 *  - Accumulation is float32 throughout (products exact, one rounding per
 *    FFMA); see the accuracy note at k_mv.
 *
 * This needs denormals kept (nvcc's default -ftz=false): with flush-to-zero
 * every quantized product would be zero, hence the #error below. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "format/dtype.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_dev.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_dq.cuh"
#include "kernels/cuda/cuda_sizes.h"
#include "util/env.h"
#include "kernels/cuda/cuda_trace.cuh"

#if defined(__CUDA_FTZ) && __CUDA_FTZ
#error "cuda_quant.cu relies on float32 denormals: build it without -ftz=true / --use_fast_math"
#endif

#ifndef LILAC_CUDA_ARCHS
#define LILAC_CUDA_ARCHS "?"
#endif

LILAC_TRACE_TU(quant)

#ifdef LILAC_ASAN_CUDA
/* Sanitizer builds (LILAC_SANITIZE): AddressSanitizer reserves the "shadow
 * gap" of the address space, where the CUDA driver maps its memory, and
 * cudaGetDeviceCount then fails with "out of memory". This default leaves
 * the gap to CUDA (heap, stack and global checks are unchanged; an
 * ASAN_OPTIONS in the environment still overrides it). */
extern "C" const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
#endif

namespace {

constexpr int NWARPS = 8;
constexpr int NTHREADS = NWARPS * 32;
/* Rows a block takes an item (a row tile) at R rows a lane group and 2^lpr_log2 lanes a row: NWARPS warps of
 * 32 >> lpr_log2 lane groups. k_mv's and the grouped kernel's tiles, their host shapes and the staged copies. */
__host__ __device__ constexpr long long mv_tile_rows(int R, int lpr_log2)
{
    return (long long)NWARPS * (R << (5 - lpr_log2));
}
constexpr float XUNSCALE = 0x1p-64f; /* x in shared memory is x * 2^(64 - s) */
constexpr float QSCALE = 0x1p85f;   /* (q * 2^-149) * (x * 2^64) * 2^85 = q x */
constexpr int TILE_VALUES = 32768;   /* x values (times tokens) one block holds in shared memory */
constexpr int SMEM_MAX = 160 * 1024; /* what that takes at most (16 floats a unit + 4 of padding) */

/* ------------------------------------------------------------------ */
/* device helpers */


/* A small unsigned integer (< 2^23) as a float, exactly, without I2F. */
__device__ __forceinline__ float u2f(uint32_t v) { return __uint_as_float(0x4B000000u | v) - 8388608.0f; }

/* SH: p is in shared memory (a staged row, mv_stage): a plain load; else the read-only path. */
template <bool SH, class V> __device__ __forceinline__ V ldv(const V *p)
{
    if constexpr (SH)
        return *p;
    else
        return __ldg(p);
}

template <bool SH = false> __device__ __forceinline__ uint32_t ldu16(const uint8_t *p)
{
    return ldv<SH>(reinterpret_cast<const unsigned short *>(p));
}

/* NW words of bytes at p. A16: p is 16-byte aligned, NW/4 plain 16-byte
 * loads. Otherwise p need only be 2-aligned: the aligned 16-byte chunks
 * around it are loaded (never one holding none of the wanted bytes, so
 * nothing past the tensor's last 16-byte granule is touched) and shifted
 * into place by selects and a funnel shift. */
template <int NW, bool A16, bool SH = false> __device__ __forceinline__ void ldw(const uint8_t *p, uint32_t (&w)[NW])
{
    static_assert(NW % 4 == 0, "whole 16-byte chunks");
    if (A16) {
#pragma unroll
        for (int i = 0; i < NW / 4; i++) {
            const uint4 v = ldv<SH>(reinterpret_cast<const uint4 *>(p) + i);
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
        return;
    }
    constexpr int NC = NW / 4 + 1;
    const uint4 *a = reinterpret_cast<const uint4 *>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(15));
    const uint32_t s = (uint32_t)(reinterpret_cast<uintptr_t>(p) & 15);
    uint32_t X[4 * NC];
#pragma unroll
    for (int i = 0; i < NC; i++) {
        uint4 v = make_uint4(0, 0, 0, 0);
        if (i < NC - 1 || s != 0)
            v = ldv<SH>(a + i);
        X[4 * i] = v.x, X[4 * i + 1] = v.y, X[4 * i + 2] = v.z, X[4 * i + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < 4 * NC - 2; i++)
        X[i] = (s & 8) ? X[i + 2] : X[i];
#pragma unroll
    for (int i = 0; i < 4 * NC - 3; i++)
        X[i] = (s & 4) ? X[i + 1] : X[i];
    const uint32_t sh = (s & 2) * 8;
#pragma unroll
    for (int i = 0; i < NW; i++)
        w[i] = __funnelshift_r(X[i], X[i + 1], sh);
}

/* N words of shared memory from q, whose address is A mod 16 (A a multiple of 4, known when compiled): the widest
 * aligned loads that fit, so that k_mv_ring's Q6_K rows load without ldw's runtime selects. */
template <int N, int A, int I = 0> __device__ __forceinline__ void ld_words(const uint32_t *q, uint32_t *X)
{
    if constexpr (I < N) {
        constexpr int a = (A + 4 * I) & 15;
        if constexpr (a == 0 && I + 4 <= N) {
            const uint4 v = *reinterpret_cast<const uint4 *>(q + I);
            X[I] = v.x, X[I + 1] = v.y, X[I + 2] = v.z, X[I + 3] = v.w;
            ld_words<N, A, I + 4>(q, X);
        } else if constexpr (a % 8 == 0 && I + 2 <= N) {
            const uint2 v = *reinterpret_cast<const uint2 *>(q + I);
            X[I] = v.x, X[I + 1] = v.y;
            ld_words<N, A, I + 2>(q, X);
        } else {
            X[I] = q[I];
            ld_words<N, A, I + 1>(q, X);
        }
    }
}

/* ldw's words (the same bytes) from shared memory at p, p = S mod 16 (S even, known when compiled). */
template <int NW, int S> __device__ __forceinline__ void ldw_sh(const uint8_t *p, uint32_t (&w)[NW])
{
    static_assert(S % 2 == 0 && S >= 0 && S < 16, "2-aligned");
    if constexpr (S % 4 == 0) {
        ld_words<NW, S>(reinterpret_cast<const uint32_t *>(p), w);
    } else {
        uint32_t X[NW + 1];
        ld_words<NW + 1, S - 2>(reinterpret_cast<const uint32_t *>(p - 2), X);
#pragma unroll
        for (int i = 0; i < NW; i++)
            w[i] = __funnelshift_r(X[i], X[i + 1], 16);
    }
}

/* ------------------------------------------------------------------ */
/* Per-type units. Each type defines:
 *   VPU     values a unit (a lane's share of a row per step)
 *   NRUN    runs of 16 values whose x sums the offsets need (0: none)
 *   Pay     the unit's bytes, in registers
 *   load    issue the loads of unit u of a row
 *   vcol    the column of a tile's value v: the virtual order in which a
 *           unit's values lie together (identity but for Q6_K; an
 *           involution, so it maps both ways)
 *   xshift  the bit offset s at which the dot finds value i of a unit in
 *           its word: x is stored times 2^(64 - s), so that every product
 *           (q * 2^(s - 149)) * (x * 2^(64 - s)) is q x 2^-85
 *   dot     tot[r][t] += unit u of row r . x of token t, for R rows at once
 * xu points at the unit's x in shared memory (token t at xu + t * xs), su at
 * its run sums (token t at su + t * ss); nt of the T tokens are real. */

template <int TYPE> struct Unit;

/* A field of v already in place (v & m, below bit 23) as the denormal
 * float field * 2^-149: one LOP3. */
__device__ __forceinline__ float fld(uint32_t v, uint32_t m) { return __uint_as_float(v & m); }

/* Four byte-aligned fields (mask m < 2^7) of v, values i .. i + 3, at bits
 * 0, 8, 16 and (shifted down) 16: xshift {0, 8, 16, 16}. */
__device__ __forceinline__ float fma_bytes(float acc, uint32_t v, uint32_t m, float4 x)
{
    acc = fmaf(fld(v, m), x.x, acc);
    acc = fmaf(fld(v, m << 8), x.y, acc);
    acc = fmaf(fld(v, m << 16), x.z, acc);
    return fmaf(fld(v >> 8, m << 16), x.w, acc);
}
__device__ constexpr int xshift_bytes(int i) { return (i & 3) == 0 ? 0 : (i & 3) == 1 ? 8 : 16; }

/* The eight nibbles of w: low nibbles are values i .. i + 3 of one run
 * (acc_lo, x_lo), high nibbles of another. xshift {0, 8, 16, 12} for the
 * low, {4, 12, 8, 16} for the high ones (the top bytes seen through w >> 12). */
__device__ __forceinline__ void fma_nibbles(float &lo, float &hi, uint32_t w, float4 xl, float4 xh)
{
    const uint32_t w2 = w >> 12;
    lo = fmaf(fld(w, 0xF), xl.x, lo);
    lo = fmaf(fld(w, 0xF00), xl.y, lo);
    lo = fmaf(fld(w, 0xF0000), xl.z, lo);
    lo = fmaf(fld(w2, 0xF000), xl.w, lo);
    hi = fmaf(fld(w, 0xF0), xh.x, hi);
    hi = fmaf(fld(w, 0xF000), xh.y, hi);
    hi = fmaf(fld(w2, 0xF00), xh.z, hi);
    hi = fmaf(fld(w2, 0xF0000), xh.w, hi);
}
__device__ constexpr int xshift_nib_lo(int i) { return (i & 3) == 0 ? 0 : (i & 3) == 1 ? 8 : (i & 3) == 2 ? 16 : 12; }
__device__ constexpr int xshift_nib_hi(int i) { return (i & 3) == 0 ? 4 : (i & 3) == 1 ? 12 : (i & 3) == 2 ? 8 : 16; }

template <int R, int T> __device__ __forceinline__ void zero(float (&acc)[R][T][2])
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[r][t][0] = acc[r][t][1] = 0.f;
}

/* d * sc and dmin * m of groups 2j and 2j + 1 of a Q4_K/Q5_K block
 * (lilac_kq_scale_min on the two bytes at once); d carries QSCALE. */
__device__ __forceinline__ void kq_scales(const uint32_t (&h)[4], int j, float (&ds)[2], float (&dm)[2])
{
    const uint32_t sh = (j & 1) * 16;
    const uint32_t A = h[1] >> sh, B = h[2] >> sh, C = h[3] >> sh;
    uint32_t sc, mn;
    if (j < 2) {
        sc = A & 0x3F3F, mn = B & 0x3F3F;
    } else {
        sc = (C & 0x0F0F) | ((A >> 2) & 0x3030);
        mn = ((C >> 4) & 0x0F0F) | ((B >> 2) & 0x3030);
    }
    const float d = __fmul_rn(h2f(h[0]), QSCALE), dmin = h2f(h[0] >> 16);
    ds[0] = __fmul_rn(d, u2f(sc & 0xFF)), ds[1] = __fmul_rn(d, u2f(sc >> 8));
    dm[0] = __fmul_rn(dmin, u2f(mn & 0xFF)), dm[1] = __fmul_rn(dmin, u2f(mn >> 8));
}

/* The K-quant fold: tot += d sc sum(q x) - dmin m sum(x) for the low and
 * high groups (runs 0-1 and 2-3 of the unit). The folds' products and sums
 * are written with explicit rounding (__fmul_rn, __fmaf_rn, ...): plain
 * float * and + become PTX mul.f32/add.f32, which ptxas may fuse into FMAs
 * one way in one kernel and another way in the next. k_moe_down_sum at two
 * rows a lane group differed so from k_mv in Q4_K and Q5_K rows' last bits
 * (H200, 2026-11-30; the PTX the same sequence, the SASS not). Every kernel
 * that inlines a Unit's dot now gets the same bits for a row and token,
 * whatever its rows a lane group or tokens a pass. */
template <int R, int T>
__device__ __forceinline__ void kq_fold(const float (&acc)[R][T][2], const float (&ds)[R][2], const float (&dm)[R][2],
                                        const float *su, int ss, int nt, float (&tot)[R][T])
{
#pragma unroll
    for (int t = 0; t < T; t++) {
        if (T > 1 && t >= nt)
            break;
        const float4 s = *reinterpret_cast<const float4 *>(su + t * ss);
        const float s0 = __fadd_rn(s.x, s.y), s1 = __fadd_rn(s.z, s.w);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float q = __fmaf_rn(ds[r][0], acc[r][t][0], __fmul_rn(ds[r][1], acc[r][t][1]));
            const float m = __fmaf_rn(dm[r][0], s0, __fmul_rn(dm[r][1], s1));
            tot[r][t] = __fadd_rn(tot[r][t], __fsub_rn(q, m));
        }
    }
}

/* Q4_K: unit u is run j = u % 4 of block u / 4: qs bytes 32j..32j+31, whose
 * low nibbles are group 2j (values 64j + l) and high nibbles group 2j + 1. */
template <> struct Unit<LILAC_Q4_K> {
    static constexpr int VPU = 64, NRUN = 4;
    struct Pay {
        uint32_t h[4]; /* d | dmin << 16, scales[12] */
        uint32_t q[8];
    };
    template <bool A16, bool SH = false> __device__ static void load(const uint8_t *row, int u, Pay &p)
    {
        const uint8_t *b = row + (size_t)(u >> 2) * Q4_K_BYTES;
        ldw<4, A16, SH>(b, p.h);
        ldw<8, A16, SH>(b + 16 + 32 * (u & 3), p.q);
    }
    __device__ static int vcol(int c) { return c; }
    __device__ static constexpr int xshift(int i) { return i < 32 ? xshift_nib_lo(i) : xshift_nib_hi(i); }

    template <int R, int T>
    __device__ static void dot(const Pay (&p)[R], const float *xu, int xs, const float *su, int ss, int u, int nt,
                               float (&tot)[R][T])
    {
        float ds[R][2], dm[R][2], acc[R][T][2];
#pragma unroll
        for (int r = 0; r < R; r++)
            kq_scales(p[r].h, u & 3, ds[r], dm[r]);
        zero(acc);
#pragma unroll
        for (int m = 0; m < 8; m++)
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (T > 1 && t >= nt)
                    break;
                const float4 xl = *reinterpret_cast<const float4 *>(xu + t * xs + 4 * m);
                const float4 xh = *reinterpret_cast<const float4 *>(xu + t * xs + 32 + 4 * m);
#pragma unroll
                for (int r = 0; r < R; r++)
                    fma_nibbles(acc[r][t][0], acc[r][t][1], p[r].q[m], xl, xh);
            }
        kq_fold(acc, ds, dm, su, ss, nt, tot);
    }
};

/* Q5_K: Q4_K's unit plus the fifth bits: bit 2j (low nibbles) and 2j + 1
 * (high nibbles) of qh[l], merged into bit 4 of each byte (bits 5-7 are
 * left as they come: the 5-bit field masks drop them). */
template <> struct Unit<LILAC_Q5_K> {
    static constexpr int VPU = 64, NRUN = 4;
    struct Pay {
        uint32_t h[4];
        uint32_t qh[8];
        uint32_t q[8];
    };
    template <bool A16, bool SH = false> __device__ static void load(const uint8_t *row, int u, Pay &p)
    {
        const uint8_t *b = row + (size_t)(u >> 2) * Q5_K_BYTES;
        ldw<4, A16, SH>(b, p.h);
        ldw<8, A16, SH>(b + 16, p.qh);
        ldw<8, A16, SH>(b + 48 + 32 * (u & 3), p.q);
    }
    __device__ static int vcol(int c) { return c; }
    __device__ static constexpr int xshift(int i) { return xshift_bytes(i); }

    template <int R, int T>
    __device__ static void dot(const Pay (&p)[R], const float *xu, int xs, const float *su, int ss, int u, int nt,
                               float (&tot)[R][T])
    {
        const int j = u & 3;
        float ds[R][2], dm[R][2], acc[R][T][2];
#pragma unroll
        for (int r = 0; r < R; r++)
            kq_scales(p[r].h, j, ds[r], dm[r]);
        zero(acc);
#pragma unroll
        for (int m = 0; m < 8; m++) {
            uint32_t lo[R], hi[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t hb = p[r].qh[m] >> (2 * j), q = p[r].q[m];
                lo[r] = (q & 0x0F0F0F0F) | ((hb << 4) & 0xF0F0F0F0);
                hi[r] = ((q >> 4) & 0x0F0F0F0F) | ((hb << 3) & 0xF0F0F0F0);
            }
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (T > 1 && t >= nt)
                    break;
                const float4 xl = *reinterpret_cast<const float4 *>(xu + t * xs + 4 * m);
                const float4 xh = *reinterpret_cast<const float4 *>(xu + t * xs + 32 + 4 * m);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r][t][0] = fma_bytes(acc[r][t][0], lo[r], 0x1F, xl);
                    acc[r][t][1] = fma_bytes(acc[r][t][1], hi[r], 0x1F, xh);
                }
            }
        }
        kq_fold(acc, ds, dm, su, ss, nt, tot);
    }
};

/* Q6_K: unit u = 4b + 2h + p is ql bytes 64h + 32p + l (l < 32) of block b:
 * low nibbles are values 128h + 32p + l, high nibbles 128h + 64 + 32p + l,
 * their top bits in qh[32h + l] (bits 2p and 4 + 2p). vcol stores the two
 * runs of 32 side by side (it swaps bits 5 and 6 of the column). */
template <> struct Unit<LILAC_Q6_K> {
    static constexpr int VPU = 64, NRUN = 4;
    struct Pay {
        uint32_t ql[8];
        uint32_t qh[8];
        uint32_t sc; /* int8 scales of the low runs (bytes 0, 1) and high runs (2, 3) */
        uint32_t d;
    };
    template <bool A16, bool SH = false> __device__ static void load(const uint8_t *row, int u, Pay &p)
    {
        const uint8_t *b = row + (size_t)(u >> 2) * Q6_K_BYTES; /* 210 bytes: never 16-aligned throughout */
        const int h = (u >> 1) & 1, pp = u & 1;
        ldw<8, false, SH>(b + 64 * h + 32 * pp, p.ql);
        ldw<8, false, SH>(b + 128 + 32 * h, p.qh);
        p.sc = ldu16<SH>(b + 192 + 8 * h + 2 * pp) | (ldu16<SH>(b + 196 + 8 * h + 2 * pp) << 16);
        p.d = ldu16<SH>(b + 208);
    }
    /* load's Pay from a staged row whose block u / 4 starts at S mod 16 (k_mv_ring) */
    template <int S> __device__ static void load_sh(const uint8_t *row, int u, Pay &p)
    {
        const uint8_t *b = row + (size_t)(u >> 2) * Q6_K_BYTES;
        const int h = (u >> 1) & 1, pp = u & 1;
        ldw_sh<8, S>(b + 64 * h + 32 * pp, p.ql); /* offsets of 32: the same S */
        ldw_sh<8, S>(b + 128 + 32 * h, p.qh);
        p.sc = ldu16<true>(b + 192 + 8 * h + 2 * pp) | (ldu16<true>(b + 196 + 8 * h + 2 * pp) << 16);
        p.d = ldu16<true>(b + 208);
    }
    __device__ static int vcol(int c) { return (c & ~0x60) | ((c & 0x20) << 1) | ((c & 0x40) >> 1); }
    __device__ static constexpr int xshift(int i) { return xshift_bytes(i); }

    template <int R, int T>
    __device__ static void dot(const Pay (&p)[R], const float *xu, int xs, const float *su, int ss, int u, int nt,
                               float (&tot)[R][T])
    {
        const int pp = u & 1;
        float ds[R][4], off[R][4];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = h2f(p[r].d);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float s = __fmul_rn(d, u2f(((p[r].sc >> (8 * i)) & 0xFF) ^ 0x80) - 128.f); /* exact: 11 x 8 bits */
                ds[r][i] = __fmul_rn(s, QSCALE), off[r][i] = __fmul_rn(s, 32.f);
            }
        }
#pragma unroll
        for (int half = 0; half < 2; half++) { /* values l < 16, then l >= 16: one scale each */
            float acc[R][T][2];
            zero(acc);
#pragma unroll
            for (int m = 4 * half; m < 4 * half + 4; m++) {
                uint32_t lo[R], hi[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t qh = p[r].qh[m] >> (2 * pp), ql = p[r].ql[m];
                    lo[r] = (ql & 0x0F0F0F0F) | ((qh << 4) & 0xF0F0F0F0);
                    hi[r] = ((ql >> 4) & 0x0F0F0F0F) | (qh & 0xF0F0F0F0);
                }
#pragma unroll
                for (int t = 0; t < T; t++) {
                    if (T > 1 && t >= nt)
                        break;
                    const float4 xl = *reinterpret_cast<const float4 *>(xu + t * xs + 4 * m);
                    const float4 xh = *reinterpret_cast<const float4 *>(xu + t * xs + 32 + 4 * m);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        acc[r][t][0] = fma_bytes(acc[r][t][0], lo[r], 0x3F, xl);
                        acc[r][t][1] = fma_bytes(acc[r][t][1], hi[r], 0x3F, xh);
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (T > 1 && t >= nt)
                    break;
                const float4 s = *reinterpret_cast<const float4 *>(su + t * ss);
                const float slo = half ? s.y : s.x, shi = half ? s.w : s.z;
#pragma unroll
                for (int r = 0; r < R; r++) { /* kq_fold's explicit rounding, and why */
                    const float q = __fmaf_rn(ds[r][half], acc[r][t][0], __fmul_rn(ds[r][2 + half], acc[r][t][1]));
                    const float o = __fmaf_rn(off[r][half], slo, __fmul_rn(off[r][2 + half], shi));
                    tot[r][t] = __fadd_rn(tot[r][t], __fsub_rn(q, o));
                }
            }
        }
    }
};

/* Q8_0: a unit is a block; qs ^ 0x80 is q + 128 (unsigned), the 128 taken
 * out with the sums. Bytes 2 and 3 are read at bits 8 and 0 (8-bit fields
 * must stay below bit 23). */
template <> struct Unit<LILAC_Q8_0> {
    static constexpr int VPU = 32, NRUN = 2;
    struct Pay {
        uint32_t q[8];
        uint32_t d;
    };
    template <bool A16, bool SH = false> __device__ static void load(const uint8_t *row, int u, Pay &p)
    {
        const uint8_t *b = row + (size_t)u * Q8_0_BYTES;
        ldw<8, false, SH>(b + 2, p.q); /* qs is never 16-aligned */
        p.d = ldu16<SH>(b);
    }
    __device__ static int vcol(int c) { return c; }
    __device__ static constexpr int xshift(int i) { return (i & 3) == 1 || (i & 3) == 2 ? 8 : 0; }

    template <int R, int T>
    __device__ static void dot(const Pay (&p)[R], const float *xu, int xs, const float *su, int ss, int, int nt,
                               float (&tot)[R][T])
    {
        float acc[R][T][2];
        zero(acc);
#pragma unroll
        for (int m = 0; m < 8; m++)
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (T > 1 && t >= nt)
                    break;
                const float4 x = *reinterpret_cast<const float4 *>(xu + t * xs + 4 * m);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t v = p[r].q[m] ^ 0x80808080u;
                    float a = acc[r][t][m & 1];
                    a = fmaf(fld(v, 0xFF), x.x, a);
                    a = fmaf(fld(v, 0xFF00), x.y, a);
                    a = fmaf(fld(v >> 8, 0xFF00), x.z, a);
                    acc[r][t][m & 1] = fmaf(__uint_as_float(v >> 24), x.w, a);
                }
            }
#pragma unroll
        for (int t = 0; t < T; t++) {
            if (T > 1 && t >= nt)
                break;
            const float2 s = *reinterpret_cast<const float2 *>(su + t * ss);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float d = h2f(p[r].d);
                /* kq_fold's explicit rounding, and why */
                const float q = __fmul_rn(__fmul_rn(d, QSCALE), __fadd_rn(acc[r][t][0], acc[r][t][1]));
                tot[r][t] = __fadd_rn(tot[r][t], __fsub_rn(q, __fmul_rn(__fmul_rn(d, 128.f), __fadd_rn(s.x, s.y))));
            }
        }
    }
};

/* Q4_0: a unit is a block; low nibbles are values 0..15, high 16..31. */
template <> struct Unit<LILAC_Q4_0> {
    static constexpr int VPU = 32, NRUN = 2;
    struct Pay {
        uint32_t q[4];
        uint32_t d;
    };
    template <bool A16, bool SH = false> __device__ static void load(const uint8_t *row, int u, Pay &p)
    {
        const uint8_t *b = row + (size_t)u * Q4_0_BYTES;
        ldw<4, false, SH>(b + 2, p.q);
        p.d = ldu16<SH>(b);
    }
    __device__ static int vcol(int c) { return c; }
    __device__ static constexpr int xshift(int i) { return i < 16 ? xshift_nib_lo(i) : xshift_nib_hi(i); }

    template <int R, int T>
    __device__ static void dot(const Pay (&p)[R], const float *xu, int xs, const float *su, int ss, int, int nt,
                               float (&tot)[R][T])
    {
        float acc[R][T][2];
        zero(acc);
#pragma unroll
        for (int m = 0; m < 4; m++)
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (T > 1 && t >= nt)
                    break;
                const float4 xl = *reinterpret_cast<const float4 *>(xu + t * xs + 4 * m);
                const float4 xh = *reinterpret_cast<const float4 *>(xu + t * xs + 16 + 4 * m);
#pragma unroll
                for (int r = 0; r < R; r++)
                    fma_nibbles(acc[r][t][0], acc[r][t][1], p[r].q[m], xl, xh);
            }
#pragma unroll
        for (int t = 0; t < T; t++) {
            if (T > 1 && t >= nt)
                break;
            const float2 s = *reinterpret_cast<const float2 *>(su + t * ss);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float d = h2f(p[r].d);
                /* kq_fold's explicit rounding, and why */
                const float q = __fmul_rn(__fmul_rn(d, QSCALE), __fadd_rn(acc[r][t][0], acc[r][t][1]));
                tot[r][t] = __fadd_rn(tot[r][t], __fsub_rn(q, __fmul_rn(__fmul_rn(d, 8.f), __fadd_rn(s.x, s.y))));
            }
        }
    }
};

/* Plain float types: 16 values a unit; the products carry x's 2^64. */
template <int TYPE> struct UnitFloat {
    static constexpr int VPU = 16, NRUN = 0;
    static constexpr int NW = TYPE == LILAC_F32 ? 16 : 8;
    struct Pay {
        uint32_t w[NW];
    };
    template <bool A16, bool SH = false> __device__ static void load(const uint8_t *row, int u, Pay &p)
    {
        ldw<NW, true, SH>(row + (size_t)u * NW * 4, p.w); /* only launched 16-aligned */
    }
    __device__ static int vcol(int c) { return c; }
    __device__ static constexpr int xshift(int) { return 0; }
    __device__ static float val(const Pay &p, int i)
    {
        if (TYPE == LILAC_F32)
            return __uint_as_float(p.w[i]);
        const uint32_t w = p.w[i >> 1];
        if (TYPE == LILAC_BF16)
            return __uint_as_float((i & 1) ? w & 0xFFFF0000u : w << 16);
        return h2f((i & 1) ? w >> 16 : w);
    }

    template <int R, int T>
    __device__ static void dot(const Pay (&p)[R], const float *xu, int xs, const float *, int, int, int nt,
                               float (&tot)[R][T])
    {
        float acc[R][T];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < T; t++)
                acc[r][t] = 0.f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float w[R][4];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    w[r][i] = val(p[r], 4 * k + i);
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (T > 1 && t >= nt)
                    break;
                const float4 x = *reinterpret_cast<const float4 *>(xu + t * xs + 4 * k);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r][t] = fmaf(w[r][0], x.x, acc[r][t]);
                    acc[r][t] = fmaf(w[r][1], x.y, acc[r][t]);
                    acc[r][t] = fmaf(w[r][2], x.z, acc[r][t]);
                    acc[r][t] = fmaf(w[r][3], x.w, acc[r][t]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < T; t++)
#pragma unroll
            for (int r = 0; r < R; r++)
                tot[r][t] = fmaf(acc[r][t], XUNSCALE, tot[r][t]);
    }
};
template <> struct Unit<LILAC_F32> : UnitFloat<LILAC_F32> {};
template <> struct Unit<LILAC_F16> : UnitFloat<LILAC_F16> {};
template <> struct Unit<LILAC_BF16> : UnitFloat<LILAC_BF16> {};

/* ------------------------------------------------------------------ */
/* The product kernel */

struct MV {
    const uint8_t *w; /* matrix (expert 0) */
    size_t row_bytes, expert_stride;
    const int32_t *idx; /* expert of each slot, or NULL */
    const float *x;
    const float *x2; /* when set, the input is silu(x) * x2 (SwiGLU), x2 laid out as x */
    float *y;
    long long rows, cols;
    long long x_tok, x_slot; /* x strides in floats between tokens / slots (0: shared) */
    long long y_tok, y_slot;
    long long row_tiles, items; /* items = slots x row tiles */
    int n_tok, lpr_log2, ut, n_ct;
    int acc; /* y += product (a residual add) instead of y = product */
    /* rlog set (lilac_cuda_matvec_experts_routed): the slots' experts routed by each block from the router's
     * logits at rlog (dev_route: r.E, r.k, r.norm, r.up_offset, the gate's logit at rlog[r.E] where
     * r.shared_row), not read from idx; block 0 writes them to r.idx and r.w for the kernels after */
    const float *rlog;
    lilac_cuda_route_args r;
    /* one token, a block an item (mv_stage_enabled): where in the dynamic shared memory the block's rows are
     * staged (mv_stage); 0: read from global memory as they are used */
    int stage_off;
    int xvec; /* load_x's vec: x, x2 and their strides 16-byte aligned (mv_xvec) */
};

/* x[t][u0 * VPU ..) of nt tokens (the rest zero) into shared memory, value
 * i of unit u at u * (VPU + 4) + i times 2^(64 - xshift(i)) (the 16-byte
 * pad puts adjacent lanes' float4 reads in different banks), and the sums
 * of x over each run of 16 values. A thread a run. */
/* load_x's vectorized form, part i of its 4 T nruns (four lanes a run of 16 values, a float4 each, so that a
 * warp's loads are 512 contiguous bytes, one instruction where there were four: sixteen scalar loads a run, each
 * lane 64 bytes from the next, made every load instruction a wavefront a cache line): xv_at places the part
 * (its token, run, unit, run in the unit, quarter and x offset, computed once), xv_get loads its four values (and
 * x2's), xv_put stores them as load_x does, the run's sum passed from lane to lane in the scalar form's order
 * (value 0 to 15): the same bits. Every lane of a warp takes part (the shuffles). */
struct XvPart {
    int t, run, u, rr, q;
    long long off;
};
template <class UT> __device__ __forceinline__ XvPart xv_at(long long x_tok, int u0, int nruns, int i)
{
    constexpr int VPU = UT::VPU, NR = VPU / 16;
    XvPart P;
    const int ri = i >> 2;
    P.t = ri / nruns, P.run = ri - P.t * nruns, P.u = P.run / NR, P.rr = P.run - P.u * NR, P.q = i & 3;
    P.off = (long long)u0 * VPU + UT::vcol(P.u * VPU + 16 * P.rr) + P.t * x_tok + 4 * P.q;
    return P;
}
__device__ __forceinline__ void xv_get(const float *x, const float *x2, int nt, const XvPart &P, float4 &a,
                                       float4 &b)
{
    a = b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (P.t < nt) {
        a = *reinterpret_cast<const float4 *>(x + P.off);
        if (x2)
            b = *reinterpret_cast<const float4 *>(x2 + P.off);
    }
}
template <class UT>
__device__ __forceinline__ void xv_put(bool glu_in, int nt, const XvPart &P, float4 a, float4 b, float *xs, int XS,
                                       float *ss, int SS)
{
    constexpr int US = UT::VPU + 4;
    const int lane = threadIdx.x & 31;
    float v[4] = {a.x, a.y, a.z, a.w};
    if (glu_in && P.t < nt)
        v[0] = glu(v[0], b.x), v[1] = glu(v[1], b.y), v[2] = glu(v[2], b.z), v[3] = glu(v[3], b.w);
    const float s = quad_run_sum(v, P.q, lane); /* the scalar form's order */
#pragma unroll
    for (int k = 0; k < 4; k++)
        v[k] *= __int_as_float((127 + 64 - UT::xshift(16 * P.rr + 4 * P.q + k)) << 23);
    *reinterpret_cast<float4 *>(xs + P.t * XS + P.u * US + 16 * P.rr + 4 * P.q) = make_float4(v[0], v[1], v[2], v[3]);
    if (UT::NRUN && P.q == 3)
        ss[P.t * SS + P.run] = s;
}

template <class UT, int T, int NTH = NTHREADS>
__device__ void load_x(const float *x, const float *x2, long long x_tok, int nt, int u0, int u1, float *xs, int XS,
                       float *ss, int SS, bool vec = false)
{
    constexpr int VPU = UT::VPU, US = VPU + 4, NR = VPU / 16;
    const int nruns = (u1 - u0) * NR;
    /* vec (the caller's: x, x2 and their token strides 16-byte aligned; LILAC_CUDA_X_VEC=0 off): xv_at, xv_get, xv_put */
    if (vec && (T * nruns) % 8 == 0) { /* whole warps a run group (the shuffles) */
        for (int i = threadIdx.x; i < 4 * T * nruns; i += NTH) {
            const XvPart P = xv_at<UT>(x_tok, u0, nruns, i);
            float4 a, b;
            xv_get(x, x2, nt, P, a, b);
            xv_put<UT>(x2 != nullptr, nt, P, a, b, xs, XS, ss, SS);
        }
        __syncthreads();
        return;
    }
    for (int i = threadIdx.x; i < T * nruns; i += NTH) {
        const int t = i / nruns, run = i - t * nruns, u = run / NR, rr = run - u * NR;
        const long long off = (long long)u0 * VPU + UT::vcol(u * VPU + 16 * rr) + t * x_tok;
        const float *src = x + off, *src2 = x2 ? x2 + off : nullptr; /* a run's 16 columns are adjacent */
        float4 *dst = reinterpret_cast<float4 *>(xs + t * XS + u * US + 16 * rr);
        float v[16], s = 0.f;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const float xv = t >= nt ? 0.f : src[k];
            v[k] = t >= nt ? 0.f : src2 ? glu(xv, src2[k]) : xv;
            s += v[k];
            v[k] *= __int_as_float((127 + 64 - UT::xshift(16 * rr + k)) << 23);
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            dst[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
        if (UT::NRUN)
            ss[t * SS + run] = s;
    }
    __syncthreads();
}

template <int TYPE, bool A16, int R, bool SH = false>
__device__ __forceinline__ void load_rows(const uint8_t *const (&rowp)[R], const bool (&ok)[R], int u,
                                          typename Unit<TYPE>::Pay (&p)[R])
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (ok[r])
            Unit<TYPE>::template load<A16, SH>(rowp[r], u, p[r]);
        else
            p[r] = {};
    }
}

/* A lane's units u, u + lpr, ... < u1 of its R rows into tot (x of units u0.. in xs/ss), the first one's loads
 * already in a, each next unit's loads issued before the current one is computed: two steps an iteration, so
 * that a and b swap roles without copies. k_mv and k_mv_grouped share it (the same sums in the same
 * order). */
template <int TYPE, bool A16, int R, int T, bool SH = false>
__device__ __forceinline__ void mv_units(const uint8_t *const (&rowp)[R], const bool (&ok)[R], int u, int u0, int u1,
                                         int lpr, typename Unit<TYPE>::Pay (&a)[R], typename Unit<TYPE>::Pay (&b)[R],
                                         const float *xs, int XS, const float *ss, int SS, int nt, float (&tot)[R][T])
{
    using UT = Unit<TYPE>;
    constexpr int US = UT::VPU + 4, NRUN = UT::NRUN;
    if constexpr (SH) { /* staged rows: shared memory's latency needs no load a unit ahead (nor its registers) */
        for (; u < u1; u += lpr) {
            load_rows<TYPE, A16, R, true>(rowp, ok, u, a);
            UT::template dot<R, T>(a, xs + (u - u0) * US, XS, ss + (u - u0) * NRUN, SS, u, nt, tot);
        }
    } else {
        while (u < u1) {
            int un = u + lpr;
            if (un < u1)
                load_rows<TYPE, A16, R>(rowp, ok, un, b);
            UT::template dot<R, T>(a, xs + (u - u0) * US, XS, ss + (u - u0) * NRUN, SS, u, nt, tot);
            u = un;
            if (u >= u1)
                break;
            un = u + lpr;
            if (un < u1)
                load_rows<TYPE, A16, R>(rowp, ok, un, a);
            UT::template dot<R, T>(b, xs + (u - u0) * US, XS, ss + (u - u0) * NRUN, SS, u, nt, tot);
            u = un;
        }
    }
}

/* The sum of v over a row's lpr lanes (a power of two), in every one of them. */
__device__ __forceinline__ float lanes_sum(float v, int lpr)
{
    for (int o = lpr >> 1; o; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The launch shape of k_mv, from timings on an H200 (test_cuda_kernels' bench lines). Rows a lane: cfg_rows_t. The
 * blocks a multiprocessor must hold, i.e. a register cap: at one token the kernel waits on memory and wants
 * warps more than registers (the grouped and conv kernels: 3 blocks for the byte-aligned Q8_0/Q4_0, 2 for the
 * rest; k_mv: cfg_mv_min_blocks); up to 4 tokens 2
 * blocks (the 5- and 6-bit types spill a little and are still faster so); at 8 tokens no cap. The most
 * tokens a pass: 8 for Q5_K and Q6_K, whose decoding is dearer than the shared x loads, 4 for the rest,
 * where the accumulators of 8 cost more occupancy than the loads save. */
constexpr int cfg_rows = 2;
/* Rows a lane group takes at T tokens a pass: one at one token (twice the warps on a product's rows, half the
 * dependent work a lane: tg128 315.5 and 317.2 against 311.6 and 306.4 with two, H200, alternated in one call,
 * 2026-11-30), cfg_rows with more (the x loads of a pass shared by more rows). */
__host__ __device__ constexpr int cfg_rows_t(int T) { return T == 1 ? 1 : cfg_rows; }
constexpr int cfg_min_blocks(int type, int T)
{
    return T == 1 ? (type == LILAC_Q8_0 || type == LILAC_Q4_0 ? 3 : 2) : T <= 4 ? 2 : 1;
}
/* k_mv's: at one token (one row a lane group) 3 blocks a multiprocessor for every type but Q5_K and Q6_K (Q4_K
 * then takes 75-80 registers, 0-4 bytes of spill; Q5_K and Q6_K would spill 32-60 bytes): 24 warps a
 * multiprocessor, and a grid cap of 3 blocks a multiprocessor, under which (with cfg_lane_units' 4) the qkv+z
 * product's 384 row tiles take one a block. tg128 (H200, one call, 2026-11-30): 335.9 and 334.8 against 320.4
 * and 319.9 with 2 blocks and one unit a lane; 3 blocks alone 309.0, 4 units a lane alone 309.8: each pays
 * only with the other. */
constexpr int cfg_mv_min_blocks(int type, int T)
{
    return T == 1 ? (type == LILAC_Q5_K || type == LILAC_Q6_K ? 2 : 3) : cfg_min_blocks(type, T);
}
constexpr int cfg_max_tokens(int type) { return type == LILAC_Q5_K || type == LILAC_Q6_K ? 8 : 4; }
/* The fewest units a lane keeps of a row when mv_shape widens the lanes a row to fill the device: at one token 4
 * (fewer items a block, each a whole memory round trip, where within an item a lane's next unit is loaded while
 * the current one is computed: the expert gate+up was 1,024 items of 8 rows over 264 blocks, ~4 a block one
 * after another; now 256 of 32 rows). With 3 blocks a multiprocessor (cfg_mv_min_blocks), tg128 as above; 2 units
 * 309.6, 8 units 315.7 (against 320.4 for one). More tokens: 1, not measured otherwise. */
constexpr int cfg_lane_units(int T) { return T == 1 ? 4 : 1; }

/* y[t][r] = W[r] . x[t]; with idx, slot i (blockIdx over items) does expert
 * idx[i] into y + i * y_slot.
 *
 * Work: a block of NWARPS warps takes items (slot, tile of rows) in one
 * contiguous run (persistent: the grid is what fits on the device at
 * once), so the x of a slot is loaded into shared memory once per block
 * when the row fits one column tile (with more tokens than a pass takes,
 * once per pass). Within a warp, lpr lanes share a row (a power of two,
 * 4 to 32, about an eighth of the row's units: launch_fast) and 32 / lpr
 * groups of lanes take R rows each. A lane walks its units lpr apart, the
 * next unit's loads issued before the current one is computed.
 *
 * Accuracy: every product is exact and each FFMA rounds once, in float32;
 * the offsets are subtracted per run of 16 or 32 values. Errors are a few
 * float32 roundings of sums of |terms|; results differ from the CPU's
 * float32 dot only in summation order.
 *
 * Measured and dropped (H200, tg128 of the 35B-A3B Q4_K_M file, alternated
 * against this code on one machine, 2026-11-30): a lane's last unit of an
 * item prefetching its first unit of the block's next item, with the down
 * product reading the expert indices before its wait (the products over
 * idx waiting before they let the next kernel start): 274 against 284 tok/s,
 * 278 with the prefetch off (registers: the 5- and 6-bit bodies spilled);
 * lanes a row capped at 8 or 16: 249 and 269; tiles aimed at 1 or 4 a
 * resident block instead of 2: no change. The next layer's input RMSNorm
 * applied as x is loaded, from the sum kernel's parts (LILAC_CUDA_NORM_FOLD):
 * 296.8 against 319.2/320.3, every block's serial norm before its x loads
 * costing more than the sum kernel's tail it removed. */
template <int TYPE, bool A16, int R, int T, bool SH = false>
__device__ __forceinline__ void mv_block(const MV &p, const int32_t *idx, int bx, int nbx, int by, int nby,
                                         const uint8_t *stage = nullptr, uint32_t bar = 0)
{
    using UT = Unit<TYPE>;
    constexpr int VPU = UT::VPU, NRUN = UT::NRUN, US = VPU + 4;
    extern __shared__ float4 smem4[];
    float *const xs = reinterpret_cast<float *>(smem4);
    const int XS = p.ut * US;
    float *const ss = xs + T * XS;
    const int SS = p.ut * NRUN;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int lpr = 1 << p.lpr_log2, sub = lane & (lpr - 1), grp = lane >> p.lpr_log2;
    const int rpw = R << (5 - p.lpr_log2);
    const long long rpt = mv_tile_rows(R, p.lpr_log2);
    const int U = (int)(p.cols / VPU);
    const int ntc = (p.n_tok + T - 1) / T;

    const long long it0 = p.items * bx / nbx, it1 = p.items * (bx + 1) / nbx;
    long long loaded = -1;
    /* by of nby: a group of token chunks (launch_fast splits the tokens when the rows alone give too few blocks) */
    const int tc0 = (int)((long long)ntc * by / nby), tc1 = (int)((long long)ntc * (by + 1) / nby);
    for (int tc = tc0; tc < tc1; tc++) { /* token chunks outermost: x stays put while the block's rows go by */
        const int t0 = tc * T, nt = min(T, p.n_tok - t0);
        for (long long it = it0; it < it1; it++) {
            const long long slot = it / p.row_tiles, rt = it - slot * p.row_tiles;
            const uint8_t *W = p.w + (idx ? (size_t)idx[slot] * p.expert_stride : 0); /* global or shared */
            const long long row0 = rt * rpt + warp * rpw + grp * R;
            const uint8_t *rowp[R];
            bool ok[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                ok[r] = row0 + r < p.rows;
                rowp[r] = SH ? stage + (size_t)(row0 + r - rt * rpt) * p.row_bytes /* the item's rows, staged */
                             : W + (size_t)(row0 + r) * p.row_bytes;
            }
            const float *xb = p.x + slot * p.x_slot, *x2b = p.x2 ? p.x2 + slot * p.x_slot : nullptr;
            float *yb = p.y + slot * p.y_slot;
            float tot[R][T];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < T; t++)
                    tot[r][t] = 0.f;
            for (int ct = 0; ct < p.n_ct; ct++) {
                const int u0 = ct * p.ut, u1 = min(U, u0 + p.ut);
                const long long key = ((p.x_slot ? slot : 0) * ntc + tc) * p.n_ct + ct;
                /* the first weights in flight before x is loaded (and, launched
                 * dependent, before the kernel that writes x has finished) */
                typename UT::Pay a[R], b[R];
                int u = u0 + sub;
                if (!SH && u < u1)
                    load_rows<TYPE, A16, R>(rowp, ok, u, a);
                if (key != loaded) { /* the same for the whole block */
                    if (loaded < 0) {
                        griddep_wait();
                        TRACE_WAITED(LILAC_TK_MV); /* the table takes a block's first wait */
                    }
                    __syncthreads();
                    load_x<UT, T>(xb + t0 * p.x_tok, x2b ? x2b + t0 * p.x_tok : nullptr, p.x_tok, nt, u0, u1,
                                         xs, XS, ss, SS, p.xvec);
                    loaded = key;
                }
                if (SH) { /* the staged rows (one item a block: the copy's one phase) */
                    dev_stage_wait(bar, 0);
                    TRACE_MARK2(LILAC_TK_MV);
                }
                mv_units<TYPE, A16, R, T, SH>(rowp, ok, u, u0, u1, lpr, a, b, xs, XS, ss, SS, nt, tot);
            }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < T; t++) {
                    const float v = lanes_sum(tot[r][t], lpr);
                    if (sub == 0 && ok[r] && t < nt) {
                        float *yp = yb + (t0 + t) * p.y_tok + row0 + r;
                        *yp = p.acc ? *yp + v : v;
                    }
                }
        }
    }
}

/* k_mv's routing (p.rlog set) into sidx (shared, 2k slots where r.up_offset), by the whole block (dev_route),
 * block 0 writing the choice out. Not inlined: the product's registers stay its own. */
static __device__ __noinline__ void mv_route(const float *rlog, const lilac_cuda_route_args r, int32_t *sidx)
{
    __shared__ float sw[33];
    dev_route(rlog, r.E, r.k, r.norm, sidx, sw, r.up_offset, nullptr, nullptr, 0, r.shared_row ? rlog + r.E : nullptr);
    if (threadIdx.x < 32 && blockIdx.x == 0 && blockIdx.y == 0) { /* warp 0 wrote sidx and sw */
        __syncwarp();
        const int lane = threadIdx.x, ns = r.up_offset > 0 ? 2 * r.k : r.k;
        for (int i = lane; i < ns; i += 32)
            r.idx[i] = sidx[i];
        for (int i = lane; i < r.k + (r.shared_row ? 1 : 0); i += 32)
            r.w[i] = sw[i];
    }
}

/* mv_stage_enabled: the block's item (one a block) copied into shared memory at st in one bulk copy, issued
 * as soon as the rows are known: a dense product's before its wait (while the kernel before ends), a routed
 * one's after the routing. Its rows are a contiguous run of the matrix (or of the slot's expert). Measured and
 * removed (session 28): the copy split in NWARPS, a warp's rows on a barrier of its own (and the down+sum
 * kernel's slots so), each warp's dots starting when its own rows land (`LILAC_CUDA_STG_SPLIT`): tg128
 * 373.6-375.6 against 375.6-378.4 (H200, alternated in one call): a warp's dots are a chain of dependent
 * instructions as long alone as beside the others. Code at fdb974d. */
template <int R> static __device__ void mv_stage(const MV &p, const int32_t *idx, uint8_t *st, uint32_t bar)
{
    if (threadIdx.x == 0) {
        dev_stage_init(bar);
        const long long item = blockIdx.x;
        if (item < p.items) {
            const long long slot = item / p.row_tiles, rt = item - slot * p.row_tiles;
            const long long rpt = mv_tile_rows(R, p.lpr_log2), r0 = rt * rpt;
            const long long nr = p.rows - r0 < rpt ? p.rows - r0 : rpt;
            const uint8_t *src = p.w + (idx ? (size_t)idx[slot] * p.expert_stride : 0) + (size_t)r0 * p.row_bytes;
            const uint32_t bytes = (uint32_t)(nr * (long long)p.row_bytes);
            dev_stage_expect(bar, bytes);
            dev_stage_copy(st, src, bytes, bar);
        } else {
            dev_stage_expect(bar, 0);
        }
    }
    __syncthreads(); /* the barrier set up before any thread waits on it */
}

/* The product as a kernel of its own: mv_block over the grid, launched dependent (launch_dependent). */
template <int TYPE, bool A16, int R, int T, bool STG = false>
__global__ void __launch_bounds__(NTHREADS, cfg_mv_min_blocks(TYPE, T)) k_mv(const MV p)
{
    TRACE_START(LILAC_TK_MV);
    griddep_launch_dependents();
    const int32_t *idx = p.idx;
    if (p.idx || p.rlog) { /* the expert indices (or the router's logits) come from the kernel before */
        griddep_wait();
        TRACE_WAITED(LILAC_TK_MV);
    }
    if constexpr (T == 1) { /* (routed products are one token's: the others carry no routing scratch) */
        if (p.rlog) {
            __shared__ int32_t sidx[64];
            mv_route(p.rlog, p.r, sidx);
            __syncthreads();
            TRACE_MARK1(LILAC_TK_MV);
            idx = sidx;
        }
        if constexpr (STG) { /* (an instance of its own: the registers of the plain one stay as they were) */
            __shared__ uint64_t bar;
            extern __shared__ float4 smem4[];
            uint8_t *const st = reinterpret_cast<uint8_t *>(smem4) + p.stage_off;
            mv_stage<R>(p, idx, st, dev_smem_addr(&bar));
            mv_block<TYPE, A16, R, T, true>(p, idx, blockIdx.x, gridDim.x, blockIdx.y, gridDim.y, st,
                                            dev_smem_addr(&bar));
            TRACE_END(LILAC_TK_MV);
            return;
        }
    }
    mv_block<TYPE, A16, R, T>(p, idx, blockIdx.x, gridDim.x, blockIdx.y, gridDim.y);
    TRACE_END(LILAC_TK_MV);
}

/* k_mv_pipe (LILAC_CUDA_MV_PIPE=0 off; session 20, on since session 21): a dense one-token product whose blocks
 * each take several items (the LM head: 248k rows over the grid that fits) streams them through shared memory
 * instead of loading units from global memory lane by lane: two buffers of an item's rows, each item one bulk
 * copy by thread 0 issued two items ahead, so the copies (a TMA engine's, a few instructions) keep the DRAM busy
 * while the lanes compute from shared memory (mv_units' staged walk: the same dots, the same bits as k_mv's).
 * The unstaged kernel's big products ran at 2.0-2.9 TB/s (test_cuda_kernels' bench lines); Q6_K's 210-byte
 * blocks load unaligned (three 16-byte loads and shifts for 32 bytes). Items are the block's contiguous run, as
 * mv_block's; barrier k's phase j is the block's item 2 j + k. */
template <int TYPE, bool A16>
__global__ void __launch_bounds__(NTHREADS, 1) k_mv_pipe(const MV p)
{
    using UT = Unit<TYPE>;
    constexpr int R = cfg_rows_t(1), T = 1, VPU = UT::VPU, NRUN = UT::NRUN, US = VPU + 4;
    TRACE_START(LILAC_TK_MV);
    griddep_launch_dependents();
    __shared__ uint64_t bars[2];
    extern __shared__ float4 smem4[];
    float *const xs = reinterpret_cast<float *>(smem4);
    const int XS = p.ut * US;
    float *const ss = xs + T * XS;
    const int SS = p.ut * NRUN;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int lpr = 1 << p.lpr_log2, sub = lane & (lpr - 1), grp = lane >> p.lpr_log2;
    const int rpw = R << (5 - p.lpr_log2);
    const long long rpt = mv_tile_rows(R, p.lpr_log2);
    const size_t buf = ((size_t)rpt * p.row_bytes + 127) & ~(size_t)127; /* a buffer's bytes (launch_pipe's) */
    uint8_t *const st0 = reinterpret_cast<uint8_t *>(smem4) + p.stage_off;
    const int U = (int)(p.cols / VPU);
    const long long it0 = p.items * blockIdx.x / gridDim.x, it1 = p.items * (blockIdx.x + 1) / gridDim.x;
    const uint32_t bar0 = dev_smem_addr(&bars[0]), bar1 = dev_smem_addr(&bars[1]);
    auto issue = [&](long long it) { /* thread 0: item it's rows into buffer (it - it0) & 1 */
        const int k = (int)((it - it0) & 1);
        const long long r0 = it * rpt, nr = p.rows - r0 < rpt ? p.rows - r0 : rpt;
        const uint32_t bytes = (uint32_t)(nr * (long long)p.row_bytes), bar = k ? bar1 : bar0;
        dev_stage_expect(bar, bytes);
        dev_stage_copy(st0 + k * buf, p.w + (size_t)r0 * p.row_bytes, bytes, bar);
    };
    if (threadIdx.x == 0) { /* the weights do not depend on the kernel before: copied before the wait */
        dev_stage_init(bar0);
        dev_stage_init(bar1);
        if (it0 < it1)
            issue(it0);
        if (it0 + 1 < it1)
            issue(it0 + 1);
    }
    griddep_wait(); /* x comes from the kernel before */
    TRACE_WAITED(LILAC_TK_MV);
    load_x<UT, T>(p.x, p.x2, p.x_tok, 1, 0, U, xs, XS, ss, SS, p.xvec); /* ends with a barrier: also the mbarriers' */
    for (long long it = it0; it < it1; it++) {
        const int k = (int)((it - it0) & 1);
        const long long row0 = it * rpt + warp * rpw + grp * R;
        const uint8_t *rowp[R];
        bool ok[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            ok[r] = row0 + r < p.rows;
            rowp[r] = st0 + k * buf + (size_t)(row0 + r - it * rpt) * p.row_bytes;
        }
        float tot[R][T];
#pragma unroll
        for (int r = 0; r < R; r++)
            tot[r][0] = 0.f;
        dev_stage_wait(k ? bar1 : bar0, (uint32_t)(((it - it0) >> 1) & 1));
        typename UT::Pay a[R], b[R];
        mv_units<TYPE, A16, R, T, true>(rowp, ok, sub, 0, U, lpr, a, b, xs, XS, ss, SS, 1, tot);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float v = lanes_sum(tot[r][0], lpr);
            if (sub == 0 && ok[r]) {
                float *yp = p.y + row0 + r;
                *yp = p.acc ? *yp + v : v;
            }
        }
        __syncthreads(); /* every lane is done with buffer k */
        if (threadIdx.x == 0 && it + 2 < it1)
            issue(it + 2);
    }
    TRACE_END(LILAC_TK_MV);
}

/* k_mv_ring (LILAC_CUDA_MV_RING=c, session 30; launch_ring's configuration 1 the default for Q6_K, 0 k_mv_pipe):
 * k_mv_pipe's product through rings of small slots instead of two tile-sized buffers. The LM head (Q6_K
 * 248,320 x 2048, 417 MB) took 162 us through k_mv_pipe (the kernels test's bench line, H200), 2.6 TB/s: 8 warps
 * over two 105 KB buffers hid little of the lanes' latency. Here each warp has a ring of NSW slots of its own, a
 * slot its rows (R rows a lane group), one bulk copy; the warp's k-th group of rows is in slot k % NSW, and once
 * the warp has read it the warp refills it with its group k + NSW. Each row's units, lanes and sums are k_mv's,
 * in its order (mv_units' staged walk or, for Q6_K at 4 lanes a row, q6_units): the same bits.
 * Measured (bench lm_head, H200, us): k_mv_pipe 162-163; 1 row, 8 warps, 2 slots each 126-128; 16 warps of one
 * slot 131-133; 8 warps of one slot 150; without q6_units 156-158; 2 rows a lane group 193-223 (16-row slots,
 * 8 at most); rows in 2 or 4 parts of a bulk copy a row each (2 or 4 rows a lane group in 16 slots) 181-579.
 * tg128 389.4/390.2 against 382.4/384.5 (ring 0), alternated in one call. Code of the parts at 13436be. */
template <int R_, int NWP_, int NSW_> struct RingCfg {
    static constexpr int R = R_, NWP = NWP_, NSW = NSW_;
};
/* Q6_K at 4 lanes a row: lane sub's i-th unit is sub + 4 i, in block i, which starts at 210 i = 2 i mod 16 in a
 * 16-aligned row: its loads' alignment known when compiled (ldw_sh) over the units I .. 7 of a run of 8 blocks,
 * all unrolled (runtime selects and shifts instead: 156-158 us against 126-128). 8 lanes a row (2 rows a lane
 * group in the 8-row slots, halving the x loads; LILAC_CUDA_HEAD_LPR8, session 30-31) took 128.8 us against
 * 125.3 alone and 158-163 against 152-153 in the step: removed (code at d389715). */
template <int R, int I = 0>
__device__ __forceinline__ void q6_units(const uint8_t *const (&rowp)[R], int u, const float *xs, int XS,
                                         const float *ss, int SS, float (&tot)[R][1])
{
    if constexpr (I < 8) {
        using UT = Unit<LILAC_Q6_K>;
        constexpr int US = UT::VPU + 4;
        typename UT::Pay a[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            UT::template load_sh<(2 * I) & 15>(rowp[r], u, a[r]);
        UT::template dot<R, 1>(a, xs + u * US, XS, ss + u * UT::NRUN, SS, u, 1, tot);
        q6_units<R, I + 1>(rowp, u + 4, xs, XS, ss, SS, tot);
    }
}

template <int TYPE, bool A16, class C>
__global__ void __launch_bounds__(C::NWP * 32, 1) k_mv_ring(const MV p)
{
    using UT = Unit<TYPE>;
    constexpr int R = C::R, NWP = C::NWP, NSW = C::NSW, NTH = NWP * 32;
    constexpr int VPU = UT::VPU, NRUN = UT::NRUN, US = VPU + 4;
    TRACE_START(LILAC_TK_MV);
    griddep_launch_dependents();
    __shared__ uint64_t bars[NWP * NSW];
    extern __shared__ float4 smem4[];
    float *const xs = reinterpret_cast<float *>(smem4);
    const int XS = p.ut * US;
    float *const ss = xs + XS;
    const int SS = p.ut * NRUN;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int lpr = 1 << p.lpr_log2, sub = lane & (lpr - 1), grp = lane >> p.lpr_log2;
    const int U = (int)(p.cols / VPU);
    const long long sr = (long long)R << (5 - p.lpr_log2);                  /* a warp's rows */
    const size_t sbytes = ((size_t)sr * p.row_bytes + 127) & ~(size_t)127; /* launch_ring's */
    uint8_t *const st0 = reinterpret_cast<uint8_t *>(smem4) + p.stage_off + (size_t)warp * NSW * sbytes;
    uint64_t *const wb = bars + warp * NSW;
    const long long groups = (p.rows + sr - 1) / sr;
    const long long g0 = groups * blockIdx.x / gridDim.x, ng = groups * (blockIdx.x + 1) / gridDim.x - g0;
    const long long nw = ng > warp ? (ng - warp + NWP - 1) / NWP : 0; /* this warp's: warp, warp + NWP, ... */
    auto issue = [&](long long k) { /* lane 0: the warp's group k into its slot k % NSW */
        const int s = (int)(k % NSW);
        const long long r0 = (g0 + warp + k * NWP) * sr, nr = p.rows - r0 < sr ? p.rows - r0 : sr;
        const uint32_t bar = dev_smem_addr(&wb[s]), bytes = (uint32_t)(nr * (long long)p.row_bytes);
        dev_stage_expect(bar, bytes);
        dev_stage_copy(st0 + s * sbytes, p.w + (size_t)r0 * p.row_bytes, bytes, bar);
    };
    if (threadIdx.x == 0)
        for (int i = 0; i < NWP * NSW; i++)
            dev_stage_init(dev_smem_addr(&bars[i]));
    __syncthreads(); /* the barriers set up before any warp copies or waits */
    if (lane == 0) /* the weights do not depend on the kernel before */
        for (long long k = 0; k < NSW && k < nw; k++)
            issue(k);
    griddep_wait(); /* x comes from the kernel before */
    TRACE_WAITED(LILAC_TK_MV);
    load_x<UT, 1, NTH>(p.x, p.x2, p.x_tok, 1, 0, U, xs, XS, ss, SS, p.xvec); /* ends with a barrier */
    /* Q6_K's unrolled walk: 4 lanes a row, whole runs of 8 blocks, rows 16-aligned in shared memory */
    const bool q6 = TYPE == LILAC_Q6_K && lpr == 4 && U % 32 == 0 && (dev_smem_addr(st0) & 15) == 0;
    for (long long k = 0; k < nw; k++) {
        const int s = (int)(k % NSW);
        const long long row0 = (g0 + warp + k * NWP) * sr + grp * R;
        const uint8_t *rowp[R];
        bool ok[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            ok[r] = row0 + r < p.rows;
            rowp[r] = st0 + s * sbytes + (size_t)(grp * R + r) * p.row_bytes;
        }
        float tot[R][1];
#pragma unroll
        for (int r = 0; r < R; r++)
            tot[r][0] = 0.f;
        dev_stage_wait(dev_smem_addr(&wb[s]), (uint32_t)((k / NSW) & 1));
        if (q6) {
            for (int u = sub; u < U; u += 32) /* 8 blocks (4 lanes x 8 units) a pass */
                q6_units<R>(rowp, u, xs, XS, ss, SS, tot);
        } else {
            typename UT::Pay a[R], b[R];
            mv_units<TYPE, A16, R, 1, true>(rowp, ok, sub, 0, U, lpr, a, b, xs, XS, ss, SS, 1, tot);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float v = lanes_sum(tot[r][0], lpr);
            if (sub == 0 && ok[r]) {
                float *yp = p.y + row0 + r;
                *yp = p.acc ? *yp + v : v;
            }
        }
        __syncwarp(); /* every lane of the warp is done with slot s */
        if (lane == 0 && k + NSW < nw)
            issue(k + NSW);
    }
    TRACE_END(LILAC_TK_MV);
}

/* The decode step's routed down product, the experts' sum and the next layer's input norm in one kernel
 * (lilac_cuda_moe_down_sum; the default since session 13, LILAC_CUDA_DOWN_SUM=0 off): instead of
 * k_mv over k slots into ex and then k_moe_sum_norm_grid, a block takes DS_ROWS rows of every slot, warp s
 * slot s (k <= DS_MAXK); each row's k dots (k_mv's arithmetic: Unit dot, DS_LPR lanes a row) meet in shared
 * memory, and DS_ROWS threads add them into x as the sum kernel does (the experts by slot, the shared one,
 * then x: its bits); the squares' parts by block, the last block adds them (a block reduction, the same
 * order every run) and writes xn. One launch and one L2 round trip of ex fewer a layer. */
constexpr int DS_MAXK = NWARPS; /* slots: a warp each */
constexpr int DS_LPR = 4;       /* lanes a row (a power of two) */
/* Rows a block at R rows a lane group: 1 is k_mv's (cfg_rows_t(1)); 2 (the default) takes half the blocks, each
 * loading the k inputs once for twice the rows. Both give k_mv's bits since the folds round explicitly (kq_fold;
 * before that, R 2 differed from k_mv in the last bits of 1,063 of 2,048 Q4_K rows). */
__host__ __device__ constexpr int ds_rows(int R) { return 32 / DS_LPR * R; }
static_assert(LILAC_CUDA_DOWN_SUM_MAXB <= NTHREADS, "the last block reduces a part a thread");

struct DS {
    const uint8_t *w; /* expert 0 */
    size_t row_bytes, expert_stride;
    const int32_t *idx;  /* the k slots' experts */
    const float *wt;     /* their weights, then (sh) the shared expert's gate */
    const float *g, *u;  /* slot s's input silu(g) u at g + s x_slot, u + s x_slot */
    long long x_slot;
    const float *sh;     /* the shared expert's output, or NULL */
    float *x;            /* the residual stream: x += the sum */
    const float *norm_w; /* the next norm's weights (NULL: no norm) */
    float *xn, *part;    /* the normed x; the blocks' sums of squares */
    unsigned *count;     /* dev_last_block's (zero between launches) */
    int rows, cols, k;
    float eps;
    /* batched (blockIdx.y a row of its own token, lilac_cuda_moe_down_sum_batch): the row's idx, wt, g and u
     * these many elements on; x, sh and xn W->rows, part LILAC_CUDA_PART_MAXB, count 1. 0 at one token. */
    long long r_idx, r_wt, r_gu;
    int xvec; /* load_x's vec (mv_xvec) */
    int trigger; /* where a block lets the next kernel launch (ds_trigger): 0 its start, 1 its inputs, 2 its dots */
};

/* k_moe_down_sum's end, from the rows' dots of its slots in tot: the dots meet in shared memory (vs), the weighted
 * sum into x, and the last block's norm into xn. */
template <int R, int DS_ROWS>
__device__ __forceinline__ void ds_tail(const DS &d, const float (&tot)[R][1], bool has, int sub, int grp, int warp,
                                        int row0, float *vs, const float *wt, const float *sh, float *x, float *xn,
                                        float *part, unsigned *count)
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float v = lanes_sum(tot[r][0], DS_LPR); /* every lane: whole-warp shuffles */
        if (has && sub == 0)
            vs[warp * DS_ROWS + grp * R + r] = v;
    }
    __syncthreads();
    TRACE_MARK2(LILAC_TK_MOE_DOWN_SUM);
    float o = 0.0f;
    const int t = threadIdx.x, e = row0 + t;
    if (t < DS_ROWS && e < d.rows) { /* k_moe_sum_norm_grid's sum, in its order */
        const float xv = __ldcg(x + e), sv = sh ? __ldcg(sh + e) : 0.0f, g = sh ? __ldcg(wt + d.k) : 0.0f;
        for (int i = 0; i < d.k; i++) /* explicit FMAs, as the sum kernel's (kq_fold says why) */
            o = __fmaf_rn(__ldcg(wt + i), vs[i * DS_ROWS + t], o);
        if (sh)
            o = __fmaf_rn(g, sv, o);
        o = __fadd_rn(o, xv);
        x[e] = o;
    }
    if (!d.norm_w) {
        TRACE_END(LILAC_TK_MOE_DOWN_SUM);
        return;
    }
    const float sq = block_sum(t < DS_ROWS && e < d.rows ? __fmul_rn(o, o) : 0.0f);
    if (t == 0)
        part[blockIdx.x] = sq;
    if (dev_last_block(count)) /* the parts and x loaded together */
        dev_scale_store_with(x, d.norm_w, xn, d.rows, [&] {
            const float tt = block_sum(t < (int)gridDim.x ? __ldcg(part + t) : 0.0f); /* a fixed tree: every run */
            return rsqrtf(tt / d.rows + d.eps);
        });
    TRACE_END(LILAC_TK_MOE_DOWN_SUM);
}

/* STG (the default where it fits, LILAC_CUDA_DS_STAGE=0 off; an instance of its own): the block's rows of every slot (DS_ROWS consecutive rows
 * of its expert, one contiguous run) copied into shared memory by one bulk copy each, issued by thread 0
 * right after the indices are read, so that the rows take no load instruction of the lanes (Q6_K's unaligned
 * units were ~22 a lane, each a wavefront a row); the lanes read them from shared memory with the same dots. The
 * host takes it only where every run is 16-byte aligned and whole (ds_stage_ok). */
template <int TYPE, bool A16, int R, bool STG = false>
__global__ void __launch_bounds__(NTHREADS) k_moe_down_sum(const DS d)
{
    using UT = Unit<TYPE>;
    constexpr int US = UT::VPU + 4, NRUN = UT::NRUN, DS_ROWS = ds_rows(R);
    TRACE_START(LILAC_TK_MOE_DOWN_SUM);
    if (d.trigger == 0)
        griddep_launch_dependents();
    extern __shared__ float4 smem4[];
    const int U = d.cols / UT::VPU, XS = U * US, SS = U * NRUN;
    float *const xs = reinterpret_cast<float *>(smem4); /* [DS_MAXK][XS] */
    float *const ss = xs + DS_MAXK * XS;                 /* [DS_MAXK][SS] */
    float *const vs = ss + DS_MAXK * SS;                 /* [DS_MAXK][DS_ROWS]: the rows' dots by slot */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane & (DS_LPR - 1), grp = lane / DS_LPR;
    const int row0 = blockIdx.x * DS_ROWS, rg = row0 + grp * R;
    /* the batched call's row (one launch of the same kernel for every row: the token step's bits) */
    const long long by = blockIdx.y, eo = by * d.rows;
    const int32_t *const idx = d.idx + by * d.r_idx;
    const float *const wt = d.wt + by * d.r_wt, *const g_in = d.g + by * d.r_gu, *const u_in = d.u + by * d.r_gu;
    const float *const sh = d.sh ? d.sh + eo : nullptr;
    float *const x = d.x + eo, *const xn = d.xn ? d.xn + eo : nullptr;
    float *const part = d.part ? d.part + by * LILAC_CUDA_PART_MAXB : nullptr;
    unsigned *const count = d.count ? d.count + by : nullptr;
    griddep_wait(); /* idx, the inputs, x and the shared expert's output come from the kernels before */
    TRACE_WAITED(LILAC_TK_MOE_DOWN_SUM);
    const bool has = warp < d.k;
    const uint8_t *W = d.w + (has ? (size_t)__ldg(idx + warp) * d.expert_stride : 0);
    const uint8_t *rowp[R];
    bool ok[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        ok[r] = has && rg + r < d.rows;
        rowp[r] = W + (size_t)(ok[r] ? rg + r : 0) * d.row_bytes;
    }
    typename UT::Pay a[R], b[R];
    int u = sub;
    if constexpr (STG) {
        __shared__ uint64_t bar;
        uint8_t *const st = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(vs + DS_MAXK * DS_ROWS) + 15) &
                                                        ~uintptr_t(15)); /* ds_launch counts the 16 */
        const uint32_t run = (uint32_t)(DS_ROWS * d.row_bytes), b_ = dev_smem_addr(&bar);
        if (threadIdx.x == 0) { /* mv_stage's pattern: one thread sets the barrier up and issues the copies */
            int e[DS_MAXK];
#pragma unroll
            for (int s = 0; s < DS_MAXK; s++)
                e[s] = s < d.k ? __ldg(idx + s) : 0; /* the indices loaded together */
            dev_stage_init(b_);
            dev_stage_expect(b_, run * (uint32_t)d.k);
#pragma unroll
            for (int s = 0; s < DS_MAXK; s++)
                if (s < d.k)
                    dev_stage_copy(st + s * run, d.w + (size_t)e[s] * d.expert_stride + (size_t)row0 * d.row_bytes,
                                   run, b_);
        }
        load_x<UT, DS_MAXK>(g_in, u_in, d.x_slot, d.k, 0, U, xs, XS, ss, SS, d.xvec); /* its barrier: bar's init */
        TRACE_MARK1(LILAC_TK_MOE_DOWN_SUM);
        if (d.trigger == 1)
            griddep_launch_dependents();
        const uint8_t *srow[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            srow[r] = st + (size_t)warp * run + (size_t)(grp * R + r) * d.row_bytes;
        float tot[R][1];
#pragma unroll
        for (int r = 0; r < R; r++)
            tot[r][0] = 0.f;
        dev_stage_wait(b_, 0);
        if (has)
            mv_units<TYPE, A16, R, 1, true>(srow, ok, u, 0, U, DS_LPR, a, b, xs + warp * XS, XS, ss + warp * SS, SS, 1,
                                            tot);
        if (d.trigger == 2)
            griddep_launch_dependents();
        ds_tail<R, DS_ROWS>(d, tot, has, sub, grp, warp, row0, vs, wt, sh, x, xn, part, count);
        return;
    }
    if (u < U)
        load_rows<TYPE, A16, R>(rowp, ok, u, a); /* in flight while x is loaded */
    load_x<UT, DS_MAXK>(g_in, u_in, d.x_slot, d.k, 0, U, xs, XS, ss, SS, d.xvec); /* slot s as token s; ends with a barrier */
    TRACE_MARK1(LILAC_TK_MOE_DOWN_SUM);
    if (d.trigger == 1)
        griddep_launch_dependents();
    float tot[R][1];
#pragma unroll
    for (int r = 0; r < R; r++)
        tot[r][0] = 0.f;
    if (has)
        mv_units<TYPE, A16, R, 1>(rowp, ok, u, 0, U, DS_LPR, a, b, xs + warp * XS, XS, ss + warp * SS, SS, 1, tot);
    if (d.trigger == 2)
        griddep_launch_dependents();
    ds_tail<R, DS_ROWS>(d, tot, has, sub, grp, warp, row0, vs, wt, sh, x, xn, part, count);
}

/* The scalar fallback, for layouts the fast kernel does not take (float
 * rows not a multiple of 16 values or not 16-byte aligned, odd addresses):
 * a warp a row, values dequantized one by one. */
__global__ void __launch_bounds__(NTHREADS) k_mv_scalar(const MV p, int type)
{
    TRACE_START(LILAC_TK_MV_SCALAR);
    const long long row = (long long)blockIdx.x * NWARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const long long slot = blockIdx.y;
    if (row >= p.rows)
        return; /* not thread 0: warp 0's row is below p.rows in every block */
    const uint8_t *rowp = p.w + (p.idx ? (size_t)p.idx[slot] * p.expert_stride : 0) + (size_t)row * p.row_bytes;
    const float *xb = p.x + slot * p.x_slot, *x2b = p.x2 ? p.x2 + slot * p.x_slot : nullptr;
    for (int t = 0; t < p.n_tok; t++) {
        float acc = 0.f;
        for (long long c = lane; c < p.cols; c += 32) {
            const long long i = t * p.x_tok + c;
            acc = fmaf(dq_value(type, rowp, c), x2b ? glu(xb[i], x2b[i]) : xb[i], acc);
        }
        for (int o = 16; o; o >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) {
            float *yp = p.y + slot * p.y_slot + t * p.y_tok + row;
            *yp = p.acc ? *yp + acc : acc;
        }
    }
    TRACE_END(LILAC_TK_MV_SCALAR);
}

/* Row r_dev[blockIdx.y] of W into out + blockIdx.y * cols: one token's embedding (lilac_cuda_get_row) or a
 * chunk's (lilac_cuda_get_rows), by the same kernel (the same bits). */
__global__ void k_get_rows(const uint8_t *w, size_t row_bytes, long long rows, long long cols, int type,
                           const int32_t *r_dev, float *out)
{
    TRACE_START(LILAC_TK_GET_ROW);
    const long long r = r_dev[blockIdx.y];
    float *o = out + (size_t)blockIdx.y * (size_t)cols;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += step)
        o[c] = r >= 0 && r < rows ? dq_value(type, w + (size_t)r * row_bytes, c) : __int_as_float(0x7fc00000);
    TRACE_END(LILAC_TK_GET_ROW);
}

__global__ void k_fill(float *x, long long n)
{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        x[i] = 0.5f + 0.25f * (float)((i * 7919) % 17) / 17.f;
}

/* ------------------------------------------------------------------ */
/* host side */

thread_local char g_err[512]; /* the first refused call since the last lilac_cuda_check */

void set_err(const char *fmt, ...)
{
    if (g_err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

void put_msg(char *msg, size_t cap, const char *fmt, ...)
{
    if (!msg || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

/* "what: cudaErrorX: text", and the error state cleared. */
int cuda_fail(cudaError_t e, char *msg, size_t cap, const char *what)
{
    put_msg(msg, cap, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError();
    return -1;
}

inline cudaStream_t S(lilac_cuda_stream *s) { return reinterpret_cast<cudaStream_t>(s); }


/* The type's block: values and bytes. */
bool block_of(int type, int *blck, int *bytes)
{
    switch (type) {
    case LILAC_F32: *blck = 1, *bytes = 4; return true;
    case LILAC_F16:
    case LILAC_BF16: *blck = 1, *bytes = 2; return true;
    case LILAC_Q8_0: *blck = 32, *bytes = Q8_0_BYTES; return true;
    case LILAC_Q4_0: *blck = 32, *bytes = Q4_0_BYTES; return true;
    case LILAC_Q4_K: *blck = 256, *bytes = Q4_K_BYTES; return true;
    case LILAC_Q5_K: *blck = 256, *bytes = Q5_K_BYTES; return true;
    case LILAC_Q6_K: *blck = 256, *bytes = Q6_K_BYTES; return true;
    default: return false;
    }
}

int floor_log2(long long v)
{
    int l = 0;
    while ((2LL << l) <= v)
        l++;
    return l;
}

/* Units of x a column tile of a T-token product holds, and the shared memory that takes (x and its run sums). */
template <int TYPE, int T> int mv_tile_units(long long cols)
{
    using UT = Unit<TYPE>;
    const int U = (int)(cols / UT::VPU);
    return U < TILE_VALUES / T / UT::VPU ? U : TILE_VALUES / T / UT::VPU;
}
template <int TYPE, int T> int mv_smem(long long cols)
{
    using UT = Unit<TYPE>;
    return (int)sizeof(float) * T * mv_tile_units<TYPE, T>(cols) * (UT::VPU + 4 + UT::NRUN);
}

/* launch_fast's shape of the product over a grid of cap blocks (lanes a row, column tiles, row tiles, items);
 * the shared memory a block needs for it. lpr_force >= 0: 2^lpr_force lanes a row, whatever the shape
 * (lilac_cuda_matvec_like: a row's dot in the order another product's lanes take). */
template <int TYPE, int T> int mv_shape(MV &p, int slots, long long cap, int lpr_force = -1)
{
    using UT = Unit<TYPE>;
    constexpr int R = cfg_rows_t(T);
    const int U = (int)(p.cols / UT::VPU);
    /* Lanes a row: a power of two, at least 4 (or all the units) so that a
     * warp's loads stay contiguous runs, at most 32, and otherwise such that
     * a lane has about 8 units of a row: the first load of a row waits
     * the whole memory latency, the next ones are prefetched. */
    int lpr = U / 8;
    lpr = lpr < (U < 4 ? U : 4) ? (U < 4 ? U : 4) : lpr > 32 ? 32 : lpr;
    lpr = 1 << floor_log2(lpr);
    p.ut = mv_tile_units<TYPE, T>(p.cols);
    p.n_ct = (U + p.ut - 1) / p.ut;
    /* A small matrix (an expert, a 2048-wide projection) has too few row
     * tiles to keep the device busy at 8 units a lane: then more lanes a row
     * (fewer rows a block, shorter chains of dependent loads), until there
     * are two tiles a resident block or a lane has one unit. */
    auto tiles = [&](int l) {
        const long long rpt = mv_tile_rows(R, floor_log2(l));
        return (p.rows + rpt - 1) / rpt * slots;
    };
    while (lpr_force < 0 && lpr < 32 && 2 * lpr * cfg_lane_units(T) <= U && tiles(lpr) < 2 * cap)
        lpr *= 2;
    if (lpr_force >= 0)
        lpr = 1 << lpr_force;
    p.lpr_log2 = floor_log2(lpr);
    p.row_tiles = tiles(lpr) / slots;
    p.items = p.row_tiles * slots;
    return mv_smem<TYPE, T>(p.cols);
}

/* KERN's dynamic shared memory allowed up to SMEM_MAX, once (a static per kernel: a template argument). */
template <auto KERN> void smem_max_once()
{
    static std::atomic<int> attr_set{0};
    if (!attr_set.load(std::memory_order_relaxed)) {
        cudaFuncSetAttribute(KERN, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_MAX);
        attr_set.store(1, std::memory_order_relaxed);
    }
}

/* The blocks of KERN (k_mv, T tokens a pass) the device holds at once with the shared memory of
 * a product of `cols` columns: launch_shaped's persistent grid, and the cap mv_shape shapes it by. */
template <int TYPE, int T, auto KERN> long long mv_grid_cap(long long cols)
{
    auto kern = KERN;
    const int smem = mv_smem<TYPE, T>(cols); /* the occupancy depends on it */
    smem_max_once<KERN>();
    static std::atomic<int> occ[SMEM_MAX / 1024 + 1]; /* blocks a multiprocessor holds, by KiB of shared memory */
    const int kib = (smem + 1023) / 1024;
    int per_sm = occ[kib].load(std::memory_order_relaxed);
    if (!per_sm) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NTHREADS, (size_t)kib * 1024) !=
                cudaSuccess ||
            per_sm < 1)
            per_sm = 1;
        occ[kib].store(per_sm, std::memory_order_relaxed);
    }
    return (long long)per_sm * dev_sm_count();
}

/* Whether the kernels this device runs were compiled for sm_90 or later (lilac_cuda_code_arch): the device's
 * compute capability is not enough, since a build for an older architecture runs on an H100 from its PTX
 * (JIT), compiled with __CUDA_ARCH__ < 900, where griddep_wait() is a no-op and the bulk copies plain loads. */
static bool code_sm90() { return dev_cc_major() >= 9 && lilac_cuda_code_arch() >= 90; }

/* One-token products whose grid has a block an item stage the item's rows in shared memory (mv_stage) on sm_90
 * devices; LILAC_CUDA_MV_STAGE=0: they read them from global memory as they go. tg128 366.0/365.6/366.2 against
 * 363.0/364.3/363.9 (H200, alternated in one call, session 17: the dense products' copies run while the kernel
 * before ends; only the dense ones staged: 363.0/363.0 against 367.5/367.1 for all and 364.6/365.6 for none).
 * The down+sum kernel staging its k experts' rows (73 KB of shared memory a block, the k indices
 * loaded together, then a copy each) was slower: 342.0/342.2 against 366.9/366.4; removed (the code at e33bc90).
 * Read once. */
bool mv_stage_enabled()
{
    static std::atomic<int> on{-1};
    if (on.load(std::memory_order_relaxed) < 0)
        on.store(lilac_env_switch("LILAC_CUDA_MV_STAGE", true) && code_sm90(), std::memory_order_relaxed);
    return on.load(std::memory_order_relaxed) != 0;
}

/* Where a one-token product of grid blocks in p's shape stages its rows (MV.stage_off), *smem grown by them;
 * 0 where it does not: more items than blocks, x in more than one column tile, rows not 16-aligned, or
 * more shared memory than a block may have. */
template <int TYPE, int T> int mv_stage_off(const MV &p, long long grid, int *smem)
{
    if (T != 1 || p.n_tok != 1 || !mv_stage_enabled() || p.items > grid || p.n_ct != 1 || p.row_bytes % 16 ||
        p.expert_stride % 16 || reinterpret_cast<uintptr_t>(p.w) % 16)
        return 0;
    const long long rpt = mv_tile_rows(cfg_rows_t(T), p.lpr_log2);
    const int off = (*smem + 127) & ~127;
    const long long bytes = rpt * (long long)p.row_bytes;
    if (off + bytes > SMEM_MAX)
        return 0;
    *smem = off + (int)bytes;
    return off;
}

/* Dense one-token products with several items a block through k_mv_pipe (LILAC_CUDA_MV_PIPE=0 off). H200,
 * session 21: tg128 371.6/371.4 against 367.1/365.4 (alternated in one call); ncu (cold, serialized) puts the
 * LM head (Q6_K 248,320 x 2048) at 210 us against k_mv's 240. Read once. */
std::atomic<int> g_pipe{-1};     /* -1: LILAC_CUDA_MV_PIPE not read yet (lilac_cuda_mv_pipe_set) */
std::atomic<long> g_pipe_n{0};   /* k_mv_pipe's launches (lilac_cuda_mv_pipe_launches) */
bool mv_pipe_enabled()
{
    return env_switch_once(g_pipe, "LILAC_CUDA_MV_PIPE", true) && mv_stage_enabled();
}

/* Whether p (one token, its k_mv grid `grid`) streams through shared memory: dense, one column tile, more items
 * than blocks, rows 16-aligned (launch_pipe, launch_ring). */
static bool pipe_takes(const MV &p, long long grid)
{
    return p.n_tok == 1 && !p.idx && !p.rlog && p.n_ct == 1 && p.items > grid && p.row_bytes % 16 == 0 &&
           reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && mv_pipe_enabled();
}

/* The blocks of KERN (threads a block, need bytes of dynamic shared memory) a multiprocessor holds; 0 where need
 * is more than a block of it may have (the device's opt-in most, every H100/H200: 227 KB, less the kernel's
 * static; the attribute set to it) or the query failed. */
template <auto KERN> int staged_blocks(int threads, long long need)
{
    const int most = dev_smem_most<KERN>();
    int per_sm = 0;
    if (!most || need > most)
        return 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, KERN, threads, (size_t)need) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return per_sm;
}

/* p (shaped, its grid `grid`) through KERN_PIPE (k_mv_pipe) where it takes it: one token, dense, one column
 * tile, more items than blocks, rows 16-aligned, x and two buffers of a tile's rows within the device's shared
 * memory for a block (the LM head's 64-row Q6_K tiles: 2 x 105 KB; the tile, i.e. the lanes a row, stays
 * mv_shape's: another would sum in another order and the batched step's bits would differ); its own grid (what
 * fits at that shared memory). false: nothing launched. */
template <auto KERN_PIPE> bool launch_pipe(MV p, long long grid, int smem, cudaStream_t st)
{
    if (!pipe_takes(p, grid))
        return false;
    const long long rpt = mv_tile_rows(cfg_rows_t(1), p.lpr_log2);
    const long long buf = (rpt * (long long)p.row_bytes + 127) & ~127LL; /* k_mv_pipe's */
    const int off = (smem + 127) & ~127;
    const int total = off + (int)(2 * buf);
    const int per_sm = staged_blocks<KERN_PIPE>(NTHREADS, off + 2 * buf);
    if (per_sm < 1)
        return false;
    p.stage_off = off;
    const long long cap = (long long)per_sm * dev_sm_count();
    launch_dependent(KERN_PIPE, dim3((unsigned)(p.items < cap ? p.items : cap)), dim3(NTHREADS), (size_t)total, st, p);
    g_pipe_n.fetch_add(1, std::memory_order_relaxed);
    return true;
}

/* k_mv_ring's configurations (LILAC_CUDA_MV_RING=c: 1, the default, 1 row a lane group, 8 warps of 2 slots; 2:
 * 16 warps of one slot; 0 k_mv_pipe). Q6_K only (the LM head's type; the others' LM heads keep k_mv_pipe: without
 * q6_units the ring was 156-158 us against the pipe's 162). Read once. */
constexpr int RING_N = 2;
static std::atomic<int> g_ring{-1};
static int ring_cfg() { return env_int_once(g_ring, "LILAC_CUDA_MV_RING", 1, 0, RING_N); }

template <int TYPE, class C> bool launch_ring_c(MV p, int smem, cudaStream_t st)
{
    constexpr auto KERN = k_mv_ring<TYPE, false, C>;
    const long long sr = (long long)C::R << (5 - p.lpr_log2);
    const long long sb = (sr * (long long)p.row_bytes + 127) & ~127LL; /* k_mv_ring's */
    const int off = (smem + 127) & ~127;
    const long long need = off + (long long)C::NWP * C::NSW * sb;
    const int per_sm = staged_blocks<KERN>(C::NWP * 32, need);
    if (per_sm < 1)
        return false;
    p.stage_off = off;
    const long long groups = (p.rows + sr - 1) / sr, cap = (long long)per_sm * dev_sm_count() * C::NWP;
    const long long nb = (groups < cap ? groups : cap) / C::NWP; /* blocks: a group a warp at least */
    launch_dependent(KERN, dim3((unsigned)(nb > 0 ? nb : 1)), dim3(C::NWP * 32), (size_t)need, st, p);
    g_pipe_n.fetch_add(1, std::memory_order_relaxed);
    return true;
}

/* p through k_mv_ring where launch_pipe would take it and a configuration is chosen. false: nothing launched. */
template <int TYPE> bool launch_ring(const MV &p, long long grid, int smem, cudaStream_t st)
{
    if constexpr (TYPE != LILAC_Q6_K) {
        (void)p, (void)grid, (void)smem, (void)st;
        return false;
    } else {
        const int c = ring_cfg();
        if (!c || !pipe_takes(p, grid))
            return false;
        switch (c) {
        case 1: return launch_ring_c<TYPE, RingCfg<1, 8, 2>>(p, smem, st);
        case 2: return launch_ring_c<TYPE, RingCfg<1, 16, 1>>(p, smem, st);
        default: return false;
        }
    }
}

/* LILAC_CUDA_X_VEC=0: load_x a thread a run of scalar loads (its older form). Read once. */
static std::atomic<int> g_x_vec{-1};
static bool x_vec_enabled() { return env_switch_once(g_x_vec, "LILAC_CUDA_X_VEC", true); }

/* Whether load_x may read x (and x2) a float4 at a time: every run it loads starts 16-byte aligned. */
static int mv_xvec(const float *x, const float *x2, long long tok, long long slot)
{
    const auto al = [](const float *q) { return !q || (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
    return x_vec_enabled() && x && al(x) && al(x2) && tok % 4 == 0 && slot % 4 == 0;
}

/* KERN (k_mv, T tokens a pass) over the grid that fits, in mv_shape's shape. */
template <int TYPE, int T, auto KERN, auto KERN_STG = KERN, auto KERN_PIPE = KERN>
void launch_shaped(MV p, cudaStream_t st, int slots, int lpr_force)
{
    auto kern = KERN;
    p.xvec = mv_xvec(p.x, p.x2, p.x_tok, p.x_slot);
    int smem = mv_smem<TYPE, T>(p.cols);
    const long long cap = mv_grid_cap<TYPE, T, KERN>(p.cols);
    mv_shape<TYPE, T>(p, slots, cap, lpr_force);
    const unsigned grid = (unsigned)(p.items < cap ? p.items : cap);
    p.stage_off = KERN_STG != KERN ? mv_stage_off<TYPE, T>(p, grid, &smem) : 0;
    if constexpr (KERN_PIPE != KERN)
        if (!p.stage_off && (launch_ring<TYPE>(p, grid, smem, st) || launch_pipe<KERN_PIPE>(p, grid, smem, st)))
            return;
    if (p.stage_off) {
        kern = KERN_STG;
        smem_max_once<KERN_STG>();
    }
    /* Many tokens over few row tiles (a prefill chunk through a narrow matrix): the token chunks split over
     * blockIdx.y until there are two blocks a resident slot; each group reads the weights again (from L2). */
    const long long ntc = (p.n_tok + T - 1) / T;
    long long gy = ntc > 1 && (long long)grid < 2 * cap ? (2 * cap + grid - 1) / grid : 1;
    gy = gy > ntc ? ntc : gy > 65535 ? 65535 : gy;
    launch_dependent(kern, dim3(grid, (unsigned)gy), dim3(NTHREADS), (size_t)smem, st, p);
}

template <int TYPE, bool A16, int T> void launch_fast(MV p, cudaStream_t st, int slots, int lpr_force)
{
    if constexpr (T == 1)
        launch_shaped<TYPE, T, k_mv<TYPE, A16, cfg_rows_t(T), T>, k_mv<TYPE, A16, cfg_rows_t(T), T, true>,
                      k_mv_pipe<TYPE, A16>>(p, st, slots, lpr_force);
    else
        launch_shaped<TYPE, T, k_mv<TYPE, A16, cfg_rows_t(T), T>>(p, st, slots, lpr_force);
}

/* The lanes a row (log2) the one-token product of W (type TYPE at alignment A16) over `slots` slots takes:
 * mv_shape at one token over k_mv's grid. */
template <int TYPE, bool A16> int token_lpr(const lilac_cuda_mat *W, int slots)
{
    MV q{};
    q.rows = W->rows, q.cols = W->cols;
    mv_shape<TYPE, 1>(q, slots, mv_grid_cap<TYPE, 1, k_mv<TYPE, A16, cfg_rows_t(1), 1>>(W->cols));
    return q.lpr_log2;
}

/* Whether T tokens a pass at 2^lpr_log2 lanes a row walk a lane's units in the one-token pass's order: their
 * column tiles (each a lane's units sub, sub + lpr, ... from the tile's start) whole multiples of lpr, or the
 * whole row. */
template <int TYPE, int T> bool same_walk(long long cols, int lpr_log2)
{
    const int U = (int)(cols / Unit<TYPE>::VPU), a = mv_tile_units<TYPE, 1>(cols), b = mv_tile_units<TYPE, T>(cols);
    return (a == U || a % (1 << lpr_log2) == 0) && (b == U || b % (1 << lpr_log2) == 0);
}

/* LILAC_CUDA_MV_T8=1: 8 tokens a pass for every type (cfg_max_tokens' 4 was chosen on prefill chunks; an
 * 8-sequence batched step reads its Q4_K matrices twice at 4, and they were ~40 % of that step). */
bool mv_t8()
{
    static int on = -1;
    if (on < 0)
        on = lilac_env_switch("LILAC_CUDA_MV_T8", false);
    return on;
}

/* lpr_force >= 0: that many lanes a row (log2), and where a pass of T tokens would walk a lane's units in
 * another order than one token's (same_walk), one token a pass. */
template <int TYPE, bool A16> void launch_t(const MV &p, cudaStream_t st, int slots, int lpr_force = -1)
{
    const bool f = lpr_force >= 0;
    if (p.n_tok == 1)
        launch_fast<TYPE, A16, 1>(p, st, slots, lpr_force);
    else if (p.n_tok == 2 && (!f || same_walk<TYPE, 2>(p.cols, lpr_force)))
        launch_fast<TYPE, A16, 2>(p, st, slots, lpr_force);
    else if ((p.n_tok <= 4 || (cfg_max_tokens(TYPE) == 4 && !mv_t8())) && (!f || same_walk<TYPE, 4>(p.cols, lpr_force)))
        launch_fast<TYPE, A16, 4>(p, st, slots, lpr_force);
    else if (!f || same_walk<TYPE, 8>(p.cols, lpr_force))
        launch_fast<TYPE, A16, 8>(p, st, slots, lpr_force);
    else
        launch_fast<TYPE, A16, 1>(p, st, slots, lpr_force);
}

/* The product's parameters (the launch shape apart: mv_shape): y[t][slot] = W[idx[slot]] . x, slots'
 * outputs W->rows apart where `slotted`, x slots x_slot floats apart (0: one shared x), tokens a row apart. */
MV mv_params(const lilac_cuda_mat *W, size_t stride, const int32_t *idx, bool slotted, const float *x,
             const float *x2, long long x_slot, float *y, int n_tok, int acc)
{
    MV p{};
    p.w = static_cast<const uint8_t *>(W->data);
    p.row_bytes = W->row_bytes;
    p.expert_stride = stride;
    p.idx = idx;
    p.x = x;
    p.x2 = x2;
    p.acc = acc;
    p.y = y;
    p.rows = W->rows;
    p.cols = W->cols;
    p.x_tok = W->cols;
    p.x_slot = x_slot;
    p.y_tok = W->rows;
    p.y_slot = slotted ? W->rows : 0;
    p.n_tok = n_tok;
    return p;
}

/* W has weights, a type with a CUDA kernel, whole blocks a row and rows at least that long. */
bool mat_ok(const lilac_cuda_mat *W)
{
    int blck, bsz;
    return W && W->data && block_of(W->type, &blck, &bsz) && W->rows >= 1 && W->cols % blck == 0 &&
           W->row_bytes >= (size_t)(W->cols / blck) * (size_t)bsz;
}

/* The alignment at which the fast kernel (launch_t) takes W's rows and expert stride: 16 (A16), 2, or 0 (none:
 * k_mv_scalar). It reads 16-byte chunks: quantized rows need 2-aligned blocks; K-quants go without the
 * realignment when every block is 16-aligned; float rows must be 16-aligned runs of 16 values. */
int mv_align(const lilac_cuda_mat *W, size_t stride)
{
    const uintptr_t al = reinterpret_cast<uintptr_t>(W->data) | W->row_bytes | stride;
    const bool a16 = (al & 15) == 0, a2 = (al & 1) == 0;
    switch (W->type) {
    case LILAC_Q4_K:
    case LILAC_Q5_K: return a16 ? 16 : a2 ? 2 : 0;
    case LILAC_Q6_K:
    case LILAC_Q8_0:
    case LILAC_Q4_0: return a2 ? 2 : 0;
    case LILAC_F32:
    case LILAC_F16:
    case LILAC_BF16: return a16 && W->cols % 16 == 0 ? 16 : 0;
    default: return 0;
    }
}

/* A fast-kernel instance's template arguments: the type and whether its blocks are read 16-aligned. */
template <int TYPE, bool A16> struct MvKind {
    static constexpr int type = TYPE;
    static constexpr bool a16 = A16;
};

/* f(MvKind<...>{}) for W's type at mv_align's alignment (the K-quants 16-aligned where it is 16, the byte types
 * never, the float ones always: they are only taken so); false (f not called) at 0 or for another type. The one
 * place that maps a matrix to its fast kernel's instance (mv_fast, mv_token_lpr, ds_launch, the grouped product). */
template <class F> bool mv_dispatch(int type, int align, F &&f)
{
    if (!align)
        return false;
    switch (type) {
    case LILAC_Q4_K: align == 16 ? f(MvKind<LILAC_Q4_K, true>{}) : f(MvKind<LILAC_Q4_K, false>{}); return true;
    case LILAC_Q5_K: align == 16 ? f(MvKind<LILAC_Q5_K, true>{}) : f(MvKind<LILAC_Q5_K, false>{}); return true;
    case LILAC_Q6_K: f(MvKind<LILAC_Q6_K, false>{}); return true;
    case LILAC_Q8_0: f(MvKind<LILAC_Q8_0, false>{}); return true;
    case LILAC_Q4_0: f(MvKind<LILAC_Q4_0, false>{}); return true;
    case LILAC_F32: f(MvKind<LILAC_F32, true>{}); return true;
    case LILAC_F16: f(MvKind<LILAC_F16, true>{}); return true;
    case LILAC_BF16: f(MvKind<LILAC_BF16, true>{}); return true;
    default: return false;
    }
}

/* The fast kernel for W's type at mv_align's alignment; false (nothing launched) at 0. lpr_force: launch_t's. */
bool mv_fast(const lilac_cuda_mat *W, int align, const MV &p, cudaStream_t st, int slots, int lpr_force = -1)
{
    return mv_dispatch(W->type, align, [&](auto kind) {
        using K = decltype(kind);
        launch_t<K::type, K::a16>(p, st, slots, lpr_force);
    });
}

/* matvec's lpr_force for k_mv_scalar (a warp a row, whatever the call) */
constexpr int MV_SCALAR = -2;

/* token_lpr for W at mv_align's alignment align (stride: its experts'); MV_SCALAR where the fast kernel does not
 * take it. */
int mv_token_lpr(const lilac_cuda_mat *W, int align, int slots)
{
    int lpr = MV_SCALAR;
    mv_dispatch(W->type, align, [&](auto kind) {
        using K = decltype(kind);
        lpr = token_lpr<K::type, K::a16>(W, slots);
    });
    return lpr;
}

/* Check W and run the product of `slots` slots. */
void matvec(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int slots, const float *x,
            long long x_slot, float *y, int n_tok, cudaStream_t st, const float *x2 = nullptr, int acc = 0,
            int lpr_force = -1)
{
    int blck, bsz;
    if (!W || !x || !y) {
        set_err("lilac_cuda_matvec: NULL matrix, x or y");
        return;
    }
    if (!block_of(W->type, &blck, &bsz)) {
        set_err("lilac_cuda_matvec: type %d has no CUDA kernel", W->type);
        return;
    }
    if (W->rows < 0 || W->cols <= 0 || W->cols % blck || n_tok < 1 ||
        W->row_bytes < (size_t)(W->cols / blck) * (size_t)bsz) {
        set_err("lilac_cuda_matvec: bad shape: type %d, %lld x %lld, row_bytes %zu, n_tok %d", W->type,
                (long long)W->rows, (long long)W->cols, W->row_bytes, n_tok);
        return;
    }
    if (W->rows == 0 || slots == 0)
        return;
    if (!W->data) {
        set_err("lilac_cuda_matvec: NULL weights");
        return;
    }
    MV p = mv_params(W, expert_stride, idx, idx != nullptr, x, x2, x_slot, y, n_tok, acc);
    if (lpr_force != MV_SCALAR && mv_fast(W, mv_align(W, expert_stride), p, st, slots, lpr_force))
        return;
    const dim3 grid((unsigned)((W->rows + NWARPS - 1) / NWARPS), (unsigned)slots);
    k_mv_scalar<<<grid, NTHREADS, 0, st>>>(p, W->type);
}

/* LILAC_CUDA_DOWN_SUM_R: lilac_cuda_moe_down_sum's rows a lane group (ds_rows), 2 (the default: tg128 349.5/350.4
 * against 341.6/343.2, H200, 2026-11-30) or 1 (k_mv's shape). */
int ds_r()
{
    static std::atomic<int> r{-1};
    return env_int_once(r, "LILAC_CUDA_DOWN_SUM_R", 2, 1, 2);
}

/* k_moe_down_sum's STG instances (LILAC_CUDA_DS_STAGE=0 off), where the device stages (mv_stage_enabled) and every
 * block's run of a slot's rows is whole and 16-byte aligned. H200, tg128 of the 35B-A3B file: 384.2/387.2
 * against 377.8/381.3 (alternated in one call, session 23), its decode logits byte-equal. */
static std::atomic<int> g_ds_stage{-1};
static bool ds_stage_ok(const lilac_cuda_mat *W, size_t expert_stride, int rows_a_block)
{
    return env_switch_once(g_ds_stage, "LILAC_CUDA_DS_STAGE", true) && mv_stage_enabled() &&
           W->rows % rows_a_block == 0 && ((size_t)rows_a_block * W->row_bytes) % 16 == 0 && expert_stride % 16 == 0 &&
           (reinterpret_cast<uintptr_t>(W->data) & 15) == 0;
}

/* k_moe_down_sum at R rows a lane group over W's rows; -1 (nothing launched) where it does not take W. */
template <int R> int ds_launch(const lilac_cuda_mat *W, size_t expert_stride, const DS &d, cudaStream_t st, int n = 1)
{
    const long long nb = (W->rows + ds_rows(R) - 1) / ds_rows(R);
    if (nb > LILAC_CUDA_DOWN_SUM_MAXB)
        return -1;
    /* shared memory: the k inputs (DS_MAXK slots' room) and their run sums, then the dots */
    /* the slots' rows (the STG instance's), where they fit beside the inputs */
    const size_t stage = 16 + (size_t)DS_MAXK * ds_rows(R) * W->row_bytes;
    bool stg = false;
    auto smem = [&](int vpu, int nrun) {
        const long long U = W->cols / vpu;
        const size_t sm = sizeof(float) * (size_t)(DS_MAXK * U * (vpu + 4) + DS_MAXK * U * nrun + DS_MAXK * ds_rows(R));
        stg = ds_stage_ok(W, expert_stride, ds_rows(R)) && sm + stage <= (size_t)SMEM_MAX;
        return stg ? sm + stage : sm;
    };
    auto go = [&](auto kern, int vpu, size_t sm) {
        if (W->cols % vpu || sm > (stg ? (size_t)SMEM_MAX : 48 * 1024))
            return -1;
        launch_dependent(kern, dim3((unsigned)nb, (unsigned)n), dim3(NTHREADS), sm, st, d);
        return 0;
    };
    int rc = -1;
    mv_dispatch(W->type, mv_align(W, expert_stride), [&](auto kind) {
        using K = decltype(kind);
        if constexpr (Unit<K::type>::NRUN > 0) { /* the block types (float rows have no run sums) */
            const size_t sm = smem(Unit<K::type>::VPU, Unit<K::type>::NRUN);
            if (stg) {
                smem_max_once<k_moe_down_sum<K::type, K::a16, R, true>>();
                rc = go(k_moe_down_sum<K::type, K::a16, R, true>, Unit<K::type>::VPU, sm);
            } else {
                rc = go(k_moe_down_sum<K::type, K::a16, R>, Unit<K::type>::VPU, sm);
            }
        }
    });
    return rc;
}

/* The fused kernels' launches so far, by kind (lilac_cuda_fused_launches). */
std::atomic<long> g_fused_launches[LILAC_CUDA_FUSED_KINDS];

/* LILAC_CUDA_DS_TRIGGER=t: where the down+sum kernel's blocks let the kernel after them launch: 0 at their start,
 * 1 (the default since session 31) once their inputs are loaded, 2 once their dots are done. The kernel after it
 * is the next layer's first product, whose blocks copy its rows (qkv+z: 14 MB) before their wait: launched at
 * the down+sum's start, those copies went out beside the down+sum's input loads (L2 hits), which took 5.2 us
 * from its wait in the trace (layer 4), 4.5 at 1. tg128 (H200, alternated in one call, three rounds) 393.1 /
 * 390.1 / 389.7 at 1 and 390.6 / 391.3 / 387.1 at 2 against 386.2 / 388.4 / 389.2 at 0; the logits byte-equal
 * (run.sh bits). Read once. */
static std::atomic<int> g_ds_trigger{-1};
static int ds_trigger() { return env_int_once(g_ds_trigger, "LILAC_CUDA_DS_TRIGGER", 1, 0, 2); }

/* The down+sum kernel's arguments every caller sets (one token's layout; the batched and routed callers add
 * theirs). */
DS ds_params(const lilac_cuda_mat *W, size_t expert_stride, int k, const float *g, const float *u, const float *wt,
             const float *sh, float *x, const float *norm_w, float *xn, float eps, float *part, unsigned *count)
{
    DS d{};
    d.w = static_cast<const uint8_t *>(W->data);
    d.row_bytes = W->row_bytes, d.expert_stride = expert_stride;
    d.wt = wt, d.g = g, d.u = u, d.x_slot = W->cols, d.sh = sh;
    d.x = x, d.norm_w = norm_w, d.xn = xn, d.part = part, d.count = count;
    d.rows = (int)W->rows, d.cols = (int)W->cols, d.k = k, d.eps = eps;
    d.xvec = mv_xvec(g, u, d.x_slot, d.x_slot);
    d.trigger = ds_trigger();
    return d;
}

/* d launched over n rows at ds_r()'s rows a lane group, counted where it ran; -1 where it did not. */
int ds_go(const lilac_cuda_mat *W, size_t expert_stride, const DS &d, lilac_cuda_stream *s, int n)
{
    const int rc =
        ds_r() == 2 ? ds_launch<2>(W, expert_stride, d, S(s), n) : ds_launch<1>(W, expert_stride, d, S(s), n);
    if (!rc)
        g_fused_launches[LILAC_CUDA_FUSED_DOWN_SUM].fetch_add(1, std::memory_order_relaxed);
    return rc;
}

/* Seconds a call of one(x, y) takes on st: the best of reps bursts of `burst` calls (events around each burst),
 * after three warm-up calls, x (nx floats) filled, y ny floats; -1 where anything failed. */
template <class F> double bench_calls(cudaStream_t st, long long nx, long long ny, int burst, int reps, F &&one)
{
    float *x = nullptr, *y = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    double best = -1.0;
    if (cudaMalloc(&x, sizeof(float) * (size_t)nx) == cudaSuccess &&
        cudaMalloc(&y, sizeof(float) * (size_t)ny) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
        cudaEventCreate(&e1) == cudaSuccess) {
        k_fill<<<256, 256, 0, st>>>(x, nx);
        for (int i = 0; i < 3; i++) /* warm-up: first-launch costs, clocks */
            one(x, y);
        bool ok = cudaStreamSynchronize(st) == cudaSuccess && !lilac_cuda_check(nullptr, 0);
        for (int i = 0; ok && i < (reps > 0 ? reps : 1); i++) {
            float ms = 0.f;
            cudaEventRecord(e0, st);
            for (int j = 0; j < burst; j++)
                one(x, y);
            cudaEventRecord(e1, st);
            ok = cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
            if (ok && (best < 0 || ms * 1e-3 / burst < best))
                best = ms * 1e-3 / burst;
        }
        if (!ok)
            best = -1.0;
    }
    (void)cudaGetLastError();
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(x);
    cudaFree(y);
    return best;
}

} // namespace

/* ------------------------------------------------------------------ */
/* the C interface */

extern "C" {

int lilac_cuda_code_arch(void)
{
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, k_get_rows) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return fa.ptxVersion > 0 ? fa.ptxVersion : fa.binaryVersion;
}

int lilac_cuda_pdl(void)
{
    static std::atomic<int> on{-1};
    int v = on.load(std::memory_order_relaxed);
    if (v < 0) {
        v = lilac_env_switch("LILAC_CUDA_PDL", true) && code_sm90(); /* griddep_wait() waits only there */
        on.store(v, std::memory_order_relaxed);
    }
    return v;
}

int lilac_cuda_available(char *msg, size_t cap)
{
    int drv = 0, rt = 0, n = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    if (drv == 0) {
        put_msg(msg, cap, "no NVIDIA driver found (libcuda.so could not be loaded)");
        return 0;
    }
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        put_msg(msg, cap,
                "the NVIDIA driver supports CUDA %d.%d, older than lilac's CUDA runtime %d.%d: update the driver",
                drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
        (void)cudaGetLastError();
        return 0;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
        put_msg(msg, cap, "no CUDA device found (driver %d.%d)", drv / 1000, drv % 1000 / 10);
        (void)cudaGetLastError();
        return 0;
    }
    if (e != cudaSuccess) {
        cuda_fail(e, msg, cap, "CUDA initialization failed (cudaGetDeviceCount)");
        if (e == cudaErrorMemoryAllocation && msg && cap > strlen(msg) + 1) /* ASAN_OPTIONS overriding ours */
            strncat(msg, " (under AddressSanitizer: run with ASAN_OPTIONS=protect_shadow_gap=0)",
                    cap - strlen(msg) - 1);
        return 0;
    }
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
        return cuda_fail(e, msg, cap, "cudaGetDeviceProperties") + 1;
    if ((e = cudaFree(nullptr)) != cudaSuccess) { /* creates the context: fails on a busy or prohibited device */
        if (e == cudaErrorDevicesUnavailable)
            put_msg(msg, cap, "CUDA device %d (%s) is busy or unavailable (exclusive or prohibited compute mode?)", dev,
                    prop.name);
        else
            cuda_fail(e, msg, cap, "creating a CUDA context failed");
        (void)cudaGetLastError();
        return 0;
    }
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, k_get_rows)) != cudaSuccess) {
        put_msg(msg, cap,
                "lilac's CUDA kernels were built for architectures %s; device %d (%s) is compute capability %d.%d "
                "(rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d): %s",
                LILAC_CUDA_ARCHS, dev, prop.name, prop.major, prop.minor, prop.major, prop.minor,
                cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    put_msg(msg, cap, "CUDA device %d: %s, compute capability %d.%d", dev, prop.name, prop.major, prop.minor);
    return 1;
}

int lilac_cuda_device_info(char *name, size_t cap, size_t *total_bytes, size_t *free_bytes, int *cc_major,
                           int *cc_minor)
{
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        put_msg(name, cap, "no CUDA device");
        (void)cudaGetLastError();
        return -1;
    }
    put_msg(name, cap, "%s", prop.name);
    size_t fr = 0, tot = prop.totalGlobalMem;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        (void)cudaGetLastError();
    if (total_bytes)
        *total_bytes = tot;
    if (free_bytes)
        *free_bytes = fr;
    if (cc_major)
        *cc_major = prop.major;
    if (cc_minor)
        *cc_minor = prop.minor;
    return 0;
}

int lilac_cuda_malloc(void **p, size_t bytes, char *msg, size_t cap)
{
    *p = nullptr;
    const cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess)
        return 0;
    *p = nullptr;
    (void)cudaGetLastError();
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        (void)cudaGetLastError();
    put_msg(msg, cap, "cudaMalloc of %zu bytes failed: %s (%zu MiB of %zu MiB free)", bytes, cudaGetErrorString(e),
            fr >> 20, tot >> 20);
    return -1;
}

void lilac_cuda_free(void *p)
{
    if (p && cudaFree(p) != cudaSuccess)
        (void)cudaGetLastError();
}

int lilac_cuda_host_alloc(void **p, size_t bytes)
{
    *p = nullptr;
    if (cudaMallocHost(p, bytes) == cudaSuccess)
        return 0;
    *p = nullptr;
    (void)cudaGetLastError();
    return -1;
}

void lilac_cuda_host_free(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

int lilac_cuda_host_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

int lilac_cuda_upload(void *dst_dev, const void *src_host, size_t bytes, char *msg, size_t cap)
{
    const cudaError_t e = cudaMemcpy(dst_dev, src_host, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : cuda_fail(e, msg, cap, "upload (cudaMemcpy to the device)");
}

int lilac_cuda_download(void *dst_host, const void *src_dev, size_t bytes, lilac_cuda_stream *s, char *msg,
                        size_t cap)
{
    cudaError_t e = cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, S(s));
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(S(s));
    return e == cudaSuccess ? 0 : cuda_fail(e, msg, cap, "download (cudaMemcpy from the device)");
}

int lilac_cuda_memset(void *dst_dev, int value, size_t bytes, lilac_cuda_stream *s)
{
    if (cudaMemsetAsync(dst_dev, value, bytes, S(s)) == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return -1;
}

int lilac_cuda_sync(lilac_cuda_stream *s, char *msg, size_t cap)
{
    const cudaError_t e = cudaStreamSynchronize(S(s));
    return e == cudaSuccess ? 0 : cuda_fail(e, msg, cap, "cudaStreamSynchronize");
}

int lilac_cuda_stream_new(lilac_cuda_stream **s, char *msg, size_t cap)
{
    cudaStream_t st = nullptr;
    const cudaError_t e = cudaStreamCreate(&st); /* blocking: ordered with the synchronous uploads */
    *s = reinterpret_cast<lilac_cuda_stream *>(st);
    return e == cudaSuccess ? 0 : cuda_fail(e, msg, cap, "cudaStreamCreate");
}

void lilac_cuda_stream_free(lilac_cuda_stream *s)
{
    if (!s)
        return;
    lilac_cuda_scratch_release(s); /* else its slots (16 in all) and memory stay taken after it is gone */
    if (cudaStreamDestroy(S(s)) != cudaSuccess)
        (void)cudaGetLastError();
}

int lilac_cuda_type_supported(int type)
{
    int blck, bytes;
    return block_of(type, &blck, &bytes) ? 1 : 0;
}

/* Matrices of fewer rows than LILAC_CUDA_MMA_MIN_ROWS (default 64) stay on the CUDA cores at any token count: a
 * 512-token prefill's DeltaNet alpha and beta (32 rows each) took 35 us a call on the tensor cores (ncu, H200),
 * 32 blocks of 128 rows, a quarter of them rows. pp512 7,526 against 7,449 and 7,446 with every matrix on the
 * tensor cores (H200, one call, 2026-11-30). Read once. */
static int mma_min_rows()
{
    static std::atomic<int> v{-1};
    return env_int_once(v, "LILAC_CUDA_MMA_MIN_ROWS", 64, 0, 1 << 30);
}

/* lilac_cuda_matvec; same_x: lilac_cuda_matvec_mma_x's. Whether the tensor cores took it. */
static bool matvec_tok(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, bool same_x,
                       lilac_cuda_stream *s)
{
    if (n_tok <= 8 && lilac_cuda_matvec_tc(W, x, y, n_tok, 0, s) == 0) /* (no scratch: x not converted there) */
        return false;
    if (W && x && y && n_tok >= lilac_cuda_mma_min_tokens() && W->rows >= mma_min_rows() &&
        lilac_cuda_mma_supported(W->type) &&
        lilac_cuda_mma_enabled() && lilac_cuda_matvec_mma_x(W, x, y, n_tok, same_x, s) == 0)
        return true;
    if (W && x && y && n_tok >= lilac_cuda_gemm_min_tokens() && lilac_cuda_matvec_gemm(W, x, y, n_tok, s) == 0)
        return false;
    matvec(W, 0, nullptr, 1, x, 0, y, n_tok, S(s));
    return false;
}

void lilac_cuda_matvec(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s)
{
    matvec_tok(W, x, y, n_tok, false, s);
}

void lilac_cuda_matvec_multi(const lilac_cuda_mat *const *W, float *const *y, int n_mat, const float *x, int n_tok,
                             lilac_cuda_stream *s)
{
    /* x's digits are reused only after a tensor-core product of this call converted x (only products run in
     * between); before that the scratch may hold another x's, or this buffer's before it changed */
    bool converted = false;
    for (int i = 0; i < n_mat; i++)
        converted |= matvec_tok(W[i], x, y[i], n_tok, converted, s);
}

void lilac_cuda_matvec_experts(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                               const float *x, int x_stride, float *y, lilac_cuda_stream *s)
{
    if (!idx && k > 0) {
        set_err("lilac_cuda_matvec_experts: NULL idx");
        return;
    }
    if (k > 65535) {
        set_err("lilac_cuda_matvec_experts: k = %d experts at once is too many", k);
        return;
    }
    if (k <= 0)
        return;
    matvec(W, expert_stride, idx, k, x, W && x_stride ? W->cols : 0, y, 1, S(s));
}

int lilac_cuda_matvec_experts_routed(const lilac_cuda_mat *W, size_t expert_stride, const float *logits,
                                     const lilac_cuda_route_args *r, const float *x, float *y, lilac_cuda_stream *s)
{
    static_assert(NTHREADS == ROUTE_NT, "k_mv's blocks route (dev_route)");
    if (!mat_ok(W) || !logits || !r || !route_takes(r->E, r->k) || !r->idx || !r->w || !x || !y)
        return -1;
    const int slots = r->up_offset > 0 ? 2 * r->k : r->k;
    MV p = mv_params(W, expert_stride, r->idx, true, x, nullptr, 0, y, 1, 0);
    p.rlog = logits;
    p.r = *r;
    return mv_fast(W, mv_align(W, expert_stride), p, S(s), slots) ? 0 : -1;
}

void lilac_cuda_matvec_fused(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                             const float *x, const float *x2, int x_stride, float *y, int accumulate,
                             lilac_cuda_stream *s)
{
    if (!idx && k != 1) {
        set_err("lilac_cuda_matvec_fused: without idx there is one matrix (k = %d)", k);
        return;
    }
    if (k > 65535) {
        set_err("lilac_cuda_matvec_fused: k = %d experts at once is too many", k);
        return;
    }
    if (k <= 0)
        return;
    /* one dense matrix, no SwiGLU: the tensor-core decode product where it takes W (lilac_cuda_matvec_like does
     * the same for the batched step's rows) */
    if (!idx && !x2 && lilac_cuda_matvec_tc(W, x, y, 1, accumulate, s) == 0)
        return;
    matvec(W, expert_stride, idx, k, x, W && x_stride ? W->cols : 0, y, 1, S(s), x2, accumulate);
}

long lilac_cuda_fused_launches(int kind)
{
    return kind >= 0 && kind < LILAC_CUDA_FUSED_KINDS ? g_fused_launches[kind].load(std::memory_order_relaxed) : 0;
}

int lilac_cuda_moe_down_sum_batch(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                                  const float *g, const float *u, const float *wt, const float *sh, float *x,
                                  const float *norm_w, float *xn, float eps, float *part, unsigned *count, int n,
                                  long long idx_row, long long wt_row, long long gu_row, lilac_cuda_stream *s)
{
    if (!mat_ok(W) || !idx || !g || !u || !wt || !x || (norm_w && (!xn || !part || !count)) || k < 1 ||
        k > DS_MAXK || W->cols > INT_MAX || W->rows > INT_MAX || n < 1 || n > 65535 || idx_row < 0 || wt_row < 0 ||
        gu_row < 0)
        return -1;
    DS d = ds_params(W, expert_stride, k, g, u, wt, sh, x, norm_w, xn, eps, part, count);
    d.idx = idx;
    d.r_idx = idx_row, d.r_wt = wt_row, d.r_gu = gu_row;
    d.xvec = d.xvec && gu_row % 4 == 0; /* every row's inputs 16-byte aligned */
    return ds_go(W, expert_stride, d, s, n);
}

int lilac_cuda_moe_down_sum(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k, const float *g,
                            const float *u, const float *wt, const float *sh, float *x, const float *norm_w, float *xn,
                            float eps, float *part, unsigned *count, lilac_cuda_stream *s)
{
    return lilac_cuda_moe_down_sum_batch(W, expert_stride, idx, k, g, u, wt, sh, x, norm_w, xn, eps, part, count, 1,
                                         0, 0, 0, s);
}

int lilac_cuda_moe_down_sum_r(void) { return ds_r(); }

int lilac_cuda_mv_pipe_set(int on)
{
    const int prev = env_switch_once(g_pipe, "LILAC_CUDA_MV_PIPE", true);
    g_pipe.store(on ? 1 : 0, std::memory_order_relaxed);
    return prev;
}
long lilac_cuda_mv_pipe_launches(void) { return g_pipe_n.load(std::memory_order_relaxed); }
int lilac_cuda_mv_pipe_usable(void) { return mv_stage_enabled(); }
int lilac_cuda_mv_ring_set(int c)
{
    const int prev = ring_cfg();
    g_ring.store(c >= 0 && c <= RING_N ? c : 0, std::memory_order_relaxed);
    return prev;
}
int lilac_cuda_mv_ring_count(void) { return RING_N; }

void lilac_cuda_matvec_like(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int slots,
                            const float *x, int x_stride, const float *x2, float *y, int n_tok, int accumulate,
                            const lilac_cuda_mat *like, size_t like_stride, int like_slots, lilac_cuda_stream *s)
{
    if (!W || !like || !like->data || like->type != W->type || like->cols != W->cols || like_slots < 1 ||
        slots < 1 || slots > 65535 || (slots > 1 && (!idx || n_tok != 1)) || n_tok < 1) {
        set_err("lilac_cuda_matvec_like: bad arguments (%d slots, %d tokens, like %d slots)", slots, n_tok,
                like_slots);
        return;
    }
    /* the one-token product on the tensor cores (matvec_tok): W through it too, any token count (each its bits) */
    if (slots == 1 && !idx && !x2 && lilac_cuda_matvec_tc_takes(like) &&
        lilac_cuda_matvec_tc(W, x, y, n_tok, accumulate, s) == 0)
        return;
    /* the one-token product's lanes a row; where the fast kernel does not take `like`, k_mv_scalar for W too */
    const int lpr = W->data && mat_ok(W) ? mv_token_lpr(like, mv_align(like, like_stride), like_slots) : -1;
    if (lpr >= 0 && !mv_align(W, expert_stride)) {
        set_err("lilac_cuda_matvec_like: W (type %d) is not aligned as the product it stands for", W->type);
        return;
    }
    matvec(W, expert_stride, idx, slots, x, x_stride ? W->cols : 0, y, n_tok, S(s), x2, accumulate, lpr);
}


void lilac_cuda_get_row(const lilac_cuda_mat *W, const int32_t *r_dev, float *out, lilac_cuda_stream *s)
{
    int blck, bsz;
    if (!W || !r_dev || !out || !W->data || !block_of(W->type, &blck, &bsz) || W->cols <= 0 || W->cols % blck) {
        set_err("lilac_cuda_get_row: bad arguments (type %d)", W ? W->type : -1);
        return;
    }
    const long long blocks = (W->cols + 255) / 256;
    k_get_rows<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, S(s)>>>(
        static_cast<const uint8_t *>(W->data), W->row_bytes, W->rows, W->cols, W->type, r_dev, out);
}

int lilac_cuda_check(char *msg, size_t cap)
{
    if (g_err[0]) {
        put_msg(msg, cap, "%s", g_err);
        g_err[0] = 0;
        (void)cudaGetLastError();
        return -1;
    }
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : cuda_fail(e, msg, cap, "kernel launch");
}

double lilac_cuda_bench_matvec(const lilac_cuda_mat *W, int n_tok, int reps)
{
    if (!W || n_tok < 1 || W->rows <= 0 || W->cols <= 0)
        return -1.0;
    return bench_calls(nullptr, (long long)n_tok * W->cols, (long long)n_tok * W->rows, 1, reps,
                       [&](float *x, float *y) { lilac_cuda_matvec(W, x, y, n_tok, nullptr); });
}

} // extern "C"

/* ------------------------------------------------------------------ */
/* prefill: the embedding rows of a chunk and the grouped expert product */

namespace {


/* The grouped product: expert e's pairs are offsets[e] .. offsets[e + 1];
 * pair i reads x row rows[i] (i without rows) and writes y row i. */
struct MVG {
    const uint8_t *w; /* expert 0 */
    size_t row_bytes, expert_stride;
    const int32_t *offsets, *rows;
    const float *x;
    float *y;
    long long n_rows, cols, x_stride; /* W's rows and columns; floats between x rows */
    long long row_tiles, items;       /* items = experts x row tiles */
    int n_expert, lpr_log2, ut, n_ct;
};

/* load_x for the gathered rows of pairs p0 .. p0 + nt - 1 (the same layout and scaling). */
template <class UT, int T>
__device__ void load_x_rows(const float *x, long long x_stride, const int32_t *rows, int p0, int nt, int u0, int u1,
                            float *xs, int XS, float *ss, int SS)
{
    constexpr int VPU = UT::VPU, US = VPU + 4, NR = VPU / 16;
    const int nruns = (u1 - u0) * NR;
    for (int i = threadIdx.x; i < T * nruns; i += NTHREADS) {
        const int t = i / nruns, run = i - t * nruns, u = run / NR, rr = run - u * NR;
        const float *src = nullptr;
        if (t < nt) {
            const long long xr = rows ? (long long)__ldg(rows + p0 + t) : (long long)(p0 + t);
            src = x + xr * x_stride + (long long)u0 * VPU + UT::vcol(u * VPU + 16 * rr);
        }
        float4 *dst = reinterpret_cast<float4 *>(xs + t * XS + u * US + 16 * rr);
        float v[16], s = 0.f;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            v[k] = src ? src[k] : 0.f;
            s += v[k];
            v[k] *= __int_as_float((127 + 64 - UT::xshift(16 * rr + k)) << 23);
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            dst[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
        if (UT::NRUN)
            ss[t * SS + run] = s;
    }
    __syncthreads();
}

/* k_mv over experts: a block's items (expert, tile of rows) are one
 * contiguous run; for each expert in it, its pairs go by T at a time,
 * outermost, so that a row tile of the expert's weights is read once per
 * pass of T pairs and the x of a pass is loaded once for all its tiles. The
 * lanes, rows and dot products are k_mv's: a pair's sums are the one-token
 * product's, in the same order. */
template <int TYPE, bool A16, int R, int T>
__global__ void __launch_bounds__(NTHREADS, cfg_min_blocks(TYPE, T)) k_mv_grouped(const MVG p)
{
    using UT = Unit<TYPE>;
    constexpr int VPU = UT::VPU, NRUN = UT::NRUN, US = VPU + 4;
    extern __shared__ float4 smem4[];
    float *const xs = reinterpret_cast<float *>(smem4);
    const int XS = p.ut * US;
    float *const ss = xs + T * XS;
    const int SS = p.ut * NRUN;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int lpr = 1 << p.lpr_log2, sub = lane & (lpr - 1), grp = lane >> p.lpr_log2;
    const int rpw = R << (5 - p.lpr_log2);
    const long long rpt = mv_tile_rows(R, p.lpr_log2);
    const int U = (int)(p.cols / VPU);

    const long long it0 = p.items * blockIdx.x / gridDim.x, it1 = p.items * (blockIdx.x + 1) / gridDim.x;
    long long loaded = -1;
    for (long long it = it0; it < it1;) { /* block-uniform: every branch below is taken by the whole block */
        const long long e = it / p.row_tiles;
        const long long ite = min(it1, (e + 1) * p.row_tiles);
        const int q0 = __ldg(p.offsets + e), q1 = __ldg(p.offsets + e + 1);
        const uint8_t *W = p.w + (size_t)e * p.expert_stride;
        for (int c0 = q0; c0 < q1; c0 += T) {
            const int nt = min(T, q1 - c0);
            for (long long i = it; i < ite; i++) {
                const long long rt = i - e * p.row_tiles;
                const long long row0 = rt * rpt + warp * rpw + grp * R;
                const uint8_t *rowp[R];
                bool ok[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    ok[r] = row0 + r < p.n_rows;
                    rowp[r] = W + (size_t)(row0 + r) * p.row_bytes;
                }
                float tot[R][T];
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int t = 0; t < T; t++)
                        tot[r][t] = 0.f;
                for (int ct = 0; ct < p.n_ct; ct++) {
                    const int u0 = ct * p.ut, u1 = min(U, u0 + p.ut);
                    const long long key = (long long)c0 * p.n_ct + ct; /* pair indices are unique across experts */
                    if (key != loaded) {
                        __syncthreads();
                        load_x_rows<UT, T>(p.x, p.x_stride, p.rows, c0, nt, u0, u1, xs, XS, ss, SS);
                        loaded = key;
                    }
                    typename UT::Pay a[R], b[R];
                    int u = u0 + sub;
                    if (u < u1)
                        load_rows<TYPE, A16, R>(rowp, ok, u, a);
                    mv_units<TYPE, A16, R, T>(rowp, ok, u, u0, u1, lpr, a, b, xs, XS, ss, SS, nt, tot);
                }
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int t = 0; t < T; t++) {
                        float v = tot[r][t];
                        for (int o = lpr >> 1; o; o >>= 1)
                            v += __shfl_xor_sync(0xffffffffu, v, o);
                        if (sub == 0 && ok[r] && t < nt)
                            p.y[(long long)(c0 + t) * p.n_rows + row0 + r] = v;
                    }
            }
        }
        it = ite;
    }
}

/* The scalar fallback of the grouped product: a warp a row, block column y an expert. */
__global__ void __launch_bounds__(NTHREADS) k_mv_grouped_scalar(const MVG p, int type)
{
    const long long row = (long long)blockIdx.x * NWARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31, e = (int)blockIdx.y;
    if (row >= p.n_rows)
        return;
    const uint8_t *rowp = p.w + (size_t)e * p.expert_stride + (size_t)row * p.row_bytes;
    const int q1 = p.offsets[e + 1];
    for (int q = p.offsets[e]; q < q1; q++) {
        const float *xr = p.x + (p.rows ? (long long)p.rows[q] : (long long)q) * p.x_stride;
        const float acc = dq_warp_dot(type, rowp, xr, p.cols);
        if (lane == 0)
            p.y[(long long)q * p.n_rows + row] = acc;
    }
}

/* launch_fast's shape (lanes a row, rows a lane, column tiles, persistent
 * grid) for the grouped kernel. */
template <int TYPE, bool A16, int T> void launch_grouped(MVG p, cudaStream_t st)
{
    constexpr int R = cfg_rows;
    using UT = Unit<TYPE>;
    auto kern = k_mv_grouped<TYPE, A16, R, T>;
    const int U = (int)(p.cols / UT::VPU);
    int lpr = U / 8;
    lpr = lpr < (U < 4 ? U : 4) ? (U < 4 ? U : 4) : lpr > 32 ? 32 : lpr;
    p.lpr_log2 = floor_log2(lpr);
    p.ut = U < TILE_VALUES / T / UT::VPU ? U : TILE_VALUES / T / UT::VPU;
    p.n_ct = (U + p.ut - 1) / p.ut;
    const long long rpt = mv_tile_rows(R, p.lpr_log2);
    p.row_tiles = (p.n_rows + rpt - 1) / rpt;
    p.items = p.row_tiles * p.n_expert;
    const int smem = (int)sizeof(float) * T * p.ut * (UT::VPU + 4 + UT::NRUN);

    static std::atomic<int> attr_set{0};
    if (!attr_set.load(std::memory_order_relaxed)) {
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_MAX);
        attr_set.store(1, std::memory_order_relaxed);
    }
    static std::atomic<int> occ[SMEM_MAX / 1024 + 1];
    const int kib = (smem + 1023) / 1024;
    int per_sm = occ[kib].load(std::memory_order_relaxed);
    if (!per_sm) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NTHREADS, (size_t)kib * 1024) !=
                cudaSuccess ||
            per_sm < 1)
            per_sm = 1;
        occ[kib].store(per_sm, std::memory_order_relaxed);
    }
    const long long cap = (long long)per_sm * dev_sm_count();
    const unsigned grid = (unsigned)(p.items < cap ? p.items : cap);
    kern<<<grid, NTHREADS, smem, st>>>(p);
}

/* Pairs a pass: launch_t's choice, from an upper bound of any expert's pairs. */
template <int TYPE, bool A16> void launch_grouped_t(const MVG &p, int max_pairs, cudaStream_t st)
{
    if (max_pairs <= 1)
        launch_grouped<TYPE, A16, 1>(p, st);
    else if (max_pairs == 2)
        launch_grouped<TYPE, A16, 2>(p, st);
    else if (max_pairs <= 4 || cfg_max_tokens(TYPE) == 4)
        launch_grouped<TYPE, A16, 4>(p, st);
    else
        launch_grouped<TYPE, A16, 8>(p, st);
}

} // namespace

extern "C" {

void lilac_cuda_get_rows(const lilac_cuda_mat *W, const int32_t *r_dev, int n, float *out, lilac_cuda_stream *s)
{
    int blck, bsz;
    if (!W || !r_dev || !out || !W->data || !block_of(W->type, &blck, &bsz) || W->cols <= 0 || W->cols % blck ||
        n < 0 || n > 65535) {
        set_err("lilac_cuda_get_rows: bad arguments (type %d, %d rows)", W ? W->type : -1, n);
        return;
    }
    if (n == 0)
        return;
    const long long blocks = (W->cols + 255) / 256;
    k_get_rows<<<dim3((unsigned)(blocks < 1024 ? blocks : 1024), (unsigned)n), 256, 0, S(s)>>>(
        static_cast<const uint8_t *>(W->data), W->row_bytes, W->rows, W->cols, W->type, r_dev, out);
}

int lilac_cuda_matvec_grouped_glu(const lilac_cuda_mat *W, size_t expert_stride, int n_expert, const int32_t *offsets,
                                  int max_pairs, int n_pairs, const float *g, const float *u, long long x_stride,
                                  float *y, lilac_cuda_stream *s)
{
    if (!W || !W->data || !g || !u || !y || n_pairs < 1 || max_pairs < lilac_cuda_mma_min_pairs() ||
        !lilac_cuda_mma_supported(W->type) || !lilac_cuda_mma_enabled())
        return -1;
    return lilac_cuda_matvec_grouped_glu_mma(W, expert_stride, n_expert, offsets, max_pairs, n_pairs, g, u, x_stride,
                                             y, s);
}

void lilac_cuda_matvec_grouped(const lilac_cuda_mat *W, size_t expert_stride, int n_expert, const int32_t *offsets,
                               const int32_t *rows_of_x, int n_x, int max_pairs, int n_pairs, const float *x,
                               long long x_stride, float *y, lilac_cuda_stream *s)
{
    int blck, bsz;
    if (!W || !W->data || !offsets || !x || !y) {
        set_err("lilac_cuda_matvec_grouped: NULL matrix, offsets, x or y");
        return;
    }
    if (!block_of(W->type, &blck, &bsz)) {
        set_err("lilac_cuda_matvec_grouped: type %d has no CUDA kernel", W->type);
        return;
    }
    if (W->rows <= 0 || W->cols <= 0 || W->cols % blck || W->row_bytes < (size_t)(W->cols / blck) * (size_t)bsz ||
        n_expert < 1 || n_expert > 65535 || x_stride < W->cols ||
        (n_expert > 1 && expert_stride < (size_t)W->rows * W->row_bytes)) {
        set_err("lilac_cuda_matvec_grouped: bad shape: type %d, %d experts of %lld x %lld, row_bytes %zu, stride "
                "%zu, x_stride %lld",
                W->type, n_expert, (long long)W->rows, (long long)W->cols, W->row_bytes, expert_stride, x_stride);
        return;
    }
    if (max_pairs < 1)
        return;
    if (n_pairs > 0 && max_pairs >= lilac_cuda_mma_min_pairs() && lilac_cuda_mma_supported(W->type) &&
        lilac_cuda_mma_enabled() &&
        lilac_cuda_matvec_grouped_mma(W, expert_stride, n_expert, offsets, rows_of_x, n_x, max_pairs, n_pairs, x,
                                      x_stride, y, s) == 0)
        return;
    MVG p{};
    p.w = static_cast<const uint8_t *>(W->data);
    p.row_bytes = W->row_bytes;
    p.expert_stride = expert_stride;
    p.offsets = offsets;
    p.rows = rows_of_x;
    p.x = x;
    p.y = y;
    p.n_rows = W->rows;
    p.cols = W->cols;
    p.x_stride = x_stride;
    p.n_expert = n_expert;
    const cudaStream_t st = S(s);
    /* matvec's instance for W's type and alignment (x is read a float at a time: any x_stride) */
    if (mv_dispatch(W->type, mv_align(W, expert_stride), [&](auto kind) {
            using K = decltype(kind);
            launch_grouped_t<K::type, K::a16>(p, max_pairs, st);
        }))
        return;
    const dim3 grid((unsigned)((W->rows + NWARPS - 1) / NWARPS), (unsigned)n_expert);
    k_mv_grouped_scalar<<<grid, NTHREADS, 0, st>>>(p, W->type);
}

double lilac_cuda_bench_matvec_burst(const lilac_cuda_mat *W, int tc, int burst, int reps)
{
    if (!W || W->rows <= 0 || W->cols <= 0 || burst < 1 || (tc && !lilac_cuda_matvec_tc_takes(W)))
        return -1.0;
    cudaStream_t st = nullptr;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0;
    }
    const double t = bench_calls(st, W->cols, W->rows, burst, reps, [&](float *x, float *y) {
        if (tc)
            (void)lilac_cuda_matvec_tc(W, x, y, 1, 0, reinterpret_cast<lilac_cuda_stream *>(st));
        else
            matvec(W, 0, nullptr, 1, x, 0, y, 1, st);
    });
    cudaStreamDestroy(st);
    return t;
}

} // extern "C"
