/* test_reply: the streaming split of generated text (engine/reply.c).
 *
 * Every case is fed whole, in two pieces split at every byte, and one byte
 * at a time; the reasoning, content and tool calls put together from the
 * events must be the expected ones in every splitting. Then: what is
 * released while streaming (nothing held that need not be), the API's
 * errors, picking the style from the fixtures' templates, and round trips:
 * the assistant turns of the Qwen3.5 goldens (rendered by transformers), and
 * assistant messages rendered by lilac_chat_render with both templates,
 * parsed back into the same tool calls. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/reply.h"
#include "lilac.h"
#include "testutil.h"

/* ---- collecting events ------------------------------------------------------- */

typedef struct str {
    char *p;
    size_t n;
} str;

static void str_add(str *s, const char *p, size_t n)
{
    char *q = realloc(s->p, s->n + n + 1);
    if (!q)
        abort();
    s->p = q;
    if (n)
        memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = 0;
}

#define MAX_CALLS 8

typedef struct got {
    str reasoning, content;
    int n_calls;
    char *names[MAX_CALLS], *args[MAX_CALLS];
    int api_calls; /* reply_n_tool_calls */
    bool malformed;
    char problem[200]; /* the first broken promise of the API, or "" */
} got;

static void got_free(got *g)
{
    free(g->reasoning.p);
    free(g->content.p);
    for (int i = 0; i < g->n_calls && i < MAX_CALLS; i++) {
        free(g->names[i]);
        free(g->args[i]);
    }
    memset(g, 0, sizeof *g);
}

static void collect(got *g, const reply_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const reply_event *e = &ev[i];
        if (e->kind == REPLY_REASONING || e->kind == REPLY_CONTENT) {
            if (!*g->problem && (e->len == 0 || e->text[e->len] != 0))
                snprintf(g->problem, sizeof g->problem, "a text event of %zu bytes, not NUL-terminated or empty",
                         e->len);
            str_add(e->kind == REPLY_REASONING ? &g->reasoning : &g->content, e->text, e->len);
            /* consecutive text of one kind comes as one event */
            if (!*g->problem && i > 0 && ev[i - 1].kind == e->kind)
                snprintf(g->problem, sizeof g->problem, "two text events of one kind in a row");
        } else if (e->kind == REPLY_TOOL_CALL) {
            if (!*g->problem && e->index != g->n_calls)
                snprintf(g->problem, sizeof g->problem, "tool call index %d, want %d", e->index, g->n_calls);
            if (g->n_calls < MAX_CALLS) {
                g->names[g->n_calls] = strdup(e->name);
                g->args[g->n_calls] = strdup(e->arguments);
            }
            g->n_calls++;
        } else if (!*g->problem) {
            snprintf(g->problem, sizeof g->problem, "an event of unknown kind %d", (int)e->kind);
        }
    }
}

typedef struct rcase {
    const char *name;
    chat_style style;
    bool in_reasoning;
    const char *tools; /* JSON, or NULL */
    const char *text;
    size_t text_len; /* 0: strlen(text) */
    const char *reasoning, *content;
    int n_calls;
    const char *calls[3][2]; /* name, arguments */
    bool malformed;
} rcase;

/* Parse c->text cut at cuts[0..n_cuts) (increasing offsets) into g. */
static void run_case(const rcase *c, const json_t *tools, const size_t *cuts, size_t n_cuts, got *g)
{
    memset(g, 0, sizeof *g);
    str_add(&g->reasoning, "", 0);
    str_add(&g->content, "", 0);
    reply_opts o = {.style = c->style, .starts_in_reasoning = c->in_reasoning, .tools = tools};
    reply_parser *r = NULL;
    lilac_error err = {0};
    if (reply_new(&o, &r, &err) != LILAC_OK) {
        snprintf(g->problem, sizeof g->problem, "reply_new: %.150s", err.msg);
        return;
    }
    size_t len = c->text_len ? c->text_len : strlen(c->text), at = 0;
    const reply_event *ev;
    size_t n;
    for (size_t k = 0; k <= n_cuts; k++) {
        size_t to = k < n_cuts ? cuts[k] : len;
        if (reply_feed(r, c->text + at, to - at, &ev, &n, &err) != LILAC_OK) {
            snprintf(g->problem, sizeof g->problem, "reply_feed: %.150s", err.msg);
            reply_free(r);
            return;
        }
        collect(g, ev, n);
        at = to;
    }
    if (reply_finish(r, &ev, &n, &err) != LILAC_OK)
        snprintf(g->problem, sizeof g->problem, "reply_finish: %.150s", err.msg);
    else
        collect(g, ev, n);
    g->api_calls = reply_n_tool_calls(r);
    g->malformed = reply_malformed(r, NULL);
    reply_free(r);
}

/* s with control and non-ASCII bytes escaped, cut to fit buf. */
static const char *show(const char *s, size_t n, char *buf, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n')
            k += (size_t)snprintf(buf + k, cap - k, "\\n");
        else if (ch < 0x20 || ch >= 0x7f)
            k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", ch);
        else
            buf[k++] = (char)ch;
    }
    buf[k] = 0;
    return buf;
}

/* Whether g is what c expects; if not, why in msg. */
static bool matches(const rcase *c, const got *g, char *msg, size_t cap)
{
    char a[400], b[400];
    const char *want_r = c->reasoning ? c->reasoning : "", *want_c = c->content ? c->content : "";
    if (*g->problem) {
        snprintf(msg, cap, "%s", g->problem);
        return false;
    }
    if (g->reasoning.n != strlen(want_r) || memcmp(g->reasoning.p, want_r, g->reasoning.n) != 0) {
        snprintf(msg, cap, "reasoning \"%s\", want \"%s\"", show(g->reasoning.p, g->reasoning.n, a, sizeof a),
                 show(want_r, strlen(want_r), b, sizeof b));
        return false;
    }
    if (g->content.n != strlen(want_c) || memcmp(g->content.p, want_c, g->content.n) != 0) {
        snprintf(msg, cap, "content \"%s\", want \"%s\"", show(g->content.p, g->content.n, a, sizeof a),
                 show(want_c, strlen(want_c), b, sizeof b));
        return false;
    }
    if (g->n_calls != c->n_calls || g->api_calls != c->n_calls) {
        snprintf(msg, cap, "%d tool call events, reply_n_tool_calls %d, want %d", g->n_calls, g->api_calls,
                 c->n_calls);
        return false;
    }
    for (int i = 0; i < c->n_calls; i++) {
        if (strcmp(g->names[i], c->calls[i][0]) != 0 || strcmp(g->args[i], c->calls[i][1]) != 0) {
            snprintf(msg, cap, "call %d: %s %s, want %s %s", i, g->names[i], show(g->args[i], strlen(g->args[i]),
                     a, sizeof a), c->calls[i][0], show(c->calls[i][1], strlen(c->calls[i][1]), b, sizeof b));
            return false;
        }
    }
    if (g->malformed != c->malformed) {
        snprintf(msg, cap, "malformed %d, want %d", g->malformed, c->malformed);
        return false;
    }
    return true;
}

/* ---- the cases ------------------------------------------------------------------- */

#define Q3 CHAT_STYLE_QWEN3
#define Q35 CHAT_STYLE_QWEN35

static const char TOOLS_WEATHER[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", "
    "\"fahrenheit\"]}}, \"required\": [\"city\"]}}}]";

/* every kind of parameter type, in the OpenAI form and the flat one */
static const char TOOLS_TYPED[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}}}},"
    " {\"name\": \"plan\", \"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"days\": {\"type\": \"integer\"}, \"metric\": {\"type\": \"boolean\"}, \"opts\": {\"type\": \"object\"}, "
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, \"note\": {\"type\": \"string\"}, "
    "\"zip\": {\"type\": \"string\"}, \"ratio\": {\"type\": \"number\"}, \"limit\": {\"type\": [\"integer\", "
    "\"null\"]}, \"mode\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"boolean\"}]}, "
    "\"bad\": {\"type\": \"integer\"}, \"either\": {\"type\": [\"string\", \"integer\"]}, "
    "\"level\": {\"enum\": [1, 2]}}}}]";

#define CALL_PARIS_Q3 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
#define CALL_ROME_Q3                                                                                           \
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"celsius\"}}\n"    \
    "</tool_call>"
#define CALL_PARIS_Q35                                                                                         \
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
#define CALL_ROME_Q35                                                                                          \
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=unit>\ncelsius\n"   \
    "</parameter>\n</function>\n</tool_call>"
#define PARIS {"get_weather", "{\"city\": \"Paris\"}"}
#define ROME {"get_weather", "{\"city\": \"Rome\", \"unit\": \"celsius\"}"}

static const rcase cases[] = {
    /* plain text and reasoning */
    {.name = "plain", .style = Q3, .text = "Hello, world!\nSecond  line.", .content = "Hello, world!\nSecond  line."},
    {.name = "plain, tools given", .style = Q35, .tools = TOOLS_WEATHER, .text = "Hello, world!\nSecond  line.",
     .content = "Hello, world!\nSecond  line."},
    {.name = "empty", .style = Q3, .text = ""},
    {.name = "only whitespace", .style = Q35, .in_reasoning = true, .text = " \n\n\t "},
    {.name = "qwen3 thinking", .style = Q3, .text = "<think>\nLet me add.\n\n2+2=4.\n</think>\n\nThe answer is 4.",
     .reasoning = "Let me add.\n\n2+2=4.", .content = "The answer is 4."},
    {.name = "qwen3 thinking off", .style = Q3, .text = "The answer is 4.", .content = "The answer is 4."},
    {.name = "qwen3 empty think block", .style = Q3, .text = "<think>\n\n</think>\n\nHi there", .content = "Hi there"},
    {.name = "qwen3.5 thinking (opened by the prompt)", .style = Q35, .in_reasoning = true,
     .text = "Let me add.\n</think>\n\nThe answer is 4.", .reasoning = "Let me add.", .content = "The answer is 4."},
    {.name = "qwen3.5 thinking off", .style = Q35, .text = "The answer is 4.", .content = "The answer is 4."},
    {.name = "qwen3.5 repeats <think>", .style = Q35, .in_reasoning = true, .text = "<think>\nHmm.\n</think>\n\nOK",
     .reasoning = "Hmm.", .content = "OK"},
    {.name = "qwen3.5 closes at once", .style = Q35, .in_reasoning = true, .text = "\n</think>\n\nOK", .content = "OK"},
    {.name = "reasoning cut off, tool call in it", .style = Q35, .in_reasoning = true, .tools = TOOLS_WEATHER,
     .text = "Still thinking <tool_call> about it\n", .reasoning = "Still thinking <tool_call> about it"},
    {.name = "'<' in reasoning", .style = Q3, .text = "<think>\na < b, </thin> and </think\n</think>\nDone",
     .reasoning = "a < b, </thin> and </think", .content = "Done"},
    {.name = "'<' in content", .style = Q3, .tools = TOOLS_WEATHER, .text = "if a < b and b <c then <tool",
     .content = "if a < b and b <c then <tool"},
    {.name = "'<' at the end", .style = Q35, .tools = TOOLS_WEATHER, .text = "x <", .content = "x <"},
    {.name = "'<tool_call' at the end", .style = Q3, .tools = TOOLS_WEATHER, .text = "see <tool_call",
     .content = "see <tool_call"},
    {.name = "tags later in content are text", .style = Q3, .text = "Use the <think> tag.</think>",
     .content = "Use the <think> tag.</think>"},

    /* tool calls */
    {.name = "qwen3 one call", .style = Q3, .tools = TOOLS_WEATHER, .text = CALL_PARIS_Q3, .n_calls = 1,
     .calls = {PARIS}},
    {.name = "qwen3 two calls after thinking and content", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "<think>\nBoth cities.\n</think>\n\nI'll check both.\n" CALL_PARIS_Q3 "\n" CALL_ROME_Q3,
     .reasoning = "Both cities.", .content = "I'll check both.", .n_calls = 2, .calls = {PARIS, ROME}},
    {.name = "qwen3.5 one call after thinking", .style = Q35, .in_reasoning = true, .tools = TOOLS_WEATHER,
     .text = "The user wants weather.\n</think>\n\n" CALL_PARIS_Q35, .reasoning = "The user wants weather.",
     .n_calls = 1, .calls = {PARIS}},
    {.name = "qwen3.5 two calls after content", .style = Q35, .tools = TOOLS_WEATHER,
     .text = "I'll check both.\n\n" CALL_PARIS_Q35 "\n" CALL_ROME_Q35, .content = "I'll check both.", .n_calls = 2,
     .calls = {PARIS, ROME}},
    {.name = "qwen3.5 two functions in one block", .style = Q35, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
             "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=unit>\ncelsius\n"
             "</parameter>\n</function>\n</tool_call>",
     .n_calls = 2, .calls = {PARIS, ROME}},
    {.name = "content around a call", .style = Q35, .tools = TOOLS_WEATHER,
     .text = "A\n" CALL_PARIS_Q35 "\n\nB\n", .content = "A\n\nB", .n_calls = 1, .calls = {PARIS}},
    {.name = "qwen3.5 no parameters", .style = Q35, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n<function=now>\n</function>\n</tool_call>", .n_calls = 1, .calls = {{"now", "{}"}}},
    {.name = "qwen3 no arguments", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n{\"name\": \"now\"}\n</tool_call>", .n_calls = 1, .calls = {{"now", "{}"}}},
    {.name = "qwen3 arguments as a string", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}\n"
             "</tool_call>",
     .n_calls = 1, .calls = {PARIS}},
    {.name = "qwen3 call without tools stays content", .style = Q3, .text = "Sure.\n" CALL_PARIS_Q3,
     .content = "Sure.\n" CALL_PARIS_Q3},
    {.name = "qwen3.5 call without tools stays content", .style = Q35, .text = CALL_PARIS_Q35,
     .content = CALL_PARIS_Q35},

    /* argument values */
    {.name = "qwen3.5 typed parameters", .style = Q35, .tools = TOOLS_TYPED,
     .text = "<tool_call>\n<function=plan>\n"
             "<parameter=days>\n3\n</parameter>\n"
             "<parameter=metric>\nTrue\n</parameter>\n"
             "<parameter=opts>\n{\"a\": [1, 2.5], \"b\": null}\n</parameter>\n"
             "<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n"
             "<parameter=note>\n\nline one\n\n  \"two\"\n\n</parameter>\n"
             "<parameter=zip>\n75001\n</parameter>\n"
             "<parameter=ratio>\n0.1\n</parameter>\n"
             "<parameter=limit>\nNone\n</parameter>\n"
             "<parameter=mode>\nfalse\n</parameter>\n"
             "<parameter=bad>\nthree\n</parameter>\n"
             "<parameter=either>\n42\n</parameter>\n"
             "<parameter=level>\n2\n</parameter>\n"
             "<parameter=extra>\n7\n</parameter>\n"
             "</function>\n</tool_call>",
     .n_calls = 1,
     .calls = {{"plan", "{\"days\": 3, \"metric\": true, \"opts\": {\"a\": [1, 2.5], \"b\": null}, \"tags\": [\"x\", "
                        "\"y\"], \"note\": \"\\nline one\\n\\n  \\\"two\\\"\\n\", \"zip\": \"75001\", \"ratio\": 0.1, "
                        "\"limit\": null, \"mode\": false, \"bad\": \"three\", \"either\": \"42\", \"level\": \"2\", "
                        "\"extra\": \"7\"}"}}},
    {.name = "qwen3.5 parameters of an unknown tool are strings", .style = Q35, .tools = TOOLS_TYPED,
     .text = "<tool_call>\n<function=other>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     .n_calls = 1, .calls = {{"other", "{\"days\": \"3\"}"}}},
    {.name = "qwen3 numbers and strings as json.dumps writes them", .style = Q3, .tools = TOOLS_TYPED,
     .text = "<tool_call>\n{\"name\": \"plan\", \"arguments\": {\"ratio\": 1e-7, \"days\": 100000.0, \"x\": -0.5, "
             "\"big\": 1.5e300, \"n\": -3, \"s\": \"Z\xc3\xbcrich \\\"q\\\"\\ttab\\u0001\"}}\n</tool_call>",
     .n_calls = 1,
     .calls = {{"plan", "{\"ratio\": 1e-07, \"days\": 100000.0, \"x\": -0.5, \"big\": 1.5e+300, \"n\": -3, "
                        "\"s\": \"Z\xc3\xbcrich \\\"q\\\"\\ttab\\u0001\"}"}}},
    {.name = "qwen3 integer past int64", .style = Q3, .tools = TOOLS_TYPED,
     .text = "<tool_call>\n{\"name\": \"plan\", \"arguments\": {\"id\": 123456789012345678901}}\n</tool_call>",
     .n_calls = 1, .calls = {{"plan", "{\"id\": 1.2345678901234568e+20}"}}},

    /* calls that cannot be parsed go out as content */
    {.name = "qwen3 bad JSON", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>\n",
     .content = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>",
     .malformed = true},
    {.name = "qwen3 no name", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
     .content = "<tool_call>\n{\"arguments\": {}}\n</tool_call>", .malformed = true},
    {.name = "qwen3 arguments not an object", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
     .content = "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>", .malformed = true},
    {.name = "qwen3.5 unterminated parameter", .style = Q35, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
     .content = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
     .malformed = true},
    {.name = "qwen3.5 reading a JSON call", .style = Q35, .tools = TOOLS_WEATHER, .text = CALL_PARIS_Q3,
     .content = CALL_PARIS_Q3, .malformed = true},
    {.name = "bad call, then a good one", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par}\n</tool_call>\n" CALL_ROME_Q3,
     .content = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par}\n</tool_call>",
     .n_calls = 1, .calls = {ROME}, .malformed = true},
    {.name = "qwen3 unterminated at the end", .style = Q3, .tools = TOOLS_WEATHER,
     .text = "Let me check.\n<tool_call>\n{\"name\": \"get_wea",
     .content = "Let me check.\n<tool_call>\n{\"name\": \"get_wea", .malformed = true},
    {.name = "qwen3.5 cut inside the closing tag", .style = Q35, .tools = TOOLS_WEATHER,
     .text = "<tool_call>\n<function=f>\n</function>\n</tool_",
     .content = "<tool_call>\n<function=f>\n</function>\n</tool_", .malformed = true},

    /* bytes pass through as they are */
    {.name = "invalid UTF-8 in content", .style = Q3, .tools = TOOLS_WEATHER, .text = "caf\xc3 \xff\xfe<b \x80ok",
     .content = "caf\xc3 \xff\xfe<b \x80ok"},
    {.name = "invalid UTF-8 around </think>", .style = Q35, .in_reasoning = true,
     .text = "\xe2\x82 x\xe2\n</think>\n\n\xf0\x9f\xa6 y", .reasoning = "\xe2\x82 x\xe2", .content = "\xf0\x9f\xa6 y"},
    /* the one case with a NUL: test_cases compares its content byte by byte */
    {.name = "a NUL byte", .style = Q3, .text = "a\0b", .text_len = 3},
};

/* Every case in every splitting. */
static void test_cases(void)
{
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const rcase *c = &cases[ci];
        json_t *tools = NULL;
        if (c->tools) {
            json_error_t je;
            tools = json_loads(c->tools, 0, &je);
            CHECKF(tools != NULL, "%s: the test's tools JSON: %s", c->name, je.text);
        }
        size_t len = c->text_len ? c->text_len : strlen(c->text);
        char msg[1200];
        got g;

        if (c->text_len) { /* NUL inside: compare by bytes here */
            run_case(c, tools, NULL, 0, &g);
            CHECKF(g.content.n == 3 && memcmp(g.content.p, "a\0b", 3) == 0 && !*g.problem,
                   "%s: content of %zu bytes", c->name, g.content.n);
            got_free(&g);
            json_decref(tools);
            continue;
        }

        run_case(c, tools, NULL, 0, &g);
        CHECKF(matches(c, &g, msg, sizeof msg), "%s (whole): %s", c->name, msg);
        got_free(&g);

        size_t bad = 0, first_bad = 0;
        char first_msg[1200] = "";
        for (size_t k = 1; k < len; k++) {
            run_case(c, tools, &k, 1, &g);
            if (!matches(c, &g, msg, sizeof msg) && bad++ == 0) {
                first_bad = k;
                snprintf(first_msg, sizeof first_msg, "%s", msg);
            }
            got_free(&g);
        }
        CHECKF(bad == 0, "%s: %zu of %zu two-piece splits differ, the first at byte %zu: %s", c->name, bad,
               len ? len - 1 : 0, first_bad, first_msg);

        size_t *cuts = malloc((len ? len : 1) * sizeof *cuts);
        for (size_t k = 1; k < len; k++)
            cuts[k - 1] = k;
        run_case(c, tools, cuts, len ? len - 1 : 0, &g);
        CHECKF(matches(c, &g, msg, sizeof msg), "%s (byte by byte): %s", c->name, msg);
        got_free(&g);
        free(cuts);
        json_decref(tools);
    }
}

/* ---- streaming: what goes out when ----------------------------------------------- */

/* Feed piece and check the events put together are exactly want (kind
 * letters: R reasoning, C content, T tool call "name args"). */
static void expect_feed(reply_parser *r, const char *piece, char want_kind, const char *want)
{
    const reply_event *ev;
    size_t n;
    lilac_error err = {0};
    lilac_status st = piece ? reply_feed(r, piece, strlen(piece), &ev, &n, &err) : reply_finish(r, &ev, &n, &err);
    CHECKF(st == LILAC_OK, "feeding \"%s\": %s", piece ? piece : "(finish)", err.msg);
    if (st != LILAC_OK)
        return;
    char buf[512] = "";
    size_t k = 0;
    char kind = 0;
    for (size_t i = 0; i < n && k < sizeof buf - 1; i++) {
        if (ev[i].kind == REPLY_TOOL_CALL) {
            kind = 'T';
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s %s", ev[i].name, ev[i].arguments);
        } else {
            kind = ev[i].kind == REPLY_REASONING ? 'R' : 'C';
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%.*s", (int)ev[i].len, ev[i].text);
        }
    }
    CHECKF((n == 0 && !want) || (n == 1 && kind == want_kind && want && strcmp(buf, want) == 0),
           "after \"%s\": %zu events \"%s\" (kind %c), want %s%c \"%s\"", piece ? piece : "(finish)", n, buf,
           kind ? kind : '-', want ? "" : "none ", want_kind ? want_kind : '-', want ? want : "");
}

static void test_streaming(void)
{
    json_t *tools = json_loads(TOOLS_WEATHER, 0, NULL);
    reply_parser *r = NULL;
    lilac_error err = {0};
    reply_opts o = {.style = CHAT_STYLE_QWEN3, .tools = tools};
    CHECK(reply_new(&o, &r, &err) == LILAC_OK);
    if (r) {
        expect_feed(r, "<", 0, NULL); /* may be <think> */
        expect_feed(r, "b>Hello", 'C', "<b>Hello");
        expect_feed(r, " wor", 'C', " wor");
        expect_feed(r, "ld <to", 'C', "ld");    /* " <to" may start a tool call */
        expect_feed(r, "day>", 'C', " <today>"); /* it did not */
        expect_feed(r, "\n<tool_call>\n{\"name\": \"f\"}", 0, NULL);
        expect_feed(r, "\n</tool_call>", 'T', "f {}");
        expect_feed(r, "\n", 0, NULL);
        expect_feed(r, NULL, 0, NULL);
        CHECK(reply_n_tool_calls(r) == 1);
        CHECK(!reply_malformed(r, NULL));
        const reply_event *ev;
        size_t n;
        CHECK(reply_feed(r, "x", 1, &ev, &n, &err) == LILAC_E_ARG); /* after the end */
        CHECK(reply_finish(r, &ev, &n, &err) == LILAC_E_ARG);
        reply_free(r);
    }

    o = (reply_opts){.style = CHAT_STYLE_QWEN35, .starts_in_reasoning = true};
    r = NULL;
    CHECK(reply_new(&o, &r, &err) == LILAC_OK);
    if (r) {
        expect_feed(r, "\n", 0, NULL);
        expect_feed(r, "Reason", 'R', "Reason");
        expect_feed(r, "ing.\n</thi", 'R', "ing.");
        expect_feed(r, "nk>\n\n", 0, NULL);
        expect_feed(r, "Ans", 'C', "Ans");
        expect_feed(r, "wer <tool_call>", 'C', "wer <tool_call>"); /* no tools: text */
        expect_feed(r, "\n\n", 0, NULL);
        expect_feed(r, NULL, 0, NULL); /* trailing whitespace dropped */
        reply_free(r);
    }

    /* a malformed call: the flag and its reason */
    o = (reply_opts){.style = CHAT_STYLE_QWEN3, .tools = tools};
    r = NULL;
    CHECK(reply_new(&o, &r, &err) == LILAC_OK);
    if (r) {
        const char *why = "unset";
        CHECK(!reply_malformed(r, &why) && why == NULL);
        expect_feed(r, "<tool_call>{\"name\": 1}</tool_call>", 'C', "<tool_call>{\"name\": 1}</tool_call>");
        CHECK(reply_malformed(r, &why) && why && strstr(why, "name"));
        CHECK(reply_n_tool_calls(r) == 0);
        reply_free(r);
    }
    json_decref(tools);

    /* bad calls */
    reply_opts bad = {.style = (chat_style)7};
    r = (reply_parser *)&bad;
    CHECK(reply_new(&bad, &r, &err) == LILAC_E_ARG && r == NULL);
    json_t *obj = json_object();
    bad = (reply_opts){.style = CHAT_STYLE_QWEN3, .tools = obj};
    CHECK(reply_new(&bad, &r, &err) == LILAC_E_ARG && r == NULL);
    CHECK(reply_new(NULL, &r, &err) == LILAC_E_ARG);
    json_decref(obj);
    /* json null and [] mean no tools: tool calls stay content */
    bad = (reply_opts){.style = CHAT_STYLE_QWEN3, .tools = json_null()};
    CHECK(reply_new(&bad, &r, &err) == LILAC_OK);
    if (r) {
        expect_feed(r, CALL_PARIS_Q3, 'C', CALL_PARIS_Q3);
        reply_free(r);
    }
    reply_free(NULL);
    CHECK(reply_n_tool_calls(NULL) == 0);
}

/* ---- templates, prompts, round trips ------------------------------------------- */

static void test_prompt_opens(void)
{
    static const char *const yes[] = {"<|im_start|>assistant\n<think>\n", "x<think>", "<think>\n \n"};
    static const char *const no[] = {"<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|im_start|>assistant\n",
                                     "", "think>\n", "<think>x"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        CHECKF(reply_prompt_opens_reasoning(yes[i], strlen(yes[i])), "prompt %zu should open reasoning", i);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        CHECKF(!reply_prompt_opens_reasoning(no[i], strlen(no[i])), "prompt %zu should not open reasoning", i);
    CHECK(reply_style_of(NULL) == CHAT_STYLE_QWEN3);
    CHECK(reply_style_of("{{ '<function=' + name + '>\\n<parameter=' }}") == CHAT_STYLE_QWEN35);
    CHECK(reply_style_of("{\"name\": <function-name>, \"arguments\": <args-json-object>}") == CHAT_STYLE_QWEN3);
}

static char *read_text(const char *path)
{
    size_t n = 0;
    char *t = tu_read_file(path, &n);
    char *z = t ? realloc(t, n + 1) : NULL;
    if (!z) {
        free(t);
        return NULL;
    }
    z[n] = 0;
    return z;
}

/* The text of assistant turn k (from 0) of a rendering: after its
 * "<|im_start|>assistant\n", up to its "<|im_end|>"; NULL if there is none. */
static char *assistant_turn(const char *text, int k)
{
    const char *open = "<|im_start|>assistant\n";
    const char *p = text;
    for (int i = 0; p && i <= k; i++) {
        p = strstr(p, open);
        if (p)
            p += strlen(open);
    }
    const char *e = p ? strstr(p, "<|im_end|>") : NULL;
    return e ? strndup(p, (size_t)(e - p)) : NULL;
}

/* Parse an assistant turn and compare it with the message it was rendered
 * from: content and reasoning (trimmed, as reply gives them) and tool calls
 * (names, and arguments as JSON values). */
static void round_trip(const char *what, chat_style style, const char *turn, const json_t *msg, const json_t *tools)
{
    reply_opts o = {.style = style, .tools = tools};
    reply_parser *r = NULL;
    lilac_error err = {0};
    CHECKF(reply_new(&o, &r, &err) == LILAC_OK, "%s: %s", what, err.msg);
    if (!r)
        return;
    got g = {0};
    const reply_event *ev;
    size_t n;
    CHECKF(reply_feed(r, turn, strlen(turn), &ev, &n, &err) == LILAC_OK, "%s: %s", what, err.msg);
    collect(&g, ev, n);
    CHECKF(reply_finish(r, &ev, &n, &err) == LILAC_OK, "%s: %s", what, err.msg);
    collect(&g, ev, n);
    CHECKF(!reply_malformed(r, NULL), "%s: malformed", what);
    reply_free(r);
    str_add(&g.content, "", 0);
    str_add(&g.reasoning, "", 0);

    const char *want_c = json_string_value(json_object_get(msg, "content"));
    const char *want_r = json_string_value(json_object_get(msg, "reasoning_content"));
    CHECKF(strcmp(g.content.p, want_c ? want_c : "") == 0, "%s: content \"%s\", want \"%s\"", what, g.content.p,
           want_c ? want_c : "");
    CHECKF(strcmp(g.reasoning.p, want_r ? want_r : "") == 0, "%s: reasoning \"%s\", want \"%s\"", what,
           g.reasoning.p, want_r ? want_r : "");
    const json_t *calls = json_object_get(msg, "tool_calls");
    CHECKF(g.n_calls == (int)json_array_size(calls) && !*g.problem, "%s: %d calls, want %zu %s", what, g.n_calls,
           json_array_size(calls), g.problem);
    for (int i = 0; i < g.n_calls && i < (int)json_array_size(calls) && i < MAX_CALLS; i++) {
        const json_t *fn = json_object_get(json_array_get(calls, (size_t)i), "function");
        json_t *args = json_loads(g.args[i], 0, NULL);
        CHECKF(strcmp(g.names[i], json_string_value(json_object_get(fn, "name"))) == 0, "%s: call %d is %s", what,
               i, g.names[i]);
        CHECKF(args && json_equal(args, json_object_get(fn, "arguments")), "%s: call %d's arguments %s", what, i,
               g.args[i]);
        json_decref(args);
    }
    got_free(&g);
}

/* The Qwen3.5 goldens: every assistant message with tool calls, as
 * transformers rendered it, parses back into its calls. */
static int test_goldens(const char *fx)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/qwen35-chat-golden.json", fx);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECKF(root != NULL, "%s: %s", path, je.text);
    size_t i;
    json_t *chat;
    int n = 0;
    json_array_foreach(json_object_get(root, "chats"), i, chat) {
        const char *text = json_string_value(json_object_get(chat, "text"));
        size_t j;
        json_t *m;
        int k = 0; /* assistant turns so far */
        json_array_foreach(json_object_get(chat, "messages"), j, m) {
            if (!json_is_string(json_object_get(m, "role")) ||
                strcmp(json_string_value(json_object_get(m, "role")), "assistant") != 0)
                continue;
            char *turn = text ? assistant_turn(text, k++) : NULL;
            if (json_array_size(json_object_get(m, "tool_calls")) && turn) {
                char what[64];
                snprintf(what, sizeof what, "golden chat %zu, message %zu", i, j);
                round_trip(what, CHAT_STYLE_QWEN35, turn, m, json_object_get(chat, "tools"));
                n++;
            }
            free(turn);
        }
    }
    CHECKF(n >= 4, "only %d assistant turns with tool calls in the goldens", n);
    json_decref(root);
    return n;
}

/* An assistant message with reasoning, content and typed arguments,
 * rendered by lilac_chat_render with each template, parses back. */
static void test_render_round_trip(const char *fx)
{
    static const char conv[] =
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"plan\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "
        "\"metric\": {\"type\": \"boolean\"}, \"opts\": {\"type\": \"object\"}, \"note\": {\"type\": \"string\"}, "
        "\"zip\": {\"type\": \"string\"}, \"ratio\": {\"type\": \"number\"}}}}}, {\"type\": \"function\", "
        "\"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
        "{\"city\": {\"type\": \"string\"}}}}}],"
        " \"messages\": [{\"role\": \"user\", \"content\": \"Plan a trip.\"}, {\"role\": \"assistant\", "
        "\"reasoning_content\": \"I should call plan.\\nThen the weather.\", \"content\": \"Planning now.\", "
        "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"plan\", \"arguments\": {\"city\": "
        "\"Paris\", \"days\": 3, \"metric\": true, \"opts\": {\"a\": [1, 2.5], \"b\": {\"c\": null}}, \"note\": "
        "\"two\\nlines < and > </parameter\", \"zip\": \"75001\", \"ratio\": 0.25}}}, {\"type\": \"function\", "
        "\"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}}]}]}";
    json_t *root = json_loads(conv, 0, NULL);
    CHECK(root != NULL);
    json_t *msg = json_deep_copy(json_array_get(json_object_get(root, "messages"), 1));
    /* the string form of arguments is what it holds */
    json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 1), "function");
    json_object_set_new(fn, "arguments", json_pack("{s:s}", "city", "Rome"));

    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/qwen3/tokenizer_config.json", fx);
    json_t *cfg = json_load_file(path, 0, NULL);
    const char *t3 = json_string_value(json_object_get(cfg, "chat_template"));
    snprintf(path, sizeof path, "%s/tokenizer/qwen35-chat-template.jinja", fx);
    char *t35 = read_text(path);
    CHECKF(t3 && t35, "the fixtures' chat templates are missing");
    const char *tmpl[2] = {t3, t35};
    const chat_style want_style[2] = {CHAT_STYLE_QWEN3, CHAT_STYLE_QWEN35};
    for (int s = 0; s < 2; s++) {
        if (!tmpl[s])
            continue;
        CHECKF(reply_style_of(tmpl[s]) == want_style[s], "template %d: style %d", s, (int)reply_style_of(tmpl[s]));
        char *text = NULL;
        lilac_error err = {0};
        lilac_chat_opts co = {.add_generation_prompt = false, .thinking = -1};
        CHECKF(lilac_chat_render(tmpl[s], conv, &co, &text, &err) == LILAC_OK, "render %d: %s", s, err.msg);
        char *turn = text ? assistant_turn(text, 0) : NULL;
        CHECKF(turn != NULL, "render %d: no assistant turn", s);
        if (turn) {
            char what[64];
            snprintf(what, sizeof what, "%s rendering", s ? "qwen3.5" : "qwen3");
            round_trip(what, want_style[s], turn, msg, json_object_get(root, "tools"));
        }
        free(turn);
        free(text);

        /* the generation prompt: opened reasoning for Qwen3.5 with thinking on only */
        static const char gen_conv[] = "[{\"role\": \"user\", \"content\": \"Hi\"}]";
        for (int think = 0; think <= 1; think++) {
            co = (lilac_chat_opts){.add_generation_prompt = true, .thinking = think};
            text = NULL;
            CHECKF(lilac_chat_render(tmpl[s], gen_conv, &co, &text, &err) == LILAC_OK, "render: %s", err.msg);
            bool want = s == 1 && think;
            CHECKF(text && reply_prompt_opens_reasoning(text, strlen(text)) == want,
                   "template %d, thinking %d: opens reasoning should be %d", s, think, want);
            free(text);
        }
    }
    free(t35);
    json_decref(cfg);
    json_decref(msg);
    json_decref(root);
}

int main(void)
{
    test_cases();
    test_streaming();
    test_prompt_opens();

    const char *fx = tu_fixtures();
    if (!fx) {
        if (tu_failures) /* a failure counts even when the fixtures are missing */
            TEST_END();
        tu_require_fixtures(); /* says why the round trips were skipped; exits 77 */
    }
    test_goldens(fx);
    test_render_round_trip(fx);
    TEST_END();
}
