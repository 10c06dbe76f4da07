/* Nothing in the engine is tuned to the fixtures' shapes: models with
 * other layer counts and patterns, head counts and sizes, key/value head
 * ratios, rotary fractions, expert counts, tied embeddings, fused experts
 * under model.language_model. (tests/data/variants, made by
 * make_variants.py with transformers 5.17 in float64) match their
 * reference logits and greedy continuation, by prefill and by decode. */
#include "models.h"

static void run_variant(const char *name, const char *golden_of)
{
    char dir[4096], path[4096];
    snprintf(dir, sizeof dir, "%s/tests/data/variants/%s", LILAC_SOURCE_DIR, golden_of);
    snprintf(path, sizeof path, "%s/tests/data/variants/%s/hf", LILAC_SOURCE_DIR, name);
    char meta_path[4200], logits_path[4200];
    snprintf(meta_path, sizeof meta_path, "%s/meta.json", dir);
    snprintf(logits_path, sizeof logits_path, "%s/logits.f32", dir);
    json_error_t je;
    json_t *meta = json_load_file(meta_path, 0, &je);
    CHECKF(meta != NULL, "%s: %s", meta_path, je.text);
    lilac_model *m = tm_open(path, 2);
    CHECKF(m != NULL, "%s loads", path);
    if (!meta || !m) {
        json_decref(meta);
        lilac_model_free(m);
        return;
    }
    int n = 0, np = 0, nc = 0;
    int32_t *toks = tm_json_ints(meta, "tokens", NULL, &n);
    int32_t *prompt = tm_json_ints(meta, "greedy", "prompt", &np);
    int32_t *cont = tm_json_ints(meta, "greedy", "continuation", &nc);
    int V = lilac_model_hparams(m)->n_vocab;
    size_t size = 0;
    float *gold = tu_read_file(logits_path, &size);
    CHECKF(gold && size == (size_t)n * V * sizeof(float), "%s: %zu bytes for %d x %d", logits_path, size, n, V);
    float *pre = tm_logits(m, toks, n, 0, NULL), *dec = tm_logits(m, toks, n, 1, NULL);
    if (gold && size == (size_t)n * V * sizeof(float) && pre && dec) {
        float mx = tm_max_abs(gold, (size_t)n * V), d = tm_max_diff(pre, gold, (size_t)n * V);
        float dd = tm_max_diff(dec, pre, (size_t)n * V);
        int agree = tm_argmax_agree(pre, gold, n, V);
        printf("%s: max|d|/max|logit| = %.3e, argmax %d/%d, decode vs prefill %.3e\n", name, d / mx, agree, n,
               dd / mx);
        CHECKF(d <= 1e-3 * mx, "%s: max|d| %.4g > 1e-3 x %.4g", name, d, mx);
        CHECKF(agree == n, "%s: argmax agrees at %d of %d", name, agree, n);
        CHECKF(dd <= 1e-4 * mx, "%s: decode differs from prefill by %.4g", name, dd);
    }
    int32_t *got = calloc((size_t)nc + 1, sizeof *got);
    CHECK(got && tm_greedy(m, prompt, np, got, nc) == 0);
    int same = 0;
    while (got && same < nc && got[same] == cont[same])
        same++;
    CHECKF(same == nc, "%s: greedy continuation departs at token %d of %d", name, same, nc);
    free(got);
    free(gold);
    free(pre);
    free(dec);
    free(toks);
    free(prompt);
    free(cont);
    json_decref(meta);
    lilac_model_free(m);
}

static void check_shapes(void)
{
    /* the variants really differ from the fixtures where it matters */
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/variants/q35-a/hf", LILAC_SOURCE_DIR);
    lilac_model *m = tm_open(path, 1);
    CHECK(m != NULL);
    if (!m)
        return;
    const lilac_hparams *hp = lilac_model_hparams(m);
    CHECK(hp->n_layer == 6 && hp->layer_kind[1] == LILAC_LAYER_ATTENTION && hp->layer_kind[4] == LILAC_LAYER_ATTENTION &&
          hp->layer_kind[0] == LILAC_LAYER_DELTANET && hp->layer_kind[5] == LILAC_LAYER_DELTANET);
    CHECK(hp->n_head == 4 && hp->n_head_kv == 1 && hp->head_dim == 64 && hp->rope_dims == 32);
    CHECK(hp->ssm_k_heads == 1 && hp->ssm_v_heads == 3 && hp->ssm_k_dim == 32 && hp->ssm_v_dim == 48);
    CHECK(hp->ssm_conv_kernel == 3 && hp->n_expert == 6 && hp->n_expert_used == 3 && hp->tied_embeddings);
    lilac_model_free(m);
}

int main(void)
{
    check_shapes();
    run_variant("q35-a", "q35-a");
    run_variant("q35-a-fused", "q35-a"); /* same weights, published multimodal layout */
    run_variant("q35-b", "q35-b");
    run_variant("q3-a", "q3-a");
    TEST_END();
}
