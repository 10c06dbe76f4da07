/* fuzz_api: libFuzzer target for the OpenAI request/response layer of lilac serve (src/server/api.c).
 *
 * The input bytes are a request body, given to both parsers. A success must give a request whose fields keep
 * their documented ranges, whose conversation the chat renderer reads back (and renders, or refuses as a
 * malformed conversation: never as unsupported or as a bug), and whose strings every response builder turns
 * into JSON that parses. A failure must give no request and an error that is one line of UTF-8 with a status
 * and type, whose JSON parses. Whatever the bytes, they are also fed to the builders raw (as ill-formed
 * token texts) and to the bearer check, which must agree with a plain comparison. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "server/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* JSON text that jansson loads (so: valid JSON, valid UTF-8; a NUL byte from the model is "\u0000"). */
static void must_parse(char *js)
{
    if (!js)
        abort();
    json_error_t je;
    json_t *j = json_loads(js, JSON_ALLOW_NUL, &je);
    if (!j)
        abort();
    json_decref(j);
    free(js);
}

static void check_error(const api_error *e)
{
    if (e->status < 400 || e->status > 599 || !e->type || !e->message[0])
        abort();
    if (!memchr(e->message, 0, sizeof e->message) || !memchr(e->param, 0, sizeof e->param))
        abort();
    if (strchr(e->message, '\n'))
        abort();
    json_t *s = json_string(e->message); /* NULL when not UTF-8 */
    if (!s)
        abort();
    json_decref(s);
    must_parse(api_error_json(e));
}

/* Every builder, over texts taken from the request and tokens cut from the raw bytes. */
static void build_all(const char *text, size_t text_len, const char *reason, const api_tool_call *calls, int n_calls,
                      const api_logprob *toks, int n_toks, int v)
{
    api_meta m = {.id = "chatcmpl-fuzz", .model = reason ? reason : "m", .created = 1};
    api_usage u = {1, 2, 3, 4};
    { /* v picks which optional parts are there (one set per input: all four each time halves the speed) */
        api_choice c = {.text = (v & 1) ? text : NULL, .text_len = text_len, .reasoning = reason,
                        .reasoning_len = reason ? strlen(reason) : 0, .tool_calls = calls, .n_tool_calls = n_calls,
                        .role = v & 2, .logprobs = v & 2, .tokens = toks, .n_tokens = n_toks, .text_offset = v,
                        .finish = (api_finish)v};
        must_parse(api_chat_response_json(&m, &c, &u));
        must_parse(api_chat_chunk_json(&m, &c, v & 1));
        must_parse(api_completion_response_json(&m, &c, &u));
        must_parse(api_completion_chunk_json(&m, &c, v & 2));
    }
    must_parse(api_usage_chunk_json(&m, API_CHAT, &u));
    api_model_info mi = {m.model, 5, reason};
    must_parse(api_models_json(&mi, 1));
}

static void check_request(const api_request *r, api_kind kind)
{
    if (r->kind != kind || r->max_tokens < 0 || r->n_stop < 0 || r->n_stop > 4 || r->thinking < -1 ||
        r->thinking > 1)
        abort();
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            abort();
    if (r->logprobs ? (r->top_logprobs < 0 || r->top_logprobs > 20) : r->top_logprobs != 0)
        abort();
    if ((r->tool_choice == API_TOOL_FUNCTION) != (r->tool_choice_name != NULL))
        abort();
    if (kind == API_COMPLETION) {
        if (r->conversation || (r->prompt == NULL) == (r->prompt_ids == NULL) || (r->prompt && strlen(r->prompt) !=
                                                                                      r->prompt_len))
            abort();
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] < 0)
                abort();
        return;
    }
    if (!r->conversation || r->prompt || r->prompt_ids || r->n_messages < 1)
        abort();
    json_t *messages = NULL, *tools = NULL;
    lilac_error err;
    if (chat_parse_conversation(r->conversation, &messages, &tools, &err) != LILAC_OK)
        abort();
    if (json_array_size(messages) != (size_t)r->n_messages || json_array_size(tools) != (size_t)r->n_tools)
        abort();
    for (int style = CHAT_STYLE_QWEN3; style <= CHAT_STYLE_QWEN35; style++) {
        chat_opts o = {.add_generation_prompt = true, .enable_thinking_set = r->thinking >= 0,
                       .enable_thinking = r->thinking == 1};
        char *out = NULL;
        lilac_status st = chat_render((chat_style)style, messages, tools, &o, &out, &err);
        /* what the parser let through may still break a template's rules (a system message after the first,
         * no user turn), but never as unsupported content or an internal error */
        if (st != LILAC_OK && st != LILAC_E_ARG)
            abort();
        if ((st == LILAC_OK) != (out != NULL))
            abort();
        free(out);
    }
    json_decref(messages);
    json_decref(tools);
}

/* The bearer check against a plain, early-exit comparison. */
static void check_bearer(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul)
        return;
    const char *header = (const char *)data, *key = (const char *)nul + 1;
    if (!memchr(key, 0, size - (size_t)(nul - data) - 1))
        return;
    bool want = false;
    const char *h = header;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t k = 0;
    while (k < 6 && h[k] && (h[k] | 0x20) == "bearer"[k])
        k++;
    if (k == 6 && (h[6] == ' ' || h[6] == '\t')) {
        h += 6;
        while (*h == ' ' || *h == '\t')
            h++;
        size_t n = strlen(h);
        while (n && (h[n - 1] == ' ' || h[n - 1] == '\t'))
            n--;
        want = *key && n == strlen(key) && memcmp(h, key, n) == 0;
    }
    if (api_check_bearer(header, key) != want)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy: an overread of the body is an ASan report */
    char *body = malloc(size ? size : 1);
    if (!body)
        return 0;
    if (size)
        memcpy(body, data, size);

    /* raw bytes as up to 8 tokens of up to 16 bytes (tokens are short: long ones only slow the run), with
     * alternatives */
    api_logprob toks[8];
    api_top_logprob tops[8];
    int n_toks = 0;
    for (size_t off = 0; off < size && n_toks < 8; n_toks++) {
        size_t len = 1 + data[off] % 16;
        if (len > size - off)
            len = size - off;
        tops[n_toks] = (api_top_logprob){body + off, len, -(float)n_toks};
        toks[n_toks] = (api_logprob){body + off, len, n_toks == 3 ? -INFINITY : -0.5f, &tops[0], n_toks + 1};
        off += len;
    }
    api_tool_call raw_call = {0, "call_0", "f", NULL};
    int v = (int)(size % 4);
    build_all(body, size, NULL, &raw_call, 1, toks, n_toks, v);

    for (api_kind kind = API_CHAT; kind <= API_COMPLETION; kind++) {
        api_request *r = (api_request *)&r; /* must be overwritten either way */
        api_error e;
        memset(&e, 0x55, sizeof e);
        int rc = kind == API_CHAT ? api_parse_chat(body, size, NULL, &r, &e)
                                  : api_parse_completion(body, size, NULL, &r, &e);
        if (rc != 0) {
            if (rc != -1 || r != NULL)
                abort();
            check_error(&e);
            continue;
        }
        if (!r)
            abort();
        check_request(r, kind);
        api_tool_call calls[4];
        for (int i = 0; i < r->n_stop; i++)
            calls[i] = (api_tool_call){i, r->stop[i], r->stop[i], r->stop[i]};
        const char *text = kind == API_CHAT ? r->conversation : r->prompt ? r->prompt : "";
        build_all(text, strlen(text), r->model, calls, r->n_stop, toks, n_toks, v);
        char *sse = api_sse_data(text);
        if (!sse || strncmp(sse, "data: ", 6) != 0 || strcmp(sse + strlen(sse) - 2, "\n\n") != 0)
            abort();
        free(sse);
        api_request_free(r);
    }
    check_bearer(data, size);
    char id[40];
    uint64_t n = 0;
    memcpy(&n, data, size < 8 ? size : 8);
    api_make_id(id, sizeof id, "cmpl-", n);
    if (strlen(id) != 5 + 24)
        abort();
    free(body);
    return 0;
}
