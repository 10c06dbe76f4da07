/* metrics: Prometheus counters, gauges and histograms (see metrics.h). */
#include "server/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"
#include "util/sbuf.h"

typedef struct family {
    char *name, *help;
    metrics_type type;
    int n_labels;
    char *label_names[METRICS_MAX_LABELS];
    double *buckets;
    int n_buckets;
    metrics_series **series; /* each allocated alone: handles stay put as the array grows */
    int n_series, cap_series;
} family;

struct metrics_series {
    metrics *reg;
    family *fam;
    char *label_values[METRICS_MAX_LABELS];
    double value;     /* counter, gauge */
    double sum;       /* histogram */
    uint64_t *counts; /* histogram: n_buckets + 1, the last for +Inf; not cumulative */
    uint64_t count;
    double (*read)(void *user);
    void *user;
};

struct metrics {
    pthread_mutex_t mu;
    family **fams;
    int n_fams, cap_fams;
};

/* ---- registry ----------------------------------------------------------------------------------------- */

lilac_status metrics_new(metrics **out, lilac_error *err)
{
    if (!out)
        return lilac_fail(err, LILAC_E_ARG, "metrics_new: no output pointer");
    *out = NULL;
    metrics *r = calloc(1, sizeof *r);
    if (!r)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory creating the metrics registry");
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return lilac_fail(err, LILAC_E_INTERNAL, "metrics_new: pthread_mutex_init failed");
    }
    *out = r;
    return LILAC_OK;
}

static void series_free(metrics_series *s)
{
    if (!s)
        return;
    for (int i = 0; i < METRICS_MAX_LABELS; i++)
        free(s->label_values[i]);
    free(s->counts);
    free(s);
}

static void family_free(family *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n_series; i++)
        series_free(f->series[i]);
    free(f->series);
    for (int i = 0; i < METRICS_MAX_LABELS; i++)
        free(f->label_names[i]);
    free(f->name);
    free(f->help);
    free(f->buckets);
    free(f);
}

void metrics_free(metrics *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_fams; i++)
        family_free(r->fams[i]);
    free(r->fams);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static bool name_ok(const char *s, bool colon)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              (colon && c == ':')))
            return false;
    }
    return true;
}

static int n_labels_of(const metrics_def *d)
{
    int n = 0;
    while (n < METRICS_MAX_LABELS && d->labels[n].name)
        n++;
    return n;
}

static family *find_family(metrics *r, const char *name)
{
    for (int i = 0; i < r->n_fams; i++)
        if (strcmp(r->fams[i]->name, name) == 0)
            return r->fams[i];
    return NULL;
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

/* Check a def on its own and against the family it joins (f, or NULL for a new one). */
static lilac_status check_def(const metrics_def *d, int k, const family *f, lilac_error *err)
{
    const char *name = d->name ? d->name : "(null)";
    if (!name_ok(d->name, true))
        return lilac_fail(err, LILAC_E_ARG, "metric %d: invalid name '%s'", k, name);
    if (d->type != METRICS_COUNTER && d->type != METRICS_GAUGE && d->type != METRICS_HISTOGRAM)
        return lilac_fail(err, LILAC_E_ARG, "metric %s: unknown type %d", name, (int)d->type);
    int nl = n_labels_of(d);
    for (int i = 0; i < nl; i++) {
        const char *ln = d->labels[i].name;
        if (!name_ok(ln, false) || strncmp(ln, "__", 2) == 0 || (d->type == METRICS_HISTOGRAM && !strcmp(ln, "le")))
            return lilac_fail(err, LILAC_E_ARG, "metric %s: invalid label name '%s'", name, ln);
        if (!d->labels[i].value)
            return lilac_fail(err, LILAC_E_ARG, "metric %s: label %s has no value", name, ln);
        for (int j = 0; j < i; j++)
            if (strcmp(d->labels[j].name, ln) == 0)
                return lilac_fail(err, LILAC_E_ARG, "metric %s: label %s given twice", name, ln);
    }
    if (d->read && d->type != METRICS_GAUGE)
        return lilac_fail(err, LILAC_E_ARG, "metric %s: only a gauge can be read by a callback", name);
    if (d->type == METRICS_HISTOGRAM) {
        if (d->n_buckets < 0 || d->n_buckets > METRICS_MAX_BUCKETS || (d->n_buckets && !d->buckets))
            return lilac_fail(err, LILAC_E_ARG, "metric %s: %d buckets (0 to %d are allowed)", name, d->n_buckets,
                              METRICS_MAX_BUCKETS);
        for (int i = 0; i < d->n_buckets; i++)
            if (!isfinite(d->buckets[i]) || (i > 0 && !(d->buckets[i] > d->buckets[i - 1])))
                return lilac_fail(err, LILAC_E_ARG, "metric %s: bucket bounds must be finite and increasing "
                                  "(bound %d is %g)", name, i, d->buckets[i]);
    } else if (d->n_buckets) {
        return lilac_fail(err, LILAC_E_ARG, "metric %s: only a histogram has buckets", name);
    }
    if (!f)
        return LILAC_OK;
    if (f->type != d->type)
        return lilac_fail(err, LILAC_E_ARG, "metric %s: registered before with another type", name);
    bool same = f->n_labels == nl;
    for (int i = 0; same && i < nl; i++)
        same = strcmp(f->label_names[i], d->labels[i].name) == 0;
    if (!same)
        return lilac_fail(err, LILAC_E_ARG, "metric %s: registered before with other label names", name);
    same = f->n_buckets == (d->type == METRICS_HISTOGRAM ? d->n_buckets : 0);
    for (int i = 0; same && i < f->n_buckets; i++)
        same = f->buckets[i] == d->buckets[i];
    if (!same)
        return lilac_fail(err, LILAC_E_ARG, "metric %s: registered before with other buckets", name);
    for (int s = 0; s < f->n_series; s++) {
        bool dup = true;
        for (int i = 0; dup && i < nl; i++)
            dup = strcmp(f->series[s]->label_values[i], d->labels[i].value) == 0;
        if (dup)
            return lilac_fail(err, LILAC_E_ARG, "metric %s: this series (the same label values) exists already",
                              name);
    }
    return LILAC_OK;
}

static family *new_family(const metrics_def *d, bool *oom)
{
    family *f = calloc(1, sizeof *f);
    if (!f) {
        *oom = true;
        return NULL;
    }
    f->type = d->type;
    f->name = dup_or_null(d->name, oom);
    f->help = dup_or_null(d->help ? d->help : "", oom);
    f->n_labels = n_labels_of(d);
    for (int i = 0; i < f->n_labels; i++)
        f->label_names[i] = dup_or_null(d->labels[i].name, oom);
    if (d->type == METRICS_HISTOGRAM && d->n_buckets > 0) {
        f->buckets = malloc((size_t)d->n_buckets * sizeof *f->buckets);
        if (f->buckets)
            memcpy(f->buckets, d->buckets, (size_t)d->n_buckets * sizeof *f->buckets);
        else
            *oom = true;
        f->n_buckets = d->n_buckets;
    }
    return f;
}

static metrics_series *new_series(metrics *r, family *f, const metrics_def *d, bool *oom)
{
    metrics_series *s = calloc(1, sizeof *s);
    if (!s) {
        *oom = true;
        return NULL;
    }
    s->reg = r;
    s->fam = f;
    for (int i = 0; i < f->n_labels; i++)
        s->label_values[i] = dup_or_null(d->labels[i].value, oom);
    if (f->type == METRICS_HISTOGRAM && !(s->counts = calloc((size_t)f->n_buckets + 1, sizeof *s->counts)))
        *oom = true;
    s->read = d->read;
    s->user = d->user;
    return s;
}

static bool grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap * 2 : 8;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

lilac_status metrics_register(metrics *r, const metrics_def *defs, int n, lilac_error *err)
{
    if (!r || (n > 0 && !defs) || n < 0)
        return lilac_fail(err, LILAC_E_ARG, "metrics_register: bad arguments");
    pthread_mutex_lock(&r->mu);
    /* what to roll back to: the families there were and how many series each had */
    int nf0 = r->n_fams;
    int *ns0 = malloc((size_t)(nf0 ? nf0 : 1) * sizeof *ns0);
    lilac_status st = LILAC_OK;
    if (!ns0) {
        st = lilac_fail(err, LILAC_E_NOMEM, "out of memory registering metrics");
        goto out;
    }
    for (int i = 0; i < nf0; i++)
        ns0[i] = r->fams[i]->n_series;
    for (int k = 0; k < n && st == LILAC_OK; k++) {
        const metrics_def *d = &defs[k];
        family *f = d->name ? find_family(r, d->name) : NULL;
        if ((st = check_def(d, k, f, err)) != LILAC_OK)
            break;
        bool oom = false;
        if (!f) {
            f = new_family(d, &oom);
            if (!oom && !grow((void **)&r->fams, &r->cap_fams, r->n_fams + 1, sizeof *r->fams))
                oom = true;
            if (oom) {
                family_free(f);
                st = lilac_fail(err, LILAC_E_NOMEM, "out of memory registering metric %s", d->name);
                break;
            }
            r->fams[r->n_fams++] = f;
        }
        metrics_series *s = new_series(r, f, d, &oom);
        if (!oom && !grow((void **)&f->series, &f->cap_series, f->n_series + 1, sizeof *f->series))
            oom = true;
        if (oom) {
            series_free(s);
            st = lilac_fail(err, LILAC_E_NOMEM, "out of memory registering metric %s", d->name);
            break;
        }
        f->series[f->n_series++] = s;
    }
    if (st != LILAC_OK) {
        for (int i = nf0; i < r->n_fams; i++)
            family_free(r->fams[i]);
        r->n_fams = nf0;
        for (int i = 0; i < nf0; i++) {
            family *f = r->fams[i];
            for (int s = ns0[i]; s < f->n_series; s++)
                series_free(f->series[s]);
            f->n_series = ns0[i];
        }
    } else {
        /* handles are given out only once all of them are in */
        for (int k = 0; k < n; k++) {
            if (!defs[k].out)
                continue;
            family *f = find_family(r, defs[k].name);
            int nl = f->n_labels;
            for (int s = 0; s < f->n_series; s++) {
                bool same = true;
                for (int i = 0; same && i < nl; i++)
                    same = strcmp(f->series[s]->label_values[i], defs[k].labels[i].value) == 0;
                if (same)
                    *defs[k].out = f->series[s];
            }
        }
    }
out:
    free(ns0);
    pthread_mutex_unlock(&r->mu);
    return st;
}

/* ---- updates ------------------------------------------------------------------------------------------ */

void metrics_inc(metrics_series *s)
{
    metrics_add(s, 1);
}

void metrics_add(metrics_series *s, double v)
{
    if (!s || s->fam->type == METRICS_HISTOGRAM || isnan(v) || (s->fam->type == METRICS_COUNTER && v < 0))
        return;
    pthread_mutex_lock(&s->reg->mu);
    s->value += v;
    pthread_mutex_unlock(&s->reg->mu);
}

void metrics_set(metrics_series *s, double v)
{
    if (!s || s->fam->type != METRICS_GAUGE)
        return;
    pthread_mutex_lock(&s->reg->mu);
    s->value = v;
    pthread_mutex_unlock(&s->reg->mu);
}

void metrics_observe(metrics_series *s, double v)
{
    if (!s || s->fam->type != METRICS_HISTOGRAM || isnan(v))
        return;
    const family *f = s->fam;
    int b = 0; /* the first bucket whose bound is >= v (le is inclusive); f->n_buckets is +Inf */
    while (b < f->n_buckets && v > f->buckets[b])
        b++;
    pthread_mutex_lock(&s->reg->mu);
    s->counts[b]++;
    s->count++;
    s->sum += v;
    pthread_mutex_unlock(&s->reg->mu);
}

double metrics_value(metrics_series *s)
{
    if (!s)
        return NAN;
    pthread_mutex_lock(&s->reg->mu);
    double v = s->fam->type == METRICS_HISTOGRAM ? (double)s->count : s->read ? s->read(s->user) : s->value;
    pthread_mutex_unlock(&s->reg->mu);
    return v;
}

void metrics_histogram_get(metrics_series *s, double *sum, uint64_t *counts, int max_counts)
{
    if (!s || s->fam->type != METRICS_HISTOGRAM)
        return;
    pthread_mutex_lock(&s->reg->mu);
    if (sum)
        *sum = s->sum;
    for (int i = 0; counts && i < max_counts && i <= s->fam->n_buckets; i++)
        counts[i] = s->counts[i];
    pthread_mutex_unlock(&s->reg->mu);
}

/* ---- rendering ---------------------------------------------------------------------------------------- */

/* HELP text escapes \ and newline; label values also ". */
static void sb_escaped(sbuf *b, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            sb_puts(b, "\\\\");
        else if (*s == '\n')
            sb_puts(b, "\\n");
        else if (quote && *s == '"')
            sb_puts(b, "\\\"");
        else
            sb_putn(b, s, 1);
    }
}

/* The shortest decimal that reads back as v (Prometheus parses Go floats: "+Inf", "-Inf", "NaN"). */
static void fmt_num(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) { /* whole numbers as such: 40, not 4e+01 */
        snprintf(buf, cap, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void sb_num(sbuf *b, double v)
{
    char buf[64];
    fmt_num(buf, sizeof buf, v);
    sb_puts(b, buf);
}

/* name{labels[,le="..."]} value */
static void sample(sbuf *b, const family *f, const metrics_series *s, const char *suffix, const char *le,
                   double v)
{
    sb_puts(b, f->name);
    sb_puts(b, suffix);
    if (f->n_labels || le) {
        sb_puts(b, "{");
        for (int i = 0; i < f->n_labels; i++) {
            if (i)
                sb_puts(b, ",");
            sb_puts(b, f->label_names[i]);
            sb_puts(b, "=\"");
            sb_escaped(b, s->label_values[i], true);
            sb_puts(b, "\"");
        }
        if (le) {
            sb_puts(b, f->n_labels ? ",le=\"" : "le=\"");
            sb_puts(b, le);
            sb_puts(b, "\"");
        }
        sb_puts(b, "}");
    }
    sb_puts(b, " ");
    sb_num(b, v);
    sb_puts(b, "\n");
}

static const char *type_name(metrics_type t)
{
    return t == METRICS_COUNTER ? "counter" : t == METRICS_GAUGE ? "gauge" : "histogram";
}

char *metrics_render(metrics *r)
{
    if (!r)
        return NULL;
    sbuf b = {0};
    sb_puts(&b, ""); /* an empty registry renders as "", not NULL */
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_fams; i++) {
        const family *f = r->fams[i];
        sb_puts(&b, "# HELP ");
        sb_puts(&b, f->name);
        sb_puts(&b, " ");
        sb_escaped(&b, f->help, false);
        sb_puts(&b, "\n# TYPE ");
        sb_puts(&b, f->name);
        sb_puts(&b, " ");
        sb_puts(&b, type_name(f->type));
        sb_puts(&b, "\n");
        for (int k = 0; k < f->n_series; k++) {
            const metrics_series *s = f->series[k];
            if (f->type != METRICS_HISTOGRAM) {
                sample(&b, f, s, "", NULL, s->read ? s->read(s->user) : s->value);
                continue;
            }
            uint64_t cum = 0;
            char le[64];
            for (int j = 0; j <= f->n_buckets; j++) {
                cum += s->counts[j];
                if (j < f->n_buckets)
                    fmt_num(le, sizeof le, f->buckets[j]);
                else
                    snprintf(le, sizeof le, "+Inf");
                sample(&b, f, s, "_bucket", le, (double)cum);
            }
            sample(&b, f, s, "_sum", NULL, s->sum);
            sample(&b, f, s, "_count", NULL, (double)s->count);
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int metrics_buckets_exp(double start, double factor, int n, double *out)
{
    if (!out || n <= 0 || n > METRICS_MAX_BUCKETS || !(start > 0) || !(factor > 1) || !isfinite(start) ||
        !isfinite(factor))
        return 0;
    double v = start;
    for (int i = 0; i < n; i++, v *= factor) {
        if (!isfinite(v))
            return 0;
        out[i] = v;
    }
    return n;
}

double metrics_rss_bytes(void *unused)
{
    (void)unused;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return NAN;
    unsigned long long size, resident;
    int got = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (got != 2 || page <= 0)
        return NAN;
    return (double)resident * (double)page;
}
