/* cuda_model: the CUDA backend against the references, with the CPU's
 * bounds (tests/test_golden.c, tests/test_quant_models.c): the tiny
 * models' golden logits and greedy continuations, the quantized model's
 * exact logits, and the CPU's precise path on the same file. Skips where
 * no GPU can be used — unless LILAC_REQUIRE_CUDA=1, then it fails. */
#include "kernels/cuda/cuda.h"
#include "cudatest.h"
#include "models.h"

typedef struct {
    const char *model, *file, *golden; /* golden: logits file under golden/ */
    double rel;                        /* max |d| / max |logit| against it (0: KL instead) */
    int argmax;
    int step; /* 1: a token a call (the decode step, its graph and fusions); 0: the prompt in one call */
} tcase;

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
    lilac_model *g = tm_open_backend(path, LILAC_BACKEND_CUDA), *cpu = tm_open_backend(path, LILAC_BACKEND_CPU);
    CHECKF(meta && toks && g && cpu, "%s: meta, tokens and both backends open", path);
    if (!meta || !toks || !g || !cpu)
        goto done;
    CHECKF(!strcmp(lilac_model_backend(g), "cuda"), "%s runs on %s", path, lilac_model_backend(g));
    int V = lilac_model_hparams(g)->n_vocab;
    float *gold = tu_read_f32(gp, (size_t)n * V);
    /* LILAC_CUDA_TEST_TOKENS=N (run.sh sanitize's racecheck: a tiny model's decode step is a few hundred kernels,
     * and 64 tokens three times over ran past 280 s under it): the first N tokens only, the argmax bound less the
     * tokens left out, the greedy continuation's first N */
    const int lim = lilac_env_int("LILAC_CUDA_TEST_TOKENS", 0, 0, 1 << 20), n_all = n;
    if (lim > 0 && lim < n)
        n = lim, nc = nc < lim ? nc : lim;
    const int argmax_min = c->argmax - (n_all - n) > 0 ? c->argmax - (n_all - n) : 0;
    /* the residual stream too where the prompt goes in one call (the prefill's): each layer's against the CPU's */
    const int E = lilac_model_hparams(g)->n_embd, L1 = lilac_model_hparams(g)->n_layer + 1;
    float *hg = c->step ? NULL : malloc(sizeof(float) * (size_t)L1 * n * E);
    float *hc = c->step ? NULL : malloc(sizeof(float) * (size_t)L1 * n * E);
    float *lg = tm_logits(g, toks, n, c->step, hg), *lc = tm_logits(cpu, toks, n, 0, hc);
    CHECKF(gold && lg && lc, "%s: golden %s, CUDA and CPU logits", path, c->golden);
    if (gold && lg && lc) {
        char what[8300];
        snprintf(what, sizeof what, "%s/%s: CUDA%s", c->model, c->file, c->step ? " token by token" : "");
        tm_check_golden(what, c->golden, lg, gold, n, V, c->rel, argmax_min);
        float dc = tm_max_diff(lg, lc, (size_t)n * V), mc = tm_max_abs(lc, (size_t)n * V);
        printf("%s: CUDA vs CPU precise: max|d|/max|logit| %.3e\n", what, dc / mc);
        CHECKF(dc <= 1e-4 * mc, "%s: CUDA and CPU precise differ by %.3e of max|logit|", path, dc / mc);
        double worst = 0;
        for (int l = 0; hg && hc && l < L1; l++) {
            const size_t o = (size_t)l * n * E;
            const float d = tm_max_diff(hg + o, hc + o, (size_t)n * E), mx = tm_max_abs(hc + o, (size_t)n * E);
            worst = d / mx > worst ? d / mx : worst;
            CHECKF(d <= 1e-4 * mx, "%s: residual stream %d, CUDA against CPU: %.3e of its largest", what, l, d / mx);
        }
        if (hg && hc)
            printf("%s: residual stream, %d rows a token, CUDA vs CPU: max|d|/max %.3e\n", what, L1, worst);
    }
    if (c->step && lg) { /* the engine's own loop: a token a call, LOGITS_LAST into lilac_logits_alloc's buffer
                          * (pinned: the download lands there, no staging copy), the same bits as through the
                          * staging buffer into malloc'd memory */
        float *pin = lilac_logits_alloc(g, (size_t)V);
        lilac_seq *sq = NULL;
        lilac_error err;
        CHECKF(pin && lilac_cuda_host_pinned(pin), "%s: lilac_logits_alloc gives pinned memory on a GPU", path);
        int same = 0;
        if (pin && !lilac_seq_new(g, n, &sq, &err)) {
            lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_LAST, .logits = pin};
            for (int t = 0; t < n && !lilac_seq_eval(sq, toks + t, 1, &o, &err); t++)
                same += !memcmp(pin, lg + (size_t)t * V, (size_t)V * sizeof(float));
        }
        CHECKF(same == n, "%s: %d of %d steps' logits in pinned memory bit-equal to the staged ones", path, same, n);
        lilac_seq_free(sq);
        sq = NULL;
        /* LILAC_LOGITS_TOP, reduced on the device: the candidates of the host's reduction of those logits */
        lilac_logits_top *tp = malloc(sizeof *tp), *th = malloc(sizeof *th);
        int top_same = 0;
        double worst = 0;
        if (pin && tp && th && !lilac_seq_new(g, n, &sq, &err)) {
            lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_TOP, .logits = pin, .top = tp, .top_k = 40};
            for (int t = 0; t < n && !lilac_seq_eval(sq, toks + t, 1, &o, &err); t++) {
                lilac_logits_top_of(lg + (size_t)t * V, V, 40, th);
                bool ok = tp->n == th->n;
                for (int j = 0; ok && j < th->n; j++)
                    ok = tp->id[j] == th->id[j] && tp->logit[j] == th->logit[j];
                top_same += ok;
                const double e = fabs(tp->lse - th->lse) / (fabs(th->lse) > 1 ? fabs(th->lse) : 1);
                worst = e > worst ? e : worst;
            }
        }
        CHECKF(top_same == n, "%s: %d of %d steps' top 40 from the device equal the host's", path, top_same, n);
        CHECKF(worst <= 1e-6, "%s: the device's log-sum-exp off by %.3g", path, worst);
        lilac_seq_free(sq);
        free(tp), free(th);
        lilac_logits_free(pin);
        float *plain = lilac_logits_alloc(cpu, 4);
        CHECKF(plain && !lilac_cuda_host_pinned(plain), "%s: plain memory for a CPU model", path);
        lilac_logits_free(plain);
    }
    if (c->rel > 0 && prompt && cont && nc > 0) { /* the golden continuation is the unquantized model's */
        int32_t *out = malloc((size_t)nc * sizeof *out);
        CHECK(out && tm_greedy(g, prompt, np, out, nc) == 0);
        int same = 0;
        while (out && same < nc && out[same] == cont[same])
            same++;
        CHECKF(same == nc, "%s: CUDA greedy continuation departs at token %d of %d", path, same, nc);
        free(out);
    }
    free(gold), free(lg), free(lc), free(hg), free(hc);
done:
    lilac_model_free(g);
    lilac_model_free(cpu);
    json_decref(meta);
    free(toks), free(prompt), free(cont);
}

int main(void)
{
    TM_REQUIRE_CUDA();
    const char *fx = tu_require_fixtures();
    static const tcase cases[] = {
        {"tiny-qwen35moe", "gguf/model-bf16.gguf", "logits.f32", 1e-3, 64, 0},
        {"tiny-qwen3moe", "gguf/model-bf16.gguf", "logits.f32", 2.6e-3, 63, 0},
        {"tiny-qwen35moe", "gguf/model-Q4_K_M.gguf", "exact-logits-Q4_K_M.f32", 0, 64, 0},
        /* the decode step (its graph): joined products (q and k, qkv and z, alpha and beta of one type), the
         * routing at the norm+router kernel's end; on block types the path the fused kernels take */
        {"tiny-qwen35moe", "gguf/model-bf16.gguf", "logits.f32", 1e-3, 64, 1},
        {"tiny-qwen35moe", "gguf/model-Q4_K_M.gguf", "exact-logits-Q4_K_M.f32", 0, 64, 1},
    };
    /* LILAC_CUDA_TEST_QUICK=1 (the sanitizers' runs): the decode step's cases alone (racecheck ran past 100 s
     * with all five) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!ct_quick() || cases[i].step)
            run(fx, &cases[i]);
    /* The down+sum kernel unless LILAC_CUDA_DOWN_SUM=0 (the default since session 13): the Q4_K_M file's layers
     * must have taken the fused kernel, not only its fallback */
    static const struct {
        const char *var;
        int kind, dflt;
    } fused[] = {{"LILAC_CUDA_DOWN_SUM", LILAC_CUDA_FUSED_DOWN_SUM, 1}};
    for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++) {
        const char *v = getenv(fused[i].var);
        if (v ? strcmp(v, "1") != 0 : !fused[i].dflt)
            continue;
        long n = lilac_cuda_fused_launches(fused[i].kind);
        CHECKF(n > 0, "%s=1: no layer ran the fused kernel", fused[i].var);
        printf("%s=1: %ld launches of the fused kernel\n", fused[i].var, n);
    }
    TEST_END();
}
