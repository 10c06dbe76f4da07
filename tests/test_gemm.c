/* The small float32 gemm (kernels/cpu/gemm.h): every set this CPU runs
 * against a double-precision product, at sizes around the SIMD tiles' edges
 * (rows 1-9, 13, 64, 65; columns 1-17, 31-33, 64, 128, 130; depths 0, 1,
 * 7, 64, 128, 131), with row strides wider than the rows, in both modes.
 * The bound is the classical one for a float32 dot product of K terms
 * plus the starting value: |err| <= gamma_{K+1} (|C0| + sum_p |a_ip b_pj|),
 * gamma_n = n u / (1 - n u), u = 2^-24 (fused or not). The padding of A
 * and B holds NaN (reading it would show), C's padding a sentinel that
 * must stay. The scalar set is also checked bit for bit against a plain
 * i-j-p loop (it must sum in k order, as documented). */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "testutil.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

#define SENTINEL 12345.0f

static void check_one(const lilac_cpu_kernels *kern, int M, int N, int K, bool acc, double *worst)
{
    int64_t lda = K + 3, ldb = N + 5, ldc = N + 7;
    size_t na = (size_t)M * lda + 1, nb = (size_t)K * ldb + 1, nc = (size_t)M * ldc + 1;
    float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
    float *C = malloc(nc * sizeof(float)), *C0 = malloc(nc * sizeof(float));
    for (size_t i = 0; i < na; i++)
        A[i] = NAN;
    for (size_t i = 0; i < nb; i++)
        B[i] = NAN;
    for (int i = 0; i < M; i++)
        for (int p = 0; p < K; p++)
            A[i * lda + p] = frand() * 2.0f;
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++)
            B[p * ldb + j] = frand() * 3.0f;
    for (size_t i = 0; i < nc; i++)
        C0[i] = SENTINEL;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C0[i * ldc + j] = acc ? frand() * 5.0f : NAN; /* overwrite mode must not read C */
    memcpy(C, C0, nc * sizeof(float));
    kern->gemm_f32(M, N, K, A, lda, B, ldb, C, ldc, acc);

    const double u = 0x1p-24, gam = (K + 1) * u / (1 - (K + 1) * u);
    int bad = 0, pad = 0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double c0 = acc ? C0[i * ldc + j] : 0.0, s = c0, mag = fabs(c0);
            for (int p = 0; p < K; p++) {
                double t = (double)A[i * lda + p] * B[p * ldb + j];
                s += t;
                mag += fabs(t);
            }
            double err = fabs((double)C[i * ldc + j] - s), bound = gam * mag;
            if (!(err <= bound)) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s %dx%dx%d acc=%d: C[%d][%d] = %.9g, exact %.9g, bound %.3g\n", kern->name,
                            M, N, K, acc, i, j, C[i * ldc + j], s, bound);
            } else if (bound > 0 && err / bound > *worst) {
                *worst = err / bound;
            }
        }
        for (int64_t j = N; j < ldc && (size_t)(i * ldc + j) < nc; j++)
            pad += C[i * ldc + j] != SENTINEL;
    }
    CHECKF(bad == 0, "%s gemm %dx%dx%d acc=%d: %d elements out of bound", kern->name, M, N, K, acc, bad);
    CHECKF(pad == 0, "%s gemm %dx%dx%d acc=%d: wrote %d padding floats of C", kern->name, M, N, K, acc, pad);

    if (kern == &lilac_cpu_scalar) { /* the documented order, bit for bit */
        int diff = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float s = acc ? C0[i * ldc + j] : 0.0f;
                for (int p = 0; p < K; p++)
                    s += A[i * lda + p] * B[p * ldb + j];
                diff += memcmp(&s, &C[i * ldc + j], sizeof s) != 0;
            }
        CHECKF(diff == 0, "scalar gemm %dx%dx%d acc=%d: %d elements differ from the plain loop", M, N, K, acc,
               diff);
    }
    free(A), free(B), free(C), free(C0);
}

static void test_set(const lilac_cpu_kernels *kern)
{
    static const int Ms[] = {1, 2, 3, 5, 6, 7, 8, 9, 13, 64, 65};
    static const int Ns[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 128, 130};
    static const int Ks[] = {0, 1, 7, 64, 128, 131};
    double worst = 0;
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
            for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
                for (int acc = 0; acc < 2; acc++)
                    check_one(kern, Ms[a], Ns[b], Ks[c], acc, &worst);
    printf("%s: gemm within the bound, worst error %.3f of it\n", kern->name, worst);
}

int main(void)
{
    test_set(&lilac_cpu_scalar);
#if defined(LILAC_X86)
    const lilac_cpu_kernels *simd[] = {&lilac_cpu_avx2, &lilac_cpu_avx512};
    for (int i = 0; i < 2; i++) {
        if (lilac_cpu_runs(simd[i]))
            test_set(simd[i]);
        else
            printf("SKIP (part): this CPU cannot run the %s kernels\n", simd[i]->name);
    }
#endif
#if defined(__aarch64__)
    if (lilac_cpu_runs(&lilac_cpu_neon))
        test_set(&lilac_cpu_neon);
#endif
    TEST_END();
}
