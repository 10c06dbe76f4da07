/* The foundation's golden tests: the tiny models of the shared fixtures,
 * from both their Hugging Face checkpoint and llama.cpp's bf16 GGUF,
 * against the reference logits; prefill against one-token decode; the
 * reference's greedy continuation; thread counts and kernels agreeing. */
#include "models.h"

typedef struct {
    const char *name;
    /* Bound on max|Δ| / max|logit| against golden/logits.f32 and how many
     * argmaxes must agree. The issue asks 1e-3 and all 64. tiny-qwen3moe's
     * shared golden is 2.46e-3 away from transformers 5.17 itself (see
     * tests/data/reference/README.md): there the strict bound is checked
     * against transformers' own logits and the golden with the bound it
     * allows. */
    double golden_rel;
    int golden_argmax;
    const char *strict_ref; /* NULL: the golden itself is the strict reference */
} model_case;

static const model_case cases[] = {
    {"tiny-qwen35moe", 1e-3, 64, NULL},
    {"tiny-qwen3moe", 2.6e-3, 63, "tests/data/reference/tiny-qwen3moe.transformers-5.17-f64.logits.f32"},
};


static void report_hidden(const char *what, const float *h, const float *gold, int L1, int n, int E)
{
    for (int l = 0; l < L1; l++) {
        size_t o = (size_t)l * n * E;
        float d = tm_max_diff(h + o, gold + o, (size_t)n * E), mx = tm_max_abs(gold + o, (size_t)n * E);
        printf("  %s hidden[%d]: max|d|/max = %.2e\n", what, l, d / mx);
        CHECKF(d / mx < 5e-3, "%s: hidden state %d departs from the reference (%.2e)", what, l, d / mx);
    }
}

static void run_model(const char *fx, const model_case *c, const char *src)
{
    char path[4096], p2[4096];
    snprintf(path, sizeof path, "%s/%s/%s", fx, c->name, src);
    snprintf(p2, sizeof p2, "%s/%s/golden/meta.json", fx, c->name);
    json_error_t je;
    json_t *meta = json_load_file(p2, 0, &je);
    CHECKF(meta != NULL, "%s: %s", p2, je.text);
    if (!meta)
        return;
    int n = 0, np = 0, nc = 0;
    int32_t *toks = tm_json_ints(meta, "tokens", NULL, &n);
    int32_t *prompt = tm_json_ints(meta, "greedy", "prompt", &np);
    int32_t *cont = tm_json_ints(meta, "greedy", "continuation", &nc);
    lilac_model *m = tm_open(path, 2);
    CHECKF(m != NULL, "%s loads", path);
    if (!m || !toks || !prompt || !cont)
        goto done;
    const lilac_hparams *hp = lilac_model_hparams(m);
    int V = hp->n_vocab, E = hp->n_embd, L1 = hp->n_layer + 1;
    CHECKF(V == (int)json_integer_value(json_object_get(meta, "vocab")), "%s: vocabulary %d", path, V);

    snprintf(p2, sizeof p2, "%s/%s/golden/logits.f32", fx, c->name);
    float *gold = tu_read_f32(p2, (size_t)n * V);
    snprintf(p2, sizeof p2, "%s/%s/golden/hidden.f32", fx, c->name);
    float *gold_h = tu_read_f32(p2, (size_t)L1 * n * E);
    float *hidden = malloc((size_t)L1 * n * E * sizeof(float));
    float *pre = tm_logits(m, toks, n, 0, hidden);
    CHECKF(gold && gold_h && pre, "%s: golden files and prefill", path);
    if (!gold || !gold_h || !pre)
        goto free_all;

    float mx = tm_max_abs(gold, (size_t)n * V);
    float d = tm_max_diff(pre, gold, (size_t)n * V);
    int agree = tm_argmax_agree(pre, gold, n, V);
    printf("%s: vs golden max|d|/max|logit| = %.3e, argmax %d/%d\n", path, d / mx, agree, n);
    CHECKF(d <= c->golden_rel * mx, "%s: max|d| %.4g > %.1e x max|logit| %.4g", path, d, c->golden_rel, mx);
    CHECKF(agree >= c->golden_argmax, "%s: argmax agrees at %d of %d positions", path, agree, n);
    report_hidden(path, hidden, gold_h, L1, n, E);

    if (c->strict_ref) {
        snprintf(p2, sizeof p2, "%s/%s", LILAC_SOURCE_DIR, c->strict_ref);
        float *ref = tu_read_f32(p2, (size_t)n * V);
        CHECKF(ref != NULL, "%s readable", p2);
        if (ref) {
            float dr = tm_max_diff(pre, ref, (size_t)n * V), mr = tm_max_abs(ref, (size_t)n * V);
            int ar = tm_argmax_agree(pre, ref, n, V);
            printf("%s: vs transformers 5.17 max|d|/max|logit| = %.3e, argmax %d/%d\n", path, dr / mr, ar, n);
            CHECKF(dr <= 1e-3 * mr, "%s: vs transformers: max|d| %.4g > 1e-3 x %.4g", path, dr, mr);
            CHECKF(ar == n, "%s: vs transformers: argmax agrees at %d of %d", path, ar, n);
        }
        free(ref);
    }

    /* one token at a time: the recurrent DeltaNet form and the KV cache */
    float *dec = tm_logits(m, toks, n, 1, NULL);
    CHECKF(dec != NULL, "%s: decode", path);
    if (dec) {
        float dd = tm_max_diff(dec, pre, (size_t)n * V);
        printf("%s: decode vs prefill max|d|/max|logit| = %.3e\n", path, dd / mx);
        CHECKF(dd <= 1e-4 * mx, "%s: decode differs from prefill by %.4g (bound %.4g)", path, dd, 1e-4 * mx);
    }
    free(dec);
    /* a prefill that starts from a state: 24 tokens, then 40 in chunks of 17 */
    lilac_seq *s = NULL;
    lilac_error err;
    float *mix = malloc((size_t)n * V * sizeof(float));
    if (mix && !lilac_seq_new(m, n, &s, &err)) {
        int done = 0, steps[] = {24, 17, 17, 6};
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_ALL, .logits = mix + (size_t)done * V};
            CHECK(lilac_seq_eval(s, toks + done, steps[i], &o, &err) == LILAC_OK);
            done += steps[i];
        }
        float dm = tm_max_diff(mix, pre, (size_t)n * V);
        CHECKF(dm <= 1e-4 * mx, "%s: prefill in pieces differs by %.4g", path, dm);
    }
    lilac_seq_free(s);
    free(mix);

    /* the reference's greedy continuation, exactly */
    int32_t *got = calloc((size_t)nc, sizeof *got);
    CHECK(got && tm_greedy(m, prompt, np, got, nc) == 0);
    int same = 0;
    while (got && same < nc && got[same] == cont[same])
        same++;
    CHECKF(same == nc, "%s: greedy continuation departs at token %d of %d", path, same, nc);
    free(got);

    /* one thread and two compute the same numbers: rows never split a dot product */
    lilac_model *m1 = tm_open(path, 1);
    float *one = m1 ? tm_logits(m1, toks, n, 0, NULL) : NULL;
    CHECKF(one && memcmp(one, pre, (size_t)n * V * sizeof(float)) == 0, "%s: 1 and 2 threads differ", path);
    free(one);
    lilac_model_free(m1);
free_all:
    free(gold);
    free(gold_h);
    free(hidden);
    free(pre);
done:
    lilac_model_free(m);
    free(toks);
    free(prompt);
    free(cont);
    json_decref(meta);
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    const char *srcs[] = {"hf", "gguf/model-bf16.gguf"};
    int ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!tu_model_wanted(cases[i].name))
            continue;
        for (size_t j = 0; j < 2; j++, ran++)
            run_model(fx, &cases[i], srcs[j]);
    }
    CHECKF(ran > 0, "LILAC_TEST_MODELS left no model to test");
    TEST_END();
}
