/* lilac_eval_tokens: perplexity, KL and top-1 recomputed here from the
 * golden logits and the model's own logits, the straightforward way. */
#include "models.h"

static void check(lilac_model *m, const int32_t *toks, int n, const char *ref_path, lilac_model *ref_model,
                  const float *ref_logits, int score_from)
{
    int V = lilac_model_hparams(m)->n_vocab;
    float *ours = tm_logits(m, toks, n, 0, NULL);
    double nll = 0, ref_nll = 0, kl_sum = 0, kl_max = 0;
    long agree = 0, k = 0;
    for (int i = score_from; i < n - 1; i++, k++) {
        const float *q = ours + (size_t)i * V, *p = ref_logits + (size_t)i * V;
        double mq = -1e300, mp = -1e300, zq = 0, zp = 0;
        for (int v = 0; v < V; v++)
            mq = q[v] > mq ? q[v] : mq, mp = p[v] > mp ? p[v] : mp;
        for (int v = 0; v < V; v++)
            zq += exp(q[v] - mq), zp += exp(p[v] - mp);
        double lzq = mq + log(zq), lzp = mp + log(zp), kl = 0;
        for (int v = 0; v < V; v++)
            kl += exp(p[v] - lzp) * ((p[v] - lzp) - (q[v] - lzq));
        nll += lzq - q[toks[i + 1]];
        ref_nll += lzp - p[toks[i + 1]];
        kl_sum += kl;
        kl_max = kl > kl_max ? kl : kl_max;
        agree += tm_argmax(q, V) == tm_argmax(p, V);
    }
    lilac_eval_params ep = {.n_ctx = n, .score_from = score_from, .ref_model = ref_model, .ref_logits = ref_path};
    lilac_eval_result r;
    lilac_error err;
    CHECKF(lilac_eval_tokens(m, toks, n, &ep, &r, &err) == LILAC_OK, "%s", err.msg);
    double ppl = exp(nll / k), kl = kl_sum / k;
    printf("score_from %d: ppl %.6g (want %.6g), KL %.6g (want %.6g), top-1 %.4f (want %.4f), ref ppl %.6g\n",
           score_from, r.ppl, ppl, r.kl_mean, kl, r.top1, (double)agree / k, r.ref_ppl);
    CHECK(r.n_scored == k && r.n_chunks == 1);
    CHECKF(fabs(r.ppl - ppl) <= 1e-6 * ppl, "perplexity %.9g vs %.9g", r.ppl, ppl);
    CHECKF(fabs(r.ref_ppl - exp(ref_nll / k)) <= 1e-6 * r.ref_ppl, "reference perplexity");
    CHECKF(fabs(r.kl_mean - kl) <= 1e-6 * kl + 1e-12, "KL %.9g vs %.9g", r.kl_mean, kl);
    CHECKF(fabs(r.kl_max - kl_max) <= 1e-6 * kl_max + 1e-12, "max KL");
    CHECK(r.kl_p99 <= r.kl_max && r.kl_p99 >= r.kl_mean * 0.5);
    CHECK(fabs(r.top1 - (double)agree / k) < 1e-12);
    free(ours);
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    char path[8192], gold[8192], meta_path[8192], bf16[8192];
    if (snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/model-Q8_0.gguf", fx) >= (int)sizeof path ||
        snprintf(bf16, sizeof bf16, "%s/tiny-qwen35moe/gguf/model-bf16.gguf", fx) >= (int)sizeof bf16 ||
        snprintf(gold, sizeof gold, "%s/tiny-qwen35moe/golden/logits.f32", fx) >= (int)sizeof gold ||
        snprintf(meta_path, sizeof meta_path, "%s/tiny-qwen35moe/golden/meta.json", fx) >= (int)sizeof meta_path)
        SKIP("fixtures path too long");
    json_t *meta = json_load_file(meta_path, 0, NULL);
    int n = 0;
    int32_t *toks = tm_json_ints(meta, "tokens", NULL, &n);
    size_t size = 0;
    float *golden = tu_read_file(gold, &size);
    lilac_model *m = tm_open(path, 2), *ref = tm_open(bf16, 2);
    CHECK(m && ref && toks && golden && size == (size_t)n * 2048 * sizeof(float));
    if (m && ref && toks && golden) {
        check(m, toks, n, gold, NULL, golden, 0);
        check(m, toks, n, gold, NULL, golden, 32);
        /* a reference model instead of saved logits */
        float *ref_logits = tm_logits(ref, toks, n, 0, NULL);
        check(m, toks, n, NULL, ref, ref_logits, 10);
        free(ref_logits);
        /* errors: fewer tokens than a chunk, a short logits file */
        lilac_eval_params ep = {.n_ctx = 128, .score_from = 0, .ref_logits = gold};
        lilac_eval_result r;
        lilac_error err;
        CHECK(lilac_eval_tokens(m, toks, n, &ep, &r, &err) == LILAC_E_ARG);
        int32_t twice[128];
        memcpy(twice, toks, 64 * sizeof *toks);
        memcpy(twice + 64, toks, 64 * sizeof *toks);
        ep.n_ctx = 64;
        CHECK(lilac_eval_tokens(m, twice, 128, &ep, &r, &err) == LILAC_E_FORMAT && strstr(err.msg, "logits.f32"));
    }
    lilac_model_free(m);
    lilac_model_free(ref);
    free(toks);
    free(golden);
    json_decref(meta);
    TEST_END();
}
