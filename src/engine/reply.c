/* reply: the streaming split of generated text into reasoning, content and
 * tool calls (see reply.h).
 *
 * Unread input waits in `pend`; each call decides as much of it as it can
 * and keeps the rest, which is never more than the start of a tag (plus, in
 * the opening states, nothing at all: leading whitespace is dropped there).
 * Text goes out through two channels, reasoning and content, that trim
 * their text as it passes: leading whitespace is dropped, and a run of
 * whitespace is held until text follows it (then it goes out first) or a tag
 * or the end does (then it is dropped). */
#include "engine/reply.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/pyjson.h"

static const char T_THINK[] = "<think>";
static const char T_END_THINK[] = "</think>";
static const char T_CALL[] = "<tool_call>";
static const char T_END_CALL[] = "</tool_call>";

/* ---- buffers ---------------------------------------------------------------- */

typedef struct rbuf {
    char *p;
    size_t n, cap;
} rbuf;

enum {
    ST_OPEN,       /* nothing decided yet; content unless <think> comes first */
    ST_THINK_OPEN, /* the same, inside the reasoning the prompt opened: a repeated <think> is dropped */
    ST_REASONING,
    ST_CONTENT,
    ST_TOOL, /* inside <tool_call>, collecting its body */
};

enum { CH_REASONING, CH_CONTENT };

typedef struct chan {
    bool started; /* some text went out: whitespace is now held, not dropped */
    rbuf ws;      /* the held whitespace */
} chan;

/* An event while its texts may still move (offsets into out). */
typedef struct ev {
    reply_kind kind;
    size_t off, len, name_off, args_off;
    int index;
} ev;

struct reply_parser {
    chat_style style;
    json_t *tools; /* a non-empty array, or NULL: no tool-call parsing */
    int state;
    bool finished, oom;
    rbuf pend;    /* input not decided yet */
    rbuf body;    /* the open tool call's text */
    rbuf call_ws; /* the content whitespace before the open tool call, put back if it fails */
    chan ch[2];
    rbuf out; /* this call's event texts, each NUL-terminated */
    ev *evs;
    size_t n_evs, cap_evs;
    reply_event *pub;
    size_t cap_pub;
    int n_calls;
    bool malformed;
    char why[160];
};

static void rb_put(reply_parser *r, rbuf *b, const char *s, size_t n)
{
    if (r->oom || n == 0)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) {
            if (cap > SIZE_MAX / 2) {
                r->oom = true;
                return;
            }
            cap *= 2;
        }
        char *q = realloc(b->p, cap);
        if (!q) {
            r->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool starts(const char *p, const char *e, const char *pre)
{
    size_t k = strlen(pre);
    return (size_t)(e - p) >= k && memcmp(p, pre, k) == 0;
}

/* ---- events ------------------------------------------------------------------ */

static ev *push_ev(reply_parser *r)
{
    if (r->oom)
        return NULL;
    if (r->n_evs == r->cap_evs) {
        size_t cap = r->cap_evs ? r->cap_evs * 2 : 8;
        ev *q = realloc(r->evs, cap * sizeof *q);
        if (!q) {
            r->oom = true;
            return NULL;
        }
        r->evs = q;
        r->cap_evs = cap;
    }
    ev *e = &r->evs[r->n_evs++];
    memset(e, 0, sizeof *e);
    return e;
}

static void emit_text(reply_parser *r, reply_kind kind, const char *s, size_t n)
{
    if (n == 0 || r->oom)
        return;
    ev *last = r->n_evs ? &r->evs[r->n_evs - 1] : NULL;
    if (last && last->kind == kind) {
        r->out.n--; /* its NUL: the new text extends it */
        last->len += n;
    } else {
        ev *e = push_ev(r);
        if (!e)
            return;
        e->kind = kind;
        e->off = r->out.n;
        e->len = n;
    }
    rb_put(r, &r->out, s, n);
    rb_put(r, &r->out, "", 1);
}

/* Text for a channel, trimmed as it passes (see the top of the file). */
static void chan_text(reply_parser *r, int k, const char *s, size_t n)
{
    chan *c = &r->ch[k];
    reply_kind kind = k == CH_REASONING ? REPLY_REASONING : REPLY_CONTENT;
    if (!c->started)
        while (n && is_ws(*s))
            s++, n--;
    if (n == 0)
        return;
    size_t e = n;
    while (e && is_ws(s[e - 1]))
        e--;
    if (e) {
        emit_text(r, kind, c->ws.p, c->ws.n);
        c->ws.n = 0;
        emit_text(r, kind, s, e);
        c->started = true;
    }
    rb_put(r, &c->ws, s + e, n - e);
}

/* ---- JSON out, as Python's json.dumps(ensure_ascii=False) writes it ----------- */

static void put_json(reply_parser *r, rbuf *b, const json_t *v)
{
    sbuf t = {0};
    lilac_error err;
    if (py_json(&t, v, 0, &err) != LILAC_OK || t.oom)
        r->oom = true; /* nesting past the limit cannot come out of jansson's parser */
    else
        rb_put(r, b, t.p, t.n);
    free(t.p);
}

/* ---- tool calls ---------------------------------------------------------------- */

typedef struct pcall {
    char *name;
    json_t *args; /* an object */
} pcall;

typedef struct pcalls {
    pcall *v;
    size_t n, cap;
} pcalls;

static void pcalls_clear(pcalls *pc)
{
    for (size_t i = 0; i < pc->n; i++) {
        free(pc->v[i].name);
        json_decref(pc->v[i].args);
    }
    free(pc->v);
    memset(pc, 0, sizeof *pc);
}

/* Takes args. False only for lack of memory. */
static bool pcalls_add(pcalls *pc, const char *name, size_t name_len, json_t *args)
{
    if (pc->n == pc->cap) {
        size_t cap = pc->cap ? pc->cap * 2 : 2;
        pcall *q = realloc(pc->v, cap * sizeof *q);
        if (!q) {
            json_decref(args);
            return false;
        }
        pc->v = q;
        pc->cap = cap;
    }
    char *nm = malloc(name_len + 1);
    if (!nm) {
        json_decref(args);
        return false;
    }
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    pc->v[pc->n++] = (pcall){nm, args};
    return true;
}

/* Why a call failed to parse; false so that parsers can `return fail(...)`. */
static bool fail(char *why, size_t cap, const char *fmt, const char *detail)
{
    snprintf(why, cap, fmt, detail);
    return false;
}

#define WHY_CAP 128

/* Qwen3: {"name": NAME, "arguments": {...}}; arguments may also come as a
 * string holding the object, or be absent for none. */
static bool parse_json_call(const char *body, size_t n, pcalls *pc, bool *oom, char *why)
{
    json_error_t je;
    json_t *v = json_loadb(body, n, 0, &je);
    if (!v) /* an integer past int64 is still a number: read it as a real */
        v = json_loadb(body, n, JSON_DECODE_INT_AS_REAL, &je);
    if (!v)
        return fail(why, WHY_CAP, "invalid JSON: %.100s", je.text);
    bool ok = false;
    const json_t *name = json_object_get(v, "name"), *a = json_object_get(v, "arguments");
    json_t *args = NULL;
    if (!json_is_object(v))
        fail(why, WHY_CAP, "%s", "not a JSON object");
    else if (!json_is_string(name) || json_string_length(name) == 0 ||
             strlen(json_string_value(name)) != json_string_length(name))
        fail(why, WHY_CAP, "%s", "no function name");
    else if (!a || json_is_null(a))
        ok = (args = json_object()) != NULL;
    else if (json_is_object(a))
        ok = (args = json_incref((json_t *)a)) != NULL;
    else if (json_is_string(a)) {
        args = json_loadb(json_string_value(a), json_string_length(a), 0, &je);
        ok = json_is_object(args);
        if (!ok)
            fail(why, WHY_CAP, "%s", "arguments are not a JSON object");
    } else
        fail(why, WHY_CAP, "%s", "arguments are not a JSON object");
    if (ok && !pcalls_add(pc, json_string_value(name), json_string_length(name), json_incref(args)))
        ok = false, *oom = true;
    json_decref(args);
    json_decref(v);
    return ok;
}

/* The properties schema of the named tool's parameters, or NULL. */
static const json_t *tool_props(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn))
            fn = t; /* the flat {"name", "parameters"} form */
        if (json_is_string(json_object_get(fn, "name")) &&
            strcmp(json_string_value(json_object_get(fn, "name")), name) == 0)
            return json_object_get(json_object_get(fn, "parameters"), "properties");
    }
    return NULL;
}

static void note_type(const char *t, bool *str, bool *other)
{
    static const char *const typed[] = {"number", "integer", "boolean", "object", "array", "null"};
    if (strcmp(t, "string") == 0)
        *str = true;
    for (size_t i = 0; i < sizeof typed / sizeof *typed; i++)
        if (strcmp(t, typed[i]) == 0)
            *other = true;
}

/* What a parameter's schema allows: a string (*str), or some JSON-typed
 * value (*other). anyOf / oneOf are looked into when there is no "type". */
static void schema_types(const json_t *s, bool *str, bool *other, int depth)
{
    if (!json_is_object(s) || depth > 8)
        return;
    const json_t *t = json_object_get(s, "type");
    size_t i;
    const json_t *x;
    if (json_is_string(t)) {
        note_type(json_string_value(t), str, other);
    } else if (json_is_array(t)) {
        json_array_foreach(t, i, x) {
            if (json_is_string(x))
                note_type(json_string_value(x), str, other);
        }
    } else if (!t) {
        json_array_foreach(json_object_get(s, "anyOf"), i, x) schema_types(x, str, other, depth + 1);
        json_array_foreach(json_object_get(s, "oneOf"), i, x) schema_types(x, str, other, depth + 1);
    }
}

static bool ieq(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    if (n != k)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != lit[i])
            return false;
    }
    return true;
}

/* A Qwen3.5 parameter's raw text as a JSON value: parsed when the schema
 * says it is not a string and it parses, else the text as a string. */
static json_t *param_value(const char *s, size_t n, const json_t *schema)
{
    bool str = false, other = false;
    schema_types(schema, &str, &other, 0);
    if (other && !str) {
        const char *t = s;
        size_t tn = n;
        while (tn && is_ws(*t))
            t++, tn--;
        while (tn && is_ws(t[tn - 1]))
            tn--;
        /* the template writes Python's str(): True, False, None */
        if (ieq(t, tn, "true"))
            return json_true();
        if (ieq(t, tn, "false"))
            return json_false();
        if (tn == 4 && memcmp(t, "None", 4) == 0)
            return json_null();
        json_error_t je;
        json_t *v = json_loadb(t, tn, JSON_DECODE_ANY, &je);
        if (!v)
            v = json_loadb(t, tn, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
        if (v)
            return v;
    }
    return json_stringn_nocheck(s, n); /* bytes as they are: the caller sanitizes */
}

/* [p, e) trimmed of whitespace. */
static void trim(const char **p, const char **e)
{
    while (*p < *e && is_ws(**p))
        (*p)++;
    while (*e > *p && is_ws((*e)[-1]))
        (*e)--;
}

static const char *find(const char *p, const char *e, const char *pat)
{
    size_t k = strlen(pat);
    for (; (size_t)(e - p) >= k; p++)
        if (memcmp(p, pat, k) == 0)
            return p;
    return NULL;
}

/* Qwen3.5: one or more <function=NAME> blocks of <parameter=KEY>\nVALUE\n</parameter>. */
static bool parse_xml_calls(const json_t *tools, const char *body, size_t n, pcalls *pc, bool *oom, char *why)
{
    const char *p = body, *e = body + n;
    while (p < e && is_ws(*p))
        p++;
    if (p == e)
        return fail(why, WHY_CAP, "%s", "an empty tool call");
    while (p < e) {
        if (!starts(p, e, "<function="))
            return fail(why, WHY_CAP, "%s", "expected <function=NAME>");
        p += strlen("<function=");
        const char *gt = memchr(p, '>', (size_t)(e - p)), *ne = gt;
        if (!gt)
            return fail(why, WHY_CAP, "%s", "unterminated <function=");
        trim(&p, &ne);
        if (p == ne || memchr(p, 0, (size_t)(ne - p)))
            return fail(why, WHY_CAP, "%s", "a bad function name");
        const char *name = p;
        size_t name_len = (size_t)(ne - p);
        char nm[256];
        snprintf(nm, sizeof nm, "%.*s", (int)(name_len < 255 ? name_len : 255), name);
        const json_t *props = tool_props(tools, nm);
        json_t *args = json_object();
        if (!args) {
            *oom = true;
            return false;
        }
        p = gt + 1;
        for (;;) {
            while (p < e && is_ws(*p))
                p++;
            if (starts(p, e, "</function>")) {
                p += strlen("</function>");
                break;
            }
            bool is_param = starts(p, e, "<parameter=");
            const char *end = NULL, *ke = NULL;
            if (is_param) {
                p += strlen("<parameter=");
                gt = memchr(p, '>', (size_t)(e - p));
                end = gt ? find(gt + 1, e, "</parameter>") : NULL;
                ke = gt;
            }
            if (!end) {
                json_decref(args);
                return fail(why, WHY_CAP, "%s",
                            is_param ? "unterminated <parameter=" : "expected <parameter=KEY> or </function>");
            }
            trim(&p, &ke);
            if (p == ke || memchr(p, 0, (size_t)(ke - p))) {
                json_decref(args);
                return fail(why, WHY_CAP, "%s", "a bad parameter name");
            }
            char *key = malloc((size_t)(ke - p) + 1);
            if (!key) {
                json_decref(args);
                *oom = true;
                return false;
            }
            memcpy(key, p, (size_t)(ke - p));
            key[ke - p] = 0;
            /* the template writes "\n" VALUE "\n": one newline each side is its own */
            const char *vs = gt + 1, *ve = end;
            if (vs < ve && *vs == '\n')
                vs++;
            if (ve > vs && ve[-1] == '\n')
                ve--;
            json_t *val = param_value(vs, (size_t)(ve - vs), json_object_get(props, key));
            int rc = val ? json_object_set_new_nocheck(args, key, val) : -1;
            free(key);
            if (rc) {
                json_decref(args);
                *oom = true;
                return false;
            }
            p = end + strlen("</parameter>");
        }
        if (!pcalls_add(pc, name, name_len, args)) {
            *oom = true;
            return false;
        }
        while (p < e && is_ws(*p))
            p++;
    }
    return true;
}

/* The open tool call ended: at its closing tag (closed) or at the end of
 * the text. Parsed calls go out as events; anything else as content. */
static void end_call(reply_parser *r, bool closed)
{
    pcalls pc = {0};
    bool ok = false, oom = false;
    char why[WHY_CAP] = "unterminated at the end of the text";
    if (closed && r->style == CHAT_STYLE_QWEN35)
        ok = parse_xml_calls(r->tools, r->body.p, r->body.n, &pc, &oom, why);
    else if (closed)
        ok = parse_json_call(r->body.p, r->body.n, &pc, &oom, why);
    if (oom)
        r->oom = true;
    if (ok) {
        for (size_t i = 0; i < pc.n && !r->oom; i++) {
            ev *e = push_ev(r);
            if (!e)
                break;
            e->kind = REPLY_TOOL_CALL;
            e->index = r->n_calls++;
            e->name_off = r->out.n;
            rb_put(r, &r->out, pc.v[i].name, strlen(pc.v[i].name) + 1);
            e->args_off = r->out.n;
            put_json(r, &r->out, pc.v[i].args);
            rb_put(r, &r->out, "", 1);
        }
    } else {
        if (!r->malformed)
            snprintf(r->why, sizeof r->why, "tool call %d: %s", r->n_calls, why);
        r->malformed = true;
        chan_text(r, CH_CONTENT, r->call_ws.p, r->call_ws.n);
        chan_text(r, CH_CONTENT, T_CALL, strlen(T_CALL));
        chan_text(r, CH_CONTENT, r->body.p, r->body.n);
        if (closed)
            chan_text(r, CH_CONTENT, T_END_CALL, strlen(T_END_CALL));
    }
    pcalls_clear(&pc);
    r->body.n = 0;
    r->call_ws.n = 0;
}

/* ---- the state machine ------------------------------------------------------- */

/* The first place in s[0..n) where tag begins: whole (*whole), or, unless
 * final, cut off by the end of s. n when neither. */
static size_t find_tag(const char *s, size_t n, const char *tag, bool final, bool *whole)
{
    size_t k = strlen(tag);
    *whole = false;
    for (const char *q = s; q < s + n && (q = memchr(q, tag[0], (size_t)(s + n - q))); q++) {
        size_t i = (size_t)(q - s), rest = n - i;
        if (rest >= k && memcmp(q, tag, k) == 0) {
            *whole = true;
            return i;
        }
        if (rest < k && !final && memcmp(q, tag, rest) == 0)
            return i;
    }
    return n;
}

static void on_tag(reply_parser *r)
{
    switch (r->state) {
    case ST_REASONING: /* </think>: the whitespace before it is not reasoning */
        r->ch[CH_REASONING].ws.n = 0;
        r->state = ST_CONTENT;
        break;
    case ST_CONTENT: /* <tool_call>: the whitespace before it is not content, unless the call fails */
        r->call_ws.n = 0;
        rb_put(r, &r->call_ws, r->ch[CH_CONTENT].ws.p, r->ch[CH_CONTENT].ws.n);
        r->ch[CH_CONTENT].ws.n = 0;
        r->body.n = 0;
        r->state = ST_TOOL;
        break;
    case ST_TOOL:
        end_call(r, true);
        r->state = ST_CONTENT;
        break;
    }
}

/* Decide what can be decided of pend; all of it when final. */
static void run(reply_parser *r, bool final)
{
    const char *s = r->pend.p;
    size_t n = r->pend.n, pos = 0;
    while (pos < n && !r->oom) {
        const char *p = s + pos;
        size_t m = n - pos;
        if (r->state == ST_OPEN || r->state == ST_THINK_OPEN) {
            /* neither text starts with whitespace: drop it, then look for <think> */
            size_t w = 0;
            while (w < m && is_ws(p[w]))
                w++;
            pos += w;
            if (w == m)
                break;
            p += w, m -= w;
            size_t k = strlen(T_THINK);
            if (m >= k && memcmp(p, T_THINK, k) == 0) {
                pos += k;
                r->state = ST_REASONING;
                continue;
            }
            if (m < k && !final && memcmp(p, T_THINK, m) == 0)
                break; /* wait for more */
            r->state = r->state == ST_OPEN ? ST_CONTENT : ST_REASONING;
            continue;
        }
        const char *tag = r->state == ST_REASONING ? T_END_THINK
                          : r->state == ST_TOOL    ? T_END_CALL
                          : r->tools               ? T_CALL
                                                   : NULL;
        bool whole = false;
        size_t i = tag ? find_tag(p, m, tag, final, &whole) : m;
        if (r->state == ST_TOOL)
            rb_put(r, &r->body, p, i);
        else
            chan_text(r, r->state == ST_REASONING ? CH_REASONING : CH_CONTENT, p, i);
        pos += i;
        if (!whole)
            break; /* all of it went, or the rest may be a tag: wait for more */
        pos += strlen(tag);
        on_tag(r);
    }
    if (pos) {
        memmove(r->pend.p, r->pend.p + pos, n - pos);
        r->pend.n = n - pos;
    }
}

/* ---- the API ----------------------------------------------------------------- */

chat_style reply_style_of(const char *t)
{
    return t && strstr(t, "<function=") && strstr(t, "<parameter=") ? CHAT_STYLE_QWEN35 : CHAT_STYLE_QWEN3;
}

bool reply_prompt_opens_reasoning(const char *prompt, size_t len)
{
    while (len && is_ws(prompt[len - 1]))
        len--;
    size_t k = strlen(T_THINK);
    return len >= k && memcmp(prompt + len - k, T_THINK, k) == 0;
}

lilac_status reply_new(const reply_opts *o, reply_parser **out, lilac_error *err)
{
    if (!out)
        return lilac_fail(err, LILAC_E_ARG, "reply_new: no output pointer");
    *out = NULL;
    if (!o)
        return lilac_fail(err, LILAC_E_ARG, "reply_new: no options");
    if (o->style != CHAT_STYLE_QWEN3 && o->style != CHAT_STYLE_QWEN35)
        return lilac_fail(err, LILAC_E_ARG, "reply_new: unknown chat style %d", (int)o->style);
    if (o->tools && !json_is_array(o->tools) && !json_is_null(o->tools))
        return lilac_fail(err, LILAC_E_ARG, "reply_new: tools must be a JSON array");
    reply_parser *r = calloc(1, sizeof *r);
    if (!r)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    r->style = o->style;
    r->state = o->starts_in_reasoning ? ST_THINK_OPEN : ST_OPEN;
    if (json_array_size(o->tools) > 0)
        r->tools = json_incref((json_t *)o->tools);
    *out = r;
    return LILAC_OK;
}

void reply_free(reply_parser *r)
{
    if (!r)
        return;
    json_decref(r->tools);
    free(r->pend.p);
    free(r->body.p);
    free(r->call_ws.p);
    free(r->ch[0].ws.p);
    free(r->ch[1].ws.p);
    free(r->out.p);
    free(r->evs);
    free(r->pub);
    free(r);
}

/* Hand this call's events out, with pointers now that out has stopped moving. */
static lilac_status publish(reply_parser *r, const reply_event **events, size_t *n_events, lilac_error *err)
{
    if (!r->oom && r->n_evs > r->cap_pub) {
        reply_event *q = realloc(r->pub, r->n_evs * sizeof *q);
        if (!q)
            r->oom = true;
        else
            r->pub = q, r->cap_pub = r->n_evs;
    }
    if (r->oom)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory parsing the reply");
    for (size_t i = 0; i < r->n_evs; i++) {
        const ev *e = &r->evs[i];
        reply_event *p = &r->pub[i];
        memset(p, 0, sizeof *p);
        p->kind = e->kind;
        if (e->kind == REPLY_TOOL_CALL) {
            p->index = e->index;
            p->name = r->out.p + e->name_off;
            p->arguments = r->out.p + e->args_off;
        } else {
            p->text = r->out.p + e->off;
            p->len = e->len;
        }
    }
    *events = r->pub;
    *n_events = r->n_evs;
    return LILAC_OK;
}

static lilac_status begin(reply_parser *r, const reply_event **events, size_t *n_events, lilac_error *err)
{
    if (!events || !n_events)
        return lilac_fail(err, LILAC_E_ARG, "reply: no output pointers");
    *events = NULL;
    *n_events = 0;
    if (!r)
        return lilac_fail(err, LILAC_E_ARG, "reply: no parser");
    if (r->oom)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory parsing the reply");
    if (r->finished)
        return lilac_fail(err, LILAC_E_ARG, "reply: already finished");
    r->out.n = 0;
    r->n_evs = 0;
    return LILAC_OK;
}

lilac_status reply_feed(reply_parser *r, const char *piece, size_t len, const reply_event **events,
                        size_t *n_events, lilac_error *err)
{
    lilac_status st = begin(r, events, n_events, err);
    if (st)
        return st;
    if (len && !piece)
        return lilac_fail(err, LILAC_E_ARG, "reply_feed: no text");
    rb_put(r, &r->pend, piece, len);
    run(r, false);
    return publish(r, events, n_events, err);
}

lilac_status reply_finish(reply_parser *r, const reply_event **events, size_t *n_events, lilac_error *err)
{
    lilac_status st = begin(r, events, n_events, err);
    if (st)
        return st;
    run(r, true);
    if (r->state == ST_TOOL)
        end_call(r, false);
    r->ch[CH_REASONING].ws.n = 0; /* trailing whitespace is dropped */
    r->ch[CH_CONTENT].ws.n = 0;
    r->finished = true;
    return publish(r, events, n_events, err);
}

int reply_n_tool_calls(const reply_parser *r)
{
    return r ? r->n_calls : 0;
}

bool reply_malformed(const reply_parser *r, const char **why)
{
    bool m = r && r->malformed;
    if (why)
        *why = m ? r->why : NULL;
    return m;
}
