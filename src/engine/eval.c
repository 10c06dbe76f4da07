/* eval: perplexity, and KL divergence and top-1 agreement against a
 * reference (another model, or saved logits), chunk by chunk so that only
 * one chunk's logits are held at a time. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lilac.h"
#include "util/err.h"

/* log-softmax of v into out; returns nothing, fills out[n]. */
static void log_softmax(const float *v, int n, double *out)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = v[i] > mx ? v[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)v[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        out[i] = v[i] - lse;
}


static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static lilac_status chunk_logits(lilac_model *m, const int32_t *toks, int n, float *out, lilac_error *err)
{
    lilac_seq *s;
    lilac_status st = lilac_seq_new(m, n, &s, err);
    if (st)
        return st;
    lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_ALL, .logits = out};
    st = lilac_seq_eval(s, toks, n, &o, err);
    lilac_seq_free(s);
    return st;
}

lilac_status lilac_eval_tokens(lilac_model *m, const int32_t *tokens, int n_tokens, const lilac_eval_params *p,
                               lilac_eval_result *res, lilac_error *err)
{
    memset(res, 0, sizeof *res);
    res->kl_mean = res->kl_p99 = res->kl_max = res->top1 = res->ref_ppl = NAN;
    int ctx = p->n_ctx, V = lilac_model_hparams(m)->n_vocab;
    if (ctx < 2 || p->score_from < 0 || p->score_from > ctx - 2)
        return lilac_fail(err, LILAC_E_ARG, "eval: chunks of %d tokens scored from %d: need 2 <= chunk and score_from <= chunk - 2",
                          ctx, p->score_from);
    int n_chunks = n_tokens / ctx;
    if (n_chunks < 1)
        return lilac_fail(err, LILAC_E_ARG, "eval: %d tokens are fewer than one chunk of %d", n_tokens, ctx);
    if (p->ref_model && lilac_model_hparams(p->ref_model)->n_vocab != V)
        return lilac_fail(err, LILAC_E_ARG, "eval: the reference has a vocabulary of %d, the model %d",
                          lilac_model_hparams(p->ref_model)->n_vocab, V);
    bool has_ref = p->ref_model || p->ref_logits;
    size_t chunk_floats = (size_t)ctx * V;
    long per_chunk = ctx - 1 - p->score_from, n_scored = per_chunk * n_chunks;
    float *lg = malloc(chunk_floats * sizeof(float)), *ref = has_ref ? malloc(chunk_floats * sizeof(float)) : NULL;
    double *lq = malloc((size_t)V * sizeof(double)), *lp = has_ref ? malloc((size_t)V * sizeof(double)) : NULL;
    double *kls = has_ref ? malloc((size_t)n_scored * sizeof(double)) : NULL;
    FILE *rf = NULL, *sf = NULL;
    lilac_status st = LILAC_OK;
    if (!lg || !lq || (has_ref && (!ref || !lp || !kls))) {
        st = lilac_fail(err, LILAC_E_NOMEM, "eval: out of memory for chunks of %d x %d logits", ctx, V);
        goto done;
    }
    if (p->ref_logits && !p->ref_model) {
        if (!(rf = fopen(p->ref_logits, "rb"))) {
            st = lilac_fail(err, LILAC_E_IO, "%s: cannot open: %s", p->ref_logits, strerror(errno));
            goto done;
        }
        fseek(rf, 0, SEEK_END);
        long size = ftell(rf);
        fseek(rf, 0, SEEK_SET);
        if (size < 0 || (size_t)size < (size_t)n_chunks * chunk_floats * sizeof(float)) {
            st = lilac_fail(err, LILAC_E_FORMAT,
                            "%s: %ld bytes, but %d chunks of %d x %d float32 logits need %zu", p->ref_logits, size,
                            n_chunks, ctx, V, (size_t)n_chunks * chunk_floats * sizeof(float));
            goto done;
        }
    }
    if (p->save_logits && !(sf = fopen(p->save_logits, "wb"))) {
        st = lilac_fail(err, LILAC_E_IO, "%s: cannot create: %s", p->save_logits, strerror(errno));
        goto done;
    }
    double nll = 0, ref_nll = 0;
    long agree = 0, k = 0;
    for (int c = 0; c < n_chunks; c++) {
        const int32_t *toks = tokens + (size_t)c * ctx;
        if ((st = chunk_logits(m, toks, ctx, lg, err)))
            goto done;
        if (sf && fwrite(lg, sizeof(float), chunk_floats, sf) != chunk_floats) {
            st = lilac_fail(err, LILAC_E_IO, "%s: write failed", p->save_logits);
            goto done;
        }
        if (p->ref_model) {
            if ((st = chunk_logits(p->ref_model, toks, ctx, ref, err)))
                goto done;
        } else if (rf && fread(ref, sizeof(float), chunk_floats, rf) != chunk_floats) {
            st = lilac_fail(err, LILAC_E_IO, "%s: read failed", p->ref_logits);
            goto done;
        }
        for (int i = p->score_from; i < ctx - 1; i++, k++) {
            const float *row = lg + (size_t)i * V;
            log_softmax(row, V, lq);
            nll -= lq[toks[i + 1]];
            if (!has_ref)
                continue;
            const float *rrow = ref + (size_t)i * V;
            log_softmax(rrow, V, lp);
            ref_nll -= lp[toks[i + 1]];
            double kl = 0;
            for (int v = 0; v < V; v++)
                kl += exp(lp[v]) * (lp[v] - lq[v]);
            kls[k] = kl > 0 ? kl : 0;
            agree += lilac_argmax(row, V) == lilac_argmax(rrow, V);
        }
    }
    res->n_chunks = n_chunks;
    res->n_scored = n_scored;
    res->nll_mean = nll / n_scored;
    res->ppl = exp(res->nll_mean);
    if (has_ref) {
        double sum = 0;
        for (long i = 0; i < n_scored; i++)
            sum += kls[i];
        qsort(kls, (size_t)n_scored, sizeof *kls, cmp_double);
        res->kl_mean = sum / n_scored;
        res->kl_p99 = kls[(long)ceil(0.99 * n_scored) - 1 < 0 ? 0 : (long)ceil(0.99 * n_scored) - 1];
        res->kl_max = kls[n_scored - 1];
        res->top1 = (double)agree / n_scored;
        res->ref_ppl = exp(ref_nll / n_scored);
    }
done:
    if (rf)
        fclose(rf);
    if (sf && fclose(sf) != 0 && !st)
        st = lilac_fail(err, LILAC_E_IO, "%s: write failed", p->save_logits);
    if (st && sf)
        remove(p->save_logits);
    free(lg);
    free(ref);
    free(lq);
    free(lp);
    free(kls);
    return st;
}
