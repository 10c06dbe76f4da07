/* text: the public face of the tokenizer and the chat templates — which
 * tokenizer and template a model carries, and thin wrappers over
 * tokenizer/ and engine/chat.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/chat.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/err.h"

struct lilac_tokenizer {
    tok_tokenizer *tok;
};

static lilac_status wrap(tok_tokenizer *tok, lilac_tokenizer **out, lilac_error *err)
{
    *out = malloc(sizeof **out);
    if (!*out) {
        tok_free(tok);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    (*out)->tok = tok;
    return LILAC_OK;
}

lilac_status lilac_tokenizer_load(const char *path, lilac_tokenizer **out, lilac_error *err)
{
    *out = NULL;
    tok_tokenizer *tok;
    lilac_status s = tok_load(path, &tok, err);
    return s ? s : wrap(tok, out, err);
}

void lilac_tokenizer_free(lilac_tokenizer *t)
{
    if (!t)
        return;
    tok_free(t->tok);
    free(t);
}

lilac_status lilac_model_tokenizer(lilac_model *m, lilac_tokenizer **out, lilac_error *err)
{
    *out = NULL;
    if (!m->tokenizer) {
        tok_tokenizer *tok;
        lilac_status s = m->gguf ? tok_load_gguf(m->gguf, &tok, err) : tok_load(m->path, &tok, err);
        if (s || (s = wrap(tok, &m->tokenizer, err)))
            return s;
    }
    *out = m->tokenizer;
    return LILAC_OK;
}

lilac_status lilac_tokenize(lilac_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                            size_t *n_ids, lilac_error *err)
{
    *ids = NULL;
    *n_ids = 0;
    tok_ids v = {0};
    tok_encode_opts o = {.parse_special = parse_special};
    lilac_status s = tok_encode(t->tok, text, len, &o, &v, err);
    if (s) {
        tok_ids_free(&v);
        return s;
    }
    *ids = v.ids;
    *n_ids = v.n;
    return LILAC_OK;
}

lilac_status lilac_detokenize(const lilac_tokenizer *t, const int32_t *ids, size_t n, char **text, lilac_error *err)
{
    return tok_decode(t->tok, ids, n, false, text, NULL, err);
}

int32_t lilac_tokenizer_n_vocab(const lilac_tokenizer *t) { return tok_n_vocab(t->tok); }
bool lilac_token_is_eog(const lilac_tokenizer *t, int32_t id) { return tok_is_eog(t->tok, id); }

/* internal: the tok_tokenizer behind a public tokenizer (engine/generate.c) */
tok_tokenizer *lilac_tokenizer_tok(lilac_tokenizer *t) { return t->tok; }

static char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && n < (1 << 26) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = 0;
            }
        }
    }
    fclose(f);
    return buf;
}

static char *hf_chat_template(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    char *t = read_text_file(path);
    if (t)
        return t;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    const char *s = json_string_value(json_object_get(cfg, "chat_template"));
    t = s ? strdup(s) : NULL;
    json_decref(cfg);
    return t;
}

const char *lilac_model_chat_template(lilac_model *m)
{
    if (!m->chat_template_loaded) {
        m->chat_template_loaded = true;
        if (m->gguf) {
            if (gguf_find_kv(m->gguf, "tokenizer.chat_template"))
                gguf_get_str(m->gguf, "tokenizer.chat_template", &m->chat_template, NULL);
        } else {
            m->chat_template = hf_chat_template(m->path);
        }
    }
    return m->chat_template;
}

void lilac_model_free_text(lilac_model *m)
{
    lilac_tokenizer_free(m->tokenizer);
    free(m->chat_template);
    m->tokenizer = NULL;
    m->chat_template = NULL;
}

lilac_status lilac_chat_render(const char *template_text, const char *conversation_json,
                               const lilac_chat_opts *opts, char **out, lilac_error *err)
{
    *out = NULL;
    if (!template_text)
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "the model has no chat template (use raw prompts)");
    chat_style style;
    json_t *messages = NULL, *tools = NULL;
    lilac_status s = chat_style_detect(template_text, &style, err);
    if (s || (s = chat_parse_conversation(conversation_json, &messages, &tools, err)))
        return s;
    chat_opts o = {.add_generation_prompt = opts ? opts->add_generation_prompt : true};
    if (opts && opts->thinking >= 0) {
        o.enable_thinking_set = true;
        o.enable_thinking = opts->thinking != 0;
    }
    s = chat_render(style, messages, tools, &o, out, err);
    json_decref(messages);
    json_decref(tools);
    return s;
}
