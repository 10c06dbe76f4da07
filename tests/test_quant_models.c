/* The quantized tiny GGUFs of the shared fixtures against the logits
 * llama.cpp computes from the same dequantized weights in float32
 * (golden/exact-logits-TYPE.f32), on both paths:
 *  - precise (lilac_model_params.precise: float32 activations against the
 *    dequantized weights): mean KL <= 1e-4 and the argmax at every
 *    position;
 *  - fast (the default: activations rounded to 16-bit fixed point per 32
 *    for integer dot products, kernels/cpu/qfast.h): mean KL at most half
 *    of llama.cpp's own (its quantized path, llamacpp-logits-TYPE.f32,
 *    which rounds activations to 8 bits), or 1e-3 where that is larger,
 *    and the argmax at 62 of 64 positions or more.
 * Both print llama.cpp's numbers beside. Then, per path, one-token decode
 * against prefill and the scalar kernels against the SIMD ones. */
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/cpu/cpu.h"
#include "models.h"

typedef struct {
    const char *model, *type;
    double llama_kl; /* fixtures/README.md, used when llamacpp-logits-TYPE.f32 is missing */
} quant_case;

static const quant_case cases[] = {
    {"tiny-qwen35moe", "Q8_0", 1.3e-2},   {"tiny-qwen35moe", "Q6_K", 1.9e-2}, {"tiny-qwen35moe", "Q5_K_M", 2.4e-2},
    {"tiny-qwen35moe", "Q4_K_M", 9.0e-2}, {"tiny-qwen35moe", "Q4_0", 3.8e-2}, {"tiny-qwen3moe", "Q8_0", 1.0e-3},
    {"tiny-qwen3moe", "Q4_K_M", 6.7e-3},
};

static lilac_model *open_mode(const char *path, bool precise)
{
    lilac_model_params p = lilac_model_default_params();
    p.n_threads = 2;
    p.precise = precise;
    return tm_open_with(path, &p);
}


/* log-softmax of one row, in double */
/* mean over positions of KL(softmax(p) || softmax(q)) */
/* 1 when the file ran, 0 when its fixtures are missing */
static int run_case(const char *fx, const quant_case *c, const int32_t *toks, int n, int V_meta)
{
    char path[4096], p2[4096];
    if (snprintf(path, sizeof path, "%s/%s/gguf/model-%s.gguf", fx, c->model, c->type) >= (int)sizeof path ||
        snprintf(p2, sizeof p2, "%s/%s/golden/exact-logits-%s.f32", fx, c->model, c->type) >= (int)sizeof p2) {
        CHECKF(0, "fixture paths under %s are too long", fx);
        return 1;
    }
    FILE *f1 = fopen(path, "rb"), *f2 = fopen(p2, "rb");
    int present = f1 && f2;
    if (f1)
        fclose(f1);
    if (f2)
        fclose(f2);
    if (!present) {
        printf("skipped %s %s: %s or %s missing\n", c->model, c->type, path, p2);
        return 0;
    }
    float *exact = NULL, *llama = NULL;
    double llama_kl = c->llama_kl;
    for (int mode = 0; mode < 2; mode++) {
        const bool precise = mode == 0;
        const char *mname = precise ? "precise" : "fast";
        lilac_model *m = open_mode(path, precise);
        CHECKF(m != NULL, "%s loads", path);
        if (!m)
            break;
        int V = lilac_model_hparams(m)->n_vocab;
        CHECKF(V == V_meta, "%s: vocabulary %d, meta.json says %d", path, V, V_meta);
        size_t nv = (size_t)n * V;
        if (!exact) {
            exact = tu_read_f32(p2, nv);
            bool fits = snprintf(p2, sizeof p2, "%s/%s/golden/llamacpp-logits-%s.f32", fx, c->model, c->type) <
                        (int)sizeof p2;
            llama = fits ? tu_read_f32(p2, nv) : NULL;
            if (exact && llama)
                llama_kl = tm_mean_kl(exact, llama, n, V);
        }
        float *pre = tm_logits(m, toks, n, 0, NULL);
        CHECKF(exact && pre, "%s: exact logits and prefill", path);
        if (exact && pre) {
            float mx = tm_max_abs(exact, nv);
            double kl = tm_mean_kl(exact, pre, n, V);
            float d = tm_max_diff(pre, exact, nv);
            int agree = tm_argmax_agree(pre, exact, n, V);
            printf("%s %-6s %-7s: mean KL %.3e, max|d|/max|logit| %.3e, argmax %d/%d", c->model, c->type, mname, kl,
                   d / mx, agree, n);
            if (llama)
                printf("   (llama.cpp quantized path: mean KL %.3e, max|d|/max|logit| %.3e, argmax %d/%d)", llama_kl,
                       tm_max_diff(llama, exact, nv) / mx, tm_argmax_agree(llama, exact, n, V), n);
            else
                printf("   (llama.cpp quantized path: mean KL %.1e per fixtures/README.md)", llama_kl);
            printf("\n");
            if (precise) {
                CHECKF(kl <= 1e-4, "%s precise: mean KL %.3e > 1e-4 against llama.cpp's float32 logits", path, kl);
                CHECKF(agree == n, "%s precise: argmax agrees at %d of %d positions", path, agree, n);
            } else {
                double bound = 0.5 * llama_kl > 1e-3 ? 0.5 * llama_kl : 1e-3;
                CHECKF(kl <= bound, "%s fast: mean KL %.3e > %.3e (half of llama.cpp's %.3e, at least 1e-3)", path, kl,
                       bound, llama_kl);
                CHECKF(agree >= 62, "%s fast: argmax agrees at %d of %d positions (want 62 or more)", path, agree, n);
            }

            /* On the fast path a last-ulp difference upstream (another sum
             * order) can move an activation across a rounding boundary of its
             * 16-bit grid: one unit, 2^-15 of its block's largest value. Such
             * steps stay well below the path's own distance to the exact
             * logits (~1e-4 of the largest); allow five times the precise
             * bound there. */
            const float same = (precise ? 1e-4f : 5e-4f) * mx;

            /* one token at a time: the decode path over the same weights */
            float *dec = tm_logits(m, toks, n, 1, NULL);
            CHECKF(dec != NULL, "%s: decode", path);
            if (dec) {
                float dd = tm_max_diff(dec, pre, nv);
                printf("  %s: decode vs prefill max|d|/max|logit| = %.3e\n", mname, dd / mx);
                CHECKF(dd <= same, "%s %s: decode differs from prefill by %.4g (bound %.4g)", path, mname, dd, same);
            }
            free(dec);

            /* the scalar oracle kernels over the whole model */
            const lilac_cpu_kernels *best = lilac_cpu_best();
            if (best != &lilac_cpu_scalar) {
                setenv("LILAC_CPU_KERNELS", "scalar", 1);
                lilac_model *ms = open_mode(path, precise);
                unsetenv("LILAC_CPU_KERNELS");
                float *sc = ms ? tm_logits(ms, toks, n, 0, NULL) : NULL;
                CHECKF(sc != NULL, "%s: scalar kernels run", path);
                if (sc) {
                    float ds = tm_max_diff(sc, pre, nv);
                    printf("  %s: %s vs scalar kernels max|d|/max|logit| = %.3e\n", mname, best->name, ds / mx);
                    CHECKF(ds <= same, "%s %s: %s and scalar kernels differ by %.4g", path, mname, best->name, ds);
                }
                free(sc);
                lilac_model_free(ms);
            }
        }
        free(pre);
        lilac_model_free(m);
    }
    free(exact);
    free(llama);
    return 1;
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    int ran = 0;
    const char *meta_of = NULL;
    json_t *meta = NULL;
    int32_t *toks = NULL;
    int n = 0, V = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!tu_model_wanted(cases[i].model))
            continue;
        if (!meta_of || strcmp(meta_of, cases[i].model) != 0) {
            char p[4096];
            bool fits = snprintf(p, sizeof p, "%s/%s/golden/meta.json", fx, cases[i].model) < (int)sizeof p;
            json_decref(meta);
            free(toks);
            json_error_t je;
            meta = fits ? json_load_file(p, 0, &je) : NULL;
            toks = meta ? tm_json_ints(meta, "tokens", NULL, &n) : NULL;
            V = meta ? (int)json_integer_value(json_object_get(meta, "vocab")) : 0;
            meta_of = cases[i].model;
            if (!toks)
                printf("skipped %s: %s missing or without \"tokens\"\n", cases[i].model, p);
        }
        if (toks)
            ran += run_case(fx, &cases[i], toks, n, V);
    }
    json_decref(meta);
    free(toks);
    if (ran == 0)
        SKIP("no quantized tiny GGUF with its exact-logits golden found under %s", fx);
    TEST_END();
}
