/* api: the request and response layer of `lilac serve`, the OpenAI-compatible HTTP server.
 *
 * Pure functions on bytes and plain C data: no threads, sockets, clocks or global state. The HTTP glue hands
 * a request body to api_parse_chat / api_parse_completion and gets a validated, owned api_request or an
 * api_error (HTTP status + the OpenAI error object); responses are built from plain C structs into malloc'd
 * JSON strings (NULL only when out of memory).
 *
 * Error codes (api_error.code) this layer produces, all with type "invalid_request_error":
 *   413 "request_too_large"           the body is over api_limits.max_body_bytes
 *   400 "invalid_encoding"            the body is not UTF-8 (raw bytes; escaped lone surrogates such as
 *                                     "\ud800" are jansson's to refuse and come back as "invalid_json")
 *   400 "invalid_json"                not JSON, trailing bytes, duplicate keys, numbers out of jansson's range
 *   400 "invalid_type"                a field (or the body itself) has the wrong JSON type; param names it
 *   400 "missing_required_parameter"  messages / prompt / a message's role or content
 *   400 "empty_array"                 messages or prompt is []
 *   400 "array_above_max_length"      messages, stop, tools or prompt token ids over their limit
 *   400 "invalid_value"               a number out of range, an unknown role / enum value, bad tool-call JSON
 *   400 "unsupported_value"           well-formed but not something lilac does: n != 1, best_of != 1, echo,
 *                                     suffix, logit_bias, response_format other than text, non-text content
 * param is the field as OpenAI names it ("temperature", "messages[2].content[0].type"), "" for none.
 * The glue makes its own errors (e.g. 400 "context_length_exceeded") with api_error_set. */
#ifndef LILAC_SERVER_API_H
#define LILAC_SERVER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

/* ---- errors ------------------------------------------------------------------------------------------- */

typedef struct api_error {
    int status;        /* HTTP status: 400, 413, 500, ... */
    const char *type;  /* OpenAI error type, a static string: "invalid_request_error", "server_error", ... */
    const char *code;  /* a static string, or NULL for JSON null */
    char param[128];   /* the offending field; "" for JSON null */
    char message[512]; /* one line, valid UTF-8 */
} api_error;

/* Fill e (type and code must be static strings; param may be NULL). Returns -1, for `return api_error_set(...)`. */
int api_error_set(api_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                  ...) __attribute__((format(printf, 6, 7)));

/* {"error":{"message","type","param","code"}} */
char *api_error_json(const api_error *e);

/* ---- requests ----------------------------------------------------------------------------------------- */

typedef struct api_limits {
    size_t max_body_bytes; /* 413 above this (default 16 MiB) */
    int max_messages;      /* default 4096 */
    int max_stop;          /* stop strings (default 4, OpenAI's limit) */
    size_t max_stop_bytes; /* bytes in one stop string (default 512) */
    int max_tools;         /* default 512 */
    int max_prompt_ids;    /* token ids in a completions prompt (default 1 << 20) */
} api_limits;

api_limits api_limits_default(void);

typedef enum api_kind {
    API_CHAT = 1,       /* POST /v1/chat/completions */
    API_COMPLETION = 2, /* POST /v1/completions */
} api_kind;

typedef enum api_tool_choice {
    API_TOOL_AUTO = 0,     /* the default; with no tools it means nothing */
    API_TOOL_NONE = 1,     /* tools are not rendered into the prompt */
    API_TOOL_REQUIRED = 2, /* the model must call some tool */
    API_TOOL_FUNCTION = 3, /* the model must call tool_choice_name */
} api_tool_choice;

/* api_request.sampling_set: which fields of api_request.sampling the request gave. */
enum {
    API_SET_TEMPERATURE = 1u << 0,
    API_SET_TOP_P = 1u << 1,
    API_SET_TOP_K = 1u << 2,
    API_SET_MIN_P = 1u << 3,
    API_SET_REPEAT_PENALTY = 1u << 4,
    API_SET_PRESENCE_PENALTY = 1u << 5,
    API_SET_FREQUENCY_PENALTY = 1u << 6,
    API_SET_PENALTY_LAST_N = 1u << 7, /* "repeat_last_n" (llama.cpp) or "penalty_last_n", >= -1 */
    API_SET_SEED = 1u << 8,
};

/* A validated request; everything is owned and freed by api_request_free. A JSON null counts as absent for
 * every optional field. Unknown fields (and "user", "parallel_tool_calls", "metadata", ...) are ignored. */
typedef struct api_request {
    api_kind kind;
    char *model; /* NULL when not given */

    /* API_CHAT: the messages, normalized (developer -> system, text parts joined into one content string,
     * tool-call arguments parsed into objects), as JSON for lilac_chat_render: an array of messages, or
     * {"messages": [...], "tools": [...]} when there are tools to render. */
    char *conversation;
    int n_messages;
    int n_tools; /* tools in the conversation: 0 when none were given or tool_choice is "none" */
    api_tool_choice tool_choice;
    char *tool_choice_name; /* API_TOOL_FUNCTION: the function's name (one of the tools), else NULL */

    /* API_COMPLETION: the prompt, either text (no NUL bytes; "" allowed) or token ids (then prompt is NULL). */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids; /* each in [0, INT32_MAX]; the glue checks them against the vocabulary */
    int n_prompt_ids;

    bool stream;
    bool include_usage; /* stream_options.include_usage: a last chunk with usage and no choices */
    int max_tokens;     /* max_completion_tokens, else max_tokens; >= 1; 0 when neither was given */

    unsigned sampling_set;          /* API_SET_* bits */
    lilac_sampler_params sampling;  /* the fields named in sampling_set; the rest are zero */

    char **stop; /* n_stop non-empty strings */
    int n_stop;

    bool logprobs;    /* chat: "logprobs": true; completions: "logprobs" given (an integer) */
    int top_logprobs; /* chat: "top_logprobs" 0..20; completions: "logprobs" 0..5 */

    int thinking;    /* -1: the template's default, 0: off, 1: on (chat_template_kwargs.enable_thinking wins over
                        reasoning_effort: "none"/"minimal" off, "low"/"medium"/"high" on) */
    bool ignore_eos; /* extension: do not stop at end-of-generation tokens */
} api_request;

/* Parse and validate a request body (len bytes, need not be NUL-terminated). lim may be NULL for the
 * defaults. Returns 0 and sets *out, or -1 with *out NULL and e filled. */
int api_parse_chat(const char *body, size_t len, const api_limits *lim, api_request **out, api_error *e);
int api_parse_completion(const char *body, size_t len, const api_limits *lim, api_request **out, api_error *e);
void api_request_free(api_request *r);

/* Overwrite the fields of p (the server's defaults) that the request set. */
void api_request_sampling(const api_request *r, lilac_sampler_params *p);
/* max_tokens, stop, ignore_eos and n_logprobs from the request; fields it did not set are left as they are.
 * p->stop points into r. */
void api_request_gen_params(const api_request *r, lilac_gen_params *p);

/* ---- responses ---------------------------------------------------------------------------------------- */

/* Texts from the model are (pointer, length) pairs and may hold any bytes: ill-formed UTF-8 is written as
 * U+FFFD, so a token that ends inside a character cannot break the JSON. */

typedef enum api_finish {
    API_FINISH_NULL = 0, /* not finished: "finish_reason": null */
    API_FINISH_STOP,
    API_FINISH_LENGTH,
    API_FINISH_TOOL_CALLS,
} api_finish;

/* The engine's reason as the API says it: context full -> "length", cancelled -> "stop"; "tool_calls" when
 * the answer is a tool call and it was not cut by length. */
api_finish api_finish_from(lilac_finish f, bool has_tool_calls);

/* The head every response object carries. */
typedef struct api_meta {
    const char *id;    /* "chatcmpl-..." / "cmpl-..." (api_make_id) */
    const char *model; /* the model's name as /v1/models lists it */
    int64_t created;   /* Unix seconds */
} api_meta;

typedef struct api_usage {
    int prompt_tokens, completion_tokens;
    int cached_tokens;    /* prompt tokens reused from the cache: prompt_tokens_details.cached_tokens */
    int reasoning_tokens; /* completion_tokens_details.reasoning_tokens (chat only) */
} api_usage;

typedef struct api_top_logprob {
    const char *text; /* the token's bytes */
    size_t len;
    float logprob; /* -inf and NaN are written as -9999.0, as OpenAI does */
} api_top_logprob;

/* One generated token: its bytes, log-probability and the most likely alternatives, most likely first. */
typedef struct api_logprob {
    const char *text;
    size_t len;
    float logprob;
    const api_top_logprob *top;
    int n_top;
} api_logprob;

/* A tool call. In a full response: id, name and arguments (JSON text). In a stream delta: index always, id
 * and name on the call's first delta only (a delta with id also gets "type": "function"), arguments as the
 * next piece; a NULL field is left out. */
typedef struct api_tool_call {
    int index;
    const char *id; /* "call_..." */
    const char *name;
    const char *arguments;
} api_tool_call;

/* The one choice of a response, or of a stream chunk (then the texts are this chunk's pieces). */
typedef struct api_choice {
    const char *text; /* chat: message content (NULL: null in a response, left out of a delta);
                         completions: the text (NULL: "") */
    size_t text_len;
    const char *reasoning; /* chat: reasoning_content; NULL or empty: left out */
    size_t reasoning_len;
    const api_tool_call *tool_calls; /* chat */
    int n_tool_calls;
    bool role;     /* chat chunk: delta.role = "assistant" (the first chunk) */
    bool logprobs; /* logprobs were asked for: an object (over the tokens below), else null */
    const api_logprob *tokens;
    int n_tokens;
    int text_offset; /* completions: the character offset of tokens[0] (api_utf8_chars of what came before) */
    api_finish finish;
} api_choice;

/* chat.completion: choices[0] {index, message {role, content, reasoning_content, tool_calls}, logprobs,
 * finish_reason}, usage. */
char *api_chat_response_json(const api_meta *m, const api_choice *c, const api_usage *u);
/* chat.completion.chunk: choices[0] {index, delta, logprobs, finish_reason}; usage_null adds "usage": null
 * (OpenAI sends it on every chunk but the last when stream_options.include_usage is set). */
char *api_chat_chunk_json(const api_meta *m, const api_choice *c, bool usage_null);
/* text_completion: choices[0] {text, index, logprobs {tokens, token_logprobs, top_logprobs, text_offset},
 * finish_reason}, usage. */
char *api_completion_response_json(const api_meta *m, const api_choice *c, const api_usage *u);
char *api_completion_chunk_json(const api_meta *m, const api_choice *c, bool usage_null);
/* The last chunk of a stream with include_usage: "choices": [] and usage. */
char *api_usage_chunk_json(const api_meta *m, api_kind kind, const api_usage *u);

typedef struct api_model_info {
    const char *id;
    int64_t created;
    const char *owned_by; /* NULL: "lilac" */
} api_model_info;

/* GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by"}]} */
char *api_models_json(const api_model_info *models, int n);

/* Server-sent events: "data: <json>\n\n" (malloc'd), and the stream's end. */
char *api_sse_data(const char *json);
#define API_SSE_DONE "data: [DONE]\n\n"

/* prefix followed by 24 hex digits mixed from n (a counter or random bits): "chatcmpl-3f9a...". */
void api_make_id(char *buf, size_t cap, const char *prefix, uint64_t n);

/* Characters (code points) in s[0..n): for completions' text_offset. */
size_t api_utf8_chars(const char *s, size_t n);

/* ---- authentication ----------------------------------------------------------------------------------- */

/* Whether an Authorization header ("Bearer KEY", scheme case-insensitive, spaces around KEY ignored) carries
 * key. The comparison runs over the longer of the two lengths without an early exit, so its time depends on
 * the lengths alone, never on where the strings first differ. NULL header, or NULL or empty key: false. */
bool api_check_bearer(const char *authorization_header, const char *key);

#endif
