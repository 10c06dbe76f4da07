/* test_mlx: MLX affine-quantized checkpoints. The scalar dequantizer against
 * MLX's own outputs (fixtures/mlx/affine-dequant.json), the code unpacking
 * against MLX's extract_bits for 3/5/6 bits, the AVX2 dot against the scalar
 * one; then whole models: each tiny HF checkpoint is quantized MLX-style and
 * written in mlx-lm's layout (switch_mlp stacked experts, folded norms,
 * [C, K, 1] conv, quantization block with exceptions), and beside it an HF
 * checkpoint of the dequantized float32 weights: lilac's logits on the two
 * must agree to float32 rounding. Last, broken checkpoints fail with one
 * line naming the file and tensor. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/dtype.h"
#include "format/safetensors.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/mlx.h"
#include "models.h"
#include "util/err.h"
#include "util/pool.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

/* ---- float16 / bfloat16 encoding (round to nearest even) ---- */

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static uint16_t to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(f);
    if (a >= 65520.0f)
        return sign | 0x7C00;
    if (a < 6.103515625e-05f) { /* subnormal: multiples of 2^-24 */
        float m = nearbyintf(a * 16777216.0f);
        return sign | (uint16_t)m;
    }
    memcpy(&u, &a, 4);
    uint32_t mant = u & 0x7FFFFF, exp = (u >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return sign | (uint16_t)h;
}

static float decode_scale(int type, float v)
{
    return type == LILAC_F16 ? lilac_f16_to_f32(to_f16(v)) : type == LILAC_BF16 ? lilac_bf16_to_f32(to_bf16(v)) : v;
}

/* ---- packing ---- */

static void put_code(uint8_t *row, int bits, int64_t i, uint32_t q)
{
    uint64_t bit = (uint64_t)i * (uint64_t)bits;
    for (int k = 0; k < bits; k++, bit++)
        if (q >> k & 1)
            row[bit >> 3] |= (uint8_t)(1u << (bit & 7));
}

/* A quantized matrix: codes, scales and biases as the file stores them. */
typedef struct {
    uint8_t *codes;
    void *scales, *biases;
    float *deq; /* what it dequantizes to */
    lilac_mat m;
} qmat;

static void qmat_free(qmat *q)
{
    free(q->codes);
    free(q->scales);
    free(q->biases);
    free(q->deq);
}

/* MLX's rule: per group min/max, scale = (max - min) / (2^bits - 1), bias =
 * min (both rounded to the scale type), q = round((w - bias) / scale). */
static void quantize(const float *w, int64_t rows, int64_t cols, int bits, int gs, int stype, qmat *out)
{
    int64_t ng = cols / gs;
    size_t rb = (size_t)(cols * bits / 8), ssz = stype == LILAC_F32 ? 4 : 2;
    out->codes = calloc((size_t)rows, rb);
    out->scales = malloc((size_t)(rows * ng) * ssz);
    out->biases = malloc((size_t)(rows * ng) * ssz);
    out->deq = malloc((size_t)(rows * cols) * sizeof(float));
    uint32_t qmax = (1u << bits) - 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < ng; g++) {
            const float *x = w + r * cols + g * gs;
            float mn = x[0], mx = x[0];
            for (int i = 1; i < gs; i++) {
                mn = x[i] < mn ? x[i] : mn;
                mx = x[i] > mx ? x[i] : mx;
            }
            float s = (mx - mn) / (float)qmax;
            if (!(s > 1e-7f))
                s = 1e-7f;
            s = decode_scale(stype, s);
            float b = decode_scale(stype, mn);
            size_t k = (size_t)(r * ng + g);
            if (stype == LILAC_F32) {
                ((float *)out->scales)[k] = s;
                ((float *)out->biases)[k] = b;
            } else {
                ((uint16_t *)out->scales)[k] = stype == LILAC_F16 ? to_f16(s) : to_bf16(s);
                ((uint16_t *)out->biases)[k] = stype == LILAC_F16 ? to_f16(b) : to_bf16(b);
            }
            for (int i = 0; i < gs; i++) {
                float qf = nearbyintf((x[i] - b) / s);
                uint32_t q = qf < 0 ? 0 : qf > (float)qmax ? qmax : (uint32_t)qf;
                put_code(out->codes + (size_t)r * rb, bits, g * gs + i, q);
                float sq = s * (float)q;
                out->deq[r * cols + g * gs + i] = sq + b;
            }
        }
    lilac_mat m = {.data = out->codes, .type = LILAC_MLX_AFFINE, .rows = rows, .cols = cols, .row_bytes = rb,
                   .scales = out->scales, .biases = out->biases, .scale_type = stype, .group_size = gs,
                   .bits = bits, .scale_row_bytes = (size_t)ng * ssz};
    out->m = m;
}

/* ---- kernels ---- */

static void test_fixture(void)
{
    const char *fx = tu_require_fixtures();
    char path[4096];
    snprintf(path, sizeof path, "%s/mlx/affine-dequant.json", fx);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECKF(root != NULL, "%s: %s", path, je.text);
    if (!root)
        return;
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= 4);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *k = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(k, "name"));
        int64_t rows = json_integer_value(json_object_get(k, "rows"));
        int64_t cols = json_integer_value(json_object_get(k, "cols"));
        int gs = (int)json_integer_value(json_object_get(k, "group_size"));
        int bits = (int)json_integer_value(json_object_get(k, "bits"));
        json_t *codes = json_object_get(k, "codes"), *sc = json_object_get(k, "scales"),
               *bi = json_object_get(k, "biases"), *ex = json_object_get(k, "expected");
        CHECKF((int64_t)json_array_size(codes) == rows * cols * bits / 32 &&
                   (int64_t)json_array_size(sc) == rows * cols / gs && (int64_t)json_array_size(ex) == rows * cols,
               "case %s: sizes", name);
        uint32_t *w = malloc(json_array_size(codes) * 4);
        float *s = malloc(json_array_size(sc) * 4), *b = malloc(json_array_size(bi) * 4);
        uint16_t *s16 = malloc(json_array_size(sc) * 2), *b16 = malloc(json_array_size(bi) * 2);
        float *out = malloc((size_t)cols * 4);
        for (size_t i = 0; i < json_array_size(codes); i++)
            w[i] = (uint32_t)json_integer_value(json_array_get(codes, i));
        bool bf16_exact = true;
        for (size_t i = 0; i < json_array_size(sc); i++) {
            s[i] = (float)json_number_value(json_array_get(sc, i));
            b[i] = (float)json_number_value(json_array_get(bi, i));
            s16[i] = to_bf16(s[i]);
            b16[i] = to_bf16(b[i]);
            bf16_exact &= lilac_bf16_to_f32(s16[i]) == s[i] && lilac_bf16_to_f32(b16[i]) == b[i];
        }
        for (int variant = 0; variant < 2; variant++) {
            if (variant == 1 && !bf16_exact)
                break; /* scales as bf16 (as MLX writes them) when they are bf16 values */
            lilac_mat m = {.data = w, .type = LILAC_MLX_AFFINE, .rows = rows, .cols = cols,
                           .row_bytes = (size_t)(cols * bits / 8), .scales = variant ? (void *)s16 : (void *)s,
                           .biases = variant ? (void *)b16 : (void *)b, .scale_type = variant ? LILAC_BF16 : LILAC_F32,
                           .group_size = gs, .bits = bits,
                           .scale_row_bytes = (size_t)(cols / gs) * (variant ? 2 : 4)};
            int bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                lilac_mat_row_to_f32(&m, r, out);
                for (int64_t i = 0; i < cols; i++) {
                    float e = (float)json_number_value(json_array_get(ex, (size_t)(r * cols + i)));
                    uint32_t ua, ub;
                    memcpy(&ua, &out[i], 4);
                    memcpy(&ub, &e, 4);
                    if (ua != ub && !(out[i] == 0 && e == 0))
                        bad++;
                }
            }
            CHECKF(bad == 0, "case %s (%s scales): %d values differ from MLX's", name, variant ? "bf16" : "f32", bad);
        }
        free(w), free(s), free(b), free(s16), free(b16), free(out);
    }
    json_decref(root);
}

/* MLX's extract_bits (mlx/backend/cpu/quantized.cpp) for the widths whose
 * codes straddle bytes, written out as it does. */
static void mlx_extract(const uint8_t *w, int bits, uint32_t *o)
{
    if (bits == 3) {
        o[0] = w[0] & 0x7, o[1] = (w[0] & 0x38) >> 3, o[2] = ((w[0] & 0xc0) >> 6) + ((w[1] & 0x1) << 2);
        o[3] = (w[1] & 0xe) >> 1, o[4] = (w[1] & 0x70) >> 4, o[5] = ((w[1] & 0x80) >> 7) + ((w[2] & 0x3) << 1);
        o[6] = (w[2] & 0x1c) >> 2, o[7] = (w[2] & 0xe0) >> 5;
    } else if (bits == 5) {
        o[0] = w[0] & 0x1f, o[1] = ((w[0] & 0xe0) >> 5) + ((w[1] & 0x3) << 3), o[2] = (w[1] & 0x7c) >> 2;
        o[3] = ((w[1] & 0x80) >> 7) + ((w[2] & 0xf) << 1), o[4] = ((w[2] & 0xf0) >> 4) + ((w[3] & 0x1) << 4);
        o[5] = (w[3] & 0x3e) >> 1, o[6] = ((w[3] & 0xc0) >> 6) + ((w[4] & 0x7) << 2), o[7] = (w[4] & 0xf8) >> 3;
    } else { /* 6 */
        o[0] = w[0] & 0x3f, o[1] = ((w[0] >> 6) & 0x3) + ((w[1] & 0xf) << 2);
        o[2] = ((w[1] >> 4) & 0xf) + ((w[2] & 0x3) << 4), o[3] = (w[2] >> 2) & 0x3f;
    }
}

static void test_codes(void)
{
    uint8_t buf[64];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)rnd();
    const int widths[3] = {3, 5, 6};
    for (int k = 0; k < 3; k++) {
        int bits = widths[k], per = bits == 6 ? 4 : 8, bytes = bits == 6 ? 3 : bits;
        int bad = 0;
        for (int p = 0; p < 4; p++) {
            uint32_t o[8];
            mlx_extract(buf + p * bytes, bits, o);
            for (int i = 0; i < per; i++)
                bad += lilac_mlx_code(buf, bits, p * per + i) != o[i];
        }
        CHECKF(bad == 0, "%d-bit codes: %d differ from MLX's extract_bits", bits, bad);
    }
    /* 4 bits: the first value in the lowest bits of each uint32 */
    uint32_t word = 0x76543210u;
    for (int i = 0; i < 8; i++)
        CHECK(lilac_mlx_code(&word, 4, i) == (uint32_t)i);
}

static void test_dot(void)
{
    const int bitss[6] = {2, 3, 4, 5, 6, 8}, gss[3] = {32, 64, 128}, stypes[3] = {LILAC_F16, LILAC_BF16, LILAC_F32};
    const int ngroups[4] = {1, 3, 7, 37};
    bool avx2 = false;
#if defined(LILAC_X86)
    avx2 = lilac_cpu_runs(&lilac_cpu_avx2);
#endif
    lilac_pool *pool = NULL;
    lilac_error err;
    CHECK(lilac_pool_new(3, &pool, &err) == LILAC_OK);
    double worst = 0;
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++)
            for (int ni = 0; ni < 4; ni++) {
                int bits = bitss[bi], gs = gss[gi], stype = stypes[(bi + gi + ni) % 3];
                int64_t rows = 5, cols = (int64_t)gs * ngroups[ni];
                float *w = malloc((size_t)(rows * cols) * 4), *x = malloc((size_t)(2 * cols) * 4);
                for (int64_t i = 0; i < rows * cols; i++)
                    w[i] = frand() * (i % 17 == 0 ? 4.0f : 1.0f);
                for (int64_t i = 0; i < 2 * cols; i++)
                    x[i] = frand();
                qmat q;
                quantize(w, rows, cols, bits, gs, stype, &q);
                float *row = malloc((size_t)cols * 4), y[10];
                int bad_deq = 0;
                for (int64_t r = 0; r < rows; r++) {
                    lilac_mat_row_to_f32(&q.m, r, row);
                    bad_deq += memcmp(row, q.deq + r * cols, (size_t)cols * 4) != 0;
                    /* the scalar dot is the dot of the dequantized row */
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < cols; i++) {
                        ref += (double)row[i] * x[i];
                        mag += fabs((double)row[i] * x[i]);
                    }
                    float sd = lilac_mlx_dot_scalar(&q.m, r, x);
                    CHECKF(fabs(sd - ref) <= 1e-5 * mag + 1e-6, "scalar dot bits %d gs %d cols %lld: %g vs %g", bits,
                           gs, (long long)cols, sd, ref);
                    if (avx2) {
#if defined(LILAC_X86)
                        float ad = lilac_mlx_dot_avx2(&q.m, r, x);
                        double d = fabs((double)ad - sd) / (mag + 1e-30);
                        worst = d > worst ? d : worst;
                        CHECKF(fabs((double)ad - sd) <= 2e-6 * mag + 1e-6,
                               "avx2 dot bits %d gs %d cols %lld scale %d: %.9g vs scalar %.9g (sum|wx| %g)", bits, gs,
                               (long long)cols, stype, ad, sd, mag);
#endif
                    }
                }
                CHECKF(bad_deq == 0, "bits %d gs %d: dequantized rows differ from the quantizer's", bits, gs);
                /* the threaded product, on the best set and on the scalar one */
                const lilac_cpu_kernels *sets[2] = {lilac_cpu_best(), &lilac_cpu_scalar};
                for (int s = 0; s < 2; s++) {
                    lilac_matmul(sets[s], pool, &q.m, x, 2, y);
                    for (int t = 0; t < 2; t++)
                        for (int64_t r = 0; r < rows; r++) {
                            float want = lilac_mlx_dot_for(sets[s])(&q.m, r, x + t * cols);
                            CHECKF(y[t * rows + r] == want, "matmul (%s) row %lld tok %d", sets[s]->name, (long long)r,
                                   t);
                        }
                }
                qmat_free(&q);
                free(w), free(x), free(row);
            }
    printf("avx2 %s; worst |avx2 - scalar| / sum|wx| = %.3g\n", avx2 ? "tested" : "not on this CPU", worst);
    lilac_pool_free(pool);
}

/* ---- writing checkpoints ---- */

typedef struct {
    char name[512];
    const char *dtype;
    int nd;
    int64_t shape[4];
    void *data; /* owned */
    size_t nbytes;
} wt;

typedef struct {
    wt *v;
    size_t n, cap;
} wlist;

static void wl_add(wlist *l, const char *name, const char *dtype, int nd, const int64_t *shape, void *data,
                   size_t nbytes)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
    }
    wt *t = &l->v[l->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->nd = nd;
    memcpy(t->shape, shape, (size_t)nd * sizeof *shape);
    t->data = data;
    t->nbytes = nbytes;
}

static void *dup_mem(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    memcpy(d, p, n);
    return d;
}

static int wl_write(wlist *l, const char *path)
{
    json_t *h = json_object();
    size_t off = 0;
    for (size_t i = 0; i < l->n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < l->v[i].nd; d++)
            json_array_append_new(shape, json_integer(l->v[i].shape[d]));
        json_object_set_new(h, l->v[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", l->v[i].dtype, "shape", shape, "data_offsets",
                                      (json_int_t)off, (json_int_t)(off + l->v[i].nbytes)));
        off += l->v[i].nbytes;
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(hs);
        return -1;
    }
    uint64_t n = padded;
    fwrite(&n, 8, 1, f);
    fwrite(hs, 1, hl, f);
    for (size_t i = hl; i < padded; i++)
        fputc(' ', f);
    for (size_t i = 0; i < l->n; i++)
        fwrite(l->v[i].data, 1, l->v[i].nbytes, f);
    free(hs);
    return fclose(f);
}

static void wl_free(wlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].data);
    free(l->v);
}

static const char *st_dtype_str(int t)
{
    switch (t) {
    case LILAC_F32: return "F32";
    case LILAC_F16: return "F16";
    case LILAC_BF16: return "BF16";
    case LILAC_U32: return "U32";
    default: return "?";
    }
}

typedef struct {
    const char *src; /* an HF checkpoint directory */
    const char *out; /* writes out/mlx and out/hf */
    bool qwen35;     /* mlx-lm's qwen3_5 layout: language_model.model., folded norms, [C, K, 1] conv */
    int bits, gs, stype;
    /* for the error cases */
    const char *drop_scales; /* a module path (MLX name less .weight) whose scales are left out */
    int cfg_bits;            /* when set, the config's bits */
    const char *bad_gs_module; /* a module whose group size the config misstates as 64 */
} gen_opts;

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Quantize one [rows, cols] (or stacked [E, rows, cols]) float tensor into
 * MLX tensors under `mlx_name` less .weight; returns the dequantized values
 * (malloc'd) or NULL when it stays unquantized (as mlx-lm leaves a layer
 * whose width its group size does not divide). */
static float *add_quantized(wlist *mlx, json_t *q, const gen_opts *o, const char *mlx_name, const float *w,
                            int64_t n_mats, int64_t rows, int64_t cols)
{
    char module[256];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(mlx_name) - 7), mlx_name);
    int bits = o->bits, gs = o->gs;
    bool exception = false;
    if (ends_with(module, "mlp.gate") || ends_with(module, "shared_expert_gate"))
        bits = 8, gs = 64, exception = true;
    if (cols % gs != 0) {
        if (cols % 32 != 0)
            return NULL;
        gs = 32;
        exception = true;
    }
    if (exception)
        json_object_set_new(q, module, json_pack("{s:i, s:i}", "group_size", gs, "bits", bits));
    int64_t ng = cols / gs;
    size_t ssz = o->stype == LILAC_F32 ? 4 : 2, rb = (size_t)(cols * bits / 8);
    uint8_t *codes = malloc((size_t)(n_mats * rows) * rb);
    uint8_t *sc = malloc((size_t)(n_mats * rows * ng) * ssz), *bi = malloc((size_t)(n_mats * rows * ng) * ssz);
    float *deq = malloc((size_t)(n_mats * rows * cols) * sizeof(float));
    for (int64_t e = 0; e < n_mats; e++) {
        qmat qm;
        quantize(w + e * rows * cols, rows, cols, bits, gs, o->stype, &qm);
        memcpy(codes + (size_t)(e * rows) * rb, qm.codes, (size_t)rows * rb);
        memcpy(sc + (size_t)(e * rows * ng) * ssz, qm.scales, (size_t)(rows * ng) * ssz);
        memcpy(bi + (size_t)(e * rows * ng) * ssz, qm.biases, (size_t)(rows * ng) * ssz);
        memcpy(deq + e * rows * cols, qm.deq, (size_t)(rows * cols) * sizeof(float));
        qmat_free(&qm);
    }
    int nd = n_mats > 1 ? 3 : 2;
    int64_t ws[3], ss[3];
    int d = 0;
    if (nd == 3)
        ws[d] = ss[d] = n_mats, d++;
    ws[d] = ss[d] = rows;
    ws[d + 1] = cols * bits / 32;
    ss[d + 1] = ng;
    char name[300];
    wl_add(mlx, mlx_name, "U32", nd, ws, codes, (size_t)(n_mats * rows) * rb);
    if (!o->drop_scales || strcmp(o->drop_scales, module) != 0) {
        snprintf(name, sizeof name, "%s.scales", module);
        wl_add(mlx, name, st_dtype_str(o->stype), nd, ss, sc, (size_t)(n_mats * rows * ng) * ssz);
    } else {
        free(sc);
    }
    snprintf(name, sizeof name, "%s.biases", module);
    wl_add(mlx, name, st_dtype_str(o->stype), nd, ss, bi, (size_t)(n_mats * rows * ng) * ssz);
    return deq;
}

static float *to_f32(const st_tensor *t, int64_t *count)
{
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= t->shape[d];
    float *f = malloc((size_t)n * sizeof(float));
    lilac_row_to_f32(t->dtype, t->data, f, n);
    *count = n;
    return f;
}

static void copy_file(const char *from_dir, const char *to_dir, const char *name)
{
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    size_t n;
    void *d = tu_read_file(a, &n);
    if (d)
        tu_write_file(b, d, n);
    free(d);
}

static int generate(const gen_opts *o)
{
    char mdir[4300], hdir[4300], path[4400];
    mkdir(o->out, 0755);
    snprintf(mdir, sizeof mdir, "%s/mlx", o->out);
    snprintf(hdir, sizeof hdir, "%s/hf", o->out);
    mkdir(mdir, 0755);
    mkdir(hdir, 0755);
    st_set *st = NULL;
    lilac_error err;
    if (st_open(o->src, &st, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    json_t *q = json_pack("{s:i, s:i, s:s}", "group_size", o->gs, "bits", o->cfg_bits ? o->cfg_bits : o->bits, "mode",
                          "affine");
    wlist mlx = {0}, hf = {0};
    const char *mprefix = o->qwen35 ? "language_model.model." : "model.";
    for (size_t i = 0; i < st_n_tensors(st); i++) {
        const st_tensor *t = st_tensor_at(st, i);
        const char *rel = t->name;
        if (strncmp(rel, "model.language_model.", 21) == 0)
            rel += 21;
        else if (strncmp(rel, "model.", 6) == 0)
            rel += 6;
        char mname[300];
        if (strcmp(t->name, "lm_head.weight") == 0)
            snprintf(mname, sizeof mname, "%slm_head.weight", o->qwen35 ? "language_model." : "");
        else
            snprintf(mname, sizeof mname, "%s%s", mprefix, rel);
        int64_t n;
        int le, lx;
        char proj[32];
        if (sscanf(rel, "layers.%d.mlp.experts.%d.%31[a-z_].weight", &le, &lx, proj) == 3) {
            if (lx != 0)
                continue; /* stacked with expert 0 */
            char base[300], ename[400];
            snprintf(base, sizeof base, "%.*s", (int)(strstr(t->name, ".experts.") - t->name), t->name);
            int64_t rows = t->shape[0], cols = t->shape[1], E = 0;
            for (;; E++) {
                snprintf(ename, sizeof ename, "%s.experts.%lld.%s.weight", base, (long long)E, proj);
                if (!st_find(st, ename))
                    break;
            }
            float *w = malloc((size_t)(E * rows * cols) * sizeof(float));
            for (int64_t e = 0; e < E; e++) {
                snprintf(ename, sizeof ename, "%s.experts.%lld.%s.weight", base, (long long)e, proj);
                float *f = to_f32(st_find(st, ename), &n);
                memcpy(w + e * rows * cols, f, (size_t)n * sizeof(float));
                free(f);
            }
            snprintf(mname, sizeof mname, "%slayers.%d.mlp.switch_mlp.%s.weight", mprefix, le, proj);
            float *deq = add_quantized(&mlx, q, o, mname, w, E, rows, cols);
            if (!deq) { /* stays as it is: a stacked float tensor */
                int64_t sh[3] = {E, rows, cols};
                wl_add(&mlx, mname, "F32", 3, sh, dup_mem(w, (size_t)(E * rows * cols) * 4),
                       (size_t)(E * rows * cols) * 4);
                deq = dup_mem(w, (size_t)(E * rows * cols) * 4);
            }
            for (int64_t e = 0; e < E; e++) {
                snprintf(ename, sizeof ename, "%s.experts.%lld.%s.weight", base, (long long)e, proj);
                int64_t sh[2] = {rows, cols};
                wl_add(&hf, ename, "F32", 2, sh, dup_mem(deq + e * rows * cols, (size_t)(rows * cols) * 4),
                       (size_t)(rows * cols) * 4);
            }
            free(deq);
            free(w);
            continue;
        }
        if (t->n_dims == 2 && ends_with(t->name, ".weight")) { /* Linear / Embedding */
            float *w = to_f32(t, &n);
            float *deq = add_quantized(&mlx, q, o, mname, w, 1, t->shape[0], t->shape[1]);
            if (deq) {
                wl_add(&hf, t->name, "F32", 2, t->shape, deq, (size_t)n * 4);
                free(w);
                continue;
            }
            free(w); /* unquantized: copied below */
        }
        bool folded = o->qwen35 && (ends_with(rel, "input_layernorm.weight") ||
                                    ends_with(rel, "post_attention_layernorm.weight") ||
                                    ends_with(rel, "q_norm.weight") || ends_with(rel, "k_norm.weight") ||
                                    strcmp(rel, "norm.weight") == 0);
        wl_add(&hf, t->name, st_dtype_str(t->dtype), t->n_dims, t->shape, dup_mem(t->data, t->nbytes), t->nbytes);
        if (folded) { /* mlx-lm stores 1 + w */
            float *w = to_f32(t, &n);
            for (int64_t k = 0; k < n; k++)
                w[k] += 1.0f;
            wl_add(&mlx, mname, "F32", t->n_dims, t->shape, w, (size_t)n * 4);
        } else if (o->qwen35 && ends_with(rel, "conv1d.weight") && t->n_dims == 3) {
            int64_t sh[3] = {t->shape[0], t->shape[2], 1}; /* [C, 1, K] -> [C, K, 1] */
            wl_add(&mlx, mname, st_dtype_str(t->dtype), 3, sh, dup_mem(t->data, t->nbytes), t->nbytes);
        } else {
            wl_add(&mlx, mname, st_dtype_str(t->dtype), t->n_dims, t->shape, dup_mem(t->data, t->nbytes),
                   t->nbytes);
        }
    }
    if (o->bad_gs_module)
        json_object_set_new(q, o->bad_gs_module, json_pack("{s:i, s:i}", "group_size", 64, "bits", o->bits));
    st_close(st);
    snprintf(path, sizeof path, "%s/model.safetensors", mdir);
    int rc = wl_write(&mlx, path);
    snprintf(path, sizeof path, "%s/model.safetensors", hdir);
    rc |= wl_write(&hf, path);
    wl_free(&mlx);
    wl_free(&hf);
    /* configs: HF's as is; MLX's with the quantization block (both names, as mlx-lm writes) */
    snprintf(path, sizeof path, "%s/config.json", o->src);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) {
        json_decref(q);
        return -1;
    }
    snprintf(path, sizeof path, "%s/config.json", hdir);
    rc |= json_dump_file(cfg, path, JSON_INDENT(1));
    json_object_set(cfg, "quantization", q);
    json_object_set(cfg, "quantization_config", q);
    snprintf(path, sizeof path, "%s/config.json", mdir);
    rc |= json_dump_file(cfg, path, JSON_INDENT(1));
    json_decref(cfg);
    json_decref(q);
    const char *extra[3] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (int k = 0; k < 3; k++) {
        copy_file(o->src, mdir, extra[k]);
        copy_file(o->src, hdir, extra[k]);
    }
    return rc;
}

/* ---- models ---- */

static void compare(const char *what, const float *a, const float *b, int n, int V, double *rel_out)
{
    float mx = tm_max_abs(b, (size_t)n * V), worst = 0;
    int argmax_bad = 0;
    for (int t = 0; t < n; t++) {
        int ia = 0, ib = 0;
        for (int v = 0; v < V; v++) {
            float d = fabsf(a[(size_t)t * V + v] - b[(size_t)t * V + v]);
            worst = d > worst ? d : worst;
            if (a[(size_t)t * V + v] > a[(size_t)t * V + ia])
                ia = v;
            if (b[(size_t)t * V + v] > b[(size_t)t * V + ib])
                ib = v;
        }
        argmax_bad += ia != ib;
    }
    CHECKF(worst <= 1e-4f * mx, "%s: max|d| %g > 1e-4 * max|logit| %g", what, worst, mx);
    CHECKF(argmax_bad == 0, "%s: argmax differs at %d positions", what, argmax_bad);
    if (rel_out)
        *rel_out = worst / mx;
}

static void test_model(const char *label, const gen_opts *o)
{
    if (generate(o)) {
        CHECKF(0, "%s: cannot write the checkpoints", label);
        return;
    }
    char mdir[4300], hdir[4300];
    snprintf(mdir, sizeof mdir, "%s/mlx", o->out);
    snprintf(hdir, sizeof hdir, "%s/hf", o->out);
    lilac_model *mm = tm_open(mdir, 2), *mh = tm_open(hdir, 2);
    CHECKF(mm && mh, "%s: models open", label);
    if (mm && mh) {
        const lilac_hparams *hp = lilac_model_hparams(mm);
        int V = hp->n_vocab, n = 20;
        CHECK(V == lilac_model_hparams(mh)->n_vocab);
        CHECK(hp->tied_embeddings == lilac_model_hparams(mh)->tied_embeddings);
        int32_t toks[20];
        for (int i = 0; i < n; i++)
            toks[i] = (int32_t)(rnd() % (uint32_t)V);
        float *lm = tm_logits(mm, toks, n, 0, NULL), *lh = tm_logits(mh, toks, n, 0, NULL);
        float *lm1 = tm_logits(mm, toks, n, 1, NULL);
        CHECK(lm && lh && lm1);
        if (lm && lh && lm1) {
            double r0 = 0, r1 = 0;
            char what[256];
            snprintf(what, sizeof what, "%s: MLX vs dequantized HF (prefill)", label);
            compare(what, lm, lh, n, V, &r0);
            snprintf(what, sizeof what, "%s: MLX decode vs MLX prefill", label);
            compare(what, lm1, lm, n, V, &r1);
            printf("%s: %s, tied %d; rel diff vs HF %.2g, decode vs prefill %.2g\n", label,
                   lilac_model_format(mm), hp->tied_embeddings, r0, r1);
        }
        free(lm), free(lh), free(lm1);
    }
    lilac_model_free(mm);
    lilac_model_free(mh);
}

static void expect_error(const char *label, const gen_opts *o, const char *want1, const char *want2)
{
    if (generate(o)) {
        CHECKF(0, "%s: cannot write the checkpoint", label);
        return;
    }
    char mdir[4300];
    snprintf(mdir, sizeof mdir, "%s/mlx", o->out);
    lilac_model *m = NULL;
    lilac_error err = {0};
    lilac_status s = lilac_model_open(mdir, NULL, &m, &err);
    CHECKF(s != LILAC_OK, "%s: opens", label);
    if (s == LILAC_OK) {
        lilac_model_free(m);
        return;
    }
    printf("%s: %s\n", label, err.msg);
    CHECKF(strstr(err.msg, "model.safetensors") && strstr(err.msg, want1) && strstr(err.msg, want2) &&
               !strchr(err.msg, '\n'),
           "%s: message '%s' should name the file, '%s' and '%s'", label, err.msg, want1, want2);
}

int main(void)
{
    test_codes();
    test_fixture();
    test_dot();

    const char *fx = tu_fixtures();
    char src[4096], out[4160], dir[4096];
    snprintf(dir, sizeof dir, "%s/mlx-test", LILAC_BINARY_DIR);
    mkdir(dir, 0755);
    if (fx) {
        snprintf(src, sizeof src, "%s/tiny-qwen35moe/hf", fx);
        snprintf(out, sizeof out, "%s/tiny-qwen35moe", dir);
        gen_opts o = {.src = src, .out = out, .qwen35 = true, .bits = 4, .gs = 64, .stype = LILAC_BF16};
        test_model("tiny-qwen35moe 4-bit g64 bf16", &o);
        snprintf(src, sizeof src, "%s/tiny-qwen3moe/hf", fx);
        snprintf(out, sizeof out, "%s/tiny-qwen3moe", dir);
        gen_opts o3 = {.src = src, .out = out, .qwen35 = false, .bits = 8, .gs = 128, .stype = LILAC_F16};
        test_model("tiny-qwen3moe 8-bit g128 f16", &o3);
    } else {
        printf("fixtures not found: tiny models skipped\n");
    }
    snprintf(src, sizeof src, "%s/tests/data/variants/q35-a/hf", LILAC_SOURCE_DIR);
    snprintf(out, sizeof out, "%s/q35-a", dir);
    gen_opts oa = {.src = src, .out = out, .qwen35 = true, .bits = 4, .gs = 64, .stype = LILAC_F16};
    test_model("q35-a 4-bit g64 f16 (tied, exceptions)", &oa);
    snprintf(src, sizeof src, "%s/tests/data/variants/q3-a/hf", LILAC_SOURCE_DIR);
    snprintf(out, sizeof out, "%s/q3-a", dir);
    gen_opts ob = {.src = src, .out = out, .qwen35 = false, .bits = 4, .gs = 32, .stype = LILAC_BF16};
    test_model("q3-a 4-bit g32 bf16 (tied)", &ob);

    /* broken checkpoints */
    snprintf(out, sizeof out, "%s/err-scales", dir);
    gen_opts e1 = ob;
    e1.out = out;
    e1.drop_scales = "model.layers.1.self_attn.k_proj";
    expect_error("missing scales", &e1, "model.layers.1.self_attn.k_proj.weight", "scales");
    char out2[4160];
    snprintf(out2, sizeof out2, "%s/err-group", dir);
    gen_opts e2 = ob;
    e2.out = out2;
    e2.bad_gs_module = "model.layers.0.self_attn.q_proj";
    expect_error("group size", &e2, "model.layers.0.self_attn.q_proj.weight", "does not divide");
    char out3[4160];
    snprintf(out3, sizeof out3, "%s/err-bits", dir);
    gen_opts e3 = ob;
    e3.out = out3;
    e3.cfg_bits = 7;
    expect_error("unsupported bits", &e3, ".weight", "7 bits");
    TEST_END();
}
