/* qr16: K-quant weights repacked 16 rows at a time for the fast CPU path.
 *
 * Why: the fast dot of one Q4_K row (qfast_*.c) spends most of its ~74
 * pipe-cycles per 256 weights on unpacking scales and regrouping sums, not
 * on the 8 integer multiply-adds. With 16 rows interleaved, each SIMD lane
 * holds one row: a 32-bit lane of vpdpbusd takes 4 consecutive weights of
 * its row against the same 4 activation bytes broadcast to every lane, so
 * the integer sum of a weight group for 16 rows lands in one register and
 * its scale is one multiply for all 16 (scales stored row-interleaved too).
 * No horizontal sums, no permutes, activations read as broadcasts.
 *
 * The model repacks at load (model/repack.c) every Q4_K / Q6_K matrix whose
 * rows are a multiple of 16 and columns a multiple of 256, when it runs on
 * the CPU's fast path and the kernel set has these kernels. A repacked
 * matrix has the same size as the original and every 16-row group the same
 * offset, so views into a stack of experts stay where they were; its
 * lilac_mat type becomes LILAC_Q4_K_R16 / LILAC_Q6_K_R16 (format/dtype.h),
 * row_bytes stays the original row's, and group g (rows 16g .. 16g + 15)
 * starts at data + 16 g row_bytes.
 *
 * Activations are the fast path's (qfast.h), in the NATURAL layout: the
 * same quantized row feeds both the one-row and the 16-row kernels, and
 * every product is sum_i w[i] * (unit * Q[i]) exactly as there; only the
 * order of float32 steps differs (so results agree with the one-row
 * oracle to float32 rounding, not bit for bit). */
#ifndef LILAC_KERNELS_CPU_QR16_H
#define LILAC_KERNELS_CPU_QR16_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/qfast.h"

#define LILAC_QR16_ROWS 16
/* Activation rows one kernel call takes at most. */
#define LILAC_QR16_NT 8

/* Q4_K, 16 rows x 256 columns (one super-block column of 16 rows), 2304
 * bytes = 16 x sizeof(block_q4_K). Row r's block is w = d * sc[g] * q -
 * dmin * m[g] per group g of 32 columns, q in 0..15 (as block_q4_K). */
typedef struct {
    uint16_t d[16];    /* f16, row r */
    uint16_t dmin[16]; /* f16 */
    /* the 12 packed scale bytes of row r's block_q4_K, as three 32-bit
     * words: word k of row r at scales[k][r] (so a load of scales[k] is
     * word k of all 16 rows, one per lane, ready for ggml's word trick) */
    uint32_t scales[3][16];
    /* qs[g][p]: group g (columns 32g .. 32g + 31), register p (0..3); byte
     * 4r + b holds q[r][32g + 4p + b] in its low nibble and
     * q[r][32g + 16 + 4p + b] in its high nibble. Low nibbles of register p
     * are the 4-column chunk p of the group, high nibbles chunk p + 4. */
    uint8_t qs[8][4][64];
} block_q4_Kx16;

/* Q6_K, 16 rows x 256 columns, 3360 bytes = 16 x sizeof(block_q6_K). Row
 * r's block is w = d * sc[g] * (q - 32) per group g of 16 columns, q in
 * 0..63 (as block_q6_K). */
typedef struct {
    uint16_t d[16];    /* f16, row r */
    int8_t sc[16][16]; /* sc[g][r] */
    /* q[g][k]: group g (columns 16g .. 16g + 15), register k (0..2); byte
     * 4r + b holds q[r][16g + 4k + b] (chunk k) whole in bits 0..5, and
     * bits 2k, 2k + 1 of q[r][16g + 12 + b] (chunk 3) in bits 6, 7. Three
     * chunks are then one AND each; chunk 3 is gathered from the three top
     * bit pairs (ql/qh nibble splits cost ~12 operations per group, this
     * 9). */
    uint8_t q[16][3][64];
} block_q6_Kx16;

/* 16 rows of n columns (n a multiple of 256), row r at src + r * row_bytes,
 * into n / 256 consecutive x16 blocks at dst. The inverse: unpack. */
void lilac_qr16_pack_q4_K(const void *src, size_t row_bytes, int64_t n, void *dst);
void lilac_qr16_unpack_q4_K(const void *src, int64_t n, void *dst, size_t row_bytes);
void lilac_qr16_pack_q6_K(const void *src, size_t row_bytes, int64_t n, void *dst);
void lilac_qr16_unpack_q6_K(const void *src, int64_t n, void *dst, size_t row_bytes);

/* out[t * 16 + r] = dot(row r of the 16-row group at w, x[t]) over n
 * columns, for t < nt (1 <= nt <= LILAC_QR16_NT); x in the NATURAL layout.
 * out[t * 16 + r] is bit for bit the same whatever nt is and whichever
 * other rows come with x[t] (the server's batched decode relies on it). */
typedef void (*lilac_qr16_fn)(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);

/* The scalar oracles: plain loops over the x16 layout, integer sums per
 * weight group, then float32 scales. */
void lilac_qr16_q4_K_scalar(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);
void lilac_qr16_q6_K_scalar(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);

#if defined(LILAC_X86)
void lilac_qr16_q4_K_avx2(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);
void lilac_qr16_q6_K_avx2(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);
void lilac_qr16_q4_K_avx512(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);
void lilac_qr16_q6_K_avx512(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);
#endif
#if defined(__aarch64__)
/* NEON + dotprod (qr16_neon.c): 4 registers of 4 rows, sdot by lane */
void lilac_qr16_q4_K_neon(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);
void lilac_qr16_q6_K_neon(const void *w, const lilac_qx *x, int nt, int64_t n, float *out);
#endif

#endif
