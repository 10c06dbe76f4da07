/* tok_load_gguf: the tokenizer.ggml.* keys of a GGUF file (llama.cpp's
 * "gpt2" byte-level BPE). token_type: 3 (control) -> a special added token,
 * 4 (user defined) -> an added token matched in text, 5 (unused, e.g. the
 * "[PAD2047]" rows that pad a vocabulary to the embedding's size) -> an id
 * with no token (tok_token_str gives NULL, tok_decode nothing, as in
 * llama.cpp), anything else -> the model
 * vocabulary. tok_n_vocab is the number of tokens in the file. The pre-tokenizer comes from a preset name, as in
 * llama.cpp; the text is NFC-normalized as the models' tokenizer.json asks
 * (llama.cpp itself skips that, which only matters for text that is not NFC
 * already). Merges whose parts or result are not in the vocabulary are
 * skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/err.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const struct {
    const char *name, *re;
} presets[] = {
    {"qwen2", TOK_RE_QWEN2},
    {"qwen35", TOK_RE_QWEN35},
};

static const gguf_kv *str_array(const gguf_file *f, const char *key, bool required, lilac_status *st,
                                lilac_error *err)
{
    const char *path = gguf_file_path(f, 0);
    const gguf_kv *kv = gguf_find_kv(f, key);
    *st = LILAC_OK;
    if (!kv) {
        if (required)
            *st = lilac_fail(err, LILAC_E_FORMAT, "%s: no tokenizer: %s is missing", path, key);
        return NULL;
    }
    if (kv->type != GGUF_VT_ARRAY || kv->v.arr.type != GGUF_VT_STRING) {
        *st = lilac_fail(err, LILAC_E_FORMAT, "%s: %s: expected an array of strings", path, key);
        return NULL;
    }
    return kv;
}

static int32_t opt_id(const gguf_file *f, const char *key, int32_t n)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    uint64_t v;
    lilac_error e;
    if (!kv || gguf_get_u64(f, key, &v, &e) != LILAC_OK || v >= (uint64_t)n)
        return -1;
    return (int32_t)v;
}

lilac_status tok_load_gguf(const gguf_file *f, tok_tokenizer **out, lilac_error *err)
{
    if (!f || !out)
        return lilac_fail(err, LILAC_E_ARG, "tok_load_gguf: NULL argument");
    *out = NULL;
    const char *path = gguf_file_path(f, 0);
    char shown[64];

    const gguf_kv *model = gguf_find_kv(f, "tokenizer.ggml.model");
    if (!model)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: no tokenizer: tokenizer.ggml.model is missing", path);
    if (model->type != GGUF_VT_STRING)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tokenizer.ggml.model: expected a string", path);
    snprintf(shown, sizeof shown, "%.*s", (int)(model->v.s.len < 40 ? model->v.s.len : 40), model->v.s.ptr);
    if (model->v.s.len != 4 || memcmp(model->v.s.ptr, "gpt2", 4) != 0)
        return lilac_fail(err, LILAC_E_UNSUPPORTED,
                          "%s: tokenizer.ggml.model \"%s\" is not supported (only \"gpt2\", byte-level BPE)", path,
                          shown);

    const gguf_kv *pre = gguf_find_kv(f, "tokenizer.ggml.pre");
    if (!pre)
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "%s: tokenizer.ggml.pre is missing (supported: qwen2, qwen35)",
                          path);
    if (pre->type != GGUF_VT_STRING)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tokenizer.ggml.pre: expected a string", path);
    int preset = -1;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (pre->v.s.len == strlen(presets[i].name) && memcmp(pre->v.s.ptr, presets[i].name, pre->v.s.len) == 0)
            preset = (int)i;
    snprintf(shown, sizeof shown, "%.*s", (int)(pre->v.s.len < 40 ? pre->v.s.len : 40), pre->v.s.ptr);
    for (char *c = shown; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = '?';
    if (preset < 0)
        return lilac_fail(err, LILAC_E_UNSUPPORTED,
                          "%s: tokenizer.ggml.pre \"%s\" is not a supported pre-tokenizer (supported: qwen2, qwen35)",
                          path, shown);

    lilac_status st;
    const gguf_kv *tokens = str_array(f, "tokenizer.ggml.tokens", true, &st, err);
    if (!tokens)
        return st;
    const gguf_kv *merges = str_array(f, "tokenizer.ggml.merges", true, &st, err);
    if (!merges)
        return st;
    const gguf_kv *types = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_VT_ARRAY || types->v.arr.n != tokens->v.arr.n))
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: tokenizer.ggml.token_type: expected an array of %llu integers (one per token)", path,
                          (unsigned long long)tokens->v.arr.n);
    uint64_t n = tokens->v.arr.n;
    if (n == 0 || n > TOK_MAX_ID)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tokenizer.ggml.tokens: %llu tokens (expected 1..%d)", path,
                          (unsigned long long)n, TOK_MAX_ID);

    tok_tokenizer *t = tok_new(path);
    if (!t)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    snprintf(t->pre_name, sizeof t->pre_name, "%s", presets[preset].name);
    if ((st = tok_reserve_ids(t, (int32_t)n, err)))
        goto fail;
    /* vocabulary first (merges look their parts up), added tokens after */
    for (uint64_t i = 0; i < n; i++) {
        int64_t ty = TT_NORMAL;
        if (types && !gguf_arr_i64(types, i, &ty)) {
            st = lilac_fail(err, LILAC_E_FORMAT, "%s: tokenizer.ggml.token_type: expected integers", path);
            goto fail;
        }
        const gguf_str *s = &tokens->v.arr.strs[i];
        if (ty == TT_CONTROL || ty == TT_USER || ty == TT_UNUSED)
            continue;
        if ((st = tok_set_vocab(t, (int32_t)i, s->ptr, (size_t)s->len, err)))
            goto fail;
    }
    for (uint64_t i = 0; i < merges->v.arr.n; i++) {
        const gguf_str *m = &merges->v.arr.strs[i];
        const char *sp = m->len > 1 ? memchr(m->ptr + 1, ' ', (size_t)m->len - 1) : NULL;
        if (!sp) {
            st = lilac_fail(err, LILAC_E_FORMAT, "%s: tokenizer.ggml.merges[%llu]: expected \"A B\"", path,
                            (unsigned long long)i);
            goto fail;
        }
        size_t al = (size_t)(sp - m->ptr);
        bool skipped;
        if ((st = tok_add_merge(t, m->ptr, al, sp + 1, (size_t)m->len - al - 1, &skipped, err)))
            goto fail;
    }
    for (uint64_t i = 0; types && i < n; i++) {
        int64_t ty = TT_NORMAL;
        gguf_arr_i64(types, i, &ty);
        if (ty != TT_CONTROL && ty != TT_USER)
            continue;
        const gguf_str *s = &tokens->v.arr.strs[i];
        if ((st = tok_add_added(t, (int32_t)i, s->ptr, (size_t)s->len, ty == TT_CONTROL, false, err)))
            goto fail;
    }
    t->nfc = true;
    t->min_ids = (int32_t)n;
    char what[64];
    snprintf(what, sizeof what, "tokenizer.ggml.pre \"%s\"", presets[preset].name);
    if ((st = tok_add_split(t, presets[preset].re, strlen(presets[preset].re), false, what, err)) ||
        (st = tok_finish(t, err)))
        goto fail;
    t->eos_id = opt_id(f, "tokenizer.ggml.eos_token_id", t->n_ids);
    t->bos_id = opt_id(f, "tokenizer.ggml.bos_token_id", t->n_ids);
    t->pad_id = opt_id(f, "tokenizer.ggml.padding_token_id", t->n_ids);
    *out = t;
    return LILAC_OK;
fail:
    tok_free(t);
    return st;
}
