/* metrics: a registry of counters, gauges and histograms for `lilac serve`, rendered in the Prometheus text
 * exposition format 0.0.4 (GET /metrics).
 *
 * The caller creates the registry (there is no global one), registers its metrics once, at start-up, with a
 * table of metrics_def, and keeps the series handles the table hands back:
 *
 *     static const double latency[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
 *     metrics_def defs[] = {
 *         {&m.queue, METRICS_GAUGE, "lilac_queue_depth", "Requests waiting for a slot"},
 *         {&m.tokens_out, METRICS_COUNTER, "lilac_generated_tokens_total", "Tokens generated"},
 *         {&m.ttft, METRICS_HISTOGRAM, "lilac_time_to_first_token_seconds", "Time to first token",
 *          .buckets = latency, .n_buckets = 10},
 *         {&m.rej_full, METRICS_COUNTER, "lilac_rejections_total", "Requests refused", {{"reason", "queue_full"}}},
 *         {&m.rej_bad, METRICS_COUNTER, "lilac_rejections_total", "Requests refused", {{"reason", "bad_request"}}},
 *         {&m.rss, METRICS_GAUGE, "lilac_resident_memory_bytes", "Resident memory", .read = metrics_rss_bytes},
 *     };
 *     st = metrics_register(reg, defs, sizeof defs / sizeof defs[0], &err);
 *
 * Defs with the same name are the series of one metric family (one # HELP and # TYPE): they must agree on
 * the type, the label names (in order) and the buckets, and differ in the label values.
 *
 * Updates and rendering are thread-safe: one mutex per registry, held for a few instructions per update and
 * for the whole of a render (so a scrape sees a consistent snapshot, e.g. a histogram's +Inf bucket equals
 * its _count). Handles stay valid until metrics_free. */
#ifndef LILAC_SERVER_METRICS_H
#define LILAC_SERVER_METRICS_H

#include <stdint.h>

#include "lilac.h"

#define METRICS_MAX_LABELS 4
#define METRICS_MAX_BUCKETS 64
/* The Content-Type of what metrics_render returns. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum metrics_type {
    METRICS_COUNTER = 1,   /* only goes up */
    METRICS_GAUGE = 2,     /* set, or moved up and down */
    METRICS_HISTOGRAM = 3, /* observations counted into fixed buckets, with their sum */
} metrics_type;

typedef struct metrics metrics;               /* the registry */
typedef struct metrics_series metrics_series; /* one series: a metric with one set of label values */

typedef struct metrics_label {
    const char *name; /* [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", not "le" for histograms */
    const char *value;
} metrics_label;

typedef struct metrics_def {
    metrics_series **out; /* gets the handle (may be NULL) */
    metrics_type type;
    const char *name; /* [a-zA-Z_:][a-zA-Z0-9_:]* */
    const char *help; /* may be NULL */
    metrics_label labels[METRICS_MAX_LABELS]; /* up to the first with a NULL name */
    const double *buckets;                    /* histograms: upper bounds, finite and increasing; +Inf is added */
    int n_buckets;
    /* gauges only, optional: the value is read at render time (under the registry's lock: the function must
     * not touch the registry). */
    double (*read)(void *user);
    void *user;
} metrics_def;

lilac_status metrics_new(metrics **out, lilac_error *err);
void metrics_free(metrics *r);

/* Register n series (strings are copied). On failure nothing of this call is registered and err names the
 * def and what is wrong: a bad name, a type, labels or buckets that disagree with the family, a series that
 * exists already. */
lilac_status metrics_register(metrics *r, const metrics_def *defs, int n, lilac_error *err);

void metrics_inc(metrics_series *s);               /* counter or gauge: += 1 */
void metrics_add(metrics_series *s, double v);     /* counter (v < 0 or NaN is ignored) or gauge: += v */
void metrics_set(metrics_series *s, double v);     /* gauge */
void metrics_observe(metrics_series *s, double v); /* histogram (NaN is ignored) */
/* A counter's or gauge's value (read() for a callback gauge), a histogram's count. */
double metrics_value(metrics_series *s);
/* A histogram's sum and per-bucket (not cumulative) counts, counts[n_buckets] being the +Inf bucket; for
 * tests. */
void metrics_histogram_get(metrics_series *s, double *sum, uint64_t *counts, int max_counts);

/* The text exposition of every family, in registration order; malloc'd, NULL when out of memory. */
char *metrics_render(metrics *r);

/* n bucket bounds start, start * factor, ... (start > 0, factor > 1); returns n, or 0 on bad arguments. */
int metrics_buckets_exp(double start, double factor, int n, double *out);

/* This process's resident memory in bytes (/proc/self/statm), NaN where that cannot be read; fits
 * metrics_def.read. */
double metrics_rss_bytes(void *unused);

#endif
