/* dtype: tensor element types, numbered as ggml/GGUF number them so a GGUF
 * type id is a lilac_dtype as is. Block types store blck values in
 * type_size bytes; plain types have blck 1. */
#ifndef LILAC_FORMAT_DTYPE_H
#define LILAC_FORMAT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lilac_dtype {
    LILAC_F32 = 0,
    LILAC_F16 = 1,
    LILAC_Q4_0 = 2,
    LILAC_Q4_1 = 3,
    LILAC_Q5_0 = 6,
    LILAC_Q5_1 = 7,
    LILAC_Q8_0 = 8,
    LILAC_Q8_1 = 9,
    LILAC_Q2_K = 10,
    LILAC_Q3_K = 11,
    LILAC_Q4_K = 12,
    LILAC_Q5_K = 13,
    LILAC_Q6_K = 14,
    LILAC_Q8_K = 15,
    LILAC_IQ2_XXS = 16,
    LILAC_IQ2_XS = 17,
    LILAC_IQ3_XXS = 18,
    LILAC_IQ1_S = 19,
    LILAC_IQ4_NL = 20,
    LILAC_IQ3_S = 21,
    LILAC_IQ2_S = 22,
    LILAC_IQ4_XS = 23,
    LILAC_I8 = 24,
    LILAC_I16 = 25,
    LILAC_I32 = 26,
    LILAC_I64 = 27,
    LILAC_F64 = 28,
    LILAC_IQ1_M = 29,
    LILAC_BF16 = 30,
    LILAC_TQ1_0 = 34,
    LILAC_TQ2_0 = 35,
    LILAC_MXFP4 = 39,
    /* Not GGUF types: safetensors-only element types. */
    LILAC_U8 = 1000,
    LILAC_U16 = 1001,
    LILAC_U32 = 1002,
    LILAC_U64 = 1003,
    LILAC_BOOL = 1004,
    LILAC_F8_E4M3 = 1005,
    LILAC_F8_E5M2 = 1006,
    /* Not a file element type: a matrix of MLX affine-quantized weights
     * (packed uint32 codes with separate scales and biases; kernels/mat.h).
     * Its row size depends on the bits, so lilac_dtype_row_bytes is 0. */
    LILAC_MLX_AFFINE = 1100,
    /* Not file element types: Q4_K / Q6_K matrices repacked 16 rows at a
     * time for the fast CPU kernels (kernels/cpu/qr16.h); the same bytes
     * per row as the type they came from. */
    LILAC_Q4_K_R16 = 1101,
    LILAC_Q6_K_R16 = 1102,
} lilac_dtype;

typedef struct lilac_dtype_info {
    const char *name; /* "F32", "BF16", "Q4_K", ... */
    uint32_t blck;    /* values per block */
    uint32_t size;    /* bytes per block */
} lilac_dtype_info;

/* Traits of a type, or NULL for an id lilac does not know. */
const lilac_dtype_info *lilac_dtype_get(int type);

/* Bytes of a row of n values, or 0 when the type is unknown or n is not a
 * whole number of blocks. */
size_t lilac_dtype_row_bytes(int type, int64_t n);

#endif
