/* lilac eval: perplexity over a text and, against a reference (another
 * quantization of the same model, or saved logits), KL divergence and
 * top-1 agreement; --compare puts several files in one table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"

static bool is_model_path(const char *p)
{
    struct stat st;
    if (stat(p, &st) != 0)
        return false;
    if (S_ISDIR(st.st_mode))
        return true;
    FILE *f = fopen(p, "rb");
    char magic[4] = {0};
    bool gguf = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f)
        fclose(f);
    return gguf;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

static double tg_speed(lilac_model *m, int n)
{
    lilac_seq *s;
    lilac_error err;
    if (lilac_seq_new(m, n + 1, &s, &err))
        return NAN;
    int32_t tok = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_NONE};
        tok = (tok * 31 + 7) % 1000;
        if (lilac_seq_eval(s, &tok, 1, &o, &err)) {
            lilac_seq_free(s);
            return NAN;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    lilac_seq_free(s);
    return n / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
}

static void print_json(const char *model, const lilac_model *m, const lilac_eval_result *r, double tps)
{
    printf("{\"model\": \"%s\", \"bytes\": %llu, \"bits_per_weight\": %.4f, \"chunks\": %d, \"scored\": %ld, "
           "\"ppl\": %.6f, \"nll\": %.6f",
           model, (unsigned long long)lilac_model_weight_bytes(m),
           lilac_model_weight_bytes(m) * 8.0 / (double)lilac_model_n_params(m), r->n_chunks, r->n_scored, r->ppl,
           r->nll_mean);
    if (!isnan(r->kl_mean))
        printf(", \"kl_mean\": %.8g, \"kl_p99\": %.8g, \"kl_max\": %.8g, \"top1\": %.6f, \"ref_ppl\": %.6f", r->kl_mean,
               r->kl_p99, r->kl_max, r->top1, r->ref_ppl);
    if (!isnan(tps))
        printf(", \"tg_tokens_per_s\": %.3f", tps);
    printf("}\n");
}

int cmd_eval(int argc, char **argv)
{
    const char *model = NULL, *text_file = NULL, *tokens = NULL, *ref = NULL, *save = NULL;
    const char *compare[32];
    int n_compare = 0, ctx = 512, score_from = -1, threads = 0;
    bool json = false, in_compare = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' && in_compare) {
            if (n_compare == 32)
                return cli_fail("%s", "eval: at most 32 files to compare");
            compare[n_compare++] = a;
            continue;
        }
        in_compare = false;
        if (!strcmp(a, "--compare"))
            in_compare = true;
        else if (!strcmp(a, "--json"))
            json = true;
        else if (!v)
            return cli_fail("eval: unknown or incomplete option '%s'", a);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = argv[++i];
        else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
            text_file = argv[++i];
        else if (!strcmp(a, "--tokens"))
            tokens = argv[++i];
        else if (!strcmp(a, "--reference"))
            ref = argv[++i];
        else if (!strcmp(a, "--save-logits"))
            save = argv[++i];
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            if ((ctx = cli_parse_int(argv[++i])) < 2)
                return cli_fail("eval: --ctx wants a number >= 2, not '%s'", argv[i]);
        } else if (!strcmp(a, "--score-from")) {
            i++;
            score_from = !strcmp(argv[i], "0") ? 0 : cli_parse_int(argv[i]);
            if (score_from < 0)
                return cli_fail("eval: --score-from wants a number >= 0, not '%s'", argv[i]);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if ((threads = cli_parse_int(argv[++i])) < 0)
                return cli_fail("eval: --threads wants a positive number, not '%s'", argv[i]);
        } else
            return cli_fail("eval: unknown option '%s'", a);
    }
    if (model && n_compare)
        return cli_fail("%s", "eval: give -m MODEL or --compare FILES..., not both");
    if (model)
        compare[n_compare++] = model;
    if (!n_compare)
        return cli_fail("%s", "eval: no model given (-m MODEL or --compare A B ...)");
    if (!!text_file + !!tokens != 1)
        return cli_fail("%s", "eval: give the text (-f FILE) or --tokens IDS");
    if (score_from < 0)
        score_from = ctx / 2; /* as llama.cpp's perplexity: the first half is context */
    if (save && n_compare > 1)
        return cli_fail("%s", "eval: --save-logits works with one model");

    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = threads;
    mp.log = cli_log;
    lilac_error err;
    lilac_model *refm = NULL, *m = NULL;
    int32_t *ids = NULL;
    int n_ids = 0, rc = 1;
    char *text = NULL;
    if (ref && is_model_path(ref) && lilac_model_open(ref, &mp, &refm, &err)) {
        cli_fail_err(&err);
        goto done;
    }
    if (tokens) {
        if (cli_parse_tokens(tokens, &ids, &n_ids)) {
            cli_fail("eval: --tokens wants comma-separated ids, not '%s'", tokens);
            goto done;
        }
    } else {
        if (!(text = slurp(text_file))) {
            cli_fail("eval: cannot read '%s'", text_file);
            goto done;
        }
        lilac_tokenizer *tok;
        size_t n = 0;
        lilac_model *tm = refm;
        if (!tm && lilac_model_open(compare[0], &mp, &tm, &err)) {
            cli_fail_err(&err);
            goto done;
        }
        lilac_status s = lilac_model_tokenizer(tm, &tok, &err);
        if (!s)
            s = lilac_tokenize(tok, text, strlen(text), false, &ids, &n, &err);
        if (tm != refm)
            lilac_model_free(tm);
        if (s) {
            cli_fail_err(&err);
            goto done;
        }
        n_ids = (int)n;
    }
    if (!json && n_compare > 1)
        printf("| file | size GiB | bits/weight | PPL | KL mean | KL p99 | top-1 %% | tg t/s |\n"
               "| ---- | -------: | ----------: | --: | ------: | -----: | ------: | -----: |\n");
    for (int i = 0; i < n_compare; i++) {
        if (lilac_model_open(compare[i], &mp, &m, &err)) {
            cli_fail_err(&err);
            goto done;
        }
        lilac_eval_params ep = {.n_ctx = ctx, .score_from = score_from, .ref_model = refm,
                                .ref_logits = refm ? NULL : ref, .save_logits = save};
        lilac_eval_result r;
        if (lilac_eval_tokens(m, ids, n_ids, &ep, &r, &err)) {
            cli_fail_err(&err);
            goto done;
        }
        double tps = n_compare > 1 ? tg_speed(m, 16) : NAN;
        if (json)
            print_json(compare[i], m, &r, tps);
        else if (n_compare > 1)
            printf("| %s | %.3f | %.2f | %.4f | %.3e | %.3e | %.2f | %.1f |\n", compare[i],
                   lilac_model_weight_bytes(m) / 1073741824.0,
                   lilac_model_weight_bytes(m) * 8.0 / (double)lilac_model_n_params(m), r.ppl, r.kl_mean, r.kl_p99,
                   100 * r.top1, tps);
        else {
            printf("%s: %d chunks of %d tokens, %ld predictions scored\n", compare[i], r.n_chunks, ctx, r.n_scored);
            printf("perplexity: %.4f (mean NLL %.5f)\n", r.ppl, r.nll_mean);
            if (!isnan(r.kl_mean))
                printf("against %s: KL mean %.4e, p99 %.4e, max %.4e; top-1 agreement %.2f%%; reference "
                       "perplexity %.4f\n",
                       ref, r.kl_mean, r.kl_p99, r.kl_max, 100 * r.top1, r.ref_ppl);
        }
        lilac_model_free(m);
        m = NULL;
    }
    rc = 0;
done:
    lilac_model_free(m);
    lilac_model_free(refm);
    free(ids);
    free(text);
    return rc;
}
