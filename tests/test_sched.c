/* sched: requests through the queue and the slots give what they give
 * alone; a full queue refuses at once; cancelled, timed-out and drained
 * requests end; a prompt that begins with an earlier one reuses its state. */
#include <time.h>

#include "engine/sched.h"
#include "models.h"

/* tokens each request of part 1 generates: enough that none ends before all are submitted */
#define N1 120

static int32_t *make_prompt(int n, unsigned seed)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)(10 + (seed >> 8) % 1000u);
    }
    return t;
}

typedef struct {
    int32_t toks[256];
    int n;
} cap;

static bool on_tok(void *user, const lilac_gen_event *ev)
{
    cap *c = user;
    if (ev->token >= 0 && c->n < 256)
        c->toks[c->n++] = ev->token;
    return true;
}

static int solo_tokens(lilac_model *m, lilac_tokenizer *tk, const int32_t *p, int n, int max, cap *c)
{
    lilac_seq *s;
    lilac_sampler *smp;
    lilac_error err;
    lilac_sampler_params sp = lilac_sampler_default_params();
    sp.temperature = 0;
    c->n = 0;
    if (lilac_seq_new(m, 256, &s, &err) || lilac_sampler_new(&sp, lilac_model_hparams(m)->n_vocab, &smp, &err))
        return -1;
    lilac_gen_params gp = {.max_tokens = max, .ignore_eos = true};
    lilac_gen_result res;
    lilac_status st = lilac_generate(s, tk, smp, p, n, &gp, on_tok, c, &res, &err);
    lilac_seq_free(s);
    lilac_sampler_free(smp);
    return st == LILAC_OK ? c->n : -1;
}

static void wait_done(sched_req *r)
{
    pthread_mutex_lock(&r->mu);
    while (r->state != SCHED_DONE)
        sched_req_wait_locked(r, r->text_len, r->n_toks, r->state, 1000);
    pthread_mutex_unlock(&r->mu);
}

static sched_gen greedy(const int32_t *p, int n, int max)
{
    sched_gen g = {.prompt = p, .n_prompt = n, .max_tokens = max, .ignore_eos = true};
    g.sampling = lilac_sampler_default_params();
    g.sampling.temperature = 0;
    return g;
}

static bool same_tokens(const sched_req *r, const cap *c)
{
    if (r->n_toks != c->n)
        return false;
    for (int i = 0; i < c->n; i++)
        if (r->toks[i].token != c->toks[i])
            return false;
    return true;
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    char path[8192];
    if (snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/model-Q4_K_M.gguf", fx) >= (int)sizeof path)
        SKIP("fixtures path too long");
    lilac_model *m = tm_open(path, 2);
    CHECK(m != NULL);
    if (!m)
        TEST_END();
    lilac_tokenizer *tk;
    lilac_error err;
    CHECK(lilac_model_tokenizer(m, &tk, &err) == LILAC_OK);

    /* 1. three at once, five more than slots + queue refused (120 tokens each,
     * so that none is done before the sixth arrives, however fast the machine) */
    sched_params sp = {.n_parallel = 3, .n_ctx = 256, .queue_max = 2, .cache_bytes = 64 << 20, .chunk = 16};
    sched *s;
    CHECK(sched_new(m, tk, &sp, &s, &err) == LILAC_OK);
    int lens[5] = {5, 40, 90, 17, 3};
    int32_t *prompts[5];
    cap want[5];
    sched_req *r[6];
    for (int i = 0; i < 5; i++) {
        prompts[i] = make_prompt(lens[i], 11u * (unsigned)i + 1);
        CHECK(solo_tokens(m, tk, prompts[i], lens[i], N1, &want[i]) == N1);
    }
    for (int i = 0; i < 5; i++) {
        sched_gen g = greedy(prompts[i], lens[i], N1);
        CHECKF(sched_submit(s, &g, &r[i], &err) == LILAC_OK, "submit %d: %s", i, err.msg);
    }
    sched_gen g = greedy(prompts[0], lens[0], N1);
    lilac_status st = sched_submit(s, &g, &r[5], &err);
    CHECKF(st == LILAC_E_RANGE && r[5] == NULL && strstr(err.msg, "queue is full"), "sixth: %d %s", st, err.msg);
    for (int i = 0; i < 5; i++) {
        wait_done(r[i]);
        CHECKF(r[i]->status == LILAC_OK && r[i]->finish == LILAC_FINISH_LENGTH, "request %d: %s", i, r[i]->error);
        CHECKF(same_tokens(r[i], &want[i]), "request %d: tokens differ from the same prompt alone", i);
        CHECK(r[i]->t_first >= r[i]->t_start && r[i]->t_start >= r[i]->t_submit && r[i]->t_done >= r[i]->t_first);
        sched_req_release(r[i]);
    }

    /* 2. prefix reuse: the 90-token prompt again with more after it */
    int32_t *longer = make_prompt(120, 99);
    memcpy(longer, prompts[2], 90 * sizeof(int32_t));
    cap wl;
    CHECK(solo_tokens(m, tk, longer, 120, 8, &wl) == 8);
    g = greedy(longer, 120, 8);
    CHECK(sched_submit(s, &g, &r[0], &err) == LILAC_OK);
    wait_done(r[0]);
    CHECKF(r[0]->n_cached == 90, "cached %d of the 90-token prefix", r[0]->n_cached);
    CHECKF(same_tokens(r[0], &wl), "tokens after prefix reuse differ from alone");
    sched_req_release(r[0]);
    sched_stats stt;
    sched_get_stats(s, &stt);
    CHECKF(stt.cached_tokens >= 90 && stt.cache_entries >= 1 && stt.generated_tokens == 5 * N1 + 8,
           "stats: cached %llu, entries %zu, generated %llu", (unsigned long long)stt.cached_tokens, stt.cache_entries,
           (unsigned long long)stt.generated_tokens);

    /* 3. cancel a long one: it ends, cancelled, long before its length */
    g = greedy(prompts[1], lens[1], 200);
    CHECK(sched_submit(s, &g, &r[0], &err) == LILAC_OK);
    sched_req_cancel(r[0]);
    wait_done(r[0]);
    CHECK(r[0]->finish == LILAC_FINISH_CANCELLED && r[0]->n_toks < 200);
    sched_req_release(r[0]);

    /* 4. a prompt over the context, and a stop string */
    int32_t *huge = make_prompt(300, 5);
    g = greedy(huge, 300, 4);
    CHECK(sched_submit(s, &g, &r[0], &err) == LILAC_E_ARG && strstr(err.msg, "context"));
    sched_free(s);

    /* 5. one slot, no queue wait beyond 50 ms: the second request times out
     * (the first is long enough to hold the slot well past that on a fast,
     * idle machine: the tiny model makes thousands of tokens a second) */
    sp = (sched_params){.n_parallel = 1, .n_ctx = 2048, .queue_max = 4, .queue_timeout_s = 0.05};
    CHECK(sched_new(m, tk, &sp, &s, &err) == LILAC_OK);
    g = greedy(prompts[2], lens[2], 1500);
    CHECK(sched_submit(s, &g, &r[0], &err) == LILAC_OK);
    nanosleep(&(struct timespec){0, 20000000L}, NULL);
    g = greedy(prompts[0], lens[0], 4);
    CHECK(sched_submit(s, &g, &r[1], &err) == LILAC_OK);
    wait_done(r[1]);
    CHECKF(r[1]->timed_out && r[1]->status == LILAC_E_RANGE, "queued request: timed_out %d status %d", r[1]->timed_out,
           r[1]->status);
    /* the long one has done its part (it held the slot); cancel it so the
     * drain below waits on a short request, not on 1500 tokens under ASan */
    sched_req_cancel(r[0]);
    wait_done(r[0]);
    CHECK(r[0]->finish == LILAC_FINISH_CANCELLED);
    sched_req_release(r[0]);
    /* 6. drain: no new requests, the running one finishes */
    g = greedy(prompts[2], lens[2], 48);
    CHECK(sched_submit(s, &g, &r[0], &err) == LILAC_OK);
    CHECK(sched_drain(s, 600) == 0);
    wait_done(r[0]);
    CHECKF(r[0]->status == LILAC_OK && r[0]->n_toks == 48, "drained request: status %d, %d tokens", r[0]->status,
           r[0]->n_toks);
    g = greedy(prompts[0], lens[0], 4);
    CHECK(sched_submit(s, &g, &r[2], &err) == LILAC_E_RANGE && strstr(err.msg, "shutting down"));
    sched_req_release(r[0]);
    sched_req_release(r[1]);
    sched_free(s);

    for (int i = 0; i < 5; i++)
        free(prompts[i]);
    free(longer);
    free(huge);
    lilac_model_free(m);
    TEST_END();
}
