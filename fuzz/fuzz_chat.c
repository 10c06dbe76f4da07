/* fuzz_chat: libFuzzer target for the chat renderer. The input bytes are a
 * JSON conversation (an array of messages, or {"messages", "tools"}); what
 * parses is rendered in both styles with thinking on and off, with and
 * without a generation prompt. A success must give a string, a failure no
 * string and a terminated one-line message. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    if (size)
        memcpy(text, data, size);
    text[size] = 0;

    json_t *messages = NULL, *tools = NULL;
    lilac_error err;
    if (chat_parse_conversation(text, &messages, &tools, &err) != LILAC_OK) {
        if (messages || tools || !memchr(err.msg, '\0', sizeof err.msg))
            abort();
        free(text);
        return 0;
    }
    for (int style = CHAT_STYLE_QWEN3; style <= CHAT_STYLE_QWEN35; style++) {
        for (int v = 0; v < 4; v++) {
            chat_opts o = {.add_generation_prompt = v & 1, .enable_thinking_set = true, .enable_thinking = v & 2};
            char *out = (char *)&err; /* must be overwritten either way */
            lilac_status st = chat_render((chat_style)style, messages, tools, &o, &out, &err);
            if (st == LILAC_OK) {
                if (!out)
                    abort();
                volatile size_t n = strlen(out);
                (void)n;
                free(out);
            } else if (out || !memchr(err.msg, '\0', sizeof err.msg) || strchr(err.msg, '\n')) {
                abort();
            }
        }
    }
    json_decref(messages);
    json_decref(tools);
    free(text);
    return 0;
}
