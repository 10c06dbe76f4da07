/* loader_mlx: MLX checkpoints as mlx / mlx-lm save them — the text model
 * under "language_model.model." (qwen3.5) or "model." (qwen3), routed
 * experts stacked as mlp.switch_mlp.{gate,up,down}_proj [E, rows, ...],
 * and, when config.json has an affine `quantization` block, every
 * quantized Linear/Embedding stored as NAME.weight (uint32 [rows,
 * cols*bits/32], codes LSB-first), NAME.scales and NAME.biases ([rows,
 * cols/group_size], F16/BF16/F32): value = scale * q + bias. The weights
 * are bound as they are (lilac_mat of type LILAC_MLX_AFFINE; the kernels in
 * kernels/cpu/mlx_*.c), nothing converted. Group size and bits come from the
 * block's per-module entries ("PATH": {"group_size", "bits"}), else from
 * its top level. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/mlx.h"
#include "model/loader.h"
#include "util/err.h"

static const char *dtype_name(int type)
{
    const lilac_dtype_info *di = lilac_dtype_get(type);
    return di ? di->name : "unknown";
}

/* A number of the block as an int, or -1 when absent or not an integer. */
static int int_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 20)
        return -1;
    return (int)json_integer_value(v);
}

lilac_status ld_mlx_detect(lilac_loader *ld, json_t *root)
{
    if (st_find(ld->st, "language_model.model.embed_tokens.weight")) {
        ld->hf_prefix = "language_model.model.";
        ld->hf_head_prefix = "language_model.";
        ld->mlx_layout = true;
    }
    json_t *q = json_object_get(root, "quantization");
    if (!json_is_object(q))
        q = json_object_get(root, "quantization_config");
    if (!json_is_object(q) && ld->config != root) {
        q = json_object_get(ld->config, "quantization");
        if (!json_is_object(q))
            q = json_object_get(ld->config, "quantization_config");
    }
    /* Other quantizers (quant_method: fp8, gptq, ...) are not MLX's. */
    if (!json_is_object(q) || json_object_get(q, "quant_method") || !json_object_get(q, "bits"))
        return LILAC_OK;
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", ld->m->path);
    json_t *mode = json_object_get(q, "mode");
    if (mode && (!json_is_string(mode) || strcmp(json_string_value(mode), "affine") != 0))
        return lilac_fail(ld->err, LILAC_E_UNSUPPORTED,
                          "%s: quantization mode '%s' is not supported (lilac reads MLX affine quantization)", cfg,
                          json_is_string(mode) ? json_string_value(mode) : "(not a string)");
    if (int_of(q, "bits") < 0 || int_of(q, "group_size") < 0)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: the quantization block needs integer 'bits' and 'group_size'",
                          cfg);
    ld->mlx_quant = q;
    ld->mlx_layout = true; /* saved by mlx-lm: norms as it sanitized them */
    return LILAC_OK;
}

/* The sibling NAME.suffix of a tensor NAME.weight, or NULL. */
static const st_tensor *sibling(lilac_loader *ld, const char *weight_name, const char *suffix, char *buf, size_t size)
{
    size_t n = strlen(weight_name);
    if (n < 7 || strcmp(weight_name + n - 7, ".weight") != 0 || n - 7 + strlen(suffix) + 2 > size)
        return NULL;
    snprintf(buf, size, "%.*s.%s", (int)(n - 7), weight_name, suffix);
    return st_find(ld->st, buf);
}

bool ld_mlx_quantized(lilac_loader *ld, const ld_tensor *t)
{
    if (ld->is_gguf || !ld->st)
        return false;
    char buf[600];
    size_t n = strlen(t->name);
    bool is_weight = n >= 7 && strcmp(t->name + n - 7, ".weight") == 0;
    return is_weight && (t->type == LILAC_U32 || sibling(ld, t->name, "scales", buf, sizeof buf) != NULL);
}

/* Group size and bits of the module a weight belongs to. */
static void params_of(lilac_loader *ld, const char *weight_name, int *group_size, int *bits)
{
    *group_size = int_of(ld->mlx_quant, "group_size");
    *bits = int_of(ld->mlx_quant, "bits");
    char module[600];
    size_t n = strlen(weight_name);
    if (n < 7 || n - 7 >= sizeof module)
        return;
    memcpy(module, weight_name, n - 7);
    module[n - 7] = 0;
    json_t *o = json_object_get(ld->mlx_quant, module);
    if (json_is_object(o)) {
        if (json_object_get(o, "group_size"))
            *group_size = int_of(o, "group_size");
        if (json_object_get(o, "bits"))
            *bits = int_of(o, "bits");
    }
}

static void mark_used(lilac_loader *ld, const st_tensor *t) { ld->used[(size_t)(t - st_tensor_at(ld->st, 0))] = 1; }

/* The packed weight t as n_mats stacked [rows, cols] matrices (n_mats 0: a
 * plain 2-D tensor): checks it with its scales and biases; *proto gets
 * everything of the views but the offsets (matrix 0, row 0). */
static lilac_status bind(lilac_loader *ld, const ld_tensor *t, int64_t n_mats, int64_t rows, int64_t cols,
                         lilac_mat *proto)
{
    char sname[600], bname[600];
    const st_tensor *sc = sibling(ld, t->name, "scales", sname, sizeof sname);
    const st_tensor *bi = sibling(ld, t->name, "biases", bname, sizeof bname);
#define BAD(code, ...) return lilac_fail(ld->err, code, __VA_ARGS__)
    if (!ld->mlx_quant)
        BAD(LILAC_E_FORMAT,
            "%s: tensor '%s' is MLX-quantized (uint32 codes%s) but config.json has no 'quantization' block", t->file,
            t->name, sc ? " with scales" : "");
    if (t->type != LILAC_U32)
        BAD(LILAC_E_FORMAT, "%s: tensor '%s' has type %s; MLX-quantized weights are U32", t->file, t->name,
            dtype_name(t->type));
    if (!sc)
        BAD(LILAC_E_FORMAT, "%s: tensor '%s' is MLX-quantized but its scales '%s' are missing", t->file, t->name,
            sname);
    if (!bi)
        BAD(LILAC_E_FORMAT, "%s: tensor '%s' is MLX-quantized but its biases '%s' are missing", t->file, t->name,
            bname);
    mark_used(ld, sc);
    mark_used(ld, bi);
    int gs, bits;
    params_of(ld, t->name, &gs, &bits);
    if (!lilac_mlx_bits_supported(bits))
        BAD(LILAC_E_UNSUPPORTED, "%s: tensor '%s' is quantized to %d bits; lilac reads MLX affine 2, 3, 4, 5, 6 and 8 bits",
            t->file, t->name, bits);
    if (!lilac_mlx_group_supported(gs))
        BAD(LILAC_E_UNSUPPORTED, "%s: tensor '%s' has quantization group size %d; lilac reads multiples of 32",
            t->file, t->name, gs);
    int want_dims = n_mats ? 3 : 2;
    int64_t words = cols * bits / 32;
    if (cols % gs != 0)
        BAD(LILAC_E_FORMAT, "%s: tensor '%s': quantization group size %d does not divide its rows of %lld values",
            t->file, t->name, gs, (long long)cols);
    if (t->n_dims != want_dims || t->shape[want_dims - 1] != words || t->shape[want_dims - 2] != rows ||
        (n_mats && t->shape[0] != n_mats)) {
        char have[128];
        lilac_shape_str(t->shape, t->n_dims, have, sizeof have);
        BAD(LILAC_E_FORMAT,
            "%s: tensor '%s' has shape %s but %lld rows of %lld values at %d bits need [%s%lld, %lld] uint32", t->file,
            t->name, have, (long long)rows, (long long)cols, bits, n_mats ? "E, " : "", (long long)rows,
            (long long)words);
    }
    const st_tensor *parts[2] = {sc, bi};
    for (int k = 0; k < 2; k++) {
        const st_tensor *p = parts[k];
        bool shape_ok = p->n_dims == want_dims && p->shape[want_dims - 1] == cols / gs &&
                        p->shape[want_dims - 2] == rows && (!n_mats || p->shape[0] == n_mats);
        if (!shape_ok) {
            char have[128];
            lilac_shape_str(p->shape, p->n_dims, have, sizeof have);
            BAD(LILAC_E_FORMAT, "%s: tensor '%s' has shape %s but '%s' at group size %d needs %lld groups per row",
                st_file_path(ld->st, p->file), p->name, have, t->name, gs, (long long)(cols / gs));
        }
        if (p->dtype != LILAC_F16 && p->dtype != LILAC_BF16 && p->dtype != LILAC_F32)
            BAD(LILAC_E_UNSUPPORTED, "%s: tensor '%s' has type %s; MLX scales and biases are F16, BF16 or F32",
                st_file_path(ld->st, p->file), p->name, dtype_name(p->dtype));
    }
    if (sc->dtype != bi->dtype)
        BAD(LILAC_E_FORMAT, "%s: tensors '%s' (%s) and '%s' (%s) differ in type", t->file, sc->name,
            dtype_name(sc->dtype), bi->name, dtype_name(bi->dtype));
#undef BAD
    memset(proto, 0, sizeof *proto);
    proto->type = LILAC_MLX_AFFINE;
    proto->rows = rows;
    proto->cols = cols;
    proto->row_bytes = (size_t)words * 4;
    proto->data = t->data;
    proto->scales = sc->data;
    proto->biases = bi->data;
    proto->scale_type = sc->dtype;
    proto->group_size = gs;
    proto->bits = bits;
    proto->scale_row_bytes = (size_t)(cols / gs) * (sc->dtype == LILAC_F32 ? 4 : 2);
    return LILAC_OK;
}

/* Rows r0.. of matrix e of a stack bound by bind() (full_rows per matrix). */
static lilac_mat view(const lilac_mat *proto, int64_t full_rows, int64_t e, int64_t r0, int64_t rows)
{
    lilac_mat v = *proto;
    size_t first = (size_t)e * (size_t)full_rows + (size_t)r0;
    v.rows = rows;
    v.data = (const uint8_t *)proto->data + first * proto->row_bytes;
    v.scales = (const uint8_t *)proto->scales + first * proto->scale_row_bytes;
    v.biases = (const uint8_t *)proto->biases + first * proto->scale_row_bytes;
    return v;
}

lilac_status ld_mlx_unpack_shape(lilac_loader *ld, ld_tensor *t)
{
    if (!ld_mlx_quantized(ld, t) || t->n_dims < 1)
        return LILAC_OK;
    int64_t words = t->shape[t->n_dims - 1];
    if (!ld->mlx_quant || t->type != LILAC_U32) { /* bind says what is wrong */
        lilac_mat unused;
        return bind(ld, t, 0, t->n_dims >= 2 ? t->shape[t->n_dims - 2] : 1, words, &unused);
    }
    int gs, bits;
    params_of(ld, t->name, &gs, &bits);
    if (!lilac_mlx_bits_supported(bits))
        return lilac_fail(ld->err, LILAC_E_UNSUPPORTED,
                          "%s: tensor '%s' is quantized to %d bits; lilac reads MLX affine 2, 3, 4, 5, 6 and 8 bits",
                          t->file, t->name, bits);
    t->shape[t->n_dims - 1] = words * 32 / bits;
    return LILAC_OK;
}

lilac_status ld_mlx_mat(lilac_loader *ld, const ld_tensor *t, int64_t rows, int64_t cols, lilac_mat *out)
{
    return bind(ld, t, 0, rows, cols, out);
}

lilac_status ld_mlx_vec(lilac_loader *ld, const ld_tensor *t, int64_t n, float add, float **out)
{
    /* e.g. mlp.shared_expert_gate [1, E]: rows as stored, values per row from the packing */
    int gs, bits;
    params_of(ld, t->name, &gs, &bits);
    int64_t rows = t->n_dims == 2 ? t->shape[0] : 1;
    int64_t cols = rows > 0 && n % rows == 0 ? n / rows : n;
    lilac_mat w;
    lilac_status s = bind(ld, t, 0, rows, cols, &w);
    if (s)
        return s;
    float *v = lilac_model_alloc(ld->m, (size_t)n * sizeof(float));
    if (!v)
        return lilac_fail(ld->err, LILAC_E_NOMEM, "out of memory");
    for (int64_t r = 0; r < rows; r++)
        lilac_mlx_dequant_row(&w, r, v + r * cols);
    for (int64_t i = 0; i < n; i++) {
        v[i] += add;
        if (!isfinite(v[i]))
            return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: tensor '%s' holds a non-finite value at %lld", t->file,
                              t->name, (long long)i);
    }
    *out = v;
    return LILAC_OK;
}

/* One stacked projection: quantized views, or plain ones of a float stack. */
static lilac_status experts_of(lilac_loader *ld, int il, const char *proj, int n_expert, int64_t rows, int64_t cols,
                               lilac_mat *mats)
{
    char name[96];
    snprintf(name, sizeof name, "mlp.switch_mlp.%s.weight", proj);
    ld_tensor t;
    lilac_status s = ld_get(ld, il, NULL, name, &t);
    if (s)
        return s;
    if (ld_mlx_quantized(ld, &t)) {
        lilac_mat proto;
        if ((s = bind(ld, &t, n_expert, rows, cols, &proto)))
            return s;
        for (int e = 0; e < n_expert; e++)
            mats[e] = view(&proto, rows, e, 0, rows);
        return LILAC_OK;
    }
    if (t.n_dims != 3 || t.shape[0] != n_expert || t.shape[1] != rows || t.shape[2] != cols) {
        char have[128], need[128];
        int64_t want[3] = {n_expert, rows, cols};
        lilac_shape_str(t.shape, t.n_dims, have, sizeof have);
        lilac_shape_str(want, 3, need, sizeof need);
        return lilac_fail(ld->err, LILAC_E_FORMAT,
                          "%s: tensor '%s' has shape %s but the model's hyper-parameters need %s", t.file, t.name,
                          have, need);
    }
    if (!lilac_cpu_type_supported(t.type))
        return lilac_fail(ld->err, LILAC_E_UNSUPPORTED,
                          "%s: tensor '%s' has type %s, which lilac cannot compute with yet", t.file, t.name,
                          dtype_name(t.type));
    for (int e = 0; e < n_expert; e++)
        if ((s = ld_stacked(ld, &t, n_expert, rows, cols, 0, e, &mats[e])))
            return s;
    return LILAC_OK;
}

lilac_status ld_mlx_experts(lilac_loader *ld, int il, int n_expert, int64_t n_embd, int64_t ff,
                            lilac_layer_weights *lw)
{
    /* ld_experts allocated the tables */
    lilac_status s;
    if ((s = experts_of(ld, il, "gate_proj", n_expert, ff, n_embd, lw->exp_gate)) ||
        (s = experts_of(ld, il, "up_proj", n_expert, ff, n_embd, lw->exp_up)) ||
        (s = experts_of(ld, il, "down_proj", n_expert, n_embd, ff, lw->exp_down)))
        return s;
    return LILAC_OK;
}
