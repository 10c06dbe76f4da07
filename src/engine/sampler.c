/* sampler: choosing the next token from the logits — penalties,
 * temperature, top-k / top-p / min-p truncation, a seeded draw — and the
 * log-probabilities a caller may report. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lilac.h"
#include "util/err.h"

struct lilac_sampler {
    lilac_sampler_params p;
    int n_vocab;
    uint64_t rng[4];
    int32_t *hist; /* ring of the last `cap` accepted tokens */
    int hist_cap, hist_len, hist_head;
    int *count;    /* scratch: occurrences per token in the window */
    struct cand { float logit; int32_t id; } *cand;
};

int lilac_argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

lilac_sampler_params lilac_sampler_default_params(void)
{
    lilac_sampler_params p = {
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
        .penalty_last_n = 64, .seed = 0,
    };
    return p;
}

/* xoshiro256**, seeded through splitmix64: fast, and the same stream for a
 * seed on every platform. */
static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return r;
}

/* uniform in [0, 1) with 53 random bits */
static double next_uniform(uint64_t s[4]) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

lilac_status lilac_sampler_new(const lilac_sampler_params *p, int n_vocab, lilac_sampler **out, lilac_error *err)
{
    *out = NULL;
    if (n_vocab < 1)
        return lilac_fail(err, LILAC_E_ARG, "sampler: vocabulary of %d tokens", n_vocab);
    lilac_sampler_params q = p ? *p : lilac_sampler_default_params();
    if (!(q.temperature == q.temperature) || q.top_p < 0 || q.min_p > 1 || !(q.repeat_penalty > 0))
        return lilac_fail(err, LILAC_E_ARG,
                          "sampler: invalid settings (temperature %g, top_p %g, min_p %g, repeat_penalty %g)",
                          q.temperature, q.top_p, q.min_p, q.repeat_penalty);
    lilac_sampler *s = calloc(1, sizeof *s);
    int cap = q.penalty_last_n < 0 ? 1 << 20 : q.penalty_last_n;
    if (s) {
        s->hist = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *s->hist);
        s->count = calloc((size_t)n_vocab, sizeof *s->count);
        s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    }
    if (!s || !s->hist || !s->count || !s->cand) {
        lilac_sampler_free(s);
        return lilac_fail(err, LILAC_E_NOMEM, "sampler: out of memory");
    }
    s->p = q;
    s->n_vocab = n_vocab;
    s->hist_cap = cap;
    uint64_t x = q.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix(&x);
    *out = s;
    return LILAC_OK;
}

void lilac_sampler_free(lilac_sampler *s)
{
    if (!s)
        return;
    free(s->hist);
    free(s->count);
    free(s->cand);
    free(s);
}

void lilac_sampler_reset(lilac_sampler *s) { s->hist_len = s->hist_head = 0; }

void lilac_sampler_accept(lilac_sampler *s, int32_t token)
{
    if (s->hist_cap == 0 || token < 0 || token >= s->n_vocab)
        return;
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % s->hist_cap;
    if (s->hist_len < s->hist_cap)
        s->hist_len++;
}

void lilac_sampler_apply_penalties(const lilac_sampler *s, float *logits)
{
    const lilac_sampler_params *p = &s->p;
    if (s->hist_len == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    int start = (s->hist_head - s->hist_len + s->hist_cap) % s->hist_cap;
    for (int i = 0; i < s->hist_len; i++)
        s->count[s->hist[(start + i) % s->hist_cap]]++;
    for (int i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[(start + i) % s->hist_cap];
        int c = s->count[t];
        if (c == 0)
            continue; /* this token is done */
        float *l = &logits[t];
        if (p->repeat_penalty != 1.0f)
            *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= (float)c * p->frequency_penalty + p->presence_penalty;
        s->count[t] = 0;
    }
}

static int cmp_cand_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id; /* ties: lower id first, for reproducibility */
}

/* The n_top most likely tokens by log-softmax, for reporting. */
static void top_logprobs(const float *logits, int n, double lse, lilac_token_logprob *top, int n_top)
{
    for (int k = 0; k < n_top; k++)
        top[k] = (lilac_token_logprob){-1, -INFINITY};
    for (int i = 0; i < n; i++) {
        float lp = (float)(logits[i] - lse);
        if (n_top == 0 || lp <= top[n_top - 1].logprob)
            continue;
        int k = n_top - 1;
        while (k > 0 && top[k - 1].logprob < lp) {
            top[k] = top[k - 1];
            k--;
        }
        top[k] = (lilac_token_logprob){i, lp};
    }
}

static double log_sum_exp(const float *v, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = v[i] > mx ? v[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)v[i] - mx);
    return mx + log(sum);
}

int32_t lilac_sampler_sample(lilac_sampler *s, float *logits, float *chosen_logprob, lilac_token_logprob *top,
                             int n_top)
{
    const lilac_sampler_params *p = &s->p;
    int n = s->n_vocab;
    lilac_sampler_apply_penalties(s, logits);
    double lse = (chosen_logprob || (top && n_top > 0)) ? log_sum_exp(logits, n) : 0;
    if (top && n_top > 0)
        top_logprobs(logits, n, lse, top, n_top);

    int32_t chosen = 0;
    if (p->temperature <= 0) {
        chosen = lilac_argmax(logits, n);
        goto done;
    }

    /* candidates: every token, then truncated; logits scaled by 1/T */
    struct cand *c = s->cand;
    int nc = 0;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    float inv_t = 1.0f / p->temperature;
    bool sorted = false;
    for (int i = 0; i < n; i++) {
        float l = (logits[i] - mx) * inv_t;
        /* Only for sorting's sake: with top-p alone, tokens e^-40 below the
         * best cannot matter to any top_p short of 1 - 1e-17. */
        if (p->top_k <= 0 && p->top_p < 1.0f && l < -40.0f)
            continue;
        c[nc++] = (struct cand){l, i};
    }
    if (p->top_k > 0 && p->top_k < nc) {
        qsort(c, (size_t)nc, sizeof *c, cmp_cand_desc);
        sorted = true;
        nc = p->top_k;
    }
    if (p->top_p < 1.0f) {
        if (!sorted)
            qsort(c, (size_t)nc, sizeof *c, cmp_cand_desc);
        sorted = true;
        double z = 0, acc = 0;
        for (int i = 0; i < nc; i++)
            z += exp(c[i].logit);
        int keep = nc;
        for (int i = 0; i < nc; i++) {
            acc += exp(c[i].logit) / z;
            if (acc >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        nc = keep;
    }
    if (p->min_p > 0) {
        /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
        float best = -INFINITY;
        for (int i = 0; i < nc; i++)
            best = c[i].logit > best ? c[i].logit : best;
        float cut = best + logf(p->min_p);
        int k = 0;
        for (int i = 0; i < nc; i++)
            if (c[i].logit >= cut)
                c[k++] = c[i];
        nc = k;
    }
    double z = 0;
    for (int i = 0; i < nc; i++)
        z += exp(c[i].logit);
    double u = next_uniform(s->rng) * z, acc = 0;
    chosen = c[nc - 1].id;
    for (int i = 0; i < nc; i++) {
        acc += exp(c[i].logit);
        if (u < acc) {
            chosen = c[i].id;
            break;
        }
    }
done:
    if (chosen_logprob)
        *chosen_logprob = (float)(logits[chosen] - lse);
    return chosen;
}
