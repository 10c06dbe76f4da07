/* test_metrics: the Prometheus registry of lilac serve (src/server/metrics.c).
 *
 * Registration refuses what Prometheus would (bad names, families that disagree, duplicate series) and
 * leaves the registry as it was; updates from several threads at once all count; the rendered text is parsed
 * back line by line as a scraper would and every value, label and bucket checked. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"
#include "testutil.h"

/* ---- a small parser of the text format ---------------------------------------------------------------- */

#define MAX_SAMPLES 256

typedef struct sample {
    char name[128];
    char labels[256]; /* the label pairs as written, unescaped, "k=v;k=v;" */
    char le[128];     /* the le label, "" if none */
    double value;
} sample;

typedef struct parsed {
    sample s[MAX_SAMPLES];
    int n;
    char help[32][256]; /* per family, in order */
    char type[32][16];
    char family[32][128];
    int n_fam;
    bool ok;
} parsed;

static int family_index(parsed *p, const char *name)
{
    for (int i = 0; i < p->n_fam; i++)
        if (strcmp(p->family[i], name) == 0)
            return i;
    return -1;
}

/* The family a sample belongs to: its name, or its name less _bucket/_sum/_count for a histogram. */
static int owner(parsed *p, const char *name)
{
    int f = family_index(p, name);
    if (f >= 0)
        return f;
    const char *suf[] = {"_bucket", "_sum", "_count"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(name), m = strlen(suf[k]);
        if (n > m && strcmp(name + n - m, suf[k]) == 0) {
            char base[128];
            snprintf(base, sizeof base, "%.*s", (int)(n - m), name);
            f = family_index(p, base);
            if (f >= 0 && strcmp(p->type[f], "histogram") == 0)
                return f;
        }
    }
    return -1;
}

static bool name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

/* Parse the exposition; any line that is not well-formed fails a CHECK and marks p->ok false. */
static void parse_text(const char *text, parsed *p)
{
    memset(p, 0, sizeof *p);
    p->ok = true;
    CHECKF(text && (!*text || text[strlen(text) - 1] == '\n'), "the text ends with a newline");
    const char *line = text;
    int last_family = -1;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        line = end ? end + 1 : NULL;
        if (strncmp(buf, "# HELP ", 7) == 0 || strncmp(buf, "# TYPE ", 7) == 0) {
            char name[128];
            const char *q = buf + 7;
            size_t k = 0;
            while (q[k] && q[k] != ' ' && k < sizeof name - 1)
                name[k] = q[k], k++;
            name[k] = 0;
            const char *rest = q[k] == ' ' ? q + k + 1 : q + k;
            int f = family_index(p, name);
            if (buf[2] == 'H') {
                CHECKF(f < 0, "HELP for %s comes once, before its TYPE", name);
                if (f >= 0 || p->n_fam == 32) {
                    p->ok = false;
                    continue;
                }
                f = p->n_fam++;
                snprintf(p->family[f], sizeof p->family[f], "%s", name);
                /* unescape \\ and \n */
                size_t o = 0;
                for (const char *c = rest; *c && o < sizeof p->help[f] - 1; c++) {
                    if (*c == '\\' && (c[1] == '\\' || c[1] == 'n'))
                        p->help[f][o++] = *++c == 'n' ? '\n' : '\\';
                    else
                        p->help[f][o++] = *c;
                }
            } else {
                CHECKF(f >= 0 && !p->type[f][0], "TYPE for %s once, after its HELP", name);
                if (f < 0) {
                    p->ok = false;
                    continue;
                }
                snprintf(p->type[f], sizeof p->type[f], "%.15s", rest);
                CHECKF(!strcmp(rest, "counter") || !strcmp(rest, "gauge") || !strcmp(rest, "histogram"),
                       "type %s", rest);
            }
            last_family = f;
            continue;
        }
        CHECKF(buf[0] != '#' && buf[0], "unexpected line '%s'", buf);
        if (p->n == MAX_SAMPLES || buf[0] == '#' || !buf[0]) {
            p->ok = false;
            continue;
        }
        sample *s = &p->s[p->n];
        memset(s, 0, sizeof *s);
        const char *c = buf;
        size_t k = 0;
        bool good = name_char(*c, true);
        while (name_char(*c, k == 0) && k < sizeof s->name - 1)
            s->name[k++] = *c++;
        if (*c == '{') {
            c++;
            size_t lo = 0;
            while (good && *c && *c != '}') {
                char lname[64], lval[128];
                size_t a = 0, v = 0;
                while (name_char(*c, a == 0) && a < sizeof lname - 1)
                    lname[a++] = *c++;
                lname[a] = 0;
                good = a > 0 && c[0] == '=' && c[1] == '"';
                if (!good)
                    break;
                c += 2;
                while (*c && *c != '"' && v < sizeof lval - 1) {
                    if (*c == '\\') {
                        c++;
                        good = *c == '\\' || *c == '"' || *c == 'n';
                        lval[v++] = *c == 'n' ? '\n' : *c;
                        c++;
                    } else {
                        lval[v++] = *c++;
                    }
                }
                lval[v] = 0;
                good = good && *c == '"';
                c++;
                if (strcmp(lname, "le") == 0)
                    snprintf(s->le, sizeof s->le, "%s", lval);
                else
                    lo += (size_t)snprintf(s->labels + lo, sizeof s->labels - lo, "%s=%s;", lname, lval);
                if (*c == ',')
                    c++;
            }
            good = good && *c == '}';
            c++;
        }
        good = good && *c == ' ';
        char *num_end = NULL;
        if (good) {
            c++;
            if (strcmp(c, "+Inf") == 0)
                s->value = INFINITY, num_end = (char *)c + 4;
            else if (strcmp(c, "-Inf") == 0)
                s->value = -INFINITY, num_end = (char *)c + 4;
            else if (strcmp(c, "NaN") == 0)
                s->value = NAN, num_end = (char *)c + 3;
            else
                s->value = strtod(c, &num_end);
            good = num_end != c && *num_end == 0;
        }
        CHECKF(good, "malformed sample line '%s'", buf);
        int f = owner(p, s->name);
        CHECKF(f >= 0 && f == last_family, "sample %s outside its family's block", s->name);
        if (!good || f < 0)
            p->ok = false;
        p->n++;
    }
}

static const sample *find(const parsed *p, const char *name, const char *labels, const char *le)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && !strcmp(p->s[i].labels, labels) && !strcmp(p->s[i].le, le))
            return &p->s[i];
    return NULL;
}

static double val(const parsed *p, const char *name, const char *labels, const char *le)
{
    const sample *s = find(p, name, labels, le);
    CHECKF(s != NULL, "no sample %s{%s le=%s}", name, labels, le);
    return s ? s->value : NAN;
}

/* ---- the tests ---------------------------------------------------------------------------------------- */

typedef struct server_metrics {
    metrics_series *queue, *busy, *tok_in, *tok_out, *ttft, *tpot, *rej_full, *rej_bad, *rej_big, *rss, *odd;
} server_metrics;

static const double ttft_b[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5};
static double tpot_b[8];

static double fixed_read(void *user)
{
    return *(const double *)user;
}

static lilac_status register_all(metrics *reg, server_metrics *m, lilac_error *err)
{
    static double forty_two = 42;
    int nb = metrics_buckets_exp(0.001, 2, 8, tpot_b);
    CHECK(nb == 8 && tpot_b[0] == 0.001 && tpot_b[7] == 0.128);
    metrics_def defs[] = {
        {.out = &m->queue, .type = METRICS_GAUGE, .name = "lilac_queue_depth", .help = "Requests waiting"},
        {.out = &m->busy, .type = METRICS_GAUGE, .name = "lilac_busy_slots", .help = "Slots generating"},
        {.out = &m->tok_in, .type = METRICS_COUNTER, .name = "lilac_prompt_tokens_total", .help = "Prompt tokens"},
        {.out = &m->tok_out, .type = METRICS_COUNTER, .name = "lilac_generated_tokens_total", .help = "Tokens out"},
        {.out = &m->ttft, .type = METRICS_HISTOGRAM, .name = "lilac_time_to_first_token_seconds",
         .help = "Time to first token", .buckets = ttft_b, .n_buckets = 6},
        {.out = &m->tpot, .type = METRICS_HISTOGRAM, .name = "lilac_time_per_output_token_seconds",
         .help = "Time per output token", .labels = {{"model", "qwen3"}}, .buckets = tpot_b, .n_buckets = nb},
        {.out = &m->rej_full, .type = METRICS_COUNTER, .name = "lilac_rejections_total", .help = "Requests refused",
         .labels = {{"reason", "queue_full"}}},
        {.out = &m->rej_bad, .type = METRICS_COUNTER, .name = "lilac_rejections_total", .help = "Requests refused",
         .labels = {{"reason", "bad_request"}}},
        {.out = &m->rej_big, .type = METRICS_COUNTER, .name = "lilac_rejections_total",
         .labels = {{"reason", "too_large"}}},
        {.out = &m->rss, .type = METRICS_GAUGE, .name = "lilac_resident_memory_bytes", .help = "Resident memory",
         .read = metrics_rss_bytes},
        {.out = &m->odd, .type = METRICS_GAUGE, .name = "lilac:odd", .help = "Help with \\ and\nnewline",
         .labels = {{"a", "quote \" back \\ nl \n"}, {"b", "\xc3\xa9"}}, .read = fixed_read, .user = &forty_two},
    };

    return metrics_register(reg, defs, (int)(sizeof defs / sizeof defs[0]), err);
}

/* Remove the line that starts with "\n" prefix (the resident memory moves between two renders). */
static void drop_line(char *text, const char *nl_prefix)
{
    char *at = text ? strstr(text, nl_prefix) : NULL;
    char *end = at ? strchr(at + 1, '\n') : NULL;
    if (end)
        memmove(at, end, strlen(end) + 1);
}

static void test_errors(metrics *reg)
{
    lilac_error err;
    metrics_series *s = (metrics_series *)&err;
    const double up_down[] = {1, 0.5}, nan_b[] = {NAN};
#define D(type_, name_, ...) {.out = &s, .type = (type_), .name = (name_), .help = "x", __VA_ARGS__}
    const struct {
        metrics_def def;
        const char *msg;
    } cases[] = {
        {D(METRICS_COUNTER, "9bad"), "invalid name"},
        {D(METRICS_COUNTER, "bad-name"), "invalid name"},
        {D(METRICS_COUNTER, NULL), "invalid name"},
        {D(METRICS_COUNTER, ""), "invalid name"},
        {D(0, "t_ok"), "unknown type"},
        {D(METRICS_COUNTER, "t_ok", .labels = {{"bad label", "v"}}), "invalid label name"},
        {D(METRICS_COUNTER, "t_ok", .labels = {{"__reserved", "v"}}), "invalid label name"},
        {D(METRICS_HISTOGRAM, "t_ok", .labels = {{"le", "v"}}), "invalid label name"},
        {D(METRICS_COUNTER, "t_ok", .labels = {{"a", NULL}}), "no value"},
        {D(METRICS_COUNTER, "t_ok", .labels = {{"a", "1"}, {"a", "2"}}), "twice"},
        {D(METRICS_COUNTER, "t_ok", .read = fixed_read), "callback"},
        {D(METRICS_HISTOGRAM, "t_ok", .buckets = up_down, .n_buckets = 2), "increasing"},
        {D(METRICS_HISTOGRAM, "t_ok", .buckets = nan_b, .n_buckets = 1), "increasing"},
        {D(METRICS_HISTOGRAM, "t_ok", .buckets = ttft_b, .n_buckets = METRICS_MAX_BUCKETS + 1), "buckets"},
        {D(METRICS_GAUGE, "t_ok", .buckets = ttft_b, .n_buckets = 1), "only a histogram"},
        /* against the families registered already */
        {D(METRICS_GAUGE, "lilac_generated_tokens_total"), "another type"},
        {D(METRICS_COUNTER, "lilac_rejections_total", .labels = {{"why", "x"}}), "other label names"},
        {D(METRICS_COUNTER, "lilac_rejections_total"), "other label names"},
        {D(METRICS_COUNTER, "lilac_rejections_total", .labels = {{"reason", "queue_full"}}), "exists already"},
        {D(METRICS_HISTOGRAM, "lilac_time_to_first_token_seconds", .buckets = ttft_b, .n_buckets = 5),
         "other buckets"},
    };
#undef D

    char *before = metrics_render(reg);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* each bad def comes after a good one: that must be rolled back too */
        metrics_def two[2] = {{.type = METRICS_COUNTER, .name = "t_rolled_back", .labels = {{"reason", "r"}}},
                              cases[i].def};
        metrics_def more = {.type = METRICS_COUNTER, .name = "lilac_rejections_total", .labels = {{"reason", "new"}}};
        if (i % 2)
            two[0] = more;
        err.msg[0] = 0;
        lilac_status st = metrics_register(reg, two, 2, &err);
        CHECKF(st == LILAC_E_ARG, "case %zu: status %d", i, (int)st);
        CHECKF(strstr(err.msg, cases[i].msg), "case %zu: message '%s' lacks '%s'", i, err.msg, cases[i].msg);
        CHECKF(s == (metrics_series *)&err, "case %zu: a handle was given out", i);
    }
    char *after = metrics_render(reg);
    drop_line(before, "\nlilac_resident_memory_bytes ");
    drop_line(after, "\nlilac_resident_memory_bytes ");
    CHECKF(before && after && strcmp(before, after) == 0, "failed registrations left no trace");
    free(before);
    free(after);
    CHECK(metrics_register(reg, NULL, 1, &err) == LILAC_E_ARG);
    CHECK(metrics_register(reg, NULL, 0, &err) == LILAC_OK);
    CHECK(metrics_buckets_exp(0, 2, 4, tpot_b) == 0 && metrics_buckets_exp(1, 1, 4, tpot_b) == 0);
    CHECK(metrics_buckets_exp(1, 2, METRICS_MAX_BUCKETS + 1, tpot_b) == 0);
}

#define N_THREADS 4
#define N_ITERS 5000

typedef struct job {
    server_metrics *m;
    metrics *reg;
} job;

static void *worker(void *arg)
{
    server_metrics *m = ((job *)arg)->m;
    for (int i = 0; i < N_ITERS; i++) {
        metrics_inc(m->tok_out);
        metrics_add(m->tok_in, 3);
        metrics_add(m->queue, 1);
        metrics_add(m->queue, -1);
        metrics_observe(m->ttft, (i % 4) * 0.1); /* 0, 0.1, 0.2, 0.3: buckets 0.05, 0.1, 0.25, 0.5 */
        metrics_observe(m->tpot, 0.004);
        if (i % 1000 == 0) {
            char *t = metrics_render(((job *)arg)->reg); /* a scrape while others update */
            free(t);
        }
    }
    return NULL;
}

int main(void)
{
    metrics *reg = NULL;
    lilac_error err = {0};
    CHECK(metrics_new(NULL, &err) == LILAC_E_ARG);
    CHECKF(metrics_new(&reg, &err) == LILAC_OK, "%s", err.msg);
    if (!reg)
        TEST_END();
    char *empty = metrics_render(reg);
    CHECK(empty && empty[0] == 0);
    free(empty);

    server_metrics m;
    memset(&m, 0, sizeof m);
    lilac_status st = register_all(reg, &m, &err);
    CHECKF(st == LILAC_OK, "%s", err.msg);
    if (st != LILAC_OK)
        TEST_END();
    CHECK(m.queue && m.busy && m.tok_in && m.tok_out && m.ttft && m.tpot && m.rej_full && m.rej_bad && m.rej_big);
    CHECK(m.rss && m.odd && m.rej_full != m.rej_bad);
    test_errors(reg);

    /* updates from several threads at once, with renders in between */
    pthread_t th[N_THREADS];
    job jb = {&m, reg};
    for (int i = 0; i < N_THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, &jb) == 0);
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    metrics_set(m.busy, 3);
    metrics_inc(m.rej_full);
    metrics_inc(m.rej_full);
    metrics_add(m.rej_bad, 5);
    metrics_add(m.rej_bad, -1);   /* a counter never goes down */
    metrics_add(m.rej_bad, NAN);  /* nor becomes NaN */
    metrics_set(m.tok_out, 1);    /* nor is set */
    metrics_observe(m.tok_out, 1); /* nor observed */
    metrics_observe(m.ttft, NAN);
    metrics_observe(m.ttft, 100); /* +Inf bucket */
    metrics_inc(NULL);            /* a missing handle is a no-op */
    CHECK(metrics_value(m.tok_out) == N_THREADS * N_ITERS);
    CHECK(metrics_value(m.tok_in) == 3.0 * N_THREADS * N_ITERS);
    CHECK(metrics_value(m.queue) == 0 && metrics_value(m.busy) == 3);
    CHECK(metrics_value(m.rej_bad) == 5 && metrics_value(m.rej_full) == 2);
    CHECK(metrics_value(m.ttft) == N_THREADS * N_ITERS + 1);
    CHECK(metrics_value(m.odd) == 42);
    double rss = metrics_value(m.rss);
    CHECKF(isnan(rss) || rss > 1e6, "resident memory %g", rss);
    uint64_t counts[8] = {0};
    double sum = 0;
    metrics_histogram_get(m.ttft, &sum, counts, 8);
    const uint64_t q = N_THREADS * N_ITERS / 4;
    CHECKF(counts[0] == q && counts[1] == q && counts[2] == q && counts[3] == q && counts[4] == 0 &&
               counts[5] == 0 && counts[6] == 1,
           "ttft buckets %llu %llu %llu %llu %llu %llu %llu", (unsigned long long)counts[0],
           (unsigned long long)counts[1], (unsigned long long)counts[2], (unsigned long long)counts[3],
           (unsigned long long)counts[4], (unsigned long long)counts[5], (unsigned long long)counts[6]);

    /* the text, parsed back */
    char *text = metrics_render(reg);
    CHECK(text != NULL);
    static parsed p;
    parse_text(text, &p);
    CHECK(p.ok);
    CHECKF(p.n_fam == 9, "%d families", p.n_fam);
    const char *fams[] = {"lilac_queue_depth", "lilac_busy_slots", "lilac_prompt_tokens_total",
                          "lilac_generated_tokens_total", "lilac_time_to_first_token_seconds",
                          "lilac_time_per_output_token_seconds", "lilac_rejections_total",
                          "lilac_resident_memory_bytes", "lilac:odd"};
    const char *types[] = {"gauge", "gauge", "counter", "counter", "histogram", "histogram", "counter", "gauge",
                           "gauge"};
    for (int i = 0; i < 9 && i < p.n_fam; i++)
        CHECKF(!strcmp(p.family[i], fams[i]) && !strcmp(p.type[i], types[i]), "family %d: %s %s", i, p.family[i],
               p.type[i]);
    CHECK(p.n_fam == 9 && strcmp(p.help[8], "Help with \\ and\nnewline") == 0);
    CHECK(p.n_fam == 9 && strcmp(p.help[6], "Requests refused") == 0);
    CHECK(val(&p, "lilac_generated_tokens_total", "", "") == N_THREADS * N_ITERS);
    CHECK(val(&p, "lilac_prompt_tokens_total", "", "") == 3.0 * N_THREADS * N_ITERS);
    CHECK(val(&p, "lilac_queue_depth", "", "") == 0 && val(&p, "lilac_busy_slots", "", "") == 3);
    CHECK(val(&p, "lilac_rejections_total", "reason=queue_full;", "") == 2);
    CHECK(val(&p, "lilac_rejections_total", "reason=bad_request;", "") == 5);
    CHECK(val(&p, "lilac_rejections_total", "reason=too_large;", "") == 0);
    CHECK(val(&p, "lilac:odd", "a=quote \" back \\ nl \n;b=\xc3\xa9;", "") == 42);
    double r = val(&p, "lilac_resident_memory_bytes", "", "");
    CHECK(isnan(r) || r > 1e6);
    /* histograms: cumulative buckets in order, +Inf == _count */
    const char *les[] = {"0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"};
    const double cum[] = {q, 2 * q, 3 * q, 4 * q, 4 * q, 4 * q, 4 * q + 1};
    int prev = -1;
    for (int i = 0; i < 7; i++) {
        const sample *s = find(&p, "lilac_time_to_first_token_seconds_bucket", "", les[i]);
        CHECKF(s && s->value == cum[i], "bucket le=%s: %g, expected %g", les[i], s ? s->value : NAN, cum[i]);
        int at = s ? (int)(s - p.s) : -1;
        CHECKF(at > prev, "bucket le=%s in order", les[i]);
        prev = at;
    }
    CHECK(val(&p, "lilac_time_to_first_token_seconds_count", "", "") == 4 * q + 1);
    double want_sum = q * (0.1 + 0.2 + 0.3) + 100;
    CHECKF(fabs(val(&p, "lilac_time_to_first_token_seconds_sum", "", "") - want_sum) < 1e-6 * want_sum,
           "ttft sum");
    CHECK(val(&p, "lilac_time_per_output_token_seconds_bucket", "model=qwen3;", "0.004") == N_THREADS * N_ITERS);
    CHECK(val(&p, "lilac_time_per_output_token_seconds_bucket", "model=qwen3;", "0.002") == 0);
    CHECK(val(&p, "lilac_time_per_output_token_seconds_bucket", "model=qwen3;", "0.128") == N_THREADS * N_ITERS);
    CHECK(val(&p, "lilac_time_per_output_token_seconds_bucket", "model=qwen3;", "+Inf") == N_THREADS * N_ITERS);
    CHECK(val(&p, "lilac_time_per_output_token_seconds_count", "model=qwen3;", "") == N_THREADS * N_ITERS);
    /* shortest numbers: 0.1, not 0.10000000000000001 */
    CHECKF(strstr(text, "le=\"0.1\"") && !strstr(text, "0.1000"), "bounds written short");
    CHECKF(strstr(text, "lilac_rejections_total{reason=\"queue_full\"} 2\n"), "exact sample line");
    CHECKF(strstr(text, "lilac:odd{a=\"quote \\\" back \\\\ nl \\n\",b=\"\xc3\xa9\"} 42\n"), "escaped labels");
    /* every family's samples: histograms 3 lines + buckets per series */
    CHECKF(p.n == 4 + 7 + 2 + 9 + 2 + 3 + 1 + 1, "%d samples", p.n);
    free(text);
    metrics_free(reg);
    metrics_free(NULL);
    TEST_END();
}
