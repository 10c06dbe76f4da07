/* qr16 Q6_K, AVX2 + FMA + F16C (qr16.h). Per 16-column group: vpmaddubsw of q (0..63) against a digit (-127..127)
 * gives 16-bit pair sums of at most 2 * 63 * 127 = 16002, so two chunks
 * add in 16 bits without saturating (32004); vpmaddwd by 256 (hi) or 1
 * (lo) widens them to the exact int32 sum q * Q, less 32 * sum16 for the
 * offset. Then one float step per group: times d * sc * unit. A ymm
 * holds 8 rows: each group is done as two halves (rows 0..7, 8..15). */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/qr16.h"

#define QR16_INLINE static inline __attribute__((always_inline))

static inline int32_t load32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The four chunk registers of half a group (q already at the half):
 * chunks 0..2 are bits 0..5 of the three registers, chunk 3 their bits
 * 6..7 (the 16-bit shifts' stray bits are masked off). */
QR16_INLINE void unpack(const uint8_t *q, __m256i c[4])
{
    const __m256i m3f = _mm256_set1_epi8(0x3F);
    const __m256i r0 = _mm256_loadu_si256((const __m256i *)q), r1 = _mm256_loadu_si256((const __m256i *)(q + 64)),
                  r2 = _mm256_loadu_si256((const __m256i *)(q + 128));
    c[0] = _mm256_and_si256(r0, m3f);
    c[1] = _mm256_and_si256(r1, m3f);
    c[2] = _mm256_and_si256(r2, m3f);
    const __m256i a = _mm256_and_si256(_mm256_srli_epi16(r0, 6), _mm256_set1_epi8(0x03));
    const __m256i b = _mm256_and_si256(_mm256_srli_epi16(r1, 4), _mm256_set1_epi8(0x0C));
    const __m256i e = _mm256_and_si256(_mm256_srli_epi16(r2, 2), _mm256_set1_epi8(0x30));
    c[3] = _mm256_or_si256(_mm256_or_si256(a, b), e);
}

/* As qr16_q6k_avx512.c: the weights 4 KB ahead, non-temporally. */
#define QR16_AHEAD 4096

static inline __m256i bcast(const int8_t *p) { return _mm256_set1_epi32(load32(p)); }

/* sum (q - 32) * Q of one group (16 columns at xh, xl) for 8 rows */
QR16_INLINE __m256i group_sum(const __m256i c[4], const int8_t *xh, const int8_t *xl, int32_t sum16)
{
    const __m256i k256 = _mm256_set1_epi16(256), k1 = _mm256_set1_epi16(1);
    const __m256i h01 = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], bcast(xh)), _mm256_maddubs_epi16(c[1], bcast(xh + 4)));
    const __m256i h23 =
        _mm256_add_epi16(_mm256_maddubs_epi16(c[2], bcast(xh + 8)), _mm256_maddubs_epi16(c[3], bcast(xh + 12)));
    const __m256i l01 = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], bcast(xl)), _mm256_maddubs_epi16(c[1], bcast(xl + 4)));
    const __m256i l23 =
        _mm256_add_epi16(_mm256_maddubs_epi16(c[2], bcast(xl + 8)), _mm256_maddubs_epi16(c[3], bcast(xl + 12)));
    const __m256i h = _mm256_add_epi32(_mm256_madd_epi16(h01, k256), _mm256_madd_epi16(h23, k256));
    const __m256i l = _mm256_add_epi32(_mm256_madd_epi16(l01, k1), _mm256_madd_epi16(l23, k1));
    return _mm256_add_epi32(_mm256_add_epi32(h, l), _mm256_set1_epi32(-32 * sum16));
}

/* One pass over the weights, both halves of each group in turn. Two
 * passes of half the rows each (all 8 tokens' row sums of a half in
 * registers) read every line twice: from memory 10 against 16 GB/s for
 * the one-row kernel, 20 GB/s this way; but here the 16 row sums of 4 or
 * more tokens spill (in cache, 25 against 20 cycles per token and 256
 * weights at nt = 4), and alternating halves over short spans lost the
 * prefetched lines. */
QR16_INLINE void q6_kernel(const block_q6_Kx16 *b, const lilac_qx *x, int nt, int64_t n, float *out)
{
    __m256 acc[2][LILAC_QR16_NT];
    for (int t = 0; t < nt; t++)
        acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b[i].d));
        const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b[i].d + 8)));
        for (int g = 0; g < 16; g++) {
            /* 4 lines per group: the block's 3360 bytes over its 16 groups */
            for (int o = 256 * g; o < 256 * (g + 1) && o < (int)sizeof *b; o += 64)
                _mm_prefetch((const char *)(b + i) + QR16_AHEAD + o, _MM_HINT_NTA);
            for (int half = 0; half < 2; half++) {
                __m256i c[4];
                unpack(b[i].q[g][0] + 32 * half, c);
                const __m128i sc8 = _mm_loadl_epi64((const __m128i *)(b[i].sc[g] + 8 * half));
                const __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)), half ? d1 : d0);
                for (int t = 0; t < nt; t++) {
                    const lilac_qx *xt = &x[t];
                    const int64_t at = 256 * i + 16 * g;
                    const __m256i is = group_sum(c, xt->hi + at, xt->lo + at, xt->sum16[at / 16]);
                    const __m256 f = _mm256_mul_ps(s, _mm256_set1_ps(xt->unit[at / 32]));
                    acc[half][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), f, acc[half][t]);
                }
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        _mm256_storeu_ps(out + LILAC_QR16_ROWS * t, acc[0][t]);
        _mm256_storeu_ps(out + LILAC_QR16_ROWS * t + 8, acc[1][t]);
    }
}

void lilac_qr16_q6_K_avx2(const void *w, const lilac_qx *x, int nt, int64_t n, float *out)
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
