/* quantize: llama-quantize's decisions and file layout over two sources,
 * a Hugging Face checkpoint (convert.c's plans) or a GGUF file.
 *
 * The per-tensor type follows llama.cpp's src/llama-quant.cpp
 * (tensor_allows_quantization, llama_tensor_get_type_impl,
 * tensor_type_fallback) for the file types lilac writes; the rules of the
 * IQ and Q2/Q3 types, Falcon and the 70B Llama are left out. */
#include "model/quantize.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quantize.h"
#include "model/convert.h"
#include "model/gguf_meta.h"
#include "util/err.h"
#include "util/pool.h"

/* llama.cpp's llama_ftype values (general.file_type). */
enum {
    FT_ALL_F32 = 0,
    FT_F16 = 1,
    FT_Q4_0 = 2,
    FT_Q8_0 = 7,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_BF16 = 32,
};

typedef struct qz_type {
    const char *name;
    int ftype;
    int base; /* the default tensor type */
    bool pure;
} qz_type;

static const qz_type qz_types[] = {
    {"Q8_0", FT_Q8_0, LILAC_Q8_0, false},     {"Q6_K", FT_Q6_K, LILAC_Q6_K, false},
    {"Q5_K_M", FT_Q5_K_M, LILAC_Q5_K, false}, {"Q5_K_S", FT_Q5_K_S, LILAC_Q5_K, false},
    {"Q5_K", FT_Q5_K_S, LILAC_Q5_K, true},    {"Q4_K_M", FT_Q4_K_M, LILAC_Q4_K, false},
    {"Q4_K_S", FT_Q4_K_S, LILAC_Q4_K, false}, {"Q4_K", FT_Q4_K_S, LILAC_Q4_K, true},
    {"Q4_0", FT_Q4_0, LILAC_Q4_0, false},     {"BF16", FT_BF16, LILAC_BF16, false},
    {"F16", FT_F16, LILAC_F16, false},        {"F32", FT_ALL_F32, LILAC_F32, false},
};

const char *lilac_quantize_type_names(void)
{
    return "Q8_0 Q6_K Q5_K_M Q5_K_S Q5_K Q4_K_M Q4_K_S Q4_K Q4_0 BF16 F16 F32";
}

static const qz_type *find_type(const char *name)
{
    for (size_t i = 0; name && i < sizeof qz_types / sizeof qz_types[0]; i++) {
        const char *a = qz_types[i].name, *b = name;
        while (*a && *b && toupper((unsigned char)*b) == *a)
            a++, b++;
        if (!*a && !*b)
            return &qz_types[i];
    }
    return NULL;
}

int lilac_quantize_file_type(const char *type)
{
    const qz_type *t = find_type(type);
    return t ? t->ftype : -1;
}

static void qlog(lilac_log_fn log, void *user, lilac_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void qlog(lilac_log_fn log, void *user, lilac_log_level lvl, const char *fmt, ...)
{
    if (!log)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log(user, lvl, buf);
}

static bool is_block_type(int type)
{
    const lilac_dtype_info *d = lilac_dtype_get(type);
    return d && d->blck > 1;
}

static const char *type_name(int type)
{
    const lilac_dtype_info *d = lilac_dtype_get(type);
    return d ? d->name : "unknown";
}

/* ---- llama.cpp's choice of a tensor's type ---- */

enum cat {
    CAT_TOKEN_EMBD,
    CAT_ATTN_Q,
    CAT_ATTN_V,
    CAT_ATTN_K,
    CAT_ATTN_QKV,
    CAT_ATTN_KV_B,
    CAT_ATTN_OUTPUT,
    CAT_FFN_UP,
    CAT_FFN_GATE,
    CAT_FFN_DOWN,
    CAT_OUTPUT,
    CAT_OTHER,
};

static bool has(const char *s, const char *sub)
{
    return strstr(s, sub) != NULL;
}

static enum cat category(const char *name)
{
    if (!strcmp(name, "output.weight"))
        return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight"))
        return CAT_ATTN_QKV;
    if (has(name, "attn_kv_b.weight"))
        return CAT_ATTN_KV_B;
    if (has(name, "attn_v.weight"))
        return CAT_ATTN_V;
    if (has(name, "attn_k.weight"))
        return CAT_ATTN_K;
    if (has(name, "attn_q.weight"))
        return CAT_ATTN_Q;
    if (has(name, "attn_output.weight"))
        return CAT_ATTN_OUTPUT;
    if (has(name, "ffn_up"))
        return CAT_FFN_UP;
    if (has(name, "ffn_gate"))
        return CAT_FFN_GATE;
    if (has(name, "ffn_down"))
        return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* attn_v-like tensors, the most sensitive ones */
static bool cat_attn_v(enum cat c)
{
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

/* ggml_n_dims: dimensions up to the last that is not 1 */
static int n_dims_of(const int64_t *ne)
{
    int n = 4;
    while (n > 1 && ne[n - 1] == 1)
        n--;
    return n;
}

/* tensor_allows_quantization */
static bool allows_quantization(const char *name, const int64_t *ne)
{
    if (n_dims_of(ne) < 2)
        return false;
    size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight"))
        return false;
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
        "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
        "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
        "mm.a.code_embd",
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(name, never[i]))
            return false;
    return strcmp(name, "position_embd.weight") && strcmp(name, "token_types.weight");
}

typedef struct qz_state {
    const qz_type *qt;
    int n_layer, n_expert;
    int n_attention_wv, i_attention_wv;
    int i_ffn_down, i_ffn_gate, i_ffn_up;
    bool tied; /* no output.weight: token_embd is the output too */
    lilac_error *err;
} qz_state;

static bool use_more_bits(int i_layer, int n_layers)
{
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* The layer of an ffn tensor: from its name in MoE models (their experts
 * need not come in layer order), else the running count. */
static lilac_status layer_of(qz_state *q, const char *name, int counter, int *out)
{
    int il = counter;
    if (q->n_expert > 1) {
        if (sscanf(name, "blk.%d.", &il) != 1)
            return lilac_fail(q->err, LILAC_E_FORMAT, "cannot tell the layer of tensor '%s'", name);
        if (il < 0 || il >= q->n_layer)
            return lilac_fail(q->err, LILAC_E_FORMAT, "tensor '%s' is in layer %d, but the model has %d", name, il,
                              q->n_layer);
    }
    *out = il;
    return LILAC_OK;
}

/* llama_tensor_get_type_impl, for lilac's file types */
static lilac_status mix_type(qz_state *q, const char *name, const int64_t *ne, enum cat c, int *type)
{
    int ft = q->qt->ftype, t = *type, il = 0;
    lilac_status s;
    if (c == CAT_OUTPUT || (q->tied && c == CAT_TOKEN_EMBD)) {
        if (ne[0] % (int64_t)lilac_dtype_get(t)->blck != 0)
            t = LILAC_Q8_0;
        else if (t != LILAC_Q8_0)
            t = LILAC_Q6_K;
    } else if (c == CAT_TOKEN_EMBD) {
        /* only the IQ and TQ types change it */
    } else if (cat_attn_v(c)) {
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(q->i_attention_wv, q->n_attention_wv))
            t = LILAC_Q6_K;
        else if (ft == FT_Q4_K_S && q->i_attention_wv < 4)
            t = LILAC_Q5_K;
        if (q->n_expert == 8) /* "bumping this to Q8_0 trades just ~128MB" */
            t = LILAC_Q8_0;
        q->i_attention_wv++;
    } else if (c == CAT_ATTN_K) {
        if (q->n_expert == 8)
            t = LILAC_Q8_0;
    } else if (c == CAT_FFN_DOWN) {
        if ((s = layer_of(q, name, q->i_ffn_down, &il)))
            return s;
        int n = q->n_layer;
        if (ft == FT_Q4_K_M) {
            if (use_more_bits(il, n))
                t = LILAC_Q6_K;
        } else if (ft == FT_Q5_K_M && use_more_bits(il, n)) {
            t = LILAC_Q6_K;
        } else if (ft == FT_Q4_K_S && il < n / 8) {
            t = LILAC_Q5_K;
        }
        q->i_ffn_down++;
    } else if (c == CAT_ATTN_OUTPUT) {
        if (q->n_expert == 8 && (ft == FT_Q4_K_S || ft == FT_Q4_K_M))
            t = LILAC_Q5_K;
    } else if (c == CAT_FFN_GATE || c == CAT_FFN_UP) {
        if ((s = layer_of(q, name, c == CAT_FFN_GATE ? q->i_ffn_gate : q->i_ffn_up, &il)))
            return s;
        if (c == CAT_FFN_GATE)
            q->i_ffn_gate++;
        else
            q->i_ffn_up++;
    }
    *type = t;
    return LILAC_OK;
}

/* tensor_type_fallback: rows that are not a whole number of blocks */
static lilac_status fallback(qz_state *q, const char *name, const int64_t *ne, int *type, lilac_log_fn log,
                             void *user)
{
    int t = *type;
    if (ne[0] % (int64_t)lilac_dtype_get(t)->blck == 0)
        return LILAC_OK;
    int f;
    switch (t) {
    case LILAC_Q4_K: f = LILAC_Q5_0; break;
    case LILAC_Q5_K: f = LILAC_Q5_1; break;
    case LILAC_Q6_K: f = LILAC_Q8_0; break;
    default:
        return lilac_fail(q->err, LILAC_E_UNSUPPORTED,
                          "tensor '%s': rows of %lld values are not a whole number of %s blocks, and llama.cpp has no "
                          "fallback type for %s",
                          name, (long long)ne[0], type_name(t), type_name(t));
    }
    if (ne[0] % (int64_t)lilac_dtype_get(f)->blck != 0)
        f = LILAC_F16;
    qlog(log, user, LILAC_LOG_WARN,
         "tensor '%s': rows of %lld values are not a whole number of %s blocks: %s instead%s",
         name, (long long)ne[0], type_name(t), type_name(f),
         lilac_cpu_type_supported(f) ? "" : " (as llama.cpp does; lilac itself does not run that type yet)");
    *type = f;
    return LILAC_OK;
}

/* weight_name_comparer: by layer (none first), then by name */
static int layer_key(const char *name)
{
    int il = -1;
    if (sscanf(name, "blk.%d.", &il) != 1)
        il = -1;
    return il;
}

typedef struct qz_key {
    int layer;
    const char *name;
    size_t index;
} qz_key;

static int cmp_key(const void *x, const void *y)
{
    const qz_key *a = x, *b = y;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The indices of tensors in llama.cpp's order (malloc'd). */
static size_t *llama_order(const lilac_qtensor *t, size_t n)
{
    size_t *ix = malloc((n ? n : 1) * sizeof *ix);
    qz_key *k = malloc((n ? n : 1) * sizeof *k);
    if (!ix || !k) {
        free(ix);
        free(k);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        k[i] = (qz_key){layer_key(t[i].name), t[i].name, i};
    qsort(k, n, sizeof *k, cmp_key);
    for (size_t i = 0; i < n; i++)
        ix[i] = k[i].index;
    free(k);
    return ix;
}

static lilac_status choose(const qz_type *qt, int n_layer, int n_expert, const lilac_qtensor *t, size_t n,
                           const size_t *order, int *out, lilac_log_fn log, void *user, lilac_error *err)
{
    qz_state q = {.qt = qt, .n_layer = n_layer, .n_expert = n_expert, .tied = true, .err = err};
    for (size_t i = 0; i < n; i++) {
        enum cat c = category(t[i].name);
        q.n_attention_wv += cat_attn_v(c);
        if (c == CAT_OUTPUT)
            q.tied = false;
    }
    bool quantized = is_block_type(qt->base);
    for (size_t k = 0; k < n; k++) {
        const lilac_qtensor *x = &t[order[k]];
        int type = x->type;
        if (allows_quantization(x->name, x->ne)) {
            type = qt->base;
            lilac_status s;
            if (quantized && ((!qt->pure && (s = mix_type(&q, x->name, x->ne, category(x->name), &type))) ||
                              (s = fallback(&q, x->name, x->ne, &type, log, user))))
                return s;
        }
        out[order[k]] = type;
    }
    return LILAC_OK;
}

lilac_status lilac_quantize_choose_types(const char *type, int n_layer, int n_expert, const lilac_qtensor *tensors,
                                         size_t n, int *out, lilac_log_fn log, void *log_user, lilac_error *err)
{
    const qz_type *qt = find_type(type);
    if (!qt)
        return lilac_fail(err, LILAC_E_ARG, "unknown type '%s' (one of: %s)", type ? type : "",
                          lilac_quantize_type_names());
    size_t *order = llama_order(tensors, n);
    if (!order)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    lilac_status s = choose(qt, n_layer, n_expert, tensors, n, order, out, log, log_user, err);
    free(order);
    return s;
}

/* ---- the driver ---- */

typedef struct qz {
    const char *in, *out;
    const qz_type *qt;
    const lilac_quantize_params *params;
    lilac_error *err;
    lilac_hf_source *hf; /* one of hf, gg */
    gguf_file *gg;
    const char *arch;
    char arch_buf[80];
    int n_layer, n_expert;
    size_t n;
    lilac_qtensor *t;
    int *type;     /* output types */
    size_t *order; /* llama.cpp's order */
    uint64_t total, done;
    const char *current;
    lilac_pool *pool;
} qz;

static void progress_add(void *user, int64_t n)
{
    qz *z = user;
    z->done += (uint64_t)n;
    if (z->params && z->params->progress)
        z->params->progress(z->params->progress_user, z->current, z->done, z->total);
}

static lilac_status gguf_arch(qz *z)
{
    lilac_error *e = z->err;
    const gguf_kv *kv = gguf_find_kv(z->gg, "general.architecture");
    if (!kv || kv->type != GGUF_VT_STRING || kv->v.s.len == 0 || kv->v.s.len > 64)
        return lilac_fail(e, LILAC_E_FORMAT, "%s: no general.architecture", z->in);
    char *arch = z->arch_buf;
    memcpy(arch, kv->v.s.ptr, (size_t)kv->v.s.len);
    arch[kv->v.s.len] = 0;
    z->arch = arch;
    char key[128];
    uint64_t v = 0;
    snprintf(key, sizeof key, "%s.block_count", arch);
    lilac_status s = gguf_get_u64(z->gg, key, &v, e);
    if (s)
        return lilac_fail_prefix(e, "%s", z->in);
    if (v < 1 || v > 100000)
        return lilac_fail(e, LILAC_E_FORMAT, "%s: %s is %llu", z->in, key, (unsigned long long)v);
    z->n_layer = (int)v;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    v = 0;
    if (gguf_find_kv(z->gg, key) && (s = gguf_get_u64(z->gg, key, &v, e)))
        return lilac_fail_prefix(e, "%s", z->in);
    z->n_expert = v > 100000 ? 100000 : (int)v;
    return LILAC_OK;
}

static lilac_status open_input(qz *z)
{
    struct stat sb;
    lilac_error *e = z->err;
    if (stat(z->in, &sb) != 0)
        return lilac_fail(e, LILAC_E_IO, "%s: %s", z->in, strerror(errno));
    lilac_convert_params cp = {.log = z->params ? z->params->log : NULL,
                               .log_user = z->params ? z->params->log_user : NULL};
    lilac_status s;
    if (S_ISDIR(sb.st_mode)) {
        if ((s = lilac_hf_source_open(z->in, &cp, &z->hf, e)))
            return s;
        z->arch = lilac_hf_source_arch(z->hf);
        lilac_hf_source_counts(z->hf, &z->n_layer, &z->n_expert);
        z->n = lilac_hf_source_n_tensors(z->hf);
    } else {
        if ((s = gguf_open(z->in, &z->gg, e)) || (s = gguf_arch(z)))
            return s;
        z->n = gguf_n_tensors(z->gg);
    }
    z->t = calloc(z->n ? z->n : 1, sizeof *z->t);
    z->type = calloc(z->n ? z->n : 1, sizeof *z->type);
    if (!z->t || !z->type)
        return lilac_fail(e, LILAC_E_NOMEM, "out of memory");
    for (size_t i = 0; i < z->n; i++) {
        lilac_qtensor *t = &z->t[i];
        if (z->hf) {
            lilac_hf_tensor h = lilac_hf_source_tensor(z->hf, i);
            t->name = h.name;
            t->type = h.type;
            memcpy(t->ne, h.ne, sizeof t->ne);
        } else {
            const gguf_tensor *g = gguf_tensor_at(z->gg, i);
            t->name = g->name;
            t->type = g->type;
            memcpy(t->ne, g->ne, sizeof t->ne);
        }
        z->total += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return LILAC_OK;
}

static bool skip_key(const char *k)
{
    return !strcmp(k, "general.quantization_version") || !strcmp(k, "general.file_type") || !strcmp(k, "split.no") ||
           !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count");
}

static lilac_status write_metadata(qz *z, gguf_writer *w)
{
    if (z->hf)
        return lilac_hf_source_write_metadata(z->hf, w, z->qt->ftype, z->err);
    gm_out o = {.w = w};
    lilac_status s;
    for (size_t i = 0; i < gguf_n_kv(z->gg); i++) {
        const gguf_kv *kv = gguf_kv_at(z->gg, i);
        if (!skip_key(kv->key) && (s = gm_copy_kv(&o, kv, z->err)))
            return s;
    }
    return gm_write_type_keys(&o, (uint32_t)z->qt->ftype, z->err);
}

/* A GGUF tensor: as it is, or row by row through float32. */
static lilac_status write_gguf_tensor(qz *z, gguf_writer *w, size_t i)
{
    const gguf_tensor *g = gguf_tensor_at(z->gg, i);
    int type = z->type[i];
    lilac_error *e = z->err;
    int64_t ne0 = g->ne[0], rows = g->ne[1] * g->ne[2] * g->ne[3];
    if (type == g->type) {
        const uint8_t *p = g->data;
        size_t step = (size_t)64 << 20, left = g->nbytes;
        while (left) {
            size_t k = left < step ? left : step;
            lilac_status s = gguf_writer_write(w, p, k, e);
            if (s)
                return s;
            p += k;
            left -= k;
            progress_add(z, (int64_t)((uint64_t)ne0 * (uint64_t)rows * k / (g->nbytes ? g->nbytes : 1)));
        }
        return LILAC_OK;
    }
    if (!lilac_cpu_type_supported(g->type))
        return lilac_fail(e, LILAC_E_UNSUPPORTED, "%s: tensor '%s' is %s, which lilac cannot read", z->in, g->name,
                          type_name(g->type));
    size_t in_bytes = lilac_dtype_row_bytes(g->type, ne0), out_bytes = lilac_dtype_row_bytes(type, ne0);
    if (!lilac_quantizer_for(type) || !in_bytes || !out_bytes)
        return lilac_fail(e, LILAC_E_UNSUPPORTED, "tensor '%s': cannot write rows of %lld values as %s", g->name,
                          (long long)ne0, type_name(type));
    /* batches of about 4M values */
    int64_t batch = (((int64_t)1 << 22) + ne0 - 1) / ne0;
    if (batch > rows)
        batch = rows;
    if (batch < 1)
        batch = 1;
    float *x = malloc((size_t)(batch * ne0) * sizeof *x);
    uint8_t *o = malloc((size_t)batch * out_bytes);
    lilac_status s = LILAC_OK;
    if (!x || !o)
        s = lilac_fail(e, LILAC_E_NOMEM, "out of memory");
    for (int64_t r0 = 0; !s && r0 < rows; r0 += batch) {
        int64_t nr = rows - r0 < batch ? rows - r0 : batch;
        for (int64_t r = 0; r < nr; r++)
            lilac_row_to_f32(g->type, (const uint8_t *)g->data + (size_t)(r0 + r) * in_bytes, x + r * ne0, ne0);
        if (!lilac_quantize_rows(z->pool, type, x, o, nr, ne0) && is_block_type(type))
            s = lilac_fail(e, LILAC_E_RANGE,
                           "%s: tensor '%s' holds values %s cannot represent (not finite, or a block scale beyond "
                           "float16)",
                           z->in, g->name, type_name(type));
        else
            s = gguf_writer_write(w, o, (size_t)nr * out_bytes, e);
        progress_add(z, nr * ne0);
    }
    free(x);
    free(o);
    return s;
}

static lilac_status run(qz *z)
{
    lilac_error *e = z->err;
    const lilac_quantize_params *p = z->params;
    lilac_log_fn log = p ? p->log : NULL;
    void *lu = p ? p->log_user : NULL;
    lilac_status s;
    if ((s = open_input(z)))
        return s;
    if (!(z->order = llama_order(z->t, z->n)))
        return lilac_fail(e, LILAC_E_NOMEM, "out of memory");
    if ((s = choose(z->qt, z->n_layer, z->n_expert, z->t, z->n, z->order, z->type, log, lu, e)))
        return s;
    for (size_t i = 0; i < z->n; i++) {
        if (is_block_type(z->t[i].type) && z->type[i] != z->t[i].type) {
            qlog(log, lu, LILAC_LOG_WARN,
                 "%s holds %s tensors: requantizing them to %s loses more than quantizing the original F16/BF16 "
                 "weights would",
                 z->in, type_name(z->t[i].type), z->qt->name);
            break;
        }
    }
    int threads = p && p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    if (threads > 256)
        threads = 256;
    if (threads > 1 && (s = lilac_pool_new(threads, &z->pool, e)))
        return s;
    gguf_writer *w = NULL;
    if ((s = gguf_writer_open(z->out, &w, e)) || (s = write_metadata(z, w)))
        goto done;
    for (size_t k = 0; k < z->n; k++) {
        const lilac_qtensor *t = &z->t[z->order[k]];
        if ((s = gguf_writer_add_tensor(w, t->name, z->type[z->order[k]], n_dims_of(t->ne), t->ne, e)))
            goto done;
    }
    if ((s = gguf_writer_begin_data(w, e)))
        goto done;
    for (size_t k = 0; k < z->n; k++) {
        size_t i = z->order[k];
        z->current = z->t[i].name;
        progress_add(z, 0);
        s = z->hf ? lilac_hf_source_write_tensor(z->hf, i, z->type[i], w, z->pool, progress_add, z, e)
                  : write_gguf_tensor(z, w, i);
        if (s)
            goto done;
    }
    if ((s = gguf_writer_finish(w, e)))
        goto done;
    qlog(log, lu, LILAC_LOG_INFO, "wrote %zu tensors (%s, general.file_type %d) to %s", z->n, z->qt->name,
         z->qt->ftype, z->out);
done:
    gguf_writer_free(w); /* removes OUT.tmp unless finished */
    return s;
}

lilac_status lilac_quantize(const char *in_path, const char *out_path, const char *type,
                            const lilac_quantize_params *params, lilac_error *err)
{
    if (!in_path || !out_path || !type)
        return lilac_fail(err, LILAC_E_ARG, "quantize: wants an input, an output and a type");
    qz z = {.in = in_path, .out = out_path, .params = params, .err = err};
    if (!(z.qt = find_type(type)))
        return lilac_fail(err, LILAC_E_ARG, "quantize: unknown type '%s' (one of: %s)", type,
                          lilac_quantize_type_names());
    lilac_status s = run(&z);
    lilac_pool_free(z.pool);
    free(z.order);
    free(z.t);
    free(z.type);
    lilac_hf_source_free(z.hf);
    gguf_close(z.gg);
    return s;
}
