/* qfast: the fast CPU path for quantized weights. Each activation row is
 * quantized once per matrix product into 16-bit fixed point per block of
 * 32, split into two int8 terms, so the dot products run on integer
 * multiply-adds (AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw + vpmaddwd, NEON
 * sdot) instead of float FMAs over dequantized weights.
 *
 * Activation format, per block b of 32 values x[32b .. 32b + 32):
 *   d      = max|x| / 127                       (float32)
 *   Q[i]   = round(x[i] * 256 * 127 / max|x|)   a 16-bit integer, |Q| <= 32512;
 *            where Q = 128 (mod 256) it moves one step toward zero, so
 *            that both of its digits below stay within -127..127
 *   hi[i]  = floor((Q[i] + 128) / 256)          in -127..127
 *   lo[i]  = Q[i] - 256 * hi[i]                 in -127..127
 *   x[i]  ~= (d / 256) * Q[i] = d * hi[i] + (d / 256) * lo[i]
 *            error <= 1.5 * d / 256, and <= d / 512 but for the moved ones
 * (x = s1 * q1 + s2 * q2 with q2 the residual of q1, s2 = s1 / 256.)
 * Blocks with max|x| < LILAC_QX_TINY are all zero; a block holding a NaN or
 * an infinity has digits 0 and unit NaN, so that the products it enters
 * are NaN (as they would be, or infinite, on the precise path) rather than
 * quietly finite. Symmetric digits keep
 * the sign tricks exact (psignb, |-128| = 128 in vpmaddubsw) and the
 * 16-bit sums of vpmaddubsw from saturating.
 * The row stores hi[] and lo[] apart (contiguous runs for SIMD loads) in
 * the order of a layout the weight type picks (lilac_qx_layout), then per
 * block the unit d / 256, and the integer sums of Q over each 16 and each
 * 32 values (the K-quant minimums, the Q6_K offset of 32: sum w * Q with
 * w = a * q - b is a * sum q * Q - b * sum Q).
 *
 * Layouts: NATURAL stores value i at i. KQ (Q4_K, Q5_K) views each 256
 * values as a 4 x 4 matrix of 16-value pieces, piece (r, m) holding values
 * 64r + 16m .. 64r + 16m + 15, and stores it transposed: value
 * 64r + 16m + t at 64m + 16r + t. A K-quant super-block's 128 bytes of
 * nibbles, shuffled by 128-bit lanes, then line up with the four 64-byte
 * runs of activations so that each 32-bit lane of every run belongs to the
 * same weight group (lane l: group 2 (l / 4), low nibbles; 2 (l / 4) + 1,
 * high nibbles), and the integer sums of a whole super-block add up in
 * two registers before one float step.
 *
 * Why two terms (measured on the tiny fixtures and bench/kernels_bench,
 * see bench/README.md): one int8 term per 32 values (x ~= d * hi, error up
 * to max|x| / 254) is what llama.cpp does per 32 (Q8_0) or per 256 (Q8_K),
 * and lands where llama.cpp does: mean KL against the exact logits 1.3e-2
 * (Q8_0), 1.9e-2 (Q6_K), 3.8e-2 (Q4_K_M) on tiny-qwen35moe, 3.4e-3 and
 * 2.9e-2 on tiny-qwen3moe, five of seven files over the bound of half of
 * llama.cpp's KL. The second digit brings every file to ~5e-8 (2.8e-7 on
 * tiny-qwen3moe, whose float32 path is itself at 2.5e-7), for one more
 * integer multiply-add per weight: the AVX-512 Q4_K kernel is ~15 %
 * slower in cache (20.6 against 24.0 GB/s on one Zen 4 core) and no
 * slower from memory with two threads, where both are bound by bandwidth.
 *
 * Every dot product is sum_i w[i] * (unit * Q[i]) over n values (a whole
 * number of the weight type's blocks), w the weight exactly as the block
 * defines it (d * sc * q - dmin * m with unrounded products; the precise
 * path rounds d * sc * q and the subtraction in float32 as ggml does, a
 * difference of 2^-24 relative). Integer parts are exact in int32; the
 * float parts (per-group scales times integer sums) are summed in an
 * order each kernel chooses, so SIMD and scalar agree to float32 rounding
 * of the terms, not bit for bit. The quantization is bit for bit the
 * same in every version: one float32 product x * (127 / max|x| * 256),
 * rounded to nearest even, then integer steps. */
#ifndef LILAC_KERNELS_CPU_QFAST_H
#define LILAC_KERNELS_CPU_QFAST_H

#include <stddef.h>
#include <stdint.h>

#define LILAC_QX_BLOCK 32
#define LILAC_QX_TINY 1e-30f

enum {
    LILAC_QX_NATURAL = 0,
    LILAC_QX_KQ = 1, /* n a multiple of 256 */
};

/* One quantized activation row of n values (n a multiple of 32). */
typedef struct lilac_qx {
    int8_t *hi;     /* [n], in the layout's order */
    int8_t *lo;     /* [n] */
    float *unit;    /* [n / 32]: the unit of Q, block scale / 256 */
    int32_t *sum16; /* [n / 16]: sum of Q over each 16 values */
    int32_t *sum32; /* [n / 32]: and over each 32 */
    int layout;
} lilac_qx;

/* Where value i is stored in hi[] and lo[]. */
static inline int64_t lilac_qx_pos(int layout, int64_t i)
{
    if (layout != LILAC_QX_KQ)
        return i;
    int64_t s = i & 255;
    return (i - s) + ((s & 48) << 2) + ((s >> 6) << 4) + (s & 15);
}

/* The layout the fast dot of a weight type reads. */
int lilac_qx_layout(int type);

static inline size_t lilac_qx_round64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Bytes one row of n values takes in a buffer carved by lilac_qx_carve
 * (each array 64-byte aligned when the buffer is). */
static inline size_t lilac_qx_row_bytes(int64_t n)
{
    return 2 * lilac_qx_round64((size_t)n) + 2 * lilac_qx_round64((size_t)n / 32 * 4) +
           lilac_qx_round64((size_t)n / 16 * 4);
}

/* The row views of a buffer of lilac_qx_row_bytes(n) bytes. */
static inline lilac_qx lilac_qx_carve(void *buf, int64_t n, int layout)
{
    size_t a = lilac_qx_round64((size_t)n), g = lilac_qx_round64((size_t)n / 32 * 4);
    size_t g16 = lilac_qx_round64((size_t)n / 16 * 4);
    uint8_t *p = buf;
    lilac_qx q = {(int8_t *)p, (int8_t *)(p + a), (float *)(void *)(p + 2 * a), (int32_t *)(void *)(p + 2 * a + g),
                  (int32_t *)(void *)(p + 2 * a + g + g16), layout};
    return q;
}

/* Quantize x[0..n) into q in q->layout (n a multiple of 32, of 256 for KQ). */
typedef void (*lilac_qx_quantize_fn)(const float *x, int64_t n, const lilac_qx *q);
/* dot(weight row of a block type, quantized activations) over n values. */
typedef float (*lilac_qdot_fn)(const void *row, const lilac_qx *x, int64_t n);
/* The same for nt activation rows x[0 .. nt) at once, 1 <= nt <=
 * LILAC_QDOT_NT: out[t] is bit for bit the single-row dot of x[t] (the
 * same integer sums and float steps per row); each weight block is
 * decoded once for all nt. */
#define LILAC_QDOT_NT 4
typedef void (*lilac_qdotn_fn)(const void *row, const lilac_qx *x, int nt, int64_t n, float *out);

/* The scalar oracles: plain loops, integer sums per weight group, then
 * float32 scales. */
void lilac_qx_quantize_scalar(const float *x, int64_t n, const lilac_qx *q);
float lilac_qdot_q8_0_scalar(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_0_scalar(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_K_scalar(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q5_K_scalar(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q6_K_scalar(const void *row, const lilac_qx *x, int64_t n);
void lilac_qdotn_q4_K_scalar(const void *row, const lilac_qx *x, int nt, int64_t n, float *out);
void lilac_qdotn_q6_K_scalar(const void *row, const lilac_qx *x, int nt, int64_t n, float *out);

#if defined(LILAC_X86)
/* AVX2 (+ FMA, F16C): vpmaddubsw + vpmaddwd. */
void lilac_qx_quantize_avx2(const float *x, int64_t n, const lilac_qx *q);
float lilac_qdot_q8_0_avx2(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_0_avx2(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_K_avx2(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q5_K_avx2(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q6_K_avx2(const void *row, const lilac_qx *x, int64_t n);

/* AVX-512 F/BW/VL + VNNI: vpdpbusd. */
void lilac_qx_quantize_avx512(const float *x, int64_t n, const lilac_qx *q);
float lilac_qdot_q8_0_avx512(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_0_avx512(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_K_avx512(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q5_K_avx512(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q6_K_avx512(const void *row, const lilac_qx *x, int64_t n);
void lilac_qdotn_q4_K_avx512(const void *row, const lilac_qx *x, int nt, int64_t n, float *out);
void lilac_qdotn_q6_K_avx512(const void *row, const lilac_qx *x, int nt, int64_t n, float *out);
#endif

#if defined(__aarch64__)
/* NEON with the dot-product extension (ARMv8.2 sdot; every Apple M-series
 * core and most current ARM servers have it). */
void lilac_qx_quantize_neon(const float *x, int64_t n, const lilac_qx *q);
float lilac_qdot_q8_0_neon(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_0_neon(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q4_K_neon(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q5_K_neon(const void *row, const lilac_qx *x, int64_t n);
float lilac_qdot_q6_K_neon(const void *row, const lilac_qx *x, int64_t n);
#endif

#endif
