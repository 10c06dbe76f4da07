/* quantize: float32 rows to GGUF element types, bit for bit as llama.cpp's
 * reference quantizers write them (ggml-quants.c quantize_row_*_ref: what
 * llama-quantize uses when it has no importance matrix). Scalar: this is
 * the path of `lilac quantize`, not of inference.
 *
 * Every function takes n values (a whole number of the type's blocks) and
 * writes lilac_dtype_row_bytes(type, n) bytes. They return true when the
 * row is faithfully represented; false when an input value is not finite
 * or a block's float16 scale would overflow (values beyond what the type
 * can hold: llama.cpp refuses such rows). Even then the output holds only
 * finite numbers: such a scale is saturated at the largest float16. */
#ifndef LILAC_KERNELS_CPU_QUANTIZE_H
#define LILAC_KERNELS_CPU_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/pool.h"

/* float32 -> IEEE half, round to nearest even (ggml's fp32_to_fp16; NaN
 * becomes 0x7E00). */
uint16_t lilac_f32_to_f16(float f);
/* float32 -> bfloat16, round to nearest even, NaN kept quiet (ggml's and
 * gguf-py's). */
uint16_t lilac_f32_to_bf16(float f);

bool lilac_quantize_row_f32(const float *x, void *y, int64_t n);
bool lilac_quantize_row_f16(const float *x, void *y, int64_t n);
bool lilac_quantize_row_bf16(const float *x, void *y, int64_t n);
bool lilac_quantize_row_q8_0(const float *x, void *y, int64_t n);
bool lilac_quantize_row_q4_0(const float *x, void *y, int64_t n);
bool lilac_quantize_row_q5_0(const float *x, void *y, int64_t n);
bool lilac_quantize_row_q5_1(const float *x, void *y, int64_t n);
bool lilac_quantize_row_q4_K(const float *x, void *y, int64_t n);
bool lilac_quantize_row_q5_K(const float *x, void *y, int64_t n);
bool lilac_quantize_row_q6_K(const float *x, void *y, int64_t n);

/* The quantizer of a type (a lilac_dtype), or NULL when there is none. */
typedef bool (*lilac_quantize_fn)(const float *x, void *y, int64_t n);
lilac_quantize_fn lilac_quantizer_for(int type);

/* n_rows rows of n values each (one after another in x) into y (rows of
 * lilac_dtype_row_bytes(type, n) bytes), split over the pool's threads;
 * pool may be NULL. The bytes do not depend on the split. Returns whether
 * every row was faithfully represented; type must have a quantizer. */
bool lilac_quantize_rows(lilac_pool *pool, int type, const float *x, void *y, int64_t n_rows, int64_t n);

#endif
