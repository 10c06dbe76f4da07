/* The F16 KV cache (lilac_model_params.kv_type) on the tiny models: the
 * logits stay close to the float32 cache's, greedy decoding gives the same
 * tokens, sequence copies and snapshots carry the half-precision cache, the
 * memory plan counts half the bytes, and bad types are refused. */
#include "engine/seq.h"
#include "models.h"

/* Bound on max|logit difference| / max|logit| between the f16 and the f32
 * cache. Half keeps 11 significant bits (relative rounding <= 2^-11 =
 * 4.9e-4 per element); attention outputs are averages of value rows, so
 * their error is about that times the spread of the rows, and it reaches
 * the logits through a few layers. llama.cpp's f16 cache on the same model
 * lands 1.6e-4 from the reference (fixtures README); measured here: 6.3e-5
 * (tiny-qwen35moe, one attention layer of four) and 2.7e-4 (tiny-qwen3moe,
 * four), prefill and decode alike. 2e-3 leaves room for the mix of the quantized paths while still
 * catching a wrong conversion or a misplaced row (those give O(1) errors). */
#define LOGIT_BOUND 2e-3

static lilac_model *open_kv(const char *path, int kv_type)
{
    lilac_model_params p = lilac_model_default_params();
    p.n_threads = 2;
    p.kv_type = kv_type;
    return tm_open_with(path, &p);
}

static void test_model(const char *fx, const char *name)
{
    char path[8192], mp[8192];
    if (snprintf(path, sizeof path, "%s/%s/gguf/model-bf16.gguf", fx, name) >= (int)sizeof path ||
        snprintf(mp, sizeof mp, "%s/%s/golden/meta.json", fx, name) >= (int)sizeof mp)
        SKIP("fixtures path too long");
    json_t *meta = json_load_file(mp, 0, NULL);
    int n = 0, np = 0, nc = 0;
    int32_t *toks = tm_json_ints(meta, "tokens", NULL, &n);
    int32_t *prompt = tm_json_ints(meta, "greedy", "prompt", &np);
    int32_t *cont = tm_json_ints(meta, "greedy", "continuation", &nc);
    lilac_model *m32 = open_kv(path, LILAC_KV_F32), *m16 = open_kv(path, LILAC_KV_F16);
    CHECK(meta && toks && prompt && cont && m32 && m16);
    if (!meta || !toks || !prompt || !cont || !m32 || !m16)
        goto done;
    CHECK(lilac_model_kv_type(m16) == LILAC_KV_F16 && lilac_model_kv_type(m32) == LILAC_KV_F32);
    int V = lilac_model_hparams(m32)->n_vocab;

    /* logits at every position, prefill and one token at a time */
    for (int step = 0; step <= 1; step++) {
        float *a = tm_logits(m32, toks, n, step, NULL), *b = tm_logits(m16, toks, n, step, NULL);
        CHECK(a && b);
        if (a && b) {
            double rel = tm_max_diff(a, b, (size_t)n * V) / tm_max_abs(a, (size_t)n * V);
            int agree = tm_argmax_agree(a, b, n, V);
            printf("%s, %s: f16 KV vs f32 KV max|d|/max|logit| = %.3e, argmax %d/%d\n", name,
                   step ? "decode" : "prefill", rel, agree, n);
            CHECKF(rel <= LOGIT_BOUND, "%s: f16 KV logits %.3e of max|logit| from f32 KV (bound %.0e)", name, rel,
                   LOGIT_BOUND);
            CHECKF(agree >= n - 1, "%s: argmax agrees at %d of %d positions", name, agree, n);
        }
        free(a), free(b);
    }

    /* greedy decoding: the same tokens */
    int32_t g32[64], g16[64];
    int ng = nc < 64 ? nc : 64;
    CHECK(tm_greedy(m32, prompt, np, g32, ng) == 0 && tm_greedy(m16, prompt, np, g16, ng) == 0);
    CHECKF(memcmp(g32, g16, (size_t)ng * sizeof *g32) == 0, "%s: greedy tokens differ with the f16 KV cache", name);

    /* a copy and a snapshot of an f16 sequence go on exactly as it does */
    lilac_error err;
    lilac_seq *s = NULL, *c = NULL, *r = NULL;
    CHECK(lilac_seq_new(m16, 128, &s, &err) == LILAC_OK && lilac_seq_new(m16, 128, &c, &err) == LILAC_OK &&
          lilac_seq_new(m16, 128, &r, &err) == LILAC_OK);
    if (s && c && r) {
        lilac_eval_opts none = {.logits_mode = LILAC_LOGITS_NONE};
        CHECK(lilac_seq_eval(s, toks, 40, &none, &err) == LILAC_OK);
        CHECK(lilac_seq_copy(c, s, &err) == LILAC_OK);
        size_t fl = lilac_seq_snapshot_floats(s);
        uint64_t kv16, rec, kv32;
        lilac_state_sizes(lilac_model_hparams(m16), 40, LILAC_KV_F16, &kv16, &rec);
        lilac_state_sizes(lilac_model_hparams(m16), 40, LILAC_KV_F32, &kv32, &rec);
        CHECKF(fl * sizeof(float) == kv16 + rec && kv32 == 2 * kv16, "snapshot of %zu floats for %llu + %llu bytes",
               fl, (unsigned long long)kv16, (unsigned long long)rec);
        float *snap = malloc(fl * sizeof(float));
        lilac_seq_snapshot_save(s, snap);
        lilac_seq_snapshot_load(r, snap, 40);
        free(snap);
        float *la = malloc((size_t)V * 3 * sizeof(float));
        lilac_eval_opts o[3];
        for (int i = 0; i < 3; i++)
            o[i] = (lilac_eval_opts){.logits_mode = LILAC_LOGITS_LAST, .logits = la + (size_t)i * V};
        CHECK(lilac_seq_eval(s, toks + 40, 8, &o[0], &err) == LILAC_OK);
        CHECK(lilac_seq_eval(c, toks + 40, 8, &o[1], &err) == LILAC_OK);
        CHECK(lilac_seq_eval(r, toks + 40, 8, &o[2], &err) == LILAC_OK);
        CHECKF(memcmp(la, la + V, (size_t)V * sizeof(float)) == 0, "%s: an f16 copy goes on differently", name);
        CHECKF(memcmp(la, la + 2 * V, (size_t)V * sizeof(float)) == 0, "%s: an f16 snapshot goes on differently",
               name);
        /* reset clears the recurrent state: the same steps again give the same logits */
        lilac_seq_reset(s);
        CHECK(lilac_seq_eval(s, toks, 40, &none, &err) == LILAC_OK);
        CHECK(lilac_seq_eval(s, toks + 40, 8, &o[1], &err) == LILAC_OK);
        CHECKF(memcmp(la, la + V, (size_t)V * sizeof(float)) == 0, "%s: after reset the f16 sequence differs", name);
        free(la);
    }
    lilac_seq_free(s), lilac_seq_free(c), lilac_seq_free(r);

    /* the plan counts half the KV bytes */
    lilac_mem_plan p32 = lilac_model_mem_plan(m32, 4096, 256), p16 = lilac_model_mem_plan(m16, 4096, 256);
    CHECKF(p32.kv_bytes == 2 * p16.kv_bytes && p32.kv_bytes > 0, "plan: KV %llu bytes (f32) against %llu (f16)",
           (unsigned long long)p32.kv_bytes, (unsigned long long)p16.kv_bytes);
    CHECK(p32.recurrent_bytes == p16.recurrent_bytes);
done:
    lilac_model_free(m32);
    lilac_model_free(m16);
    free(toks), free(prompt), free(cont);
    json_decref(meta);
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    CHECK(lilac_kv_type_parse("f16") == LILAC_KV_F16 && lilac_kv_type_parse("f32") == LILAC_KV_F32);
    CHECK(lilac_kv_type_parse("q8_0") < 0 && lilac_kv_type_parse(NULL) < 0);
    CHECK(!strcmp(lilac_kv_type_name(LILAC_KV_F16), "f16"));
    test_model(fx, "tiny-qwen35moe");
    test_model(fx, "tiny-qwen3moe");

    /* an unknown type is refused at open */
    char path[8192];
    snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/model-bf16.gguf", fx);
    lilac_model_params p = lilac_model_default_params();
    p.kv_type = 7;
    lilac_model *m = NULL;
    lilac_error err;
    CHECK(lilac_model_open(path, &p, &m, &err) == LILAC_E_ARG && !m && strstr(err.msg, "KV cache type"));
    TEST_END();
}
