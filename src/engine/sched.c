/* sched: queue, slots and the stepping thread (see sched.h). */
#include "engine/sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/seq.h"
#include "model/decoder_cuda.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/env.h"
#include "util/err.h"

tok_tokenizer *lilac_tokenizer_tok(lilac_tokenizer *t);

/* A prompt shorter than this is cheaper to evaluate again than to keep. */
#define SNAP_MIN_TOKENS 16

double sched_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct slot {
    lilac_seq *seq;
    int32_t *toks; /* the tokens the sequence holds, [n_ctx] */
    int n_toks;
    sched_req *req; /* NULL: idle */
    lilac_sampler *smp;
    tok_stream *ts;
    lilac_stop *stop;
    int prefill_at; /* the next prompt token to feed */
    bool decoding;
    int32_t pending; /* the sampled token the next step feeds */
    int n_gen;
} slot;

/* The state at the end of an earlier prompt. */
typedef struct snap {
    int32_t *toks;
    int n;
    float *state;
    size_t bytes;
    uint64_t used; /* LRU clock */
    struct snap *next;
} snap;

struct sched {
    lilac_model *m;
    tok_tokenizer *tk;
    lilac_tokenizer *tokenizer;
    sched_params p;
    slot *slots;
    lilac_batch *batch;
    lilac_batch_item *items;
    int *item_slot;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu; /* the queue, the flags, the stats */
    pthread_cond_t cv;
    sched_req *q_head, *q_tail;
    int q_len, running;
    bool stopping, draining;
    snap *snaps;
    size_t snap_bytes;
    int n_snaps;
    uint64_t clock;
    sched_stats st;
    int prompt_step; /* LILAC_SCHED_PROMPT_STEP=N (measuring): prompt steps of N tokens where nothing decodes */
};

/* ---- requests ---- */

static void req_free(sched_req *r)
{
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->text);
    free(r->toks);
    free(r->prompt);
    for (int i = 0; i < r->gen.n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r);
}

void sched_req_release(sched_req *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        req_free(r);
}

void sched_req_cancel(sched_req *r) { atomic_store(&r->cancelled, true); }

void sched_req_wait_locked(sched_req *r, size_t n_text, int n_toks, sched_state seen, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (r->text_len <= n_text && r->n_toks <= n_toks && r->state == seen && r->state != SCHED_DONE)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT)
            break;
}

static bool text_append(sched_req *r, const char *s, size_t n)
{
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n + 1)
            cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t)
            return false;
        r->text = t, r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    return true;
}

/* Mark done (under r->mu), wake the submitter, drop the scheduler's reference. */
static void req_finish(sched_req *r, lilac_finish finish, lilac_status status, const char *msg)
{
    pthread_mutex_lock(&r->mu);
    r->state = SCHED_DONE;
    r->finish = finish;
    r->status = status;
    if (msg)
        snprintf(r->error, sizeof r->error, "%.511s", msg); /* r->error holds 512 */
    r->t_done = sched_now();
    pthread_cond_broadcast(&r->cv);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        req_free(r);
}

/* ---- snapshots ---- */

static void snap_free(snap *sn)
{
    free(sn->toks);
    free(sn->state);
    free(sn);
}

/* The longest snapshot whose tokens begin prompt, leaving at least one token to evaluate. */
static snap *snap_find(sched *s, const int32_t *prompt, int n)
{
    snap *best = NULL;
    for (snap *sn = s->snaps; sn; sn = sn->next)
        if (sn->n < n && (!best || sn->n > best->n) && memcmp(sn->toks, prompt, (size_t)sn->n * sizeof *prompt) == 0)
            best = sn;
    return best;
}

static void snap_evict_for(sched *s, size_t bytes)
{
    while (s->snaps && s->snap_bytes + bytes > s->p.cache_bytes) {
        snap **lru = &s->snaps;
        for (snap **pp = &s->snaps; *pp; pp = &(*pp)->next)
            if ((*pp)->used < (*lru)->used)
                lru = pp;
        snap *victim = *lru;
        *lru = victim->next;
        s->snap_bytes -= victim->bytes;
        s->n_snaps--;
        snap_free(victim);
    }
}

/* Keep the state of a slot that has just consumed its whole prompt. */
static void snap_take(sched *s, const slot *sl)
{
    if (s->p.cache_bytes == 0 || sl->n_toks < SNAP_MIN_TOKENS || sl->seq->cuda) /* snapshots are host-side */
        return;
    for (snap *sn = s->snaps; sn; sn = sn->next)
        if (sn->n == sl->n_toks && memcmp(sn->toks, sl->toks, (size_t)sn->n * sizeof(int32_t)) == 0) {
            sn->used = ++s->clock;
            return;
        }
    size_t floats = lilac_seq_snapshot_floats(sl->seq), bytes = floats * sizeof(float) + (size_t)sl->n_toks * 4;
    if (bytes > s->p.cache_bytes)
        return;
    snap_evict_for(s, bytes);
    snap *sn = calloc(1, sizeof *sn);
    if (sn) {
        sn->toks = malloc((size_t)sl->n_toks * sizeof(int32_t));
        sn->state = malloc(floats * sizeof(float));
    }
    if (!sn || !sn->toks || !sn->state) {
        if (sn)
            snap_free(sn);
        return; /* a cache is optional: no memory, no snapshot */
    }
    memcpy(sn->toks, sl->toks, (size_t)sl->n_toks * sizeof(int32_t));
    sn->n = sl->n_toks;
    lilac_seq_snapshot_save(sl->seq, sn->state);
    sn->bytes = bytes;
    sn->used = ++s->clock;
    sn->next = s->snaps;
    s->snaps = sn;
    s->snap_bytes += bytes;
    s->n_snaps++;
}

/* ---- slots ---- */

static void slot_release_tools(slot *sl)
{
    lilac_sampler_free(sl->smp);
    tok_stream_free(sl->ts);
    lilac_stop_free(sl->stop);
    sl->smp = NULL, sl->ts = NULL, sl->stop = NULL;
}

/* How many of prompt's tokens the slot holds already (0 when its tokens are not a prefix). */
static int slot_match(const slot *sl, const int32_t *prompt, int n)
{
    if (sl->n_toks == 0 || sl->n_toks >= n || lilac_seq_pos(sl->seq) != sl->n_toks)
        return 0;
    return memcmp(sl->toks, prompt, (size_t)sl->n_toks * sizeof *prompt) == 0 ? sl->n_toks : 0;
}

/* Put r into an idle slot, reusing the longest prefix available. */
static lilac_status slot_start(sched *s, sched_req *r, lilac_error *err)
{
    int best = -1, best_n = -1;
    for (int i = 0; i < s->p.n_parallel; i++) {
        if (s->slots[i].req)
            continue;
        int n = slot_match(&s->slots[i], r->prompt, r->gen.n_prompt);
        if (n > best_n)
            best = i, best_n = n;
    }
    slot *sl = &s->slots[best];
    snap *sn = snap_find(s, r->prompt, r->gen.n_prompt);
    int cached = best_n;
    if (sn && sn->n > best_n) {
        lilac_seq_snapshot_load(sl->seq, sn->state, sn->n);
        memcpy(sl->toks, sn->toks, (size_t)sn->n * sizeof(int32_t));
        sl->n_toks = sn->n;
        sn->used = ++s->clock;
        cached = sn->n;
    } else if (best_n == 0) {
        lilac_seq_reset(sl->seq);
        sl->n_toks = 0;
    }
    lilac_status st;
    if ((st = lilac_sampler_new(&r->gen.sampling, lilac_model_hparams(s->m)->n_vocab, &sl->smp, err)) ||
        (st = tok_stream_new(s->tk, false, &sl->ts, err)) ||
        (st = lilac_stop_new((const char *const *)r->stop, r->gen.n_stop, &sl->stop, err))) {
        slot_release_tools(sl);
        return st;
    }
    sl->req = r;
    sl->prefill_at = cached;
    sl->decoding = false;
    sl->n_gen = 0;
    pthread_mutex_lock(&r->mu);
    r->state = SCHED_RUNNING;
    r->n_cached = cached;
    r->t_start = sched_now();
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return LILAC_OK;
}

/* End the slot's request: release the text still held back (unless a stop
 * string ended it), mark it done, keep the sequence for reuse. */
static void slot_finish(sched *s, slot *sl, lilac_finish finish, lilac_status status, const char *msg)
{
    sched_req *r = sl->req;
    if (finish != LILAC_FINISH_CANCELLED && status == LILAC_OK && sl->ts) {
        size_t n_tail, n_emit;
        const char *tail = tok_stream_flush(sl->ts, &n_tail), *emit;
        bool hit = lilac_stop_feed(sl->stop, tail, n_tail, &emit, &n_emit);
        pthread_mutex_lock(&r->mu);
        text_append(r, emit, n_emit);
        if (!hit) {
            lilac_stop_flush(sl->stop, &emit, &n_emit);
            text_append(r, emit, n_emit);
        }
        pthread_mutex_unlock(&r->mu);
    }
    slot_release_tools(sl);
    sl->req = NULL;
    if (status != LILAC_OK) { /* the state may be half-updated: start afresh next time */
        lilac_seq_reset(sl->seq);
        sl->n_toks = 0;
    }
    pthread_mutex_lock(&s->mu);
    s->running--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    req_finish(r, finish, status, msg);
}

/* The reported alternatives a token of the slot's request. */
static int slot_n_top(const slot *sl)
{
    const int n = sl->req->gen.n_logprobs;
    return n < 0 ? 0 : n > 20 ? 20 : n;
}

/* The candidates the slot's sampler needs (its batch item's top_k; 0: the logits). */
static int slot_top_k(const slot *sl) { return lilac_sampler_top_k(sl->smp, slot_n_top(sl)); }

/* A token to sample for the slot from its batch item k's candidates (the backend's reduction, when the
 * sampler needs no more: lilac_sampler_top_k) or logits: record it, stream its text, decide whether to go on. */
static void slot_token(sched *s, slot *sl, int k)
{
    sched_req *r = sl->req;
    const sched_gen *g = &r->gen;
    sched_tok tk = {0};
    const int n_top = slot_n_top(sl);
    const lilac_logits_top *top = lilac_batch_top(s->batch, k);
    tk.token = top ? lilac_sampler_sample_top(sl->smp, top, &tk.logprob, n_top ? tk.top : NULL, n_top)
                   : lilac_sampler_sample(sl->smp, lilac_batch_logits(s->batch, k), &tk.logprob,
                                          n_top ? tk.top : NULL, n_top);
    tk.n_top = n_top;
    lilac_sampler_accept(sl->smp, tk.token);
    sl->n_gen++;
    pthread_mutex_lock(&s->mu);
    s->st.generated_tokens++; /* before the submitter can see the request done */
    pthread_mutex_unlock(&s->mu);
    lilac_error err;
    const char *piece = "", *emit = "";
    size_t n_piece = 0, n_emit = 0;
    bool eog = !g->ignore_eos && lilac_token_is_eog(s->tokenizer, tk.token);
    if (!eog && tk.token < tok_n_vocab(s->tk) && tok_stream_feed(sl->ts, tk.token, &piece, &n_piece, &err)) {
        slot_finish(s, sl, LILAC_FINISH_STOP, err.status, err.msg);
        return;
    }
    bool stopped = !eog && lilac_stop_feed(sl->stop, piece, n_piece, &emit, &n_emit);
    pthread_mutex_lock(&r->mu);
    if (r->n_toks == r->toks_cap) {
        int cap = r->toks_cap ? 2 * r->toks_cap : 64;
        sched_tok *t = realloc(r->toks, (size_t)cap * sizeof *t);
        if (t)
            r->toks = t, r->toks_cap = cap;
    }
    tk.off = r->text_len;
    tk.len = n_emit;
    bool ok = r->n_toks < r->toks_cap && text_append(r, emit, n_emit);
    if (ok)
        r->toks[r->n_toks++] = tk;
    if (r->n_toks == 1)
        r->t_first = sched_now();
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (!ok)
        slot_finish(s, sl, LILAC_FINISH_STOP, LILAC_E_NOMEM, "out of memory for the generated text");
    else if (eog || stopped)
        slot_finish(s, sl, LILAC_FINISH_STOP, LILAC_OK, NULL);
    else if (g->max_tokens > 0 && sl->n_gen >= g->max_tokens)
        slot_finish(s, sl, LILAC_FINISH_LENGTH, LILAC_OK, NULL);
    else if (lilac_seq_pos(sl->seq) >= s->p.n_ctx)
        slot_finish(s, sl, LILAC_FINISH_CONTEXT, LILAC_OK, NULL);
    else
        sl->pending = tk.token, sl->decoding = true;
}

/* ---- the stepping thread ---- */

/* Move queued requests into idle slots. First the queue is swept: while
 * stopping every request goes; otherwise those cancelled, and those that
 * waited too long (refused). Called with s->mu held. */
static void admit_locked(sched *s)
{
    double now = sched_now();
    s->q_tail = NULL;
    for (sched_req **pp = &s->q_head; *pp;) {
        sched_req *r = *pp;
        bool expired = s->p.queue_timeout_s > 0 && now - r->t_submit > s->p.queue_timeout_s;
        if (!s->stopping && !expired && !atomic_load(&r->cancelled)) {
            s->q_tail = r;
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        s->q_len--;
        if (s->stopping) {
            req_finish(r, LILAC_FINISH_CANCELLED, LILAC_E_RANGE, "the server is shutting down");
            continue;
        }
        pthread_mutex_lock(&r->mu);
        r->timed_out = expired;
        pthread_mutex_unlock(&r->mu);
        req_finish(r, LILAC_FINISH_CANCELLED, expired ? LILAC_E_RANGE : LILAC_OK,
                   expired ? "the request waited too long in the queue" : NULL);
    }
    while (s->q_head && s->running < s->p.n_parallel) {
        sched_req *r = s->q_head;
        s->q_head = r->next;
        if (!s->q_head)
            s->q_tail = NULL;
        s->q_len--;
        lilac_error err;
        s->running++; /* the slot is taken from here on */
        pthread_mutex_unlock(&s->mu); /* restoring a snapshot takes a while */
        lilac_status st = slot_start(s, r, &err);
        pthread_mutex_lock(&s->mu);
        if (st != LILAC_OK) {
            s->running--;
            req_finish(r, LILAC_FINISH_STOP, st, err.msg);
            continue;
        }
        s->st.cached_tokens += (uint64_t)r->n_cached;
        s->st.prompt_tokens += (uint64_t)r->gen.n_prompt;
    }
}

/* Prompt tokens a step takes while no sequence decodes: on the GPU the prefill's chunk (the weights are read
 * once a chunk: pp4096 12,014 tok/s in one 4096-token chunk, 11,201 in 2048-token ones, far less in the
 * LILAC_UBATCH pieces this took before, H200), else LILAC_UBATCH (the CPU's internal step). */
static int prompt_budget(const sched *s)
{
    if (s->prompt_step)
        return s->prompt_step;
    const int r = s->m->cuda ? lilac_cuda_model_prompt_rows(s->m->cuda) : 0;
    return r > LILAC_UBATCH ? r : LILAC_UBATCH;
}

static void step(sched *s)
{
    int n = 0, decoders = 0;
    for (int i = 0; i < s->p.n_parallel; i++)
        decoders += s->slots[i].req && s->slots[i].decoding;
    /* prompts fill what decode tokens leave of a step; while others
     * stream, a chunk at a time */
    int budget = decoders ? s->p.chunk : prompt_budget(s);
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req)
            continue;
        if (atomic_load(&sl->req->cancelled)) {
            slot_finish(s, sl, LILAC_FINISH_CANCELLED, LILAC_OK, NULL);
            continue;
        }
        if (sl->decoding) {
            s->items[n] = (lilac_batch_item){sl->seq, &sl->pending, 1, true, slot_top_k(sl)};
        } else {
            int left = sl->req->gen.n_prompt - sl->prefill_at;
            int take = left < budget ? left : budget;
            if (take <= 0)
                continue;
            budget -= take;
            s->items[n] = (lilac_batch_item){sl->seq, sl->req->prompt + sl->prefill_at, take, take == left,
                                             take == left ? slot_top_k(sl) : 0};
        }
        s->item_slot[n++] = i;
    }
    if (!n)
        return;
    lilac_error err;
    lilac_status st = lilac_batch_eval(s->batch, s->items, n, &err);
    for (int k = 0; k < n; k++) {
        slot *sl = &s->slots[s->item_slot[k]];
        if (st != LILAC_OK) {
            slot_finish(s, sl, LILAC_FINISH_STOP, st, err.msg);
            continue;
        }
        const lilac_batch_item *it = &s->items[k];
        memcpy(sl->toks + sl->n_toks, it->tokens, (size_t)it->n * sizeof(int32_t));
        sl->n_toks += it->n;
        if (!sl->decoding) {
            sl->prefill_at += it->n;
            if (!it->want_logits)
                continue;
            snap_take(s, sl);
        }
        slot_token(s, sl, k);
    }
    pthread_mutex_lock(&s->mu);
    s->st.steps++;
    s->st.cache_bytes = s->snap_bytes;
    s->st.cache_entries = (size_t)s->n_snaps;
    pthread_mutex_unlock(&s->mu);
}

static void *sched_main(void *arg)
{
    sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        admit_locked(s);
        if (s->stopping && s->running == 0)
            break;
        if (s->running == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000L; /* wake now and then for queue timeouts */
            if (ts.tv_nsec >= 1000000000L)
                ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        if (s->stopping)
            for (int i = 0; i < s->p.n_parallel; i++)
                if (s->slots[i].req)
                    sched_req_cancel(s->slots[i].req);
        step(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- public ---- */

lilac_status sched_new(lilac_model *m, lilac_tokenizer *t, const sched_params *p, sched **out, lilac_error *err)
{
    *out = NULL;
    if (p->n_parallel < 1 || p->n_parallel > LILAC_UBATCH)
        return lilac_fail(err, LILAC_E_ARG, "parallel sequences must be 1 to %d, not %d", LILAC_UBATCH, p->n_parallel);
    if (p->n_ctx < 2)
        return lilac_fail(err, LILAC_E_ARG, "a context of %d tokens is too small", p->n_ctx);
    if (p->queue_max < 0)
        return lilac_fail(err, LILAC_E_ARG, "queue length %d is negative", p->queue_max);
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    s->m = m;
    s->tokenizer = t;
    s->tk = lilac_tokenizer_tok(t);
    s->p = *p;
    if (s->p.chunk < 1 || s->p.chunk > LILAC_UBATCH)
        s->p.chunk = 64;
    s->prompt_step = lilac_env_int("LILAC_SCHED_PROMPT_STEP", 0, 0, 1 << 20);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->slots = calloc((size_t)p->n_parallel, sizeof *s->slots);
    s->items = calloc((size_t)p->n_parallel, sizeof *s->items);
    s->item_slot = calloc((size_t)p->n_parallel, sizeof(int));
    lilac_status st = LILAC_OK;
    if (!s->slots || !s->items || !s->item_slot)
        st = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    if (!st)
        st = lilac_batch_new(m, p->n_parallel, p->n_ctx, &s->batch, err);
    for (int i = 0; !st && i < p->n_parallel; i++) {
        st = lilac_seq_new(m, p->n_ctx, &s->slots[i].seq, err);
        if (!st && !(s->slots[i].toks = malloc((size_t)p->n_ctx * sizeof(int32_t))))
            st = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    if (!st) {
        if (pthread_create(&s->thread, NULL, sched_main, s) != 0)
            st = lilac_fail(err, LILAC_E_INTERNAL, "cannot start the scheduler thread");
        else
            s->thread_started = true;
    }
    if (st) {
        sched_free(s);
        return st;
    }
    *out = s;
    return LILAC_OK;
}

void sched_free(sched *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; s->slots && i < s->p.n_parallel; i++) {
        lilac_seq_free(s->slots[i].seq);
        free(s->slots[i].toks);
        slot_release_tools(&s->slots[i]);
    }
    while (s->snaps) {
        snap *n = s->snaps->next;
        snap_free(s->snaps);
        s->snaps = n;
    }
    lilac_batch_free(s->batch);
    free(s->slots);
    free(s->items);
    free(s->item_slot);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static lilac_status check_gen(const sched *s, const sched_gen *g, lilac_error *err)
{
    if (g->n_prompt < 1 || !g->prompt)
        return lilac_fail(err, LILAC_E_ARG, "the prompt is empty");
    if (g->n_prompt >= s->p.n_ctx)
        return lilac_fail(err, LILAC_E_ARG,
                          "the prompt has %d tokens; the context holds %d (at least one must be left to generate)",
                          g->n_prompt, s->p.n_ctx);
    int V = lilac_model_hparams(s->m)->n_vocab;
    for (int i = 0; i < g->n_prompt; i++)
        if (g->prompt[i] < 0 || g->prompt[i] >= V)
            return lilac_fail(err, LILAC_E_ARG, "prompt token %d at index %d is outside the vocabulary", g->prompt[i],
                              i);
    if (g->n_stop < 0 || (g->n_stop > 0 && !g->stop))
        return lilac_fail(err, LILAC_E_ARG, "bad stop strings");
    return LILAC_OK;
}

lilac_status sched_submit(sched *s, const sched_gen *g, sched_req **out, lilac_error *err)
{
    *out = NULL;
    lilac_status st = check_gen(s, g, err);
    if (st)
        return st;
    sched_req *r = calloc(1, sizeof *r);
    if (!r)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->gen = *g;
    r->prompt = malloc((size_t)g->n_prompt * sizeof(int32_t));
    r->stop = g->n_stop ? calloc((size_t)g->n_stop, sizeof(char *)) : NULL;
    bool ok = r->prompt && (!g->n_stop || r->stop);
    for (int i = 0; ok && i < g->n_stop; i++)
        ok = (r->stop[i] = strdup(g->stop[i])) != NULL;
    if (!ok) {
        r->gen.n_stop = r->stop ? g->n_stop : 0;
        req_free(r);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    memcpy(r->prompt, g->prompt, (size_t)g->n_prompt * sizeof(int32_t));
    r->gen.prompt = r->prompt;
    r->gen.stop = (const char *const *)r->stop;
    r->n_prompt = g->n_prompt;
    r->refs = 2;
    r->state = SCHED_QUEUED;
    r->t_submit = sched_now();
    pthread_mutex_lock(&s->mu);
    /* a request may wait when a slot is free or the queue has room */
    int waiting_room = s->p.queue_max + (s->p.n_parallel - s->running);
    if (s->draining || s->stopping || s->q_len >= waiting_room) {
        bool draining = s->draining || s->stopping;
        pthread_mutex_unlock(&s->mu);
        req_free(r);
        return draining ? lilac_fail(err, LILAC_E_RANGE, "the server is shutting down")
                        : lilac_fail(err, LILAC_E_RANGE, "the queue is full (%d waiting, %d running)", s->q_len,
                                     s->running);
    }
    if (s->q_tail)
        s->q_tail->next = r;
    else
        s->q_head = r;
    s->q_tail = r;
    s->q_len++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return LILAC_OK;
}

int sched_drain(sched *s, double grace_s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    double end = sched_now() + grace_s;
    while ((s->q_len > 0 || s->running > 0) && sched_now() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    int left = s->q_len + s->running;
    pthread_mutex_unlock(&s->mu);
    return left;
}

void sched_get_stats(sched *s, sched_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->queued = s->q_len;
    st->running = s->running;
    st->n_parallel = s->p.n_parallel;
    pthread_mutex_unlock(&s->mu);
}
