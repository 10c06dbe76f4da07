/* convert: Hugging Face checkpoint -> GGUF, in llama.cpp's layout.
 *
 * Each GGUF tensor is a plan: its name, type and ggml shape, and where its
 * rows come from: one or more slices of safetensors tensors (several for
 * stacked experts, a half of each matrix for fused gate_up_proj), with an
 * optional regrouping of the DeltaNet value heads (of rows, or of column
 * segments for ssm_out) and an element operation (+1 for the zero-centred
 * norms of Qwen3.5, -exp for A_log). Plans are written in the order
 * llama.cpp's converter writes them: by the (sorted) name of the last HF
 * tensor each one needs. */
#include "model/convert.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/dtype.h"
#include "format/gguf_writer.h"
#include "format/safetensors.h"
#include "model/gguf_meta.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quantize.h"
#include "util/err.h"

enum { OP_NONE = 0, OP_ADD1, OP_NEGEXP };
enum { PERM_NONE = 0, PERM_ROWS, PERM_COLS };

typedef struct cv_src {
    const st_tensor *t;
    int64_t n_mats, mat_rows; /* the tensor is [n_mats, mat_rows, row_len] */
    int64_t r0, rows;         /* the slice taken of each matrix */
} cv_src;

typedef struct cv_plan {
    char name[128];
    int type;
    int n_dims;
    int64_t ne[4];
    cv_src *src; /* owned */
    int n_src;
    int64_t row_len; /* elements per row, as the sources are walked */
    int op;
    int perm;              /* PERM_ROWS: rows >= perm_fixed in blocks of perm_block; PERM_COLS: column blocks */
    int64_t perm_fixed, perm_block;
    size_t order; /* index (in the safetensors walk) of the last source */
    int sub;
} cv_plan;

typedef struct cv {
    const char *in;
    lilac_error *err;
    const lilac_convert_params *params;
    json_t *root, *cfg;
    st_set *st;
    const char *prefix;
    const char *arch; /* GGUF architecture name */
    bool q35;
    uint8_t *used;

    /* hyper-parameters */
    int64_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_expert, n_used, eff, sff, ff, n_ctx, vocab;
    int64_t nk, nv, dk, dv, K, interval, rope_dims;
    int64_t sections[4];
    bool has_sections, tied, norm_topk, attn_gate;
    float eps, theta;
    uint8_t *is_ssm;

    cv_plan *plans;
    size_t n_plans, cap_plans;
} cv;

static void cv_log(cv *c, lilac_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cv_log(cv *c, lilac_log_level lvl, const char *fmt, ...)
{
    if (!c->params || !c->params->log)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->params->log(c->params->log_user, lvl, buf);
}

/* ---- config ---- */

static lilac_status cfg_int(cv *c, const char *key, bool required, int64_t dflt, int64_t *out)
{
    json_t *v = json_object_get(c->cfg, key);
    if (!v || json_is_null(v)) {
        if (required)
            return lilac_fail(c->err, LILAC_E_FORMAT, "%s/config.json: missing '%s'", c->in, key);
        *out = dflt;
        return LILAC_OK;
    }
    double d = json_number_value(v);
    if (!json_is_number(v) || d < 0 || d > 1e12 || d != floor(d))
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s/config.json: '%s' must be a non-negative integer", c->in, key);
    *out = (int64_t)d;
    return LILAC_OK;
}

/* A key of rope_parameters (transformers 5), rope_scaling, or the top level. */
static json_t *cfg_rope(cv *c, const char *key)
{
    const char *groups[] = {"rope_parameters", "rope_scaling"};
    for (int i = 0; i < 2; i++) {
        json_t *g = json_object_get(c->cfg, groups[i]);
        json_t *v = json_is_object(g) ? json_object_get(g, key) : NULL;
        if (v && !json_is_null(v))
            return v;
    }
    return json_object_get(c->cfg, key);
}

static bool cfg_bool(cv *c, const char *key, bool dflt)
{
    json_t *v = json_object_get(c->cfg, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static lilac_status read_config(cv *c)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", c->in);
    json_error_t je;
    c->root = json_load_file(path, 0, &je);
    if (!c->root) {
        struct stat sb;
        if (stat(path, &sb) != 0)
            return lilac_fail(c->err, LILAC_E_IO, "%s: cannot read: %s", path, strerror(errno));
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: invalid JSON at line %d, column %d: %s", path, je.line,
                          je.column, je.text);
    }
    if (!json_is_object(c->root))
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: not a JSON object", path);
    c->cfg = c->root;
    json_t *text = json_object_get(c->root, "text_config");
    if (json_is_object(text)) {
        c->cfg = text;
        json_t *tie = json_object_get(c->root, "tie_word_embeddings");
        if (tie && !json_object_get(text, "tie_word_embeddings"))
            json_object_set(text, "tie_word_embeddings", tie);
    }
    const char *mt = json_string_value(json_object_get(c->cfg, "model_type"));
    if (!mt)
        mt = json_string_value(json_object_get(c->root, "model_type"));
    if (!mt)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: no 'model_type'", path);
    if (!strcmp(mt, "qwen3_5_moe_text") || !strcmp(mt, "qwen3_5_moe")) {
        c->arch = "qwen35moe";
        c->q35 = true;
    } else if (!strcmp(mt, "qwen3_moe")) {
        c->arch = "qwen3moe";
    } else {
        return lilac_fail(c->err, LILAC_E_UNSUPPORTED,
                          "%s: unsupported model_type '%s' (lilac converts qwen3_5_moe_text / qwen3_5_moe and qwen3_moe)",
                          path, mt);
    }

    lilac_status s;
    if ((s = cfg_int(c, "num_hidden_layers", true, 0, &c->n_layer)) ||
        (s = cfg_int(c, "hidden_size", true, 0, &c->n_embd)) ||
        (s = cfg_int(c, "num_attention_heads", true, 0, &c->n_head)) ||
        (s = cfg_int(c, "num_key_value_heads", false, c->n_head, &c->n_head_kv)) ||
        (s = cfg_int(c, "num_experts_per_tok", true, 0, &c->n_used)) ||
        (s = cfg_int(c, "moe_intermediate_size", true, 0, &c->eff)) ||
        (s = cfg_int(c, "intermediate_size", false, 0, &c->ff)) ||
        (s = cfg_int(c, "max_position_embeddings", false, 0, &c->n_ctx)) ||
        (s = cfg_int(c, "vocab_size", true, 0, &c->vocab)))
        return s;
    if ((s = cfg_int(c, "num_experts", false, 0, &c->n_expert)))
        return s;
    if (c->n_expert == 0 && (s = cfg_int(c, "num_local_experts", true, 0, &c->n_expert)))
        return s;
    if (c->n_layer < 1 || c->n_layer > LILAC_MAX_LAYERS || c->n_embd < 1 || c->n_head < 1 || c->n_head_kv < 1 ||
        c->n_expert < 1 || c->n_used < 1 || c->n_used > c->n_expert || c->eff < 1 || c->vocab < 1)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: hyper-parameters out of range", path);
    if ((s = cfg_int(c, "head_dim", false, c->n_embd / c->n_head, &c->head_dim)))
        return s;
    json_t *eps = json_object_get(c->cfg, "rms_norm_eps");
    json_t *theta = cfg_rope(c, "rope_theta");
    if (!json_is_number(eps) || !json_is_number(theta))
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: missing or invalid 'rms_norm_eps' or 'rope_theta'", path);
    c->eps = (float)json_number_value(eps);
    c->theta = (float)json_number_value(theta);
    c->tied = cfg_bool(c, "tie_word_embeddings", false);
    c->is_ssm = calloc((size_t)c->n_layer, 1);
    if (!c->is_ssm)
        return lilac_fail(c->err, LILAC_E_NOMEM, "out of memory");

    if (!c->q35) {
        int64_t step;
        if ((s = cfg_int(c, "decoder_sparse_step", false, 1, &step)))
            return s;
        json_t *mlp_only = json_object_get(c->cfg, "mlp_only_layers");
        if (step != 1 || (json_is_array(mlp_only) && json_array_size(mlp_only) > 0))
            return lilac_fail(c->err, LILAC_E_UNSUPPORTED,
                              "%s: dense MLP layers (decoder_sparse_step, mlp_only_layers) are not supported", path);
        c->norm_topk = cfg_bool(c, "norm_topk_prob", false);
        c->rope_dims = c->head_dim;
        return LILAC_OK;
    }

    if ((s = cfg_int(c, "shared_expert_intermediate_size", false, 0, &c->sff)) ||
        (s = cfg_int(c, "linear_conv_kernel_dim", true, 0, &c->K)) ||
        (s = cfg_int(c, "linear_key_head_dim", true, 0, &c->dk)) ||
        (s = cfg_int(c, "linear_value_head_dim", true, 0, &c->dv)) ||
        (s = cfg_int(c, "linear_num_key_heads", true, 0, &c->nk)) ||
        (s = cfg_int(c, "linear_num_value_heads", true, 0, &c->nv)) ||
        (s = cfg_int(c, "full_attention_interval", false, 4, &c->interval)))
        return s;
    if (c->nk < 1 || c->nv < 1 || c->nv % c->nk != 0 || c->dk < 1 || c->dv < 1 || c->K < 1 || c->interval < 1)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: DeltaNet hyper-parameters out of range", path);
    c->attn_gate = cfg_bool(c, "attn_output_gate", true);
    double prf = 1.0;
    json_t *p = cfg_rope(c, "partial_rotary_factor");
    if (json_is_number(p))
        prf = json_number_value(p);
    c->rope_dims = (int64_t)((double)c->head_dim * prf);
    json_t *sec = cfg_rope(c, "mrope_section");
    if (json_is_array(sec) && json_array_size(sec) <= 4) {
        c->has_sections = true;
        for (size_t i = 0; i < json_array_size(sec); i++)
            c->sections[i] = json_integer_value(json_array_get(sec, i));
    }
    json_t *types = json_object_get(c->cfg, "layer_types");
    for (int64_t i = 0; i < c->n_layer; i++) {
        if (json_is_array(types)) {
            const char *t = json_string_value(json_array_get(types, (size_t)i));
            if (json_array_size(types) != (size_t)c->n_layer || !t ||
                (strcmp(t, "linear_attention") && strcmp(t, "full_attention")))
                return lilac_fail(c->err, LILAC_E_FORMAT,
                                  "%s: 'layer_types' must list %lld layers of linear_attention / full_attention", path,
                                  (long long)c->n_layer);
            c->is_ssm[i] = strcmp(t, "linear_attention") == 0;
        } else {
            c->is_ssm[i] = (i + 1) % c->interval != 0;
        }
    }
    return LILAC_OK;
}

/* ---- plans ---- */

static lilac_status fetch(cv *c, int il, const char *suffix, bool required, const st_tensor **out)
{
    char name[512];
    if (il >= 0)
        snprintf(name, sizeof name, "%slayers.%d.%s", c->prefix, il, suffix);
    else if (!strcmp(suffix, "lm_head.weight"))
        snprintf(name, sizeof name, "%s", suffix);
    else
        snprintf(name, sizeof name, "%s%s", c->prefix, suffix);
    const st_tensor *t = st_find(c->st, name);
    *out = t;
    if (!t) {
        if (required)
            return lilac_fail(c->err, LILAC_E_FORMAT, "%s: missing tensor '%s'", c->in, name);
        return LILAC_OK;
    }
    if (t->dtype != LILAC_BF16 && t->dtype != LILAC_F16 && t->dtype != LILAC_F32) {
        const lilac_dtype_info *di = lilac_dtype_get(t->dtype);
        return lilac_fail(c->err, LILAC_E_UNSUPPORTED, "%s: tensor '%s' has type %s; the converter reads BF16, F16 and F32",
                          st_file_path(c->st, t->file), name, di ? di->name : "unknown");
    }
    c->used[t - st_tensor_at(c->st, 0)] = 1;
    return LILAC_OK;
}

/* Check a tensor's shape (row-major, as safetensors lists it). Size-1
 * dimensions other than the listed ones are allowed (conv1d's [C, 1, K]). */
static lilac_status check_shape(cv *c, const st_tensor *t, int n, ...)
{
    int64_t want[8];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        want[i] = va_arg(ap, int64_t);
    va_end(ap);
    int64_t have[ST_MAX_DIMS];
    int nh = 0;
    for (int i = 0; i < t->n_dims; i++)
        if (t->shape[i] != 1 || t->n_dims - i <= n - nh)
            have[nh++] = t->shape[i];
    bool ok = nh == n;
    for (int i = 0; ok && i < n; i++)
        ok = have[i] == want[i];
    if (ok)
        return LILAC_OK;
    char a[160], b[160];
    lilac_shape_str(t->shape, t->n_dims, a, sizeof a);
    lilac_shape_str(want, n, b, sizeof b);
    return lilac_fail(c->err, LILAC_E_FORMAT, "%s: tensor '%s' has shape %s but config.json needs %s",
                      st_file_path(c->st, t->file), t->name, a, b);
}

static lilac_status push(cv *c, const cv_plan *p, const cv_src *src, int n_src)
{
    if (c->n_plans == c->cap_plans) {
        size_t cap = c->cap_plans ? c->cap_plans * 2 : 256;
        cv_plan *np = realloc(c->plans, cap * sizeof *np);
        if (!np)
            return lilac_fail(c->err, LILAC_E_NOMEM, "out of memory");
        c->plans = np;
        c->cap_plans = cap;
    }
    cv_plan *q = &c->plans[c->n_plans];
    *q = *p;
    q->src = malloc((size_t)n_src * sizeof *src);
    if (!q->src)
        return lilac_fail(c->err, LILAC_E_NOMEM, "out of memory");
    memcpy(q->src, src, (size_t)n_src * sizeof *src);
    q->n_src = n_src;
    q->order = 0;
    for (int i = 0; i < n_src; i++) {
        size_t idx = (size_t)(src[i].t - st_tensor_at(c->st, 0));
        if (idx > q->order)
            q->order = idx;
    }
    c->n_plans++;
    return LILAC_OK;
}

/* A whole tensor as rows of row_len elements. */
static cv_src whole(const st_tensor *t, int64_t n_elems, int64_t row_len)
{
    cv_src s = {t, 1, n_elems / row_len, 0, n_elems / row_len};
    return s;
}

/* name, ggml ne (2-D when ne1 > 0), output type, op. */
static lilac_status add_simple(cv *c, int il, const char *gname, const st_tensor *t, int type, int64_t ne0,
                               int64_t ne1, int op)
{
    cv_plan p;
    memset(&p, 0, sizeof p);
    if (il >= 0)
        snprintf(p.name, sizeof p.name, "blk.%d.%s", il, gname);
    else
        snprintf(p.name, sizeof p.name, "%s", gname);
    p.type = type;
    p.n_dims = ne1 > 0 ? 2 : 1;
    p.ne[0] = ne0;
    p.ne[1] = ne1 > 0 ? ne1 : 1;
    p.ne[2] = p.ne[3] = 1;
    p.row_len = ne0;
    p.op = op;
    cv_src s = whole(t, ne0 * p.ne[1], ne0);
    return push(c, &p, &s, 1);
}

/* A matrix [rows, cols] (HF) -> BF16 ne [cols, rows]. */
static lilac_status add_mat(cv *c, int il, const char *gname, const char *hname, int64_t rows, int64_t cols)
{
    const st_tensor *t;
    lilac_status s;
    if ((s = fetch(c, il, hname, true, &t)) || (s = check_shape(c, t, 2, rows, cols)))
        return s;
    return add_simple(c, il, gname, t, LILAC_BF16, cols, rows, OP_NONE);
}

/* A vector [n] -> F32 ne [n] (op: +1 for zero-centred norms). */
static lilac_status add_vec(cv *c, int il, const char *gname, const char *hname, int64_t n, int op)
{
    const st_tensor *t;
    lilac_status s;
    if ((s = fetch(c, il, hname, true, &t)) || (s = check_shape(c, t, 1, n)))
        return s;
    return add_simple(c, il, gname, t, LILAC_F32, n, 0, op);
}

/* A DeltaNet tensor whose value heads are regrouped: the value head g of
 * the GGUF is HF's head (g % nk) * (nv / nk) + g / nk. */
static lilac_status add_perm(cv *c, int il, const char *gname, const char *hname, int type, int n_dims,
                             int64_t ne0, int64_t ne1, int perm, int64_t fixed, int64_t block, int64_t row_len,
                             int op)
{
    const st_tensor *t;
    lilac_status s;
    if ((s = fetch(c, il, hname, true, &t)))
        return s;
    int64_t n = ne0 * ne1;
    if ((s = n_dims == 1 ? check_shape(c, t, 1, ne0) : check_shape(c, t, 2, ne1, ne0)))
        return s;
    cv_plan p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "blk.%d.%s", il, gname);
    p.type = type;
    p.n_dims = n_dims;
    p.ne[0] = ne0;
    p.ne[1] = ne1;
    p.ne[2] = p.ne[3] = 1;
    p.row_len = row_len;
    p.op = op;
    p.perm = perm;
    p.perm_fixed = fixed;
    p.perm_block = block;
    cv_src src = whole(t, n, row_len);
    return push(c, &p, &src, 1);
}

static lilac_status plan_deltanet(cv *c, int il)
{
    int64_t E = c->n_embd, nv = c->nv, dv = c->dv, K = c->K;
    int64_t qk = 2 * c->nk * c->dk, ch = qk + nv * dv;
    lilac_status s;
    const st_tensor *conv;
    if ((s = fetch(c, il, "linear_attn.conv1d.weight", true, &conv)) || (s = check_shape(c, conv, 2, ch, K)))
        return s;
    cv_plan p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "blk.%d.ssm_conv1d.weight", il);
    p.type = LILAC_F32;
    p.n_dims = 2;
    p.ne[0] = K;
    p.ne[1] = ch;
    p.ne[2] = p.ne[3] = 1;
    p.row_len = K;
    p.perm = PERM_ROWS;
    p.perm_fixed = qk;
    p.perm_block = dv;
    cv_src src = whole(conv, ch * K, K);
    if ((s = push(c, &p, &src, 1)))
        return s;
    if ((s = add_perm(c, il, "ssm_a", "linear_attn.A_log", LILAC_F32, 1, nv, 1, PERM_ROWS, 0, 1, 1, OP_NEGEXP)) ||
        (s = add_perm(c, il, "ssm_dt.bias", "linear_attn.dt_bias", LILAC_F32, 1, nv, 1, PERM_ROWS, 0, 1, 1, OP_NONE)) ||
        (s = add_perm(c, il, "ssm_alpha.weight", "linear_attn.in_proj_a.weight", LILAC_BF16, 2, E, nv, PERM_ROWS, 0, 1,
                      E, OP_NONE)) ||
        (s = add_perm(c, il, "ssm_beta.weight", "linear_attn.in_proj_b.weight", LILAC_BF16, 2, E, nv, PERM_ROWS, 0, 1, E,
                      OP_NONE)) ||
        (s = add_perm(c, il, "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", LILAC_BF16, 2, E, ch, PERM_ROWS, qk,
                      dv, E, OP_NONE)) ||
        (s = add_perm(c, il, "attn_gate.weight", "linear_attn.in_proj_z.weight", LILAC_BF16, 2, E, nv * dv, PERM_ROWS, 0,
                      dv, E, OP_NONE)) ||
        (s = add_vec(c, il, "ssm_norm.weight", "linear_attn.norm.weight", dv, OP_NONE)) ||
        (s = add_perm(c, il, "ssm_out.weight", "linear_attn.out_proj.weight", LILAC_BF16, 2, nv * dv, E, PERM_COLS, 0,
                      dv, nv * dv, OP_NONE)))
        return s;
    return LILAC_OK;
}

static lilac_status plan_attention(cv *c, int il)
{
    int64_t E = c->n_embd, hd = c->head_dim;
    int64_t q_rows = c->n_head * hd * (c->q35 && c->attn_gate ? 2 : 1);
    int norm_op = c->q35 ? OP_ADD1 : OP_NONE;
    lilac_status s;
    if ((s = add_vec(c, il, "attn_k_norm.weight", "self_attn.k_norm.weight", hd, norm_op)) ||
        (s = add_mat(c, il, "attn_k.weight", "self_attn.k_proj.weight", c->n_head_kv * hd, E)) ||
        (s = add_mat(c, il, "attn_output.weight", "self_attn.o_proj.weight", E, c->n_head * hd)) ||
        (s = add_vec(c, il, "attn_q_norm.weight", "self_attn.q_norm.weight", hd, norm_op)) ||
        (s = add_mat(c, il, "attn_q.weight", "self_attn.q_proj.weight", q_rows, E)) ||
        (s = add_mat(c, il, "attn_v.weight", "self_attn.v_proj.weight", c->n_head_kv * hd, E)))
        return s;
    return LILAC_OK;
}

static lilac_status add_exps(cv *c, int il, const char *gname, const cv_src *src, int n_src, int64_t ne0, int64_t ne1,
                             int sub)
{
    cv_plan p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "blk.%d.%s", il, gname);
    p.type = LILAC_BF16;
    p.n_dims = 3;
    p.ne[0] = ne0;
    p.ne[1] = ne1;
    p.ne[2] = c->n_expert;
    p.ne[3] = 1;
    p.row_len = ne0;
    p.sub = sub;
    return push(c, &p, src, n_src);
}

static lilac_status plan_experts(cv *c, int il)
{
    int64_t E = c->n_embd, ff = c->eff, n = c->n_expert;
    lilac_status s;
    const st_tensor *gu, *dn;
    if ((s = fetch(c, il, "mlp.experts.gate_up_proj", false, &gu)))
        return s;
    if (gu) {
        if ((s = check_shape(c, gu, 3, n, 2 * ff, E)) || (s = fetch(c, il, "mlp.experts.down_proj", true, &dn)) ||
            (s = check_shape(c, dn, 3, n, E, ff)))
            return s;
        cv_src d = {dn, n, E, 0, E}, g = {gu, n, 2 * ff, 0, ff}, u = {gu, n, 2 * ff, ff, ff};
        if ((s = add_exps(c, il, "ffn_down_exps.weight", &d, 1, ff, E, 0)) ||
            (s = add_exps(c, il, "ffn_gate_exps.weight", &g, 1, E, ff, 1)) ||
            (s = add_exps(c, il, "ffn_up_exps.weight", &u, 1, E, ff, 2)))
            return s;
        return LILAC_OK;
    }
    cv_src *src = malloc((size_t)n * sizeof *src);
    if (!src)
        return lilac_fail(c->err, LILAC_E_NOMEM, "out of memory");
    static const char *const hn[3] = {"down_proj", "gate_proj", "up_proj"};
    static const char *const gn[3] = {"ffn_down_exps.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight"};
    for (int k = 0; k < 3 && !s; k++) {
        int64_t rows = k == 0 ? E : ff, cols = k == 0 ? ff : E;
        for (int64_t e = 0; e < n && !s; e++) {
            char name[128];
            const st_tensor *t;
            snprintf(name, sizeof name, "mlp.experts.%lld.%s.weight", (long long)e, hn[k]);
            if (!(s = fetch(c, il, name, true, &t)) && !(s = check_shape(c, t, 2, rows, cols)))
                src[e] = whole(t, rows * cols, cols);
        }
        if (!s)
            s = add_exps(c, il, gn[k], src, (int)n, cols, rows, k);
    }
    free(src);
    return s;
}

static lilac_status plan_moe(cv *c, int il)
{
    int64_t E = c->n_embd;
    lilac_status s;
    const st_tensor *t;
    if ((s = plan_experts(c, il)) || (s = fetch(c, il, "mlp.gate.weight", true, &t)) ||
        (s = check_shape(c, t, 2, c->n_expert, E)) ||
        (s = add_simple(c, il, "ffn_gate_inp.weight", t, LILAC_F32, E, c->n_expert, OP_NONE)))
        return s;
    if (c->sff == 0)
        return LILAC_OK;
    if ((s = add_mat(c, il, "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", E, c->sff)) ||
        (s = add_mat(c, il, "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", c->sff, E)) ||
        (s = add_mat(c, il, "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", c->sff, E)) ||
        (s = fetch(c, il, "mlp.shared_expert_gate.weight", true, &t)) || (s = check_shape(c, t, 2, 1, E)) ||
        (s = add_simple(c, il, "ffn_gate_inp_shexp.weight", t, LILAC_F32, E, 1, OP_NONE)))
        return s;
    return LILAC_OK;
}

static int cmp_plan(const void *a, const void *b)
{
    const cv_plan *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return (x->sub > y->sub) - (x->sub < y->sub);
}

static lilac_status make_plans(cv *c)
{
    int64_t E = c->n_embd;
    int norm_op = c->q35 ? OP_ADD1 : OP_NONE;
    lilac_status s;
    const st_tensor *emb, *head = NULL;
    if ((s = fetch(c, -1, "embed_tokens.weight", true, &emb)) || (s = check_shape(c, emb, 2, c->vocab, E)) ||
        (s = add_simple(c, -1, "token_embd.weight", emb, LILAC_BF16, E, c->vocab, OP_NONE)) ||
        (s = add_vec(c, -1, "output_norm.weight", "norm.weight", E, norm_op)))
        return s;
    if (!c->tied) {
        if ((s = fetch(c, -1, "lm_head.weight", false, &head)))
            return s;
        if (head && ((s = check_shape(c, head, 2, c->vocab, E)) ||
                     (s = add_simple(c, -1, "output.weight", head, LILAC_BF16, E, c->vocab, OP_NONE))))
            return s;
    } else {
        /* A tied checkpoint may still hold a copy of the head; it is not needed. */
        const st_tensor *t = st_find(c->st, "lm_head.weight");
        if (t)
            c->used[t - st_tensor_at(c->st, 0)] = 1;
    }
    for (int il = 0; il < c->n_layer; il++) {
        if ((s = add_vec(c, il, "attn_norm.weight", "input_layernorm.weight", E, norm_op)) ||
            (s = add_vec(c, il, c->q35 ? "post_attention_norm.weight" : "ffn_norm.weight",
                         "post_attention_layernorm.weight", E, norm_op)) ||
            (s = c->is_ssm[il] ? plan_deltanet(c, il) : plan_attention(c, il)) || (s = plan_moe(c, il)))
            return s;
    }
    /* Every tensor of the text model must have found its place. */
    size_t skipped = 0;
    for (size_t i = 0; i < st_n_tensors(c->st); i++) {
        if (c->used[i])
            continue;
        const st_tensor *t = st_tensor_at(c->st, i);
        if (strncmp(t->name, c->prefix, strlen(c->prefix)) == 0 && strncmp(t->name, "model.visual.", 13) != 0)
            return lilac_fail(c->err, LILAC_E_UNSUPPORTED, "%s: tensor '%s' has no place in the %s GGUF layout",
                              st_file_path(c->st, t->file), t->name, c->arch);
        skipped++;
    }
    if (skipped)
        cv_log(c, LILAC_LOG_INFO, "%s: %zu tensors outside the text model (vision tower, MTP head) were left out",
               c->in, skipped);
    qsort(c->plans, c->n_plans, sizeof *c->plans, cmp_plan);
    return LILAC_OK;
}

/* ---- metadata ---- */

/* The directory's name in title case, as llama.cpp names models
 * ("tiny-qwen35moe" -> "Tiny Qwen35Moe"); "hf" defers to its parent. */
static void model_name(const char *dir, char *buf, size_t size)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = 0;
    char *slash = strrchr(tmp, '/');
    const char *b = slash ? slash + 1 : tmp;
    if (slash && slash != tmp && !strcmp(b, "hf")) {
        *slash = 0;
        slash = strrchr(tmp, '/');
        b = slash ? slash + 1 : tmp;
    }
    size_t o = 0;
    bool prev_alpha = false;
    for (; *b && o + 1 < size; b++) {
        char ch = *b;
        if (ch == '-' || ch == '_')
            ch = ' ';
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        if (alpha)
            ch = prev_alpha ? (char)(ch | 0x20) : (char)(ch & ~0x20);
        prev_alpha = alpha;
        buf[o++] = ch;
    }
    buf[o] = 0;
}

static lilac_status write_hparams(cv *c, gm_out *o, bool type_keys_last)
{
    char name[512], label[64];
    model_name(c->in, name, sizeof name);
    uint64_t shared = 0, expert = 0;
    for (size_t i = 0; i < c->n_plans; i++) {
        const cv_plan *p = &c->plans[i];
        uint64_t n = (uint64_t)(p->ne[0] * p->ne[1] * p->ne[2] * p->ne[3]);
        if (strstr(p->name, "_exps."))
            expert += n / (uint64_t)p->ne[2];
        else
            shared += n;
    }
    gm_size_label(c->n_expert, shared + expert, label, sizeof label);
    gm_hparams hp = {
        .arch = c->arch, .q35 = c->q35, .name = name, .size_label = label,
        .file_type = GM_FTYPE_MOSTLY_BF16,
        .n_layer = c->n_layer, .n_ctx = c->n_ctx, .n_embd = c->n_embd, .ff = c->ff,
        .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
        .n_expert = c->n_expert, .n_used = c->n_used, .eff = c->eff, .sff = c->sff,
        .K = c->K, .dk = c->dk, .nk = c->nk, .nv = c->nv, .dv = c->dv, .interval = c->interval,
        .rope_dims = c->rope_dims, .has_sections = c->has_sections, .norm_topk = c->norm_topk,
        .eps = c->eps, .theta = c->theta, .is_ssm = c->is_ssm,
    };
    memcpy(hp.sections, c->sections, sizeof hp.sections);
    hp.type_keys_last = type_keys_last;
    return gm_write_hparams(o, &hp, c->err);
}

/* ---- tokenizer ---- */

static lilac_status write_tokenizer(cv *c, gm_out *o)
{
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", c->in);
    if (stat(path, &sb) != 0) {
        cv_log(c, LILAC_LOG_INFO, "%s: no tokenizer.json; the GGUF will hold no tokenizer", c->in);
        return LILAC_OK;
    }
    return gm_write_tokenizer_json(o, path, c->in, c->cfg, c->root, c->vocab, false, c->err);
}

/* ---- data ---- */

/* Elements between two progress reports. */
#define PROGRESS_STEP ((int64_t)1 << 20)

static size_t dtype_bytes(int t)
{
    return t == LILAC_F32 ? 4 : 2;
}

static float load_elem(int type, const uint8_t *p)
{
    if (type == LILAC_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return type == LILAC_BF16 ? lilac_bf16_to_f32(h) : lilac_f16_to_f32(h);
}

/* Where a plan's values go: straight through (raw) when the source bytes
 * already are the output, else into a batch of GGUF rows that go through
 * the output type's row quantizer together (on the pool's threads). */
typedef struct cv_sink {
    gguf_writer *w;
    const cv_plan *pl;
    int type; /* output type */
    bool raw;
    lilac_pool *pool;
    float *rows; /* cap rows of ne[0] values */
    int64_t n, cap; /* values in rows; capacity in values */
    uint8_t *out;
    size_t row_bytes;
    int64_t pending; /* elements written since the last progress report */
    void (*progress)(void *user, int64_t n);
    void *progress_user;
} cv_sink;

static void sink_progress(cv_sink *k, int64_t n, bool flush)
{
    k->pending += n;
    if (k->progress && (k->pending >= PROGRESS_STEP || (flush && k->pending > 0))) {
        k->progress(k->progress_user, k->pending);
        k->pending = 0;
    }
}

static lilac_status sink_flush(cv *c, cv_sink *k)
{
    const cv_plan *pl = k->pl;
    int64_t n_rows = k->n / pl->ne[0];
    if (n_rows == 0)
        return LILAC_OK;
    bool ok = lilac_quantize_rows(k->pool, k->type, k->rows, k->out, n_rows, pl->ne[0]);
    if (!ok && lilac_dtype_get(k->type)->blck > 1) {
        /* llama.cpp rejects such rows too ("quantized data validation failed") */
        return lilac_fail(c->err, LILAC_E_RANGE,
                          "%s: tensor '%s' holds values %s cannot represent (not finite, or a block scale beyond "
                          "float16)",
                          c->in, pl->name, lilac_dtype_get(k->type)->name);
    }
    k->n = 0;
    sink_progress(k, n_rows * pl->ne[0], false);
    return gguf_writer_write(k->w, k->out, (size_t)n_rows * k->row_bytes, c->err);
}

/* n elements of a source row (type st) at p, converted, to the file. The
 * values are those of the converter's own type (pl->type), rounded to it
 * before they are quantized further, so that quantizing from a checkpoint
 * gives what quantizing its BF16 GGUF gives. */
static lilac_status emit(cv *c, cv_sink *k, int st, const uint8_t *p, int64_t n)
{
    const cv_plan *pl = k->pl;
    if (k->raw) {
        sink_progress(k, n, false);
        return gguf_writer_write(k->w, p, (size_t)n * dtype_bytes(st), c->err);
    }
    size_t es = dtype_bytes(st);
    for (int64_t i = 0; i < n; i++) {
        float f = load_elem(st, p + (size_t)i * es);
        if (pl->op == OP_ADD1)
            f = f + 1.0f;
        else if (pl->op == OP_NEGEXP)
            f = (float)-exp((double)f);
        if (pl->type == LILAC_BF16)
            f = lilac_bf16_to_f32(lilac_f32_to_bf16(f));
        k->rows[k->n++] = f;
        lilac_status s;
        if (k->n == k->cap && (s = sink_flush(c, k)))
            return s;
    }
    return LILAC_OK;
}

static int64_t vhead(const cv *c, int64_t g)
{
    int64_t r = c->nv / c->nk;
    return (g % c->nk) * r + g / c->nk;
}

static lilac_status write_plan(cv *c, cv_sink *k)
{
    const cv_plan *pl = k->pl;
    lilac_status s;
    for (int si = 0; si < pl->n_src; si++) {
        const cv_src *src = &pl->src[si];
        int st = src->t->dtype;
        size_t es = dtype_bytes(st);
        const uint8_t *base = src->t->data;
        for (int64_t m = 0; m < src->n_mats; m++) {
            for (int64_t i = 0; i < src->rows; i++) {
                int64_t r = src->r0 + i;
                if (pl->perm == PERM_ROWS && r >= pl->perm_fixed) {
                    int64_t j = r - pl->perm_fixed;
                    r = pl->perm_fixed + vhead(c, j / pl->perm_block) * pl->perm_block + j % pl->perm_block;
                }
                const uint8_t *row = base + ((size_t)(m * src->mat_rows + r) * (size_t)pl->row_len) * es;
                if (pl->perm == PERM_COLS) {
                    for (int64_t g = 0; g < pl->row_len / pl->perm_block; g++)
                        if ((s = emit(c, k, st, row + (size_t)(vhead(c, g) * pl->perm_block) * es, pl->perm_block)))
                            return s;
                } else if ((s = emit(c, k, st, row, pl->row_len))) {
                    return s;
                }
            }
        }
    }
    if (!k->raw && (s = sink_flush(c, k)))
        return s;
    sink_progress(k, 0, true);
    return LILAC_OK;
}

/* ---- the converter as a tensor source ---- */

struct lilac_hf_source {
    cv c;
};

lilac_status lilac_hf_source_open(const char *in_dir, const lilac_convert_params *params, lilac_hf_source **out,
                                  lilac_error *err)
{
    struct stat sb;
    *out = NULL;
    if (!in_dir)
        return lilac_fail(err, LILAC_E_ARG, "convert: no input path given");
    if (stat(in_dir, &sb) != 0)
        return lilac_fail(err, LILAC_E_IO, "%s: %s", in_dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return lilac_fail(err, LILAC_E_ARG, "%s: not a directory; convert wants a Hugging Face checkpoint directory",
                          in_dir);
    lilac_hf_source *src = calloc(1, sizeof *src);
    if (!src)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    cv *c = &src->c;
    c->in = in_dir;
    c->err = err;
    c->params = params;
    lilac_status s = read_config(c);
    if (!s)
        s = st_open(in_dir, &c->st, err);
    if (!s) {
        c->prefix = st_find(c->st, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
        c->used = calloc(st_n_tensors(c->st) + 1, 1);
        if (!c->used)
            s = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    if (!s)
        s = make_plans(c);
    if (s) {
        lilac_hf_source_free(src);
        return s;
    }
    *out = src;
    return LILAC_OK;
}

void lilac_hf_source_free(lilac_hf_source *src)
{
    if (!src)
        return;
    cv *c = &src->c;
    for (size_t i = 0; i < c->n_plans; i++)
        free(c->plans[i].src);
    free(c->plans);
    free(c->used);
    free(c->is_ssm);
    st_close(c->st);
    json_decref(c->root);
    free(src);
}

const char *lilac_hf_source_arch(const lilac_hf_source *src)
{
    return src->c.arch;
}

void lilac_hf_source_counts(const lilac_hf_source *src, int *n_layer, int *n_expert)
{
    *n_layer = (int)src->c.n_layer;
    *n_expert = (int)src->c.n_expert;
}

size_t lilac_hf_source_n_tensors(const lilac_hf_source *src)
{
    return src->c.n_plans;
}

lilac_hf_tensor lilac_hf_source_tensor(const lilac_hf_source *src, size_t i)
{
    const cv_plan *p = &src->c.plans[i];
    lilac_hf_tensor t = {p->name, p->type, p->n_dims, {p->ne[0], p->ne[1], p->ne[2], p->ne[3]}};
    return t;
}

lilac_status lilac_hf_source_write_metadata(lilac_hf_source *src, gguf_writer *w, int file_type, lilac_error *err)
{
    cv *c = &src->c;
    c->err = err;
    gm_out o = {.w = w};
    lilac_status s;
    if ((s = write_hparams(c, &o, file_type >= 0)) || (s = write_tokenizer(c, &o)))
        return s;
    return file_type >= 0 ? gm_write_type_keys(&o, (uint32_t)file_type, err) : LILAC_OK;
}

lilac_status lilac_hf_source_write_tensor(lilac_hf_source *src, size_t i, int type, gguf_writer *w, lilac_pool *pool,
                                          void (*progress)(void *user, int64_t n), void *progress_user,
                                          lilac_error *err)
{
    cv *c = &src->c;
    c->err = err;
    const cv_plan *pl = &c->plans[i];
    cv_sink k = {.w = w, .pl = pl, .type = type, .pool = pool, .progress = progress, .progress_user = progress_user};
    k.row_bytes = lilac_dtype_row_bytes(type, pl->ne[0]);
    if (!lilac_quantizer_for(type) || !k.row_bytes) {
        const lilac_dtype_info *di = lilac_dtype_get(type);
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "tensor '%s': cannot write rows of %lld values as %s", pl->name,
                          (long long)pl->ne[0], di ? di->name : "an unknown type");
    }
    k.raw = type == pl->type && pl->op == OP_NONE;
    for (int si = 0; si < pl->n_src; si++)
        k.raw = k.raw && pl->src[si].t->dtype == type;
    if (!k.raw) {
        /* a batch of about 4M values, or one row when they are longer */
        int64_t rows = (((int64_t)1 << 22) + pl->ne[0] - 1) / pl->ne[0];
        int64_t total_rows = pl->ne[1] * pl->ne[2] * pl->ne[3];
        if (rows > total_rows)
            rows = total_rows;
        if (rows < 1)
            rows = 1;
        k.cap = rows * pl->ne[0];
        k.rows = malloc((size_t)k.cap * sizeof *k.rows);
        k.out = malloc((size_t)rows * k.row_bytes);
        if (!k.rows || !k.out) {
            free(k.rows);
            free(k.out);
            return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        }
    }
    lilac_status s = write_plan(c, &k);
    free(k.rows);
    free(k.out);
    return s;
}

lilac_status lilac_convert_hf_to_gguf(const char *in_dir, const char *out_path,
                                      const lilac_convert_params *params, lilac_error *err)
{
    if (!in_dir || !out_path)
        return lilac_fail(err, LILAC_E_ARG, "convert: no input or output path given");
    lilac_hf_source *src = NULL;
    gguf_writer *w = NULL;
    lilac_status s = lilac_hf_source_open(in_dir, params, &src, err);
    if (s)
        return s;
    size_t n = lilac_hf_source_n_tensors(src);
    if ((s = gguf_writer_open(out_path, &w, err)) || (s = lilac_hf_source_write_metadata(src, w, -1, err)))
        goto done;
    for (size_t i = 0; i < n; i++) {
        lilac_hf_tensor t = lilac_hf_source_tensor(src, i);
        if ((s = gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, err)))
            goto done;
    }
    if ((s = gguf_writer_begin_data(w, err)))
        goto done;
    for (size_t i = 0; i < n; i++)
        if ((s = lilac_hf_source_write_tensor(src, i, lilac_hf_source_tensor(src, i).type, w, NULL, NULL, NULL, err)))
            goto done;
    if ((s = gguf_writer_finish(w, err)))
        goto done;
    cv_log(&src->c, LILAC_LOG_INFO, "wrote %zu tensors to %s", n, out_path);
done:
    gguf_writer_free(w); /* removes OUT.tmp unless finished */
    lilac_hf_source_free(src);
    return s;
}
