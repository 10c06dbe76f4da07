/* handle: a finished request's text becomes the chat response — content
 * and every tool call, however many (a reply of 50 calls keeps all 50). */
#include <jansson.h>

#include "server/handle.h"
#include "testutil.h"

int main(void)
{
    hnd_engine en = {.model_name = "m"};
    api_request req = {.kind = API_CHAT};
    hnd_prep p = {.req = &req};
    snprintf(p.id, sizeof p.id, "chatcmpl-test");
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                               "{\"type\": \"object\", \"properties\": {\"i\": {\"type\": \"integer\"}}}}}]",
                               0, NULL);
    p.ropts = (reply_opts){.style = CHAT_STYLE_QWEN3, .tools = tools};
    sched_req r = {.state = SCHED_DONE, .finish = LILAC_FINISH_STOP};
    pthread_mutex_init(&r.mu, NULL);
    char *text = malloc(50 * 80 + 64);
    size_t n = (size_t)sprintf(text, "hello");
    for (int i = 0; i < 50; i++)
        n += (size_t)sprintf(text + n, "\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"i\": %d}}\n</tool_call>", i);
    r.text = text;
    r.text_len = n;
    api_error e;
    char *json = hnd_response_json(&en, &p, &r, &e);
    CHECKF(json != NULL, "response: %s", json ? "" : e.message);
    json_t *o = json ? json_loads(json, 0, NULL) : NULL;
    json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    json_t *calls = json_object_get(msg, "tool_calls");
    CHECKF(json_array_size(calls) == 50, "%zu tool calls, 50 written", json_array_size(calls));
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *fn = json_object_get(json_array_get(calls, i), "function");
        char want[32];
        snprintf(want, sizeof want, "{\"i\": %zu}", i);
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        CHECKF(args && !strcmp(args, want), "call %zu: arguments %s, want %s", i, args ? args : "(none)", want);
    }
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")), "hello"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                                                    "finish_reason")),
                  "tool_calls"));
    json_decref(o);
    free(json);
    free(text);
    json_decref(tools);
    pthread_mutex_destroy(&r.mu);
    TEST_END();
}
