/* chat: the Qwen3 and Qwen3.5 chat templates, written out by hand.
 *
 * Each renderer below follows its Jinja template statement by statement;
 * the comments quote the template where the logic is not obvious. Python
 * string semantics are kept where the templates use them: str.strip() (the
 * `trim` filter) strips Unicode whitespace, strip('\n') only newlines,
 * split(s)[0] is the text before the first s and split(s)[-1] the text after
 * the last; `tojson` is json.dumps(x, ensure_ascii=False); `string` of a
 * number, bool or None is Python's str(). */
#include "engine/chat.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/pyjson.h"
#include "util/sbuf.h"

/* ---- strings ------------------------------------------------------------- */

/* A view of a string: p[0..n), not NUL-terminated in general. */
typedef struct sv {
    const char *p;
    size_t n;
} sv;

static sv sv_c(const char *s)
{
    return (sv){s, strlen(s)};
}

static bool sv_starts(sv s, const char *pre)
{
    size_t k = strlen(pre);
    return s.n >= k && memcmp(s.p, pre, k) == 0;
}

static bool sv_ends(sv s, const char *suf)
{
    size_t k = strlen(suf);
    return s.n >= k && memcmp(s.p + s.n - k, suf, k) == 0;
}

/* Offset of the first / last occurrence of pat, or -1. */
static ptrdiff_t sv_find(sv s, const char *pat)
{
    size_t k = strlen(pat);
    if (k > s.n)
        return -1;
    for (size_t i = 0; i + k <= s.n; i++)
        if (memcmp(s.p + i, pat, k) == 0)
            return (ptrdiff_t)i;
    return -1;
}

static ptrdiff_t sv_rfind(sv s, const char *pat)
{
    size_t k = strlen(pat);
    if (k > s.n)
        return -1;
    for (size_t i = s.n - k + 1; i-- > 0;)
        if (memcmp(s.p + i, pat, k) == 0)
            return (ptrdiff_t)i;
    return -1;
}

/* Python's s.split(pat)[0]: the text before the first pat (all of s if none). */
static sv split_first(sv s, const char *pat)
{
    ptrdiff_t i = sv_find(s, pat);
    return i < 0 ? s : (sv){s.p, (size_t)i};
}

/* Python's s.split(pat)[-1]: the text after the last pat (all of s if none). */
static sv split_last(sv s, const char *pat)
{
    ptrdiff_t i = sv_rfind(s, pat);
    if (i < 0)
        return s;
    size_t k = (size_t)i + strlen(pat);
    return (sv){s.p + k, s.n - k};
}

static sv lstrip_nl(sv s)
{
    while (s.n && s.p[0] == '\n')
        s.p++, s.n--;
    return s;
}

static sv rstrip_nl(sv s)
{
    while (s.n && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

static sv strip_nl(sv s)
{
    return rstrip_nl(lstrip_nl(s));
}

/* The code point at p (n bytes available); its length, or 0 if not valid UTF-8. */
static size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = p[0];
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3f);
    }
    *cp = v;
    return len;
}

/* Python's str.isspace() for one code point. */
static bool py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* Jinja's `trim` filter: Python's str.strip(), Unicode whitespace. */
static sv py_trim(sv s)
{
    uint32_t cp;
    size_t k;
    while (s.n && (k = utf8_decode((const unsigned char *)s.p, s.n, &cp)) && py_isspace(cp))
        s.p += k, s.n -= k;
    while (s.n) {
        size_t start = s.n - 1;
        while (start > 0 && ((unsigned char)s.p[start] & 0xc0) == 0x80 && s.n - start < 4)
            start--;
        k = utf8_decode((const unsigned char *)s.p + start, s.n - start, &cp);
        if (k != s.n - start || !py_isspace(cp))
            break;
        s.n = start;
    }
    return s;
}

static void sb_sv(sbuf *b, sv s)
{
    sb_putn(b, s.p, s.n);
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* s as it may go into a one-line error message: control characters as '?',
 * cut (at a character boundary) to fit buf. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (; s[n] && n + 1 < cap; n++)
        buf[n] = ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) ? '?' : s[n];
    if (s[n]) /* cut: not inside a UTF-8 sequence */
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    buf[n] = 0;
    return buf;
}

/* ---- the conversation, checked and normalized ----------------------------- */

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };
static const char *const role_names[] = {"system", "user", "assistant", "tool"};

typedef struct ccall {
    sv name;
    json_t *args; /* an object (own reference), or NULL when absent */
} ccall;

typedef struct cmsg {
    int role;
    sv content;          /* "" when null or absent */
    char *owned;         /* content joined from text parts */
    bool has_reasoning;  /* reasoning_content is a string */
    sv reasoning;
    ccall *calls;
    size_t n_calls;
} cmsg;

static void free_msgs(cmsg *ms, size_t n)
{
    if (!ms)
        return;
    for (size_t i = 0; i < n; i++) {
        free(ms[i].owned);
        for (size_t j = 0; j < ms[i].n_calls; j++)
            json_decref(ms[i].calls[j].args);
        free(ms[i].calls);
    }
    free(ms);
}

/* A string value as text: one without NUL bytes (it goes into a C string). */
static bool text_of(const json_t *v, sv *out)
{
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (!s || memchr(s, 0, n))
        return false;
    *out = (sv){s, n};
    return true;
}

/* NULL when v is a string text_of() takes (filling out), else what is wrong
 * with it, for an error message. */
static const char *text_problem(const json_t *v, sv *out, char *buf, size_t cap)
{
    if (!json_is_string(v)) {
        snprintf(buf, cap, "must be a string, not %s", json_kind(v));
        return buf;
    }
    return text_of(v, out) ? NULL : "contains a NUL character";
}

static bool str_is(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* The template's render_content (Qwen3.5): a string as it is, text parts
 * concatenated, null or absent as "". Qwen3's template concatenates strings
 * only; lilac gives it the same text for an array of parts. */
static lilac_status norm_content(const json_t *m, size_t i, cmsg *cm, lilac_error *err)
{
    const json_t *c = json_object_get(m, "content");
    cm->content = sv_c("");
    if (!c || json_is_null(c))
        return LILAC_OK;
    if (json_is_string(c)) {
        if (!text_of(c, &cm->content))
            return lilac_fail(err, LILAC_E_ARG, "message %zu: content contains a NUL character", i);
        return LILAC_OK;
    }
    if (!json_is_array(c))
        return lilac_fail(err, LILAC_E_ARG,
                          "message %zu: content must be a string or an array of text parts, not %s", i,
                          json_kind(c));
    sbuf b = {0};
    size_t k;
    const json_t *part;
    lilac_status st = LILAC_OK;
    json_array_foreach(c, k, part) {
        if (!json_is_object(part)) {
            st = lilac_fail(err, LILAC_E_ARG, "message %zu: content part %zu is %s, not an object", i, k,
                            json_kind(part));
            break;
        }
        const json_t *type = json_object_get(part, "type");
        sv text;
        char whybuf[64];
        const char *why;
        if (json_object_get(part, "image") || json_object_get(part, "image_url") || str_is(type, "image")) {
            st = lilac_fail(err, LILAC_E_UNSUPPORTED,
                            "message %zu: content part %zu is an image: lilac runs text-only models", i, k);
            break;
        } else if (json_object_get(part, "video") || str_is(type, "video")) {
            st = lilac_fail(err, LILAC_E_UNSUPPORTED,
                            "message %zu: content part %zu is a video: lilac runs text-only models", i, k);
            break;
        } else if (!json_object_get(part, "text")) {
            st = lilac_fail(err, LILAC_E_ARG, "message %zu: content part %zu has no \"text\"", i, k);
            break;
        } else if ((why = text_problem(json_object_get(part, "text"), &text, whybuf, sizeof whybuf))) {
            st = lilac_fail(err, LILAC_E_ARG, "message %zu: content part %zu: \"text\" %s", i, k, why);
            break;
        }
        sb_sv(&b, text);
    }
    if (st == LILAC_OK && !b.p)
        sb_puts(&b, "");
    if (st == LILAC_OK && b.oom)
        st = lilac_fail(err, LILAC_E_NOMEM, "out of memory joining message %zu's content", i);
    if (st != LILAC_OK) {
        free(b.p);
        return st;
    }
    cm->owned = b.p;
    cm->content = (sv){b.p, b.n};
    return LILAC_OK;
}

/* An assistant's tool_calls: each {"function": {"name", "arguments"}} or the
 * flat {"name", "arguments"}; arguments an object or a string holding one. */
static lilac_status norm_calls(chat_style style, const json_t *m, size_t i, cmsg *cm, lilac_error *err)
{
    const json_t *tc = json_object_get(m, "tool_calls");
    if (!tc || json_is_null(tc))
        return LILAC_OK;
    if (!json_is_array(tc))
        return lilac_fail(err, LILAC_E_ARG, "message %zu: tool_calls must be an array, not %s", i,
                          json_kind(tc));
    size_t n = json_array_size(tc);
    if (n == 0)
        return LILAC_OK;
    cm->calls = calloc(n, sizeof *cm->calls);
    if (!cm->calls)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    for (size_t j = 0; j < n; j++) {
        const json_t *call = json_array_get(tc, j);
        if (!json_is_object(call))
            return lilac_fail(err, LILAC_E_ARG, "message %zu: tool call %zu is %s, not an object", i, j,
                              json_kind(call));
        const json_t *fn = json_object_get(call, "function");
        if (fn && !json_is_null(fn)) {
            if (!json_is_object(fn))
                return lilac_fail(err, LILAC_E_ARG, "message %zu: tool call %zu: \"function\" must be an object",
                                  i, j);
        } else {
            fn = call;
        }
        ccall *cc = &cm->calls[j];
        cm->n_calls = j + 1;
        const json_t *name = json_object_get(fn, "name");
        if (!name)
            return lilac_fail(err, LILAC_E_ARG, "message %zu: tool call %zu has no function name", i, j);
        char whybuf[64];
        const char *why = text_problem(name, &cc->name, whybuf, sizeof whybuf);
        if (why)
            return lilac_fail(err, LILAC_E_ARG, "message %zu: tool call %zu: the function name %s", i, j, why);
        const json_t *a = json_object_get(fn, "arguments");
        if (!a) {
            /* Qwen3.5: `if tool_call.arguments is defined`; Qwen3 serializes
             * them unconditionally, which fails in the template. */
            if (style == CHAT_STYLE_QWEN3)
                return lilac_fail(err, LILAC_E_ARG, "message %zu: tool call %zu has no arguments", i, j);
            continue;
        }
        if (json_is_string(a)) {
            json_error_t je;
            json_t *parsed = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY, &je);
            char pr[sizeof je.text];
            if (!parsed)
                return lilac_fail(err, LILAC_E_ARG,
                                  "message %zu: tool call %zu: arguments are not valid JSON (column %d: %s)", i, j,
                                  je.column, printable(je.text, pr, sizeof pr));
            if (!json_is_object(parsed)) {
                lilac_status st = lilac_fail(err, LILAC_E_ARG,
                                             "message %zu: tool call %zu: arguments must hold a JSON object, not %s",
                                             i, j, json_kind(parsed));
                json_decref(parsed);
                return st;
            }
            cc->args = parsed;
        } else if (json_is_object(a)) {
            cc->args = json_incref((json_t *)a);
        } else {
            return lilac_fail(err, LILAC_E_ARG,
                              "message %zu: tool call %zu: arguments must be an object or a string holding one, "
                              "not %s", i, j, json_kind(a));
        }
    }
    return LILAC_OK;
}

static lilac_status norm_messages(chat_style style, const json_t *messages, cmsg **out, lilac_error *err)
{
    size_t n = json_array_size(messages);
    cmsg *ms = calloc(n ? n : 1, sizeof *ms);
    if (!ms)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    lilac_status st = LILAC_OK;
    for (size_t i = 0; i < n && st == LILAC_OK; i++) {
        const json_t *m = json_array_get(messages, i);
        cmsg *cm = &ms[i];
        if (!json_is_object(m)) {
            st = lilac_fail(err, LILAC_E_ARG, "message %zu is %s, not an object", i, json_kind(m));
            break;
        }
        const json_t *role = json_object_get(m, "role");
        if (!role) {
            st = lilac_fail(err, LILAC_E_ARG, "message %zu has no role", i);
            break;
        }
        if (!json_is_string(role)) {
            st = lilac_fail(err, LILAC_E_ARG, "message %zu: role must be a string, not %s", i, json_kind(role));
            break;
        }
        cm->role = -1;
        for (int r = 0; r < 4; r++)
            if (strcmp(json_string_value(role), role_names[r]) == 0)
                cm->role = r;
        if (cm->role < 0) {
            char pr[128];
            st = lilac_fail(err, LILAC_E_ARG, "message %zu: unknown role '%s' (expected system, user, "
                            "assistant or tool)", i, printable(json_string_value(role), pr, sizeof pr));
            break;
        }
        st = norm_content(m, i, cm, err);
        if (st != LILAC_OK || cm->role != ROLE_ASSISTANT)
            continue;
        const json_t *rc = json_object_get(m, "reasoning_content");
        if (rc && !json_is_null(rc)) {
            char whybuf[64];
            const char *why = text_problem(rc, &cm->reasoning, whybuf, sizeof whybuf);
            if (why) {
                st = lilac_fail(err, LILAC_E_ARG, "message %zu: reasoning_content %s", i, why);
                break;
            }
            cm->has_reasoning = true;
        }
        st = norm_calls(style, m, i, cm, err);
    }
    if (st != LILAC_OK) {
        free_msgs(ms, n);
        return st;
    }
    *out = ms;
    return LILAC_OK;
}

/* ---- Qwen3 ---------------------------------------------------------------- */

static const char QWEN3_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN3_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

static lilac_status render_qwen3(sbuf *b, const cmsg *ms, size_t n, const json_t *tools, bool gen, bool think_off,
                                 lilac_error *err)
{
    lilac_status st;
    size_t n_tools = json_array_size(tools);
    /* {%- if tools %} */
    if (n_tools) {
        sb_puts(b, "<|im_start|>system\n");
        if (ms[0].role == ROLE_SYSTEM) {
            sb_sv(b, ms[0].content);
            sb_puts(b, "\n\n");
        }
        sb_puts(b, QWEN3_TOOLS_HEAD);
        for (size_t t = 0; t < n_tools; t++) {
            sb_puts(b, "\n");
            if ((st = py_json(b, json_array_get(tools, t), 0, err)) != LILAC_OK)
                return st;
        }
        sb_puts(b, QWEN3_TOOLS_TAIL);
    } else if (ms[0].role == ROLE_SYSTEM) {
        sb_puts(b, "<|im_start|>system\n");
        sb_sv(b, ms[0].content);
        sb_puts(b, "<|im_end|>\n");
    }

    /* The last user message that is not a wrapped tool response; reasoning
     * is shown only after it. Without one, nowhere. */
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        if (ms[k].role == ROLE_USER &&
            !(sv_starts(ms[k].content, "<tool_response>") && sv_ends(ms[k].content, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    for (size_t i = 0; i < n; i++) {
        const cmsg *m = &ms[i];
        if (m->role == ROLE_USER || (m->role == ROLE_SYSTEM && i != 0)) {
            sb_puts(b, "<|im_start|>");
            sb_puts(b, role_names[m->role]);
            sb_puts(b, "\n");
            sb_sv(b, m->content);
            sb_puts(b, "<|im_end|>\n");
        } else if (m->role == ROLE_ASSISTANT) {
            sv content = m->content, reasoning = sv_c("");
            if (m->has_reasoning) {
                reasoning = m->reasoning;
            } else if (sv_find(m->content, "</think>") >= 0) {
                content = lstrip_nl(split_last(m->content, "</think>"));
                reasoning = lstrip_nl(split_last(rstrip_nl(split_first(m->content, "</think>")), "<think>"));
            }
            sb_puts(b, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                sb_puts(b, "<think>\n");
                sb_sv(b, strip_nl(reasoning));
                sb_puts(b, "\n</think>\n\n");
                sb_sv(b, lstrip_nl(content));
            } else {
                sb_sv(b, content);
            }
            for (size_t j = 0; j < m->n_calls; j++) {
                if (j > 0 || content.n)
                    sb_puts(b, "\n");
                sb_puts(b, "<tool_call>\n{\"name\": \"");
                sb_sv(b, m->calls[j].name);
                sb_puts(b, "\", \"arguments\": ");
                if ((st = py_json(b, m->calls[j].args, 0, err)) != LILAC_OK)
                    return st;
                sb_puts(b, "}\n</tool_call>");
            }
            sb_puts(b, "<|im_end|>\n");
        } else if (m->role == ROLE_TOOL) {
            if (i == 0 || ms[i - 1].role != ROLE_TOOL)
                sb_puts(b, "<|im_start|>user");
            sb_puts(b, "\n<tool_response>\n");
            sb_sv(b, m->content);
            sb_puts(b, "\n</tool_response>");
            if (i == n - 1 || ms[i + 1].role != ROLE_TOOL)
                sb_puts(b, "<|im_end|>\n");
        }
        /* a leading system message was written above */
    }

    if (gen) {
        sb_puts(b, "<|im_start|>assistant\n");
        if (think_off)
            sb_puts(b, "<think>\n\n</think>\n\n");
    }
    return LILAC_OK;
}

/* ---- Qwen3.5 -------------------------------------------------------------- */

static const char QWEN35_TOOLS_HEAD[] =
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char QWEN35_TOOLS_TAIL[] =
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\n"
    "multiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be "
    "nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function "
    "call, but NOT after\n- If there is no function call available, answer the question like normal with "
    "your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

/* A parameter value: tojson for objects and arrays, else Python's str(). */
static lilac_status qwen35_value(sbuf *b, const json_t *v, size_t i, size_t j, const char *key, lilac_error *err)
{
    char num[64];
    sv s;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
    case JSON_ARRAY: return py_json(b, v, 0, err);
    case JSON_STRING:
        if (!text_of(v, &s)) {
            char pr[128];
            return lilac_fail(err, LILAC_E_ARG, "message %zu: tool call %zu: argument '%s' contains a NUL "
                              "character", i, j, printable(key, pr, sizeof pr));
        }
        sb_sv(b, s);
        return LILAC_OK;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_puts(b, num);
        return LILAC_OK;
    case JSON_REAL:
        if (isnan(json_real_value(v)))
            snprintf(num, sizeof num, "nan");
        else if (isinf(json_real_value(v)))
            snprintf(num, sizeof num, "%s", json_real_value(v) < 0 ? "-inf" : "inf");
        else
            py_float(json_real_value(v), num, sizeof num);
        sb_puts(b, num);
        return LILAC_OK;
    case JSON_TRUE: sb_puts(b, "True"); return LILAC_OK;
    case JSON_FALSE: sb_puts(b, "False"); return LILAC_OK;
    case JSON_NULL: sb_puts(b, "None"); return LILAC_OK;
    }
    return lilac_fail(err, LILAC_E_INTERNAL, "unknown JSON value type");
}

static lilac_status render_qwen35(sbuf *b, const cmsg *ms, size_t n, const json_t *tools, bool gen,
                                  bool think_off, lilac_error *err)
{
    lilac_status st;

    /* The template's checks, before anything is written. */
    /* {%- if ns.multi_step_tool %} raise 'No user query found in messages.' */
    size_t last_query = n;
    for (size_t k = n; k-- > 0;) {
        if (ms[k].role != ROLE_USER)
            continue;
        sv c = py_trim(ms[k].content);
        if (!(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    if (last_query == n)
        return lilac_fail(err, LILAC_E_ARG, "no user query found in messages (the Qwen3.5 template needs a user "
                          "message that is not a tool response)");
    for (size_t i = 1; i < n; i++)
        if (ms[i].role == ROLE_SYSTEM)
            return lilac_fail(err, LILAC_E_ARG, "message %zu: a system message must be the first message", i);
    /* `{%- if loop.previtem and ... %}`: a tool response that opens the
     * conversation would get no user turn header. */
    if (ms[0].role == ROLE_TOOL)
        return lilac_fail(err, LILAC_E_ARG, "message 0: a tool response cannot be the first message");

    size_t n_tools = json_array_size(tools);
    if (n_tools) {
        sb_puts(b, QWEN35_TOOLS_HEAD);
        for (size_t t = 0; t < n_tools; t++) {
            sb_puts(b, "\n");
            if ((st = py_json(b, json_array_get(tools, t), 0, err)) != LILAC_OK)
                return st;
        }
        sb_puts(b, QWEN35_TOOLS_TAIL);
        if (ms[0].role == ROLE_SYSTEM) {
            sv c = py_trim(ms[0].content);
            if (c.n) {
                sb_puts(b, "\n\n");
                sb_sv(b, c);
            }
        }
        sb_puts(b, "<|im_end|>\n");
    } else if (ms[0].role == ROLE_SYSTEM) {
        sb_puts(b, "<|im_start|>system\n");
        sb_sv(b, py_trim(ms[0].content));
        sb_puts(b, "<|im_end|>\n");
    }

    for (size_t i = 0; i < n; i++) {
        const cmsg *m = &ms[i];
        sv content = py_trim(m->content);
        if (m->role == ROLE_USER) {
            sb_puts(b, "<|im_start|>user\n");
            sb_sv(b, content);
            sb_puts(b, "<|im_end|>\n");
        } else if (m->role == ROLE_ASSISTANT) {
            sv reasoning = sv_c("");
            if (m->has_reasoning) {
                reasoning = m->reasoning;
            } else if (sv_find(content, "</think>") >= 0) {
                reasoning = lstrip_nl(split_last(rstrip_nl(split_first(content, "</think>")), "<think>"));
                content = lstrip_nl(split_last(content, "</think>"));
            }
            reasoning = py_trim(reasoning);
            sb_puts(b, "<|im_start|>assistant\n");
            if (i > last_query) {
                sb_puts(b, "<think>\n");
                sb_sv(b, reasoning);
                sb_puts(b, "\n</think>\n\n");
            }
            sb_sv(b, content);
            for (size_t j = 0; j < m->n_calls; j++) {
                const ccall *cc = &m->calls[j];
                if (j == 0)
                    sb_puts(b, py_trim(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
                else
                    sb_puts(b, "\n<tool_call>\n<function=");
                sb_sv(b, cc->name);
                sb_puts(b, ">\n");
                if (cc->args) {
                    const char *key;
                    json_t *val;
                    json_object_foreach(cc->args, key, val) {
                        sb_puts(b, "<parameter=");
                        sb_puts(b, key);
                        sb_puts(b, ">\n");
                        if ((st = qwen35_value(b, val, i, j, key, err)) != LILAC_OK)
                            return st;
                        sb_puts(b, "\n</parameter>\n");
                    }
                }
                sb_puts(b, "</function>\n</tool_call>");
            }
            sb_puts(b, "<|im_end|>\n");
        } else if (m->role == ROLE_TOOL) {
            if (i > 0 && ms[i - 1].role != ROLE_TOOL)
                sb_puts(b, "<|im_start|>user");
            sb_puts(b, "\n<tool_response>\n");
            sb_sv(b, content);
            sb_puts(b, "\n</tool_response>");
            if (i == n - 1 || ms[i + 1].role != ROLE_TOOL)
                sb_puts(b, "<|im_end|>\n");
        }
        /* the system message (first, as checked) was written above */
    }

    if (gen) {
        sb_puts(b, "<|im_start|>assistant\n");
        sb_puts(b, think_off ? "<think>\n\n</think>\n\n" : "<think>\n");
    }
    return LILAC_OK;
}

/* ---- the API ---------------------------------------------------------------- */

lilac_status chat_render(chat_style style, const json_t *messages, const json_t *tools, const chat_opts *o,
                         char **out, lilac_error *err)
{
    if (!out)
        return lilac_fail(err, LILAC_E_ARG, "chat_render: no output pointer");
    *out = NULL;
    if (style != CHAT_STYLE_QWEN3 && style != CHAT_STYLE_QWEN35)
        return lilac_fail(err, LILAC_E_ARG, "chat_render: unknown chat style %d", (int)style);
    if (!messages || !json_is_array(messages))
        return lilac_fail(err, LILAC_E_ARG, "messages must be a JSON array");
    if (tools && json_is_null(tools))
        tools = NULL;
    if (tools && !json_is_array(tools))
        return lilac_fail(err, LILAC_E_ARG, "tools must be a JSON array, not %s", json_kind(tools));
    size_t n = json_array_size(messages);
    if (n == 0)
        return lilac_fail(err, LILAC_E_ARG, "no messages provided");
    chat_opts def = {0};
    if (!o)
        o = &def;
    bool think_off = o->enable_thinking_set && !o->enable_thinking;

    cmsg *ms = NULL;
    lilac_status st = norm_messages(style, messages, &ms, err);
    if (st != LILAC_OK)
        return st;
    sbuf b = {0};
    if (style == CHAT_STYLE_QWEN3)
        st = render_qwen3(&b, ms, n, tools, o->add_generation_prompt, think_off, err);
    else
        st = render_qwen35(&b, ms, n, tools, o->add_generation_prompt, think_off, err);
    free_msgs(ms, n);
    if (st == LILAC_OK && !b.p)
        sb_puts(&b, "");
    if (st == LILAC_OK && b.oom)
        st = lilac_fail(err, LILAC_E_NOMEM, "out of memory rendering the conversation");
    if (st != LILAC_OK) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return LILAC_OK;
}

lilac_status chat_style_detect(const char *t, chat_style *out, lilac_error *err)
{
    if (!t || !out)
        return lilac_fail(err, LILAC_E_ARG, "chat_style_detect: no template");
    /* Both: ChatML turns, <think> blocks with an enable_thinking switch,
     * tool responses in <tool_response>. */
    bool family = strstr(t, "<|im_start|>") && strstr(t, "<|im_end|>") && strstr(t, "</think>") &&
                  strstr(t, "enable_thinking") && strstr(t, "<tool_response>");
    if (family && strstr(t, "<function=") && strstr(t, "<parameter=")) {
        *out = CHAT_STYLE_QWEN35;
        return LILAC_OK;
    }
    if (family && strstr(t, "<args-json-object>") && strstr(t, "{\"name\": ")) {
        *out = CHAT_STYLE_QWEN3;
        return LILAC_OK;
    }
    return lilac_fail(err, LILAC_E_UNSUPPORTED,
                      "unsupported chat template: lilac renders the Qwen3 and Qwen3.5 ChatML templates");
}

lilac_status chat_parse_conversation(const char *json_text, json_t **messages, json_t **tools, lilac_error *err)
{
    if (messages)
        *messages = NULL;
    if (tools)
        *tools = NULL;
    if (!json_text || !messages || !tools)
        return lilac_fail(err, LILAC_E_ARG, "chat_parse_conversation: missing argument");
    json_error_t je;
    json_t *root = json_loads(json_text, JSON_DECODE_ANY, &je);
    char pr[sizeof je.text];
    if (!root)
        return lilac_fail(err, LILAC_E_ARG, "conversation: invalid JSON at line %d, column %d: %s", je.line,
                          je.column, printable(je.text, pr, sizeof pr));
    if (json_is_array(root)) {
        *messages = root;
        return LILAC_OK;
    }
    if (!json_is_object(root)) {
        lilac_status st = lilac_fail(err, LILAC_E_ARG,
                                     "conversation: expected an array of messages or an object with "
                                     "\"messages\", not %s", json_kind(root));
        json_decref(root);
        return st;
    }
    json_t *m = json_object_get(root, "messages"), *t = json_object_get(root, "tools");
    lilac_status st = LILAC_OK;
    if (!m)
        st = lilac_fail(err, LILAC_E_ARG, "conversation: no \"messages\"");
    else if (!json_is_array(m))
        st = lilac_fail(err, LILAC_E_ARG, "conversation: \"messages\" must be an array, not %s", json_kind(m));
    else if (t && !json_is_null(t) && !json_is_array(t))
        st = lilac_fail(err, LILAC_E_ARG, "conversation: \"tools\" must be an array, not %s", json_kind(t));
    if (st == LILAC_OK) {
        *messages = json_incref(m);
        *tools = t && !json_is_null(t) ? json_incref(t) : NULL;
    }
    json_decref(root);
    return st;
}
