/* models: shared helpers of the model-level tests — opening a model,
 * running tokens through it, reading golden files and meta.json. */
#ifndef LILAC_TEST_MODELS_H
#define LILAC_TEST_MODELS_H

#include <jansson.h>
#include <math.h>

#include "lilac.h"
#include "testutil.h"

/* The model at path with these parameters, or NULL saying why. */
static inline lilac_model *tm_open_with(const char *path, const lilac_model_params *p)
{
    lilac_model *m = NULL;
    lilac_error err;
    if (lilac_model_open(path, p, &m, &err)) {
        fprintf(stderr, "cannot open %s: %s\n", path, err.msg);
        return NULL;
    }
    return m;
}

static inline lilac_model *tm_open(const char *path, int threads)
{
    lilac_model_params p = lilac_model_default_params();
    p.n_threads = threads;
    return tm_open_with(path, &p);
}

/* Logits of every position, the tokens fed in calls of sizes[0 .. n_sizes),
 * then of `then` tokens each (<= 0: the rest in one call). hidden (the
 * residual stream) is asked for when one call takes all n. Returns malloc'd
 * n*vocab floats, NULL on failure. */
static inline float *tm_logits_calls(lilac_model *m, const int32_t *toks, int n, const int *sizes, int n_sizes,
                                     int then, float *hidden)
{
    int V = lilac_model_hparams(m)->n_vocab;
    float *out = malloc((size_t)n * V * sizeof(float));
    lilac_seq *s = NULL;
    lilac_error err;
    if (!out || lilac_seq_new(m, n, &s, &err)) {
        free(out);
        return NULL;
    }
    for (int i = 0, at = 0; at < n; i++) {
        int want = i < n_sizes ? sizes[i] : then > 0 ? then : n - at;
        int k = want < n - at ? want : n - at;
        lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_ALL, .logits = out + (size_t)at * V,
                             .hidden = k == n ? hidden : NULL};
        if (lilac_seq_eval(s, toks + at, k, &o, &err)) {
            fprintf(stderr, "eval failed: %s\n", err.msg);
            free(out);
            out = NULL;
            break;
        }
        at += k;
    }
    lilac_seq_free(s);
    return out;
}

/* Logits of every position: prefill all at once (step 0), or `step`
 * tokens per call (1 = the decode path). Returns malloc'd n*vocab floats. */
static inline float *tm_logits(lilac_model *m, const int32_t *toks, int n, int step, float *hidden)
{
    return tm_logits_calls(m, toks, n, NULL, 0, step, hidden);
}

static inline float tm_max_abs(const float *a, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}

static inline float tm_max_diff(const float *a, const float *b, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(a[i] - b[i]) > m ? fabsf(a[i] - b[i]) : m;
    return m;
}

static inline int tm_argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

static inline int tm_argmax_agree(const float *a, const float *b, int rows, int V)
{
    int n = 0;
    for (int r = 0; r < rows; r++)
        n += tm_argmax(a + (size_t)r * V, V) == tm_argmax(b + (size_t)r * V, V);
    return n;
}

/* An int array of a JSON object, by dotted path of two keys at most. */
/* For main() of a CUDA test: skip (exit 77) where no GPU can be used, fail
 * instead when LILAC_REQUIRE_CUDA=1 (on the GPU machine, a skip would hide
 * a broken setup). Needs kernels/cuda/cuda.h. */
#define TM_REQUIRE_CUDA()                                                                                             \
    do {                                                                                                              \
        char why_[256] = "";                                                                                          \
        if (!lilac_cuda_available(why_, sizeof why_)) {                                                               \
            const char *req_ = getenv("LILAC_REQUIRE_CUDA");                                                          \
            if (req_ && !strcmp(req_, "1")) {                                                                         \
                CHECKF(0, "LILAC_REQUIRE_CUDA=1 but no CUDA device can be used: %s", why_);                           \
                TEST_END();                                                                                           \
            }                                                                                                         \
            SKIP("no CUDA device: %s", why_);                                                                         \
        }                                                                                                             \
    } while (0)

/* The model at path on the given backend, the precise path (float32 activations, as the CUDA kernels). */
static inline lilac_model *tm_open_backend(const char *path, int backend)
{
    lilac_model_params p = lilac_model_default_params();
    p.backend = backend;
    p.precise = true;
    return tm_open_with(path, &p);
}

/* Mean over n rows of KL(softmax(p) || softmax(q)), in double. */
static inline double tm_mean_kl(const float *p, const float *q, int n, int V)
{
    double *lp = malloc((size_t)V * sizeof(double)), *lq = malloc((size_t)V * sizeof(double));
    double total = 0;
    for (int r = 0; r < n && lp && lq; r++) {
        const float *zs[2] = {p + (size_t)r * V, q + (size_t)r * V};
        double *ls[2] = {lp, lq};
        for (int k = 0; k < 2; k++) {
            double mx = zs[k][0], s = 0;
            for (int i = 1; i < V; i++)
                mx = zs[k][i] > mx ? zs[k][i] : mx;
            for (int i = 0; i < V; i++)
                s += exp((double)zs[k][i] - mx);
            for (int i = 0; i < V; i++)
                ls[k][i] = (double)zs[k][i] - mx - log(s);
        }
        double kl = 0;
        for (int i = 0; i < V; i++)
            kl += exp(lp[i]) * (lp[i] - lq[i]);
        total += kl;
    }
    free(lp);
    free(lq);
    return total / n;
}

/* got (what: "<file>: CUDA" and the like) against the golden logits of n rows: max|d| within rel of
 * max|logit| when rel > 0 (an unquantized model), else mean KL <= 1e-4 (a quantized one, against its exact
 * logits); argmax agreeing on at least argmax_min rows. */
static inline void tm_check_golden(const char *what, const char *golden, const float *got, const float *gold, int n,
                                   int V, double rel, int argmax_min)
{
    float mx = tm_max_abs(gold, (size_t)n * V), d = tm_max_diff(got, gold, (size_t)n * V);
    int agree = tm_argmax_agree(got, gold, n, V);
    if (rel > 0) {
        printf("%s vs %s: max|d|/max|logit| %.3e, argmax %d/%d\n", what, golden, d / mx, agree, n);
        CHECKF(d <= rel * mx, "%s: max|d| %.4g > %.1e x %.4g", what, d, rel, mx);
    } else {
        double kl = tm_mean_kl(gold, got, n, V);
        printf("%s vs %s: mean KL %.3e, argmax %d/%d\n", what, golden, kl, agree, n);
        CHECKF(kl <= 1e-4, "%s: mean KL %.3e > 1e-4", what, kl);
    }
    CHECKF(agree >= argmax_min, "%s: argmax agrees at %d of %d", what, agree, n);
}

static inline int32_t *tm_json_ints(json_t *root, const char *k1, const char *k2, int *n)
{
    json_t *a = json_object_get(root, k1);
    if (k2)
        a = json_object_get(a, k2);
    if (!json_is_array(a))
        return NULL;
    *n = (int)json_array_size(a);
    int32_t *v = malloc((size_t)*n * sizeof *v + 1);
    for (int i = 0; v && i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

/* Greedy decoding: feed the prompt, then take the argmax n_new times. */
static inline int tm_greedy(lilac_model *m, const int32_t *prompt, int n_prompt, int32_t *out, int n_new)
{
    int V = lilac_model_hparams(m)->n_vocab;
    float *lg = malloc((size_t)V * sizeof(float));
    lilac_seq *s = NULL;
    lilac_error err;
    int rc = -1;
    if (!lg || lilac_seq_new(m, n_prompt + n_new, &s, &err))
        goto done;
    lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_LAST, .logits = lg};
    if (lilac_seq_eval(s, prompt, n_prompt, &o, &err))
        goto done;
    for (int i = 0; i < n_new; i++) {
        out[i] = tm_argmax(lg, V);
        if (i + 1 < n_new && lilac_seq_eval(s, &out[i], 1, &o, &err))
            goto done;
    }
    rc = 0;
done:
    free(lg);
    lilac_seq_free(s);
    return rc;
}

#endif
