/* Q4_K, 16 rows interleaved (qr16.h), AVX-512 F/BW/VL/DQ + VNNI.
 *
 * Lane r of every register is row r. Per 32-column group, four 64-byte
 * loads give the 16 rows' nibbles of 8 four-column chunks (low nibbles:
 * chunks 0..3, high: 4..7); each chunk's 4 activation digits are one
 * 32-bit broadcast from memory, so one vpdpbusd adds a chunk's 4
 * products to all 16 rows. Two chains per group, one per digit (hi, lo),
 * meet as (H << 8) + L = sum q * Q, exact. The float steps per row and
 * token are the scalar oracle's (qr16_q4k.c), in its order. */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/qr16.h"
#include "kernels/cpu/qr16_avx512.h"
#include "kernels/cpu/quant.h"

#define QR16_INLINE static inline __attribute__((always_inline))

/* vpshufb control: byte k of each 32-bit lane, zero-extended */
static inline __m512i byte_k(int k)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi32((int)(0x80808000u | (uint32_t)k), (int)(0x80808004u + (uint32_t)k),
                                                 (int)(0x80808008u + (uint32_t)k), (int)(0x8080800Cu + (uint32_t)k)));
}

QR16_INLINE void qr16_q4k(const block_q4_Kx16 *blk, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), k1 = _mm512_set1_epi8(0x3F), k30 = _mm512_set1_epi8(0x30);
    const __m512i bk0 = byte_k(0), bk1 = byte_k(1), bk2 = byte_k(2), bk3 = byte_k(3);
    __m512 acc[LILAC_QR16_NT];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const block_q4_Kx16 *b = &blk[i];
        /* ggml's word trick on 16 rows at once: bytes of sc03/sc47 are the
         * scales of groups 0..3 / 4..7, of m03/m47 the mins */
        const __m512i s0 = _mm512_loadu_si512(b->scales[0]), s1 = _mm512_loadu_si512(b->scales[1]),
                      s2 = _mm512_loadu_si512(b->scales[2]);
        const __m512i sc03 = _mm512_and_si512(s0, k1), m03 = _mm512_and_si512(s1, k1);
        const __m512i sc47 =
            _mm512_or_si512(_mm512_and_si512(s2, m4), _mm512_and_si512(_mm512_srli_epi32(s0, 2), k30));
        const __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), m4),
                                            _mm512_and_si512(_mm512_srli_epi32(s1, 2), k30));
        const __m512i bk[4] = {bk0, bk1, bk2, bk3};
        __m512 scf[8], mf[8];
        for (int g = 0; g < 4; g++) {
            scf[g] = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(sc03, bk[g]));
            scf[g + 4] = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(sc47, bk[g]));
            mf[g] = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(m03, bk[g]));
            mf[g + 4] = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(m47, bk[g]));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->dmin));

        __m512 a[LILAC_QR16_NT];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            a[t] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i wl[4], wh[4];
            for (int p = 0; p < 4; p++) {
                const __m512i v = _mm512_loadu_si512(b->qs[g][p]);
                wl[p] = _mm512_and_si512(v, m4);
                wh[p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
#pragma GCC unroll 8 /* every token's sum in a register: rolled, a[] lived on the stack */
            for (int t = 0; t < nt; t++) {
                const int8_t *xh = x[t].hi + 256 * i + 32 * g, *xl = x[t].lo + 256 * i + 32 * g;
                __m512i H = _mm512_setzero_si512(), L = _mm512_setzero_si512();
                for (int p = 0; p < 4; p++) {
                    H = qr16_dp_bcast(H, wl[p], xh + 4 * p);
                    L = qr16_dp_bcast(L, wl[p], xl + 4 * p);
                    H = qr16_dp_bcast(H, wh[p], xh + 16 + 4 * p);
                    L = qr16_dp_bcast(L, wh[p], xl + 16 + 4 * p);
                }
                const __m512i S = _mm512_add_epi32(_mm512_slli_epi32(H, 8), L);
                const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(S), _mm512_set1_ps(x[t].unit[8 * i + g]));
                a[t] = _mm512_fmadd_ps(scf[g], f, a[t]);
            }
        }
        for (int t = 0; t < nt; t++) {
            /* the minimums: unit * sum32 per group, as the oracle rounds it */
            float c[8];
            _mm256_storeu_ps(c, _mm256_mul_ps(_mm256_loadu_ps(x[t].unit + 8 * i),
                                              _mm256_cvtepi32_ps(_mm256_loadu_si256(
                                                  (const __m256i *)(const void *)(x[t].sum32 + 8 * i)))));
            __m512 bm = _mm512_setzero_ps();
            for (int g = 0; g < 8; g++)
                bm = _mm512_fmadd_ps(mf[g], _mm512_set1_ps(c[g]), bm);
            acc[t] = _mm512_fmadd_ps(d, a[t], acc[t]);
            acc[t] = _mm512_fnmadd_ps(dmin, bm, acc[t]);
        }
    }
    for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(out + LILAC_QR16_ROWS * t, acc[t]);
}

/* one copy per nt, each with its loops unrolled */
#define QR16_NT(k)                                                                                          \
    static __attribute__((noinline)) void qr16_q4k_nt##k(const block_q4_Kx16 *b, const lilac_qx *x, int64_t n, \
                                                         float *out)                                        \
    {                                                                                                       \
        qr16_q4k(b, x, k, n, out);                                                                          \
    }
QR16_NT(1)
QR16_NT(2)
QR16_NT(3)
QR16_NT(4)
QR16_NT(5)
QR16_NT(6)
QR16_NT(7)
QR16_NT(8)
#undef QR16_NT

void lilac_qr16_q4_K_avx512(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    static void (*const fns[LILAC_QR16_NT])(const block_q4_Kx16 *, const lilac_qx *, int64_t, float *) = {
        qr16_q4k_nt1, qr16_q4k_nt2, qr16_q4k_nt3, qr16_q4k_nt4,
        qr16_q4k_nt5, qr16_q4k_nt6, qr16_q4k_nt7, qr16_q4k_nt8};
    fns[(nt < 1 ? 1 : nt > LILAC_QR16_NT ? LILAC_QR16_NT : nt) - 1](w, x, n, out);
}
