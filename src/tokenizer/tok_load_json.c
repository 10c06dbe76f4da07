/* tok_load_json: a Hugging Face tokenizer.json holding a byte-level BPE.
 * What is accepted, field by field:
 *   model          type "BPE" (or no type); vocab {token: id}; merges as
 *                  "a b" strings or [a, b] pairs; dropout null/0;
 *                  continuing_subword_prefix and end_of_word_suffix empty;
 *                  byte_fallback false; ignore_merges; unk_token
 *   added_tokens   id, content, special, normalized; lstrip, rstrip and
 *                  single_word must be false
 *   normalizer     null, NFC, or a Sequence of NFC
 *   pre_tokenizer  ByteLevel (add_prefix_space false), or a Sequence of
 *                  Split (Regex or String pattern, behavior Isolated, invert
 *                  false) ending in ByteLevel
 *   decoder        ByteLevel
 *   post_processor, truncation, padding: ignored (no special tokens are
 *                  ever added by tok_encode)
 * Anything else fails with LILAC_E_UNSUPPORTED naming the file and field. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/err.h"

#define FAIL_FORMAT(...) lilac_fail(err, LILAC_E_FORMAT, __VA_ARGS__)
#define FAIL_UNSUP(...) lilac_fail(err, LILAC_E_UNSUPPORTED, __VA_ARGS__)

/* A string value for a message: cut short and without control characters. */
static const char *shown(const char *s, char *buf, size_t cap)
{
    size_t k = 0;
    for (; s[k] && k + 4 < cap; k++)
        buf[k] = (unsigned char)s[k] < 0x20 ? '?' : s[k];
    if (s[k])
        memcpy(buf + k, "...", 3), k += 3;
    buf[k] = 0;
    return buf;
}

/* An optional boolean: absent or null gives def. */
static lilac_status get_bool(const char *path, json_t *obj, const char *key, const char *where, bool def,
                             bool *out, lilac_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return LILAC_OK;
    }
    if (!json_is_boolean(v))
        return FAIL_FORMAT("%s: %s.%s: expected true or false", path, where, key);
    *out = json_is_true(v);
    return LILAC_OK;
}

/* An optional string that must be empty when present. */
static lilac_status need_empty(const char *path, json_t *obj, const char *key, const char *where, lilac_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0))
        return LILAC_OK;
    char b[64];
    if (json_is_string(v))
        return FAIL_UNSUP("%s: %s.%s \"%s\" is not supported (only empty)", path, where, key,
                          shown(json_string_value(v), b, sizeof b));
    return FAIL_FORMAT("%s: %s.%s: expected a string", path, where, key);
}

static const char *type_of(json_t *obj) { return json_string_value(json_object_get(obj, "type")); }

/* ---- model ------------------------------------------------------------- */

static lilac_status load_vocab(tok_tokenizer *t, const char *path, json_t *vocab, lilac_error *err)
{
    if (!json_is_object(vocab))
        return FAIL_FORMAT("%s: model.vocab: missing or not an object", path);
    const char *key;
    json_t *v;
    json_int_t max = -1;
    char b[64];
    json_object_foreach(vocab, key, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= TOK_MAX_ID)
            return FAIL_FORMAT("%s: model.vocab[\"%s\"]: expected an id in 0..%d", path, shown(key, b, sizeof b),
                               TOK_MAX_ID - 1);
        if (json_integer_value(v) > max)
            max = json_integer_value(v);
    }
    lilac_status st = tok_reserve_ids(t, (int32_t)(max + 1), err);
    if (st)
        return st;
    json_object_foreach(vocab, key, v)
    {
        if ((st = tok_set_vocab(t, (int32_t)json_integer_value(v), key, strlen(key), err)))
            return st;
    }
    return LILAC_OK;
}

static lilac_status load_merges(tok_tokenizer *t, const char *path, json_t *merges, lilac_error *err)
{
    if (!json_is_array(merges))
        return FAIL_FORMAT("%s: model.merges: missing or not an array", path);
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m)
    {
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            size_t n = json_string_length(m);
            if (!sp || sp == s || sp == s + n - 1 || strchr(sp + 1, ' ') || strlen(s) != n)
                return FAIL_FORMAT("%s: model.merges[%zu]: expected \"A B\" (two tokens and one space)", path, i);
            a = s, al = (size_t)(sp - s), b = sp + 1, bl = n - al - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), bl = json_string_length(json_array_get(m, 1));
        } else {
            return FAIL_FORMAT("%s: model.merges[%zu]: expected \"A B\" or [\"A\", \"B\"]", path, i);
        }
        bool skipped;
        lilac_status st = tok_add_merge(t, a, al, b, bl, &skipped, err);
        if (st)
            return st;
        if (skipped)
            return FAIL_FORMAT("%s: model.merges[%zu]: a token it names or makes is not in model.vocab", path, i);
    }
    return LILAC_OK;
}

static lilac_status load_model(tok_tokenizer *t, const char *path, json_t *model, lilac_error *err)
{
    char b[64];
    if (!json_is_object(model))
        return FAIL_FORMAT("%s: model: missing or not an object", path);
    json_t *type = json_object_get(model, "type");
    if (type && !json_is_string(type))
        return FAIL_FORMAT("%s: model.type: expected a string", path);
    if (type && strcmp(json_string_value(type), "BPE") != 0)
        return FAIL_UNSUP("%s: model.type \"%s\" is not supported (only \"BPE\")", path,
                          shown(json_string_value(type), b, sizeof b));
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0.0))
        return FAIL_UNSUP("%s: model.dropout is not supported (only null)", path);
    lilac_status st;
    bool fb = false, im = false;
    if ((st = need_empty(path, model, "continuing_subword_prefix", "model", err)) ||
        (st = need_empty(path, model, "end_of_word_suffix", "model", err)) ||
        (st = get_bool(path, model, "byte_fallback", "model", false, &fb, err)) ||
        (st = get_bool(path, model, "ignore_merges", "model", false, &im, err)))
        return st;
    if (fb)
        return FAIL_UNSUP("%s: model.byte_fallback true is not supported", path);
    t->ignore_merges = im;
    if ((st = load_vocab(t, path, json_object_get(model, "vocab"), err)) ||
        (st = load_merges(t, path, json_object_get(model, "merges"), err)))
        return st;
    json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk))
            return FAIL_FORMAT("%s: model.unk_token: expected a string or null", path);
        t->unk_id = tok_strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0)
            return FAIL_FORMAT("%s: model.unk_token \"%s\" is not in model.vocab", path,
                               shown(json_string_value(unk), b, sizeof b));
    }
    return LILAC_OK;
}

/* ---- added tokens ------------------------------------------------------ */

static lilac_status load_added(tok_tokenizer *t, const char *path, json_t *added, lilac_error *err)
{
    if (!added || json_is_null(added))
        return LILAC_OK;
    if (!json_is_array(added))
        return FAIL_FORMAT("%s: added_tokens: expected an array", path);
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a)
    {
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_object(a))
            return FAIL_FORMAT("%s: %s: expected an object", path, where);
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TOK_MAX_ID)
            return FAIL_FORMAT("%s: %s.id: expected an id in 0..%d", path, where, TOK_MAX_ID - 1);
        if (!json_is_string(content))
            return FAIL_FORMAT("%s: %s.content: expected a string", path, where);
        bool special = false, normalized = false, flag = false;
        lilac_status st;
        if ((st = get_bool(path, a, "special", where, false, &special, err)) ||
            (st = get_bool(path, a, "normalized", where, !special, &normalized, err)))
            return st;
        static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++) {
            if ((st = get_bool(path, a, unsupported[k], where, false, &flag, err)))
                return st;
            if (flag)
                return FAIL_UNSUP("%s: %s.%s true is not supported", path, where, unsupported[k]);
        }
        if ((st = tok_add_added(t, (int32_t)json_integer_value(id), json_string_value(content),
                                json_string_length(content), special, normalized, err)))
            return st;
    }
    return LILAC_OK;
}

/* ---- normalizer, pre-tokenizer, decoder -------------------------------- */

static lilac_status load_normalizer(tok_tokenizer *t, const char *path, json_t *n, lilac_error *err)
{
    char b[64];
    t->nfc = false;
    if (!n || json_is_null(n))
        return LILAC_OK;
    const char *type = json_is_object(n) ? type_of(n) : NULL;
    if (!type)
        return FAIL_FORMAT("%s: normalizer: expected null or an object with a \"type\"", path);
    if (strcmp(type, "NFC") == 0) {
        t->nfc = true;
        return LILAC_OK;
    }
    if (strcmp(type, "Sequence") != 0)
        return FAIL_UNSUP("%s: normalizer.type \"%s\" is not supported (only NFC, or a Sequence of NFC)", path,
                          shown(type, b, sizeof b));
    json_t *list = json_object_get(n, "normalizers");
    if (!json_is_array(list))
        return FAIL_FORMAT("%s: normalizer.normalizers: expected an array", path);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *et = json_is_object(e) ? type_of(e) : NULL;
        if (!et)
            return FAIL_FORMAT("%s: normalizer.normalizers[%zu]: expected an object with a \"type\"", path, i);
        if (strcmp(et, "NFC") != 0)
            return FAIL_UNSUP("%s: normalizer.normalizers[%zu].type \"%s\" is not supported (only NFC)", path, i,
                              shown(et, b, sizeof b));
        t->nfc = true;
    }
    return LILAC_OK;
}

static lilac_status load_bytelevel(tok_tokenizer *t, const char *path, json_t *bl, const char *where,
                                   lilac_error *err)
{
    bool aps = false, use_regex = false;
    lilac_status st;
    if ((st = get_bool(path, bl, "add_prefix_space", where, false, &aps, err)) ||
        (st = get_bool(path, bl, "use_regex", where, true, &use_regex, err)))
        return st;
    if (aps)
        return FAIL_UNSUP("%s: %s.add_prefix_space true is not supported", path, where);
    if (use_regex) {
        char w[96];
        snprintf(w, sizeof w, "%s (use_regex)", where);
        return tok_add_split(t, TOK_RE_GPT2, strlen(TOK_RE_GPT2), false, w, err);
    }
    return LILAC_OK;
}

static lilac_status load_split(tok_tokenizer *t, const char *path, json_t *sp, const char *where, lilac_error *err)
{
    char b[64], w[96];
    json_t *pat = json_object_get(sp, "pattern");
    json_t *re = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    json_t *lit = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
    if (!json_is_string(re) && !json_is_string(lit))
        return FAIL_FORMAT("%s: %s.pattern: expected {\"Regex\": \"...\"} or {\"String\": \"...\"}", path, where);
    json_t *beh = json_object_get(sp, "behavior");
    if (!json_is_string(beh))
        return FAIL_FORMAT("%s: %s.behavior: expected a string", path, where);
    if (strcmp(json_string_value(beh), "Isolated") != 0)
        return FAIL_UNSUP("%s: %s.behavior \"%s\" is not supported (only \"Isolated\")", path, where,
                          shown(json_string_value(beh), b, sizeof b));
    bool invert = false;
    lilac_status st = get_bool(path, sp, "invert", where, false, &invert, err);
    if (st)
        return st;
    if (invert)
        return FAIL_UNSUP("%s: %s.invert true is not supported", path, where);
    json_t *p = re ? re : lit;
    snprintf(w, sizeof w, "%s.pattern", where);
    return tok_add_split(t, json_string_value(p), json_string_length(p), !re, w, err);
}

static lilac_status load_pre(tok_tokenizer *t, const char *path, json_t *pre, lilac_error *err)
{
    char b[64];
    if (!pre || json_is_null(pre))
        return FAIL_UNSUP("%s: pre_tokenizer: null is not supported (byte-level BPE needs a ByteLevel one)", path);
    const char *type = json_is_object(pre) ? type_of(pre) : NULL;
    if (!type)
        return FAIL_FORMAT("%s: pre_tokenizer: expected an object with a \"type\"", path);
    if (strcmp(type, "ByteLevel") == 0)
        return load_bytelevel(t, path, pre, "pre_tokenizer", err);
    if (strcmp(type, "Sequence") != 0)
        return FAIL_UNSUP("%s: pre_tokenizer.type \"%s\" is not supported (only ByteLevel, or a Sequence of Split "
                          "and ByteLevel)",
                          path, shown(type, b, sizeof b));
    json_t *list = json_object_get(pre, "pretokenizers");
    if (!json_is_array(list))
        return FAIL_FORMAT("%s: pre_tokenizer.pretokenizers: expected an array", path);
    size_t i, n = json_array_size(list);
    json_t *e;
    bool byte_level = false;
    json_array_foreach(list, i, e)
    {
        char where[64];
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        const char *et = json_is_object(e) ? type_of(e) : NULL;
        if (!et)
            return FAIL_FORMAT("%s: %s: expected an object with a \"type\"", path, where);
        lilac_status st;
        if (strcmp(et, "Split") == 0) {
            if (byte_level)
                return FAIL_UNSUP("%s: %s: a Split after ByteLevel is not supported", path, where);
            st = load_split(t, path, e, where, err);
        } else if (strcmp(et, "ByteLevel") == 0) {
            if (i + 1 != n)
                return FAIL_UNSUP("%s: %s: ByteLevel must come last", path, where);
            byte_level = true;
            st = load_bytelevel(t, path, e, where, err);
        } else {
            return FAIL_UNSUP("%s: %s.type \"%s\" is not supported (only Split and ByteLevel)", path, where,
                              shown(et, b, sizeof b));
        }
        if (st)
            return st;
    }
    if (!byte_level)
        return FAIL_UNSUP("%s: pre_tokenizer: a Sequence without ByteLevel is not supported", path);
    return LILAC_OK;
}

static lilac_status load_decoder(const char *path, json_t *dec, lilac_error *err)
{
    char b[64];
    if (!dec || json_is_null(dec))
        return FAIL_UNSUP("%s: decoder: null is not supported (only ByteLevel)", path);
    const char *type = json_is_object(dec) ? type_of(dec) : NULL;
    if (!type)
        return FAIL_FORMAT("%s: decoder: expected an object with a \"type\"", path);
    if (strcmp(type, "ByteLevel") != 0)
        return FAIL_UNSUP("%s: decoder.type \"%s\" is not supported (only ByteLevel)", path, shown(type, b, sizeof b));
    return LILAC_OK;
}

/* ---- tokenizer_config.json --------------------------------------------- */

static int32_t config_token(const tok_tokenizer *t, json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return -1;
    return tok_token_id(t, json_string_value(v), json_string_length(v));
}

/* eos/bos/pad from a tokenizer_config.json beside path, if there is one. */
static void read_config(tok_tokenizer *t, const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
    size_t n = dl + sizeof "tokenizer_config.json";
    char *p = malloc(n);
    if (!p)
        return;
    memcpy(p, path, dl);
    memcpy(p + dl, "tokenizer_config.json", sizeof "tokenizer_config.json");
    json_error_t je;
    json_t *cfg = json_load_file(p, 0, &je);
    free(p);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return;
    }
    t->eos_id = config_token(t, cfg, "eos_token");
    t->bos_id = config_token(t, cfg, "bos_token");
    t->pad_id = config_token(t, cfg, "pad_token");
    json_decref(cfg);
}

/* ---- the entry point --------------------------------------------------- */

lilac_status tok_load_json(const char *path, tok_tokenizer **out, lilac_error *err)
{
    if (!path || !out)
        return lilac_fail(err, LILAC_E_ARG, "tok_load_json: NULL argument");
    *out = NULL;
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_cannot_open_file)
            return lilac_fail(err, LILAC_E_IO, "%s: cannot open", path);
        return FAIL_FORMAT("%s: invalid JSON at line %d column %d: %s", path, je.line, je.column, je.text);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return FAIL_FORMAT("%s: expected a JSON object at the top level", path);
    }
    tok_tokenizer *t = tok_new(path);
    if (!t) {
        json_decref(root);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    }
    lilac_status st;
    if (!(st = load_model(t, path, json_object_get(root, "model"), err)) &&
        !(st = load_added(t, path, json_object_get(root, "added_tokens"), err)) &&
        !(st = load_normalizer(t, path, json_object_get(root, "normalizer"), err)) &&
        !(st = load_pre(t, path, json_object_get(root, "pre_tokenizer"), err)) &&
        !(st = load_decoder(path, json_object_get(root, "decoder"), err)))
        st = tok_finish(t, err);
    json_decref(root);
    if (st) {
        tok_free(t);
        return st;
    }
    read_config(t, path);
    *out = t;
    return LILAC_OK;
}
