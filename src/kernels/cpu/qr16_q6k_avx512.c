/* qr16 Q6_K, AVX-512 (F, BW, VL, DQ) + VNNI (qr16.h). Lane r of every
 * register is row r. Per 16-column group: the three 64-byte weight
 * registers unpack to four chunk registers of q (0..63), each against 4
 * activation digit bytes broadcast to all lanes by vpdpbusd, hi and lo
 * apart: sum q * Q = (sum q * hi) * 256 + sum q * lo, less 32 * sum16 for
 * the offset, all exact in int32 (|sum (q - 32) Q| <= 16 * 32 * 32512 <
 * 2^24, so its conversion to float is exact too). The two groups of one
 * activation block of 32 are scaled by d * sc (exact: an f16 times an
 * int8) and summed, then times the block's unit into the row sums. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/qr16.h"
#include "kernels/cpu/qr16_avx512.h"

#define QR16_INLINE static inline __attribute__((always_inline))

/* The four chunk registers of group q (qr16.h): chunks 0..2 are bits 0..5
 * of the three registers; chunk 3 gathers their bits 6..7. The 16-bit
 * shifts drag bits of the neighbouring byte in, which the selects and the
 * final mask drop. */
QR16_INLINE void unpack(const uint8_t *q, __m512i c[4])
{
    const __m512i m3f = _mm512_set1_epi8(0x3F), m03 = _mm512_set1_epi8(0x03), m0f = _mm512_set1_epi8(0x0F);
    const __m512i r0 = _mm512_loadu_si512(q), r1 = _mm512_loadu_si512(q + 64), r2 = _mm512_loadu_si512(q + 128);
    c[0] = _mm512_and_si512(r0, m3f);
    c[1] = _mm512_and_si512(r1, m3f);
    c[2] = _mm512_and_si512(r2, m3f);
    /* 0xE4: c ? a : b (the first operand is overwritten: a temporary, not
     * a mask). Bits 0..1 from r0 >> 6, 2..3 from r1 >> 4, 4..5 from r2 >> 2 */
    __m512i t = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r0, 6), _mm512_srli_epi16(r1, 4), m03, 0xE4);
    t = _mm512_ternarylogic_epi32(t, _mm512_srli_epi16(r2, 2), m0f, 0xE4);
    c[3] = _mm512_and_si512(t, m3f);
}

/* The weights stream through once per call: ask for them 4 KB ahead,
 * non-temporally (as qfast_avx512.c). From memory (a 54 MB matrix, one
 * core) 15 -> 26 GB/s; in cache it costs ~3 %. T0, or 8 KB ahead, did
 * worse. */
#define QR16_AHEAD 4096

/* sum (q - 32) * Q of one group (its 16 columns at xh, xl) for all 16
 * rows; off = -32 * sum16 of the group, in every lane */
QR16_INLINE __m512i group_sum(const __m512i c[4], const int8_t *xh, const int8_t *xl, __m512i off)
{
    __m512i h = qr16_dp_bcast(_mm512_setzero_si512(), c[0], xh);
    __m512i l = qr16_dp_bcast(off, c[0], xl);
    h = qr16_dp_bcast(h, c[1], xh + 4);
    l = qr16_dp_bcast(l, c[1], xl + 4);
    h = qr16_dp_bcast(h, c[2], xh + 8);
    l = qr16_dp_bcast(l, c[2], xl + 8);
    h = qr16_dp_bcast(h, c[3], xh + 12);
    l = qr16_dp_bcast(l, c[3], xl + 12);
    return _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
}

/* Each token takes the same float steps whatever nt is: per block of 32,
 * (is0 * s0 + is1 * s1) * unit added to its row sums. */
QR16_INLINE void q6_kernel(const block_q6_Kx16 *b, const lilac_qx *x, int nt, int64_t n, float *out)
{
    __m512 acc[LILAC_QR16_NT];
    _Alignas(64) int32_t off[LILAC_QR16_NT][16];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b[i].d));
        /* -32 * sum16 of the 16 groups, for broadcasts from memory */
        for (int t = 0; t < nt; t++)
            _mm512_store_si512(off[t], _mm512_sub_epi32(_mm512_setzero_si512(),
                                                        _mm512_slli_epi32(_mm512_loadu_si512(x[t].sum16 + 16 * i), 5)));
        for (int p = 0; p < 8; p++) {
            /* 7 lines per pair of groups: the block's 3360 bytes over its 8 pairs */
            for (int o = 448 * p; o < 448 * (p + 1) && o < (int)sizeof *b; o += 64)
                _mm_prefetch((const char *)(b + i) + QR16_AHEAD + o, _MM_HINT_NTA);
            __m512i c0[4], c1[4];
            unpack(b[i].q[2 * p][0], c0);
            unpack(b[i].q[2 * p + 1][0], c1);
            const __m512 s0 = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[i].sc[2 * p]))), d);
            const __m512 s1 = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[i].sc[2 * p + 1]))), d);
            for (int t = 0; t < nt; t++) {
                const lilac_qx *xt = &x[t];
                const int64_t at = 256 * i + 32 * p;
                const __m512i is0 = group_sum(c0, xt->hi + at, xt->lo + at, _mm512_set1_epi32(off[t][2 * p]));
                const __m512i is1 =
                    group_sum(c1, xt->hi + at + 16, xt->lo + at + 16, _mm512_set1_epi32(off[t][2 * p + 1]));
                __m512 blk = _mm512_mul_ps(_mm512_cvtepi32_ps(is0), s0);
                blk = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is1), s1, blk);
                acc[t] = _mm512_fmadd_ps(blk, _mm512_set1_ps(xt->unit[at / 32]), acc[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(out + LILAC_QR16_ROWS * t, acc[t]);
}

void lilac_qr16_q6_K_avx512(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    switch (nt) {
    case 8: q6_kernel(w, x, 8, n, out); break;
    case 7: q6_kernel(w, x, 7, n, out); break;
    case 6: q6_kernel(w, x, 6, n, out); break;
    case 5: q6_kernel(w, x, 5, n, out); break;
    case 4: q6_kernel(w, x, 4, n, out); break;
    case 3: q6_kernel(w, x, 3, n, out); break;
    case 2: q6_kernel(w, x, 2, n, out); break;
    default: q6_kernel(w, x, 1, n, out); break;
    }
}
