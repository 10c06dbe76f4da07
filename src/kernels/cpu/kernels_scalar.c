/* The scalar kernels: plain loops, the oracle every faster version is
 * tested against. */
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"

float lilac_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v = {bits};
    return v.f;
}

static float dot_f32(const void *row, const float *x, int64_t n)
{
    const float *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += w[i] * x[i];
    return s;
}

static float dot_f16(const void *row, const float *x, int64_t n)
{
    const uint16_t *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += lilac_f16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_bf16(const void *row, const float *x, int64_t n)
{
    const uint16_t *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += lilac_bf16_to_f32(w[i]) * x[i];
    return s;
}

void lilac_axpy_f32_scalar(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

const lilac_cpu_kernels lilac_cpu_scalar = {
    .name = "scalar",
    .dot_f32 = dot_f32,
    .axpy_f32 = lilac_axpy_f32_scalar,
    .attn_f32 = lilac_attn_f32_scalar,
    .attn_f16 = lilac_attn_f16_scalar,
    .gemm_f32 = lilac_gemm_f32_scalar,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = lilac_dot_q8_0_scalar,
    .dot_q4_0 = lilac_dot_q4_0_scalar,
    .dot_q4_K = lilac_dot_q4_K_scalar,
    .dot_q5_K = lilac_dot_q5_K_scalar,
    .dot_q6_K = lilac_dot_q6_K_scalar,
    .qx_quantize = lilac_qx_quantize_scalar,
    .qr16_q4_K = lilac_qr16_q4_K_scalar,
    .qr16_q6_K = lilac_qr16_q6_K_scalar,
    .qdot_q8_0 = lilac_qdot_q8_0_scalar,
    .qdot_q4_0 = lilac_qdot_q4_0_scalar,
    .qdot_q4_K = lilac_qdot_q4_K_scalar,
    .qdot_q5_K = lilac_qdot_q5_K_scalar,
    .qdot_q6_K = lilac_qdot_q6_K_scalar,
    .qdotn_q4_K = lilac_qdotn_q4_K_scalar,
    .qdotn_q6_K = lilac_qdotn_q6_K_scalar,
};

void lilac_row_to_f32(int type, const void *row, float *out, int64_t n)
{
    const uint16_t *h = row;
    switch (type) {
    case LILAC_F32:
        memcpy(out, row, (size_t)n * sizeof(float));
        break;
    case LILAC_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = lilac_f16_to_f32(h[i]);
        break;
    case LILAC_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = lilac_bf16_to_f32(h[i]);
        break;
    case LILAC_Q8_0: lilac_dequant_q8_0(row, out, n); break;
    case LILAC_Q4_0: lilac_dequant_q4_0(row, out, n); break;
    case LILAC_Q4_K: lilac_dequant_q4_K(row, out, n); break;
    case LILAC_Q5_K: lilac_dequant_q5_K(row, out, n); break;
    case LILAC_Q6_K: lilac_dequant_q6_K(row, out, n); break;
    default: /* callers check lilac_cpu_type_supported at load */
        memset(out, 0, (size_t)n * sizeof(float));
        break;
    }
}
