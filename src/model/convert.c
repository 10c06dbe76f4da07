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
#include "kernels/cpu/cpu.h"
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
    const char *in, *out;
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

/* gguf-py's model_weight_count_rounded_notation(n, min_digits=2). */
static void count_notation(uint64_t n, char *buf, size_t size)
{
    double x = (double)n;
    const char *suf;
    if (x > 1e15)
        x *= 1e-15, suf = "Q";
    else if (x > 1e12)
        x *= 1e-12, suf = "T";
    else if (x > 1e9)
        x *= 1e-9, suf = "B";
    else if (x > 1e6)
        x *= 1e-6, suf = "M";
    else
        x *= 1e-3, suf = "K";
    char digits[64];
    snprintf(digits, sizeof digits, "%.0f", nearbyint(x));
    const char *d = digits;
    while (*d == '0')
        d++;
    int fix = 2 - (int)strlen(d);
    if (fix < 0)
        fix = 0;
    snprintf(buf, size, "%.*f%s", fix, x, suf);
}

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

static lilac_status write_hparams(cv *c, gguf_writer *w)
{
    lilac_error *e = c->err;
    char k[256], name[512], label[64];
    lilac_status s;
#define KEY(x) (snprintf(k, sizeof k, "%s.%s", c->arch, x), k)
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
    char cnt[48];
    count_notation(shared + expert, cnt, sizeof cnt);
    snprintf(label, sizeof label, "%lldx%s", (long long)c->n_expert, cnt);
    if ((s = gguf_writer_kv_str(w, "general.architecture", c->arch, e)) ||
        (s = gguf_writer_kv_str(w, "general.type", "model", e)) ||
        (s = gguf_writer_kv_str(w, "general.name", name, e)) ||
        (s = gguf_writer_kv_str(w, "general.size_label", label, e)) ||
        (s = gguf_writer_kv_u32(w, KEY("block_count"), (uint32_t)c->n_layer, e)) ||
        (c->n_ctx && (s = gguf_writer_kv_u32(w, KEY("context_length"), (uint32_t)c->n_ctx, e))) ||
        (s = gguf_writer_kv_u32(w, KEY("embedding_length"), (uint32_t)c->n_embd, e)) ||
        (c->ff && (s = gguf_writer_kv_u32(w, KEY("feed_forward_length"), (uint32_t)c->ff, e))) ||
        (s = gguf_writer_kv_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head, e)) ||
        (s = gguf_writer_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv, e)))
        return s;
    if (c->has_sections) {
        int32_t sec[4];
        for (int i = 0; i < 4; i++)
            sec[i] = (int32_t)c->sections[i];
        if ((s = gguf_writer_kv_arr(w, KEY("rope.dimension_sections"), GGUF_VT_I32, sec, 4, e)))
            return s;
    }
    if ((s = gguf_writer_kv_f32(w, KEY("rope.freq_base"), c->theta, e)) ||
        (s = gguf_writer_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->eps, e)) ||
        (s = gguf_writer_kv_u32(w, KEY("expert_count"), (uint32_t)c->n_expert, e)) ||
        (s = gguf_writer_kv_u32(w, KEY("expert_used_count"), (uint32_t)c->n_used, e)) ||
        (s = gguf_writer_kv_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim, e)) ||
        (s = gguf_writer_kv_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim, e)) ||
        (s = gguf_writer_kv_u32(w, "general.file_type", 32 /* LLAMA_FTYPE_MOSTLY_BF16 */, e)) ||
        (s = gguf_writer_kv_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c->eff, e)))
        return s;
    if (!c->q35 && !c->norm_topk) {
        /* llama.cpp always renormalizes qwen3moe's chosen experts; a checkpoint
         * with norm_topk_prob false says otherwise, under llama.cpp's key. */
        if ((s = gguf_writer_kv_bool(w, KEY("expert_weights_norm"), false, e)))
            return s;
    }
    if (c->q35) {
        uint8_t *rec = malloc((size_t)c->n_layer);
        if (!rec)
            return lilac_fail(e, LILAC_E_NOMEM, "out of memory");
        for (int64_t i = 0; i < c->n_layer; i++)
            rec[i] = c->is_ssm[i];
        if ((c->sff && (s = gguf_writer_kv_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c->sff, e))) ||
            (s = gguf_writer_kv_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c->K, e)) ||
            (s = gguf_writer_kv_u32(w, KEY("ssm.state_size"), (uint32_t)c->dk, e)) ||
            (s = gguf_writer_kv_u32(w, KEY("ssm.group_count"), (uint32_t)c->nk, e)) ||
            (s = gguf_writer_kv_u32(w, KEY("ssm.time_step_rank"), (uint32_t)c->nv, e)) ||
            (s = gguf_writer_kv_u32(w, KEY("ssm.inner_size"), (uint32_t)(c->nv * c->dv), e)) ||
            (s = gguf_writer_kv_arr(w, KEY("attention.recurrent_layers"), GGUF_VT_BOOL, rec, (size_t)c->n_layer, e)) ||
            (s = gguf_writer_kv_u32(w, KEY("full_attention_interval"), (uint32_t)c->interval, e)) ||
            (s = gguf_writer_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)c->rope_dims, e))) {
            free(rec);
            return s;
        }
        free(rec);
    }
#undef KEY
    return gguf_writer_kv_u32(w, "general.quantization_version", 2, e);
}

/* ---- tokenizer ---- */

static bool looks_special(const char *t)
{
    size_t n = strlen(t);
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]"))
        return true;
    if (n >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + n - 2, "|>"))
        return true;
    if (n >= 8 && !strncmp(t, "<\xef\xbd\x9c", 4) && !strcmp(t + n - 4, "\xef\xbd\x9c>"))
        return true;
    return n >= 8 && !strncmp(t, "<unused", 7) && t[n - 1] == '>';
}

typedef struct tok_state {
    json_t *tj, *tc;
    char **owned; /* strings made here, freed at the end */
    size_t n_owned;
} tok_state;

static char *own(tok_state *ts, char *p)
{
    if (p)
        ts->owned[ts->n_owned++] = p;
    return p;
}

static lilac_status write_tokenizer(cv *c, gguf_writer *w)
{
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", c->in);
    if (stat(path, &sb) != 0) {
        cv_log(c, LILAC_LOG_INFO, "%s: no tokenizer.json; the GGUF will hold no tokenizer", c->in);
        return LILAC_OK;
    }
    lilac_error *e = c->err;
    lilac_status s = LILAC_OK;
    json_error_t je;
    tok_state ts = {0};
    const char **toks = NULL, **merges = NULL;
    size_t *merge_len = NULL;
    int32_t *types = NULL;
    char *merge_buf = NULL;
    size_t n = 0;
    ts.tj = json_load_file(path, 0, &je);
    if (!ts.tj) {
        s = lilac_fail(e, LILAC_E_FORMAT, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
        goto done;
    }
    json_t *model = json_object_get(ts.tj, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    json_t *vocab = json_object_get(model, "vocab");
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab)) {
        s = lilac_fail(e, LILAC_E_UNSUPPORTED, "%s: model type '%s'; the converter writes BPE tokenizers only", path,
                       mtype ? mtype : "(none)");
        goto done;
    }
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", c->in);
    ts.tc = json_load_file(cpath, 0, &je); /* optional */

    json_t *added = json_object_get(ts.tj, "added_tokens");
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (json_integer_value(val) > max_id)
            max_id = json_integer_value(val);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        int64_t id = json_integer_value(json_object_get(json_array_get(added, i), "id"));
        if (id > max_id)
            max_id = id;
    }
    n = (size_t)(c->vocab > max_id + 1 ? c->vocab : max_id + 1);
    if (max_id >= 1 << 24) {
        s = lilac_fail(e, LILAC_E_FORMAT, "%s: token id %lld is out of range", path, (long long)max_id);
        goto done;
    }
    toks = calloc(n, sizeof *toks);
    types = calloc(n, sizeof *types);
    ts.owned = calloc(2 * n + 8, sizeof *ts.owned);
    if (!toks || !types || !ts.owned) {
        s = lilac_fail(e, LILAC_E_NOMEM, "out of memory");
        goto done;
    }
    json_object_foreach(vocab, key, val) {
        int64_t id = json_integer_value(val);
        if (id < 0 || !json_is_integer(val)) {
            s = lilac_fail(e, LILAC_E_FORMAT, "%s: token '%s' has a bad id", path, key);
            goto done;
        }
        toks[id] = key;
        types[id] = 1; /* NORMAL */
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        int64_t id = json_integer_value(json_object_get(a, "id"));
        const char *content = json_string_value(json_object_get(a, "content"));
        if (id < 0 || !content) {
            s = lilac_fail(e, LILAC_E_FORMAT, "%s: added_tokens[%zu] is malformed", path, i);
            goto done;
        }
        if (json_is_true(json_object_get(a, "special")) || looks_special(content)) {
            toks[id] = content;
            types[id] = 3; /* CONTROL */
        } else {
            /* user-defined: llama.cpp turns the SentencePiece space into ' ' */
            size_t l = strlen(content);
            char *t = own(&ts, malloc(l + 1));
            if (!t) {
                s = lilac_fail(e, LILAC_E_NOMEM, "out of memory");
                goto done;
            }
            size_t o = 0;
            for (size_t j = 0; j < l; j++) {
                if (j + 2 < l && !memcmp(content + j, "\xe2\x96\x81", 3)) {
                    t[o++] = ' ';
                    j += 2;
                } else {
                    t[o++] = content[j];
                }
            }
            t[o] = 0;
            toks[id] = t;
            types[id] = 4; /* USER_DEFINED */
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (toks[i])
            continue;
        char *t = own(&ts, malloc(32));
        if (!t) {
            s = lilac_fail(e, LILAC_E_NOMEM, "out of memory");
            goto done;
        }
        snprintf(t, 32, "[PAD%zu]", i);
        toks[i] = t;
        types[i] = 5; /* UNUSED */
    }

    /* The pre-tokenizer: Qwen3.5's letter runs take combining marks. */
    char *pre_dump = json_dumps(json_object_get(ts.tj, "pre_tokenizer"), JSON_COMPACT);
    const char *pre = pre_dump && strstr(pre_dump, "\\\\p{L}\\\\p{M}") ? "qwen35" : "qwen2";
    free(pre_dump);

    if ((s = gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2", e)) ||
        (s = gguf_writer_kv_str(w, "tokenizer.ggml.pre", pre, e)) ||
        (s = gguf_writer_kv_str_arr(w, "tokenizer.ggml.tokens", toks, NULL, n, e)) ||
        (s = gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, types, n, e)))
        goto done;

    json_t *jm = json_object_get(model, "merges");
    size_t nm = json_array_size(jm), total = 0;
    for (size_t i = 0; i < nm; i++) {
        json_t *m = json_array_get(jm, i);
        if (json_is_string(m))
            total += json_string_length(m) + 1;
        else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                 json_is_string(json_array_get(m, 1)))
            total += json_string_length(json_array_get(m, 0)) + json_string_length(json_array_get(m, 1)) + 2;
        else {
            s = lilac_fail(e, LILAC_E_FORMAT, "%s: merges[%zu] is neither \"a b\" nor [a, b]", path, i);
            goto done;
        }
    }
    if (nm) {
        merges = malloc(nm * sizeof *merges);
        merge_len = malloc(nm * sizeof *merge_len);
        merge_buf = malloc(total + 1);
        if (!merges || !merge_len || !merge_buf) {
            s = lilac_fail(e, LILAC_E_NOMEM, "out of memory");
            goto done;
        }
        size_t o = 0;
        for (size_t i = 0; i < nm; i++) {
            json_t *m = json_array_get(jm, i);
            merges[i] = merge_buf + o;
            if (json_is_string(m)) {
                size_t l = json_string_length(m);
                memcpy(merge_buf + o, json_string_value(m), l);
                o += l;
            } else {
                json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
                memcpy(merge_buf + o, json_string_value(a), json_string_length(a));
                o += json_string_length(a);
                merge_buf[o++] = ' ';
                memcpy(merge_buf + o, json_string_value(b), json_string_length(b));
                o += json_string_length(b);
            }
            merge_len[i] = (size_t)(merge_buf + o - merges[i]);
        }
        if ((s = gguf_writer_kv_str_arr(w, "tokenizer.ggml.merges", merges, merge_len, nm, e)))
            goto done;
    }

    /* Special tokens, as gguf-py's SpecialVocab finds them: by content in
     * tokenizer_config.json, else the *_token_id of config.json. */
    static const char *const kinds[7] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    static const char *const gkeys[7] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                         "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
                                         "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
                                         "tokenizer.ggml.mask_token_id"};
    for (int k = 0; k < 7; k++) {
        char ck[32];
        int64_t id = -1;
        snprintf(ck, sizeof ck, "%s_token", kinds[k]);
        json_t *v = json_object_get(ts.tc, ck);
        const char *content = json_is_object(v) ? json_string_value(json_object_get(v, "content"))
                                                : json_string_value(v);
        for (size_t i = 0; content && id < 0 && i < json_array_size(added); i++) {
            json_t *a = json_array_get(added, i);
            const char *ac = json_string_value(json_object_get(a, "content"));
            if (ac && !strcmp(ac, content))
                id = json_integer_value(json_object_get(a, "id"));
        }
        if (id < 0) {
            snprintf(ck, sizeof ck, "%s_token_id", kinds[k]);
            json_t *cv_ = json_object_get(c->cfg, ck);
            if (!json_is_integer(cv_))
                cv_ = json_object_get(c->root, ck);
            if (json_is_integer(cv_))
                id = json_integer_value(cv_);
        }
        if (id >= 0 && (size_t)id < n && (s = gguf_writer_kv_u32(w, gkeys[k], (uint32_t)id, e)))
            goto done;
    }
    static const char *const adds[3] = {"bos", "eos", "sep"};
    for (int k = 0; k < 3; k++) {
        char ck[32], gk[64];
        snprintf(ck, sizeof ck, "add_%s_token", adds[k]);
        snprintf(gk, sizeof gk, "tokenizer.ggml.add_%s_token", adds[k]);
        json_t *v = json_object_get(ts.tc, ck);
        if (json_is_boolean(v) && (s = gguf_writer_kv_bool(w, gk, json_is_true(v), e)))
            goto done;
    }
    const char *tmpl = json_string_value(json_object_get(ts.tc, "chat_template"));
    char *jinja = NULL;
    if (!tmpl) {
        char jp[4200];
        snprintf(jp, sizeof jp, "%s/chat_template.jinja", c->in);
        FILE *f = fopen(jp, "rb");
        if (f) {
            long sz = (fseek(f, 0, SEEK_END) == 0) ? ftell(f) : -1;
            if (sz >= 0 && fseek(f, 0, SEEK_SET) == 0 && (jinja = malloc((size_t)sz + 1))) {
                size_t got = fread(jinja, 1, (size_t)sz, f);
                jinja[got] = 0;
                tmpl = jinja;
            }
            fclose(f);
        }
    }
    if (tmpl)
        s = gguf_writer_kv_str(w, "tokenizer.chat_template", tmpl, e);
    free(jinja);
done:
    if (ts.owned)
        for (size_t i = 0; i < ts.n_owned; i++)
            free(ts.owned[i]);
    free(ts.owned);
    free(toks);
    free(types);
    free(merges);
    free(merge_len);
    free(merge_buf);
    json_decref(ts.tj);
    json_decref(ts.tc);
    return s;
}

/* ---- data ---- */

#define CHUNK 4096

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

/* gguf-py's float32 -> bfloat16: NaN kept quiet, round to nearest even. */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u = (u & 0xffff0000u) | (64u << 16);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* n elements of a source row (type st) at p, converted, to the file. */
static lilac_status emit(cv *c, gguf_writer *w, const cv_plan *pl, int st, const uint8_t *p, int64_t n)
{
    if (st == pl->type && pl->op == OP_NONE)
        return gguf_writer_write(w, p, (size_t)n * dtype_bytes(st), c->err);
    uint8_t out[CHUNK * 4];
    size_t es = dtype_bytes(st);
    while (n > 0) {
        int64_t k = n < CHUNK ? n : CHUNK;
        for (int64_t i = 0; i < k; i++) {
            float f = load_elem(st, p + (size_t)i * es);
            if (pl->op == OP_ADD1)
                f = f + 1.0f;
            else if (pl->op == OP_NEGEXP)
                f = (float)-exp((double)f);
            if (pl->type == LILAC_F32) {
                memcpy(out + 4 * i, &f, 4);
            } else {
                uint16_t b = f32_to_bf16(f);
                memcpy(out + 2 * i, &b, 2);
            }
        }
        lilac_status s = gguf_writer_write(w, out, (size_t)k * dtype_bytes(pl->type), c->err);
        if (s)
            return s;
        p += (size_t)k * es;
        n -= k;
    }
    return LILAC_OK;
}

static int64_t vhead(const cv *c, int64_t g)
{
    int64_t r = c->nv / c->nk;
    return (g % c->nk) * r + g / c->nk;
}

static lilac_status write_plan(cv *c, gguf_writer *w, const cv_plan *pl)
{
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
                        if ((s = emit(c, w, pl, st, row + (size_t)(vhead(c, g) * pl->perm_block) * es, pl->perm_block)))
                            return s;
                } else if ((s = emit(c, w, pl, st, row, pl->row_len))) {
                    return s;
                }
            }
        }
    }
    return LILAC_OK;
}

lilac_status lilac_convert_hf_to_gguf(const char *in_dir, const char *out_path,
                                      const lilac_convert_params *params, lilac_error *err)
{
    struct stat sb;
    if (!in_dir || !out_path)
        return lilac_fail(err, LILAC_E_ARG, "convert: no input or output path given");
    if (stat(in_dir, &sb) != 0)
        return lilac_fail(err, LILAC_E_IO, "%s: %s", in_dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return lilac_fail(err, LILAC_E_ARG, "%s: not a directory; convert wants a Hugging Face checkpoint directory",
                          in_dir);
    cv c;
    memset(&c, 0, sizeof c);
    c.in = in_dir;
    c.out = out_path;
    c.err = err;
    c.params = params;
    gguf_writer *w = NULL;
    lilac_status s = read_config(&c);
    if (s)
        goto done;
    if ((s = st_open(in_dir, &c.st, err)))
        goto done;
    c.prefix = st_find(c.st, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
    c.used = calloc(st_n_tensors(c.st) + 1, 1);
    if (!c.used) {
        s = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        goto done;
    }
    if ((s = make_plans(&c)))
        goto done;
    if ((s = gguf_writer_open(out_path, &w, err)) || (s = write_hparams(&c, w)) || (s = write_tokenizer(&c, w)))
        goto done;
    for (size_t i = 0; i < c.n_plans; i++) {
        const cv_plan *p = &c.plans[i];
        if ((s = gguf_writer_add_tensor(w, p->name, p->type, p->n_dims, p->ne, err)))
            goto done;
    }
    if ((s = gguf_writer_begin_data(w, err)))
        goto done;
    for (size_t i = 0; i < c.n_plans; i++)
        if ((s = write_plan(&c, w, &c.plans[i])))
            goto done;
    if ((s = gguf_writer_finish(w, err)))
        goto done;
    cv_log(&c, LILAC_LOG_INFO, "wrote %zu tensors to %s", c.n_plans, out_path);
done:
    gguf_writer_free(w); /* removes OUT.tmp unless finished */
    for (size_t i = 0; i < c.n_plans; i++)
        free(c.plans[i].src);
    free(c.plans);
    free(c.used);
    free(c.is_ssm);
    st_close(c.st);
    json_decref(c.root);
    return s;
}
