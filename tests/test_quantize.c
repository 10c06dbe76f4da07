/* lilac quantize: checkpoints and GGUFs to llama.cpp's quantized GGUFs.
 * - the row quantizers reproduce llama-quantize's bytes: the fixture's
 *   BF16 tensors quantized here give the blocks of its quantized files;
 * - they round-trip random data within each type's error, and all-zero,
 *   tiny, huge and non-finite blocks never give NaN or Inf;
 * - `lilac quantize` of the fixture checkpoints gives, tensor for tensor,
 *   llama-quantize's names, shapes, types and bytes, and its metadata; the
 *   files load, and their logits are as close to the reference as the
 *   fixture files' are;
 * - a GGUF input gives the same file as the checkpoint;
 * - the type rules hold where the fixtures do not reach (fallback types,
 *   tied embeddings, models without 8 experts);
 * - errors are one line, a failure, and no file. */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quantize.h"
#include "model/quantize.h"
#include "gguf_compare.h"
#include "models.h"

static char tmpdir[256];

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Neither OUT nor OUT.tmp exists. */
static bool nothing_left(const char *p)
{
    char t[4200];
    snprintf(t, sizeof t, "%s.tmp", p);
    return !exists(p) && !exists(t);
}

static bool is_block(int type)
{
    const lilac_dtype_info *d = lilac_dtype_get(type);
    return d && d->blck > 1;
}

/* ---- dequantizing any type the quantizers write ---- */

static void dequant_q5_0(const uint8_t *b, float *y)
{
    uint16_t h;
    memcpy(&h, b, 2);
    const float d = lilac_f16_to_f32(h);
    uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
    for (int j = 0; j < 16; j++) {
        const int x0 = ((b[6 + j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
        const int x1 = ((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
        y[j] = (float)x0 * d;
        y[j + 16] = (float)x1 * d;
    }
}

static void dequant_q5_1(const uint8_t *b, float *y)
{
    uint16_t h, hm;
    memcpy(&h, b, 2);
    memcpy(&hm, b + 2, 2);
    const float d = lilac_f16_to_f32(h), m = lilac_f16_to_f32(hm);
    uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
    for (int j = 0; j < 16; j++) {
        const int x0 = (b[8 + j] & 0x0F) | (((qh >> j) << 4) & 0x10);
        const int x1 = (b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
        y[j] = (float)x0 * d + m;
        y[j + 16] = (float)x1 * d + m;
    }
}

static void dequant(int type, const void *row, float *y, int64_t n)
{
    const uint8_t *p = row;
    switch (type) {
    case LILAC_Q5_0:
        for (int64_t i = 0; i < n / 32; i++)
            dequant_q5_0(p + 22 * i, y + 32 * i);
        return;
    case LILAC_Q5_1:
        for (int64_t i = 0; i < n / 32; i++)
            dequant_q5_1(p + 24 * i, y + 32 * i);
        return;
    case LILAC_F32:
        memcpy(y, row, (size_t)n * 4);
        return;
    default:
        lilac_row_to_f32(type, row, y, n);
    }
}

/* ---- 1. bytes of the fixture files ---- */

typedef struct {
    int type;
    long same, total;
} tally;

static void bit_compat(const char *fx)
{
    static const char *const models[] = {"tiny-qwen35moe", "tiny-qwen3moe"};
    static const char *const files[] = {"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"};
    tally t[] = {{LILAC_Q8_0, 0, 0}, {LILAC_Q6_K, 0, 0}, {LILAC_Q5_K, 0, 0}, {LILAC_Q4_K, 0, 0}, {LILAC_Q4_0, 0, 0}};
    int n_files = 0;
    for (int mi = 0; mi < 2; mi++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s/gguf/model-bf16.gguf", fx, models[mi]);
        gguf_file *b = NULL;
        lilac_error err;
        if (!exists(p) || gguf_open(p, &b, &err)) {
            printf("skipped %s: no readable %s\n", models[mi], p);
            continue;
        }
        for (int fi = 0; fi < 5; fi++) {
            snprintf(p, sizeof p, "%s/%s/gguf/model-%s.gguf", fx, models[mi], files[fi]);
            gguf_file *q = NULL;
            if (!exists(p))
                continue;
            CHECKF(gguf_open(p, &q, &err) == LILAC_OK, "%s: %s", p, err.msg);
            if (!q)
                continue;
            n_files++;
            for (size_t i = 0; i < gguf_n_tensors(q); i++) {
                const gguf_tensor *tq = gguf_tensor_at(q, i), *tb = gguf_find_tensor(b, tq->name);
                lilac_quantize_fn fn = lilac_quantizer_for(tq->type);
                if (!tb || !fn || !is_block(tq->type) || tb->type == tq->type)
                    continue;
                int64_t n0 = tq->ne[0], rows = tq->ne[1] * tq->ne[2] * tq->ne[3];
                const lilac_dtype_info *di = lilac_dtype_get(tq->type);
                size_t rb = lilac_dtype_row_bytes(tq->type, n0), sb = lilac_dtype_row_bytes(tb->type, n0);
                float *x = malloc((size_t)n0 * sizeof *x);
                uint8_t *o = malloc(rb);
                tally *ty = NULL;
                for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
                    if (t[k].type == tq->type)
                        ty = &t[k];
                for (int64_t r = 0; x && o && ty && r < rows; r++) {
                    lilac_row_to_f32(tb->type, (const uint8_t *)tb->data + (size_t)r * sb, x, n0);
                    CHECKF(fn(x, o, n0), "%s: %s row %lld reported out of range", p, tq->name, (long long)r);
                    const uint8_t *ref = (const uint8_t *)tq->data + (size_t)r * rb;
                    for (int64_t k = 0; k < n0 / di->blck; k++) {
                        ty->total++;
                        ty->same += !memcmp(o + k * di->size, ref + k * di->size, di->size);
                    }
                }
                free(x);
                free(o);
            }
            gguf_close(q);
        }
        gguf_close(b);
    }
    if (!n_files) {
        printf("skipped the bit-compatibility check: no quantized fixture files\n");
        return;
    }
    printf("row quantizers vs llama-quantize (blocks of the fixture files, quantized here from model-bf16.gguf):\n");
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        printf("  %-5s %7ld / %7ld blocks identical (%.2f%%)\n", lilac_dtype_get(t[k].type)->name, t[k].same,
               t[k].total, t[k].total ? 100.0 * (double)t[k].same / (double)t[k].total : 0.0);
        CHECKF(t[k].total > 0, "no %s blocks in the fixture files", lilac_dtype_get(t[k].type)->name);
        CHECKF(t[k].same == t[k].total, "%s: %ld of %ld blocks differ from llama-quantize's",
               lilac_dtype_get(t[k].type)->name, t[k].total - t[k].same, t[k].total);
    }
}

/* ---- 2. round trips ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static float grand(void)
{
    double u = urand(), v = urand();
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

static const int all_types[] = {LILAC_Q8_0, LILAC_Q6_K, LILAC_Q5_K, LILAC_Q4_K, LILAC_Q5_1,
                                LILAC_Q5_0, LILAC_Q4_0, LILAC_F16,  LILAC_BF16, LILAC_F32};

/* Relative RMS error of a round trip of x; sets *ok to the quantizer's
 * answer and *finite to whether every value came back finite. */
static double round_trip(int type, const float *x, int64_t n, bool *ok, bool *finite, float *y)
{
    uint8_t *q = malloc(lilac_dtype_row_bytes(type, n));
    *ok = lilac_quantizer_for(type)(x, q, n);
    dequant(type, q, y, n);
    free(q);
    double e2 = 0, x2 = 0;
    *finite = true;
    for (int64_t i = 0; i < n; i++) {
        *finite = *finite && isfinite(y[i]);
        e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        x2 += (double)x[i] * x[i];
    }
    return x2 > 0 ? sqrt(e2 / x2) : sqrt(e2);
}

static void round_trips(void)
{
    /* bounds on the relative RMS error of Gaussian data: about each
     * type's step over sqrt(12), with room (the measured errors print) */
    static const struct {
        int type;
        double bound;
    } bounds[] = {{LILAC_Q8_0, 0.008}, {LILAC_Q6_K, 0.03}, {LILAC_Q5_K, 0.05}, {LILAC_Q4_K, 0.1},
                  {LILAC_Q5_1, 0.06},  {LILAC_Q5_0, 0.06},  {LILAC_Q4_0, 0.14}, {LILAC_F16, 5e-4},
                  {LILAC_BF16, 3e-3},  {LILAC_F32, 0}};
    enum { N = 8192 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    printf("round trips of %d Gaussian values (relative RMS error):\n", N);
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
        int type = bounds[k].type;
        double worst = 0;
        for (int rep = 0; rep < 4; rep++) {
            float scale = rep == 3 ? 1e4f : rep == 2 ? 1e-3f : 1.0f;
            for (int i = 0; i < N; i++)
                x[i] = scale * grand() * (rep == 1 && i % 97 == 0 ? 8.0f : 1.0f); /* rep 1: outliers */
            bool ok, finite;
            double e = round_trip(type, x, N, &ok, &finite, y);
            CHECKF(ok && finite, "%s round trip (scale %g): ok %d, finite %d", lilac_dtype_get(type)->name,
                   (double)scale, ok, finite);
            if (rep != 1 && e > worst)
                worst = e;
        }
        printf("  %-5s %.4f (bound %.4f)\n", lilac_dtype_get(type)->name, worst, bounds[k].bound);
        CHECKF(worst <= bounds[k].bound, "%s: relative RMS error %.4g > %.4g", lilac_dtype_get(type)->name, worst,
               bounds[k].bound);
    }
    free(x);
    free(y);
}

/* ---- 3. edge blocks ---- */

static void edge_blocks(void)
{
    enum { N = 512 };
    float x[N], y[N];
    for (size_t k = 0; k < sizeof all_types / sizeof all_types[0]; k++) {
        int type = all_types[k];
        const char *tn = lilac_dtype_get(type)->name;
        bool ok, finite;
        /* all zero: exactly zero back */
        memset(x, 0, sizeof x);
        round_trip(type, x, N, &ok, &finite, y);
        bool zero = true;
        for (int i = 0; i < N; i++)
            zero = zero && y[i] == 0;
        CHECKF(ok && finite && zero, "%s: an all-zero row (ok %d, finite %d, zero %d)", tn, ok, finite, zero);
        /* tiny: normal, subnormal, the smallest float; and one large value among tiny ones */
        static const float tiny[] = {1e-30f, 1e-38f, 1e-40f, 1.4e-45f};
        for (int t = 0; t < 5; t++) {
            for (int i = 0; i < N; i++)
                x[i] = t < 4 ? tiny[t] * grand() : (i == 7 ? 3e4f : 1e-20f * grand());
            round_trip(type, x, N, &ok, &finite, y);
            CHECKF(ok && finite, "%s: tiny values (case %d): ok %d, finite %d", tn, t, ok, finite);
        }
        /* huge but representable (|x| < 65504, for F16 and Q5_1's float16
         * minimum): within the type's error */
        for (int i = 0; i < N; i++)
            x[i] = (float)(6e4 * (2 * urand() - 1));
        double e = round_trip(type, x, N, &ok, &finite, y);
        CHECKF(ok && finite && e < 0.15, "%s: values ~6e4: ok %d, finite %d, error %.3g", tn, ok, finite, e);
        /* beyond any float16 scale, and not finite: reported, still finite for block types */
        for (int t = 0; t < 3; t++) {
            for (int i = 0; i < N; i++)
                x[i] = t == 0 ? 1e30f * grand() : grand();
            if (t == 1)
                x[5] = NAN;
            if (t == 2)
                x[300] = -INFINITY;
            round_trip(type, x, N, &ok, &finite, y);
            if (type == LILAC_F32 || (type == LILAC_BF16 && t == 0))
                continue; /* representable (F32 passes NaN through) */
            CHECKF(!ok, "%s: case %d is not reported", tn, t);
            if (is_block(type))
                CHECKF(finite, "%s: case %d gives non-finite values", tn, t);
        }
    }
    /* fp16 conversion: ties to even, saturation to inf, NaN */
    CHECK(lilac_f32_to_f16(1.0f) == 0x3C00 && lilac_f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(lilac_f32_to_f16(65520.0f) == 0x7C00 && lilac_f32_to_f16(-INFINITY) == 0xFC00);
    CHECK(lilac_f32_to_f16(NAN) == 0x7E00 || lilac_f32_to_f16(NAN) == 0xFE00);
    CHECK(lilac_f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00 && lilac_f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02);
    CHECK(lilac_f32_to_f16(5.96e-8f) == 0x0001 && lilac_f32_to_f16(1e-9f) == 0);
    for (uint32_t h = 0; h < 0x7C00; h++) /* every finite half round-trips */
        if (lilac_f32_to_f16(lilac_f16_to_f32((uint16_t)h)) != h) {
            CHECKF(0, "half 0x%04x does not round-trip", h);
            break;
        }
}

/* ---- 4. type rules ---- */

static void type_rules(void)
{
    lilac_error err;
    int out[8];
    /* rows of 96 and 48 values: llama.cpp's fallbacks */
    lilac_qtensor t[] = {
        {"output.weight", LILAC_BF16, {512, 1000, 1, 1}},
        {"token_embd.weight", LILAC_BF16, {512, 1000, 1, 1}},
        {"blk.0.ffn_up_exps.weight", LILAC_BF16, {96, 64, 4, 1}},
        {"blk.0.ffn_down_exps.weight", LILAC_BF16, {48, 96, 4, 1}},
        {"blk.0.attn_norm.weight", LILAC_F32, {512, 1, 1, 1}},
        {"blk.0.ffn_gate_inp.weight", LILAC_F32, {512, 4, 1, 1}},
    };
    CHECK(lilac_quantize_choose_types("Q4_K_M", 1, 4, t, 6, out, NULL, NULL, &err) == LILAC_OK);
    CHECKF(out[0] == LILAC_Q6_K && out[1] == LILAC_Q4_K && out[2] == LILAC_Q5_0 && out[3] == LILAC_F16 &&
               out[4] == LILAC_F32 && out[5] == LILAC_F32,
           "Q4_K_M with odd rows: %d %d %d %d %d %d", out[0], out[1], out[2], out[3], out[4], out[5]);
    CHECK(lilac_quantize_choose_types("Q5_K_M", 1, 4, t, 6, out, NULL, NULL, &err) == LILAC_OK);
    CHECKF(out[2] == LILAC_Q5_1 && out[3] == LILAC_F16, "Q5_K_M fallbacks: %d %d", out[2], out[3]);
    CHECK(lilac_quantize_choose_types("Q6_K", 1, 4, t, 6, out, NULL, NULL, &err) == LILAC_OK);
    CHECKF(out[2] == LILAC_Q8_0 && out[3] == LILAC_F16, "Q6_K fallbacks: %d %d", out[2], out[3]);
    /* Q8_0 has no fallback: a row of 48 values is an error */
    CHECK(lilac_quantize_choose_types("Q8_0", 1, 4, t, 6, out, NULL, NULL, &err) == LILAC_E_UNSUPPORTED);

    /* tied embeddings: token_embd takes the output's rule; the pure Q4_K
     * gives every quantized tensor Q4_K */
    lilac_qtensor u[] = {{"token_embd.weight", LILAC_BF16, {512, 1000, 1, 1}},
                         {"blk.0.attn_output.weight", LILAC_BF16, {512, 512, 1, 1}}};
    CHECK(lilac_quantize_choose_types("Q4_K_M", 1, 8, u, 2, out, NULL, NULL, &err) == LILAC_OK);
    CHECKF(out[0] == LILAC_Q6_K && out[1] == LILAC_Q5_K, "tied Q4_K_M: %d %d", out[0], out[1]);
    CHECK(lilac_quantize_choose_types("q4_k", 1, 8, u, 2, out, NULL, NULL, &err) == LILAC_OK);
    CHECKF(out[0] == LILAC_Q4_K && out[1] == LILAC_Q4_K, "pure Q4_K: %d %d", out[0], out[1]);
    CHECK(lilac_quantize_choose_types("Q4_K_X", 1, 8, u, 2, out, NULL, NULL, &err) == LILAC_E_ARG);

    /* 16 layers of a 128-expert model: attn_v / attn_qkv counted together
     * in llama.cpp's order (layer 10 after layer 9, not after layer 1) */
    enum { L = 16 };
    lilac_qtensor v[2 * L];
    char names[2 * L][48];
    for (int i = 0; i < L; i++) {
        snprintf(names[2 * i], 48, "blk.%d.%s", i, i % 4 == 3 ? "attn_v.weight" : "attn_qkv.weight");
        snprintf(names[2 * i + 1], 48, "blk.%d.ffn_down_exps.weight", i);
        v[2 * i] = (lilac_qtensor){names[2 * i], LILAC_BF16, {512, 512, 1, 1}};
        v[2 * i + 1] = (lilac_qtensor){names[2 * i + 1], LILAC_BF16, {256, 512, 128, 1}};
    }
    int vo[2 * L];
    CHECK(lilac_quantize_choose_types("Q4_K_M", L, 128, v, 2 * L, vo, NULL, NULL, &err) == LILAC_OK);
    for (int i = 0; i < L; i++) {
        /* use_more_bits(i, 16): i < 2, i >= 14, or (i - 2) % 3 == 2 */
        bool more = i < 2 || i >= 14 || (i - 2) % 3 == 2;
        CHECKF(vo[2 * i] == (more ? LILAC_Q6_K : LILAC_Q4_K), "layer %d attn: %d", i, vo[2 * i]);
        CHECKF(vo[2 * i + 1] == (more ? LILAC_Q6_K : LILAC_Q4_K), "layer %d ffn_down: %d", i, vo[2 * i + 1]);
    }
}

/* ---- 5. whole files ---- */

/* Compare our file to llama-quantize's: names, order, shapes, types,
 * bytes, metadata. Returns how many tensors have identical bytes. */
static size_t compare_files(const char *ours, const char *theirs, const char *label, size_t *n_tensors)
{
    gguf_file *a = NULL, *b = NULL;
    lilac_error err;
    CHECKF(gguf_open(ours, &a, &err) == LILAC_OK, "%s: %s", label, err.msg);
    CHECKF(gguf_open(theirs, &b, &err) == LILAC_OK, "%s: %s", label, err.msg);
    size_t same = 0;
    *n_tensors = 0;
    if (!a || !b)
        goto done;
    size_t na = gguf_n_tensors(a), nb = gguf_n_tensors(b);
    *n_tensors = nb;
    CHECKF(na == nb, "%s: %zu tensors, llama-quantize's file has %zu", label, na, nb);
    for (size_t i = 0; i < na && i < nb; i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_tensor_at(b, i);
        CHECKF(!strcmp(ta->name, tb->name), "%s: tensor %zu is '%s', llama-quantize's is '%s'", label, i, ta->name,
               tb->name);
        bool shape = ta->n_dims == tb->n_dims;
        for (int d = 0; d < 4; d++)
            shape = shape && ta->ne[d] == tb->ne[d];
        CHECKF(shape, "%s: '%s' has another shape than llama-quantize's", label, tb->name);
        CHECKF(ta->type == tb->type, "%s: '%s' is %s, llama-quantize made it %s", label, tb->name,
               lilac_dtype_get(ta->type) ? lilac_dtype_get(ta->type)->name : "?", lilac_dtype_get(tb->type)->name);
        if (shape && ta->type == tb->type && ta->nbytes == tb->nbytes)
            same += !memcmp(ta->data, tb->data, ta->nbytes);
    }
    size_t ka = gguf_n_kv(a), kb = gguf_n_kv(b);
    CHECKF(ka == kb, "%s: %zu metadata keys, llama-quantize's file has %zu", label, ka, kb);
    size_t kv_same = 0;
    for (size_t i = 0; i < ka && i < kb; i++) {
        const gguf_kv *x = gguf_kv_at(a, i), *y = gguf_kv_at(b, i);
        CHECKF(!strcmp(x->key, y->key), "%s: key %zu is '%s', llama-quantize's is '%s'", label, i, x->key, y->key);
        if (!strcmp(y->key, "general.name") || !strcmp(y->key, "general.size_label"))
            continue;
        bool eq = !strcmp(x->key, y->key) && gc_kv_equal(x, y, NULL, 0);
        CHECKF(eq, "%s: metadata '%s' differs", label, y->key);
        kv_same += eq;
    }
    printf("  %-22s %zu/%zu tensors: name, shape, type equal; %zu/%zu byte-identical; %zu/%zu metadata keys equal",
           label, nb, nb, same, nb, kv_same + 2, kb);
done:
    gguf_close(a);
    gguf_close(b);
    return same;
}

static bool files_identical(const char *p, const char *q)
{
    size_t na = 0, nb = 0;
    uint8_t *a = tu_read_file(p, &na), *b = tu_read_file(q, &nb);
    bool same = a && b && na == nb && !memcmp(a, b, na);
    free(a);
    free(b);
    return same;
}

/* Mean KL of a model's logits (precise path) against the golden ones; -1
 * when it does not load or run. */
static double kl_of(const char *path, const int32_t *toks, int n, const float *golden, int V)
{
    lilac_model_params p = lilac_model_default_params();
    p.n_threads = 2;
    p.precise = true;
    lilac_model *m = NULL;
    lilac_error err;
    if (lilac_model_open(path, &p, &m, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return -1;
    }
    double kl = -1;
    if (lilac_model_hparams(m)->n_vocab == V) {
        float *lg = tm_logits(m, toks, n, 0, NULL);
        if (lg)
            kl = tm_mean_kl(golden, lg, n, V);
        free(lg);
    }
    lilac_model_free(m);
    return kl;
}

typedef struct {
    const char *model, *type;
} qcase;

typedef struct {
    uint64_t last, total;
    int calls;
    bool monotonic;
} prog;

static void on_progress(void *user, const char *tensor, uint64_t done, uint64_t total)
{
    prog *p = user;
    p->monotonic = p->monotonic && done >= p->last && done <= total && tensor != NULL;
    p->last = done;
    p->total = total;
    p->calls++;
}

static void whole_files(const char *fx)
{
    static const qcase cases[] = {
        {"tiny-qwen35moe", "Q8_0"},   {"tiny-qwen35moe", "Q6_K"}, {"tiny-qwen35moe", "Q5_K_M"},
        {"tiny-qwen35moe", "Q4_K_M"}, {"tiny-qwen35moe", "Q4_0"}, {"tiny-qwen3moe", "Q8_0"},
        {"tiny-qwen3moe", "Q4_K_M"},
    };
    char kl_table[2048] = "";
    size_t kt = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const qcase *q = &cases[c];
        char hf[4096], ref[4096], out[4200], meta_p[4096], gold_p[4096];
        snprintf(hf, sizeof hf, "%s/%s/hf", fx, q->model);
        snprintf(ref, sizeof ref, "%s/%s/gguf/model-%s.gguf", fx, q->model, q->type);
        snprintf(meta_p, sizeof meta_p, "%s/%s/golden/meta.json", fx, q->model);
        snprintf(gold_p, sizeof gold_p, "%s/%s/golden/logits.f32", fx, q->model);
        snprintf(out, sizeof out, "%s/%s-%s.gguf", tmpdir, q->model, q->type);
        if (!exists(hf) || !exists(ref)) {
            printf("skipped %s %s: no %s or %s\n", q->model, q->type, hf, ref);
            continue;
        }
        lilac_error err;
        lilac_status s = lilac_quantize(hf, out, q->type, NULL, &err);
        CHECKF(s == LILAC_OK, "%s %s: quantize: %s", q->model, q->type, err.msg);
        if (s)
            continue;
        char label[64];
        snprintf(label, sizeof label, "%s %s:", q->model, q->type);
        size_t n_t = 0;
        size_t same = compare_files(out, ref, label, &n_t);
        bool ident = files_identical(out, ref);
        printf("; whole file %s\n", ident ? "byte-identical" : "differs");
        (void)same;

        /* loads, and is as close to the reference as llama-quantize's */
        json_error_t je;
        json_t *meta = json_load_file(meta_p, 0, &je);
        int n = 0;
        int32_t *toks = meta ? tm_json_ints(meta, "tokens", NULL, &n) : NULL;
        int V = meta ? (int)json_integer_value(json_object_get(meta, "vocab")) : 0;
        size_t gsize = 0;
        float *gold = tu_read_file(gold_p, &gsize);
        if (!toks || !gold || gsize != (size_t)n * (size_t)V * sizeof(float)) {
            printf("  skipped the logits of %s: %s or %s missing\n", q->model, meta_p, gold_p);
        } else {
            double ours = kl_of(out, toks, n, gold, V), theirs = kl_of(ref, toks, n, gold, V);
            CHECKF(ours >= 0, "%s %s: our file does not load or run", q->model, q->type);
            CHECKF(theirs >= 0, "%s %s: llama-quantize's file does not load or run", q->model, q->type);
            CHECKF(ours <= 1.1 * theirs + 1e-12, "%s %s: mean KL %.4e > 1.1 x llama-quantize's %.4e", q->model,
                   q->type, ours, theirs);
            kt += (size_t)snprintf(kl_table + kt, sizeof kl_table - kt, "  %-15s %-7s %.4e   %.4e   %.3f\n",
                                   q->model, q->type, ours, theirs, theirs > 0 ? ours / theirs : 1.0);
            if (kt >= sizeof kl_table)
                kt = sizeof kl_table - 1;
        }
        free(toks);
        free(gold);
        json_decref(meta);

        /* one thread gives the same bytes; progress counts up to the total */
        if (!strcmp(q->type, "Q4_K_M")) {
            char out1[4300];
            snprintf(out1, sizeof out1, "%s/%s-1thread.gguf", tmpdir, q->model);
            prog pr = {0, 0, 0, true};
            lilac_quantize_params qp = {.n_threads = 1, .progress = on_progress, .progress_user = &pr};
            s = lilac_quantize(hf, out1, q->type, &qp, &err);
            CHECKF(s == LILAC_OK && files_identical(out, out1), "%s: one thread gives another file", q->model);
            CHECKF(pr.monotonic && pr.calls > 1 && pr.last == pr.total && pr.total > 0,
                   "%s: progress: %d calls, %llu of %llu, monotonic %d", q->model, pr.calls,
                   (unsigned long long)pr.last, (unsigned long long)pr.total, pr.monotonic);
            remove(out1);
        }

        /* a GGUF input gives the same file */
        if (!strcmp(q->type, "Q8_0")) {
            char bf16[4096], out2[4300];
            snprintf(bf16, sizeof bf16, "%s/%s/gguf/model-bf16.gguf", fx, q->model);
            snprintf(out2, sizeof out2, "%s/%s-from-gguf-Q8_0.gguf", tmpdir, q->model);
            if (exists(bf16)) {
                s = lilac_quantize(bf16, out2, "Q8_0", NULL, &err);
                CHECKF(s == LILAC_OK, "%s: quantize the bf16 GGUF: %s", q->model, err.msg);
                bool same_file = !s && files_identical(out, out2);
                printf("  %s: model-bf16.gguf -> Q8_0 is %s the checkpoint's Q8_0\n", q->model,
                       same_file ? "byte-identical to" : "NOT the same as");
                CHECKF(same_file, "%s: quantizing the GGUF and the checkpoint differ", q->model);
                remove(out2);
            }
        }
        remove(out);
    }
    if (kt)
        printf("mean KL against golden/logits.f32 (precise path):\n  %-15s %-7s %-10s   %-10s   %s\n%s", "model",
               "type", "lilac", "llama-q.", "ratio", kl_table);
}

/* ---- 6. errors ---- */

static void errors(const char *fx)
{
    char hf[4096], out[4200], bad[4300];
    snprintf(hf, sizeof hf, "%s/tiny-qwen3moe/hf", fx);
    snprintf(out, sizeof out, "%s/err.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/no-such-dir/err.gguf", tmpdir);
    lilac_error err;
    lilac_status s = lilac_quantize(hf, out, "Q3_K_XL", NULL, &err);
    CHECKF(s == LILAC_E_ARG && strstr(err.msg, "Q3_K_XL") && !strchr(err.msg, '\n'), "unknown type: %d %s", s,
           err.msg);
    CHECK(nothing_left(out));
    s = lilac_quantize("/nonexistent/model", out, "Q8_0", NULL, &err);
    CHECKF(s == LILAC_E_IO && strstr(err.msg, "/nonexistent/model"), "missing input: %d %s", s, err.msg);
    CHECK(nothing_left(out));
    if (exists(hf)) {
        s = lilac_quantize(hf, bad, "Q8_0", NULL, &err);
        CHECKF(s != LILAC_OK && strstr(err.msg, "no-such-dir"), "output in a missing directory: %d %s", s, err.msg);
        CHECK(nothing_left(bad));
    }

    /* the command line: one "lilac: error:" line, a failure status, no file */
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/lilac", LILAC_BINARY_DIR);
    if (access(bin, X_OK) != 0) {
        printf("skipped the command-line errors: no %s\n", bin);
        return;
    }
    const char *argsets[3][3] = {{hf, out, "Q3_K_XL"}, {"/nonexistent/model", out, "Q8_0"}, {hf, bad, "Q8_0"}};
    for (int k = 0; k < 3; k++) {
        char cmd[16384], errf[4300];
        snprintf(errf, sizeof errf, "%s/stderr.txt", tmpdir);
        snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' '%s' 2>'%s' >/dev/null", bin, argsets[k][0], argsets[k][1],
                 argsets[k][2], errf);
        int rc = system(cmd);
        size_t n = 0;
        char *text = tu_read_file(errf, &n);
        int lines = 0;
        for (size_t i = 0; text && i < n; i++)
            lines += text[i] == '\n';
        CHECKF(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) != 0, "case %d: exit status %d", k, rc);
        CHECKF(text && lines == 1 && !strncmp(text, "lilac: error: ", 14), "case %d: stderr is %.*s", k,
               (int)(n < 400 ? n : 400), text ? text : "(none)");
        if (k == 0 && text)
            printf("  e.g. %.*s", (int)n, text);
        free(text);
        remove(errf);
        CHECK(nothing_left(argsets[k][1]));
    }
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lilac-test-quantize-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    bit_compat(fx);
    round_trips();
    edge_blocks();
    type_rules();
    printf("lilac quantize of the fixture checkpoints against llama-quantize's files:\n");
    whole_files(fx);
    errors(fx);
    rmdir(tmpdir);
    TEST_END();
}
