/* api: OpenAI-compatible request parsing and response building (see api.h). */
#include "server/api.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char T_INVALID[] = "invalid_request_error";

/* json_int_t is long long or long, as jansson was built */
#if JSON_INTEGER_IS_LONG_LONG
#define JINT_MIN LLONG_MIN
#define JINT_MAX LLONG_MAX
#else
#define JINT_MIN LONG_MIN
#define JINT_MAX LONG_MAX
#endif

/* ---- UTF-8 -------------------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s[0..n) (n >= 1), or 0 when it is ill-formed: a stray
 * continuation byte, a truncated sequence, an overlong form, a surrogate or a code point above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0], cp, min;
    size_t k;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
        k = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

/* Offset of the first byte that is not part of well-formed UTF-8; n when all of it is. */
static size_t utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(u + i, n - i);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

size_t api_utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

/* A JSON string of s[0..n), each ill-formed byte written as U+FFFD. NULL when out of memory. */
static json_t *jstr(const char *s, size_t n)
{
    if (!s)
        s = "", n = 0;
    size_t bad = utf8_check(s, n);
    if (bad == n)
        return json_stringn(s, n);
    char *fixed = malloc(n * 3 + 1); /* at worst every byte becomes three */
    if (!fixed)
        return NULL;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k) {
            memcpy(fixed + o, s + i, k);
            o += k, i += k;
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3, i++;
        }
    }
    json_t *v = json_stringn(fixed, o);
    free(fixed);
    return v;
}

/* In place: control characters and ill-formed UTF-8 (e.g. a sequence cut by snprintf) become '?', so a
 * message or param is one line of valid UTF-8. */
static void one_line(char *s)
{
    size_t n = strlen(s), i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (!k || c < 0x20 || c == 0x7f) {
            s[i++] = '?';
            continue;
        }
        i += k;
    }
}

/* ---- errors ------------------------------------------------------------------------------------------- */

int api_error_set(api_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                  ...)
{
    if (!e)
        return -1;
    e->status = status;
    e->type = type ? type : T_INVALID;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    one_line(e->param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    one_line(e->message);
    return -1;
}

/* Builders: a failed allocation anywhere marks the whole build bad, and what would have held the lost value
 * is NULL, which the following calls take in their stride (json_object_set_new on NULL frees the value). */
typedef struct jb {
    bool bad;
} jb;

static json_t *put(jb *b, json_t *obj, const char *key, json_t *v)
{
    if (!v) {
        b->bad = true;
        return NULL;
    }
    if (json_object_set_new(obj, key, v) != 0) { /* v was freed */
        b->bad = true;
        return NULL;
    }
    return v;
}

static json_t *push(jb *b, json_t *arr, json_t *v)
{
    if (!v) {
        b->bad = true;
        return NULL;
    }
    if (json_array_append_new(arr, v) != 0) {
        b->bad = true;
        return NULL;
    }
    return v;
}

/* The finished document as compact JSON; frees root. Floats get 9 significant digits: a float's worth. */
static char *finish_json(jb *b, json_t *root)
{
    char *s = NULL;
    if (root && !b->bad)
        s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(root);
    return s;
}

char *api_error_json(const api_error *e)
{
    jb b = {0};
    json_t *root = json_object();
    json_t *err = put(&b, root, "error", json_object());
    const char *msg = e ? e->message : "unknown error";
    put(&b, err, "message", jstr(msg, strnlen(msg, sizeof e->message)));
    put(&b, err, "type", json_string(e && e->type ? e->type : "server_error"));
    put(&b, err, "param", e && e->param[0] ? jstr(e->param, strnlen(e->param, sizeof e->param)) : json_null());
    put(&b, err, "code", e && e->code ? json_string(e->code) : json_null());
    return finish_json(&b, root);
}

/* ---- parsing helpers ---------------------------------------------------------------------------------- */

api_limits api_limits_default(void)
{
    return (api_limits){
        .max_body_bytes = 16u << 20,
        .max_messages = 4096,
        .max_stop = 4,
        .max_stop_bytes = 512,
        .max_tools = 512,
        .max_prompt_ids = 1 << 20,
    };
}

static const char *jtype(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* The member key of obj, NULL when absent or JSON null (optional fields treat both alike). */
static json_t *opt(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int type_err(api_error *e, const char *param, const char *want, const json_t *got)
{
    return api_error_set(e, 400, T_INVALID, "invalid_type", param,
                         "Invalid type for '%s': expected %s, but got %s instead.", param, want, jtype(got));
}

static int missing(api_error *e, const char *param)
{
    return api_error_set(e, 400, T_INVALID, "missing_required_parameter", param, "Missing required parameter: '%s'.",
                         param);
}

/* s as it may be quoted in a message: at most 64 bytes (api_error_set mends a cut character). */
static const char *brief(const char *s, char *buf, size_t cap)
{
    size_t n = strlen(s), max = cap - 4 < 64 ? cap - 4 : 64;
    if (n <= max)
        return s;
    memcpy(buf, s, max);
    memcpy(buf + max, "...", 4);
    return buf;
}

/* The getters return 1 when the field was there (and *out is set), 0 when it was absent or null, -1 (with e
 * filled) when it was of the wrong type or out of range. */

static int get_bool(api_error *e, const json_t *obj, const char *key, const char *param, bool *out)
{
    json_t *v = opt(obj, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return type_err(e, param, "a boolean", v);
    *out = json_is_true(v);
    return 1;
}

/* A number in [lo, hi] (lo excluded when lo_open); range says so in words for the message. */
static int get_num(api_error *e, const json_t *obj, const char *key, double lo, bool lo_open, double hi,
                   const char *range, double *out)
{
    json_t *v = opt(obj, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return type_err(e, key, "a number", v);
    double x = json_number_value(v);
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return api_error_set(e, 400, T_INVALID, "invalid_value", key,
                             "Invalid '%s': expected a number %s, but got %g instead.", key, range, x);
    *out = x;
    return 1;
}

static int get_int(api_error *e, const json_t *obj, const char *key, const char *param, json_int_t lo,
                   json_int_t hi, json_int_t *out)
{
    json_t *v = opt(obj, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return type_err(e, param, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        if (hi == JINT_MAX)
            return api_error_set(e, 400, T_INVALID, "invalid_value", param,
                                 "Invalid '%s': expected an integer >= %" JSON_INTEGER_FORMAT ", but got %"
                                 JSON_INTEGER_FORMAT " instead.", param, lo, x);
        return api_error_set(e, 400, T_INVALID, "invalid_value", param,
                             "Invalid '%s': expected an integer between %" JSON_INTEGER_FORMAT " and %"
                             JSON_INTEGER_FORMAT ", but got %" JSON_INTEGER_FORMAT " instead.", param, lo, hi, x);
    }
    *out = x;
    return 1;
}

static int get_str(api_error *e, const json_t *obj, const char *key, const char *param, const json_t **out)
{
    *out = NULL;
    json_t *v = opt(obj, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return type_err(e, param, "a string", v);
    *out = v;
    return 1;
}

static int oom(api_error *e)
{
    return api_error_set(e, 500, "server_error", NULL, NULL, "Out of memory while reading the request.");
}

/* A copy of a JSON string's value (jansson refuses \u0000 by default, so it holds no NUL). */
static char *dup_str(const json_t *v)
{
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, json_string_value(v), n);
        s[n] = 0;
    }
    return s;
}

typedef struct parser {
    api_error *e;
    const api_limits *lim;
    const json_t *root;
    api_request *r;
} parser;

/* ---- fields both endpoints share ---------------------------------------------------------------------- */

static int parse_stop(parser *p)
{
    api_error *e = p->e;
    json_t *v = opt(p->root, "stop");
    if (!v)
        return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v))
        return type_err(e, "stop", "a string or an array of strings", v);
    if (n > (size_t)p->lim->max_stop)
        return api_error_set(e, 400, T_INVALID, "array_above_max_length", "stop",
                             "Invalid 'stop': array too long. Expected an array with at most %d strings, but got "
                             "%zu instead.", p->lim->max_stop, n);
    if (n == 0)
        return 0;
    p->r->stop = calloc(n, sizeof *p->r->stop);
    if (!p->r->stop)
        return oom(e);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        char param[32];
        snprintf(param, sizeof param, json_is_string(v) ? "stop" : "stop[%zu]", i);
        if (!json_is_string(s))
            return type_err(e, param, "a string", s);
        if (json_string_length(s) == 0)
            return api_error_set(e, 400, T_INVALID, "invalid_value", param,
                                 "Invalid '%s': a stop string cannot be empty.", param);
        if (json_string_length(s) > p->lim->max_stop_bytes)
            return api_error_set(e, 400, T_INVALID, "invalid_value", param,
                                 "Invalid '%s': a stop string may be at most %zu bytes, but got %zu.", param,
                                 p->lim->max_stop_bytes, json_string_length(s));
        if (!(p->r->stop[i] = dup_str(s)))
            return oom(e);
        p->r->n_stop = (int)i + 1;
    }
    return 0;
}

static int unsupported(api_error *e, const char *param, const char *why)
{
    return api_error_set(e, 400, T_INVALID, "unsupported_value", param, "Unsupported value for '%s': %s.", param,
                         why);
}

static int parse_common(parser *p)
{
    api_error *e = p->e;
    api_request *r = p->r;
    const json_t *root = p->root, *v;
    json_int_t i;
    double x;
    int k;

    if ((k = get_str(e, root, "model", "model", &v)) < 0)
        return -1;
    if (k && !(r->model = dup_str(v)))
        return oom(e);
    if (get_bool(e, root, "stream", "stream", &r->stream) < 0)
        return -1;
    if ((v = opt(root, "stream_options"))) {
        if (!json_is_object(v))
            return type_err(e, "stream_options", "an object", v);
        if (get_bool(e, v, "include_usage", "stream_options.include_usage", &r->include_usage) < 0)
            return -1;
    }
    if ((k = get_int(e, root, "n", "n", 1, JINT_MAX, &i)) < 0)
        return -1;
    if (k && i != 1)
        return unsupported(e, "n", "lilac generates one choice per request, so n must be 1");

    /* max_completion_tokens replaced max_tokens in the chat API; when both come, the newer wins */
    if ((k = get_int(e, root, "max_tokens", "max_tokens", 1, INT_MAX, &i)) < 0)
        return -1;
    if (k)
        r->max_tokens = (int)i;
    if ((k = get_int(e, root, "max_completion_tokens", "max_completion_tokens", 1, INT_MAX, &i)) < 0)
        return -1;
    if (k)
        r->max_tokens = (int)i;

    lilac_sampler_params *s = &r->sampling;
    if ((k = get_num(e, root, "temperature", 0, false, 2, "between 0 and 2", &x)) < 0)
        return -1;
    if (k)
        s->temperature = (float)x, r->sampling_set |= API_SET_TEMPERATURE;
    if ((k = get_num(e, root, "top_p", 0, false, 1, "between 0 and 1", &x)) < 0)
        return -1;
    if (k)
        s->top_p = (float)x, r->sampling_set |= API_SET_TOP_P;
    if ((k = get_int(e, root, "top_k", "top_k", 0, INT_MAX, &i)) < 0)
        return -1;
    if (k)
        s->top_k = (int)i, r->sampling_set |= API_SET_TOP_K;
    if ((k = get_num(e, root, "min_p", 0, false, 1, "between 0 and 1", &x)) < 0)
        return -1;
    if (k)
        s->min_p = (float)x, r->sampling_set |= API_SET_MIN_P;
    if ((k = get_num(e, root, "presence_penalty", -2, false, 2, "between -2 and 2", &x)) < 0)
        return -1;
    if (k)
        s->presence_penalty = (float)x, r->sampling_set |= API_SET_PRESENCE_PENALTY;
    if ((k = get_num(e, root, "frequency_penalty", -2, false, 2, "between -2 and 2", &x)) < 0)
        return -1;
    if (k)
        s->frequency_penalty = (float)x, r->sampling_set |= API_SET_FREQUENCY_PENALTY;
    /* an upper bound keeps the float finite; llama.cpp's useful range is about 1..2 */
    if ((k = get_num(e, root, "repeat_penalty", 0, true, 100, "greater than 0 and at most 100", &x)) < 0)
        return -1;
    if (k)
        s->repeat_penalty = (float)x, r->sampling_set |= API_SET_REPEAT_PENALTY;
    for (const char *const *key = (const char *const[]){"penalty_last_n", "repeat_last_n", NULL}; *key; key++) {
        if ((k = get_int(e, root, *key, *key, -1, INT_MAX, &i)) < 0)
            return -1;
        if (k)
            s->penalty_last_n = (int)i, r->sampling_set |= API_SET_PENALTY_LAST_N;
    }
    if ((k = get_int(e, root, "seed", "seed", JINT_MIN, JINT_MAX, &i)) < 0)
        return -1;
    if (k)
        s->seed = (uint64_t)i, r->sampling_set |= API_SET_SEED; /* negative seeds wrap: any integer is a seed */

    if (parse_stop(p) < 0)
        return -1;
    if (get_bool(e, root, "ignore_eos", "ignore_eos", &r->ignore_eos) < 0)
        return -1;
    if ((v = opt(root, "logit_bias"))) {
        if (!json_is_object(v))
            return type_err(e, "logit_bias", "an object", v);
        if (json_object_size(v))
            return unsupported(e, "logit_bias", "lilac does not support logit_bias");
    }
    return 0;
}

/* ---- chat --------------------------------------------------------------------------------------------- */

enum { ROLE_SYSTEM, ROLE_DEVELOPER, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL, N_ROLES };
static const char *const role_names[N_ROLES] = {"system", "developer", "user", "assistant", "tool"};

/* Content as one string: a string as it is, text parts joined. Absent or null is "" for an assistant (whose
 * answer may be tool calls alone) and missing for the rest. */
static int parse_content(parser *p, const json_t *m, int role, const char *mparam, json_t *nm, jb *b)
{
    api_error *e = p->e;
    char param[96], pp[128];
    snprintf(param, sizeof param, "%s.content", mparam);
    json_t *c = opt(m, "content");
    if (!c) {
        if (role != ROLE_ASSISTANT)
            return missing(e, param);
        put(b, nm, "content", json_string(""));
        return 0;
    }
    if (json_is_string(c)) {
        put(b, nm, "content", json_incref(c));
        return 0;
    }
    if (!json_is_array(c))
        return type_err(e, param, "a string or an array of content parts", c);
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        snprintf(pp, sizeof pp, "%s[%zu]", param, k);
        if (!json_is_object(part))
            return type_err(e, pp, "an object", part);
        const json_t *type, *text;
        char tp[160], buf[80];
        snprintf(tp, sizeof tp, "%s.type", pp);
        int got = get_str(e, part, "type", tp, &type);
        if (got < 0)
            return -1;
        if (!got)
            return missing(e, tp);
        if (strcmp(json_string_value(type), "text") != 0)
            return api_error_set(e, 400, T_INVALID, "unsupported_value", tp,
                                 "Unsupported content part type '%s' in '%s': lilac runs text-only models, so "
                                 "only \"text\" parts are accepted.",
                                 brief(json_string_value(type), buf, sizeof buf), pp);
        snprintf(tp, sizeof tp, "%s.text", pp);
        if ((got = get_str(e, part, "text", tp, &text)) < 0)
            return -1;
        if (!got)
            return missing(e, tp);
        total += json_string_length(text);
    }
    char *joined = malloc(total + 1), *o = joined;
    if (!joined)
        return oom(e);
    json_array_foreach(c, k, part) {
        const json_t *text = json_object_get(part, "text");
        memcpy(o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
    }
    put(b, nm, "content", json_stringn(joined, total));
    free(joined);
    return 0;
}

/* An assistant's tool_calls as the renderer takes them: [{"id"?, "type": "function", "function": {"name",
 * "arguments": an object}}]; arguments sent as a string of JSON are parsed ("" as {}). */
static int parse_tool_calls(parser *p, const json_t *m, const char *mparam, json_t *nm, jb *b)
{
    api_error *e = p->e;
    char param[96], cp[128], fp[160], buf[80];
    snprintf(param, sizeof param, "%s.tool_calls", mparam);
    json_t *tc = opt(m, "tool_calls");
    if (!tc)
        return 0;
    if (!json_is_array(tc))
        return type_err(e, param, "an array", tc);
    if (json_array_size(tc) == 0)
        return 0;
    json_t *calls = put(b, nm, "tool_calls", json_array());
    size_t j;
    json_t *call;
    json_array_foreach(tc, j, call) {
        snprintf(cp, sizeof cp, "%s[%zu]", param, j);
        if (!json_is_object(call))
            return type_err(e, cp, "an object", call);
        const json_t *v;
        snprintf(fp, sizeof fp, "%s.type", cp);
        int got = get_str(e, call, "type", fp, &v);
        if (got < 0)
            return -1;
        if (got && strcmp(json_string_value(v), "function") != 0)
            return api_error_set(e, 400, T_INVALID, "invalid_value", fp,
                                 "Invalid value for '%s': '%s' (the only tool call type is \"function\").", fp,
                                 brief(json_string_value(v), buf, sizeof buf));
        json_t *nc = push(b, calls, json_object());
        snprintf(fp, sizeof fp, "%s.id", cp);
        if ((got = get_str(e, call, "id", fp, &v)) < 0)
            return -1;
        if (got)
            put(b, nc, "id", json_incref((json_t *)v));
        put(b, nc, "type", json_string("function"));
        snprintf(fp, sizeof fp, "%s.function", cp);
        json_t *fn = opt(call, "function");
        if (!fn)
            return missing(e, fp);
        if (!json_is_object(fn))
            return type_err(e, fp, "an object", fn);
        json_t *nf = put(b, nc, "function", json_object());
        snprintf(fp, sizeof fp, "%s.function.name", cp);
        if ((got = get_str(e, fn, "name", fp, &v)) < 0)
            return -1;
        if (!got)
            return missing(e, fp);
        if (json_string_length(v) == 0)
            return api_error_set(e, 400, T_INVALID, "invalid_value", fp, "Invalid '%s': empty function name.", fp);
        put(b, nf, "name", json_incref((json_t *)v));
        snprintf(fp, sizeof fp, "%s.function.arguments", cp);
        json_t *a = opt(fn, "arguments");
        if (!a)
            return missing(e, fp);
        json_t *args;
        if (json_is_object(a)) {
            args = json_incref(a);
        } else if (!json_is_string(a)) {
            return type_err(e, fp, "a string holding a JSON object", a);
        } else if (json_string_length(a) == 0) {
            args = json_object();
        } else {
            json_error_t je;
            args = json_loadb(json_string_value(a), json_string_length(a), JSON_REJECT_DUPLICATES, &je);
            if (!args)
                return api_error_set(e, 400, T_INVALID, "invalid_value", fp,
                                     "Invalid '%s': not valid JSON (column %d: %s).", fp, je.column, je.text);
            if (!json_is_object(args)) {
                json_decref(args);
                return api_error_set(e, 400, T_INVALID, "invalid_value", fp,
                                     "Invalid '%s': expected a JSON object.", fp);
            }
        }
        put(b, nf, "arguments", args);
    }
    return 0;
}

static int parse_messages(parser *p, json_t *out, jb *b)
{
    api_error *e = p->e;
    json_t *msgs = opt(p->root, "messages");
    if (!msgs)
        return missing(e, "messages");
    if (!json_is_array(msgs))
        return type_err(e, "messages", "an array", msgs);
    size_t n = json_array_size(msgs);
    if (n == 0)
        return api_error_set(e, 400, T_INVALID, "empty_array", "messages",
                             "Invalid 'messages': empty array. Expected an array with at least one message.");
    if (n > (size_t)p->lim->max_messages)
        return api_error_set(e, 400, T_INVALID, "array_above_max_length", "messages",
                             "Invalid 'messages': %zu messages is more than the limit of %d.", n,
                             p->lim->max_messages);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char mp[48], param[96], buf[80];
        snprintf(mp, sizeof mp, "messages[%zu]", i);
        if (!json_is_object(m))
            return type_err(e, mp, "an object", m);
        snprintf(param, sizeof param, "%s.role", mp);
        const json_t *rv;
        int got = get_str(e, m, "role", param, &rv);
        if (got < 0)
            return -1;
        if (!got)
            return missing(e, param);
        int role = -1;
        for (int k = 0; k < N_ROLES; k++)
            if (strcmp(json_string_value(rv), role_names[k]) == 0)
                role = k;
        if (role < 0)
            return api_error_set(e, 400, T_INVALID, "invalid_value", param,
                                 "Invalid value for '%s': '%s'. Supported values are: 'system', 'developer', "
                                 "'user', 'assistant' and 'tool'.",
                                 param, brief(json_string_value(rv), buf, sizeof buf));
        json_t *nm = push(b, out, json_object());
        /* the Qwen templates know no developer role; OpenAI's newer models treat it as system */
        put(b, nm, "role", json_string(role_names[role == ROLE_DEVELOPER ? ROLE_SYSTEM : role]));
        if (parse_content(p, m, role, mp, nm, b) < 0)
            return -1;
        if (role == ROLE_ASSISTANT) {
            /* "reasoning" is what some clients send back (vLLM's newer name for the field) */
            const char *rkey = opt(m, "reasoning_content") ? "reasoning_content" : "reasoning";
            snprintf(param, sizeof param, "%s.%s", mp, rkey);
            if ((got = get_str(e, m, rkey, param, &rv)) < 0)
                return -1;
            if (got)
                put(b, nm, "reasoning_content", json_incref((json_t *)rv));
            if (parse_tool_calls(p, m, mp, nm, b) < 0)
                return -1;
        } else if (role == ROLE_TOOL) {
            snprintf(param, sizeof param, "%s.tool_call_id", mp);
            if ((got = get_str(e, m, "tool_call_id", param, &rv)) < 0)
                return -1;
            if (got)
                put(b, nm, "tool_call_id", json_incref((json_t *)rv));
        }
    }
    p->r->n_messages = (int)n;
    return 0;
}

/* tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}], passed to the template
 * as they came (it writes them out as JSON). */
static int parse_tools(parser *p, json_t **tools)
{
    api_error *e = p->e;
    *tools = NULL;
    json_t *t = opt(p->root, "tools");
    if (!t)
        return 0;
    if (!json_is_array(t))
        return type_err(e, "tools", "an array", t);
    if (json_array_size(t) > (size_t)p->lim->max_tools)
        return api_error_set(e, 400, T_INVALID, "array_above_max_length", "tools",
                             "Invalid 'tools': %zu tools is more than the limit of %d.", json_array_size(t),
                             p->lim->max_tools);
    size_t i;
    json_t *tool;
    json_array_foreach(t, i, tool) {
        char tp[48], param[96], buf[80];
        const json_t *v;
        snprintf(tp, sizeof tp, "tools[%zu]", i);
        if (!json_is_object(tool))
            return type_err(e, tp, "an object", tool);
        snprintf(param, sizeof param, "%s.type", tp);
        int got = get_str(e, tool, "type", param, &v);
        if (got < 0)
            return -1;
        if (got && strcmp(json_string_value(v), "function") != 0)
            return api_error_set(e, 400, T_INVALID, "invalid_value", param,
                                 "Invalid value for '%s': '%s' (lilac supports \"function\" tools only).", param,
                                 brief(json_string_value(v), buf, sizeof buf));
        snprintf(param, sizeof param, "%s.function", tp);
        json_t *fn = opt(tool, "function");
        if (!fn)
            return missing(e, param);
        if (!json_is_object(fn))
            return type_err(e, param, "an object", fn);
        snprintf(param, sizeof param, "%s.function.name", tp);
        if ((got = get_str(e, fn, "name", param, &v)) < 0)
            return -1;
        if (!got)
            return missing(e, param);
        if (json_string_length(v) == 0)
            return api_error_set(e, 400, T_INVALID, "invalid_value", param, "Invalid '%s': empty function name.",
                                 param);
        snprintf(param, sizeof param, "%s.function.description", tp);
        if (get_str(e, fn, "description", param, &v) < 0)
            return -1;
        snprintf(param, sizeof param, "%s.function.parameters", tp);
        json_t *ps = opt(fn, "parameters");
        if (ps && !json_is_object(ps))
            return type_err(e, param, "an object", ps);
    }
    if (json_array_size(t))
        *tools = t;
    return 0;
}

static bool has_tool(const json_t *tools, const char *name)
{
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        const char *n = json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
        if (n && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

static int parse_tool_choice(parser *p, const json_t *tools)
{
    api_error *e = p->e;
    api_request *r = p->r;
    json_t *tc = opt(p->root, "tool_choice");
    char buf[80];
    if (!tc)
        return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "auto") == 0)
            r->tool_choice = API_TOOL_AUTO;
        else if (strcmp(s, "none") == 0)
            r->tool_choice = API_TOOL_NONE;
        else if (strcmp(s, "required") == 0)
            r->tool_choice = API_TOOL_REQUIRED;
        else
            return api_error_set(e, 400, T_INVALID, "invalid_value", "tool_choice",
                                 "Invalid value for 'tool_choice': '%s'. Supported values are: 'none', 'auto', "
                                 "'required' or an object naming a function.", brief(s, buf, sizeof buf));
    } else if (json_is_object(tc)) {
        const json_t *v;
        int got = get_str(e, tc, "type", "tool_choice.type", &v);
        if (got < 0)
            return -1;
        if (got && strcmp(json_string_value(v), "function") != 0)
            return api_error_set(e, 400, T_INVALID, "invalid_value", "tool_choice.type",
                                 "Invalid value for 'tool_choice.type': '%s' (expected \"function\").",
                                 brief(json_string_value(v), buf, sizeof buf));
        json_t *fn = opt(tc, "function");
        if (!fn)
            return missing(e, "tool_choice.function");
        if (!json_is_object(fn))
            return type_err(e, "tool_choice.function", "an object", fn);
        if ((got = get_str(e, fn, "name", "tool_choice.function.name", &v)) < 0)
            return -1;
        if (!got)
            return missing(e, "tool_choice.function.name");
        r->tool_choice = API_TOOL_FUNCTION;
        if (tools && !has_tool(tools, json_string_value(v)))
            return api_error_set(e, 400, T_INVALID, "invalid_value", "tool_choice.function.name",
                                 "Invalid 'tool_choice.function.name': no tool is named '%s'.",
                                 brief(json_string_value(v), buf, sizeof buf));
        if (!(r->tool_choice_name = dup_str(v)))
            return oom(e);
    } else {
        return type_err(e, "tool_choice", "a string or an object", tc);
    }
    if ((r->tool_choice == API_TOOL_REQUIRED || r->tool_choice == API_TOOL_FUNCTION) && !tools)
        return api_error_set(e, 400, T_INVALID, "invalid_value", "tool_choice",
                             "Invalid 'tool_choice': it asks for a tool call, but the request has no tools.");
    return 0;
}

static int parse_thinking(parser *p)
{
    api_error *e = p->e;
    json_t *v;
    char buf[80];
    int from_effort = -1, from_kwargs = -1;
    if ((v = opt(p->root, "reasoning_effort"))) {
        if (!json_is_string(v))
            return type_err(e, "reasoning_effort", "a string", v);
        const char *s = json_string_value(v);
        if (strcmp(s, "none") == 0 || strcmp(s, "minimal") == 0)
            from_effort = 0; /* the models lilac runs think or do not: "minimal" is nearer to not */
        else if (strcmp(s, "low") == 0 || strcmp(s, "medium") == 0 || strcmp(s, "high") == 0)
            from_effort = 1;
        else
            return api_error_set(e, 400, T_INVALID, "invalid_value", "reasoning_effort",
                                 "Invalid value for 'reasoning_effort': '%s'. Supported values are: 'none', "
                                 "'minimal', 'low', 'medium' and 'high'.", brief(s, buf, sizeof buf));
    }
    if ((v = opt(p->root, "chat_template_kwargs"))) {
        bool on;
        if (!json_is_object(v))
            return type_err(e, "chat_template_kwargs", "an object", v);
        int got = get_bool(e, v, "enable_thinking", "chat_template_kwargs.enable_thinking", &on);
        if (got < 0)
            return -1;
        if (got)
            from_kwargs = on;
    }
    p->r->thinking = from_kwargs >= 0 ? from_kwargs : from_effort;
    return 0;
}

static int parse_chat_only(parser *p)
{
    api_error *e = p->e;
    api_request *r = p->r;
    json_t *v;
    if (get_bool(e, p->root, "logprobs", "logprobs", &r->logprobs) < 0)
        return -1;
    json_int_t i;
    int k = get_int(e, p->root, "top_logprobs", "top_logprobs", 0, 20, &i);
    if (k < 0)
        return -1;
    if (k)
        r->top_logprobs = (int)i;
    if (r->top_logprobs > 0 && !r->logprobs)
        return api_error_set(e, 400, T_INVALID, "invalid_value", "top_logprobs",
                             "Invalid 'top_logprobs': it needs \"logprobs\": true.");
    if (parse_thinking(p) < 0)
        return -1;
    if ((v = opt(p->root, "response_format"))) {
        const json_t *t;
        if (!json_is_object(v))
            return type_err(e, "response_format", "an object", v);
        int got = get_str(e, v, "type", "response_format.type", &t);
        if (got < 0)
            return -1;
        if (!got)
            return missing(e, "response_format.type");
        if (strcmp(json_string_value(t), "text") != 0)
            return unsupported(e, "response_format.type",
                               "lilac cannot constrain output to JSON; only \"text\" is accepted");
    }
    return 0;
}

static int parse_chat_body(parser *p)
{
    api_error *e = p->e;
    api_request *r = p->r;
    jb b = {0};
    json_t *msgs = json_array(), *tools = NULL;
    if (!msgs)
        return oom(e);
    int rc = -1;
    if (parse_messages(p, msgs, &b) < 0 || parse_tools(p, &tools) < 0 || parse_tool_choice(p, tools) < 0 ||
        parse_common(p) < 0 || parse_chat_only(p) < 0)
        goto done;
    if (b.bad) {
        oom(e);
        goto done;
    }
    json_t *conv = msgs;
    if (tools && r->tool_choice != API_TOOL_NONE) {
        conv = json_pack("{s:O, s:O}", "messages", msgs, "tools", tools);
        r->n_tools = (int)json_array_size(tools);
    } else {
        json_incref(conv);
    }
    /* no REAL_PRECISION: numbers in tool schemas and arguments must come back to the renderer unchanged */
    r->conversation = conv ? json_dumps(conv, JSON_COMPACT) : NULL;
    json_decref(conv);
    if (!r->conversation) {
        oom(e);
        goto done;
    }
    rc = 0;
done:
    json_decref(msgs);
    return rc;
}

/* ---- completions -------------------------------------------------------------------------------------- */

static int prompt_ids(parser *p, const json_t *arr, const char *param)
{
    api_request *r = p->r;
    size_t n = json_array_size(arr);
    if (n > (size_t)p->lim->max_prompt_ids)
        return api_error_set(p->e, 400, T_INVALID, "array_above_max_length", param,
                             "Invalid '%s': %zu token ids is more than the limit of %d.", param, n,
                             p->lim->max_prompt_ids);
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids)
        return oom(p->e);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        char ip[64];
        snprintf(ip, sizeof ip, "%s[%zu]", param, i);
        if (!json_is_integer(v))
            return type_err(p->e, ip, "a token id (an integer)", v);
        json_int_t t = json_integer_value(v);
        if (t < 0 || t > INT32_MAX)
            return api_error_set(p->e, 400, T_INVALID, "invalid_value", ip,
                                 "Invalid '%s': %" JSON_INTEGER_FORMAT " is not a token id.", ip, t);
        r->prompt_ids[i] = (int32_t)t;
    }
    r->n_prompt_ids = (int)n;
    return 0;
}

/* prompt: a string, an array of one string, an array of token ids, or an array of one array of ids. */
static int parse_prompt(parser *p)
{
    api_error *e = p->e;
    api_request *r = p->r;
    json_t *v = opt(p->root, "prompt");
    const char *want = "a string, an array of one string, or an array of token ids";
    if (!v)
        return missing(e, "prompt");
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if (n == 0)
            return api_error_set(e, 400, T_INVALID, "empty_array", "prompt",
                                 "Invalid 'prompt': empty array. Expected a string or token ids.");
        json_t *first = json_array_get(v, 0);
        if (json_is_integer(first))
            return prompt_ids(p, v, "prompt");
        if (!json_is_string(first) && !json_is_array(first))
            return type_err(e, "prompt[0]", "a string, a token id or an array of token ids", first);
        if (n > 1)
            return unsupported(e, "prompt", "lilac takes one prompt per request, not a batch");
        if (json_is_array(first))
            return prompt_ids(p, first, "prompt[0]");
        v = first;
    } else if (!json_is_string(v)) {
        return type_err(e, "prompt", want, v);
    }
    if (!(r->prompt = dup_str(v)))
        return oom(e);
    r->prompt_len = json_string_length(v);
    return 0;
}

static int parse_completion_body(parser *p)
{
    api_error *e = p->e;
    api_request *r = p->r;
    const json_t *root = p->root, *v;
    json_int_t i;
    bool echo = false;
    int k;
    if (parse_prompt(p) < 0 || parse_common(p) < 0)
        return -1;
    /* completions' logprobs is how many alternatives to list; given at all, the chosen token's too */
    if ((k = get_int(e, root, "logprobs", "logprobs", 0, 5, &i)) < 0)
        return -1;
    if (k)
        r->logprobs = true, r->top_logprobs = (int)i;
    if (get_bool(e, root, "echo", "echo", &echo) < 0)
        return -1;
    if (echo)
        return unsupported(e, "echo", "lilac does not echo the prompt");
    if ((k = get_int(e, root, "best_of", "best_of", 1, JINT_MAX, &i)) < 0)
        return -1;
    if (k && i != 1)
        return unsupported(e, "best_of", "lilac generates one choice per request, so best_of must be 1");
    if ((k = get_str(e, root, "suffix", "suffix", &v)) < 0)
        return -1;
    if (k && json_string_length(v))
        return unsupported(e, "suffix", "lilac does not complete between a prompt and a suffix");
    return 0;
}

/* ---- entry points ------------------------------------------------------------------------------------- */

static int parse(api_kind kind, const char *body, size_t len, const api_limits *lim, api_request **out,
                 api_error *e)
{
    api_limits dl = api_limits_default();
    api_error scratch;
    if (!e)
        e = &scratch;
    if (out)
        *out = NULL;
    if (!lim)
        lim = &dl;
    if (!out || (!body && len))
        return api_error_set(e, 500, "server_error", NULL, NULL, "api_parse: missing argument.");
    if (len > lim->max_body_bytes)
        return api_error_set(e, 413, T_INVALID, "request_too_large", NULL,
                             "Request body of %zu bytes is larger than the limit of %zu bytes.", len,
                             lim->max_body_bytes);
    size_t bad = utf8_check(body ? body : "", len);
    if (bad < len)
        return api_error_set(e, 400, T_INVALID, "invalid_encoding", NULL,
                             "The request body is not valid UTF-8 (byte 0x%02x at offset %zu).",
                             (unsigned char)body[bad], bad);
    json_error_t je;
    /* DECODE_ANY: a scalar body is JSON, just not an object, and gets that error */
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root)
        return api_error_set(e, 400, T_INVALID, "invalid_json", NULL,
                             "The request body is not valid JSON (line %d, column %d): %s.", je.line, je.column,
                             je.text);
    if (!json_is_object(root)) {
        api_error_set(e, 400, T_INVALID, "invalid_type", NULL, "The request body must be a JSON object, not %s.",
                      jtype(root));
        json_decref(root);
        return -1;
    }
    api_request *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(root);
        return oom(e);
    }
    r->kind = kind;
    r->thinking = -1;
    parser p = {.e = e, .lim = lim, .root = root, .r = r};
    int rc = kind == API_CHAT ? parse_chat_body(&p) : parse_completion_body(&p);
    json_decref(root);
    if (rc < 0) {
        api_request_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

int api_parse_chat(const char *body, size_t len, const api_limits *lim, api_request **out, api_error *e)
{
    return parse(API_CHAT, body, len, lim, out, e);
}

int api_parse_completion(const char *body, size_t len, const api_limits *lim, api_request **out, api_error *e)
{
    return parse(API_COMPLETION, body, len, lim, out, e);
}

void api_request_free(api_request *r)
{
    if (!r)
        return;
    free(r->model);
    free(r->conversation);
    free(r->tool_choice_name);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r);
}

void api_request_sampling(const api_request *r, lilac_sampler_params *p)
{
    const lilac_sampler_params *s = &r->sampling;
    unsigned set = r->sampling_set;
    if (set & API_SET_TEMPERATURE)
        p->temperature = s->temperature;
    if (set & API_SET_TOP_P)
        p->top_p = s->top_p;
    if (set & API_SET_TOP_K)
        p->top_k = s->top_k;
    if (set & API_SET_MIN_P)
        p->min_p = s->min_p;
    if (set & API_SET_REPEAT_PENALTY)
        p->repeat_penalty = s->repeat_penalty;
    if (set & API_SET_PRESENCE_PENALTY)
        p->presence_penalty = s->presence_penalty;
    if (set & API_SET_FREQUENCY_PENALTY)
        p->frequency_penalty = s->frequency_penalty;
    if (set & API_SET_PENALTY_LAST_N)
        p->penalty_last_n = s->penalty_last_n;
    if (set & API_SET_SEED)
        p->seed = s->seed;
}

void api_request_gen_params(const api_request *r, lilac_gen_params *p)
{
    if (r->max_tokens > 0)
        p->max_tokens = r->max_tokens;
    if (r->n_stop > 0) {
        p->stop = (const char *const *)r->stop;
        p->n_stop = r->n_stop;
    }
    if (r->ignore_eos)
        p->ignore_eos = true;
    if (r->logprobs)
        p->n_logprobs = r->top_logprobs;
}

/* ---- responses ---------------------------------------------------------------------------------------- */

api_finish api_finish_from(lilac_finish f, bool has_tool_calls)
{
    if (f == LILAC_FINISH_LENGTH || f == LILAC_FINISH_CONTEXT)
        return API_FINISH_LENGTH;
    return has_tool_calls ? API_FINISH_TOOL_CALLS : API_FINISH_STOP;
}

static json_t *finish_reason(api_finish f)
{
    switch (f) {
    case API_FINISH_STOP: return json_string("stop");
    case API_FINISH_LENGTH: return json_string("length");
    case API_FINISH_TOOL_CALLS: return json_string("tool_calls");
    case API_FINISH_NULL: break;
    }
    return json_null();
}

/* OpenAI writes an impossible token's log-probability as -9999.0; JSON has no -Infinity. */
static json_t *jlogprob(float x)
{
    return json_real(isfinite(x) ? (double)x : -9999.0);
}

static json_t *jbytes(jb *b, const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        push(b, a, json_integer((unsigned char)s[i]));
    return a;
}

static json_t *chat_logprobs(jb *b, const api_choice *c)
{
    if (!c->logprobs)
        return json_null();
    json_t *lp = json_object(), *content = put(b, lp, "content", json_array());
    for (int i = 0; i < c->n_tokens; i++) {
        const api_logprob *t = &c->tokens[i];
        json_t *o = push(b, content, json_object());
        put(b, o, "token", jstr(t->text, t->len));
        put(b, o, "logprob", jlogprob(t->logprob));
        put(b, o, "bytes", jbytes(b, t->text, t->len));
        json_t *tops = put(b, o, "top_logprobs", json_array());
        for (int k = 0; k < t->n_top; k++) {
            json_t *to = push(b, tops, json_object());
            put(b, to, "token", jstr(t->top[k].text, t->top[k].len));
            put(b, to, "logprob", jlogprob(t->top[k].logprob));
            put(b, to, "bytes", jbytes(b, t->top[k].text, t->top[k].len));
        }
    }
    put(b, lp, "refusal", json_null());
    return lp;
}

/* {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset} */
static json_t *completion_logprobs(jb *b, const api_choice *c)
{
    if (!c->logprobs)
        return json_null();
    json_t *lp = json_object();
    json_t *toks = put(b, lp, "tokens", json_array()), *lps = put(b, lp, "token_logprobs", json_array());
    json_t *tops = put(b, lp, "top_logprobs", json_array()), *offs = put(b, lp, "text_offset", json_array());
    size_t off = c->text_offset > 0 ? (size_t)c->text_offset : 0;
    for (int i = 0; i < c->n_tokens; i++) {
        const api_logprob *t = &c->tokens[i];
        push(b, toks, jstr(t->text, t->len));
        push(b, lps, jlogprob(t->logprob));
        push(b, offs, json_integer((json_int_t)off));
        off += api_utf8_chars(t->text, t->text ? t->len : 0);
        json_t *d = push(b, tops, json_object());
        for (int k = 0; k < t->n_top; k++) {
            json_t *key = jstr(t->top[k].text, t->top[k].len);
            if (!key) {
                b->bad = true;
                continue;
            }
            /* two alternatives may decode to the same text; the first (more likely) one stays */
            if (!json_object_get(d, json_string_value(key)))
                put(b, d, json_string_value(key), jlogprob(t->top[k].logprob));
            json_decref(key);
        }
    }
    return lp;
}

static json_t *tool_calls_json(jb *b, const api_choice *c, bool delta)
{
    json_t *arr = json_array();
    for (int i = 0; i < c->n_tool_calls; i++) {
        const api_tool_call *tc = &c->tool_calls[i];
        json_t *o = push(b, arr, json_object());
        put(b, o, "index", json_integer(delta ? tc->index : i));
        if (tc->id || !delta)
            put(b, o, "id", jstr(tc->id, tc->id ? strlen(tc->id) : 0));
        if (tc->id || !delta)
            put(b, o, "type", json_string("function"));
        json_t *fn = put(b, o, "function", json_object());
        if (tc->name || !delta)
            put(b, fn, "name", jstr(tc->name, tc->name ? strlen(tc->name) : 0));
        if (tc->arguments || !delta)
            put(b, fn, "arguments", jstr(tc->arguments, tc->arguments ? strlen(tc->arguments) : 0));
    }
    return arr;
}

static json_t *head(jb *b, const api_meta *m, const char *object)
{
    json_t *root = json_object();
    put(b, root, "id", jstr(m->id, m->id ? strlen(m->id) : 0));
    put(b, root, "object", json_string(object));
    put(b, root, "created", json_integer(m->created));
    put(b, root, "model", jstr(m->model, m->model ? strlen(m->model) : 0));
    return root;
}

static json_t *usage_json(jb *b, api_kind kind, const api_usage *u)
{
    json_t *o = json_object();
    put(b, o, "prompt_tokens", json_integer(u->prompt_tokens));
    put(b, o, "completion_tokens", json_integer(u->completion_tokens));
    put(b, o, "total_tokens", json_integer((json_int_t)u->prompt_tokens + u->completion_tokens));
    json_t *pd = put(b, o, "prompt_tokens_details", json_object());
    put(b, pd, "cached_tokens", json_integer(u->cached_tokens));
    if (kind == API_CHAT) {
        json_t *cd = put(b, o, "completion_tokens_details", json_object());
        put(b, cd, "reasoning_tokens", json_integer(u->reasoning_tokens));
    }
    return o;
}

static const api_usage zero_usage;

char *api_chat_response_json(const api_meta *m, const api_choice *c, const api_usage *u)
{
    jb b = {0};
    json_t *root = head(&b, m, "chat.completion");
    json_t *choices = put(&b, root, "choices", json_array());
    json_t *ch = push(&b, choices, json_object());
    put(&b, ch, "index", json_integer(0));
    json_t *msg = put(&b, ch, "message", json_object());
    put(&b, msg, "role", json_string("assistant"));
    put(&b, msg, "content", c->text ? jstr(c->text, c->text_len) : json_null());
    if (c->reasoning && c->reasoning_len)
        put(&b, msg, "reasoning_content", jstr(c->reasoning, c->reasoning_len));
    if (c->n_tool_calls > 0)
        put(&b, msg, "tool_calls", tool_calls_json(&b, c, false));
    put(&b, ch, "logprobs", chat_logprobs(&b, c));
    put(&b, ch, "finish_reason", finish_reason(c->finish));
    put(&b, root, "usage", usage_json(&b, API_CHAT, u ? u : &zero_usage));
    return finish_json(&b, root);
}

char *api_chat_chunk_json(const api_meta *m, const api_choice *c, bool usage_null)
{
    jb b = {0};
    json_t *root = head(&b, m, "chat.completion.chunk");
    json_t *choices = put(&b, root, "choices", json_array());
    json_t *ch = push(&b, choices, json_object());
    put(&b, ch, "index", json_integer(0));
    json_t *delta = put(&b, ch, "delta", json_object());
    if (c->role)
        put(&b, delta, "role", json_string("assistant"));
    if (c->text)
        put(&b, delta, "content", jstr(c->text, c->text_len));
    if (c->reasoning && c->reasoning_len)
        put(&b, delta, "reasoning_content", jstr(c->reasoning, c->reasoning_len));
    if (c->n_tool_calls > 0)
        put(&b, delta, "tool_calls", tool_calls_json(&b, c, true));
    put(&b, ch, "logprobs", chat_logprobs(&b, c));
    put(&b, ch, "finish_reason", finish_reason(c->finish));
    if (usage_null)
        put(&b, root, "usage", json_null());
    return finish_json(&b, root);
}

static char *completion_json(const api_meta *m, const api_choice *c, const api_usage *u, bool chunk,
                             bool usage_null)
{
    jb b = {0};
    json_t *root = head(&b, m, "text_completion");
    json_t *choices = put(&b, root, "choices", json_array());
    json_t *ch = push(&b, choices, json_object());
    put(&b, ch, "text", jstr(c->text, c->text ? c->text_len : 0));
    put(&b, ch, "index", json_integer(0));
    put(&b, ch, "logprobs", completion_logprobs(&b, c));
    put(&b, ch, "finish_reason", finish_reason(c->finish));
    if (!chunk)
        put(&b, root, "usage", usage_json(&b, API_COMPLETION, u ? u : &zero_usage));
    else if (usage_null)
        put(&b, root, "usage", json_null());
    return finish_json(&b, root);
}

char *api_completion_response_json(const api_meta *m, const api_choice *c, const api_usage *u)
{
    return completion_json(m, c, u, false, false);
}

char *api_completion_chunk_json(const api_meta *m, const api_choice *c, bool usage_null)
{
    return completion_json(m, c, NULL, true, usage_null);
}

char *api_usage_chunk_json(const api_meta *m, api_kind kind, const api_usage *u)
{
    jb b = {0};
    json_t *root = head(&b, m, kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    put(&b, root, "choices", json_array());
    put(&b, root, "usage", usage_json(&b, kind, u ? u : &zero_usage));
    return finish_json(&b, root);
}

char *api_models_json(const api_model_info *models, int n)
{
    jb b = {0};
    json_t *root = json_object();
    put(&b, root, "object", json_string("list"));
    json_t *data = put(&b, root, "data", json_array());
    for (int i = 0; i < n; i++) {
        const api_model_info *mi = &models[i];
        json_t *o = push(&b, data, json_object());
        put(&b, o, "id", jstr(mi->id, mi->id ? strlen(mi->id) : 0));
        put(&b, o, "object", json_string("model"));
        put(&b, o, "created", json_integer(mi->created));
        const char *owner = mi->owned_by ? mi->owned_by : "lilac";
        put(&b, o, "owned_by", jstr(owner, strlen(owner)));
    }
    return finish_json(&b, root);
}

char *api_sse_data(const char *json)
{
    size_t n = json ? strlen(json) : 0;
    char *s = malloc(n + 9);
    if (!s)
        return NULL;
    memcpy(s, "data: ", 6);
    if (n)
        memcpy(s + 6, json, n);
    memcpy(s + 6 + n, "\n\n", 3);
    return s;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void api_make_id(char *buf, size_t cap, const char *prefix, uint64_t n)
{
    uint64_t a = splitmix64(n), b = splitmix64(a ^ n);
    snprintf(buf, cap, "%s%016llx%08llx", prefix ? prefix : "", (unsigned long long)a,
             (unsigned long long)(b >> 32));
}

/* ---- authentication ----------------------------------------------------------------------------------- */

bool api_check_bearer(const char *h, const char *key)
{
    if (!h || !key || !*key)
        return false;
    while (*h == ' ' || *h == '\t')
        h++;
    static const char scheme[] = "bearer";
    for (size_t i = 0; i < sizeof scheme - 1; i++, h++) {
        char c = *h;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != scheme[i])
            return false;
    }
    if (*h != ' ' && *h != '\t')
        return false;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t tlen = strlen(h), klen = strlen(key);
    while (tlen > 0 && (h[tlen - 1] == ' ' || h[tlen - 1] == '\t'))
        tlen--;
    /* every byte of the longer string is looked at, and differences are only accumulated: no early exit
     * tells an attacker how much of a guess was right */
    size_t n = tlen > klen ? tlen : klen;
    volatile unsigned char acc = (unsigned char)(tlen != klen);
    for (size_t i = 0; i < n; i++) {
        unsigned char a = i < tlen ? (unsigned char)h[i] : 0, b = i < klen ? (unsigned char)key[i] : 0;
        acc |= (unsigned char)(a ^ b);
    }
    return acc == 0;
}
