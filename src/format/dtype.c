#include "format/dtype.h"

#include <stddef.h>

static const struct {
    int id;
    lilac_dtype_info info;
} table[] = {
    {LILAC_F32, {"F32", 1, 4}},          {LILAC_F16, {"F16", 1, 2}},
    {LILAC_Q4_0, {"Q4_0", 32, 18}},      {LILAC_Q4_1, {"Q4_1", 32, 20}},
    {LILAC_Q5_0, {"Q5_0", 32, 22}},      {LILAC_Q5_1, {"Q5_1", 32, 24}},
    {LILAC_Q8_0, {"Q8_0", 32, 34}},      {LILAC_Q8_1, {"Q8_1", 32, 36}},
    {LILAC_Q2_K, {"Q2_K", 256, 84}},     {LILAC_Q3_K, {"Q3_K", 256, 110}},
    {LILAC_Q4_K, {"Q4_K", 256, 144}},    {LILAC_Q5_K, {"Q5_K", 256, 176}},
    {LILAC_Q6_K, {"Q6_K", 256, 210}},    {LILAC_Q8_K, {"Q8_K", 256, 292}},
    {LILAC_IQ2_XXS, {"IQ2_XXS", 256, 66}}, {LILAC_IQ2_XS, {"IQ2_XS", 256, 74}},
    {LILAC_IQ3_XXS, {"IQ3_XXS", 256, 98}}, {LILAC_IQ1_S, {"IQ1_S", 256, 50}},
    {LILAC_IQ4_NL, {"IQ4_NL", 32, 18}},  {LILAC_IQ3_S, {"IQ3_S", 256, 110}},
    {LILAC_IQ2_S, {"IQ2_S", 256, 82}},   {LILAC_IQ4_XS, {"IQ4_XS", 256, 136}},
    {LILAC_I8, {"I8", 1, 1}},            {LILAC_I16, {"I16", 1, 2}},
    {LILAC_I32, {"I32", 1, 4}},          {LILAC_I64, {"I64", 1, 8}},
    {LILAC_F64, {"F64", 1, 8}},          {LILAC_IQ1_M, {"IQ1_M", 256, 56}},
    {LILAC_BF16, {"BF16", 1, 2}},        {LILAC_TQ1_0, {"TQ1_0", 256, 54}},
    {LILAC_TQ2_0, {"TQ2_0", 256, 66}},   {LILAC_MXFP4, {"MXFP4", 32, 17}},
    {LILAC_U8, {"U8", 1, 1}},            {LILAC_U16, {"U16", 1, 2}},
    {LILAC_U32, {"U32", 1, 4}},          {LILAC_U64, {"U64", 1, 8}},
    {LILAC_BOOL, {"BOOL", 1, 1}},        {LILAC_F8_E4M3, {"F8_E4M3", 1, 1}},
    {LILAC_F8_E5M2, {"F8_E5M2", 1, 1}},
    {LILAC_MLX_AFFINE, {"MLX_AFFINE", 1, 0}}, /* size 0: row bytes depend on the bits */
    {LILAC_Q4_K_R16, {"Q4_K_R16", 256, 144}}, {LILAC_Q6_K_R16, {"Q6_K_R16", 256, 210}},
};

const lilac_dtype_info *lilac_dtype_get(int type)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].id == type)
            return &table[i].info;
    return NULL;
}

size_t lilac_dtype_row_bytes(int type, int64_t n)
{
    const lilac_dtype_info *t = lilac_dtype_get(type);
    if (!t || t->size == 0 || n < 0 || n % t->blck != 0)
        return 0;
    return (size_t)(n / t->blck) * t->size;
}
