/* Generation end to end on the tiny Qwen3.5-MoE: greedy decoding
 * reproduces the reference continuation, the streamed text is the
 * detokenized tokens and valid UTF-8, stop strings end it without showing
 * themselves, a seed reproduces a sampled run, and a prompt longer than
 * the context is refused with the numbers. */
#include "models.h"

typedef struct {
    int32_t toks[256];
    int n;
    char text[8192];
    size_t len;
} capture;

static bool on_token(void *user, const lilac_gen_event *ev)
{
    capture *c = user;
    if (ev->token >= 0 && c->n < 256)
        c->toks[c->n++] = ev->token;
    if (c->len + ev->len < sizeof c->text) {
        memcpy(c->text + c->len, ev->text, ev->len);
        c->len += ev->len;
        c->text[c->len] = 0;
    }
    return true;
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = s[i] < 0x80 ? 1 : (s[i] >> 5) == 6 ? 2 : (s[i] >> 4) == 14 ? 3 : (s[i] >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return false;
        for (int j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
        i += (size_t)k;
    }
    return true;
}

static int run(lilac_model *m, const int32_t *prompt, int np, lilac_sampler_params *sp, lilac_gen_params *gp,
               capture *c, lilac_gen_result *res, int n_ctx)
{
    lilac_tokenizer *tok;
    lilac_seq *s = NULL;
    lilac_sampler *smp = NULL;
    lilac_error err;
    memset(c, 0, sizeof *c);
    int rc = -1;
    if (lilac_model_tokenizer(m, &tok, &err) || lilac_seq_new(m, n_ctx, &s, &err) ||
        lilac_sampler_new(sp, lilac_model_hparams(m)->n_vocab, &smp, &err))
        goto done;
    if (lilac_generate(s, tok, smp, prompt, np, gp, on_token, c, res, &err)) {
        printf("generate: %s\n", err.msg);
        rc = err.status;
        goto done;
    }
    rc = 0;
done:
    lilac_sampler_free(smp);
    lilac_seq_free(s);
    return rc;
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    char path[8192], mp[8192];
    if (snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/model-bf16.gguf", fx) >= (int)sizeof path ||
        snprintf(mp, sizeof mp, "%s/tiny-qwen35moe/golden/meta.json", fx) >= (int)sizeof mp)
        SKIP("fixtures path too long");
    json_t *meta = json_load_file(mp, 0, NULL);
    int np = 0, nc = 0;
    int32_t *prompt = tm_json_ints(meta, "greedy", "prompt", &np);
    int32_t *cont = tm_json_ints(meta, "greedy", "continuation", &nc);
    lilac_model *m = tm_open(path, 2);
    CHECK(m && prompt && cont);
    if (!m || !prompt || !cont)
        TEST_END();
    lilac_tokenizer *tok;
    lilac_error err;
    CHECK(lilac_model_tokenizer(m, &tok, &err) == LILAC_OK);

    /* greedy: the reference continuation, streamed as its own text */
    lilac_sampler_params sp = lilac_sampler_default_params();
    sp.temperature = 0;
    lilac_gen_params gp = {.max_tokens = nc, .ignore_eos = true};
    capture c;
    lilac_gen_result res;
    CHECK(run(m, prompt, np, &sp, &gp, &c, &res, 64) == 0);
    CHECKF(c.n == nc && memcmp(c.toks, cont, (size_t)nc * sizeof *cont) == 0, "greedy continuation (%d tokens)", c.n);
    CHECK(res.finish == LILAC_FINISH_LENGTH && res.n_generated == nc && res.n_prompt == np);
    char *want = NULL;
    CHECK(lilac_detokenize(tok, cont, (size_t)nc, &want, &err) == LILAC_OK);
    CHECKF(want && strcmp(c.text, want) == 0, "streamed text '%s' vs detokenized '%s'", c.text, want ? want : "");
    CHECK(valid_utf8((const unsigned char *)c.text, c.len));

    /* a stop string across a token boundary: the text up to it, not it */
    if (want && strlen(want) > 12) {
        size_t cut = strlen(want) / 2;
        char stop[8];
        memcpy(stop, want + cut, 4);
        stop[4] = 0;
        const char *stops[] = {stop};
        char *first = strstr(want, stop);
        lilac_gen_params gs = {.max_tokens = nc, .ignore_eos = true, .stop = stops, .n_stop = 1};
        CHECK(run(m, prompt, np, &sp, &gs, &c, &res, 64) == 0);
        CHECKF(res.finish == LILAC_FINISH_STOP && first && c.len == (size_t)(first - want) &&
                   memcmp(c.text, want, c.len) == 0,
               "stop '%s': got '%s'", stop, c.text);
    }
    free(want);

    /* sampling: the same seed gives the same text, another seed another */
    sp = lilac_sampler_default_params();
    sp.temperature = 1.5f, sp.top_k = 0, sp.top_p = 1, sp.min_p = 0, sp.seed = 7;
    gp.max_tokens = 40;
    capture a, b;
    CHECK(run(m, prompt, np, &sp, &gp, &a, &res, 64) == 0 && run(m, prompt, np, &sp, &gp, &b, &res, 64) == 0);
    CHECK(a.n == 40 && a.n == b.n && memcmp(a.toks, b.toks, sizeof a.toks) == 0);
    CHECK(valid_utf8((const unsigned char *)a.text, a.len));
    sp.seed = 8;
    CHECK(run(m, prompt, np, &sp, &gp, &b, &res, 64) == 0);
    CHECK(memcmp(a.toks, b.toks, 40 * sizeof(int32_t)) != 0);

    /* a prompt longer than the context: refused, with the numbers */
    int32_t longp[40] = {0};
    CHECK(run(m, longp, 40, &sp, &gp, &c, &res, 32) == LILAC_E_RANGE);
    /* the context filling up ends generation cleanly */
    gp.max_tokens = 0;
    CHECK(run(m, prompt, np, &sp, &gp, &c, &res, 16) == 0 && res.finish == LILAC_FINISH_CONTEXT &&
          res.n_generated == 16 - np);

    lilac_model_free(m);
    free(prompt);
    free(cont);
    json_decref(meta);
    TEST_END();
}
