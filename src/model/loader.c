#include "model/loader.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/dtype.h"
#include "util/err.h"

static const char *compose(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name)
{
    const char *n = ld->is_gguf ? gguf_name : hf_name;
    if (!n)
        return NULL;
    if (ld->is_gguf) {
        if (il >= 0)
            snprintf(ld->name, sizeof ld->name, "blk.%d.%s", il, n);
        else
            snprintf(ld->name, sizeof ld->name, "%s", n);
    } else {
        if (il >= 0)
            snprintf(ld->name, sizeof ld->name, "%slayers.%d.%s", ld->hf_prefix, il, n);
        else if (strcmp(n, "lm_head.weight") == 0) /* MLX: under language_model. */
            snprintf(ld->name, sizeof ld->name, "%s%s", ld->hf_head_prefix ? ld->hf_head_prefix : "", n);
        else
            snprintf(ld->name, sizeof ld->name, "%s%s", ld->hf_prefix, n);
    }
    return ld->name;
}

static bool lookup(lilac_loader *ld, const char *name, ld_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (ld->is_gguf) {
        const gguf_tensor *t = gguf_find_tensor(ld->gguf, name);
        if (!t)
            return false;
        out->name = t->name;
        out->type = t->type;
        out->n_dims = t->n_dims;
        for (int i = 0; i < t->n_dims; i++) /* ggml lists the fastest dimension first */
            out->shape[i] = t->ne[t->n_dims - 1 - i];
        out->data = t->data;
        out->nbytes = t->nbytes;
        out->file = gguf_file_path(ld->gguf, t->file);
        out->index = (size_t)(t - gguf_tensor_at(ld->gguf, 0));
    } else {
        const st_tensor *t = st_find(ld->st, name);
        if (!t)
            return false;
        out->name = t->name;
        out->type = t->dtype;
        out->n_dims = t->n_dims;
        for (int i = 0; i < t->n_dims; i++)
            out->shape[i] = t->shape[i];
        out->data = t->data;
        out->nbytes = t->nbytes;
        out->file = st_file_path(ld->st, t->file);
        out->index = (size_t)(t - st_tensor_at(ld->st, 0));
    }
    ld->used[out->index] = 1;
    return true;
}

bool ld_has(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name)
{
    const char *n = compose(ld, il, gguf_name, hf_name);
    if (!n)
        return false;
    return ld->is_gguf ? gguf_find_tensor(ld->gguf, n) != NULL : st_find(ld->st, n) != NULL;
}

lilac_status ld_get(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name,
                    ld_tensor *out)
{
    const char *n = compose(ld, il, gguf_name, hf_name);
    if (!n)
        return lilac_fail(ld->err, LILAC_E_INTERNAL, "%s: no tensor name for this layout",
                          ld->m->path);
    if (!lookup(ld, n, out))
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: missing tensor '%s'", ld->m->path, n);
    return LILAC_OK;
}

static lilac_status wrong_shape(lilac_loader *ld, const ld_tensor *t, const int64_t *want,
                                int want_dims)
{
    char have[128], need[128];
    lilac_shape_str(t->shape, t->n_dims, have, sizeof have);
    lilac_shape_str(want, want_dims, need, sizeof need);
    return lilac_fail(ld->err, LILAC_E_FORMAT,
                      "%s: tensor '%s' has shape %s but the model's hyper-parameters need %s",
                      t->file, t->name, have, need);
}

static lilac_status check_type(lilac_loader *ld, const ld_tensor *t)
{
    if (lilac_cpu_type_supported(t->type))
        return LILAC_OK;
    const lilac_dtype_info *di = lilac_dtype_get(t->type);
    return lilac_fail(ld->err, LILAC_E_UNSUPPORTED,
                      "%s: tensor '%s' has type %s, which lilac cannot compute with yet",
                      t->file, t->name, di ? di->name : "unknown");
}

lilac_status ld_stacked(lilac_loader *ld, const ld_tensor *t, int64_t n_mats, int64_t rows,
                        int64_t cols, int64_t r0, int64_t e, lilac_mat *out)
{
    /* The stack is [n_mats, full_rows, cols]; this view is rows r0.. of matrix e. */
    int64_t full_rows = t->n_dims == 3 ? t->shape[1] : t->shape[0];
    size_t row_bytes = lilac_dtype_row_bytes(t->type, cols);
    if (row_bytes == 0)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: tensor '%s': rows of %lld values do not fit its type's blocks",
                          t->file, t->name, (long long)cols);
    (void)n_mats;
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = row_bytes;
    out->data = (const uint8_t *)t->data + ((size_t)e * (size_t)full_rows + (size_t)r0) * row_bytes;
    return LILAC_OK;
}

lilac_status ld_mat(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name,
                    int64_t rows, int64_t cols, lilac_mat *out)
{
    ld_tensor t;
    lilac_status s = ld_get(ld, il, gguf_name, hf_name, &t);
    if (s)
        return s;
    if (ld_mlx_quantized(ld, &t)) /* MLX affine: model/loader_mlx.c */
        return ld_mlx_mat(ld, &t, rows, cols, out);
    int64_t want[2] = {rows, cols};
    if (t.n_dims != 2 || t.shape[0] != rows || t.shape[1] != cols)
        return wrong_shape(ld, &t, want, 2);
    if ((s = check_type(ld, &t)))
        return s;
    return ld_stacked(ld, &t, 1, rows, cols, 0, 0, out);
}

lilac_status ld_vec(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name,
                    int64_t n, float add, float **out)
{
    ld_tensor t;
    lilac_status s = ld_get(ld, il, gguf_name, hf_name, &t);
    if (s)
        return s;
    if (ld_mlx_quantized(ld, &t)) /* MLX affine: model/loader_mlx.c */
        return ld_mlx_vec(ld, &t, n, add, out);
    int64_t count = 1;
    for (int i = 0; i < t.n_dims; i++)
        count *= t.shape[i];
    if (count != n) {
        int64_t want[1] = {n};
        return wrong_shape(ld, &t, want, 1);
    }
    if (t.type != LILAC_F32 && t.type != LILAC_F16 && t.type != LILAC_BF16) {
        const lilac_dtype_info *di = lilac_dtype_get(t.type);
        return lilac_fail(ld->err, LILAC_E_UNSUPPORTED, "%s: tensor '%s' has type %s; lilac needs F32, F16 or BF16 here",
                          t.file, t.name, di ? di->name : "unknown");
    }
    float *v = lilac_model_alloc(ld->m, (size_t)n * sizeof(float));
    if (!v)
        return lilac_fail(ld->err, LILAC_E_NOMEM, "out of memory");
    lilac_row_to_f32(t.type, t.data, v, n);
    for (int64_t i = 0; i < n; i++) {
        v[i] += add;
        if (!isfinite(v[i]))
            return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: tensor '%s' holds a non-finite value at %lld",
                              t.file, t.name, (long long)i);
    }
    *out = v;
    return LILAC_OK;
}

static lilac_status check_stack(lilac_loader *ld, const ld_tensor *t, int64_t e, int64_t r,
                                int64_t c)
{
    int64_t want[3] = {e, r, c};
    if (t->n_dims != 3 || t->shape[0] != e || t->shape[1] != r || t->shape[2] != c)
        return wrong_shape(ld, t, want, 3);
    return check_type(ld, t);
}

lilac_status ld_experts(lilac_loader *ld, int il, int n_expert, int64_t n_embd, int64_t ff,
                        lilac_layer_weights *lw)
{
    lilac_model *m = ld->m;
    lw->exp_gate = lilac_model_alloc(m, (size_t)n_expert * sizeof(lilac_mat));
    lw->exp_up = lilac_model_alloc(m, (size_t)n_expert * sizeof(lilac_mat));
    lw->exp_down = lilac_model_alloc(m, (size_t)n_expert * sizeof(lilac_mat));
    if (!lw->exp_gate || !lw->exp_up || !lw->exp_down)
        return lilac_fail(ld->err, LILAC_E_NOMEM, "out of memory");
    lilac_status s;
    ld_tensor g, u, d;
    if (ld->is_gguf) {
        if ((s = ld_get(ld, il, "ffn_gate_exps.weight", NULL, &g)) ||
            (s = check_stack(ld, &g, n_expert, ff, n_embd)) ||
            (s = ld_get(ld, il, "ffn_up_exps.weight", NULL, &u)) ||
            (s = check_stack(ld, &u, n_expert, ff, n_embd)) ||
            (s = ld_get(ld, il, "ffn_down_exps.weight", NULL, &d)) ||
            (s = check_stack(ld, &d, n_expert, n_embd, ff)))
            return s;
        for (int e = 0; e < n_expert; e++) {
            ld_stacked(ld, &g, n_expert, ff, n_embd, 0, e, &lw->exp_gate[e]);
            ld_stacked(ld, &u, n_expert, ff, n_embd, 0, e, &lw->exp_up[e]);
            ld_stacked(ld, &d, n_expert, n_embd, ff, 0, e, &lw->exp_down[e]);
        }
        return LILAC_OK;
    }
    if (ld_has(ld, il, NULL, "mlp.switch_mlp.gate_proj.weight")) /* MLX: model/loader_mlx.c */
        return ld_mlx_experts(ld, il, n_expert, n_embd, ff, lw);
    if (ld_has(ld, il, NULL, "mlp.experts.gate_up_proj")) {
        /* Fused: gate_up_proj [E, 2*ff, n_embd], gate rows first; down_proj [E, n_embd, ff]. */
        if ((s = ld_get(ld, il, NULL, "mlp.experts.gate_up_proj", &g)) ||
            (s = check_stack(ld, &g, n_expert, 2 * ff, n_embd)) ||
            (s = ld_get(ld, il, NULL, "mlp.experts.down_proj", &d)) ||
            (s = check_stack(ld, &d, n_expert, n_embd, ff)))
            return s;
        for (int e = 0; e < n_expert; e++) {
            ld_stacked(ld, &g, n_expert, ff, n_embd, 0, e, &lw->exp_gate[e]);
            ld_stacked(ld, &g, n_expert, ff, n_embd, ff, e, &lw->exp_up[e]);
            ld_stacked(ld, &d, n_expert, n_embd, ff, 0, e, &lw->exp_down[e]);
        }
        return LILAC_OK;
    }
    char name[128];
    for (int e = 0; e < n_expert; e++) {
        snprintf(name, sizeof name, "mlp.experts.%d.gate_proj.weight", e);
        if ((s = ld_mat(ld, il, NULL, name, ff, n_embd, &lw->exp_gate[e])))
            return s;
        snprintf(name, sizeof name, "mlp.experts.%d.up_proj.weight", e);
        if ((s = ld_mat(ld, il, NULL, name, ff, n_embd, &lw->exp_up[e])))
            return s;
        snprintf(name, sizeof name, "mlp.experts.%d.down_proj.weight", e);
        if ((s = ld_mat(ld, il, NULL, name, n_embd, ff, &lw->exp_down[e])))
            return s;
    }
    return LILAC_OK;
}

/* ---- hyper-parameters ---- */

static const char *config_path(lilac_loader *ld, char *buf, size_t size)
{
    snprintf(buf, size, "%s/config.json", ld->m->path);
    return buf;
}

const char *ld_hp_file(lilac_loader *ld)
{
    if (ld->is_gguf)
        return ld->m->path;
    return config_path(ld, ld->name, sizeof ld->name);
}

static lilac_status missing_hp(lilac_loader *ld, const char *gguf_key, const char *hf_key)
{
    char p[4096];
    if (ld->is_gguf)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: missing metadata '%s.%s'", ld->m->path,
                          ld->m->arch_name, gguf_key ? gguf_key : "?");
    return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: missing or invalid '%s'",
                      config_path(ld, p, sizeof p), hf_key ? hf_key : "?");
}

/* hf_key may list alternatives, "a|b": configs of one family differ in names. */
static json_t *hf_get(lilac_loader *ld, const char *hf_key)
{
    char key[128];
    for (const char *p = hf_key; *p;) {
        size_t n = strcspn(p, "|");
        if (n < sizeof key) {
            memcpy(key, p, n);
            key[n] = 0;
            json_t *v = json_object_get(ld->config, key);
            if (v)
                return v;
        }
        p += n + (p[n] == '|');
    }
    return NULL;
}

static lilac_status hf_number(lilac_loader *ld, const char *hf_key, double *out, bool *found)
{
    json_t *v = hf_get(ld, hf_key);
    *found = v != NULL && !json_is_null(v);
    if (!*found)
        return LILAC_OK;
    if (!json_is_number(v)) {
        char p[4096];
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: '%s' must be a number",
                          config_path(ld, p, sizeof p), hf_key);
    }
    *out = json_number_value(v);
    return LILAC_OK;
}

lilac_status ld_u32_or(lilac_loader *ld, const char *gguf_key, const char *hf_key, uint32_t dflt,
                       uint32_t *out)
{
    *out = dflt;
    if (ld->is_gguf) {
        if (!gguf_key)
            return LILAC_OK;
        char key[256];
        snprintf(key, sizeof key, "%s.%s", ld->m->arch_name, gguf_key);
        if (!gguf_find_kv(ld->gguf, key))
            return LILAC_OK;
        uint64_t v;
        lilac_status s = gguf_get_u64(ld->gguf, key, &v, ld->err);
        if (s)
            return s;
        if (v > UINT32_MAX)
            return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: metadata '%s' = %llu is too large",
                              ld->m->path, key, (unsigned long long)v);
        *out = (uint32_t)v;
        return LILAC_OK;
    }
    if (!hf_key)
        return LILAC_OK;
    double d = 0;
    bool found;
    lilac_status s = hf_number(ld, hf_key, &d, &found);
    if (s || !found)
        return s;
    if (d < 0 || d > UINT32_MAX || d != floor(d)) {
        char p[4096];
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: '%s' must be a non-negative integer",
                          config_path(ld, p, sizeof p), hf_key);
    }
    *out = (uint32_t)d;
    return LILAC_OK;
}

lilac_status ld_u32(lilac_loader *ld, const char *gguf_key, const char *hf_key, uint32_t *out)
{
    const uint32_t absent = UINT32_MAX;
    lilac_status s = ld_u32_or(ld, gguf_key, hf_key, absent, out);
    if (s)
        return s;
    if (*out == absent)
        return missing_hp(ld, gguf_key, hf_key);
    return LILAC_OK;
}

static lilac_status to_int(lilac_loader *ld, const char *gguf_key, const char *hf_key, uint32_t v, int *out)
{
    if (v > INT32_MAX)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: '%s' = %u is out of range", ld_hp_file(ld),
                          ld->is_gguf ? gguf_key : hf_key, v);
    *out = (int)v;
    return LILAC_OK;
}

lilac_status ld_int(lilac_loader *ld, const char *gguf_key, const char *hf_key, int *out)
{
    uint32_t v;
    lilac_status s = ld_u32(ld, gguf_key, hf_key, &v);
    return s ? s : to_int(ld, gguf_key, hf_key, v, out);
}

lilac_status ld_int_or(lilac_loader *ld, const char *gguf_key, const char *hf_key, int dflt, int *out)
{
    uint32_t v;
    lilac_status s = ld_u32_or(ld, gguf_key, hf_key, (uint32_t)dflt, &v);
    return s ? s : to_int(ld, gguf_key, hf_key, v, out);
}

lilac_status ld_gguf_flag(lilac_loader *ld, const char *gguf_key, bool dflt, bool *out)
{
    *out = dflt;
    char key[256];
    snprintf(key, sizeof key, "%s.%s", ld->m->arch_name, gguf_key);
    const gguf_kv *kv = gguf_find_kv(ld->gguf, key);
    if (!kv)
        return LILAC_OK;
    if (kv->type == GGUF_VT_BOOL)
        return gguf_get_bool(ld->gguf, key, out, ld->err);
    uint64_t v;
    lilac_status s = gguf_get_u64(ld->gguf, key, &v, ld->err);
    *out = v != 0;
    return s;
}

lilac_status ld_moe_hparams(lilac_loader *ld, lilac_hparams *hp)
{
    lilac_status s;
    if ((s = ld_int(ld, "block_count", "num_hidden_layers", &hp->n_layer)) ||
        (s = ld_int(ld, "embedding_length", "hidden_size", &hp->n_embd)) ||
        (s = ld_int(ld, "attention.head_count", "num_attention_heads", &hp->n_head)) ||
        (s = ld_int(ld, "attention.head_count_kv", "num_key_value_heads", &hp->n_head_kv)) ||
        (s = ld_int(ld, "expert_count", "num_experts|num_local_experts", &hp->n_expert)) ||
        (s = ld_int(ld, "expert_used_count", "num_experts_per_tok", &hp->n_expert_used)) ||
        (s = ld_int(ld, "expert_feed_forward_length", "moe_intermediate_size", &hp->expert_ff)) ||
        (s = ld_int_or(ld, "context_length", "max_position_embeddings", 0, &hp->n_ctx_train)) ||
        (s = ld_f32(ld, "attention.layer_norm_rms_epsilon", "rms_norm_eps", &hp->norm_eps)))
        return s;
    /* the layer table is sized by this: check it before anything fills it */
    if (hp->n_layer < 1 || hp->n_layer > LILAC_MAX_LAYERS)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: %d layers; lilac runs 1 to %d", ld_hp_file(ld),
                          hp->n_layer, LILAC_MAX_LAYERS);
    return LILAC_OK;
}

lilac_status ld_f32(lilac_loader *ld, const char *gguf_key, const char *hf_key, float *out)
{
    if (ld->is_gguf) {
        char key[256];
        snprintf(key, sizeof key, "%s.%s", ld->m->arch_name, gguf_key);
        if (!gguf_find_kv(ld->gguf, key))
            return missing_hp(ld, gguf_key, hf_key);
        double v;
        lilac_status s = gguf_get_f64(ld->gguf, key, &v, ld->err);
        *out = (float)v;
        return s;
    }
    double d = 0;
    bool found;
    lilac_status s = hf_number(ld, hf_key, &d, &found);
    if (s)
        return s;
    if (!found)
        return missing_hp(ld, gguf_key, hf_key);
    *out = (float)d;
    return LILAC_OK;
}

lilac_status ld_hf_rope_f32(lilac_loader *ld, const char *key, bool required, float dflt, float *out)
{
    json_t *rp = json_object_get(ld->config, "rope_parameters");
    json_t *v = json_is_object(rp) ? json_object_get(rp, key) : NULL;
    if (!v)
        v = json_object_get(ld->config, key);
    if (v && json_is_number(v)) {
        *out = (float)json_number_value(v);
        return LILAC_OK;
    }
    if (v && !json_is_null(v)) {
        char p[4096];
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: '%s' must be a number",
                          config_path(ld, p, sizeof p), key);
    }
    if (required)
        return missing_hp(ld, NULL, key);
    *out = dflt;
    return LILAC_OK;
}

bool ld_hf_bool(lilac_loader *ld, const char *key, bool dflt)
{
    json_t *v = json_object_get(ld->config, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* ---- shared bindings ---- */

lilac_status ld_attention(lilac_loader *ld, int il, float norm_add, lilac_layer_weights *lw)
{
    const lilac_hparams *hp = &ld->m->hp;
    int64_t hd = hp->head_dim, E = hp->n_embd;
    int64_t q_rows = hp->n_head * hd * (hp->attn_output_gate ? 2 : 1);
    lilac_status s;
    if ((s = ld_mat(ld, il, "attn_q.weight", "self_attn.q_proj.weight", q_rows, E, &lw->wq)) ||
        (s = ld_mat(ld, il, "attn_k.weight", "self_attn.k_proj.weight", hp->n_head_kv * hd, E, &lw->wk)) ||
        (s = ld_mat(ld, il, "attn_v.weight", "self_attn.v_proj.weight", hp->n_head_kv * hd, E, &lw->wv)) ||
        (s = ld_mat(ld, il, "attn_output.weight", "self_attn.o_proj.weight", E, hp->n_head * hd, &lw->wo)) ||
        (s = ld_vec(ld, il, "attn_q_norm.weight", "self_attn.q_norm.weight", hd, norm_add, &lw->q_norm)) ||
        (s = ld_vec(ld, il, "attn_k_norm.weight", "self_attn.k_norm.weight", hd, norm_add, &lw->k_norm)))
        return s;
    return LILAC_OK;
}

lilac_status ld_moe(lilac_loader *ld, int il, lilac_layer_weights *lw)
{
    const lilac_hparams *hp = &ld->m->hp;
    int64_t E = hp->n_embd, sff = hp->shared_ff;
    lilac_status s;
    if ((s = ld_mat(ld, il, "ffn_gate_inp.weight", "mlp.gate.weight", hp->n_expert, E, &lw->router)) ||
        (s = ld_experts(ld, il, hp->n_expert, E, hp->expert_ff, lw)))
        return s;
    if (sff == 0)
        return LILAC_OK;
    if ((s = ld_mat(ld, il, "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", sff, E, &lw->sh_gate)) ||
        (s = ld_mat(ld, il, "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", sff, E, &lw->sh_up)) ||
        (s = ld_mat(ld, il, "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", E, sff, &lw->sh_down)) ||
        (s = ld_vec(ld, il, "ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", E, 0.0f, &lw->sh_gate_inp)))
        return s;
    return LILAC_OK;
}

lilac_status ld_globals(lilac_loader *ld, float norm_add)
{
    lilac_model *m = ld->m;
    lilac_hparams *hp = &m->hp;
    ld_tensor t;
    lilac_status s = ld_get(ld, -1, "token_embd.weight", "embed_tokens.weight", &t);
    if (s)
        return s;
    if ((s = ld_mlx_unpack_shape(ld, &t))) /* MLX affine: the width in values */
        return s;
    if (t.n_dims != 2 || t.shape[1] != hp->n_embd || t.shape[0] < 1) {
        int64_t want[2] = {hp->n_vocab > 0 ? hp->n_vocab : t.shape[0], hp->n_embd};
        return wrong_shape(ld, &t, want, 2);
    }
    if (hp->n_vocab == 0)
        hp->n_vocab = (int)t.shape[0];
    if ((s = ld_mat(ld, -1, "token_embd.weight", "embed_tokens.weight", hp->n_vocab, hp->n_embd, &m->w.tok_embd)) ||
        (s = ld_vec(ld, -1, "output_norm.weight", "norm.weight", hp->n_embd, norm_add, &m->w.output_norm)))
        return s;
    /* GGUF marks tied embeddings by leaving the output out; HF says so in config. */
    bool has_output = ld_has(ld, -1, "output.weight", "lm_head.weight");
    if (!ld->is_gguf && hp->tied_embeddings)
        has_output = false;
    hp->tied_embeddings = !has_output;
    if (!has_output) {
        m->w.output = m->w.tok_embd;
        return LILAC_OK;
    }
    return ld_mat(ld, -1, "output.weight", "lm_head.weight", hp->n_vocab, hp->n_embd, &m->w.output);
}

lilac_status ld_prepare(lilac_loader *ld)
{
    const lilac_hparams *hp = &ld->m->hp;
    const char *file = ld_hp_file(ld);
#define BAD(...) return lilac_fail(ld->err, LILAC_E_FORMAT, __VA_ARGS__)
    if (hp->n_layer < 1 || hp->n_layer > LILAC_MAX_LAYERS)
        BAD("%s: %d layers; lilac runs 1 to %d", file, hp->n_layer, LILAC_MAX_LAYERS);
    if (hp->n_embd < 1 || hp->n_embd > (1 << 20))
        BAD("%s: hidden size %d is out of range", file, hp->n_embd);
    if (!(hp->norm_eps > 0) || !(hp->norm_eps < 1))
        BAD("%s: norm epsilon %g is out of range", file, hp->norm_eps);
    if (hp->n_expert < 1 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert || hp->n_expert > 65536)
        BAD("%s: %d experts with %d used per token is not a valid mixture", file, hp->n_expert, hp->n_expert_used);
    if (hp->expert_ff < 1 || hp->expert_ff > (1 << 20) || hp->shared_ff < 0 || hp->shared_ff > (1 << 20))
        BAD("%s: expert width %d / shared expert width %d out of range", file, hp->expert_ff, hp->shared_ff);
    bool any_attn = false, any_ssm = false;
    for (int i = 0; i < hp->n_layer; i++) {
        any_attn |= hp->layer_kind[i] == LILAC_LAYER_ATTENTION;
        any_ssm |= hp->layer_kind[i] == LILAC_LAYER_DELTANET;
    }
    if (any_attn) {
        if (hp->n_head < 1 || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv != 0 || hp->n_head > 4096)
            BAD("%s: %d query heads cannot share %d key/value heads", file, hp->n_head, hp->n_head_kv);
        if (hp->head_dim < 2 || hp->head_dim > 4096)
            BAD("%s: head size %d is out of range", file, hp->head_dim);
        if (hp->rope_dims < 0 || hp->rope_dims > hp->head_dim || hp->rope_dims % 2 != 0)
            BAD("%s: %d rotary dims do not fit heads of %d", file, hp->rope_dims, hp->head_dim);
        if (!(hp->rope_theta > 0))
            BAD("%s: rotary base %g must be positive", file, hp->rope_theta);
    }
    if (any_ssm) {
        if (hp->ssm_k_heads < 1 || hp->ssm_v_heads < 1 || hp->ssm_v_heads % hp->ssm_k_heads != 0 ||
            hp->ssm_v_heads > 4096)
            BAD("%s: %d DeltaNet value heads cannot share %d key heads", file, hp->ssm_v_heads, hp->ssm_k_heads);
        if (hp->ssm_k_dim < 1 || hp->ssm_v_dim < 1 || hp->ssm_k_dim > 4096 || hp->ssm_v_dim > 4096)
            BAD("%s: DeltaNet head sizes %d/%d are out of range", file, hp->ssm_k_dim, hp->ssm_v_dim);
        if (hp->ssm_conv_kernel < 1 || hp->ssm_conv_kernel > 64)
            BAD("%s: DeltaNet conv kernel %d is out of range", file, hp->ssm_conv_kernel);
    }
#undef BAD
    ld->m->w.layers = lilac_model_alloc(ld->m, (size_t)hp->n_layer * sizeof(lilac_layer_weights));
    if (!ld->m->w.layers)
        return lilac_fail(ld->err, LILAC_E_NOMEM, "out of memory");
    return LILAC_OK;
}
