/* lilac bench: prompt processing and generation speed, load time, peak
 * resident memory — named as llama-bench names its tests (pp512, tg64). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/cli.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    if (kib < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kib = ru.ru_maxrss;
    }
    return kib * 1024;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const char *model;
    int n_prompt, n_gen, depth, threads, reps;
    int parallel; /* sequences decoded together in the generation test */
    int check_greedy; /* with parallel > 1: greedy tokens a sequence compared, batched against alone */
    bool json;
    bool precise; /* float32 activations against quantized weights */
} bench_opts;

static void fill_tokens(int32_t *t, int n, int vocab, uint64_t *state)
{
    for (int i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((*state >> 33) % (uint64_t)(vocab > 1000 ? 1000 : vocab)); /* ordinary ids */
    }
}

/* The context the tests start from: `depth` tokens, evaluated once and
 * copied into each repetition's sequence (*base stays NULL at depth 0). */
static int make_base(lilac_model *m, const bench_opts *o, int n_ctx, lilac_seq **base)
{
    const lilac_hparams *hp = lilac_model_hparams(m);
    lilac_error err;
    *base = NULL;
    if (o->depth == 0)
        return 0;
    int32_t *toks = malloc((size_t)o->depth * sizeof *toks);
    uint64_t rng = 999;
    if (!toks)
        return cli_fail("%s", "out of memory");
    fill_tokens(toks, o->depth, hp->n_vocab, &rng);
    lilac_eval_opts eo = {.logits_mode = LILAC_LOGITS_NONE};
    int rc = 0;
    if (lilac_seq_new(m, n_ctx, base, &err) || lilac_seq_eval(*base, toks, o->depth, &eo, &err))
        rc = cli_fail_err(&err);
    free(toks);
    return rc;
}

/* One repetition: the base context copied into a fresh sequence, then the test. */
static int run_once(lilac_model *m, const bench_opts *o, const lilac_seq *base, bool gen, double *tps)
{
    const lilac_hparams *hp = lilac_model_hparams(m);
    int n = gen ? o->n_gen : o->n_prompt;
    int n_ctx = o->depth + n + 1;
    lilac_seq *s = NULL;
    lilac_error err;
    int32_t *toks = malloc((size_t)(n + 1) * sizeof *toks);
    float *logits = lilac_logits_alloc(m, (size_t)hp->n_vocab); /* pinned on a GPU, as the engine's own loop */
    uint64_t rng = 12345;
    int rc = 1;
    if (!toks || !logits) {
        cli_fail("%s", "out of memory");
        goto done;
    }
    if (lilac_seq_new(m, n_ctx, &s, &err) || (base && lilac_seq_copy(s, base, &err))) {
        cli_fail_err(&err);
        goto done;
    }
    fill_tokens(toks, n, hp->n_vocab, &rng);
    lilac_eval_opts eo = {.logits_mode = LILAC_LOGITS_LAST, .logits = logits};
    double t0 = now_s();
    if (!gen) {
        if (lilac_seq_eval(s, toks, n, &eo, &err)) {
            cli_fail_err(&err);
            goto done;
        }
    } else {
        for (int i = 0; i < n; i++)
            if (lilac_seq_eval(s, toks + i, 1, &eo, &err)) {
                cli_fail_err(&err);
                goto done;
            }
    }
    *tps = n / (now_s() - t0);
    rc = 0;
done:
    lilac_seq_free(s);
    free(toks);
    lilac_logits_free(logits);
    return rc;
}

/* Generation with o->parallel sequences in one batch: each step feeds one
 * token to every sequence; tokens/s counts all of them. */
static int run_once_parallel(lilac_model *m, const bench_opts *o, const lilac_seq *base, double *tps)
{
    const lilac_hparams *hp = lilac_model_hparams(m);
    int P = o->parallel, n = o->n_gen, n_ctx = o->depth + n + 1;
    lilac_seq **s = calloc((size_t)P, sizeof *s);
    lilac_batch_item *it = calloc((size_t)P, sizeof *it);
    int32_t *toks = malloc((size_t)P * (o->depth + n + 1) * sizeof *toks);
    lilac_batch *b = NULL;
    lilac_error err;
    uint64_t rng = 12345;
    int rc = 1;
    if (!s || !it || !toks) {
        cli_fail("%s", "out of memory");
        goto done;
    }
    if (lilac_batch_new(m, P, n_ctx, &b, &err)) {
        cli_fail_err(&err);
        goto done;
    }
    for (int i = 0; i < P; i++) {
        if (lilac_seq_new(m, n_ctx, &s[i], &err)) {
            cli_fail_err(&err);
            goto done;
        }
        fill_tokens(toks + (size_t)i * (o->depth + n + 1), o->depth + n, hp->n_vocab, &rng);
        if (base && lilac_seq_copy(s[i], base, &err)) {
            cli_fail_err(&err);
            goto done;
        }
    }
    double t0 = now_s();
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < P; i++)
            it[i] = (lilac_batch_item){s[i], toks + (size_t)i * (o->depth + n + 1) + o->depth + k, 1, true, 0};
        if (lilac_batch_eval(b, it, P, &err)) {
            cli_fail_err(&err);
            goto done;
        }
    }
    *tps = (double)P * n / (now_s() - t0);
    rc = 0;
done:
    for (int i = 0; s && i < P; i++)
        lilac_seq_free(s[i]);
    lilac_batch_free(b);
    free(s);
    free(it);
    free(toks);
    return rc;
}

/* The gap between the two largest of x[0..n). */
static float top2_gap(const float *x, int n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > a)
            b = a, a = x[i];
        else if (x[i] > b)
            b = x[i];
    return a - b;
}

/* --check-greedy G: each of the P sequences (a prompt of its own) decodes G
 * tokens greedily in one batch, then alone; how many sequences' tokens
 * differ. At a difference, the gap between the two best logits alone says
 * whether it was a near tie (where float32 rounding in another summation
 * order may pick the other token) or an error. The logits' largest
 * difference, batch against alone, after the prompt and after the first
 * decoded token (max over the sequences of max|d| / max|logit|) says how
 * far one step's rounding moves them: a difference found steps later with
 * a gap far above that has grown through the steps, or is an error. */
static float rel_diff(const float *a, const float *ref, int n)
{
    float d = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        d = fabsf(a[i] - ref[i]) > d ? fabsf(a[i] - ref[i]) : d;
        mx = fabsf(ref[i]) > mx ? fabsf(ref[i]) : mx;
    }
    return mx > 0 ? d / mx : d;
}

static int greedy_check(lilac_model *m, const bench_opts *o)
{
    const int P = o->parallel, G = o->check_greedy, NP = 8, V = lilac_model_hparams(m)->n_vocab;
    lilac_seq **s = calloc((size_t)P, sizeof *s);
    lilac_batch_item *it = calloc((size_t)P, sizeof *it);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)P * NP), *tb = malloc(sizeof(int32_t) * (size_t)P * G);
    int32_t *ta = malloc(sizeof(int32_t) * (size_t)G);
    float *lg = malloc(sizeof(float) * (size_t)V);
    /* the batch's logits after the prompt and after the first token, for the comparison with each alone */
    float *lb = malloc(sizeof(float) * (size_t)V * P * 2);
    lilac_batch *b = NULL;
    lilac_seq *one = NULL;
    lilac_error err;
    uint64_t rng = 777;
    int rc = 1, differ = 0, first_step = -1;
    float gap = 0, rel[2] = {0, 0};
    if (!s || !it || !prompt || !tb || !ta || !lg || !lb) {
        cli_fail("%s", "out of memory");
        goto done;
    }
    if (lilac_batch_new(m, P, NP + G + 1, &b, &err))
        goto fail;
    for (int i = 0; i < P; i++) {
        fill_tokens(prompt + (size_t)i * NP, NP, V, &rng);
        if (lilac_seq_new(m, NP + G + 1, &s[i], &err))
            goto fail;
    }
    for (int k = 0; k < G; k++) {
        for (int i = 0; i < P; i++)
            it[i] = k ? (lilac_batch_item){s[i], tb + (size_t)i * G + k - 1, 1, true, 0}
                      : (lilac_batch_item){s[i], prompt + (size_t)i * NP, NP, true, 0};
        if (lilac_batch_eval(b, it, P, &err))
            goto fail;
        for (int i = 0; i < P; i++) {
            tb[(size_t)i * G + k] = lilac_argmax(lilac_batch_logits(b, i), V);
            if (k < 2)
                memcpy(lb + ((size_t)k * P + i) * V, lilac_batch_logits(b, i), sizeof(float) * (size_t)V);
        }
    }
    for (int i = 0; i < P; i++) {
        lilac_eval_opts eo = {.logits_mode = LILAC_LOGITS_LAST, .logits = lg};
        if (lilac_seq_new(m, NP + G + 1, &one, &err) || lilac_seq_eval(one, prompt + (size_t)i * NP, NP, &eo, &err))
            goto fail;
        for (int k = 0; k < G; k++) {
            if (k && lilac_seq_eval(one, &ta[k - 1], 1, &eo, &err))
                goto fail;
            ta[k] = lilac_argmax(lg, V);
            if (k < 2) {
                const float r = rel_diff(lb + ((size_t)k * P + i) * V, lg, V);
                rel[k] = r > rel[k] ? r : rel[k];
            }
            if (ta[k] != tb[(size_t)i * G + k]) {
                if (!differ++ || k < first_step)
                    first_step = k, gap = top2_gap(lg, V);
                break;
            }
        }
        lilac_seq_free(one);
        one = NULL;
    }
    if (o->json)
        printf("{\"test\": \"greedy_x%d\", \"parallel\": %d, \"tokens\": %d, \"sequences_differing\": %d, "
               "\"first_difference_step\": %d, \"top2_gap_there\": %.6g, \"logits_rel_diff_prompt\": %.3g, "
               "\"logits_rel_diff_step1\": %.3g}\n",
               P, P, G, differ, first_step, differ ? gap : 0.0, rel[0], G > 1 ? rel[1] : 0.0);
    else if (differ)
        printf("greedy check: %d of %d sequences differ from their batch-1 tokens (first at step %d, where the two "
               "best logits alone were %.3g apart)\n", differ, P, first_step, gap);
    else
        printf("greedy check: all %d sequences' %d greedy tokens equal their batch-1 tokens\n", P, G);
    if (!o->json)
        printf("greedy check: logits batch vs alone, max|d|/max|logit|: %.3g after the prompt, %.3g after the "
               "first token\n", rel[0], G > 1 ? rel[1] : 0.0);
    fflush(stdout);
    rc = 0;
    goto done;
fail:
    cli_fail_err(&err);
done:
    lilac_seq_free(one);
    for (int i = 0; s && i < P; i++)
        lilac_seq_free(s[i]);
    lilac_batch_free(b);
    free(s), free(it), free(prompt), free(tb), free(ta), free(lg), free(lb);
    return rc;
}

static int run_test(lilac_model *m, const bench_opts *o, const lilac_seq *base, bool gen, double load_s)
{
    int n = gen ? o->n_gen : o->n_prompt;
    if (n <= 0)
        return 0;
    double *t = calloc((size_t)o->reps, sizeof *t);
    if (!t)
        return cli_fail("%s", "out of memory");
    /* one untimed warm-up first, as llama-bench does, so that the timed
     * runs are steady state (weights paged in, caches and pool warm); its
     * speed is reported apart */
    double warm = 0;
    bool par = gen && o->parallel > 1;
    if (par ? run_once_parallel(m, o, base, &warm) : run_once(m, o, base, gen, &warm)) {
        free(t);
        return 1;
    }
    for (int r = 0; r < o->reps; r++)
        if (par ? run_once_parallel(m, o, base, &t[r]) : run_once(m, o, base, gen, &t[r])) {
            free(t);
            return 1;
        }
    qsort(t, (size_t)o->reps, sizeof *t, cmp_double);
    double med = o->reps % 2 ? t[o->reps / 2] : (t[o->reps / 2 - 1] + t[o->reps / 2]) / 2;
    double mean = 0, sd = 0;
    for (int r = 0; r < o->reps; r++)
        mean += t[r] / o->reps;
    for (int r = 0; r < o->reps; r++)
        sd += (t[r] - mean) * (t[r] - mean) / (o->reps > 1 ? o->reps - 1 : 1);
    sd = sqrt(sd);
    char name[32];
    if (par)
        snprintf(name, sizeof name, "tg%dx%d", n, o->parallel);
    else
        snprintf(name, sizeof name, "%s%d", gen ? "tg" : "pp", n);
    const lilac_hparams *hp = lilac_model_hparams(m);
    /* one sequence's generation: the weights it streams a second (lilac_model_active_bytes a token) */
    char rate[96] = "";
    if (gen && !par) {
        const uint64_t active = lilac_model_active_bytes(m);
        snprintf(rate, sizeof rate, ", \"active_bytes\": %llu, \"weights_gb_s\": %.1f", (unsigned long long)active,
                 med * (double)active / 1e9);
    }
    if (o->json)
        printf("{\"test\": \"%s\", \"model\": \"%s\", \"arch\": \"%s\", \"n_params\": %llu, \"model_bytes\": %llu, "
               "\"depth\": %d, \"threads\": %d, \"parallel\": %d, \"reps\": %d, \"tokens_per_s\": %.3f, \"min_tokens_per_s\": %.3f, "
               "\"max_tokens_per_s\": %.3f, \"stddev\": %.3f, \"load_s\": %.3f, \"peak_rss_bytes\": %lld, "
               "\"warmup_tokens_per_s\": %.3f, \"n_layer\": %d, \"precise\": %s, \"kv_type\": \"%s\", \"repacked_bytes\": %llu%s}\n",
               name, o->model, lilac_model_arch_name(m), (unsigned long long)lilac_model_n_params(m),
               (unsigned long long)lilac_model_weight_bytes(m), o->depth, lilac_model_n_threads(m), gen ? o->parallel : 1,
               o->reps, med, t[0],
               t[o->reps - 1], sd, load_s, peak_rss_bytes(), warm, hp->n_layer, o->precise ? "true" : "false",
               lilac_kv_type_name(lilac_model_kv_type(m)), (unsigned long long)lilac_model_repacked_bytes(m), rate);
    else
        printf("| %-10s | %9.2f GiB | %8.2f B | %7d | %-6s | %5d | %8.2f ± %6.2f | %8.2f | %8.2f | %8.2f |\n",
               lilac_model_arch_name(m), lilac_model_weight_bytes(m) / 1073741824.0, lilac_model_n_params(m) / 1e9,
               lilac_model_n_threads(m), name, o->depth, med, sd, t[0], t[o->reps - 1], warm);
    fflush(stdout);
    free(t);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o = {.n_prompt = 512, .n_gen = 64, .reps = 3, .parallel = 1};
    int depths[8] = {0}, n_depths = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *dst = NULL;
        bool zero_ok = false;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            o.model = argv[++i];
            continue;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        } else if (!strcmp(a, "--check-greedy") && v) {
            if ((o.check_greedy = cli_parse_int(v)) < 1)
                return cli_fail("bench: --check-greedy wants a token count, not '%s'", v);
            i++;
            continue;
        } else if (!strcmp(a, "--precise")) {
            o.precise = true;
            continue;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt"))
            dst = &o.n_prompt, zero_ok = true;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen"))
            dst = &o.n_gen, zero_ok = true;
        else if ((!strcmp(a, "-d") || !strcmp(a, "--depth")) && v) {
            /* a list, as llama-bench takes: -d 0,8192 measures both in one process */
            n_depths = 0;
            for (const char *p = v; *p && n_depths < 8;) {
                char num[24];
                size_t len = strcspn(p, ",");
                if (len == 0 || len >= sizeof num)
                    return cli_fail("bench: -d wants depths like 0,8192, not '%s'", v);
                memcpy(num, p, len);
                num[len] = 0;
                int x = !strcmp(num, "0") ? 0 : cli_parse_int(num);
                if (x < 0)
                    return cli_fail("bench: -d wants depths like 0,8192, not '%s'", v);
                depths[n_depths++] = x;
                p += len + (p[len] == ',');
            }
            i++;
            continue;
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            dst = &o.threads;
        else if (!strcmp(a, "-P") || !strcmp(a, "--parallel"))
            dst = &o.parallel;
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions"))
            dst = &o.reps;
        else
            return cli_fail("bench: unknown option '%s'", a);
        if (!v)
            return cli_fail("option '%s' needs a value", a);
        i++;
        int x = zero_ok && !strcmp(v, "0") ? 0 : cli_parse_int(v);
        if (x < 0)
            return cli_fail("bench: a count wants a number, not '%s'", v);
        *dst = x;
    }
    if (!o.model)
        return cli_fail("%s", "bench: no model given (-m MODEL)");
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = o.threads;
    mp.precise = o.precise;
    mp.log = cli_log;
    lilac_model *m;
    lilac_error err;
    double t0 = now_s();
    if (lilac_model_open(o.model, &mp, &m, &err))
        return cli_fail_err(&err);
    for (int d = 0; d < n_depths; d++)
        o.depth = depths[d] > o.depth ? depths[d] : o.depth; /* the plan for the deepest */
    if (lilac_model_mem_check(m, o.depth + (o.n_prompt > o.n_gen ? o.n_prompt : o.n_gen) + 1, o.parallel, &err) ||
        lilac_model_prepare(m, &err)) { /* load time includes the CPU repack */
        lilac_model_free(m);
        return cli_fail_err(&err);
    }
    double load_s = now_s() - t0;
    if (!o.json) {
        printf("model %s: loaded in %.3f s; KV cache %s; %s\n", o.model, load_s, lilac_kv_type_name(mp.kv_type),
               !strcmp(lilac_model_backend(m), "cuda") ? "CUDA backend (float32 activations)"
               : o.precise                              ? "CPU, precise path (float32 activations)"
                : lilac_model_repacked_bytes(m) ? "CPU, fast path (16-bit activations), Q4_K/Q6_K repacked 16 rows"
                                                : "CPU, fast path (16-bit activations)");
        printf("| model      |          size |   params | threads | test   | depth |          t/s      |      min |      max |  warm-up |\n");
        printf("| ---------- | ------------: | -------: | ------: | ------ | ----: | ----------------: | -------: | -------: | -------: |\n");
    }
    int rc = 0;
    for (int d = 0; d < n_depths && !rc; d++) {
        o.depth = depths[d];
        lilac_seq *base = NULL; /* the depth context, shared by the tests at this depth */
        rc = make_base(m, &o, o.depth + (o.n_prompt > o.n_gen ? o.n_prompt : o.n_gen) + 1, &base);
        if (!rc)
            rc = run_test(m, &o, base, false, load_s);
        if (!rc && o.parallel > 1 && o.n_gen > 0) { /* one sequence alone first, in the same process, to compare */
            bench_opts one = o;
            one.parallel = 1;
            rc = run_test(m, &one, base, true, load_s);
        }
        if (!rc)
            rc = run_test(m, &o, base, true, load_s);
        lilac_seq_free(base);
    }
    if (!rc && o.parallel > 1 && o.check_greedy > 0)
        rc = greedy_check(m, &o);
    if (!rc && !o.json)
        printf("peak resident memory: %.2f GiB\n", peak_rss_bytes() / 1073741824.0);
    lilac_model_free(m);
    return rc;
}
