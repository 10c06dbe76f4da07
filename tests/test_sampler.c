/* The sampler and the stop-string watcher, against independent
 * computations: the distribution of seeded draws, the penalties'
 * amounts, reproducibility, log-probabilities, split stop strings. */
#include <math.h>
#include <stdlib.h>

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

/* A vocabulary the size of the real ones (the top-k path selects without
 * sorting all of it): with top_k cutting through a run of tied logits, the
 * kept tokens are the best ones then the lowest ids of the tie (a full sort's
 * order), drawn in their softmax proportions; and the chosen token's
 * log-probability against a double-precision log-sum-exp. */
static void check_large_vocab(void)
{
    enum { NV = 300000, K = 12 };
    float *logits = malloc((size_t)NV * sizeof *logits), *work = malloc((size_t)NV * sizeof *work);
    CHECK(logits && work);
    if (!logits || !work)
        return;
    uint64_t x = 99;
    for (int i = 0; i < NV; i++) { /* 61 distinct values in [-30, 30], each ~5,000 times */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((int)((x >> 33) % 61) - 30);
    }
    /* three tokens above every other, then the tie at 30.0 cut by top_k */
    const int hi[3] = {NV - 1, 17, NV / 2};
    logits[hi[0]] = 31.5f, logits[hi[1]] = 31.0f, logits[hi[2]] = 30.5f;
    int keep[K], nk = 0;
    for (int i = 0; i < 3; i++)
        keep[nk++] = hi[i];
    for (int i = 0; i < NV && nk < K; i++)
        if (logits[i] == 30.0f)
            keep[nk++] = i;
    CHECK(nk == K);
    double q[K], z = 0;
    for (int i = 0; i < K; i++)
        z += q[i] = exp(logits[keep[i]] - 31.5);
    lilac_sampler_params sp = lilac_sampler_default_params();
    sp.temperature = 1.0f, sp.top_k = K, sp.top_p = 1.0f, sp.min_p = 0, sp.seed = 5;
    lilac_sampler *s;
    lilac_error err;
    CHECK(lilac_sampler_new(&sp, NV, &s, &err) == LILAC_OK);
    const int N = 4000;
    long count[K] = {0}, outside = 0;
    for (int n = 0; n < N; n++) {
        memcpy(work, logits, (size_t)NV * sizeof *work);
        int t = lilac_sampler_sample(s, work, NULL, NULL, 0), at = -1;
        for (int i = 0; i < K; i++)
            at = keep[i] == t ? i : at;
        if (at < 0)
            outside++;
        else
            count[at]++;
    }
    double chi2 = 0;
    for (int i = 0; i < K; i++) {
        const double e = q[i] / z * N;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    printf("vocabulary %d, top_k %d through a tie: %ld outside, chi2 %.1f (df %d)\n", NV, K, outside, chi2, K - 1);
    CHECKF(outside == 0, "%ld draws outside the top %d (best, then the tie's lowest ids)", outside, K);
    CHECKF(chi2 < K - 1 + 6 * sqrt(2.0 * (K - 1)), "chi-square %.1f: draws do not follow the kept softmax", chi2);
    lilac_sampler_free(s);

    sp.temperature = 0;
    CHECK(lilac_sampler_new(&sp, NV, &s, &err) == LILAC_OK);
    for (int i = 0; i < NV; i++) { /* spread values, many tokens far below the best */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        work[i] = logits[i] = (float)((x >> 40) % 1000000) / 1000000.0f * 120.0f - 100.0f;
    }
    double mx = -INFINITY, zz = 0;
    for (int i = 0; i < NV; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < NV; i++)
        zz += exp((double)logits[i] - mx);
    float lp;
    const int t = lilac_sampler_sample(s, work, &lp, NULL, 0);
    const double want = logits[t] - (mx + log(zz));
    CHECKF(logits[t] == (float)mx && fabs(lp - want) < 1e-5, "greedy token %d, logprob %.7f against %.7f", t, lp, want);
    lilac_sampler_free(s);
    free(logits);
    free(work);
}

/* lilac_argmax (eight running bests) against one scan: the first index of
 * the largest value, NaNs passed over, for lengths around the lanes. */
static void check_argmax(void)
{
    float x[100];
    uint64_t r = 3;
    int bad = 0;
    for (int n = 1; n <= 100; n++)
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < n; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = (float)((r >> 40) % 7); /* many ties */
                if ((r >> 20) % 13 == 0)
                    x[i] = NAN;
            }
            if (rep == 0)
                x[0] = 1.0f;
            int b = 0;
            for (int i = 1; i < n; i++)
                if (x[i] > x[b])
                    b = i;
            bad += lilac_argmax(x, n) != b;
        }
    CHECKF(bad == 0, "%d of 2000 argmax cases differ from one scan", bad);
}

/* lilac_sampler_sample_top on lilac_logits_top_of's candidates against
 * lilac_sampler_sample on all the logits: two samplers of one seed draw the
 * same tokens with the same log-probabilities, step after step, for greedy
 * (with alternatives reported), top_k alone, with top_p and min_p; and
 * lilac_sampler_top_k says 0 where the top form does not hold enough. */
static void check_top_form(void)
{
    enum { NV = 50000, STEPS = 300 };
    float *lg = malloc(sizeof(float) * NV), *work = malloc(sizeof(float) * NV);
    lilac_logits_top *t = malloc(sizeof *t);
    CHECK(lg && work && t);
    if (!lg || !work || !t)
        return;
    static const struct {
        float T;
        int top_k;
        float top_p, min_p;
        int n_top;
    } cs[] = {{0, 0, 1, 0, 5}, {0, 40, 0.9f, 0, 0}, {0.8f, 40, 0.95f, 0.05f, 3}, {1.2f, 7, 1, 0, 0},
              {0.5f, 128, 0.5f, 0, 20}};
    uint64_t x = 1234;
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        lilac_sampler_params sp = lilac_sampler_default_params();
        sp.temperature = cs[ci].T, sp.top_k = cs[ci].top_k, sp.top_p = cs[ci].top_p, sp.min_p = cs[ci].min_p;
        sp.seed = 77 + ci;
        lilac_sampler *a, *b;
        lilac_error err;
        CHECK(lilac_sampler_new(&sp, NV, &a, &err) == LILAC_OK && lilac_sampler_new(&sp, NV, &b, &err) == LILAC_OK);
        const int k = lilac_sampler_top_k(b, cs[ci].n_top);
        CHECKF(k >= 1 && k >= cs[ci].n_top, "case %zu: top_k %d", ci, k);
        int same = 0;
        for (int step = 0; step < STEPS && k >= 1; step++) {
            for (int i = 0; i < NV; i++) { /* a peaked distribution with ties among the tail */
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                lg[i] = (float)((x >> 40) % 200) / 20.0f - (i % 97 == 0 ? 0.0f : 8.0f);
            }
            memcpy(work, lg, sizeof(float) * NV);
            lilac_token_logprob ta[20], tb[20];
            float la, lb;
            const int n_top = cs[ci].n_top;
            const int32_t ia = lilac_sampler_sample(a, work, &la, n_top ? ta : NULL, n_top);
            lilac_logits_top_of(lg, NV, k, t);
            const int32_t ib = lilac_sampler_sample_top(b, t, &lb, n_top ? tb : NULL, n_top);
            bool ok = ia == ib && la == lb;
            for (int j = 0; j < n_top; j++)
                ok = ok && ta[j].token == tb[j].token && ta[j].logprob == tb[j].logprob;
            same += ok;
        }
        CHECKF(same == STEPS, "case %zu (T %.2f top_k %d top_p %.2f min_p %.2f): %d of %d steps the same", ci,
               cs[ci].T, cs[ci].top_k, cs[ci].top_p, cs[ci].min_p, same, STEPS);
        lilac_sampler_free(a);
        lilac_sampler_free(b);
    }
    /* where the top form does not hold enough: penalties, top_k off or over the most, with temperature */
    static const struct {
        float T, rp, pp;
        int top_k;
    } no[] = {{0.8f, 1.1f, 0, 40}, {0.8f, 1, 0.5f, 40}, {0.8f, 1, 0, 0}, {0.8f, 1, 0, LILAC_TOP_MAX + 1}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        lilac_sampler_params sp = lilac_sampler_default_params();
        sp.temperature = no[i].T, sp.repeat_penalty = no[i].rp, sp.presence_penalty = no[i].pp;
        sp.top_k = no[i].top_k;
        lilac_sampler *s;
        lilac_error err;
        CHECK(lilac_sampler_new(&sp, NV, &s, &err) == LILAC_OK);
        CHECKF(lilac_sampler_top_k(s, 0) == 0, "case %zu: the top form would not hold every candidate needed", i);
        lilac_sampler_free(s);
    }
    free(lg), free(work), free(t);
}

int main(void)
{
    check_distribution(1.0f, 0, 1.0f, 0.0f);
    check_distribution(0.7f, 20, 1.0f, 0.0f);
    check_distribution(0.8f, 0, 0.9f, 0.0f);
    check_distribution(1.3f, 40, 0.8f, 0.05f);
    check_distribution(1.0f, 0, 1.0f, 0.2f);
    check_argmax();
    check_top_form();
    check_large_vocab();
    check_penalties();
    check_seed_and_greedy();
    check_stops();
    TEST_END();
}
