/* reply: split a model's generated text, while it streams, into what the
 * OpenAI API returns separately: reasoning_content (the thinking between
 * <think> and </think>), content, and tool_calls.
 *
 * The parser is fed the detokenized pieces one at a time; a piece may end in
 * the middle of a tag ("<to" + "ol_call>"), so text that could still be the
 * start of a tag is held back until it can be decided, and released by
 * reply_finish. Tool calls are reported whole, when their closing tag
 * arrives, in the format of the chat template's style (see engine/chat.h):
 *   - CHAT_STYLE_QWEN3:  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
 *   - CHAT_STYLE_QWEN35: <tool_call>\n<function=N>\n<parameter=K>\nVALUE\n</parameter>\n</function>\n</tool_call>
 *     where VALUE is raw text: it becomes a JSON string unless the tool's
 *     schema types the parameter as number, integer, boolean, object, array
 *     or null, and the text parses as JSON (Python's True / False / None, as
 *     the template writes them, are read too).
 *
 * Whitespace, as llama.cpp returns it: reasoning and content are each
 * trimmed of leading and trailing whitespace (so neither the "\n" after
 * <think>, the "\n" before </think> nor the "\n\n" after it appear), and the
 * whitespace between content and a tool call, or between two tool calls, is
 * dropped. Whitespace inside either text is kept, but a run of it is held
 * back until it is known not to be trailing. Bytes are passed through as
 * they come, invalid UTF-8 included: sanitizing is the caller's job.
 *
 * A tool call that cannot be parsed (bad JSON, an unknown shape, or one still
 * open at reply_finish) is not lost: its raw text goes out as content, and
 * reply_malformed() says so. */
#ifndef LILAC_ENGINE_REPLY_H
#define LILAC_ENGINE_REPLY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/chat.h"
#include "lilac.h"

typedef struct reply_opts {
    chat_style style;         /* which tool-call format to read */
    bool starts_in_reasoning; /* the prompt ended inside an open <think> (see reply_prompt_opens_reasoning) */
    const json_t *tools;      /* the request's tools array (for parameter types); NULL or empty: tool calls are
                               * not parsed and <tool_call> text stays content */
} reply_opts;

typedef enum reply_kind {
    REPLY_REASONING = 1, /* text: a delta of reasoning_content */
    REPLY_CONTENT = 2,   /* text: a delta of content */
    REPLY_TOOL_CALL = 3, /* a complete tool call */
} reply_kind;

typedef struct reply_event {
    reply_kind kind;
    const char *text; /* REASONING, CONTENT: len bytes (never 0), NUL-terminated */
    size_t len;
    int index;             /* TOOL_CALL: 0, 1, ... in the order the calls came */
    const char *name;      /* TOOL_CALL: the function's name */
    const char *arguments; /* TOOL_CALL: a JSON object as text, e.g. {"city": "Paris"} */
} reply_event;

typedef struct reply_parser reply_parser;

/* The style a chat template's text implies for parsing: CHAT_STYLE_QWEN35
 * when it writes tool calls as <function=...><parameter=...>, else
 * CHAT_STYLE_QWEN3 (JSON in <tool_call>, the Hermes convention most ChatML
 * templates share). Unlike chat_style_detect it never fails. */
chat_style reply_style_of(const char *template_text);

/* Whether a rendered prompt leaves a <think> block open, so that the
 * generated text starts inside the reasoning (Qwen3.5 with thinking on). */
bool reply_prompt_opens_reasoning(const char *prompt, size_t len);

/* o->tools is copied (by reference) and may be released after the call. */
lilac_status reply_new(const reply_opts *o, reply_parser **out, lilac_error *err);
void reply_free(reply_parser *r);

/* Feed one piece of generated text. *events gets what could be decided so far
 * (consecutive text of one kind merged), valid until the next call on r.
 * Fails only for LILAC_E_NOMEM (or LILAC_E_ARG for a bad call), after which r
 * only fails. */
lilac_status reply_feed(reply_parser *r, const char *piece, size_t len, const reply_event **events,
                        size_t *n_events, lilac_error *err);

/* The end of the text: release everything held back; an open tool call goes
 * out as content. Feeding after it is an error. */
lilac_status reply_finish(reply_parser *r, const reply_event **events, size_t *n_events, lilac_error *err);

/* How many tool calls have been reported (finish_reason "tool_calls" when > 0). */
int reply_n_tool_calls(const reply_parser *r);

/* Whether some tool call could not be parsed and went out as content; *why
 * (when why is not NULL) gets a short reason for the first such, or NULL. */
bool reply_malformed(const reply_parser *r, const char **why);

#endif
