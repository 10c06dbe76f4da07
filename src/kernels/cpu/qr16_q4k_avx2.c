/* Q4_K, 16 rows interleaved (qr16.h), AVX2 + FMA + F16C.
 *
 * The AVX-512 kernel's scheme on 8 rows at a time (the two 32-byte halves
 * of each 64-byte register of the layout): vpmaddubsw multiplies a lane's
 * 4 weights of a chunk by the chunk's 4 activation digits, broadcast, into
 * two 16-bit pair sums; the 8 chunks of a group add up in 16 bits (each
 * pair sum is at most 2 * 15 * 127, so 8 of them stay below 32767), and
 * one vpmaddwd per digit widens them, by 256 for hi and 1 for lo, to the
 * exact sum q * Q. The float steps per row and token are the scalar
 * oracle's (qr16_q4k.c), in its order. */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/qr16.h"
#include "kernels/cpu/quant.h"

#define QR16_INLINE static inline __attribute__((always_inline))

QR16_INLINE __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* vpshufb control: byte k of each 32-bit lane, zero-extended */
static inline __m256i byte_k(int k)
{
    const __m128i c = _mm_setr_epi32((int)(0x80808000u | (uint32_t)k), (int)(0x80808004u + (uint32_t)k),
                                     (int)(0x80808008u + (uint32_t)k), (int)(0x8080800Cu + (uint32_t)k));
    return _mm256_broadcastsi128_si256(c);
}

/* sum over the 8 chunks of a group of q * digit, as 16-bit pair sums */
QR16_INLINE __m256i chunks8(const __m256i wl[4], const __m256i wh[4], const int8_t *xd)
{
    __m256i s[4];
    for (int p = 0; p < 4; p++)
        s[p] = _mm256_add_epi16(_mm256_maddubs_epi16(wl[p], bcast4(xd + 4 * p)),
                                _mm256_maddubs_epi16(wh[p], bcast4(xd + 16 + 4 * p)));
    return _mm256_add_epi16(_mm256_add_epi16(s[0], s[1]), _mm256_add_epi16(s[2], s[3]));
}

QR16_INLINE void qr16_q4k(const block_q4_Kx16 *blk, const lilac_qx *x, int nt, int64_t n, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), k1 = _mm256_set1_epi8(0x3F), k30 = _mm256_set1_epi8(0x30);
    const __m256i w256 = _mm256_set1_epi16(256), w1 = _mm256_set1_epi16(1);
    const __m256i bk[4] = {byte_k(0), byte_k(1), byte_k(2), byte_k(3)};
    float accs[LILAC_QR16_NT][LILAC_QR16_ROWS];
    memset(accs, 0, sizeof accs);
    for (int64_t i = 0; i < n / LILAC_QK_K; i++) {
        const block_q4_Kx16 *b = &blk[i];
        float c[LILAC_QR16_NT][8]; /* unit * sum32 per group, as the oracle rounds it */
        for (int t = 0; t < nt; t++)
            _mm256_storeu_ps(c[t], _mm256_mul_ps(_mm256_loadu_ps(x[t].unit + 8 * i),
                                                 _mm256_cvtepi32_ps(_mm256_loadu_si256(
                                                     (const __m256i *)(const void *)(x[t].sum32 + 8 * i)))));
        for (int h = 0; h < 2; h++) { /* rows 8h .. 8h + 7 */
            const __m256i s0 = _mm256_loadu_si256((const __m256i *)(const void *)(b->scales[0] + 8 * h));
            const __m256i s1 = _mm256_loadu_si256((const __m256i *)(const void *)(b->scales[1] + 8 * h));
            const __m256i s2 = _mm256_loadu_si256((const __m256i *)(const void *)(b->scales[2] + 8 * h));
            const __m256i sc03 = _mm256_and_si256(s0, k1), m03 = _mm256_and_si256(s1, k1);
            const __m256i sc47 =
                _mm256_or_si256(_mm256_and_si256(s2, m4), _mm256_and_si256(_mm256_srli_epi32(s0, 2), k30));
            const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, 4), m4),
                                                _mm256_and_si256(_mm256_srli_epi32(s1, 2), k30));
            __m256 scf[8], mf[8];
            for (int g = 0; g < 4; g++) {
                scf[g] = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(sc03, bk[g]));
                scf[g + 4] = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(sc47, bk[g]));
                mf[g] = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(m03, bk[g]));
                mf[g + 4] = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(m47, bk[g]));
            }
            __m256 a[LILAC_QR16_NT];
            for (int t = 0; t < nt; t++)
                a[t] = _mm256_setzero_ps();
            for (int g = 0; g < 8; g++) {
                __m256i wl[4], wh[4];
                for (int p = 0; p < 4; p++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(b->qs[g][p] + 32 * h));
                    wl[p] = _mm256_and_si256(v, m4);
                    wh[p] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
                for (int t = 0; t < nt; t++) {
                    const int64_t at = 256 * i + 32 * g;
                    const __m256i H = _mm256_madd_epi16(chunks8(wl, wh, x[t].hi + at), w256);
                    const __m256i L = _mm256_madd_epi16(chunks8(wl, wh, x[t].lo + at), w1);
                    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(H, L)),
                                                   _mm256_set1_ps(x[t].unit[8 * i + g]));
                    a[t] = _mm256_fmadd_ps(scf[g], f, a[t]);
                }
            }
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b->d + 8 * h)));
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b->dmin + 8 * h)));
            for (int t = 0; t < nt; t++) {
                __m256 bm = _mm256_setzero_ps();
                for (int g = 0; g < 8; g++)
                    bm = _mm256_fmadd_ps(mf[g], _mm256_set1_ps(c[t][g]), bm);
                __m256 acc = _mm256_loadu_ps(accs[t] + 8 * h);
                acc = _mm256_fmadd_ps(d, a[t], acc);
                acc = _mm256_fnmadd_ps(dmin, bm, acc);
                _mm256_storeu_ps(accs[t] + 8 * h, acc);
            }
        }
    }
    for (int t = 0; t < nt; t++)
        memcpy(out + LILAC_QR16_ROWS * t, accs[t], sizeof accs[t]);
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

void lilac_qr16_q4_K_avx2(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
{
    static void (*const fns[LILAC_QR16_NT])(const block_q4_Kx16 *, const lilac_qx *, int64_t, float *) = {
        qr16_q4k_nt1, qr16_q4k_nt2, qr16_q4k_nt3, qr16_q4k_nt4,
        qr16_q4k_nt5, qr16_q4k_nt6, qr16_q4k_nt7, qr16_q4k_nt8};
    fns[(nt < 1 ? 1 : nt > LILAC_QR16_NT ? LILAC_QR16_NT : nt) - 1](w, x, n, out);
}
