/* sched: the request scheduler behind `lilac serve` and `lilac batch`.
 * Requests wait in a bounded FIFO queue in front of n_parallel sequence
 * slots; one thread runs the model in steps, each step feeding every
 * running slot together (lilac_batch_eval: a decode token per generating
 * slot and a chunk of a prompt being prefilled), so weights are read once
 * per step. A request's prompt may start with tokens a slot still holds or
 * a snapshot taken at the end of an earlier prompt (prefix reuse); those
 * are not evaluated again.
 *
 * A request is shared by its submitter and the scheduler (two references):
 * the scheduler appends text and tokens and marks it done; the submitter
 * reads under r->mu, waits with sched_req_wait, cancels with
 * sched_req_cancel, and drops its reference with sched_req_release. */
#ifndef LILAC_ENGINE_SCHED_H
#define LILAC_ENGINE_SCHED_H

#include <pthread.h>
#include <stdatomic.h>

#include "lilac.h"

typedef struct sched sched;

typedef struct sched_params {
    int n_parallel;         /* sequence slots */
    int n_ctx;              /* tokens per slot */
    int queue_max;          /* requests waiting at most (0: none wait) */
    double queue_timeout_s; /* a request waiting longer is refused (<= 0: no limit) */
    size_t cache_bytes;     /* prompt-end snapshots kept at most (0: none) */
    int chunk;              /* prompt tokens per step while others decode */
} sched_params;

/* What to generate (copied at submit). */
typedef struct sched_gen {
    const int32_t *prompt;
    int n_prompt;
    lilac_sampler_params sampling;
    int max_tokens; /* <= 0: until the context is full */
    const char *const *stop;
    int n_stop;
    bool ignore_eos;
    int n_logprobs; /* top alternatives per token, 0..20 */
} sched_gen;

typedef enum sched_state {
    SCHED_QUEUED = 0,
    SCHED_RUNNING = 1,
    SCHED_DONE = 2,
} sched_state;

/* One generated token: its text is text[off, off + len) of the request
 * (empty while a character or a possible stop string is pending). */
typedef struct sched_tok {
    int32_t token;
    float logprob;
    size_t off, len;
    int n_top;
    lilac_token_logprob top[20];
} sched_tok;

typedef struct sched_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    atomic_bool cancelled;
    /* guarded by mu */
    sched_state state;
    char *text; /* the generated text so far, NUL-terminated */
    size_t text_len, text_cap;
    sched_tok *toks;
    int n_toks, toks_cap;
    int n_prompt, n_cached;
    lilac_finish finish;
    lilac_status status;   /* LILAC_OK, or why it failed */
    bool timed_out;        /* refused after waiting too long in the queue */
    char error[512];
    double t_submit, t_start, t_first, t_done; /* seconds, CLOCK_MONOTONIC */
    /* the scheduler's */
    sched_gen gen;
    int32_t *prompt;
    char **stop;
    struct sched_req *next; /* in the queue */
} sched_req;

lilac_status sched_new(lilac_model *m, lilac_tokenizer *t, const sched_params *p, sched **out, lilac_error *err);
/* Stops the thread; requests still queued or running end cancelled. */
void sched_free(sched *s);

/* Queue a request. LILAC_E_RANGE: the queue is full or the scheduler is
 * draining (*out NULL); LILAC_E_ARG: the request cannot run (prompt longer
 * than the context, bad sampling values). On LILAC_OK *out holds the
 * submitter's reference. */
lilac_status sched_submit(sched *s, const sched_gen *g, sched_req **out, lilac_error *err);
void sched_req_cancel(sched_req *r);
void sched_req_release(sched_req *r);
/* Wait until the request has more than n_text bytes or n_toks tokens, is
 * no longer queued when it was, is done, or timeout_ms passed. Call with
 * r->mu held (as pthread_cond_timedwait). */
void sched_req_wait_locked(sched_req *r, size_t n_text, int n_toks, sched_state seen, int timeout_ms);

/* Stop taking requests; wait up to grace_s for those queued and running to
 * finish, then cancel what is left. Returns how many were cancelled. */
int sched_drain(sched *s, double grace_s);

typedef struct sched_stats {
    int queued, running, n_parallel;
    uint64_t prompt_tokens, cached_tokens, generated_tokens, steps;
    size_t cache_bytes, cache_entries;
} sched_stats;
void sched_get_stats(sched *s, sched_stats *st);

double sched_now(void);

#endif
