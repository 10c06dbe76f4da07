/* cuda_prefill: the batched CUDA prefill (decoder_cuda_prefill.c) against
 * the token-by-token CUDA path on the fixture models: all logits of the
 * golden tokens in one call (also with gate and up experts in two grouped
 * products, LILAC_CUDA_PF_GU=0), in chunks of 1, 2, 5 and 7 tokens
 * (LILAC_CUDA_PREFILL_CHUNK), in calls that continue a sequence (depth >
 * 0, mixed with single tokens), with LOGITS_LAST and LOGITS_NONE, and
 * greedy decoding after a prefilled prompt; then the prefill's logits
 * against the golden ones with test_cuda_model's bounds; and prompts of
 * 1100 tokens in chunks of 1024 and 2100 in the plan's one chunk of
 * PF_BIG rows (buffers over PF_MAX). LILAC_CUDA_TEST_QUICK=1 (the
 * sanitizers' runs): each case's one-call prefill against the golden
 * alone, no long prompts. Skips where no
 * GPU can be used — unless LILAC_REQUIRE_CUDA=1, then it fails. */
#include "kernels/cuda/cuda.h"
#include "cudatest.h"
#include "model/cuda_mem.h"
#include "model/decoder_cuda_int.h"
#include "model/model.h"
#include "models.h"

static void set_chunk(const char *v)
{
    if (v)
        setenv("LILAC_CUDA_PREFILL_CHUNK", v, 1);
    else
        unsetenv("LILAC_CUDA_PREFILL_CHUNK");
}

/* The last row's logits after the first n_none tokens with LOGITS_NONE, the rest with LOGITS_LAST. */
static float *logits_last(lilac_model *m, const int32_t *toks, int n, int n_none)
{
    int V = lilac_model_hparams(m)->n_vocab;
    float *out = malloc((size_t)V * sizeof(float));
    lilac_seq *s = NULL;
    lilac_error err;
    if (!out || lilac_seq_new(m, n, &s, &err)) {
        free(out);
        return NULL;
    }
    lilac_eval_opts none = {.logits_mode = LILAC_LOGITS_NONE}, last = {.logits_mode = LILAC_LOGITS_LAST, .logits = out};
    if ((n_none > 0 && lilac_seq_eval(s, toks, n_none, &none, &err)) ||
        lilac_seq_eval(s, toks + n_none, n - n_none, &last, &err)) {
        fprintf(stderr, "eval failed: %s\n", err.msg);
        free(out);
        out = NULL;
    }
    lilac_seq_free(s);
    return out;
}

typedef struct {
    const char *model, *file, *golden; /* golden: logits file under golden/ */
    double rel_gold;                   /* max |d| / max |logit| against it (0: mean KL <= 1e-4 instead) */
    int argmax_gold;
    double rel; /* prefill against the token path */
} tcase;

/* got against the token path's ref (rows rows): within c->rel of max |logit|, every argmax the same. */
static void against(const tcase *c, const char *what, const float *got, const float *ref, int rows, int V)
{
    CHECKF(got != NULL, "%s/%s: %s: logits", c->model, c->file, what);
    if (!got)
        return;
    float mx = tm_max_abs(ref, (size_t)rows * V), d = tm_max_diff(got, ref, (size_t)rows * V);
    int agree = tm_argmax_agree(got, ref, rows, V);
    printf("%s/%s: %-34s vs token path: max|d|/max|logit| %.3e, argmax %d/%d\n", c->model, c->file, what, d / mx,
           agree, rows);
    CHECKF(d <= c->rel * mx, "%s/%s: %s: max|d| %.4g > %.1e x %.4g", c->model, c->file, what, d, c->rel, mx);
    CHECKF(agree == rows, "%s/%s: %s: argmax agrees at %d of %d rows", c->model, c->file, what, agree, rows);
}

/* got (rows of all n tokens) against the golden logits at gp, with test_cuda_model's bounds. */
static void against_golden(const tcase *c, const char *gp, const char *what, const float *got, int n, int V)
{
    float *gold = tu_read_f32(gp, (size_t)n * V);
    CHECKF(gold && got, "%s/%s: %s: logits and golden %s", c->model, c->file, what, c->golden);
    if (gold && got) {
        char w[512];
        snprintf(w, sizeof w, "%s/%s: %s", c->model, c->file, what);
        tm_check_golden(w, c->golden, got, gold, n, V, c->rel_gold, c->argmax_gold);
    }
    free(gold);
}

static void run(const char *fx, const tcase *c)
{
    char path[8192], gp[8192], mp[8192];
    snprintf(path, sizeof path, "%s/%s/%s", fx, c->model, c->file);
    snprintf(gp, sizeof gp, "%s/%s/golden/%s", fx, c->model, c->golden);
    snprintf(mp, sizeof mp, "%s/%s/golden/meta.json", fx, c->model);
    json_t *meta = json_load_file(mp, 0, NULL);
    int n = 0, np = 0, nc = 0;
    int32_t *toks = tm_json_ints(meta, "tokens", NULL, &n);
    int32_t *prompt = tm_json_ints(meta, "greedy", "prompt", &np);
    int32_t *cont = tm_json_ints(meta, "greedy", "continuation", &nc);
    lilac_model *g = tm_open_backend(path, LILAC_BACKEND_CUDA);
    CHECKF(meta && toks && g && n > 8, "%s: meta, tokens and the CUDA model", path);
    if (!meta || !toks || !g || n <= 8)
        goto done;
    CHECKF(!strcmp(lilac_model_backend(g), "cuda"), "%s runs on %s", path, lilac_model_backend(g));
    int V = lilac_model_hparams(g)->n_vocab;
#ifdef LILAC_CUDA
    { /* else every comparison below would be the token path against itself */
        lilac_seq *s = NULL;
        lilac_error err;
        CHECKF(!lilac_seq_new(g, n, &s, &err) && lilac_cuda_prefill_wanted(s, 2) && lilac_cuda_prefill_wanted(s, n),
               "%s: the prefill takes this model", path);
        lilac_seq_free(s);
    }
#endif
    set_chunk(NULL);
    if (ct_quick()) { /* the sanitizers' slow runs (racecheck of every case ran past 200 s): one call, the golden */
        float *pq = tm_logits(g, toks, n, 0, NULL);
        against_golden(c, gp, "prefill (quick)", pq, n, V);
        free(pq);
        goto done;
    }
    float *ref = tm_logits(g, toks, n, 1, NULL); /* one token a call: the token path */
    CHECKF(ref != NULL, "%s: token-path logits", path);
    if (!ref)
        goto done;

    /* the same calls with the prefill turned off: the token path, whatever the call */
    setenv("LILAC_CUDA_PREFILL", "0", 1);
    float *off = tm_logits(g, toks, n, 0, NULL);
    unsetenv("LILAC_CUDA_PREFILL");
    CHECKF(off && tm_max_diff(off, ref, (size_t)n * V) <= 1e-6f * tm_max_abs(ref, (size_t)n * V),
           "%s: LILAC_CUDA_PREFILL=0 is the token path", path);
    free(off);

    float *pf = tm_logits(g, toks, n, 0, NULL); /* one call, one chunk */
    against(c, "prefill, one call", pf, ref, n, V);

    /* gate and up experts in two grouped products instead of one (where they share an allocation): the same
     * sums pair by pair, so the same logits */
    setenv("LILAC_CUDA_PF_GU", "0", 1);
    float *gu2 = tm_logits(g, toks, n, 0, NULL);
    unsetenv("LILAC_CUDA_PF_GU");
    CHECKF(gu2 && pf && tm_max_diff(gu2, pf, (size_t)n * V) <= 1e-6f * tm_max_abs(pf, (size_t)n * V),
           "%s: LILAC_CUDA_PF_GU=0 (gate and up apart) changes the prefill's logits", path);
    free(gu2);

    static const char *chunks[] = {"1", "2", "5", "7"}; /* chunks of the call: n > chunk, odd sizes, n = 1 kernels */
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        set_chunk(chunks[i]);
        char what[64];
        snprintf(what, sizeof what, "prefill, chunks of %s", chunks[i]);
        float *lc = tm_logits(g, toks, n, 0, NULL);
        against(c, what, lc, ref, n, V);
        free(lc);
    }
    set_chunk(NULL);

    /* calls continuing a sequence: prefill at depth > 0, between single tokens (the token path) */
    static const int calls_a[] = {2, 2, 3}, calls_b[] = {1, 6, 1, 23}, calls_c[] = {3, 40};
    float *la = tm_logits_calls(g, toks, n, calls_a, 3, 0, NULL);
    against(c, "calls of 2, 2, 3, rest", la, ref, n, V);
    float *lb = tm_logits_calls(g, toks, n, calls_b, 4, 0, NULL);
    against(c, "calls of 1, 6, 1, 23, rest", lb, ref, n, V);
    set_chunk("7");
    float *lcc = tm_logits_calls(g, toks, n, calls_c, 2, 0, NULL);
    against(c, "calls of 3, 40, rest; chunks of 7", lcc, ref, n, V);
    set_chunk(NULL);
    free(la), free(lb), free(lcc);

    /* LOGITS_LAST after a call with LOGITS_NONE, and alone */
    const float *ref_last = ref + (size_t)(n - 1) * V;
    float *l1 = logits_last(g, toks, n, n / 2), *l2 = logits_last(g, toks, n, 0);
    against(c, "NONE then LAST", l1, ref_last, 1, V);
    against(c, "LAST", l2, ref_last, 1, V);
    free(l1), free(l2);

    /* the golden logits, as test_cuda_model bounds the token path */
    against_golden(c, gp, "prefill", pf, n, V);

    /* greedy decoding after a prefilled prompt: the token path's continuation (and the golden one, unquantized) */
    if (prompt && cont && nc > 0 && np > 1) {
        int32_t *a = malloc((size_t)nc * sizeof *a), *b = malloc((size_t)nc * sizeof *b);
        CHECK(a && b && tm_greedy(g, prompt, np, a, nc) == 0);
        setenv("LILAC_CUDA_PREFILL", "0", 1);
        CHECK(a && b && tm_greedy(g, prompt, np, b, nc) == 0);
        unsetenv("LILAC_CUDA_PREFILL");
        int same = 0, same_gold = 0;
        while (a && b && same < nc && a[same] == b[same])
            same++;
        while (a && same_gold < nc && a[same_gold] == cont[same_gold])
            same_gold++;
        CHECKF(same == nc, "%s: greedy after prefill departs from the token path's at token %d of %d", path, same, nc);
        if (c->rel_gold > 0)
            CHECKF(same_gold == nc, "%s: greedy after prefill departs from the golden at token %d of %d", path,
                   same_gold, nc);
        free(a), free(b);
    }
    free(pf), free(ref);
done:
    lilac_model_free(g);
    json_decref(meta);
    free(toks), free(prompt), free(cont);
}

/* Prompts longer than the default chunk, against the token path's last-token logits, within 1e-4 of max |logit|
 * (a thousand tokens and more of DeltaNet state summed in another order), the same argmax: 1100 tokens in chunks
 * of 1024 (LILAC_CUDA_PREFILL_CHUNK over PF_MAX: a fresh model's buffers take 1024 rows), and 2100 tokens where
 * the memory plan chose the chunk (LILAC_CUDA_PREFILL_AUTO's default, lilac_model_mem_check: PF_BIG rows for this
 * small model, one chunk). */
static void long_prompt(const char *fx, const tcase *c, int n_long, const char *chunk, bool auto_rows)
{
    char path[8192], mp[8192], what[96];
    snprintf(path, sizeof path, "%s/%s/%s", fx, c->model, c->file);
    snprintf(mp, sizeof mp, "%s/%s/golden/meta.json", fx, c->model);
    snprintf(what, sizeof what, "%d tokens, chunks of %s", n_long, chunk ? chunk : "the plan's");
    json_t *meta = json_load_file(mp, 0, NULL);
    int n = 0;
    int32_t *toks = tm_json_ints(meta, "tokens", NULL, &n);
    int32_t *lt = malloc((size_t)n_long * sizeof *lt);
    CHECKF(toks && n > 0 && lt, "%s: tokens", path);
    if (!toks || n <= 0 || !lt)
        goto done;
    for (int i = 0; i < n_long; i++)
        lt[i] = toks[(i * 7) % n];
    set_chunk(chunk);
    if (auto_rows)
        setenv("LILAC_CUDA_PREFILL_AUTO", "1", 1);
    lilac_model *g = tm_open_backend(path, LILAC_BACKEND_CUDA);
    CHECKF(g != NULL, "%s: the CUDA model", path);
    if (g) {
        lilac_error err;
        if (auto_rows) {
            lilac_mem_report r = lilac_model_gpu_mem_report(g, n_long, 1);
            CHECKF(r.fits && r.pf_rows == LILAC_CUDA_PF_BIG, "%s: the plan's chunk: %d rows (fits %d)", path,
                   r.pf_rows, r.fits);
            CHECKF(lilac_model_mem_check(g, n_long, 1, &err) == LILAC_OK, "%s: mem check: %s", path, err.msg);
            /* what the scheduler's prompt steps take where nothing decodes (sched.c's prompt_budget) */
            CHECKF(lilac_cuda_model_prompt_rows(g->cuda) == LILAC_CUDA_PF_BIG, "%s: prompt rows %d, the plan's %d",
                   path, lilac_cuda_model_prompt_rows(g->cuda), LILAC_CUDA_PF_BIG);
        }
        int V = lilac_model_hparams(g)->n_vocab;
        float *got = logits_last(g, lt, n_long, 0);
        setenv("LILAC_CUDA_PREFILL", "0", 1);
        float *ref = logits_last(g, lt, n_long, 0);
        unsetenv("LILAC_CUDA_PREFILL");
        tcase loose = *c;
        loose.rel = 1e-4;
        CHECKF(ref != NULL, "%s: token-path logits of %d tokens", path, n_long);
        if (ref)
            against(&loose, what, got, ref, 1, V);
        free(got), free(ref);
        lilac_model_free(g);
    }
    set_chunk(NULL);
    unsetenv("LILAC_CUDA_PREFILL_AUTO");
done:
    json_decref(meta);
    free(toks), free(lt);
}

int main(void)
{
    TM_REQUIRE_CUDA();
    const char *fx = tu_require_fixtures();
    unsetenv("LILAC_CUDA_PREFILL");
    unsetenv("LILAC_CUDA_PF_GU");
    static const tcase cases[] = {
        {"tiny-qwen35moe", "gguf/model-bf16.gguf", "logits.f32", 1e-3, 64, 1e-5},
        {"tiny-qwen3moe", "gguf/model-bf16.gguf", "logits.f32", 2.6e-3, 63, 1e-5},
        {"tiny-qwen35moe", "gguf/model-Q4_K_M.gguf", "exact-logits-Q4_K_M.f32", 0, 64, 1e-5},
    };
    /* LILAC_CUDA_TEST_PARTS (racecheck ran past 200 s with all of them): bf16, qwen3moe, q4km, long */
    static const char *const parts[] = {"bf16", "qwen3moe", "q4km"};
    int ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (ct_part(parts[i]))
            run(fx, &cases[i]), ran++;
    if (ct_part("long")) {
        if (ct_quick()) {
            printf("long prompts: not run (LILAC_CUDA_TEST_QUICK=1)\n");
        } else {
            long_prompt(fx, &cases[0], 1100, "1024", false);
            long_prompt(fx, &cases[0], 2100, NULL, true);
        }
        ran++;
    }
    CHECKF(ran > 0, "LILAC_CUDA_TEST_PARTS=%s names none of bf16, qwen3moe, q4km, long",
           getenv("LILAC_CUDA_TEST_PARTS"));
    TEST_END();
}
