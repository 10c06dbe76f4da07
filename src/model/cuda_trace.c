/* cuda_trace: the kernels' own events of one decode step into a table (see
 * cuda_trace.h). */
#include "model/cuda_trace.h"

#include "util/env.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_names[LILAC_TK_COUNT] = {
    [LILAC_TK_NONE] = "?",
    [LILAC_TK_MV] = "k_mv",
    [LILAC_TK_MV_SCALAR] = "k_mv_scalar",
    [LILAC_TK_GET_ROW] = "k_get_rows",
    [LILAC_TK_RMSNORM] = "k_rmsnorm",
    [LILAC_TK_NORM_ROPE_KV] = "k_norm_rope_kv",
    [LILAC_TK_ATT_GQA] = "k_attention_gqa",
    [LILAC_TK_ATT_PART] = "k_attention_part",
    [LILAC_TK_ATT_COMBINE] = "k_attention_combine",
    [LILAC_TK_CONV_STEP] = "k_conv_step",
    [LILAC_TK_DN_FUSED] = "k_dn_fused",
    [LILAC_TK_ROUTE] = "k_route",
    [LILAC_TK_NORM_ROUTER] = "k_norm_router",
    [LILAC_TK_MOE_SUM_NORM] = "k_moe_sum_norm",
    [LILAC_TK_MOE_DOWN_SUM] = "k_moe_down_sum",
    [LILAC_TK_MVT] = "k_mvt",
};

const char *lilac_trace_kernel_name(int kernel)
{
    return kernel > 0 && kernel < LILAC_TK_COUNT ? k_names[kernel] : "?";
}

static int cmp_ev(const void *a, const void *b)
{
    const lilac_trace_ev *x = a, *y = b;
    if (x->gridid != y->gridid)
        return x->gridid < y->gridid ? -1 : 1;
    if (x->block != y->block)
        return x->block < y->block ? -1 : 1;
    return 0;
}

size_t lilac_trace_assemble(const lilac_trace_ev *ev, size_t n, lilac_trace_rec *out)
{
    lilac_trace_ev *s = malloc((n ? n : 1) * sizeof *s);
    if (!s)
        return 0;
    if (n)
        memcpy(s, ev, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_ev);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        lilac_trace_rec r = {s[i].gridid, s[i].smid, s[i].block, s[i].kernel, 0, 0, 0, {0, 0}};
        size_t j = i;
        for (; j < n && s[j].gridid == s[i].gridid && s[j].block == s[i].block; j++) {
            uint64_t t = s[j].t;
            if (s[j].kind == LILAC_TRACE_START && (!r.t_start || t < r.t_start))
                r.t_start = t, r.smid = s[j].smid;
            else if (s[j].kind == LILAC_TRACE_WAITED && (!r.t_waited || t < r.t_waited))
                r.t_waited = t;
            else if (s[j].kind == LILAC_TRACE_END && t > r.t_end)
                r.t_end = t;
            else if (s[j].kind == LILAC_TRACE_MARK1 || s[j].kind == LILAC_TRACE_MARK2) {
                uint64_t *mk = &r.t_mark[s[j].kind - LILAC_TRACE_MARK1];
                if (!*mk || t < *mk)
                    *mk = t;
            }
            if (s[j].kernel)
                r.kernel = s[j].kernel;
        }
        out[m++] = r;
        i = j;
    }
    free(s);
    return m;
}

static int cmp_rec(const void *a, const void *b)
{
    const lilac_trace_rec *x = a, *y = b;
    if (x->gridid != y->gridid)
        return x->gridid < y->gridid ? -1 : 1;
    if (x->t_start != y->t_start)
        return x->t_start < y->t_start ? -1 : 1;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_launch(const void *a, const void *b)
{
    const lilac_trace_launch *x = a, *y = b;
    if (x->start_us != y->start_us)
        return x->start_us < y->start_us ? -1 : 1;
    return x->gridid < y->gridid ? -1 : x->gridid > y->gridid;
}

size_t lilac_trace_launches(lilac_trace_rec *rec, size_t n, lilac_trace_launch *out)
{
    if (!n)
        return 0;
    qsort(rec, n, sizeof *rec, cmp_rec);
    uint64_t t0 = UINT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (rec[i].t_start && rec[i].t_start < t0)
            t0 = rec[i].t_start;
    if (t0 == UINT64_MAX)
        t0 = 0;
    uint64_t *w = malloc(n * sizeof *w);
    if (!w)
        return 0;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint64_t first = UINT64_MAX, last = 0;
        int incomplete = 0, kernel = 0;
        size_t nw = 0;
        for (; j < n && rec[j].gridid == rec[i].gridid; j++) {
            const lilac_trace_rec *r = &rec[j];
            incomplete += !r->t_start || !r->t_end;
            if (r->t_start && r->t_start < first)
                first = r->t_start;
            if (r->t_end > last)
                last = r->t_end;
            if (r->t_start && r->t_waited)
                w[nw++] = r->t_waited > r->t_start ? r->t_waited - r->t_start : 0;
            if (r->kernel)
                kernel = (int)r->kernel;
        }
        if (first == UINT64_MAX)
            first = last;
        if (last < first)
            last = first;
        lilac_trace_launch L = {rec[i].gridid, kernel, (int)(j - i), incomplete, 0, 0, 0, -1, -1, 0};
        L.start_us = (double)(first - t0) / 1e3;
        L.end_us = (double)(last - t0) / 1e3;
        L.dur_us = L.end_us - L.start_us;
        if (nw) {
            qsort(w, nw, sizeof *w, cmp_u64);
            L.wait_med_us = (nw % 2 ? (double)w[nw / 2] : ((double)w[nw / 2 - 1] + (double)w[nw / 2]) / 2) / 1e3;
            L.wait_max_us = (double)w[nw - 1] / 1e3;
        }
        out[m++] = L;
        i = j;
    }
    free(w);
    qsort(out, m, sizeof *out, cmp_launch);
    for (size_t k = 0; k < m; k++)
        out[k].gap_us = k ? out[k].start_us - out[k - 1].end_us : 0;
    return m;
}

int lilac_trace_op_kernels(const char *op, int kernels[2])
{
    static const struct {
        const char *op;
        int n, k[2];
    } t[] = {
        {"get_row", 1, {LILAC_TK_GET_ROW}},
        {"rmsnorm", 1, {LILAC_TK_RMSNORM}},
        {"matvec", 1, {LILAC_TK_MV}},
        {"matvec_experts", 1, {LILAC_TK_MV}},
        {"norm_rope_kv", 1, {LILAC_TK_NORM_ROPE_KV}},
        {"attention", 2, {LILAC_TK_ATT_GQA, LILAC_TK_ATT_COMBINE}},
        {"conv_step", 1, {LILAC_TK_CONV_STEP}},
        {"deltanet", 1, {LILAC_TK_DN_FUSED}},
        {"norm_router", 1, {LILAC_TK_NORM_ROUTER}},
        {"route", 1, {LILAC_TK_ROUTE}},
        {"moe_sum_norm", 1, {LILAC_TK_MOE_SUM_NORM}},
        {"moe_down_sum", 1, {LILAC_TK_MOE_DOWN_SUM}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].op, op)) {
            kernels[0] = t[i].k[0], kernels[1] = t[i].k[1];
            return t[i].n;
        }
    kernels[0] = kernels[1] = LILAC_TK_NONE;
    return 1;
}

/* Whether the device's kernel fits the name's (k_mv_scalar or k_mvt for k_mv, k_attention_part for _gqa). */
static int fits(int want, int got)
{
    if (!want || want == got)
        return 1;
    return (want == LILAC_TK_MV && (got == LILAC_TK_MV_SCALAR || got == LILAC_TK_MVT)) ||
           (want == LILAC_TK_ATT_GQA && got == LILAC_TK_ATT_PART);
}

/* The quantiles (min, 10 %, median, 90 %, max) of n times (sorted in place), in us from t0. */
static void quantiles(FILE *f, const char *what, uint64_t *t, size_t n, uint64_t t0)
{
    fprintf(f, " %s", what);
    if (!n) {
        fprintf(f, " -");
        return;
    }
    qsort(t, n, sizeof *t, cmp_u64);
    const size_t at[5] = {0, n / 10, n / 2, n - 1 - (n - 1) / 10, n - 1};
    for (int i = 0; i < 5; i++)
        fprintf(f, "%s%.2f", i ? "/" : " ", t[at[i]] >= t0 ? (double)(t[at[i]] - t0) / 1e3 : 0.0);
}

/* LILAC_CUDA_TRACE_BLOCKS=LAYER: for each launch of that layer, when its blocks started, returned from their
 * wait and ended (quantiles over blocks), and each block's work after its wait: whether a launch ran in waves,
 * waited for room on the SMs, or had stragglers. */
static void block_rows(FILE *f, const lilac_trace_launch *L, const lilac_trace_rec *rec, size_t n_rec, uint64_t t0,
                       const char *op)
{
    uint64_t *t = malloc((n_rec ? n_rec : 1) * sizeof *t);
    if (!t)
        return;
    const int kinds = 6;
    fprintf(f, "cuda trace blocks: %-14s %-20s %5d", op, lilac_trace_kernel_name(L->kernel), L->blocks);
    for (int kind = 0; kind < kinds; kind++) {
        size_t m = 0;
        for (size_t i = 0; i < n_rec; i++) {
            const lilac_trace_rec *r = &rec[i];
            if (r->gridid != L->gridid || !r->t_start)
                continue;
            if (kind == 0)
                t[m++] = r->t_start;
            else if (kind == 1 && r->t_waited)
                t[m++] = r->t_waited;
            else if (kind == 2 && r->t_end)
                t[m++] = r->t_end;
            else if (kind == 3 && r->t_mark[0])
                t[m++] = r->t_mark[0];
            else if (kind == 4 && r->t_mark[1])
                t[m++] = r->t_mark[1];
            else if (kind == 5 && r->t_end)
                t[m++] = r->t_end - (r->t_waited ? r->t_waited : r->t_start);
        }
        static const char *const what[] = {"start", "waited", "end", "mark1", "mark2", "work"};
        quantiles(f, what[kind], t, m, kind == 5 ? 0 : t0);
    }
    fprintf(f, "\n");
    free(t);
}

#define MATCH_AHEAD 8 /* names past the first one not taken that a launch may take */

size_t lilac_trace_match(const lilac_trace_launch *L, size_t n, const lilac_trace_name *names, size_t n_names,
                         long *out)
{
    unsigned char *taken = calloc(n_names ? n_names : 1, 1);
    if (!taken) { /* launch order */
        for (size_t k = 0; k < n; k++)
            out[k] = k < n_names ? (long)k : -1;
        return n < n_names ? n : n_names;
    }
    size_t next = 0, got = 0; /* next: the first name not taken */
    for (size_t k = 0; k < n; k++) {
        out[k] = -1;
        while (next < n_names && taken[next])
            next++;
        if (next >= n_names)
            continue;
        long pick = -1;
        /* a name of the same kernel and blocks first, then one of the same kernel whose blocks are not known */
        for (int pass = 0; pass < 2 && pick < 0; pass++)
            for (size_t j = next; j < n_names && j <= next + MATCH_AHEAD && pick < 0; j++)
                if (!taken[j] && names[j].kernel != LILAC_TK_NONE && fits(names[j].kernel, L[k].kernel) &&
                    (pass ? names[j].blocks == 0 : names[j].blocks == L[k].blocks))
                    pick = (long)j;
        if (pick < 0)
            pick = (long)next; /* launch order (the '!' marks it where the kernel does not fit) */
        taken[pick] = 1;
        out[k] = pick;
        got++;
    }
    free(taken);
    return got;
}

lilac_trace_totals lilac_trace_write(FILE *f, const lilac_trace_launch *L, size_t n, const lilac_trace_name *names,
                                     size_t n_names, const lilac_trace_rec *rec, size_t n_rec, uint64_t dropped)
{
    lilac_trace_totals T = {0};
    T.launches = (int)n;
    /* the timer's step: the smallest difference between two distinct times */
    uint64_t *t = malloc((3 * n_rec + 1) * sizeof *t);
    size_t nt = 0;
    for (size_t i = 0; t && i < n_rec; i++) {
        if (rec[i].t_start)
            t[nt++] = rec[i].t_start;
        if (rec[i].t_waited)
            t[nt++] = rec[i].t_waited;
        if (rec[i].t_end)
            t[nt++] = rec[i].t_end;
    }
    if (t && nt > 1) {
        qsort(t, nt, sizeof *t, cmp_u64);
        uint64_t d = 0;
        for (size_t i = 1; i < nt; i++)
            if (t[i] > t[i - 1] && (!d || t[i] - t[i - 1] < d))
                d = t[i] - t[i - 1];
        T.timer_ns = (double)d;
    }
    free(t);
    if (f) {
        fprintf(f, "cuda trace: %zu launches, %zu blocks%s", n, n_rec, dropped ? "" : "\n");
        if (dropped)
            fprintf(f, ", %llu event slots DROPPED (buffer full)\n", (unsigned long long)dropped);
        fprintf(f, "cuda trace: op names by launch order (%zu recorded): the k-th launch by first start is taken "
                   "for the k-th launched, but a launch takes the first of the next %d names whose kernel and "
                   "blocks are its own (kernels of the two streams may start in another order than launched); '!' "
                   "marks a device kernel that does not fit the name\n",
                n_names, MATCH_AHEAD);
        fprintf(f, "cuda trace: times in us from the step's first block start; dur: first start to last end; "
                   "wait: median (max) over blocks of griddepcontrol.wait return - block start; gap: from the "
                   "previous launch's last end (negative: overlap); timer step %.0f ns\n",
                T.timer_ns);
        fprintf(f, "%5s %3s %-15s %1s %-20s %6s %9s %8s %15s %8s\n", "#", "lyr", "op", "b", "kernel", "blocks",
                "start", "dur", "wait med (max)", "gap");
    }
    double main_end = -1;
    const int blocks_layer = lilac_env_int("LILAC_CUDA_TRACE_BLOCKS", -1, 0, INT_MAX);
    uint64_t t0 = UINT64_MAX;
    for (size_t i = 0; i < n_rec; i++)
        if (rec[i].t_start && rec[i].t_start < t0)
            t0 = rec[i].t_start;
    long *pick = malloc((n ? n : 1) * sizeof *pick);
    if (pick)
        lilac_trace_match(L, n, names, n_names, pick);
    for (size_t k = 0; k < n; k++) {
        const lilac_trace_name *nm = pick ? (pick[k] >= 0 ? &names[pick[k]] : NULL) : k < n_names ? &names[k] : NULL;
        const int bad = nm && !fits(nm->kernel, L[k].kernel);
        const int branch = nm ? nm->branch : 0;
        T.mismatched += bad;
        if (branch == 0) {
            T.main_dur_us += L[k].dur_us;
            if (main_end >= 0)
                T.main_gap_us += L[k].start_us - main_end;
            main_end = L[k].end_us;
        }
        if (k)
            T.all_gap_us += L[k].gap_us;
        if (L[k].end_us > T.step_us)
            T.step_us = L[k].end_us;
        if (!f)
            continue;
        if (blocks_layer >= 0 && nm && nm->layer == blocks_layer)
            block_rows(f, &L[k], rec, n_rec, t0, nm->op);
        char wait[48] = "-", lyr[16] = "";
        if (L[k].wait_med_us >= 0)
            snprintf(wait, sizeof wait, "%.2f (%.2f)", L[k].wait_med_us, L[k].wait_max_us);
        if (nm && nm->layer >= 0)
            snprintf(lyr, sizeof lyr, "%d", nm->layer);
        fprintf(f, "%5zu %3s %-15s %1s %-20s %6d %9.2f %8.2f %15s %8.2f%s%s\n", k, lyr, nm ? nm->op : "?",
                branch ? "a" : "", lilac_trace_kernel_name(L[k].kernel), L[k].blocks, L[k].start_us, L[k].dur_us,
                wait, L[k].gap_us, bad ? " !" : "", L[k].incomplete ? " (incomplete blocks)" : "");
    }
    if (f) {
        fprintf(f, "cuda trace: step %.2f us (first start to last end); main path (b blank): durations %.2f us, gaps "
                   "%.2f us (each from the previous main-path launch's end); all launches' gaps %.2f us\n",
                T.step_us, T.main_dur_us, T.main_gap_us, T.all_gap_us);
        if (n != n_names || T.mismatched)
            fprintf(f, "cuda trace: %zu launches recorded, %zu names; %d rows do not fit their names: the "
                       "names are off from the first '!'\n",
                    n, n_names, T.mismatched);
    }
    free(pick);
    return T;
}
