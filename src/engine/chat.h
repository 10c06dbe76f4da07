/* chat: render a conversation into the prompt text the Qwen ChatML-family
 * chat templates produce, without a Jinja engine.
 *
 * Two conventions are written out by hand, each following its template line
 * by line (and checked byte for byte against transformers'
 * apply_chat_template):
 *   - CHAT_STYLE_QWEN3:  the template Qwen3 (e.g. Qwen3-30B-A3B) ships; tool
 *     calls are JSON objects inside <tool_call>, the tools block follows the
 *     system prompt, thinking is on unless enable_thinking is false.
 *   - CHAT_STYLE_QWEN35: the Qwen3.5/3.6 template; tool calls are
 *     <function=NAME><parameter=KEY>VALUE</parameter></function>, the tools
 *     block opens the system turn, the generation prompt opens a <think>
 *     block (or an empty, closed one when enable_thinking is false).
 *
 * Messages are as the OpenAI API sends them: an array of objects with
 * "role" (system, user, assistant, tool) and "content" (a string, an array of
 * {"type": "text", "text": ...} parts, which are concatenated, or null /
 * absent for ""). Assistant messages may carry "reasoning_content" (a string)
 * and "tool_calls" ([{"type": "function", "function": {"name", "arguments"}}]
 * or the flat {"name", "arguments"}), where "arguments" is an object or, as
 * the OpenAI API sends it, a string holding a JSON object, which is parsed.
 * Tool definitions are written as Python's json.dumps writes them
 * (", " and ": " separators, keys in input order, non-ASCII kept).
 *
 * Error messages name the message by its index in the array, from 0:
 * "message 3: unknown role 'robot'". */
#ifndef LILAC_ENGINE_CHAT_H
#define LILAC_ENGINE_CHAT_H

#include <jansson.h>
#include <stdbool.h>

#include "lilac.h"

typedef enum chat_style {
    CHAT_STYLE_QWEN3 = 1,
    CHAT_STYLE_QWEN35 = 2,
} chat_style;

typedef struct chat_opts {
    bool add_generation_prompt; /* end with the opening of an assistant turn */
    bool enable_thinking;       /* read only when enable_thinking_set */
    bool enable_thinking_set;   /* unset: the template's default (on, for both) */
} chat_opts;

/* Which of the two conventions a chat template's text follows.
 * LILAC_E_UNSUPPORTED for any other template (Llama, Qwen2.5, Qwen3-Coder,
 * the 2507 Qwen3 models without an enable_thinking switch, ...). */
lilac_status chat_style_detect(const char *template_text, chat_style *out, lilac_error *err);

/* Render messages (a JSON array) and tools (a JSON array, or NULL or json
 * null for none) as the template of the style does. o may be NULL (no
 * generation prompt, default thinking). On success *out is a malloc'd,
 * NUL-terminated string the caller frees; on failure *out is NULL and err
 * says why: LILAC_E_ARG for a malformed conversation (including the cases
 * where the template itself raises an exception), LILAC_E_UNSUPPORTED for
 * image or video content, LILAC_E_NOMEM. */
lilac_status chat_render(chat_style style, const json_t *messages, const json_t *tools, const chat_opts *o,
                         char **out, lilac_error *err);

/* Parse a conversation: either a JSON array of messages or an object
 * {"messages": [...], "tools": [...]} (other keys, e.g. those of an OpenAI
 * request body, are ignored). *messages gets a new reference to the array;
 * *tools a new reference to the tools array, or NULL when there is none.
 * On failure both are NULL. */
lilac_status chat_parse_conversation(const char *json_text, json_t **messages, json_t **tools,
                                     lilac_error *err);

#endif
