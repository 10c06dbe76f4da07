/* test_chat: the Qwen3 and Qwen3.5 chat renderers (src/engine/chat.c).
 *
 *   - every chat of the fixtures' goldens (qwen3-golden.json: 14 renderings,
 *     qwen35-chat-golden.json: 20), byte for byte, and again with each tool
 *     call's arguments sent as a JSON string, as the OpenAI API sends them;
 *   - a few longer conversations written here (tool calls and responses,
 *     multi-step reasoning, typed parameters, content parts, Unicode
 *     whitespace), whose expected texts were rendered from the two templates
 *     by jinja2 3.1.6 set up as transformers' apply_chat_template sets it up
 *     (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, tojson =
 *     json.dumps(ensure_ascii=False)); that setup reproduces all 34 fixture
 *     goldens;
 *   - template detection, and every error case.
 *
 * test_chat --write-seeds DIR writes conversations for fuzz/fuzz_chat.c. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "testutil.h"

/* ---- comparing texts ------------------------------------------------------ */

/* Up to 60 bytes of s from off, escaped, for a failure report. */
static void show(const char *label, const char *s, size_t off)
{
    size_t n = strlen(s);
    fprintf(stderr, "    %s: \"", label);
    for (size_t i = off; i < n && i < off + 60; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stderr);
        else if (c == '"' || c == '\\')
            fprintf(stderr, "\\%c", c);
        else if (c < 0x20)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    fprintf(stderr, "\"%s\n", off + 60 < n ? "..." : "");
}

/* True when got == want; otherwise prints the first differing byte. */
static bool same_text(const char *what, const char *got, const char *want)
{
    if (strcmp(got, want) == 0)
        return true;
    size_t k = 0;
    while (got[k] && got[k] == want[k])
        k++;
    size_t from = k > 20 ? k - 20 : 0;
    fprintf(stderr, "  %s: differs at byte %zu (got %zu bytes, want %zu); from byte %zu:\n", what, k, strlen(got),
            strlen(want), from);
    show("got ", got, from);
    show("want", want, from);
    return false;
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fprintf(stderr, "%s: %s (line %d)\n", path, je.text, je.line);
    return j;
}

/* A deep copy of messages with every tool call's arguments object turned
 * into a JSON string (compact, or as jansson indents it). */
static json_t *stringify_arguments(const json_t *messages, bool indent)
{
    json_t *copy = json_deep_copy(messages);
    size_t i, j;
    json_t *m, *call;
    json_array_foreach(copy, i, m) {
        json_array_foreach(json_object_get(m, "tool_calls"), j, call) {
            json_t *fn = json_object_get(call, "function");
            if (!fn)
                fn = call;
            json_t *a = json_object_get(fn, "arguments");
            if (!json_is_object(a))
                continue;
            char *s = json_dumps(a, JSON_PRESERVE_ORDER | (indent ? JSON_INDENT(2) : JSON_COMPACT));
            json_object_set_new(fn, "arguments", json_string(s));
            free(s);
        }
    }
    return copy;
}

static bool has_tool_calls(const json_t *messages)
{
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
        if (json_array_size(json_object_get(m, "tool_calls")))
            return true;
    return false;
}

/* ---- the fixture goldens -------------------------------------------------- */

static void golden_file(const char *fx, const char *file, chat_style style, const char *label, int want_n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/%s", fx, file);
    json_t *g = load_json(path);
    CHECKF(g != NULL, "%s: cannot read", path);
    if (!g)
        return;
    json_t *chats = json_object_get(g, "chats");
    CHECKF(json_array_size(chats) == (size_t)want_n, "%s: %zu chats, expected %d", file, json_array_size(chats),
           want_n);
    int passed = 0, n = (int)json_array_size(chats), string_args = 0;
    for (int i = 0; i < n; i++) {
        json_t *c = json_array_get(chats, i);
        json_t *msgs = json_object_get(c, "messages"), *tools = json_object_get(c, "tools");
        json_t *think = json_object_get(c, "enable_thinking"), *gerr = json_object_get(c, "error");
        const char *want = json_string_value(json_object_get(c, "text"));
        chat_opts o = {.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"))};
        if (json_is_boolean(think)) {
            o.enable_thinking_set = true;
            o.enable_thinking = json_is_true(think);
        }
        char *out = NULL, what[128];
        lilac_error err = {0};
        lilac_status st = chat_render(style, msgs, tools, &o, &out, &err);
        snprintf(what, sizeof what, "%s chat %d", label, i);
        if (gerr && !json_is_null(gerr)) { /* the template raises: so must we */
            CHECKF(st != LILAC_OK && out == NULL, "%s: the template raises (%s) but it rendered", what,
                   json_string_value(gerr));
            passed += st != LILAC_OK;
            continue;
        }
        CHECKF(st == LILAC_OK, "%s: %s", what, err.msg);
        CHECKF(want != NULL, "%s: no golden text", what);
        if (st == LILAC_OK && want) {
            bool ok = same_text(what, out, want);
            CHECKF(ok, "%s: text differs from the golden", what);
            passed += ok;
        }
        free(out);

        /* The same with arguments as the OpenAI API sends them. */
        if (want && has_tool_calls(msgs)) {
            for (int indent = 0; indent < 2; indent++) {
                json_t *sm = stringify_arguments(msgs, indent);
                out = NULL;
                st = chat_render(style, sm, tools, &o, &out, &err);
                snprintf(what, sizeof what, "%s chat %d, arguments as a JSON string%s", label, i,
                         indent ? " (indented)" : "");
                CHECKF(st == LILAC_OK, "%s: %s", what, err.msg);
                if (st == LILAC_OK)
                    CHECKF(same_text(what, out, want), "%s: text differs", what);
                string_args++;
                free(out);
                json_decref(sm);
            }
        }
    }
    printf("%s goldens: %d/%d byte-exact (%d renderings with string arguments)\n", label, passed, n,
           string_args);
    CHECKF(passed == want_n, "%s: %d/%d goldens", label, passed, want_n);
    json_decref(g);
}

/* ---- longer conversations, expected texts from the templates --------------- */

typedef struct text_case {
    const char *name;
    chat_style style;
    const char *conversation; /* {"messages", "tools"} */
    bool gen;
    int think_set, think;
    const char *want;
} text_case;

static const text_case text_cases[] = {
    {"qwen3 tools, calls, responses", CHAT_STYLE_QWEN3,
     "{\"messages\": [{\"role\": \"system\", \"content\": \"You are terse.\"}, {\"role\": \"user\", \"content\": \"Weather in Paris and Zürich?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nneed two calls\\n</think>\\n\\nChecking.\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"opts\": {\"unit\": \"°C\", \"precise\": true, \"ratio\": 1.0, \"none\": null}}}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"list\": [1, 2.5, \"x\"]}}]}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21}\"}, {\"role\": \"tool\", \"content\": [{\"type\": \"text\", \"text\": \"{\\\"temp\\\": \"}, {\"type\": \"text\", \"text\": \"18}\"}]}, {\"role\": \"assistant\", \"content\": \"Paris 21 °C, Zürich 18 °C.\", \"reasoning_content\": \"\\nboth answered\\n\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Météo — weather 🌤\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1, \"maximum\": 7.0, \"scale\": 0.5, \"big\": 1e+16, \"tiny\": 1e-05}, \"flags\": {\"nullable\": null, \"on\": true, \"off\": false, \"empty\": {}, \"list\": [], \"esc\": \"tab\\t\\\"q\\\" back\\\\ \\u0001\"}}, \"required\": [\"city\"]}}}]}",
     true, 0, 0,
     "<|im_start|>system\n"
        "You are terse.\n"
        "\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Météo — weather 🌤\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1, \"maximum\": 7.0, \"scale\": 0.5, \"big\": 1e+16, \"tiny\": 1e-05}, \"flags\": {\"nullable\": null, \"on\": true, \"off\": false, \"empty\": {}, \"list\": [], \"esc\": \"tab\\t\\\"q\\\" back\\\\ \\u0001\"}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris and Zürich?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "need two calls\n"
        "</think>\n"
        "\n"
        "Checking.\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"opts\": {\"unit\": \"°C\", \"precise\": true, \"ratio\": 1.0, \"none\": null}}}\n"
        "</tool_call>\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"list\": [1, 2.5, \"x\"]}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "{\"temp\": 21}\n"
        "</tool_response>\n"
        "<tool_response>\n"
        "{\"temp\": 18}\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "both answered\n"
        "</think>\n"
        "\n"
        "Paris 21 °C, Zürich 18 °C.<|im_end|>\n"
        "<|im_start|>assistant\n"},
    {"qwen3 multi-step reasoning kept after the last query", CHAT_STYLE_QWEN3,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Q1\"}, {\"role\": \"assistant\", \"content\": \"<think>old</think>A1\"}, {\"role\": \"user\", \"content\": \"Q2\"}, {\"role\": \"assistant\", \"content\": \"\\n\\nstep\", \"reasoning_content\": \"plan\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {}}}]}, {\"role\": \"tool\", \"content\": \"r\"}, {\"role\": \"user\", \"content\": \"<tool_response>\\nwrapped\\n</tool_response>\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": {\"k\": \"v\"}}}]}, {\"role\": \"tool\", \"content\": \"done\"}, {\"role\": \"system\", \"content\": \"late system\"}, {\"role\": \"assistant\", \"content\": \"final\"}]}",
     false, 0, 0,
     "<|im_start|>user\n"
        "Q1<|im_end|>\n"
        "<|im_start|>assistant\n"
        "A1<|im_end|>\n"
        "<|im_start|>user\n"
        "Q2<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "plan\n"
        "</think>\n"
        "\n"
        "step\n"
        "<tool_call>\n"
        "{\"name\": \"f\", \"arguments\": {}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "r\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "wrapped\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "<tool_call>\n"
        "{\"name\": \"g\", \"arguments\": {\"k\": \"v\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "done\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>system\n"
        "late system<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n"
        "final<|im_end|>\n"},
    {"qwen3.5 tools, system, typed parameters", CHAT_STYLE_QWEN35,
     "{\"messages\": [{\"role\": \"system\", \"content\": \"  \\n You are terse.　\\n\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \" Weather in \"}, {\"type\": \"text\", \"text\": \"Zürich? \"}]}, {\"role\": \"assistant\", \"content\": \"I'll check.\", \"tool_calls\": [{\"id\": \"c0\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3, \"ratio\": 0.5, \"whole\": 2.0, \"on\": true, \"off\": false, \"nothing\": null, \"opts\": {\"unit\": \"°C\", \"n\": [1, 2]}, \"list\": [\"a\", 1e+16], \"text\": \"two\\nlines\"}}}, {\"type\": \"function\", \"function\": {\"name\": \"noargs\"}}]}, {\"role\": \"tool\", \"content\": \"  {\\\"temp\\\": 18}\\n\"}, {\"role\": \"tool\", \"content\": null}, {\"role\": \"assistant\", \"content\": \"\\n<think>\\nlooked it up\\n</think>\\n\\n\\nZürich: 18 °C.\\n\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Météo — weather 🌤\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1, \"maximum\": 7.0, \"scale\": 0.5, \"big\": 1e+16, \"tiny\": 1e-05}, \"flags\": {\"nullable\": null, \"on\": true, \"off\": false, \"empty\": {}, \"list\": [], \"esc\": \"tab\\t\\\"q\\\" back\\\\ \\u0001\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"noargs\", \"parameters\": {}}}]}",
     true, 1, 0,
     "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You have access to the following functions:\n"
        "\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Météo — weather 🌤\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1, \"maximum\": 7.0, \"scale\": 0.5, \"big\": 1e+16, \"tiny\": 1e-05}, \"flags\": {\"nullable\": null, \"on\": true, \"off\": false, \"empty\": {}, \"list\": [], \"esc\": \"tab\\t\\\"q\\\" back\\\\ \\u0001\"}}, \"required\": [\"city\"]}}}\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"noargs\", \"parameters\": {}}}\n"
        "</tools>\n"
        "\n"
        "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
        "\n"
        "<tool_call>\n"
        "<function=example_function_name>\n"
        "<parameter=example_parameter_1>\n"
        "value_1\n"
        "</parameter>\n"
        "<parameter=example_parameter_2>\n"
        "This is the value for the second parameter\n"
        "that can span\n"
        "multiple lines\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call>\n"
        "\n"
        "<IMPORTANT>\n"
        "Reminder:\n"
        "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
        "- Required parameters MUST be specified\n"
        "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
        "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
        "</IMPORTANT>\n"
        "\n"
        "You are terse.<|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Zürich?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n"
        "I'll check.\n"
        "\n"
        "<tool_call>\n"
        "<function=get_weather>\n"
        "<parameter=city>\n"
        "Zürich\n"
        "</parameter>\n"
        "<parameter=days>\n"
        "3\n"
        "</parameter>\n"
        "<parameter=ratio>\n"
        "0.5\n"
        "</parameter>\n"
        "<parameter=whole>\n"
        "2.0\n"
        "</parameter>\n"
        "<parameter=on>\n"
        "True\n"
        "</parameter>\n"
        "<parameter=off>\n"
        "False\n"
        "</parameter>\n"
        "<parameter=nothing>\n"
        "None\n"
        "</parameter>\n"
        "<parameter=opts>\n"
        "{\"unit\": \"°C\", \"n\": [1, 2]}\n"
        "</parameter>\n"
        "<parameter=list>\n"
        "[\"a\", 1e+16]\n"
        "</parameter>\n"
        "<parameter=text>\n"
        "two\n"
        "lines\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call>\n"
        "<tool_call>\n"
        "<function=noargs>\n"
        "</function>\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "{\"temp\": 18}\n"
        "</tool_response>\n"
        "<tool_response>\n"
        "\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "looked it up\n"
        "</think>\n"
        "\n"
        "Zürich: 18 °C.<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n"},
    {"qwen3.5 multi-step, no generation prompt", CHAT_STYLE_QWEN35,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Q1\"}, {\"role\": \"assistant\", \"content\": \"A1\", \"reasoning_content\": \"r1\"}, {\"role\": \"user\", \"content\": \"Q2\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"  plan  \", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}, {\"role\": \"tool\", \"content\": \"r\"}, {\"role\": \"user\", \"content\": \"  <tool_response>\\nwrapped\\n</tool_response>\\n\"}, {\"role\": \"assistant\", \"content\": \"a<think>x</think>b</think>\\n\\nfinal\"}]}",
     false, 0, 0,
     "<|im_start|>user\n"
        "Q1<|im_end|>\n"
        "<|im_start|>assistant\n"
        "A1<|im_end|>\n"
        "<|im_start|>user\n"
        "Q2<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "plan\n"
        "</think>\n"
        "\n"
        "<tool_call>\n"
        "<function=f>\n"
        "<parameter=x>\n"
        "1\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "r\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "wrapped\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "x\n"
        "</think>\n"
        "\n"
        "final<|im_end|>\n"},
};

static void test_text_cases(void)
{
    for (size_t k = 0; k < sizeof text_cases / sizeof text_cases[0]; k++) {
        const text_case *tc = &text_cases[k];
        json_t *msgs = NULL, *tools = NULL;
        lilac_error err = {0};
        lilac_status st = chat_parse_conversation(tc->conversation, &msgs, &tools, &err);
        CHECKF(st == LILAC_OK, "%s: parse: %s", tc->name, err.msg);
        if (st != LILAC_OK)
            continue;
        chat_opts o = {.add_generation_prompt = tc->gen, .enable_thinking_set = tc->think_set,
                       .enable_thinking = tc->think};
        char *out = NULL;
        st = chat_render(tc->style, msgs, tools, &o, &out, &err);
        CHECKF(st == LILAC_OK, "%s: %s", tc->name, err.msg);
        if (st == LILAC_OK)
            CHECKF(same_text(tc->name, out, tc->want), "%s: text differs", tc->name);
        free(out);
        /* and with the arguments as JSON strings */
        json_t *sm = stringify_arguments(msgs, false);
        out = NULL;
        st = chat_render(tc->style, sm, tools, &o, &out, &err);
        CHECKF(st == LILAC_OK, "%s (string arguments): %s", tc->name, err.msg);
        if (st == LILAC_OK)
            CHECKF(same_text(tc->name, out, tc->want), "%s (string arguments): text differs", tc->name);
        free(out);
        json_decref(sm);
        json_decref(msgs);
        json_decref(tools);
    }
}

/* ---- small renderings --------------------------------------------------------- */

/* Render conversation JSON text; NULL (and err filled) on failure. */
static char *render_text(chat_style style, const char *conv, const chat_opts *o, lilac_status *st_out,
                         lilac_error *err)
{
    json_t *msgs = NULL, *tools = NULL;
    lilac_status st = chat_parse_conversation(conv, &msgs, &tools, err);
    char *out = NULL;
    if (st == LILAC_OK)
        st = chat_render(style, msgs, tools, o, &out, err);
    json_decref(msgs);
    json_decref(tools);
    if (st_out)
        *st_out = st;
    return out;
}

static void expect_text(chat_style style, const char *conv, const chat_opts *o, const char *want)
{
    lilac_error err = {0};
    lilac_status st;
    char *out = render_text(style, conv, o, &st, &err);
    CHECKF(st == LILAC_OK, "%s: %s", conv, err.msg);
    if (out)
        CHECKF(same_text(conv, out, want), "%s: text differs", conv);
    free(out);
}

static void test_options(void)
{
    const char *conv = "[{\"role\":\"user\",\"content\":\"Hi\"}]";
    chat_opts gen = {.add_generation_prompt = true};
    chat_opts gen_on = {.add_generation_prompt = true, .enable_thinking_set = true, .enable_thinking = true};
    chat_opts gen_off = {.add_generation_prompt = true, .enable_thinking_set = true};
    const char *u = "<|im_start|>user\nHi<|im_end|>\n";
    char want[256];
    /* no options: no generation prompt */
    expect_text(CHAT_STYLE_QWEN3, conv, NULL, u);
    expect_text(CHAT_STYLE_QWEN35, conv, NULL, u);
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n", u);
    expect_text(CHAT_STYLE_QWEN3, conv, &gen, want);
    expect_text(CHAT_STYLE_QWEN3, conv, &gen_on, want);
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n<think>\n\n</think>\n\n", u);
    expect_text(CHAT_STYLE_QWEN3, conv, &gen_off, want);
    expect_text(CHAT_STYLE_QWEN35, conv, &gen_off, want);
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n<think>\n", u);
    expect_text(CHAT_STYLE_QWEN35, conv, &gen, want);
    expect_text(CHAT_STYLE_QWEN35, conv, &gen_on, want);

    /* an empty tools array is no tools; so is null */
    expect_text(CHAT_STYLE_QWEN3, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[]}", NULL, u);
    expect_text(CHAT_STYLE_QWEN35, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":null}", NULL,
                u);
    /* content: parts concatenated, null as "" */
    expect_text(CHAT_STYLE_QWEN3,
                "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"H\"},{\"type\":\"text\",\"text\":"
                "\"i\"}]},{\"role\":\"assistant\",\"content\":null}]",
                NULL, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<|im_end|>\n");
    /* Qwen3.5: a tool call with no arguments has no parameters */
    expect_text(CHAT_STYLE_QWEN35,
                "[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\",\"content\":\"\","
                "\"tool_calls\":[{\"function\":{\"name\":\"ping\"}}]}]",
                NULL,
                "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"
                "<function=ping>\n</function>\n</tool_call><|im_end|>\n");
    /* json.dumps of strings: escapes, control characters, non-ASCII kept */
    expect_text(CHAT_STYLE_QWEN3,
                "[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\",\"content\":\"\","
                "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"s\\\":\\\"\\\\\\\"\\\\\\\\/"
                "\\\\b\\\\f\\\\n\\\\r\\\\t\\\\u0001\\\\u007f é\\\",\\\"n\\\":[-0.0,1E2,-3,true,null]}\"}}]}]",
                NULL,
                "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"
                "{\"name\": \"f\", \"arguments\": {\"s\": \"\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\x7f é\", "
                "\"n\": [-0.0, 100.0, -3, true, null]}}\n</tool_call><|im_end|>\n");
}

/* ---- detection ---------------------------------------------------------------- */

static const char LLAMA_TEMPLATE[] =
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
    "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

/* Qwen2.5's: ChatML and JSON tool calls, but no thinking. */
static const char QWEN25_TEMPLATE[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>\\n' }}{%- endfor %}{{- '<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call>' }}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}";

static void test_detect(const char *fx)
{
    char path[4096];
    lilac_error err = {0};
    chat_style s = 0;
    if (fx) {
        snprintf(path, sizeof path, "%s/tokenizer/qwen3/tokenizer_config.json", fx);
        json_t *cfg = load_json(path);
        const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
        CHECKF(tmpl != NULL, "%s: no chat_template string", path);
        if (tmpl) {
            CHECKF(chat_style_detect(tmpl, &s, &err) == LILAC_OK && s == CHAT_STYLE_QWEN3,
                   "Qwen3 template: style %d, %s", (int)s, err.msg);
        }
        json_decref(cfg);

        snprintf(path, sizeof path, "%s/tokenizer/qwen35-chat-template.jinja", fx);
        size_t n35 = 0;
        char *t35 = tu_read_file(path, &n35);
        CHECKF(t35 != NULL, "%s: cannot read", path);
        if (t35) {
            char *z = realloc(t35, n35 + 1);
            if (z) {
                t35 = z;
                t35[n35] = 0;
                s = 0;
                CHECKF(chat_style_detect(t35, &s, &err) == LILAC_OK && s == CHAT_STYLE_QWEN35,
                       "Qwen3.5 template: style %d, %s", (int)s, err.msg);
            }
            free(t35);
        }
    }
    const char *others[] = {LLAMA_TEMPLATE, QWEN25_TEMPLATE, "", "{{ messages }}"};
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        memset(&err, 0, sizeof err);
        lilac_status st = chat_style_detect(others[k], &s, &err);
        CHECKF(st == LILAC_E_UNSUPPORTED, "template %zu: status %d", k, (int)st);
        CHECKF(strstr(err.msg, "unsupported chat template: lilac renders the Qwen3 and Qwen3.5 ChatML templates"),
               "template %zu: message '%s'", k, err.msg);
    }
    CHECK(chat_style_detect(NULL, &s, &err) == LILAC_E_ARG);
}

/* ---- errors ----------------------------------------------------------------- */

typedef struct error_case {
    int styles; /* 1: Qwen3, 2: Qwen3.5, 3: both */
    const char *conversation;
    lilac_status status;
    const char *msg; /* a part of the message */
} error_case;

#define U "{\"role\":\"user\",\"content\":\"q\"}"
#define CALL(args) "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":" \
                   "{\"name\":\"f\",\"arguments\":" args "}}]}"

static const error_case error_cases[] = {
    {3, "[" U ",{\"role\":\"robot\",\"content\":\"beep\"}]", LILAC_E_ARG, "message 1: unknown role 'robot'"},
    {3, "[" U ",{\"content\":\"x\"}]", LILAC_E_ARG, "message 1 has no role"},
    {3, "[" U ",{\"role\":\"ro\\nbot\\u0001\"}]", LILAC_E_ARG, "message 1: unknown role 'ro?bot?'"},
    {3, "[" U ",{\"role\":7,\"content\":\"x\"}]", LILAC_E_ARG, "message 1: role must be a string"},
    {3, "[\"hello\"]", LILAC_E_ARG, "message 0 is a string, not an object"},
    {3, "[" U ",[1]]", LILAC_E_ARG, "message 1 is an array, not an object"},
    {3, "[{\"role\":\"user\",\"content\":42}]", LILAC_E_ARG,
     "message 0: content must be a string or an array of text parts, not a number"},
    {3, "[{\"role\":\"user\",\"content\":{\"text\":\"x\"}}]", LILAC_E_ARG,
     "message 0: content must be a string or an array of text parts, not an object"},
    {3, "[{\"role\":\"user\",\"content\":[\"x\"]}]", LILAC_E_ARG, "message 0: content part 0 is a string"},
    {3, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"audio\"}]}]", LILAC_E_ARG,
     "message 0: content part 1 has no \"text\""},
    {3, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]", LILAC_E_ARG,
     "message 0: content part 0: \"text\" must be a string, not a number"},
    {3, "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]",
     LILAC_E_UNSUPPORTED, "message 0: content part 0 is an image"},
    {3, "[{\"role\":\"user\",\"content\":[{\"type\":\"video\",\"video\":\"v.mp4\"}]}]", LILAC_E_UNSUPPORTED,
     "message 0: content part 0 is a video"},
    {3, "[" U ",{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":[1]}]", LILAC_E_ARG,
     "message 1: reasoning_content must be a string, not an array"},
    {3, "[]", LILAC_E_ARG, "no messages provided"},
    {3, "{\"messages\":[]}", LILAC_E_ARG, "no messages provided"},
    /* the Qwen3.5 template's raise_exception()s */
    {2, "[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"assistant\",\"content\":\"a\"}]", LILAC_E_ARG,
     "no user query found in messages"},
    {2, "[{\"role\":\"user\",\"content\":\" <tool_response>x</tool_response>\\n\"}]", LILAC_E_ARG,
     "no user query found in messages"},
    {2, "[" U ",{\"role\":\"system\",\"content\":\"late\"}]", LILAC_E_ARG,
     "message 1: a system message must be the first message"},
    {2, "[{\"role\":\"tool\",\"content\":\"r\"}," U "]", LILAC_E_ARG,
     "message 0: a tool response cannot be the first message"},
    /* tool calls */
    {3, "[" U ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":{\"name\":\"f\"}}]", LILAC_E_ARG,
     "message 1: tool_calls must be an array, not an object"},
    {3, "[" U ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[\"f\"]}]", LILAC_E_ARG,
     "message 1: tool call 0 is a string, not an object"},
    {3, "[" U ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":\"f\"}]}]", LILAC_E_ARG,
     "message 1: tool call 0: \"function\" must be an object"},
    {3, "[" U ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"arguments\":{}}}]}]",
     LILAC_E_ARG, "message 1: tool call 0 has no function name"},
    {3, "[" U ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":3}}]}]",
     LILAC_E_ARG, "message 1: tool call 0: the function name must be a string, not a number"},
    {1, "[" U ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]",
     LILAC_E_ARG, "message 1: tool call 0 has no arguments"},
    {3, "[" U "," CALL("\"{\\\"city\\\": \\\"Paris\\\"\"") "]", LILAC_E_ARG,
     "message 1: tool call 0: arguments are not valid JSON"},
    {3, "[" U "," CALL("\"\"") "]", LILAC_E_ARG, "message 1: tool call 0: arguments are not valid JSON"},
    {3, "[" U "," CALL("\"[1, 2]\"") "]", LILAC_E_ARG,
     "message 1: tool call 0: arguments must hold a JSON object, not an array"},
    {3, "[" U "," CALL("\"\\\"Paris\\\"\"") "]", LILAC_E_ARG,
     "message 1: tool call 0: arguments must hold a JSON object, not a string"},
    {3, "[" U "," CALL("[1]") "]", LILAC_E_ARG,
     "message 1: tool call 0: arguments must be an object or a string holding one, not an array"},
    {3, "[" U "," CALL("null") "]", LILAC_E_ARG,
     "message 1: tool call 0: arguments must be an object or a string holding one, not null"},
    /* the conversation itself */
    {3, "[" U ",", LILAC_E_ARG, "conversation: invalid JSON at line 1"},
    {3, "42", LILAC_E_ARG, "conversation: expected an array of messages"},
    {3, "{\"model\":\"x\"}", LILAC_E_ARG, "conversation: no \"messages\""},
    {3, "{\"messages\":{\"role\":\"user\"}}", LILAC_E_ARG, "conversation: \"messages\" must be an array"},
    {3, "{\"messages\":[" U "],\"tools\":{\"name\":\"f\"}}", LILAC_E_ARG,
     "conversation: \"tools\" must be an array, not an object"},
};

static void test_errors(void)
{
    for (size_t k = 0; k < sizeof error_cases / sizeof error_cases[0]; k++) {
        const error_case *ec = &error_cases[k];
        for (int s = 1; s <= 2; s++) {
            if (!(ec->styles & s))
                continue;
            lilac_error err = {0};
            lilac_status st;
            chat_opts o = {.add_generation_prompt = true};
            char *out = render_text((chat_style)s, ec->conversation, &o, &st, &err);
            CHECKF(st == ec->status && out == NULL, "style %d, %s: status %d (want %d), %s", s, ec->conversation,
                   (int)st, (int)ec->status, out ? "rendered" : err.msg);
            CHECKF(strstr(err.msg, ec->msg) != NULL, "style %d, %s: message '%s' lacks '%s'", s,
                   ec->conversation, err.msg, ec->msg);
            CHECKF(strchr(err.msg, '\n') == NULL, "style %d: message on more than one line: '%s'", s, err.msg);
            free(out);
        }
    }

    /* Qwen3 renders what Qwen3.5 refuses */
    chat_opts o = {0};
    expect_text(CHAT_STYLE_QWEN3, "[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"assistant\",\"content\":"
                "\"a\"}]", &o, "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n");
    expect_text(CHAT_STYLE_QWEN3, "[{\"role\":\"tool\",\"content\":\"r\"}," U "]", &o,
                "<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n<|im_start|>user\nq<|im_end|>\n");

    /* the arguments of chat_render itself */
    json_error_t je;
    json_t *msgs = json_loads("[" U "]", 0, &je), *obj = json_object();
    lilac_error err = {0};
    char *out = (char *)&err;
    CHECK(chat_render(CHAT_STYLE_QWEN3, obj, NULL, &o, &out, &err) == LILAC_E_ARG && out == NULL);
    CHECK(strstr(err.msg, "messages must be a JSON array") != NULL);
    CHECK(chat_render(CHAT_STYLE_QWEN3, NULL, NULL, &o, &out, &err) == LILAC_E_ARG && out == NULL);
    CHECK(chat_render(CHAT_STYLE_QWEN35, msgs, obj, &o, &out, &err) == LILAC_E_ARG && out == NULL);
    CHECK(strstr(err.msg, "tools must be a JSON array, not an object") != NULL);
    CHECK(chat_render((chat_style)9, msgs, NULL, &o, &out, &err) == LILAC_E_ARG && out == NULL);
    CHECK(strstr(err.msg, "unknown chat style 9") != NULL);
    CHECK(chat_render(CHAT_STYLE_QWEN3, msgs, NULL, &o, NULL, &err) == LILAC_E_ARG);
    CHECK(chat_render(CHAT_STYLE_QWEN3, msgs, NULL, &o, &out, NULL) == LILAC_OK && out != NULL);
    free(out);
    /* a NUL inside a string can not go into the prompt */
    json_t *nul = json_pack("[{s:s, s:s#}]", "role", "user", "content", "a\0b", (size_t)3);
    CHECK(chat_render(CHAT_STYLE_QWEN35, nul, NULL, &o, &out, &err) == LILAC_E_ARG && out == NULL);
    CHECK(strstr(err.msg, "message 0: content contains a NUL character") != NULL);
    json_decref(nul);
    json_decref(msgs);
    json_decref(obj);
}

static void test_parse(void)
{
    json_t *m = NULL, *t = NULL;
    lilac_error err = {0};
    CHECK(chat_parse_conversation("[" U "]", &m, &t, &err) == LILAC_OK && json_array_size(m) == 1 && t == NULL);
    json_decref(m);
    CHECK(chat_parse_conversation("{\"model\":\"m\",\"messages\":[" U "],\"tools\":[{\"type\":\"function\"}]}", &m,
                                  &t, &err) == LILAC_OK &&
          json_array_size(m) == 1 && json_array_size(t) == 1);
    json_decref(m);
    json_decref(t);
    CHECK(chat_parse_conversation("{\"messages\":[" U "],\"tools\":null}", &m, &t, &err) == LILAC_OK && t == NULL);
    json_decref(m);
    m = t = (json_t *)&err;
    CHECK(chat_parse_conversation("[", &m, &t, &err) == LILAC_E_ARG && m == NULL && t == NULL);
    CHECK(chat_parse_conversation(NULL, &m, &t, &err) == LILAC_E_ARG);
}

/* The OpenAI API's form of a tool-using conversation: arguments as a
 * JSON string, content null beside tool_calls, tool_call_id on results. */
static void test_openai_form(void)
{
    const char *as_object =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"days\":2,\"metric\":true}}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}}]}";
    const char *as_string =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\n \\\"days\\\":2,"
        "\\\"metric\\\":true}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}}]}";
    for (int s = 1; s <= 2; s++) {
        chat_opts o = {.add_generation_prompt = true};
        lilac_error err = {0};
        lilac_status st1, st2;
        char *a = render_text((chat_style)s, as_object, &o, &st1, &err);
        char *b = render_text((chat_style)s, as_string, &o, &st2, &err);
        CHECKF(st1 == LILAC_OK && st2 == LILAC_OK, "style %d: %s", s, err.msg);
        if (a && b)
            CHECKF(same_text("arguments as a string", b, a), "style %d: string arguments render differently", s);
        if (a && s == 1)
            CHECK(strstr(a, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, "
                            "\"metric\": true}}") != NULL);
        if (a && s == 2)
            CHECK(strstr(a, "<parameter=days>\n2\n</parameter>\n<parameter=metric>\nTrue\n</parameter>") != NULL);
        free(a);
        free(b);
    }
}

/* ---- seeds for fuzz/fuzz_chat.c ------------------------------------------------ */

static int write_seeds(const char *dir)
{
    int n = 0;
    char path[4096];
    for (size_t k = 0; k < sizeof text_cases / sizeof text_cases[0]; k++) {
        snprintf(path, sizeof path, "%s/seed-case-%zu.json", dir, k);
        n += tu_write_file(path, text_cases[k].conversation, strlen(text_cases[k].conversation)) == 0;
    }
    for (size_t k = 0; k < sizeof error_cases / sizeof error_cases[0]; k++) {
        snprintf(path, sizeof path, "%s/seed-error-%zu.json", dir, k);
        n += tu_write_file(path, error_cases[k].conversation, strlen(error_cases[k].conversation)) == 0;
    }
    const char *fx = tu_fixtures();
    const char *files[] = {"qwen3-golden.json", "qwen35-chat-golden.json"};
    for (int f = 0; fx && f < 2; f++) {
        snprintf(path, sizeof path, "%s/tokenizer/%s", fx, files[f]);
        json_t *g = load_json(path);
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(g, "chats"), i, c) {
            if (i % 2) /* each conversation comes twice, thinking on and off */
                continue;
            json_t *conv = json_pack("{s:O, s:O}", "messages", json_object_get(c, "messages"), "tools",
                                     json_object_get(c, "tools"));
            char *text = conv ? json_dumps(conv, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
            snprintf(path, sizeof path, "%s/seed-golden-%d-%zu.json", dir, f, i);
            n += text && tu_write_file(path, text, strlen(text)) == 0;
            free(text);
            json_decref(conv);
        }
        json_decref(g);
    }
    printf("wrote %d seeds to %s\n", n, dir);
    return n > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--write-seeds") == 0)
        return write_seeds(argv[2]);

    test_options();
    test_errors();
    test_parse();
    test_openai_form();
    test_text_cases();

    const char *fx = tu_fixtures();
    test_detect(fx);
    if (!fx) {
        if (tu_failures) /* a failure counts even when the goldens are missing */
            TEST_END();
        tu_require_fixtures(); /* says why the goldens were skipped; exits 77 */
    }
    golden_file(fx, "qwen3-golden.json", CHAT_STYLE_QWEN3, "qwen3", 14);
    golden_file(fx, "qwen35-chat-golden.json", CHAT_STYLE_QWEN35, "qwen3.5", 20);
    TEST_END();
}
