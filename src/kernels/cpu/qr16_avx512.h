/* What the AVX-512 16-row kernels (qr16_q4k_avx512.c, qr16_q6k_avx512.c)
 * share. Include only from files compiled for AVX-512 VNNI. */
#ifndef LILAC_KERNELS_CPU_QR16_AVX512_H
#define LILAC_KERNELS_CPU_QR16_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* acc + vpdpbusd(w, the 4 bytes at p in every lane), the bytes as an
 * embedded broadcast ({1to16}): GCC 12 does not fold
 * _mm512_set1_epi32(load) into the instruction (clang does) and leaves a
 * separate vpbroadcastd per product. */
static inline __attribute__((always_inline)) __m512i qr16_dp_bcast(__m512i acc, __m512i w, const int8_t *p)
{
#if defined(__GNUC__) && !defined(__clang__)
    typedef int32_t __attribute__((may_alias, aligned(1))) i32u;
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const i32u *)(const void *)p));
    return acc;
#else
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(v));
#endif
}

#endif
