/* gguf_meta: llama.cpp's converter metadata (hyper-parameters, BPE
 * tokenizer), written through a counting gm_out. See gguf_meta.h. */
#include "model/gguf_meta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* ---- counted key/value pairs ---- */

static void count(gm_out *o, const char *key, uint64_t payload)
{
    o->bytes += 8 + strlen(key) + 4 + payload;
    o->n_kv++;
}

lilac_status gm_u32(gm_out *o, const char *key, uint32_t v, lilac_error *err)
{
    count(o, key, 4);
    return o->w ? gguf_writer_kv_u32(o->w, key, v, err) : LILAC_OK;
}

lilac_status gm_f32(gm_out *o, const char *key, float v, lilac_error *err)
{
    count(o, key, 4);
    return o->w ? gguf_writer_kv_f32(o->w, key, v, err) : LILAC_OK;
}

lilac_status gm_bool(gm_out *o, const char *key, bool v, lilac_error *err)
{
    count(o, key, 1);
    return o->w ? gguf_writer_kv_bool(o->w, key, v, err) : LILAC_OK;
}

lilac_status gm_str(gm_out *o, const char *key, const char *v, lilac_error *err)
{
    count(o, key, 8 + strlen(v));
    return o->w ? gguf_writer_kv_str(o->w, key, v, err) : LILAC_OK;
}

static uint64_t elem_size(gguf_vtype t)
{
    switch (t) {
    case GGUF_VT_U8:
    case GGUF_VT_I8:
    case GGUF_VT_BOOL:
        return 1;
    case GGUF_VT_U16:
    case GGUF_VT_I16:
        return 2;
    case GGUF_VT_U32:
    case GGUF_VT_I32:
    case GGUF_VT_F32:
        return 4;
    default:
        return 8;
    }
}

lilac_status gm_arr(gm_out *o, const char *key, gguf_vtype elem_type, const void *data, size_t n, lilac_error *err)
{
    count(o, key, 4 + 8 + (uint64_t)n * elem_size(elem_type));
    return o->w ? gguf_writer_kv_arr(o->w, key, elem_type, data, n, err) : LILAC_OK;
}

lilac_status gm_str_arr(gm_out *o, const char *key, const char *const *strs, const size_t *lens, size_t n,
                        lilac_error *err)
{
    uint64_t total = 4 + 8;
    for (size_t i = 0; i < n; i++)
        total += 8 + (lens ? lens[i] : strlen(strs[i]));
    count(o, key, total);
    return o->w ? gguf_writer_kv_str_arr(o->w, key, strs, lens, n, err) : LILAC_OK;
}

lilac_status gm_copy_kv(gm_out *o, const gguf_kv *kv, lilac_error *err)
{
    gguf_writer *w = o->w;
    const char *k = kv->key;
    lilac_status s = LILAC_OK;
    switch (kv->type) {
    case GGUF_VT_STRING: {
        char *v = malloc((size_t)kv->v.s.len + 1);
        if (!v)
            return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        memcpy(v, kv->v.s.ptr, (size_t)kv->v.s.len);
        v[kv->v.s.len] = 0;
        count(o, k, 8 + kv->v.s.len);
        if (w)
            s = gguf_writer_kv_str(w, k, v, err);
        free(v);
        return s;
    }
    case GGUF_VT_ARRAY:
        if (kv->v.arr.type == GGUF_VT_STRING) {
            size_t n = (size_t)kv->v.arr.n;
            const char **strs = malloc((n ? n : 1) * sizeof *strs);
            size_t *lens = malloc((n ? n : 1) * sizeof *lens);
            if (!strs || !lens) {
                free(strs);
                free(lens);
                return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
            }
            for (size_t i = 0; i < n; i++) {
                strs[i] = kv->v.arr.strs[i].ptr;
                lens[i] = (size_t)kv->v.arr.strs[i].len;
            }
            s = gm_str_arr(o, k, strs, lens, n, err);
            free(strs);
            free(lens);
            return s;
        }
        return gm_arr(o, k, kv->v.arr.type, kv->v.arr.data, (size_t)kv->v.arr.n, err);
    case GGUF_VT_F32:
        return gm_f32(o, k, (float)kv->v.f, err);
    case GGUF_VT_F64:
        count(o, k, 8);
        return w ? gguf_writer_kv_f64(w, k, kv->v.f, err) : LILAC_OK;
    case GGUF_VT_BOOL:
        return gm_bool(o, k, kv->v.u != 0, err);
    case GGUF_VT_U8:
        count(o, k, 1);
        return w ? gguf_writer_kv_u8(w, k, (uint8_t)kv->v.u, err) : LILAC_OK;
    case GGUF_VT_I8:
        count(o, k, 1);
        return w ? gguf_writer_kv_i8(w, k, (int8_t)kv->v.i, err) : LILAC_OK;
    case GGUF_VT_U16:
        count(o, k, 2);
        return w ? gguf_writer_kv_u16(w, k, (uint16_t)kv->v.u, err) : LILAC_OK;
    case GGUF_VT_I16:
        count(o, k, 2);
        return w ? gguf_writer_kv_i16(w, k, (int16_t)kv->v.i, err) : LILAC_OK;
    case GGUF_VT_U32:
        return gm_u32(o, k, (uint32_t)kv->v.u, err);
    case GGUF_VT_I32:
        count(o, k, 4);
        return w ? gguf_writer_kv_i32(w, k, (int32_t)kv->v.i, err) : LILAC_OK;
    case GGUF_VT_U64:
        count(o, k, 8);
        return w ? gguf_writer_kv_u64(w, k, kv->v.u, err) : LILAC_OK;
    case GGUF_VT_I64:
        count(o, k, 8);
        return w ? gguf_writer_kv_i64(w, k, kv->v.i, err) : LILAC_OK;
    }
    return lilac_fail(err, LILAC_E_FORMAT, "metadata '%s' has an unknown type %d", k, (int)kv->type);
}

uint64_t gm_tensor_info_bytes(const char *name, int n_dims)
{
    return 8 + strlen(name) + 4 + 8 * (uint64_t)n_dims + 4 + 8;
}

uint64_t gm_header_bytes(const gm_out *o, uint64_t tensor_info_bytes)
{
    uint64_t n = 24 + o->bytes + tensor_info_bytes;
    return (n + 31) / 32 * 32;
}

/* ---- hyper-parameters ---- */

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

void gm_size_label(int64_t n_expert, uint64_t n_params_one_expert, char *buf, size_t size)
{
    char cnt[48];
    count_notation(n_params_one_expert, cnt, sizeof cnt);
    snprintf(buf, size, "%lldx%s", (long long)n_expert, cnt);
}

lilac_status gm_write_hparams(gm_out *o, const gm_hparams *c, lilac_error *e)
{
    char k[256];
    lilac_status s;
#define KEY(x) (snprintf(k, sizeof k, "%s.%s", c->arch, x), k)
    if ((s = gm_str(o, "general.architecture", c->arch, e)) || (s = gm_str(o, "general.type", "model", e)) ||
        (s = gm_str(o, "general.name", c->name, e)) || (s = gm_str(o, "general.size_label", c->size_label, e)) ||
        (s = gm_u32(o, KEY("block_count"), (uint32_t)c->n_layer, e)) ||
        (c->n_ctx && (s = gm_u32(o, KEY("context_length"), (uint32_t)c->n_ctx, e))) ||
        (s = gm_u32(o, KEY("embedding_length"), (uint32_t)c->n_embd, e)) ||
        (c->ff && (s = gm_u32(o, KEY("feed_forward_length"), (uint32_t)c->ff, e))) ||
        (s = gm_u32(o, KEY("attention.head_count"), (uint32_t)c->n_head, e)) ||
        (s = gm_u32(o, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv, e)))
        return s;
    if (c->has_sections) {
        int32_t sec[4];
        for (int i = 0; i < 4; i++)
            sec[i] = (int32_t)c->sections[i];
        if ((s = gm_arr(o, KEY("rope.dimension_sections"), GGUF_VT_I32, sec, 4, e)))
            return s;
    }
    if ((s = gm_f32(o, KEY("rope.freq_base"), c->theta, e)) ||
        (s = gm_f32(o, KEY("attention.layer_norm_rms_epsilon"), c->eps, e)) ||
        (s = gm_u32(o, KEY("expert_count"), (uint32_t)c->n_expert, e)) ||
        (s = gm_u32(o, KEY("expert_used_count"), (uint32_t)c->n_used, e)) ||
        (s = gm_u32(o, KEY("attention.key_length"), (uint32_t)c->head_dim, e)) ||
        (s = gm_u32(o, KEY("attention.value_length"), (uint32_t)c->head_dim, e)) ||
        (!c->type_keys_last && (s = gm_u32(o, "general.file_type", c->file_type, e))) ||
        (s = gm_u32(o, KEY("expert_feed_forward_length"), (uint32_t)c->eff, e)))
        return s;
    if (!c->q35 && !c->norm_topk) {
        /* llama.cpp always renormalizes qwen3moe's chosen experts; a checkpoint
         * with norm_topk_prob false says otherwise, under llama.cpp's key. */
        if ((s = gm_bool(o, KEY("expert_weights_norm"), false, e)))
            return s;
    }
    if (c->q35) {
        uint8_t *rec = malloc((size_t)c->n_layer);
        if (!rec)
            return lilac_fail(e, LILAC_E_NOMEM, "out of memory");
        for (int64_t i = 0; i < c->n_layer; i++)
            rec[i] = c->is_ssm[i];
        if ((c->sff && (s = gm_u32(o, KEY("expert_shared_feed_forward_length"), (uint32_t)c->sff, e))) ||
            (s = gm_u32(o, KEY("ssm.conv_kernel"), (uint32_t)c->K, e)) ||
            (s = gm_u32(o, KEY("ssm.state_size"), (uint32_t)c->dk, e)) ||
            (s = gm_u32(o, KEY("ssm.group_count"), (uint32_t)c->nk, e)) ||
            (s = gm_u32(o, KEY("ssm.time_step_rank"), (uint32_t)c->nv, e)) ||
            (s = gm_u32(o, KEY("ssm.inner_size"), (uint32_t)(c->nv * c->dv), e)) ||
            (s = gm_arr(o, KEY("attention.recurrent_layers"), GGUF_VT_BOOL, rec, (size_t)c->n_layer, e)) ||
            (s = gm_u32(o, KEY("full_attention_interval"), (uint32_t)c->interval, e)) ||
            (s = gm_u32(o, KEY("rope.dimension_count"), (uint32_t)c->rope_dims, e))) {
            free(rec);
            return s;
        }
        free(rec);
    }
#undef KEY
    return c->type_keys_last ? LILAC_OK : gm_u32(o, "general.quantization_version", 2, e);
}

lilac_status gm_write_type_keys(gm_out *o, uint32_t file_type, lilac_error *err)
{
    lilac_status s = gm_u32(o, "general.quantization_version", 2, err);
    return s ? s : gm_u32(o, "general.file_type", file_type, err);
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

lilac_status gm_write_tokenizer_json(gm_out *o, const char *path, const char *dir, json_t *cfg, json_t *root,
                                     int64_t n_vocab, bool fixed_vocab, lilac_error *err)
{
    lilac_error *e = err;
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
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
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
    if (fixed_vocab && max_id + 1 > n_vocab) {
        s = lilac_fail(e, LILAC_E_ARG, "%s: token id %lld does not fit a vocabulary of %lld", path,
                       (long long)max_id, (long long)n_vocab);
        goto done;
    }
    n = (size_t)(n_vocab > max_id + 1 ? n_vocab : max_id + 1);
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

    if ((s = gm_str(o, "tokenizer.ggml.model", "gpt2", e)) ||
        (s = gm_str(o, "tokenizer.ggml.pre", pre, e)) ||
        (s = gm_str_arr(o, "tokenizer.ggml.tokens", toks, NULL, n, e)) ||
        (s = gm_arr(o, "tokenizer.ggml.token_type", GGUF_VT_I32, types, n, e)))
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
        size_t off = 0;
        for (size_t i = 0; i < nm; i++) {
            json_t *m = json_array_get(jm, i);
            merges[i] = merge_buf + off;
            if (json_is_string(m)) {
                size_t l = json_string_length(m);
                memcpy(merge_buf + off, json_string_value(m), l);
                off += l;
            } else {
                json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
                memcpy(merge_buf + off, json_string_value(a), json_string_length(a));
                off += json_string_length(a);
                merge_buf[off++] = ' ';
                memcpy(merge_buf + off, json_string_value(b), json_string_length(b));
                off += json_string_length(b);
            }
            merge_len[i] = (size_t)(merge_buf + off - merges[i]);
        }
        if ((s = gm_str_arr(o, "tokenizer.ggml.merges", merges, merge_len, nm, e)))
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
            json_t *cv_ = json_object_get(cfg, ck);
            if (!json_is_integer(cv_))
                cv_ = json_object_get(root, ck);
            if (json_is_integer(cv_))
                id = json_integer_value(cv_);
        }
        if (id >= 0 && (size_t)id < n && (s = gm_u32(o, gkeys[k], (uint32_t)id, e)))
            goto done;
    }
    static const char *const adds[3] = {"bos", "eos", "sep"};
    for (int k = 0; k < 3; k++) {
        char ck[32], gk[64];
        snprintf(ck, sizeof ck, "add_%s_token", adds[k]);
        snprintf(gk, sizeof gk, "tokenizer.ggml.add_%s_token", adds[k]);
        json_t *v = json_object_get(ts.tc, ck);
        if (json_is_boolean(v) && (s = gm_bool(o, gk, json_is_true(v), e)))
            goto done;
    }
    const char *tmpl = json_string_value(json_object_get(ts.tc, "chat_template"));
    char *jinja = NULL;
    if (!tmpl) {
        char jp[4200];
        snprintf(jp, sizeof jp, "%s/chat_template.jinja", dir);
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
        s = gm_str(o, "tokenizer.chat_template", tmpl, e);
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