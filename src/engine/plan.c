/* plan: the memory a model and its sequences need, against what the
 * machine (and its cgroup) can give; run, chat, bench and serve refuse to
 * start when it would not fit, rather than swap or be killed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/err.h"

static uint64_t meminfo(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            sscanf(line + kl + 1, "%llu", &kib);
            break;
        }
    if (f)
        fclose(f);
    return (uint64_t)kib * 1024;
}

static uint64_t read_u64_file(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    char buf[64];
    if (f && fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) != 0)
        sscanf(buf, "%llu", &v);
    if (f)
        fclose(f);
    return (uint64_t)v;
}

/* This process's cgroup memory limit and usage (v2, then v1); 0 if none. */
static void cgroup_memory(uint64_t *limit, uint64_t *usage)
{
    *limit = *usage = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024], path[1400];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *p = NULL;
        if (!strncmp(line, "0::", 3)) { /* v2 */
            p = line + 3;
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", p);
            uint64_t l = read_u64_file(path);
            if (l) {
                *limit = l;
                snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", p);
                *usage = read_u64_file(path);
            }
        } else if ((p = strstr(line, ":memory:"))) { /* v1 */
            p += 8;
            const char *cand[] = {"/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
                                  "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
            for (int i = 0; i < 2 && !*limit; i++) {
                snprintf(path, sizeof path, cand[i], p);
                uint64_t l = read_u64_file(path);
                if (l && l < (1ull << 60)) { /* "no limit" is a huge number in v1 */
                    *limit = l;
                    char *e = strstr(path, "limit_in_bytes");
                    if (e) {
                        strcpy(e, "usage_in_bytes");
                        *usage = read_u64_file(path);
                    }
                }
            }
        }
    }
    if (f)
        fclose(f);
}

static uint64_t need(const lilac_model *m, int n_ctx, int n_parallel, lilac_mem_report *r)
{
    lilac_mem_plan p = lilac_model_mem_plan(m, n_ctx, 256);
    r->weights = m->weight_bytes;
    r->kv = p.kv_bytes * (uint64_t)n_parallel;
    r->recurrent = p.recurrent_bytes * (uint64_t)n_parallel;
    r->scratch = p.scratch_bytes * (uint64_t)n_parallel;
    /* converted small tensors, the tokenizer (~64 bytes a token), logits,
     * and the runtime's own */
    r->other = m->owned_bytes + (uint64_t)m->hp.n_vocab * (64 + 4 * 2) + (48ull << 20);
    return r->weights + r->kv + r->recurrent + r->scratch + r->other;
}

lilac_mem_report lilac_model_mem_report(const lilac_model *m, int n_ctx, int n_parallel)
{
    lilac_mem_report r;
    memset(&r, 0, sizeof r);
    if (n_parallel < 1)
        n_parallel = 1;
    r.total = need(m, n_ctx, n_parallel, &r);
    r.mem_total = meminfo("MemTotal");
    r.mem_available = meminfo("MemAvailable");
    r.swap_total = meminfo("SwapTotal");
    cgroup_memory(&r.cgroup_limit, &r.cgroup_usage);
    r.budget = r.mem_available;
    /* LILAC_MEM_LIMIT (bytes, or with a K/M/G suffix) caps what lilac may use */
    const char *cap = getenv("LILAC_MEM_LIMIT");
    if (cap && *cap) {
        char *end;
        double v = strtod(cap, &end);
        double mult = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                    : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
        if (v > 0 && v * mult < (double)r.budget)
            r.budget = (uint64_t)(v * mult);
    }
    if (r.cgroup_limit) {
        uint64_t room = r.cgroup_limit > r.cgroup_usage ? r.cgroup_limit - r.cgroup_usage : 0;
        if (room < r.budget)
            r.budget = room;
    }
    /* Pages of the weights already in the page cache count in
     * MemAvailable as reclaimable, so a loaded file does not count twice. */
    r.fits = r.total <= r.budget;
    /* the largest context that fits, by halving from the trained one */
    lilac_mem_report t;
    for (int c = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 32768; c >= 256; c /= 2)
        if (need(m, c, n_parallel, &t) <= r.budget) {
            r.max_ctx = c;
            break;
        }
    return r;
}

lilac_status lilac_model_mem_check(const lilac_model *m, int n_ctx, int n_parallel, lilac_error *err)
{
    lilac_mem_report r = lilac_model_mem_report(m, n_ctx, n_parallel);
    if (r.fits)
        return LILAC_OK;
    const double G = 1073741824.0;
    char advice[256];
    if (r.max_ctx > 0)
        snprintf(advice, sizeof advice, "use a context of %d or less%s", r.max_ctx,
                 n_parallel > 1 ? ", fewer parallel sequences" : "");
    else
        snprintf(advice, sizeof advice, "use a smaller quantization (%.2f GiB less) or free memory",
                 (r.total - r.budget) / G);
    return lilac_fail(err, LILAC_E_NOMEM,
                      "%s: needs %.2f GiB (weights %.2f, KV cache %.2f, recurrent state %.2f, scratch %.2f, other "
                      "%.2f) for context %d x %d but %.2f GiB is available%s; %s",
                      m->path, r.total / G, r.weights / G, r.kv / G, r.recurrent / G, r.scratch / G, r.other / G,
                      n_ctx, n_parallel, r.budget / G, r.budget < r.mem_available ? " (a limit applies)" : "", advice);
}
