/* generate: the decode loop — feed the prompt, then sample, stream the
 * text (held while a character or a stop string is incomplete), and feed
 * each token back, until a stop condition. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/seq.h"
#include "tokenizer/tokenizer.h"
#include "util/err.h"

tok_tokenizer *lilac_tokenizer_tok(lilac_tokenizer *t);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

lilac_status lilac_generate(lilac_seq *s, lilac_tokenizer *t, lilac_sampler *smp, const int32_t *prompt,
                            int n_prompt, const lilac_gen_params *p, lilac_gen_fn fn, void *user,
                            lilac_gen_result *res, lilac_error *err)
{
    lilac_gen_params def = {0};
    if (!p)
        p = &def;
    memset(res, 0, sizeof *res);
    res->n_prompt = n_prompt;
    int V = s->m->hp.n_vocab, n_top = p->n_logprobs < 0 ? 0 : p->n_logprobs > 20 ? 20 : p->n_logprobs;
    if (n_prompt == 0 && s->pos == 0)
        return lilac_fail(err, LILAC_E_ARG, "nothing to generate from: an empty prompt and an empty sequence");
    if (n_prompt > 0 && n_prompt >= s->n_ctx - s->pos)
        return lilac_fail(err, LILAC_E_RANGE,
                          "the prompt has %d tokens but the context has room for %d (context %d, %d in use)",
                          n_prompt, s->n_ctx - s->pos - 1, s->n_ctx, s->pos);
    if (n_prompt == 0)
        return lilac_fail(err, LILAC_E_ARG, "an empty prompt: lilac_generate needs the tokens to continue from");

    float *logits = lilac_logits_alloc(s->m, (size_t)V);
    tok_tokenizer *tk = lilac_tokenizer_tok(t);
    lilac_token_logprob top[20];
    tok_stream *ts = NULL;
    lilac_stop *stop = NULL;
    lilac_status st = LILAC_OK;
    if (!logits)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    if ((st = tok_stream_new(tk, false, &ts, err)) ||
        (st = lilac_stop_new(p->stop, p->n_stop, &stop, err)))
        goto done;

    bool stop_hit = false;
    double t0 = now_ms();
    /* where the sampler needs only the best candidates, the backend reduces the logits to them (on a GPU:
     * 1 KB down a token, not the vocabulary) */
    lilac_logits_top ltop;
    const int top_k = lilac_sampler_top_k(smp, n_top);
    lilac_eval_opts eo = {.logits_mode = top_k ? LILAC_LOGITS_TOP : LILAC_LOGITS_LAST, .logits = logits,
                          .top = &ltop, .top_k = top_k};
    if ((st = lilac_seq_eval(s, prompt, n_prompt, &eo, err)))
        goto done;
    double t1 = now_ms();
    res->prompt_ms = t1 - t0;
    res->finish = LILAC_FINISH_LENGTH;
    for (;;) {
        if (p->max_tokens > 0 && res->n_generated >= p->max_tokens) {
            res->finish = LILAC_FINISH_LENGTH;
            break;
        }
        if (s->pos >= s->n_ctx) {
            res->finish = LILAC_FINISH_CONTEXT;
            break;
        }
        float lp = 0;
        int32_t tok = top_k ? lilac_sampler_sample_top(smp, &ltop, &lp, n_top ? top : NULL, n_top)
                            : lilac_sampler_sample(smp, logits, &lp, n_top ? top : NULL, n_top);
        lilac_sampler_accept(smp, tok);
        res->n_generated++;
        if ((st = lilac_seq_eval(s, &tok, 1, &eo, err)))
            goto done;
        if (!p->ignore_eos && lilac_token_is_eog(t, tok)) {
            res->finish = LILAC_FINISH_STOP;
            break;
        }
        const char *piece, *emit;
        size_t n_piece, n_emit;
        /* Rows past the tokenizer's vocabulary (padding of the output
         * matrix) have no text, as in the reference: nothing to show. */
        piece = "", n_piece = 0;
        if (tok < tok_n_vocab(tk) && (st = tok_stream_feed(ts, tok, &piece, &n_piece, err)))
            goto done;
        bool stopped = lilac_stop_feed(stop, piece, n_piece, &emit, &n_emit);
        lilac_gen_event ev = {emit, n_emit, tok, lp, top, n_top};
        if (fn && !fn(user, &ev)) {
            res->finish = LILAC_FINISH_CANCELLED;
            break;
        }
        if (stopped) {
            res->finish = LILAC_FINISH_STOP;
            stop_hit = true;
            break;
        }
    }
    if (!stop_hit && res->finish != LILAC_FINISH_CANCELLED) {
        /* release what the stream and the stop watcher still hold */
        size_t n_tail, n_emit;
        const char *tail = tok_stream_flush(ts, &n_tail), *emit;
        bool hit = lilac_stop_feed(stop, tail, n_tail, &emit, &n_emit);
        lilac_gen_event ev = {emit, n_emit, -1, 0, NULL, 0};
        if (fn && n_emit)
            fn(user, &ev);
        if (!hit) {
            lilac_stop_flush(stop, &emit, &n_emit);
            ev.text = emit, ev.len = n_emit;
            if (fn && n_emit)
                fn(user, &ev);
        }
    }
    res->gen_ms = now_ms() - t1;
done:
    tok_stream_free(ts);
    lilac_stop_free(stop);
    lilac_logits_free(logits);
    return st;
}
