/* The GGUF block types: the scalar dequantizers against llama.cpp's own
 * decoding of real tensors (bit for bit), the scalar dot products against
 * float64 math over the dequantized values, and every SIMD dot product
 * against the scalar oracle on random blocks of awkward row lengths, with
 * probes that a misplaced block or nibble cannot pass. */
#include <jansson.h>
#include <math.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"
#include "testutil.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float frand(void) { return (float)((next() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }

/* Any finite fp16 bit pattern: zero, subnormals, negatives, up to 65504. */
static uint16_t rand_f16(void)
{
    uint16_t h = (uint16_t)next();
    if (((h >> 10) & 31) == 31)
        h &= (uint16_t)~0x4000;
    return h;
}

typedef void (*dequant_fn)(const void *row, float *out, int64_t n);

typedef struct {
    int type;
    const char *name;
    int qk;            /* values per block */
    size_t size;       /* bytes per block */
    dequant_fn dequant;
    size_t f16_at[2];  /* offsets of the block's fp16 fields */
    int n_f16;
} qtype;

static const qtype types[] = {
    {LILAC_Q8_0, "Q8_0", LILAC_QK8_0, sizeof(block_q8_0), lilac_dequant_q8_0, {offsetof(block_q8_0, d)}, 1},
    {LILAC_Q4_0, "Q4_0", LILAC_QK4_0, sizeof(block_q4_0), lilac_dequant_q4_0, {offsetof(block_q4_0, d)}, 1},
    {LILAC_Q4_K, "Q4_K", LILAC_QK_K, sizeof(block_q4_K), lilac_dequant_q4_K,
     {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}, 2},
    {LILAC_Q5_K, "Q5_K", LILAC_QK_K, sizeof(block_q5_K), lilac_dequant_q5_K,
     {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}, 2},
    {LILAC_Q6_K, "Q6_K", LILAC_QK_K, sizeof(block_q6_K), lilac_dequant_q6_K, {offsetof(block_q6_K, d)}, 1},
};
#define N_TYPES (sizeof types / sizeof types[0])

static const qtype *qtype_of(int type)
{
    for (size_t i = 0; i < N_TYPES; i++)
        if (types[i].type == type)
            return &types[i];
    return NULL;
}

/* nb random blocks: random bytes for the quants and scales, random finite
 * fp16 super-block scales. */
static uint8_t *rand_row(const qtype *t, int nb)
{
    uint8_t *row = malloc((size_t)nb * t->size);
    for (size_t i = 0; i < (size_t)nb * t->size; i++)
        row[i] = (uint8_t)next();
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < t->n_f16; k++) {
            uint16_t h = rand_f16();
            memcpy(row + (size_t)b * t->size + t->f16_at[k], &h, 2);
        }
    return row;
}

static double dot_f64(const float *w, const float *x, int64_t n, double *mag)
{
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)w[i] * x[i];
        m += fabs((double)w[i] * x[i]);
    }
    if (mag)
        *mag = m;
    return s;
}

/* The float32 bound of the scalar oracle's sum: each product passes
 * through at most qk + nb + 1 roundings of unit 2^-24. */
static double oracle_tol(const qtype *t, int64_t n, double mag)
{
    return (double)(t->qk + n / t->qk + 2) * ldexp(1.0, -24) * mag;
}

static void test_layouts(void)
{
    for (size_t i = 0; i < N_TYPES; i++) {
        const lilac_dtype_info *di = lilac_dtype_get(types[i].type);
        CHECKF(di && di->blck == (uint32_t)types[i].qk && di->size == types[i].size,
               "%s: block of %zu bytes / %d values disagrees with the dtype table", types[i].name, types[i].size,
               types[i].qk);
        CHECKF(lilac_cpu_type_supported(types[i].type), "%s is supported", types[i].name);
        CHECKF(lilac_cpu_dot_for(&lilac_cpu_scalar, types[i].type) != NULL, "%s has a scalar dot", types[i].name);
    }
    CHECK(sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18 && sizeof(block_q4_K) == 144 &&
          sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210);
    CHECK(offsetof(block_q4_K, scales) == 4 && offsetof(block_q4_K, qs) == 16);
    CHECK(offsetof(block_q5_K, qh) == 16 && offsetof(block_q5_K, qs) == 48);
    CHECK(offsetof(block_q6_K, qh) == 128 && offsetof(block_q6_K, scales) == 192 && offsetof(block_q6_K, d) == 208);
    /* types lilac cannot compute with stay refused */
    CHECK(!lilac_cpu_type_supported(LILAC_Q4_1) && !lilac_cpu_type_supported(LILAC_Q2_K) &&
          !lilac_cpu_type_supported(LILAC_IQ4_XS));
}

/* The K-quant scale unpacking against ggml's packing
 * (quantize_row_q4_K_ref) of random 6-bit scales and mins. */
static void test_kq_scales(void)
{
    int bad = 0;
    for (int rep = 0; rep < 2000; rep++) {
        uint8_t ls[8], lm[8], q[12] = {0}, sc[8], m[8];
        for (int j = 0; j < 8; j++)
            ls[j] = (uint8_t)(next() & 63), lm[j] = (uint8_t)(next() & 63);
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                q[j] = ls[j];
                q[j + 4] = lm[j];
            } else {
                q[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
                q[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
                q[j] |= (uint8_t)((lm[j] >> 4) << 6);
            }
        }
        lilac_kq_scales(q, sc, m);
        bad += memcmp(sc, ls, 8) != 0 || memcmp(m, lm, 8) != 0;
    }
    CHECKF(bad == 0, "K-quant scales: %d of 2000 packings unpack wrong", bad);
}

/* Hand-made blocks whose values are known. */
static void test_known_blocks(void)
{
    float y[256];
    block_q4_0 b40 = {0x3c00 /* 1.0 */, {0}};
    for (int j = 0; j < 16; j++)
        b40.qs[j] = (uint8_t)(j | (15 - j) << 4);
    lilac_dequant_q4_0(&b40, y, 32);
    int bad = 0;
    for (int j = 0; j < 16; j++)
        bad += y[j] != (float)(j - 8) || y[16 + j] != (float)(7 - j);
    CHECKF(bad == 0, "Q4_0: low nibbles are values 0..15, high nibbles 16..31");

    block_q8_0 b80 = {0x4000 /* 2.0 */, {0}};
    for (int j = 0; j < 32; j++)
        b80.qs[j] = (int8_t)(j - 16);
    lilac_dequant_q8_0(&b80, y, 32);
    bad = 0;
    for (int j = 0; j < 32; j++)
        bad += y[j] != 2.0f * (float)(j - 16);
    CHECKF(bad == 0, "Q8_0: value = q * d");

    /* Q6_K: every q = 33 (value 1 before scaling), scale of group g = g + 1 */
    block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    memset(b6.ql, 0x11, sizeof b6.ql);  /* low 4 bits 1 in both nibbles */
    memset(b6.qh, 0xAA, sizeof b6.qh);  /* high 2 bits 0b10 everywhere: 32 + 1 */
    for (int g = 0; g < 16; g++)
        b6.scales[g] = (int8_t)(g + 1);
    b6.d = 0x3800; /* 0.5 */
    lilac_dequant_q6_K(&b6, y, 256);
    bad = 0;
    for (int i = 0; i < 256; i++)
        bad += y[i] != 0.5f * (float)(i / 16 + 1);
    CHECKF(bad == 0, "Q6_K: group i/16 of 16 takes scale i/16");

    /* Q5_K: quants 0 with high bits from qh only: value l of run j gets bit
     * 2j (low nibble half) or 2j + 1 (high nibble half) of qh[l] */
    block_q5_K b5;
    memset(&b5, 0, sizeof b5);
    b5.d = 0x3c00;
    for (int j = 0; j < 4; j++)
        b5.scales[j] = 1, b5.scales[j + 8] = 0x01; /* sc 1 for groups 0-3 and 4-7, mins 0 */
    for (int l = 0; l < 32; l++)
        b5.qh[l] = (uint8_t)(1u << (l % 8));
    lilac_dequant_q5_K(&b5, y, 256);
    bad = 0;
    for (int i = 0; i < 256; i++) {
        int g = i / 32, l = i % 32;
        bad += y[i] != ((l % 8) == g ? 16.0f : 0.0f);
    }
    CHECKF(bad == 0, "Q5_K: the fifth bit of value l of group g is bit g of qh[l]");
}


/* Every type's decoder against llama.cpp's gguf-py decoding of a real
 * tensor, bit for bit; then the dot products over those rows. */
static void test_fixture_dequant(const char *fx)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/dequant/index.json", fx);
    json_error_t je;
    json_t *index = json_load_file(path, 0, &je);
    CHECKF(json_is_array(index), "%s: %s", path, index ? "not an array" : je.text);
    if (!json_is_array(index)) {
        json_decref(index);
        return;
    }
    int seen = 0;
    for (size_t e = 0; e < json_array_size(index); e++) {
        json_t *ent = json_array_get(index, e);
        const char *file = json_string_value(json_object_get(ent, "gguf"));
        const char *tname = json_string_value(json_object_get(ent, "tensor"));
        const char *type = json_string_value(json_object_get(ent, "type"));
        const char *golden = json_string_value(json_object_get(ent, "golden"));
        int64_t n = json_integer_value(json_object_get(ent, "n_elements"));
        CHECKF(file && tname && type && golden && n > 0, "index entry %zu is complete", e);
        if (!file || !tname || !type || !golden || n <= 0)
            continue;
        snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/%s", fx, file);
        gguf_file *g = NULL;
        lilac_error err;
        if (gguf_open(path, &g, &err)) {
            CHECKF(0, "%s: %s", path, err.msg);
            continue;
        }
        const gguf_tensor *t = gguf_find_tensor(g, tname);
        const lilac_dtype_info *di = t ? lilac_dtype_get(t->type) : NULL;
        CHECKF(t && di && strcmp(di->name, type) == 0, "%s: tensor %s of type %s", path, tname, type);
        int64_t cols = t ? t->ne[0] : 0;
        if (!t || !di || strcmp(di->name, type) != 0 || cols <= 0 || n % cols != 0 ||
            lilac_dtype_row_bytes(t->type, n) > t->nbytes) {
            CHECKF(t == NULL, "%s: %s is too small for %lld values", path, tname, (long long)n);
            gguf_close(g);
            continue;
        }
        snprintf(path, sizeof path, "%s/dequant/%s", fx, golden);
        float *want = tu_read_f32(path, (size_t)n);
        float *got = malloc((size_t)n * sizeof(float));
        CHECKF(want != NULL, "%s readable", path);
        if (want) {
            seen++;
            /* through the public converter, then the type's own decoder */
            lilac_row_to_f32(t->type, t->data, got, n);
            int64_t diff = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
                    diff++;
                    first = first < 0 ? i : first;
                }
            printf("dequant %-5s %s %s: %lld/%lld values differ from llama.cpp's bits\n", type, file, tname,
                   (long long)diff, (long long)n);
            CHECKF(diff == 0, "%s %s: %lld of %lld values differ, first at %lld (%.9g vs %.9g)", type, tname,
                   (long long)diff, (long long)n, (long long)first, first >= 0 ? got[first] : 0.0,
                   first >= 0 ? want[first] : 0.0);
            const qtype *q = qtype_of(t->type);
            if (q) {
                memset(got, 0, (size_t)n * sizeof(float));
                q->dequant(t->data, got, n);
                CHECKF(memcmp(got, want, (size_t)n * sizeof(float)) == 0, "%s: lilac_dequant_* differs", type);
            }
            /* the dots of these rows: scalar against float64, every kernel set
             * against scalar */
            lilac_dot_fn sdot = lilac_cpu_dot_for(&lilac_cpu_scalar, t->type);
            const lilac_cpu_kernels *best = lilac_cpu_best();
            lilac_dot_fn bdot = lilac_cpu_dot_for(best, t->type);
            size_t rb = lilac_dtype_row_bytes(t->type, cols);
            float *x = malloc((size_t)cols * sizeof(float));
            int bad_s = 0, bad_b = 0;
            double worst = 0;
            for (int64_t r = 0; r < n / cols; r++) {
                for (int64_t i = 0; i < cols; i++)
                    x[i] = frand() * 2;
                double mag, exact = dot_f64(want + r * cols, x, cols, &mag);
                const void *row = (const uint8_t *)t->data + (size_t)r * rb;
                float s = sdot(row, x, cols), b = bdot(row, x, cols);
                double tol = q ? oracle_tol(q, cols, mag) : (double)(cols + 1) * ldexp(1.0, -24) * mag;
                bad_s += !(fabs(s - exact) <= tol);
                bad_b += !(fabs(b - s) <= 1e-5 * mag);
                if (mag > 0 && fabs(s - exact) / mag > worst)
                    worst = fabs(s - exact) / mag;
            }
            printf("  dot of %lld rows: scalar vs float64 worst |d|/sum|wx| = %.2e; %s vs scalar: %d off\n",
                   (long long)(n / cols), worst, best->name, bad_b);
            CHECKF(bad_s == 0, "%s: %d scalar row dots off the float64 dot", type, bad_s);
            CHECKF(bad_b == 0, "%s: %d %s row dots off the scalar oracle", type, bad_b, best->name);
            free(x);
        }
        free(want);
        free(got);
        gguf_close(g);
    }
    CHECKF(seen >= 5, "the dequant index lists the five block types (%d read)", seen);
    json_decref(index);
}

/* One kernel set on random rows of one type. */
static void test_random_dots(const lilac_cpu_kernels *k, const qtype *t)
{
    static const int nbs[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33};
    lilac_dot_fn dot = lilac_cpu_dot_for(k, t->type), oracle = lilac_cpu_dot_for(&lilac_cpu_scalar, t->type);
    CHECKF(dot != NULL, "%s has a %s dot", k->name, t->name);
    if (!dot)
        return;
    double worst = 0;
    for (size_t si = 0; si < sizeof nbs / sizeof nbs[0]; si++) {
        for (int rep = 0; rep < 4; rep++) {
            int nb = nbs[si];
            int64_t n = (int64_t)nb * t->qk;
            uint8_t *row = rand_row(t, nb);
            float *w = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
            t->dequant(row, w, n);
            for (int64_t i = 0; i < n; i++)
                x[i] = frand() * 3;
            double mag, exact = dot_f64(w, x, n, &mag);
            float got = dot(row, x, n), want = oracle(row, x, n);
            CHECKF(fabs(want - exact) <= oracle_tol(t, n, mag), "scalar %s dot nb=%d: %.9g vs float64 %.9g", t->name,
                   nb, want, exact);
            CHECKF(fabs(got - want) <= 1e-5 * mag, "%s %s dot nb=%d: %.9g vs scalar %.9g (sum|wx| %.4g)", k->name,
                   t->name, nb, got, want, mag);
            if (mag > 0 && fabs(got - want) / mag > worst)
                worst = fabs(got - want) / mag;

            /* zeroing one block of x takes exactly that block's share away */
            for (int b = 0; b < nb; b++) {
                float *xz = malloc((size_t)n * sizeof(float));
                memcpy(xz, x, (size_t)n * sizeof(float));
                memset(xz + (size_t)b * t->qk, 0, (size_t)t->qk * sizeof(float));
                double mz, ez = dot_f64(w, xz, n, &mz);
                float gz = dot(row, xz, n);
                double tol = 1e-5 * mag + 1e-30;
                CHECKF(fabs(gz - ez) <= tol, "%s %s nb=%d, block %d of x zeroed: %.9g vs %.9g", k->name, t->name, nb,
                       b, gz, ez);
                if (fabs(exact - ez) > 4 * tol)
                    CHECKF(gz != got, "%s %s nb=%d: zeroing block %d of x changes nothing", k->name, t->name, nb, b);
                free(xz);
            }
            free(row), free(w), free(x);
        }
    }
    printf("%s %s: random rows of 1..33 blocks, worst |d|/sum|wx| vs scalar = %.2e\n", k->name, t->name, worst);
}

/* dot(row, e_p) is value p exactly: every value lands in its own place. */
static void test_probe(const lilac_cpu_kernels *k, const qtype *t)
{
    lilac_dot_fn dot = lilac_cpu_dot_for(k, t->type);
    if (!dot)
        return;
    int nb = 3;
    int64_t n = (int64_t)nb * t->qk;
    uint8_t *row = rand_row(t, nb);
    /* moderate scales, so no value is zero or subnormal by accident of the scale */
    for (int b = 0; b < nb; b++)
        for (int f = 0; f < t->n_f16; f++) {
            uint16_t h = (uint16_t)(0x3000 + (next() & 0x7ff));
            memcpy(row + (size_t)b * t->size + t->f16_at[f], &h, 2);
        }
    float *w = malloc((size_t)n * sizeof(float)), *x = calloc((size_t)n, sizeof(float));
    t->dequant(row, w, n);
    int bad = 0;
    for (int64_t p = 0; p < n; p++) {
        x[p] = 1.0f;
        bad += dot(row, x, n) != w[p];
        x[p] = 0.0f;
    }
    CHECKF(bad == 0, "%s %s: %d of %lld unit probes do not return their value", k->name, t->name, bad, (long long)n);
    free(row), free(w), free(x);
}

/* lilac_matmul over a quantized matrix: each output is its row's dot. */
static void test_matmul_quant(const lilac_cpu_kernels *k)
{
    lilac_pool *pool;
    lilac_error err;
    CHECK(lilac_pool_new(3, &pool, &err) == LILAC_OK);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const qtype *t = &types[ti];
        int rows = 37, nb = 3, ntok = 3;
        int64_t cols = (int64_t)nb * t->qk;
        uint8_t *W = rand_row(t, rows * nb);
        float *x = malloc((size_t)(ntok * cols) * sizeof(float)), *y = malloc((size_t)ntok * rows * sizeof(float));
        for (int64_t i = 0; i < ntok * cols; i++)
            x[i] = frand();
        lilac_mat m = {.data = W, .type = t->type, .rows = rows, .cols = cols,
                       .row_bytes = lilac_dtype_row_bytes(t->type, cols)};
        lilac_matmul(k, pool, &m, x, ntok, y);
        int bad = 0;
        lilac_dot_fn dot = lilac_cpu_dot_for(k, t->type);
        for (int tok = 0; tok < ntok; tok++)
            for (int r = 0; r < rows; r++)
                bad += y[tok * rows + r] != dot(lilac_mat_row(&m, r), x + tok * cols, cols);
        CHECKF(bad == 0, "%s matmul %s: %d outputs differ from the row dots", k->name, t->name, bad);
        free(W), free(x), free(y);
    }
    lilac_pool_free(pool);
}

int main(void)
{
    test_layouts();
    test_kq_scales();
    test_known_blocks();
    const lilac_cpu_kernels *sets[3] = {&lilac_cpu_scalar, NULL, NULL};
#if defined(LILAC_X86)
    const lilac_cpu_kernels *simd[2] = {&lilac_cpu_avx2, &lilac_cpu_avx512};
    for (int i = 0; i < 2; i++) {
        if (lilac_cpu_runs(simd[i]))
            sets[1 + i] = simd[i];
        else
            printf("SKIP (part): this CPU cannot run the %s quant kernels\n", simd[i]->name);
    }
#endif
    for (int s = 0; s < 3; s++) {
        if (!sets[s])
            continue;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            test_random_dots(sets[s], &types[ti]);
            test_probe(sets[s], &types[ti]);
        }
        test_matmul_quant(sets[s]);
    }
    const char *fx = tu_fixtures();
    if (fx)
        test_fixture_dequant(fx);
    else if (tu_failures == 0)
        SKIP("fixtures not found (set LILAC_FIXTURES): the random-block checks passed (%d), but the bit-exact "
             "dequantization against llama.cpp was not run", tu_checks);
    TEST_END();
}
