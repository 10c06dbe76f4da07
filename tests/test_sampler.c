/* The sampler and the stop-string watcher, against independent
 * computations: the distribution of seeded draws, the penalties'
 * amounts, reproducibility, log-probabilities, split stop strings. */
#include <math.h>

#include "lilac.h"
#include "testutil.h"

#define V 64

static void fill_logits(float *l, unsigned seed)
{
    uint64_t x = seed * 2654435761u + 1;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((x >> 40) % 4000) / 1000.0f - 2.0f; /* in [-2, 2) */
    }
}

/* The truncated, renormalized softmax, computed the slow obvious way. */
static void expected_probs(const float *logits, float T, int top_k, float top_p, float min_p, double *p)
{
    int idx[V];
    double q[V], z = 0;
    for (int i = 0; i < V; i++) {
        idx[i] = i;
        q[i] = exp(logits[i] / T);
    }
    for (int i = 0; i < V; i++) /* selection sort by probability, ties to the lower id */
        for (int j = i + 1; j < V; j++)
            if (q[idx[j]] > q[idx[i]] || (q[idx[j]] == q[idx[i]] && idx[j] < idx[i])) {
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
    int keep = top_k > 0 && top_k < V ? top_k : V;
    for (int i = 0; i < keep; i++)
        z += q[idx[i]];
    if (top_p < 1) {
        double acc = 0;
        for (int i = 0; i < keep; i++) {
            acc += q[idx[i]] / z;
            if (acc >= top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double best = q[idx[0]];
    for (int i = 0; i < V; i++)
        p[i] = 0;
    z = 0;
    for (int i = 0; i < keep; i++)
        if (min_p <= 0 || q[idx[i]] >= min_p * best) {
            p[idx[i]] = q[idx[i]];
            z += q[idx[i]];
        }
    for (int i = 0; i < V; i++)
        p[i] /= z;
}

static void check_distribution(float T, int top_k, float top_p, float min_p)
{
    float logits[V], work[V];
    fill_logits(logits, 7);
    double p[V];
    expected_probs(logits, T, top_k, top_p, min_p, p);
    lilac_sampler_params sp = lilac_sampler_default_params();
    sp.temperature = T, sp.top_k = top_k, sp.top_p = top_p, sp.min_p = min_p, sp.seed = 12345;
    lilac_sampler *s;
    lilac_error err;
    CHECK(lilac_sampler_new(&sp, V, &s, &err) == LILAC_OK);
    const int N = 200000;
    long count[V] = {0};
    for (int i = 0; i < N; i++) {
        memcpy(work, logits, sizeof work);
        count[lilac_sampler_sample(s, work, NULL, NULL, 0)]++;
    }
    double chi2 = 0;
    int df = -1, outside = 0;
    for (int i = 0; i < V; i++) {
        if (p[i] == 0) {
            outside += count[i] != 0;
            continue;
        }
        double e = p[i] * N;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        df++;
    }
    /* ~6 standard deviations of a chi-square with df degrees of freedom */
    double bound = df + 6 * sqrt(2.0 * df);
    printf("T=%.2f top_k=%d top_p=%.2f min_p=%.2f: %d tokens kept, chi2 %.1f (df %d, bound %.1f)\n", T, top_k,
           top_p, min_p, df + 1, chi2, df, bound);
    CHECKF(outside == 0, "%d tokens outside the truncated set were drawn", outside);
    CHECKF(df >= 1 || top_k == 1, "the case keeps more than one token");
    CHECKF(chi2 < bound, "chi-square %.1f over %.1f: draws do not follow the truncated softmax", chi2, bound);
    lilac_sampler_free(s);
}

static void check_penalties(void)
{
    lilac_sampler_params sp = lilac_sampler_default_params();
    sp.repeat_penalty = 1.5f, sp.frequency_penalty = 0.5f, sp.presence_penalty = 0.25f, sp.penalty_last_n = 3;
    lilac_sampler *s;
    lilac_error err;
    CHECK(lilac_sampler_new(&sp, V, &s, &err) == LILAC_OK);
    int32_t hist[] = {9, 3, 3, 5}; /* the window of 3 sees 3, 3, 5 */
    for (int i = 0; i < 4; i++)
        lilac_sampler_accept(s, hist[i]);
    float l[V], orig[V];
    fill_logits(orig, 3);
    orig[3] = 2.0f, orig[5] = -1.0f, orig[9] = 1.0f;
    memcpy(l, orig, sizeof l);
    lilac_sampler_apply_penalties(s, l);
    CHECKF(fabsf(l[3] - (2.0f / 1.5f - 2 * 0.5f - 0.25f)) < 1e-6f, "token 3: %f", l[3]);
    CHECKF(fabsf(l[5] - (-1.0f * 1.5f - 0.5f - 0.25f)) < 1e-6f, "token 5: %f", l[5]);
    CHECKF(l[9] == orig[9], "token 9 left the window and keeps its logit");
    int untouched = 0;
    for (int i = 0; i < V; i++)
        untouched += (i == 3 || i == 5 || l[i] == orig[i]);
    CHECKF(untouched == V, "only penalized tokens change");
    lilac_sampler_reset(s);
    memcpy(l, orig, sizeof l);
    lilac_sampler_apply_penalties(s, l);
    CHECK(memcmp(l, orig, sizeof l) == 0);
    lilac_sampler_free(s);
}

static void check_seed_and_greedy(void)
{
    float logits[V], work[V];
    fill_logits(logits, 11);
    lilac_sampler_params sp = lilac_sampler_default_params();
    sp.temperature = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0;
    int32_t a[50], b[50], c[50];
    uint64_t seeds[3] = {42, 42, 43};
    int32_t *outs[3] = {a, b, c};
    for (int r = 0; r < 3; r++) {
        sp.seed = seeds[r];
        lilac_sampler *s;
        lilac_error err;
        CHECK(lilac_sampler_new(&sp, V, &s, &err) == LILAC_OK);
        for (int i = 0; i < 50; i++) {
            memcpy(work, logits, sizeof work);
            outs[r][i] = lilac_sampler_sample(s, work, NULL, NULL, 0);
        }
        lilac_sampler_free(s);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);

    sp.temperature = 0;
    lilac_sampler *s;
    lilac_error err;
    CHECK(lilac_sampler_new(&sp, V, &s, &err) == LILAC_OK);
    int best = 0;
    for (int i = 1; i < V; i++)
        best = logits[i] > logits[best] ? i : best;
    memcpy(work, logits, sizeof work);
    float lp;
    lilac_token_logprob top[5];
    CHECK(lilac_sampler_sample(s, work, &lp, top, 5) == best);
    double z = 0;
    for (int i = 0; i < V; i++)
        z += exp(logits[i]);
    CHECKF(fabs(lp - (logits[best] - log(z))) < 1e-5, "chosen logprob %f", lp);
    CHECK(top[0].token == best && fabsf(top[0].logprob - lp) < 1e-6f);
    for (int k = 1; k < 5; k++)
        CHECK(top[k].logprob <= top[k - 1].logprob && fabs(top[k].logprob - (logits[top[k].token] - log(z))) < 1e-5);
    lilac_sampler_free(s);
}

static void feed_all(lilac_stop *st, const char *const *pieces, int n, char *out, bool *stopped)
{
    size_t o = 0;
    *stopped = false;
    for (int i = 0; i < n && !*stopped; i++) {
        const char *e;
        size_t ne;
        *stopped = lilac_stop_feed(st, pieces[i], strlen(pieces[i]), &e, &ne);
        memcpy(out + o, e, ne);
        o += ne;
    }
    if (!*stopped) {
        const char *e;
        size_t ne;
        lilac_stop_flush(st, &e, &ne);
        memcpy(out + o, e, ne);
        o += ne;
    }
    out[o] = 0;
}

static void check_stops(void)
{
    const char *stops[] = {"<stop>", "END", ""};
    lilac_stop *st;
    lilac_error err;
    char out[256];
    bool stopped;
    CHECK(lilac_stop_new(stops, 3, &st, &err) == LILAC_OK);
    const char *p1[] = {"Hel", "lo <st", "op> world"};
    feed_all(st, p1, 3, out, &stopped);
    CHECKF(stopped && strcmp(out, "Hello ") == 0, "split stop string: '%s'", out);
    lilac_stop_free(st);

    CHECK(lilac_stop_new(stops, 3, &st, &err) == LILAC_OK);
    const char *p2[] = {"a <st", "ar> E", "N", "D"};
    feed_all(st, p2, 4, out, &stopped);
    CHECKF(stopped && strcmp(out, "a <star> ") == 0, "a false start is released: '%s'", out);
    lilac_stop_free(st);

    CHECK(lilac_stop_new(stops, 3, &st, &err) == LILAC_OK);
    const char *p3[] = {"no stop here <s", "to"};
    feed_all(st, p3, 2, out, &stopped);
    CHECKF(!stopped && strcmp(out, "no stop here <sto") == 0, "held text comes back at the end: '%s'", out);
    /* held back while it could still become a stop string */
    lilac_stop_free(st);
    CHECK(lilac_stop_new(stops, 3, &st, &err) == LILAC_OK);
    const char *e;
    size_t ne;
    CHECK(!lilac_stop_feed(st, "x<sto", 5, &e, &ne) && ne == 1 && e[0] == 'x');
    lilac_stop_free(st);
}

int main(void)
{
    check_distribution(1.0f, 0, 1.0f, 0.0f);
    check_distribution(0.7f, 20, 1.0f, 0.0f);
    check_distribution(0.8f, 0, 0.9f, 0.0f);
    check_distribution(1.3f, 40, 0.8f, 0.05f);
    check_distribution(1.0f, 0, 1.0f, 0.2f);
    check_penalties();
    check_seed_and_greedy();
    check_stops();
    TEST_END();
}
