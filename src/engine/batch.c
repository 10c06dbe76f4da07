/* batch: several sequences evaluated in shared steps (continuous
 * batching). The items' tokens are laid out side by side, up to the
 * scratch's n_tok per step; an item longer than what is left of a step
 * continues in the next one. */
#include <stdlib.h>
#include <string.h>

#include "engine/seq.h"
#include "model/decoder_cuda_int.h"
#include "util/err.h"

struct lilac_batch {
    lilac_model *m;
    int n_seq_max, n_ctx_max;
    lilac_scratch sc;
    lilac_dec_seg *segs;  /* [n_seq_max] */
    int *last_rows;       /* [n_seq_max] */
    int *last_item;       /* [n_seq_max] the item each logits row belongs to */
    int32_t *tokens;      /* [sc.n_tok] */
    float *step_logits;   /* [n_seq_max][n_vocab] one step's */
    float *logits;        /* [n_seq_max][n_vocab] by item (lilac_logits_alloc: page-locked on the GPU, where the
                           * batched step's downloads run at the bus's speed; into pageable memory 1 MB a row took
                           * about 1 ms) */
    bool *has_logits;     /* [n_seq_max] */
    lilac_logits_top *tops; /* [n_seq_max] the items' candidates (lilac_batch_item.top_k) */
    bool *has_top;          /* [n_seq_max] */
};

lilac_status lilac_batch_new(lilac_model *m, int n_seq_max, int n_ctx_max, lilac_batch **out, lilac_error *err)
{
    *out = NULL;
    if (n_seq_max < 1 || n_seq_max > LILAC_UBATCH)
        return lilac_fail(err, LILAC_E_ARG, "a batch holds 1 to %d sequences, not %d", LILAC_UBATCH, n_seq_max);
    if (n_ctx_max < 1)
        return lilac_fail(err, LILAC_E_ARG, "context size %d must be at least 1", n_ctx_max);
    lilac_batch *b = calloc(1, sizeof *b);
    if (!b)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory for a batch");
    b->m = m;
    b->n_seq_max = n_seq_max;
    b->n_ctx_max = n_ctx_max;
    size_t nv = (size_t)m->hp.n_vocab, ns = (size_t)n_seq_max;
    lilac_status st = lilac_scratch_init(&b->sc, m, LILAC_UBATCH, n_ctx_max, err);
    if (st != LILAC_OK) {
        free(b);
        return st;
    }
    b->segs = calloc(ns, sizeof *b->segs);
    b->last_rows = calloc(ns, sizeof(int));
    b->last_item = calloc(ns, sizeof(int));
    b->tokens = calloc((size_t)b->sc.n_tok, sizeof(int32_t));
    b->step_logits = malloc(ns * nv * sizeof(float));
    b->logits = lilac_logits_alloc(m, ns * nv);
    b->has_logits = calloc(ns, sizeof(bool));
    b->tops = malloc(ns * sizeof *b->tops);
    b->has_top = calloc(ns, sizeof(bool));
    if (!b->segs || !b->last_rows || !b->last_item || !b->tokens || !b->step_logits || !b->logits || !b->has_logits ||
        !b->tops || !b->has_top) {
        lilac_batch_free(b);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory for a batch of %d sequences", n_seq_max);
    }
    *out = b;
    return LILAC_OK;
}

void lilac_batch_free(lilac_batch *b)
{
    if (!b)
        return;
    lilac_scratch_free(&b->sc);
    lilac_logits_free(b->logits);
    free(b->segs);
    free(b->last_rows);
    free(b->last_item);
    free(b->tokens);
    free(b->step_logits);
    free(b->has_logits);
    free(b->tops);
    free(b->has_top);
    free(b);
}

static lilac_status check_items(const lilac_batch *b, const lilac_batch_item *items, int n_items, lilac_error *err)
{
    if (n_items < 1 || n_items > b->n_seq_max)
        return lilac_fail(err, LILAC_E_ARG, "%d items: this batch takes 1 to %d", n_items, b->n_seq_max);
    for (int i = 0; i < n_items; i++) {
        const lilac_batch_item *it = &items[i];
        if (!it->seq || !it->tokens || it->n < 1)
            return lilac_fail(err, LILAC_E_ARG, "item %d: no sequence, no tokens or n < 1", i);
        if (it->seq->m != b->m)
            return lilac_fail(err, LILAC_E_ARG, "item %d: the sequence belongs to another model", i);
        if (it->seq->n_ctx > b->n_ctx_max)
            return lilac_fail(err, LILAC_E_ARG, "item %d: a %d-token context is larger than the batch's %d", i,
                              it->seq->n_ctx, b->n_ctx_max);
        if (it->n > it->seq->n_ctx - it->seq->pos)
            return lilac_fail(err, LILAC_E_RANGE, "item %d: %d tokens do not fit: the sequence holds %d of its %d", i,
                              it->n, it->seq->pos, it->seq->n_ctx);
        for (int t = 0; t < it->n; t++)
            if (it->tokens[t] < 0 || it->tokens[t] >= b->m->hp.n_vocab)
                return lilac_fail(err, LILAC_E_ARG, "item %d: token %d at index %d is outside the vocabulary", i,
                                  it->tokens[t], t);
        if (it->top_k < 0 || it->top_k > LILAC_TOP_MAX)
            return lilac_fail(err, LILAC_E_ARG, "item %d: top_k %d (0: the logits; 1..%d: the best)", i, it->top_k,
                              LILAC_TOP_MAX);
        for (int j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return lilac_fail(err, LILAC_E_ARG, "items %d and %d feed the same sequence", j, i);
    }
    return LILAC_OK;
}

/* Whether item it asks for the sampler's candidates rather than its logits. */
static bool item_top(const lilac_batch_item *it) { return it->want_logits && it->top_k > 0; }

/* What item i got: its candidates or its logits, as it asked. */
static void item_got(lilac_batch *b, const lilac_batch_item *it, int i)
{
    b->has_top[i] = item_top(it);
    b->has_logits[i] = it->want_logits && !b->has_top[i];
}

/* On the GPU: prompts (more than one token) a sequence at a time through the
 * prefill, then the single tokens of all the others in one batched step
 * where lilac_cuda_decode_batch_wanted, else one after another. */
static lilac_status batch_eval_cuda(lilac_batch *b, const lilac_batch_item *items, int n_items, lilac_error *err)
{
    size_t nv = (size_t)b->m->hp.n_vocab;
    int n1 = 0;
    for (int i = 0; i < n_items; i++)
        n1 += items[i].n == 1;
    bool batched = lilac_cuda_decode_batch_wanted(b->m, n1);
    lilac_status st;
    for (int i = 0; i < n_items; i++) {
        if (batched && items[i].n == 1)
            continue;
        const bool top = item_top(&items[i]);
        lilac_eval_opts o = {.logits_mode = top                   ? LILAC_LOGITS_TOP
                                            : items[i].want_logits ? LILAC_LOGITS_LAST
                                                                   : LILAC_LOGITS_NONE,
                             .logits = b->logits + (size_t)i * nv, .top = &b->tops[i], .top_k = items[i].top_k};
        if ((st = lilac_seq_eval(items[i].seq, items[i].tokens, items[i].n, &o, err)))
            return st;
        item_got(b, &items[i], i);
    }
    if (!batched)
        return LILAC_OK;
    lilac_seq **seqs = malloc((size_t)n1 * sizeof *seqs);
    int32_t *toks = malloc((size_t)n1 * sizeof *toks);
    float **dst = malloc((size_t)n1 * sizeof *dst);
    lilac_logits_top **tops = malloc((size_t)n1 * sizeof *tops);
    st = seqs && toks && dst && tops ? LILAC_OK : lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    int top_k = 0; /* the most any item asks for: every row's reduction takes that many */
    for (int i = 0, j = 0; !st && i < n_items; i++)
        if (items[i].n == 1) {
            const bool top = item_top(&items[i]);
            seqs[j] = items[i].seq, toks[j] = items[i].tokens[0];
            tops[j] = top ? &b->tops[i] : NULL;
            dst[j++] = items[i].want_logits && !top ? b->logits + (size_t)i * nv : NULL;
            top_k = top && items[i].top_k > top_k ? items[i].top_k : top_k;
        }
    if (!st)
        st = lilac_cuda_decode_batch(b->m, seqs, toks, n1, dst, tops, top_k, err);
    for (int i = 0; !st && i < n_items; i++)
        if (items[i].n == 1)
            item_got(b, &items[i], i);
    free(seqs);
    free(toks);
    free(dst);
    free(tops);
    return st;
}

lilac_status lilac_batch_eval(lilac_batch *b, const lilac_batch_item *items, int n_items, lilac_error *err)
{
    lilac_status st = check_items(b, items, n_items, err);
    if (st != LILAC_OK)
        return st;
    size_t nv = (size_t)b->m->hp.n_vocab;
    memset(b->has_logits, 0, (size_t)b->n_seq_max * sizeof(bool));
    memset(b->has_top, 0, (size_t)b->n_seq_max * sizeof(bool));
    if (b->m->cuda)
        return batch_eval_cuda(b, items, n_items, err);
    int item = 0, done = 0; /* the next item, and how many of its tokens ran */
    while (item < n_items) {
        int nt = 0, n_seg = 0, n_last = 0;
        while (item < n_items && nt < b->sc.n_tok) {
            const lilac_batch_item *it = &items[item];
            int take = it->n - done < b->sc.n_tok - nt ? it->n - done : b->sc.n_tok - nt;
            b->segs[n_seg] = (lilac_dec_seg){it->seq, nt, take};
            memcpy(b->tokens + nt, it->tokens + done, (size_t)take * sizeof(int32_t));
            nt += take;
            done += take;
            n_seg++;
            if (done == it->n) {
                if (it->want_logits) {
                    b->last_rows[n_last] = nt - 1;
                    b->last_item[n_last++] = item;
                }
                item++;
                done = 0;
            }
        }
        lilac_decoder_step_multi(&b->sc, b->m, b->segs, n_seg, b->tokens, b->last_rows, n_last, b->step_logits);
        for (int i = 0; i < n_last; i++) {
            const int it = b->last_item[i];
            float *lg = b->logits + (size_t)it * nv;
            memcpy(lg, b->step_logits + (size_t)i * nv, nv * sizeof(float));
            if (item_top(&items[it])) /* the candidates asked for, not the logits */
                lilac_logits_top_of(lg, (int)nv, items[it].top_k, &b->tops[it]);
            item_got(b, &items[it], it);
        }
    }
    return LILAC_OK;
}

const lilac_logits_top *lilac_batch_top(lilac_batch *b, int i)
{
    if (i < 0 || i >= b->n_seq_max || !b->has_top[i])
        return NULL;
    return &b->tops[i];
}

float *lilac_batch_logits(lilac_batch *b, int i)
{
    if (i < 0 || i >= b->n_seq_max || !b->has_logits[i])
        return NULL;
    return b->logits + (size_t)i * b->m->hp.n_vocab;
}
