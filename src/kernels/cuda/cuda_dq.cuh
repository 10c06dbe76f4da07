/* cuda_dq: the quantized blocks' layouts and a value of a row read byte by byte (dq_value), for the scalar
 * paths of the .cu files: k_mv_scalar's and the grouped product's fallbacks, the embedding lookup. */
#ifndef LILAC_KERNELS_CUDA_CUDA_DQ_CUH
#define LILAC_KERNELS_CUDA_CUDA_DQ_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "format/dtype.h"

/* Block layouts of kernels/cpu/quant.h (a C11 header nvcc cannot include:
 * _Static_assert). Offsets below are into one block. */
static constexpr int Q8_0_BYTES = 34;  /* d, qs[32] */
static constexpr int Q4_0_BYTES = 18;  /* d, qs[16] */
static constexpr int Q4_K_BYTES = 144; /* d, dmin, scales[12], qs[128] */
static constexpr int Q5_K_BYTES = 176; /* d, dmin, scales[12], qh[32], qs[128] */
static constexpr int Q6_K_BYTES = 210; /* ql[128], qh[64], scales[16], d */

static __device__ __forceinline__ float h2f(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFF)));
}

/* Byte-wise reads for the scalar paths, whatever the alignment. */
static __device__ __forceinline__ uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

/* Value c of a row, bit for bit as kernels/cpu/quant_scalar.c (ggml's
 * dequantize_row_*) computes it: the same float32 operations in the same
 * order, none contracted. */
static __device__ float dq_value(int type, const uint8_t *row, long long c)
{
    switch (type) {
    case LILAC_F32: return __uint_as_float(rd16(row + 4 * c) | (rd16(row + 4 * c + 2) << 16));
    case LILAC_F16: return h2f(rd16(row + 2 * c));
    case LILAC_BF16: return __uint_as_float(rd16(row + 2 * c) << 16);
    case LILAC_Q8_0: {
        const uint8_t *b = row + (c / 32) * Q8_0_BYTES;
        return __fmul_rn((float)(int8_t)b[2 + c % 32], h2f(rd16(b)));
    }
    case LILAC_Q4_0: {
        const uint8_t *b = row + (c / 32) * Q4_0_BYTES;
        const int j = (int)(c % 32), q = b[2 + (j & 15)];
        return __fmul_rn((float)((j < 16 ? q & 15 : q >> 4) - 8), h2f(rd16(b)));
    }
    case LILAC_Q4_K:
    case LILAC_Q5_K: {
        const bool k5 = type == LILAC_Q5_K;
        const uint8_t *b = row + (c / 256) * (k5 ? Q5_K_BYTES : Q4_K_BYTES);
        const int i = (int)(c % 256), jj = i >> 6, hi = (i >> 5) & 1, l = i & 31, g = 2 * jj + hi;
        const uint8_t *s = b + 4;
        int sc, m;
        if (g < 4) {
            sc = s[g] & 63, m = s[g + 4] & 63;
        } else {
            sc = (s[g + 4] & 0xF) | ((s[g - 4] >> 6) << 4);
            m = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
        }
        int q = b[(k5 ? 48 : 16) + 32 * jj + l];
        q = hi ? q >> 4 : q & 15;
        if (k5 && (b[16 + l] >> g) & 1)
            q += 16;
        const float d1 = __fmul_rn(h2f(rd16(b)), (float)sc), m1 = __fmul_rn(h2f(rd16(b + 2)), (float)m);
        return __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
    case LILAC_Q6_K: {
        const uint8_t *b = row + (c / 256) * Q6_K_BYTES;
        const int i = (int)(c % 256), n = i >> 7, quarter = (i >> 5) & 3, l = i & 31, is = l >> 4;
        const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
        const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192 + 8 * n);
        const int lo = (quarter & 1) ? ql[l + 32] : ql[l];
        const int q = ((quarter & 2) ? lo >> 4 : lo & 15) | (((qh[l] >> (2 * quarter)) & 3) << 4);
        const float s = __fmul_rn(h2f(rd16(b + 208)), (float)sc[is + 2 * quarter]);
        return __fmul_rn(s, (float)(q - 32));
    }
    default: return __int_as_float(0x7fc00000);
    }
}

/* row . x over n values by one warp: lane l takes values l, l + 32, ... (dq_value's), then the warp's
 * shuffle tree; every lane gets the sum. */
static __device__ __forceinline__ float dq_warp_dot(int type, const uint8_t *row, const float *x, long long n)
{
    float acc = 0.f;
    for (long long c = threadIdx.x & 31; c < n; c += 32)
        acc = fmaf(dq_value(type, row, c), x[c], acc);
    for (int o = 16; o; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

#endif
