/* sampler: choosing the next token from the logits — penalties,
 * temperature, top-k / top-p / min-p truncation, a seeded draw — and the
 * log-probabilities a caller may report. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
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

/* The first index of the largest value (NaNs never win; x[0] if it is one).
 * Eight running bests, then the largest of them at the lowest index: the
 * same index as one scan, without its dependent compare a value. */
int lilac_argmax(const float *x, int n)
{
    if (n < 1)
        return 0;
    float bv[8];
    int bi[8];
    for (int j = 0; j < 8; j++)
        bv[j] = x[0], bi[j] = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            const bool up = x[i + j] > bv[j];
            bv[j] = up ? x[i + j] : bv[j];
            bi[j] = up ? i + j : bi[j];
        }
    for (; i < n; i++)
        if (x[i] > bv[0])
            bv[0] = x[i], bi[0] = i;
    int b = 0;
    for (int j = 1; j < 8; j++)
        if (bv[j] > bv[b] || (bv[j] == bv[b] && bi[j] < bi[b]))
            b = j;
    return bi[b];
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

/* The largest of v[0..n) (-inf if none), eight running maxima: one pass at the
 * memory's speed rather than one dependent compare a value. */
static float vmax(const float *v, int n)
{
    float m[8]; /* NaNs never win a compare: skipped, as before */
    for (int j = 0; j < 8; j++)
        m[j] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = v[i + j] > m[j] ? v[i + j] : m[j];
    for (; i < n; i++)
        m[0] = v[i] > m[0] ? v[i] : m[0];
    float r = m[0];
    for (int j = 1; j < 8; j++)
        r = m[j] > r ? m[j] : r;
    return r;
}

/* e^x for -87 <= x <= 0 as a float, within 2 ulp of expf (Cephes' expf:
 * x = n ln2 + r, a degree-7 polynomial in r, 2^n from the exponent bits).
 * No library call and no branch, so a loop of it vectorizes: libm's exp was
 * 5.5 ns a value, 1.4 ms a token over a 248k vocabulary. */
static inline float exp_small(float x)
{
    const float fx = x * 1.44269504088896341f;
    const float n = (fx + 12582912.0f) - 12582912.0f; /* round to nearest: |fx| < 2^22 */
    const float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    union { /* memcpy, or the shift inside the initializer: gcc 12 saw control flow and left the loop scalar */
        uint32_t u;
        float f;
    } sc = {.u = bits};
    return p * sc.f;
}

/* t[i] = e^(v[i] - mx), i < m, v[i] - mx below -87 taken as -87 (e^-87 ~
 * 1.6e-38: nothing next to the largest term's 1; a NaN stays NaN). Two loops,
 * each of which gcc vectorizes (the clamp inside exp_small's loop it did not). */
static void exp_block(const float *v, float mx, float *t, int m)
{
    for (int i = 0; i < m; i++) {
        const float x = v[i] - mx;
        t[i] = x < -87.0f ? -87.0f : x;
    }
    for (int i = 0; i < m; i++)
        t[i] = exp_small(t[i]);
}

/* log sum_i e^v[i] given mx = vmax(v, n): the terms a block at a time into a
 * float buffer (a loop the compiler vectorizes), added in double (eight
 * running sums). The chosen token's log-probability needs it at every step. */
static double log_sum_exp(const float *v, int n, float mx)
{
    if (!(mx > -INFINITY) || mx == INFINITY) /* all -inf, or +inf somewhere: no finite sum to scale */
        return mx;
    enum { B = 512 };
    float t[B];
    double a[8] = {0};
    for (int i0 = 0; i0 < n; i0 += B) {
        const int m = n - i0 < B ? n - i0 : B;
        exp_block(v + i0, mx, t, m);
        int i = 0;
        for (; i + 8 <= m; i += 8)
            for (int j = 0; j < 8; j++)
                a[j] += t[i + j];
        for (; i < m; i++)
            a[0] += t[i];
    }
    double sum = 0;
    for (int j = 0; j < 8; j++)
        sum += a[j];
    return mx + log(sum);
}

/* Whether candidate a sorts after b in cmp_cand_desc's order. */
static inline bool cand_after(struct cand a, struct cand b)
{
    return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
}

/* The k best of the n tokens' scaled logits (logits[i] - mx) * inv_t in
 * cmp_cand_desc's order, sorted, into c[0..k): the set and order a sort of
 * all n gives, in one pass. c is a heap whose root sorts last among those
 * kept; a token enters only if it sorts before the root (a tie on the logit
 * never does: its id is higher). A qsort of all 248k was 30 ms a token. */
static void top_k_cands(const float *logits, int n, float mx, float inv_t, int k, struct cand *c)
{
    int h = 0;
    for (int i = 0; i < n; i++) {
        const struct cand x = {(logits[i] - mx) * inv_t, i};
        int at;
        if (h < k) { /* sift up */
            at = h++;
            while (at > 0 && cand_after(x, c[(at - 1) / 2])) {
                c[at] = c[(at - 1) / 2];
                at = (at - 1) / 2;
            }
        } else if (cand_after(c[0], x)) { /* replace the root, sift down */
            at = 0;
            for (;;) {
                int ch = 2 * at + 1;
                if (ch >= k)
                    break;
                if (ch + 1 < k && cand_after(c[ch + 1], c[ch]))
                    ch++;
                if (!cand_after(c[ch], x))
                    break;
                c[at] = c[ch];
                at = ch;
            }
        } else {
            continue;
        }
        c[at] = x;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand_desc);
}

/* The truncations after top_k (top_p, min_p) and the seeded draw over the
 * candidates c[0..nc) (scaled logits; sorted best first when `sorted`). */
static int32_t draw(lilac_sampler *s, struct cand *c, int nc, bool sorted)
{
    const lilac_sampler_params *p = &s->p;
    if (p->top_p < 1.0f) {
        if (!sorted)
            qsort(c, (size_t)nc, sizeof *c, cmp_cand_desc);
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
    int32_t chosen = c[nc - 1].id;
    for (int i = 0; i < nc; i++) {
        acc += exp(c[i].logit);
        if (u < acc) {
            chosen = c[i].id;
            break;
        }
    }
    return chosen;
}

int32_t lilac_sampler_sample(lilac_sampler *s, float *logits, float *chosen_logprob, lilac_token_logprob *top,
                             int n_top)
{
    const lilac_sampler_params *p = &s->p;
    int n = s->n_vocab;
    lilac_sampler_apply_penalties(s, logits);
    const bool want_lse = chosen_logprob || (top && n_top > 0);
    /* one pass for the log-sum-exp and the scaled candidates alike (greedy alone needs neither) */
    const float mx = want_lse || p->temperature > 0 ? vmax(logits, n) : 0.0f;
    double lse = want_lse ? log_sum_exp(logits, n, mx) : 0;
    if (top && n_top > 0)
        top_logprobs(logits, n, lse, top, n_top);

    int32_t chosen = 0;
    if (p->temperature <= 0) {
        chosen = lilac_argmax(logits, n);
    } else {
        /* candidates: every token, then truncated; logits scaled by 1/T */
        struct cand *c = s->cand;
        int nc = 0;
        const float inv_t = 1.0f / p->temperature;
        bool sorted = false;
        if (p->top_k > 0 && p->top_k < n) { /* the top k of a sort of all, without the sort */
            top_k_cands(logits, n, mx, inv_t, p->top_k, c);
            nc = p->top_k;
            sorted = true;
        } else {
            for (int i = 0; i < n; i++) {
                float l = (logits[i] - mx) * inv_t;
                /* Only for sorting's sake: with top-p alone, tokens e^-40 below the
                 * best cannot matter to any top_p short of 1 - 1e-17. */
                if (p->top_k <= 0 && p->top_p < 1.0f && l < -40.0f)
                    continue;
                c[nc++] = (struct cand){l, i};
            }
        }
        chosen = draw(s, c, nc, sorted);
    }
    if (chosen_logprob)
        *chosen_logprob = (float)(logits[chosen] - lse);
    return chosen;
}

void lilac_logits_top_of(const float *logits, int n_vocab, int k, lilac_logits_top *t)
{
    k = k < 1 ? 1 : k > LILAC_TOP_MAX ? LILAC_TOP_MAX : k;
    k = k < n_vocab ? k : n_vocab;
    struct cand c[LILAC_TOP_MAX];
    top_k_cands(logits, n_vocab, 0.0f, 1.0f, k, c); /* (l - 0) * 1: the logits themselves */
    t->n = k;
    for (int i = 0; i < k; i++)
        t->id[i] = c[i].id, t->logit[i] = c[i].logit;
    t->lse = log_sum_exp(logits, n_vocab, vmax(logits, n_vocab));
}

int lilac_sampler_top_k(const lilac_sampler *s, int n_top)
{
    const lilac_sampler_params *p = &s->p;
    const int want = n_top > 0 ? n_top : 1;
    if (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)
        return 0; /* penalties change logits the top form does not hold */
    if (p->temperature <= 0)
        return want <= LILAC_TOP_MAX && want <= s->n_vocab ? want : 0;
    if (p->top_k <= 0 || p->top_k >= s->n_vocab || p->top_k > LILAC_TOP_MAX)
        return 0;
    const int k = p->top_k > want ? p->top_k : want;
    return k <= LILAC_TOP_MAX ? k : 0;
}

int32_t lilac_sampler_sample_top(lilac_sampler *s, const lilac_logits_top *t, float *chosen_logprob,
                                 lilac_token_logprob *top, int n_top)
{
    const lilac_sampler_params *p = &s->p;
    if (t->n < 1)
        return 0;
    for (int k = 0; top && k < n_top; k++)
        top[k] = k < t->n ? (lilac_token_logprob){t->id[k], (float)(t->logit[k] - t->lse)}
                          : (lilac_token_logprob){-1, -INFINITY};
    int at = 0; /* the chosen candidate */
    if (p->temperature > 0) {
        struct cand *c = s->cand;
        const int nc = p->top_k < t->n ? p->top_k : t->n;
        const float mx = t->logit[0], inv_t = 1.0f / p->temperature;
        for (int i = 0; i < nc; i++)
            c[i] = (struct cand){(t->logit[i] - mx) * inv_t, t->id[i]};
        /* the scaled values' order (two logits may round to one): as the full path sorts them */
        qsort(c, (size_t)nc, sizeof *c, cmp_cand_desc);
        const int32_t id = draw(s, c, nc, true);
        while (at < t->n - 1 && t->id[at] != id)
            at++;
    }
    if (chosen_logprob)
        *chosen_logprob = (float)(t->logit[at] - t->lse);
    return t->id[at];
}
