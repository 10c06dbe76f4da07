/* The Qwen3 chat goldens end to end through the public API: each
 * conversation rendered by the model's own template (read from
 * tokenizer_config.json) and tokenized gives exactly the reference ids. */
#include "models.h"

int main(void)
{
    const char *fx = tu_require_fixtures();
    char path[8192], dir[8192];
    if (snprintf(path, sizeof path, "%s/tokenizer/qwen3-golden.json", fx) >= (int)sizeof path ||
        snprintf(dir, sizeof dir, "%s/tokenizer/qwen3/tokenizer_config.json", fx) >= (int)sizeof dir)
        SKIP("fixtures path too long");
    json_t *golden = json_load_file(path, 0, NULL), *cfg = json_load_file(dir, 0, NULL);
    const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    CHECK(golden && tmpl);
    snprintf(dir, sizeof dir, "%s/tokenizer/qwen3", fx);
    lilac_tokenizer *tok = NULL;
    lilac_error err;
    CHECKF(lilac_tokenizer_load(dir, &tok, &err) == LILAC_OK, "%s", err.msg);
    json_t *chats = json_object_get(golden, "chats");
    size_t n = json_array_size(chats), ok = 0;
    for (size_t i = 0; tok && tmpl && i < n; i++) {
        json_t *c = json_array_get(chats, i);
        json_t *conv = json_pack("{s:O, s:O}", "messages", json_object_get(c, "messages"), "tools",
                                 json_object_get(c, "tools"));
        char *conv_text = json_dumps(conv, 0), *text = NULL;
        lilac_chat_opts o = {.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
                             .thinking = json_is_true(json_object_get(c, "enable_thinking")) ? 1 : 0};
        int32_t *ids = NULL;
        size_t nid = 0;
        int ng = 0;
        int32_t *want = tm_json_ints(c, "ids", NULL, &ng);
        bool same = false;
        if (lilac_chat_render(tmpl, conv_text, &o, &text, &err) == LILAC_OK &&
            lilac_tokenize(tok, text, strlen(text), true, &ids, &nid, &err) == LILAC_OK)
            same = want && nid == (size_t)ng && memcmp(ids, want, nid * sizeof *ids) == 0;
        else
            printf("chat %zu: %s\n", i, err.msg);
        CHECKF(same, "chat %zu: ids differ from the reference (%zu vs %d ids)", i, nid, ng);
        ok += same;
        free(ids);
        free(want);
        free(text);
        free(conv_text);
        json_decref(conv);
    }
    printf("%zu of %zu chat renderings tokenize to the reference ids\n", ok, n);
    CHECK(n == 14);
    lilac_tokenizer_free(tok);
    json_decref(golden);
    json_decref(cfg);
    TEST_END();
}
