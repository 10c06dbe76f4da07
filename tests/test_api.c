/* test_api: the OpenAI request/response layer of lilac serve (src/server/api.c).
 *
 * Requests: valid chat and completion bodies parse into the right fields, and the conversation they carry
 * renders through the chat renderer; each class of bad input gets its HTTP status, error type, code and
 * param. Responses: every builder's JSON is parsed back and its fields checked. Plus the bearer check.
 *
 * test_api --write-seeds DIR writes request bodies for fuzz/fuzz_api.c. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "server/api.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------------------------------ */

static api_request *parse_kind(api_kind kind, const char *body, size_t len, const api_limits *lim, api_error *e)
{
    api_request *r = (api_request *)&r; /* must be overwritten either way */
    int rc = kind == API_CHAT ? api_parse_chat(body, len, lim, &r, e) : api_parse_completion(body, len, lim, &r, e);
    CHECKF((rc == 0) == (r != NULL), "rc %d but request %p", rc, (void *)r);
    return rc == 0 ? r : NULL;
}

static api_request *good(api_kind kind, const char *body)
{
    api_error e = {0};
    api_request *r = parse_kind(kind, body, strlen(body), NULL, &e);
    CHECKF(r != NULL, "should parse: %s\n    got %d %s (param '%s'): %s", body, e.status, e.code ? e.code : "null",
           e.param, e.message);
    return r;
}

static bool str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

static bool utf8_ok(const char *s)
{
    /* jansson checks UTF-8 on the way in: a string that loads as a JSON string value is valid */
    json_t *v = json_string(s);
    json_decref(v);
    return v != NULL;
}

/* The error's JSON must say what the struct says. */
static void check_error_json(const api_error *e, const char *what)
{
    char *js = api_error_json(e);
    CHECKF(js != NULL, "%s: api_error_json returned NULL", what);
    json_error_t je;
    json_t *root = js ? json_loads(js, 0, &je) : NULL;
    CHECKF(root != NULL, "%s: error JSON does not parse: %s", what, js ? js : "(null)");
    json_t *err = json_object_get(root, "error");
    CHECKF(json_is_object(err) && json_object_size(root) == 1, "%s: no single \"error\" object", what);
    const char *msg = json_string_value(json_object_get(err, "message"));
    CHECKF(msg && strcmp(msg, e->message) == 0, "%s: message differs", what);
    const char *type = json_string_value(json_object_get(err, "type"));
    CHECKF(type && e->type && strcmp(type, e->type) == 0, "%s: type %s", what, type ? type : "(null)");
    json_t *param = json_object_get(err, "param"), *code = json_object_get(err, "code");
    if (e->param[0])
        CHECKF(json_is_string(param) && strcmp(json_string_value(param), e->param) == 0, "%s: param", what);
    else
        CHECKF(json_is_null(param), "%s: param should be null", what);
    if (e->code)
        CHECKF(json_is_string(code) && strcmp(json_string_value(code), e->code) == 0, "%s: code", what);
    else
        CHECKF(json_is_null(code), "%s: code should be null", what);
    json_decref(root);
    free(js);
}

/* A body that must be refused with this status, code and param (param "" for null); msg_part, if not NULL,
 * must appear in the message. */
static void bad_len(api_kind kind, const char *body, size_t len, const api_limits *lim, int status,
                    const char *code, const char *param, const char *msg_part)
{
    api_error e;
    memset(&e, 0x55, sizeof e); /* garbage in: every field must be written */
    e.message[sizeof e.message - 1] = 0;
    e.param[sizeof e.param - 1] = 0;
    api_request *r = parse_kind(kind, body, len, lim, &e);
    char what[160];
    snprintf(what, sizeof what, "%.*s", len > 120 ? 120 : (int)len, body);
    CHECKF(r == NULL, "should be refused: %s", what);
    api_request_free(r);
    if (r)
        return;
    CHECKF(e.status == status, "%s: status %d, expected %d (%s)", what, e.status, status, e.message);
    CHECKF(e.type && strcmp(e.type, "invalid_request_error") == 0, "%s: type %s", what, e.type ? e.type : "(null)");
    CHECKF(e.code && strcmp(e.code, code) == 0, "%s: code %s, expected %s (%s)", what, e.code ? e.code : "null",
           code, e.message);
    CHECKF(strcmp(e.param, param) == 0, "%s: param '%s', expected '%s' (%s)", what, e.param, param, e.message);
    CHECKF(!msg_part || strstr(e.message, msg_part), "%s: message '%s' lacks '%s'", what, e.message, msg_part);
    CHECKF(e.message[0] && !strchr(e.message, '\n') && utf8_ok(e.message), "%s: message not one line of UTF-8",
           what);
    check_error_json(&e, what);
}

static void bad(api_kind kind, const char *body, int status, const char *code, const char *param,
                const char *msg_part)
{
    bad_len(kind, body, strlen(body), NULL, status, code, param, msg_part);
}

static void bad_chat(const char *body, const char *code, const char *param)
{
    bad(API_CHAT, body, 400, code, param, NULL);
}

static void bad_cmpl(const char *body, const char *code, const char *param)
{
    bad(API_COMPLETION, body, 400, code, param, NULL);
}

/* ---- valid requests ----------------------------------------------------------------------------------- */

static const char FULL_CHAT[] =
    "{\"model\": \"qwen3\", \"user\": \"u1\", \"unknown_field\": {\"x\": [1]}, \"parallel_tool_calls\": true,"
    " \"messages\": ["
    "  {\"role\": \"developer\", \"content\": \"Be brief.\"},"
    "  {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Weather in \"},"
    "                                   {\"type\": \"text\", \"text\": \"Paris?\"}]},"
    "  {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"Call the tool.\","
    "   \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\","
    "                     \"function\": {\"name\": \"get_weather\","
    "                                  \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
    "  {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"18C\"},"
    "  {\"role\": \"user\", \"content\": \"Thanks\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    "   \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    "   \"required\": [\"city\"]}}}],"
    " \"tool_choice\": \"auto\", \"stream\": true, \"stream_options\": {\"include_usage\": true},"
    " \"max_tokens\": 10, \"max_completion_tokens\": 20, \"temperature\": 0.7, \"top_p\": 0.9, \"top_k\": 40,"
    " \"min_p\": 0.05, \"presence_penalty\": -0.5, \"frequency_penalty\": 0.5, \"repeat_penalty\": 1.1,"
    " \"repeat_last_n\": 64, \"seed\": 42, \"stop\": [\"END\", \"\\n\\n\"], \"n\": 1, \"logprobs\": true,"
    " \"top_logprobs\": 5, \"chat_template_kwargs\": {\"enable_thinking\": false}, \"reasoning_effort\": \"high\","
    " \"ignore_eos\": true, \"logit_bias\": {}, \"response_format\": {\"type\": \"text\"}}";

static void test_chat_full(void)
{
    api_request *r = good(API_CHAT, FULL_CHAT);
    if (!r)
        return;
    CHECK(r->kind == API_CHAT);
    CHECK(r->model && strcmp(r->model, "qwen3") == 0);
    CHECK(r->n_messages == 5);
    CHECK(r->n_tools == 1);
    CHECK(r->tool_choice == API_TOOL_AUTO && r->tool_choice_name == NULL);
    CHECK(r->stream && r->include_usage);
    CHECKF(r->max_tokens == 20, "max_completion_tokens wins: %d", r->max_tokens);
    CHECK(r->sampling_set == (API_SET_TEMPERATURE | API_SET_TOP_P | API_SET_TOP_K | API_SET_MIN_P |
                              API_SET_REPEAT_PENALTY | API_SET_PRESENCE_PENALTY | API_SET_FREQUENCY_PENALTY |
                              API_SET_PENALTY_LAST_N | API_SET_SEED));
    CHECK(r->sampling.temperature == 0.7f && r->sampling.top_p == 0.9f && r->sampling.top_k == 40);
    CHECK(r->sampling.min_p == 0.05f && r->sampling.presence_penalty == -0.5f);
    CHECK(r->sampling.frequency_penalty == 0.5f && r->sampling.repeat_penalty == 1.1f);
    CHECK(r->sampling.penalty_last_n == 64 && r->sampling.seed == 42);
    CHECK(r->n_stop == 2 && strcmp(r->stop[0], "END") == 0 && strcmp(r->stop[1], "\n\n") == 0);
    CHECK(r->logprobs && r->top_logprobs == 5);
    CHECKF(r->thinking == 0, "chat_template_kwargs wins over reasoning_effort: %d", r->thinking);
    CHECK(r->ignore_eos);
    CHECK(r->prompt == NULL && r->prompt_ids == NULL);

    /* the conversation: {"messages", "tools"}, normalized */
    json_error_t je;
    json_t *conv = r->conversation ? json_loads(r->conversation, 0, &je) : NULL;
    CHECKF(json_is_object(conv), "conversation: %s", r->conversation ? r->conversation : "(null)");
    json_t *msgs = json_object_get(conv, "messages");
    CHECK(json_array_size(msgs) == 5);
    CHECK(json_array_size(json_object_get(conv, "tools")) == 1);
    const char *want_roles[] = {"system", "user", "assistant", "tool", "user"};
    for (size_t i = 0; i < 5; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
        CHECKF(role && strcmp(role, want_roles[i]) == 0, "message %zu role %s", i, role ? role : "(null)");
    }
    const char *c1 = json_string_value(json_object_get(json_array_get(msgs, 1), "content"));
    CHECKF(c1 && strcmp(c1, "Weather in Paris?") == 0, "text parts joined: %s", c1 ? c1 : "(null)");
    json_t *a = json_array_get(msgs, 2);
    CHECK(json_is_string(json_object_get(a, "content")));
    const char *rc = json_string_value(json_object_get(a, "reasoning_content"));
    CHECK(rc && strcmp(rc, "Call the tool.") == 0);
    json_t *call = json_array_get(json_object_get(a, "tool_calls"), 0);
    json_t *args = json_object_get(json_object_get(call, "function"), "arguments");
    CHECKF(json_is_object(args), "arguments parsed into an object");
    CHECK(str_eq(json_object_get(args, "city"), "Paris"));
    const char *tcid = json_string_value(json_object_get(json_array_get(msgs, 3), "tool_call_id"));
    CHECK(tcid && strcmp(tcid, "call_1") == 0);

    /* and it renders as the chat template would, with both conventions */
    json_t *pm = NULL, *pt = NULL;
    lilac_error err = {0};
    CHECKF(chat_parse_conversation(r->conversation, &pm, &pt, &err) == LILAC_OK, "%s", err.msg);
    for (int style = CHAT_STYLE_QWEN3; pm && style <= CHAT_STYLE_QWEN35; style++) {
        char *out = NULL;
        chat_opts o = {.add_generation_prompt = true, .enable_thinking_set = true, .enable_thinking = false};
        lilac_status st = chat_render((chat_style)style, pm, pt, &o, &out, &err);
        CHECKF(st == LILAC_OK, "style %d: %s", style, err.msg);
        CHECKF(out && strstr(out, "Be brief.") && strstr(out, "Weather in Paris?") && strstr(out, "get_weather") &&
                   strstr(out, "Paris"),
               "style %d rendered: %s", style, out ? out : "(null)");
        free(out);
    }
    json_decref(pm);
    json_decref(pt);
    json_decref(conv);

    /* sampling and generation parameters merged over defaults */
    /* (server defaults written out: lilac_sampler_default_params is not in the fuzz seed writer's build) */
    lilac_sampler_params sp = {.temperature = 0.8f, .top_k = 20, .top_p = 0.95f, .repeat_penalty = 1,
                               .penalty_last_n = 7, .seed = 1};
    api_request_sampling(r, &sp);
    CHECK(sp.temperature == 0.7f && sp.top_k == 40 && sp.seed == 42 && sp.penalty_last_n == 64);
    lilac_gen_params gp = {.max_tokens = 99};
    api_request_gen_params(r, &gp);
    CHECK(gp.max_tokens == 20 && gp.n_stop == 2 && gp.stop && strcmp(gp.stop[1], "\n\n") == 0);
    CHECK(gp.ignore_eos && gp.n_logprobs == 5);
    api_request_free(r);

    /* a minimal request: everything else at its default, and defaults survive the merge */
    r = good(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": null}");
    if (r) {
        CHECK(r->model == NULL && !r->stream && !r->include_usage && r->max_tokens == 0);
        CHECK(r->sampling_set == 0 && r->n_stop == 0 && !r->logprobs && r->thinking == -1 && !r->ignore_eos);
        CHECK(r->n_tools == 0 && r->tool_choice == API_TOOL_AUTO);
        CHECKF(r->conversation && strcmp(r->conversation, "[{\"role\":\"user\",\"content\":\"hi\"}]") == 0,
               "conversation %s", r->conversation ? r->conversation : "(null)");
        lilac_sampler_params d = {.temperature = 0.8f, .top_k = 20, .top_p = 0.95f, .seed = 3}, sp2 = d;
        api_request_sampling(r, &sp2);
        CHECK(memcmp(&d, &sp2, sizeof d) == 0);
        lilac_gen_params g0 = {.max_tokens = 99, .n_logprobs = 3}, g = g0;
        api_request_gen_params(r, &g);
        CHECK(memcmp(&g0, &g, sizeof g) == 0);
    }
    api_request_free(r);
}

static void test_chat_options(void)
{
    static const char msgs[] = "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]";
    static const char tools[] = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}},"
                                " {\"type\": \"function\", \"function\": {\"name\": \"g\"}}]";
    char body[1024];
    api_request *r;

    snprintf(body, sizeof body, "{%s, %s, \"tool_choice\": \"none\"}", msgs, tools);
    if ((r = good(API_CHAT, body))) {
        CHECK(r->tool_choice == API_TOOL_NONE && r->n_tools == 0);
        CHECKF(r->conversation && r->conversation[0] == '[', "tools not rendered: %s", r->conversation);
    }
    api_request_free(r);
    snprintf(body, sizeof body, "{%s, %s, \"tool_choice\": \"required\"}", msgs, tools);
    if ((r = good(API_CHAT, body)))
        CHECK(r->tool_choice == API_TOOL_REQUIRED && r->n_tools == 2 && r->conversation[0] == '{');
    api_request_free(r);
    snprintf(body, sizeof body, "{%s, %s, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
             msgs, tools);
    if ((r = good(API_CHAT, body)))
        CHECK(r->tool_choice == API_TOOL_FUNCTION && r->tool_choice_name && strcmp(r->tool_choice_name, "g") == 0);
    api_request_free(r);
    snprintf(body, sizeof body, "{%s, %s}", msgs, tools);
    if ((r = good(API_CHAT, body)))
        CHECK(r->tool_choice == API_TOOL_AUTO && r->n_tools == 2);
    api_request_free(r);
    snprintf(body, sizeof body, "{%s, \"tools\": [], \"tool_choice\": \"auto\"}", msgs);
    if ((r = good(API_CHAT, body)))
        CHECK(r->n_tools == 0 && r->conversation[0] == '[');
    api_request_free(r);

    /* thinking */
    const struct {
        const char *extra;
        int want;
    } think[] = {
        {"", -1},
        {", \"reasoning_effort\": \"none\"", 0},
        {", \"reasoning_effort\": \"minimal\"", 0},
        {", \"reasoning_effort\": \"low\"", 1},
        {", \"reasoning_effort\": \"medium\"", 1},
        {", \"reasoning_effort\": \"high\"", 1},
        {", \"chat_template_kwargs\": {\"enable_thinking\": true}", 1},
        {", \"chat_template_kwargs\": {\"enable_thinking\": false, \"other\": 1}", 0},
        {", \"chat_template_kwargs\": {}", -1},
        {", \"reasoning_effort\": \"none\", \"chat_template_kwargs\": {\"enable_thinking\": true}", 1},
    };
    for (size_t i = 0; i < sizeof think / sizeof think[0]; i++) {
        snprintf(body, sizeof body, "{%s%s}", msgs, think[i].extra);
        if ((r = good(API_CHAT, body)))
            CHECKF(r->thinking == think[i].want, "%s: thinking %d, expected %d", think[i].extra, r->thinking,
                   think[i].want);
        api_request_free(r);
    }

    /* edges that are allowed */
    snprintf(body, sizeof body,
             "{%s, \"temperature\": 2, \"top_p\": 0, \"min_p\": 1, \"presence_penalty\": -2, \"frequency_penalty\": 2,"
             " \"top_k\": 0, \"seed\": -1, \"stop\": \"x\", \"top_logprobs\": 0, \"max_tokens\": 2147483647,"
             " \"repeat_last_n\": -1}", msgs);
    if ((r = good(API_CHAT, body))) {
        CHECK(r->sampling.temperature == 2 && r->sampling.top_p == 0 && r->sampling.top_k == 0);
        CHECKF(r->sampling.seed == UINT64_MAX, "seed -1 wraps");
        CHECK(r->n_stop == 1 && strcmp(r->stop[0], "x") == 0 && r->max_tokens == 2147483647);
        CHECK(r->sampling.penalty_last_n == -1 && !r->logprobs);
    }
    api_request_free(r);
    /* an assistant may answer with tool calls alone; "reasoning" is taken for reasoning_content; empty
     * arguments are {} */
    if ((r = good(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\","
                            " \"reasoning\": \"r\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\":"
                            " \"\"}}]}, {\"role\": \"tool\", \"content\": [{\"type\": \"text\","
                            " \"text\": \"ok\"}]}]}"))) {
        json_t *c = json_loads(r->conversation, 0, NULL);
        json_t *a = json_array_get(c, 1);
        CHECK(json_is_string(json_object_get(a, "reasoning_content")));
        json_t *fn = json_object_get(json_array_get(json_object_get(a, "tool_calls"), 0), "function");
        CHECK(json_is_object(json_object_get(fn, "arguments")) &&
              json_object_size(json_object_get(fn, "arguments")) == 0);
        CHECK(strcmp(json_string_value(json_object_get(json_array_get(c, 2), "content")), "ok") == 0);
        json_decref(c);
    }
    api_request_free(r);
    /* a surrogate pair escape is a character; the body may use any whitespace */
    if ((r = good(API_CHAT, " \n{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud83d\\ude00 \xc3\xa9\"}]}\r\n"))) {
        json_t *c = json_loads(r->conversation, 0, NULL);
        const char *s = json_string_value(json_object_get(json_array_get(c, 0), "content"));
        CHECK(s && strcmp(s, "\xf0\x9f\x98\x80 \xc3\xa9") == 0);
        json_decref(c);
    }
    api_request_free(r);
}

static void test_completion_valid(void)
{
    api_request *r = good(API_COMPLETION, "{\"model\": \"m\", \"prompt\": \"Once upon\", \"max_tokens\": 16,"
                                          " \"logprobs\": 3, \"echo\": false, \"best_of\": 1, \"suffix\": \"\","
                                          " \"stream\": true, \"stop\": [\"\\n\"], \"temperature\": 0}");
    if (r) {
        CHECK(r->kind == API_COMPLETION && r->conversation == NULL);
        CHECK(r->prompt && strcmp(r->prompt, "Once upon") == 0 && r->prompt_len == 9 && r->prompt_ids == NULL);
        CHECK(r->max_tokens == 16 && r->logprobs && r->top_logprobs == 3 && r->stream);
        CHECK(r->n_stop == 1 && r->sampling_set == API_SET_TEMPERATURE && r->sampling.temperature == 0);
        CHECK(r->thinking == -1);
    }
    api_request_free(r);
    if ((r = good(API_COMPLETION, "{\"prompt\": [\"only\"], \"logprobs\": 0}"))) {
        CHECK(r->prompt && strcmp(r->prompt, "only") == 0 && r->logprobs && r->top_logprobs == 0);
    }
    api_request_free(r);
    if ((r = good(API_COMPLETION, "{\"prompt\": [1, 2, 2147483647]}"))) {
        CHECK(r->prompt == NULL && r->n_prompt_ids == 3 && r->prompt_ids[0] == 1 && r->prompt_ids[2] == 2147483647);
    }
    api_request_free(r);
    if ((r = good(API_COMPLETION, "{\"prompt\": [[5, 6]]}")))
        CHECK(r->n_prompt_ids == 2 && r->prompt_ids[1] == 6);
    api_request_free(r);
    if ((r = good(API_COMPLETION, "{\"prompt\": \"\"}")))
        CHECK(r->prompt && r->prompt_len == 0 && !r->logprobs);
    api_request_free(r);
}

/* ---- refused requests --------------------------------------------------------------------------------- */

#define M1 "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"

static void test_chat_errors(void)
{
    /* not JSON, not an object */
    bad(API_CHAT, "{\"messages\": [", 400, "invalid_json", "", "not valid JSON");
    bad(API_CHAT, "", 400, "invalid_json", "", NULL);
    bad(API_CHAT, "{" M1 "} x", 400, "invalid_json", "", NULL);
    bad(API_CHAT, "{" M1 ", \"n\": 1, \"n\": 1}", 400, "invalid_json", "", "duplicate");
    bad(API_CHAT, "{" M1 ", \"seed\": 99999999999999999999}", 400, "invalid_json", "", NULL);
    bad(API_CHAT, "[{\"role\": \"user\", \"content\": \"hi\"}]", 400, "invalid_type", "", "JSON object");
    bad(API_CHAT, "\"hello\"", 400, "invalid_type", "", NULL);
    bad(API_CHAT, "null", 400, "invalid_type", "", NULL);

    /* UTF-8: raw bytes are checked before JSON; an escaped lone surrogate is jansson's to refuse */
    const struct {
        const char *body;
        const char *code;
    } enc[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}", "invalid_encoding"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xc0\xaf\"}]}", "invalid_encoding"},     /* overlong */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xe0\x80\xaf\"}]}", "invalid_encoding"}, /* overlong */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xed\xa0\x80\"}]}", "invalid_encoding"}, /* surrogate */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xf4\x90\x80\x80\"}]}", "invalid_encoding"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\x80\"}]}", "invalid_encoding"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"ok\"}]}\xe2\x82", "invalid_encoding"}, /* cut */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud800\"}]}", "invalid_json"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\\udc00x\"}]}", "invalid_json"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud800\\u0041\"}]}", "invalid_json"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}", "invalid_json"},
    };
    for (size_t i = 0; i < sizeof enc / sizeof enc[0]; i++)
        bad_len(API_CHAT, enc[i].body, strlen(enc[i].body), NULL, 400, enc[i].code, "", NULL);
    /* a raw NUL byte is well-formed UTF-8; jansson refuses it as JSON */
    static const char nul[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\0b\"}]}";
    bad_len(API_CHAT, nul, sizeof nul - 1, NULL, 400, "invalid_json", "", NULL);
    bad(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}", 400, "invalid_encoding", "",
        "offset 43");

    /* size limits */
    api_limits lim = api_limits_default();
    static const char small[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    lim.max_body_bytes = strlen(small) - 1;
    bad_len(API_CHAT, small, strlen(small), &lim, 413, "request_too_large", "", "limit");
    bad_len(API_COMPLETION, "{\"prompt\": \"0123456789012345678901234567890123456789\"}", 52, &lim, 413,
            "request_too_large", "", NULL);
    lim.max_body_bytes = strlen(small);
    api_error e;
    api_request *r = parse_kind(API_CHAT, small, strlen(small), &lim, &e);
    CHECKF(r != NULL, "a body of exactly the limit parses: %s", e.message);
    api_request_free(r);
    lim = api_limits_default();
    lim.max_messages = 2;
    static const char three[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\","
                                " \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}";
    bad_len(API_CHAT, three, strlen(three), &lim, 400, "array_above_max_length", "messages", NULL);
    lim = api_limits_default();
    lim.max_stop_bytes = 3;
    static const char longstop[] = "{" M1 ", \"stop\": [\"abcd\"]}";
    bad_len(API_CHAT, longstop, strlen(longstop), &lim, 400, "invalid_value", "stop[0]", NULL);
    lim = api_limits_default();
    lim.max_tools = 1;
    static const char two_tools[] = "{" M1 ", \"tools\": [{\"function\": {\"name\": \"a\"}}, {\"function\":"
                                    " {\"name\": \"b\"}}]}";
    bad_len(API_CHAT, two_tools, strlen(two_tools), &lim, 400, "array_above_max_length", "tools", NULL);

    /* messages */
    bad_chat("{}", "missing_required_parameter", "messages");
    bad_chat("{\"messages\": null}", "missing_required_parameter", "messages");
    bad_chat("{\"messages\": {}}", "invalid_type", "messages");
    bad_chat("{\"messages\": []}", "empty_array", "messages");
    bad_chat("{\"messages\": [\"hi\"]}", "invalid_type", "messages[0]");
    bad_chat("{\"messages\": [{\"content\": \"hi\"}]}", "missing_required_parameter", "messages[0].role");
    bad_chat("{\"messages\": [{\"role\": 1, \"content\": \"hi\"}]}", "invalid_type", "messages[0].role");
    bad(API_CHAT,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"robot\", \"content\": \"b\"}]}",
        400, "invalid_value", "messages[1].role", "'robot'");
    bad_chat("{\"messages\": [{\"role\": \"user\"}]}", "missing_required_parameter", "messages[0].content");
    bad_chat("{\"messages\": [{\"role\": \"system\", \"content\": null}]}", "missing_required_parameter",
             "messages[0].content");
    bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "invalid_type", "messages[0].content");
    bad(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                  " {\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}]}]}",
        400, "unsupported_value", "messages[0].content[1].type", "'image_url'");
    bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": [\"a\"]}]}", "invalid_type", "messages[0].content[0]");
    bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"a\"}]}]}", "missing_required_parameter",
             "messages[0].content[0].type");
    bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
             "missing_required_parameter", "messages[0].content[0].text");
    bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": 1}]}]}",
             "invalid_type", "messages[0].content[0].text");
    bad_chat("{\"messages\": [{\"role\": \"assistant\", \"reasoning_content\": 1}]}", "invalid_type",
             "messages[0].reasoning_content");
    bad_chat("{\"messages\": [{\"role\": \"tool\", \"tool_call_id\": 7, \"content\": \"x\"}]}", "invalid_type",
             "messages[0].tool_call_id");

    /* tool calls */
#define ASSIST(calls) "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": " calls "}]}"
    bad_chat(ASSIST("{}"), "invalid_type", "messages[0].tool_calls");
    bad_chat(ASSIST("[1]"), "invalid_type", "messages[0].tool_calls[0]");
    bad_chat(ASSIST("[{\"type\": \"code\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]"), "invalid_value",
             "messages[0].tool_calls[0].type");
    bad_chat(ASSIST("[{\"type\": \"function\"}]"), "missing_required_parameter", "messages[0].tool_calls[0].function");
    bad_chat(ASSIST("[{\"function\": {\"arguments\": \"{}\"}}]"), "missing_required_parameter",
             "messages[0].tool_calls[0].function.name");
    bad_chat(ASSIST("[{\"function\": {\"name\": 3, \"arguments\": \"{}\"}}]"), "invalid_type",
             "messages[0].tool_calls[0].function.name");
    bad_chat(ASSIST("[{\"function\": {\"name\": \"\", \"arguments\": \"{}\"}}]"), "invalid_value",
             "messages[0].tool_calls[0].function.name");
    bad_chat(ASSIST("[{\"function\": {\"name\": \"f\"}}]"), "missing_required_parameter",
             "messages[0].tool_calls[0].function.arguments");
    bad(API_CHAT, ASSIST("[{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \"}}]"), 400,
        "invalid_value", "messages[0].tool_calls[0].function.arguments", "not valid JSON");
    bad_chat(ASSIST("[{\"function\": {\"name\": \"f\", \"arguments\": \"[1]\"}}]"), "invalid_value",
             "messages[0].tool_calls[0].function.arguments");
    bad_chat(ASSIST("[{\"function\": {\"name\": \"f\", \"arguments\": 1}}]"), "invalid_type",
             "messages[0].tool_calls[0].function.arguments");
#undef ASSIST

    /* tools and tool_choice */
    bad_chat("{" M1 ", \"tools\": {}}", "invalid_type", "tools");
    bad_chat("{" M1 ", \"tools\": [1]}", "invalid_type", "tools[0]");
    bad_chat("{" M1 ", \"tools\": [{\"type\": \"retrieval\"}]}", "invalid_value", "tools[0].type");
    bad_chat("{" M1 ", \"tools\": [{\"type\": \"function\"}]}", "missing_required_parameter", "tools[0].function");
    bad_chat("{" M1 ", \"tools\": [{\"function\": {}}]}", "missing_required_parameter", "tools[0].function.name");
    bad_chat("{" M1 ", \"tools\": [{\"function\": {\"name\": \"f\", \"parameters\": []}}]}", "invalid_type",
             "tools[0].function.parameters");
    bad_chat("{" M1 ", \"tools\": [{\"function\": {\"name\": \"f\", \"description\": 1}}]}", "invalid_type",
             "tools[0].function.description");
    bad_chat("{" M1 ", \"tool_choice\": \"sometimes\"}", "invalid_value", "tool_choice");
    bad_chat("{" M1 ", \"tool_choice\": 1}", "invalid_type", "tool_choice");
    bad_chat("{" M1 ", \"tool_choice\": \"required\"}", "invalid_value", "tool_choice");
    bad_chat("{" M1 ", \"tools\": [{\"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\","
             " \"function\": {\"name\": \"g\"}}}", "invalid_value", "tool_choice.function.name");
    bad_chat("{" M1 ", \"tools\": [{\"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\"}}",
             "missing_required_parameter", "tool_choice.function");

    /* wrong types */
    const struct {
        const char *field;
        const char *value;
    } types[] = {
        {"model", "1"},          {"stream", "\"yes\""},        {"stream_options", "true"},
        {"temperature", "\"hot\""}, {"top_p", "[]"},           {"top_k", "1.5"},
        {"min_p", "{}"},          {"presence_penalty", "true"}, {"frequency_penalty", "\"0\""},
        {"repeat_penalty", "\"1\""}, {"repeat_last_n", "1.0"},  {"seed", "\"1\""},
        {"max_tokens", "1.5"},    {"max_completion_tokens", "\"9\""}, {"n", "true"},
        {"stop", "5"},            {"logprobs", "1"},            {"top_logprobs", "\"2\""},
        {"ignore_eos", "0"},      {"chat_template_kwargs", "[]"}, {"reasoning_effort", "1"},
        {"logit_bias", "[]"},     {"response_format", "\"json\""},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{" M1 ", \"%s\": %s}", types[i].field, types[i].value);
        bad(API_CHAT, body, 400, "invalid_type", types[i].field, "Invalid type");
    }
    bad_chat("{" M1 ", \"stream_options\": {\"include_usage\": 1}}", "invalid_type", "stream_options.include_usage");
    bad_chat("{" M1 ", \"chat_template_kwargs\": {\"enable_thinking\": \"yes\"}}", "invalid_type",
             "chat_template_kwargs.enable_thinking");
    bad_chat("{" M1 ", \"stop\": [\"a\", 1]}", "invalid_type", "stop[1]");

    /* out of range */
    const struct {
        const char *field;
        const char *value;
    } range[] = {
        {"temperature", "2.5"}, {"temperature", "-0.1"}, {"top_p", "1.5"},         {"top_p", "-1"},
        {"min_p", "1.01"},      {"top_k", "-1"},         {"presence_penalty", "3"}, {"frequency_penalty", "-2.5"},
        {"repeat_penalty", "0"}, {"repeat_penalty", "-1"}, {"repeat_penalty", "101"}, {"repeat_last_n", "-2"},
        {"max_tokens", "0"},    {"max_tokens", "-5"},    {"max_tokens", "2147483648"}, {"max_completion_tokens", "0"},
        {"top_logprobs", "21"}, {"top_logprobs", "-1"},  {"n", "0"},               {"reasoning_effort", "\"max\""},
    };
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{" M1 ", \"logprobs\": true, \"%s\": %s}", range[i].field, range[i].value);
        bad(API_CHAT, body, 400, "invalid_value", range[i].field, NULL);
    }
    bad(API_CHAT, "{" M1 ", \"temperature\": 3}", 400, "invalid_value", "temperature", "between 0 and 2");
    bad(API_CHAT, "{" M1 ", \"top_logprobs\": 2}", 400, "invalid_value", "top_logprobs", "logprobs");
    bad(API_CHAT, "{" M1 ", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 400, "array_above_max_length", "stop",
        "at most 4");
    bad_chat("{" M1 ", \"stop\": [\"a\", \"\"]}", "invalid_value", "stop[1]");
    bad_chat("{" M1 ", \"stop\": \"\"}", "invalid_value", "stop");

    /* well-formed, not supported */
    bad(API_CHAT, "{" M1 ", \"n\": 2}", 400, "unsupported_value", "n", "n must be 1");
    bad_chat("{" M1 ", \"logit_bias\": {\"50256\": -100}}", "unsupported_value", "logit_bias");
    bad_chat("{" M1 ", \"response_format\": {\"type\": \"json_object\"}}", "unsupported_value", "response_format.type");
    bad_chat("{" M1 ", \"response_format\": {}}", "missing_required_parameter", "response_format.type");

    /* a long, non-ASCII value quoted in a message is cut at a character boundary */
    char body[2048];
    int o = snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"");
    for (int i = 0; i < 300; i++)
        o += snprintf(body + o, sizeof body - o, "\xc3\xa9");
    snprintf(body + o, sizeof body - o, "\", \"content\": \"x\"}]}");
    bad(API_CHAT, body, 400, "invalid_value", "messages[0].role", "...");
}

static void test_completion_errors(void)
{
    bad_cmpl("{}", "missing_required_parameter", "prompt");
    bad_cmpl("{\"prompt\": null}", "missing_required_parameter", "prompt");
    bad_cmpl("{\"prompt\": 5}", "invalid_type", "prompt");
    bad_cmpl("{\"prompt\": {}}", "invalid_type", "prompt");
    bad_cmpl("{\"prompt\": []}", "empty_array", "prompt");
    bad(API_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", 400, "unsupported_value", "prompt", "one prompt");
    bad_cmpl("{\"prompt\": [true]}", "invalid_type", "prompt[0]");
    bad_cmpl("{\"prompt\": [-1]}", "invalid_value", "prompt[0]");
    bad_cmpl("{\"prompt\": [1, 2147483648]}", "invalid_value", "prompt[1]");
    bad_cmpl("{\"prompt\": [1, \"a\"]}", "invalid_type", "prompt[1]");
    bad_cmpl("{\"prompt\": [[1, 2], [3]]}", "unsupported_value", "prompt");
    bad_cmpl("{\"prompt\": [[1, 2.5]]}", "invalid_type", "prompt[0][1]");
    bad_cmpl("{\"prompt\": \"x\", \"logprobs\": 6}", "invalid_value", "logprobs");
    bad_cmpl("{\"prompt\": \"x\", \"logprobs\": true}", "invalid_type", "logprobs");
    bad_cmpl("{\"prompt\": \"x\", \"echo\": true}", "unsupported_value", "echo");
    bad_cmpl("{\"prompt\": \"x\", \"best_of\": 2}", "unsupported_value", "best_of");
    bad_cmpl("{\"prompt\": \"x\", \"suffix\": \"end\"}", "unsupported_value", "suffix");
    bad_cmpl("{\"prompt\": \"x\", \"n\": 3}", "unsupported_value", "n");
    bad_cmpl("{\"prompt\": \"x\", \"max_tokens\": 0}", "invalid_value", "max_tokens");
    bad_cmpl("{\"prompt\": \"x\", \"stop\": [\"1\", \"2\", \"3\", \"4\", \"5\"]}", "array_above_max_length", "stop");
    bad_cmpl("[\"x\"]", "invalid_type", "");
    api_limits lim = api_limits_default();
    lim.max_prompt_ids = 2;
    static const char three_ids[] = "{\"prompt\": [1, 2, 3]}";
    bad_len(API_COMPLETION, three_ids, strlen(three_ids), &lim, 400, "array_above_max_length", "prompt", NULL);
    /* a chat body is not a completion and the other way round */
    bad_cmpl("{" M1 "}", "missing_required_parameter", "prompt");
    bad_chat("{\"prompt\": \"x\"}", "missing_required_parameter", "messages");
}

/* ---- responses ---------------------------------------------------------------------------------------- */

static json_t *load(const char *js, const char *what)
{
    json_error_t je;
    json_t *j = js ? json_loads(js, JSON_REJECT_DUPLICATES, &je) : NULL;
    CHECKF(j != NULL, "%s: does not parse: %s (%s)", what, js ? js : "(null)", js ? je.text : "");
    return j;
}

static json_t *path(json_t *v, const char *p)
{
    /* "a.b.0.c": members and array indices */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", p);
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, "."))
        v = (*tok >= '0' && *tok <= '9') ? json_array_get(v, (size_t)atoi(tok)) : json_object_get(v, tok);
    return v;
}

static int64_t ival(json_t *root, const char *p)
{
    json_t *v = path(root, p);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : INT64_MIN;
}

static void test_error_json(void)
{
    api_error e;
    api_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                  "This model's maximum context length is %d tokens.", 4096);
    char *js = api_error_json(&e);
    json_t *j = load(js, "error");
    CHECK(str_eq(path(j, "error.message"), "This model's maximum context length is 4096 tokens."));
    CHECK(str_eq(path(j, "error.type"), "invalid_request_error"));
    CHECK(str_eq(path(j, "error.param"), "messages") && str_eq(path(j, "error.code"), "context_length_exceeded"));
    json_decref(j);
    free(js);
    /* null param and code; control characters and a cut character do not break the JSON */
    CHECK(api_error_set(&e, 503, "server_error", NULL, NULL, "busy\n\"now\" \xc3") == -1);
    CHECKF(e.status == 503 && strcmp(e.message, "busy?\"now\" ?") == 0, "%d '%s'", e.status, e.message);
    js = api_error_json(&e);
    j = load(js, "error 2");
    CHECK(json_is_null(path(j, "error.param")) && json_is_null(path(j, "error.code")));
    CHECK(str_eq(path(j, "error.message"), "busy?\"now\" ?") && str_eq(path(j, "error.type"), "server_error"));
    json_decref(j);
    free(js);
}

static void test_chat_response(void)
{
    api_meta m = {.id = "chatcmpl-abc", .model = "qwen3", .created = 1700000000};
    api_top_logprob tops[] = {{"Hi", 2, -0.25f}, {"Hey", 3, -1.5f}};
    api_logprob toks[] = {
        {"Hi", 2, -0.25f, tops, 2},
        {"\xe2\x82", 2, -INFINITY, NULL, 0}, /* a token ending inside a character */
    };
    api_tool_call calls[] = {{0, "call_1", "get_weather", "{\"city\": \"Paris\"}"}, {1, "call_2", "f", "{}"}};
    api_choice c = {.text = "Hello", .text_len = 5, .reasoning = "Let me think", .reasoning_len = 12,
                    .tool_calls = calls, .n_tool_calls = 2, .logprobs = true, .tokens = toks, .n_tokens = 2,
                    .finish = API_FINISH_TOOL_CALLS};
    api_usage u = {.prompt_tokens = 10, .completion_tokens = 5, .cached_tokens = 3, .reasoning_tokens = 2};
    char *js = api_chat_response_json(&m, &c, &u);
    json_t *j = load(js, "chat response");
    CHECK(str_eq(path(j, "id"), "chatcmpl-abc") && str_eq(path(j, "object"), "chat.completion"));
    CHECK(ival(j, "created") == 1700000000 && str_eq(path(j, "model"), "qwen3"));
    CHECK(json_array_size(path(j, "choices")) == 1 && ival(j, "choices.0.index") == 0);
    CHECK(str_eq(path(j, "choices.0.message.role"), "assistant"));
    CHECK(str_eq(path(j, "choices.0.message.content"), "Hello"));
    CHECK(str_eq(path(j, "choices.0.message.reasoning_content"), "Let me think"));
    CHECK(json_array_size(path(j, "choices.0.message.tool_calls")) == 2);
    CHECK(str_eq(path(j, "choices.0.message.tool_calls.0.id"), "call_1"));
    CHECK(str_eq(path(j, "choices.0.message.tool_calls.0.type"), "function"));
    CHECK(str_eq(path(j, "choices.0.message.tool_calls.0.function.name"), "get_weather"));
    CHECK(str_eq(path(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"city\": \"Paris\"}"));
    CHECK(ival(j, "choices.0.message.tool_calls.1.index") == 1);
    CHECK(str_eq(path(j, "choices.0.finish_reason"), "tool_calls"));
    CHECK(json_array_size(path(j, "choices.0.logprobs.content")) == 2);
    CHECK(str_eq(path(j, "choices.0.logprobs.content.0.token"), "Hi"));
    CHECK(json_real_value(path(j, "choices.0.logprobs.content.0.logprob")) == -0.25);
    CHECK(ival(j, "choices.0.logprobs.content.0.bytes.1") == 'i');
    CHECK(json_array_size(path(j, "choices.0.logprobs.content.0.top_logprobs")) == 2);
    CHECK(str_eq(path(j, "choices.0.logprobs.content.0.top_logprobs.1.token"), "Hey"));
    CHECK(json_real_value(path(j, "choices.0.logprobs.content.0.top_logprobs.1.logprob")) == -1.5);
    CHECK(json_array_size(path(j, "choices.0.logprobs.content.0.top_logprobs.1.bytes")) == 3);
    CHECKF(str_eq(path(j, "choices.0.logprobs.content.1.token"), "\xef\xbf\xbd\xef\xbf\xbd"),
           "ill-formed bytes as U+FFFD");
    CHECK(ival(j, "choices.0.logprobs.content.1.bytes.0") == 0xe2 &&
          ival(j, "choices.0.logprobs.content.1.bytes.1") == 0x82);
    CHECK(json_real_value(path(j, "choices.0.logprobs.content.1.logprob")) == -9999.0);
    CHECK(ival(j, "usage.prompt_tokens") == 10 && ival(j, "usage.completion_tokens") == 5);
    CHECK(ival(j, "usage.total_tokens") == 15 && ival(j, "usage.prompt_tokens_details.cached_tokens") == 3);
    CHECK(ival(j, "usage.completion_tokens_details.reasoning_tokens") == 2);
    json_decref(j);
    free(js);

    /* a tool-call-only answer: content null, no reasoning, no logprobs */
    api_choice c2 = {.tool_calls = calls, .n_tool_calls = 1, .reasoning = "", .finish = API_FINISH_STOP};
    js = api_chat_response_json(&m, &c2, &u);
    j = load(js, "chat response 2");
    json_t *msg = path(j, "choices.0.message");
    CHECK(json_is_null(json_object_get(msg, "content")) && json_object_get(msg, "content"));
    CHECK(!json_object_get(msg, "reasoning_content"));
    CHECK(json_is_null(path(j, "choices.0.logprobs")) && str_eq(path(j, "choices.0.finish_reason"), "stop"));
    json_decref(j);
    free(js);
    api_choice c3 = {.text = "x", .text_len = 1, .finish = API_FINISH_LENGTH};
    js = api_chat_response_json(&m, &c3, NULL);
    j = load(js, "chat response 3");
    CHECK(!path(j, "choices.0.message.tool_calls") && str_eq(path(j, "choices.0.finish_reason"), "length"));
    CHECK(ival(j, "usage.total_tokens") == 0);
    json_decref(j);
    free(js);
}

static void test_chat_chunks(void)
{
    api_meta m = {.id = "chatcmpl-s", .model = "qwen3", .created = 5};
    /* first chunk: the role, no content yet */
    api_choice c = {.role = true};
    char *js = api_chat_chunk_json(&m, &c, true);
    json_t *j = load(js, "chunk 1");
    CHECK(str_eq(path(j, "object"), "chat.completion.chunk") && str_eq(path(j, "id"), "chatcmpl-s"));
    json_t *delta = path(j, "choices.0.delta");
    CHECK(str_eq(json_object_get(delta, "role"), "assistant") && json_object_size(delta) == 1);
    CHECK(json_is_null(path(j, "choices.0.finish_reason")) && path(j, "choices.0.finish_reason"));
    CHECK(json_is_null(path(j, "choices.0.logprobs")));
    CHECK(json_is_null(path(j, "usage")) && path(j, "usage"));
    json_decref(j);
    free(js);
    /* content and reasoning pieces, with logprobs; no "usage" without include_usage */
    api_logprob t = {"lo", 2, -0.5f, NULL, 0};
    api_choice c2 = {.text = "lo", .text_len = 2, .reasoning = "hm", .reasoning_len = 2, .logprobs = true,
                     .tokens = &t, .n_tokens = 1};
    js = api_chat_chunk_json(&m, &c2, false);
    j = load(js, "chunk 2");
    CHECK(str_eq(path(j, "choices.0.delta.content"), "lo") &&
          str_eq(path(j, "choices.0.delta.reasoning_content"), "hm"));
    CHECK(!path(j, "choices.0.delta.role") && !path(j, "usage"));
    CHECK(str_eq(path(j, "choices.0.logprobs.content.0.token"), "lo"));
    CHECK(json_array_size(path(j, "choices.0.logprobs.content.0.top_logprobs")) == 0);
    json_decref(j);
    free(js);
    /* tool call deltas: the first carries id, type and name; the next only arguments */
    api_tool_call first = {0, "call_9", "f", ""}, next = {0, NULL, NULL, "{\"a\":"};
    api_choice c3 = {.tool_calls = &first, .n_tool_calls = 1};
    js = api_chat_chunk_json(&m, &c3, false);
    j = load(js, "chunk 3");
    json_t *tc = path(j, "choices.0.delta.tool_calls.0");
    CHECK(ival(tc, "index") == 0 && str_eq(path(tc, "id"), "call_9") && str_eq(path(tc, "type"), "function"));
    CHECK(str_eq(path(tc, "function.name"), "f") && str_eq(path(tc, "function.arguments"), ""));
    CHECK(!path(j, "choices.0.delta.content"));
    json_decref(j);
    free(js);
    c3.tool_calls = &next;
    js = api_chat_chunk_json(&m, &c3, false);
    j = load(js, "chunk 4");
    tc = path(j, "choices.0.delta.tool_calls.0");
    CHECK(ival(tc, "index") == 0 && !path(tc, "id") && !path(tc, "type") && !path(tc, "function.name"));
    CHECK(str_eq(path(tc, "function.arguments"), "{\"a\":"));
    json_decref(j);
    free(js);
    /* the last chunk: an empty delta and the reason */
    api_choice c4 = {.finish = API_FINISH_STOP};
    js = api_chat_chunk_json(&m, &c4, false);
    j = load(js, "chunk 5");
    CHECK(json_object_size(path(j, "choices.0.delta")) == 0 && str_eq(path(j, "choices.0.finish_reason"), "stop"));
    json_decref(j);
    free(js);
    /* the usage chunk */
    api_usage u = {7, 3, 0, 0};
    js = api_usage_chunk_json(&m, API_CHAT, &u);
    j = load(js, "usage chunk");
    CHECK(str_eq(path(j, "object"), "chat.completion.chunk") && json_is_array(path(j, "choices")) &&
          json_array_size(path(j, "choices")) == 0);
    CHECK(ival(j, "usage.total_tokens") == 10 && ival(j, "usage.prompt_tokens_details.cached_tokens") == 0);
    json_decref(j);
    free(js);
    js = api_usage_chunk_json(&m, API_COMPLETION, &u);
    j = load(js, "usage chunk 2");
    CHECK(str_eq(path(j, "object"), "text_completion") && ival(j, "usage.completion_tokens") == 3);
    CHECK(!path(j, "usage.completion_tokens_details"));
    json_decref(j);
    free(js);

    /* SSE framing */
    char *ev = api_sse_data("{\"a\":1}");
    CHECK(ev && strcmp(ev, "data: {\"a\":1}\n\n") == 0);
    free(ev);
    CHECK(strcmp(API_SSE_DONE, "data: [DONE]\n\n") == 0);
}

static void test_completion_response(void)
{
    api_meta m = {.id = "cmpl-1", .model = "qwen3", .created = 9};
    api_top_logprob t0[] = {{"H\xc3\xa9", 3, -0.1f}, {"Ha", 2, -2.0f}, {"H\xc3\xa9", 3, -3.0f}};
    api_logprob toks[] = {{"H\xc3\xa9", 3, -0.1f, t0, 3}, {"llo", 3, -0.2f, NULL, 0}};
    api_choice c = {.text = "H\xc3\xa9llo", .text_len = 6, .logprobs = true, .tokens = toks, .n_tokens = 2,
                    .text_offset = 4, .finish = API_FINISH_LENGTH};
    api_usage u = {3, 2, 1, 0};
    char *js = api_completion_response_json(&m, &c, &u);
    json_t *j = load(js, "completion");
    CHECK(str_eq(path(j, "object"), "text_completion") && str_eq(path(j, "id"), "cmpl-1"));
    CHECK(str_eq(path(j, "choices.0.text"), "H\xc3\xa9llo") && ival(j, "choices.0.index") == 0);
    CHECK(str_eq(path(j, "choices.0.finish_reason"), "length"));
    CHECK(str_eq(path(j, "choices.0.logprobs.tokens.1"), "llo"));
    CHECK(fabs(json_real_value(path(j, "choices.0.logprobs.token_logprobs.0")) + 0.1) < 1e-6);
    CHECKF(ival(j, "choices.0.logprobs.text_offset.0") == 4 && ival(j, "choices.0.logprobs.text_offset.1") == 6,
           "offsets count characters from text_offset");
    json_t *top0 = path(j, "choices.0.logprobs.top_logprobs.0");
    CHECKF(json_object_size(top0) == 2, "duplicate texts collapse, the likelier kept");
    CHECK(fabs(json_real_value(json_object_get(top0, "H\xc3\xa9")) + 0.1) < 1e-6);
    CHECK(json_object_size(path(j, "choices.0.logprobs.top_logprobs.1")) == 0);
    CHECK(ival(j, "usage.total_tokens") == 5 && ival(j, "usage.prompt_tokens_details.cached_tokens") == 1);
    json_decref(j);
    free(js);
    api_choice c2 = {.text = "x", .text_len = 1};
    js = api_completion_chunk_json(&m, &c2, true);
    j = load(js, "completion chunk");
    CHECK(str_eq(path(j, "object"), "text_completion") && str_eq(path(j, "choices.0.text"), "x"));
    CHECK(json_is_null(path(j, "choices.0.finish_reason")) && json_is_null(path(j, "choices.0.logprobs")));
    CHECK(json_is_null(path(j, "usage")) && path(j, "usage"));
    json_decref(j);
    free(js);
    api_choice c3 = {.finish = API_FINISH_STOP};
    js = api_completion_chunk_json(&m, &c3, false);
    j = load(js, "completion chunk 2");
    CHECK(str_eq(path(j, "choices.0.text"), "") && !path(j, "usage"));
    json_decref(j);
    free(js);
}

static void test_misc(void)
{
    api_model_info models[] = {{"qwen3-30b", 1700000000, NULL}, {"other", 1, "me"}};
    char *js = api_models_json(models, 2);
    json_t *j = load(js, "models");
    CHECK(str_eq(path(j, "object"), "list") && json_array_size(path(j, "data")) == 2);
    CHECK(str_eq(path(j, "data.0.id"), "qwen3-30b") && str_eq(path(j, "data.0.object"), "model"));
    CHECK(ival(j, "data.0.created") == 1700000000 && str_eq(path(j, "data.0.owned_by"), "lilac"));
    CHECK(str_eq(path(j, "data.1.owned_by"), "me"));
    json_decref(j);
    free(js);
    js = api_models_json(NULL, 0);
    j = load(js, "no models");
    CHECK(json_array_size(path(j, "data")) == 0 && json_is_array(path(j, "data")));
    json_decref(j);
    free(js);

    char a[64], b[64], small[12];
    api_make_id(a, sizeof a, "chatcmpl-", 1);
    api_make_id(b, sizeof b, "chatcmpl-", 2);
    CHECK(strncmp(a, "chatcmpl-", 9) == 0 && strlen(a) == 9 + 24 && strspn(a + 9, "0123456789abcdef") == 24);
    CHECK(strcmp(a, b) != 0);
    api_make_id(b, sizeof b, "chatcmpl-", 1);
    CHECK(strcmp(a, b) == 0);
    api_make_id(small, sizeof small, "cmpl-", 1);
    CHECK(strlen(small) == sizeof small - 1);

    CHECK(api_finish_from(LILAC_FINISH_STOP, false) == API_FINISH_STOP);
    CHECK(api_finish_from(LILAC_FINISH_STOP, true) == API_FINISH_TOOL_CALLS);
    CHECK(api_finish_from(LILAC_FINISH_LENGTH, true) == API_FINISH_LENGTH);
    CHECK(api_finish_from(LILAC_FINISH_CONTEXT, false) == API_FINISH_LENGTH);
    CHECK(api_finish_from(LILAC_FINISH_CANCELLED, false) == API_FINISH_STOP);
    CHECK(api_utf8_chars("H\xc3\xa9\xf0\x9f\x98\x80", 7) == 3 && api_utf8_chars("", 0) == 0);

    api_limits d = api_limits_default();
    CHECK(d.max_body_bytes > 0 && d.max_messages > 0 && d.max_stop == 4 && d.max_tools > 0);
    api_request_free(NULL);
}

static void test_bearer(void)
{
    const char *key = "sk-secret-1";
    const char *yes[] = {"Bearer sk-secret-1", "bearer sk-secret-1", "BEARER   sk-secret-1  ", "  Bearer\tsk-secret-1"};
    const char *no[] = {"Bearer sk-secret-2", "Bearer sk-secret-", "Bearer sk-secret-12", "Bearer sk-secret-1x",
                        "Basic sk-secret-1", "Bearersk-secret-1", "sk-secret-1", "Bearer ", "Bearer", "",
                        "Bearer sk-secret -1", "Bearer Sk-secret-1", "Bearer xsk-secret-1"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        CHECKF(api_check_bearer(yes[i], key), "should pass: '%s'", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECKF(!api_check_bearer(no[i], key), "should fail: '%s'", no[i]);
    CHECK(!api_check_bearer(NULL, key));
    CHECK(!api_check_bearer("Bearer x", NULL));
    CHECK(!api_check_bearer("Bearer ", ""));
    CHECK(api_check_bearer("Bearer x", "x"));
    /* bytes that differ in one bit only, the top one included */
    CHECK(!api_check_bearer("Bearer k\x69", "k\xe9") && !api_check_bearer("Bearer k\xe9", "k\x69"));
    CHECK(!api_check_bearer("Bearer kb", "kc") && api_check_bearer("Bearer k\xe9", "k\xe9"));
}

/* ---- seeds for fuzz/fuzz_api.c ------------------------------------------------------------------------ */

static int write_seeds(const char *dir)
{
    const char *seeds[] = {
        FULL_CHAT,
        "{" M1 "}",
        "{" M1 ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\":"
        " \"object\", \"properties\": {\"x\": {\"type\": \"number\", \"minimum\": 0.5}}}}}], \"tool_choice\":"
        " {\"type\": \"function\", \"function\": {\"name\": \"f\"}}}",
        "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": [{\"type\":"
        " \"text\", \"text\": \"a\"}]}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c\","
        " \"type\": \"function\", \"function\": {\"name\": \"f\","
        " \"arguments\": \"{\\\"x\\\": [1, {\\\"y\\\": null}]}\"}}]},"
        " {\"role\": \"tool\", \"content\": \"r\"}], \"reasoning_effort\": \"low\", \"stop\": \"\\n\"}",
        "{\"prompt\": \"Once upon a time\", \"max_tokens\": 5, \"logprobs\": 2, \"stream\": true,"
        " \"stream_options\": {\"include_usage\": true}}",
        "{\"prompt\": [[1, 2, 3]], \"seed\": -7, \"temperature\": 0.0, \"top_k\": 1}",
        "{\"prompt\": [\"x\"], \"echo\": false, \"best_of\": 1}",
        "{\"messages\": [{\"role\": \"robot\", \"content\": \"\\ud83d\\ude00\"}], \"n\": 2}",
        "{\"messages\": [], \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}",
    };
    int n = 0;
    char path[4096];
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
        snprintf(path, sizeof path, "%s/seed-%zu.json", dir, k);
        n += tu_write_file(path, seeds[k], strlen(seeds[k])) == 0;
    }
    printf("wrote %d seeds to %s\n", n, dir);
    return n > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--write-seeds") == 0)
        return write_seeds(argv[2]);
    test_chat_full();
    test_chat_options();
    test_completion_valid();
    test_chat_errors();
    test_completion_errors();
    test_error_json();
    test_chat_response();
    test_chat_chunks();
    test_completion_response();
    test_misc();
    test_bearer();
    TEST_END();
}
