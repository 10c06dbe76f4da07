/* plan: the memory a model and its sequences need, against what the
 * machine (and its cgroup) can give; run, chat, bench and serve refuse to
 * start when it would not fit, rather than swap or be killed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "kernels/cuda/cuda.h"
#include "model/cuda_mem.h"
#include "model/decoder_cuda.h"
#include "model/model.h"
#include "util/env.h"
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

/* A byte count from the environment (bytes, or with a K/M/G suffix); 0 when unset or not positive. */
static uint64_t env_bytes(const char *name)
{
    const char *cap = getenv(name);
    if (!cap || !*cap)
        return 0;
    char *end;
    double v = strtod(cap, &end);
    double mult = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    return v > 0 ? (uint64_t)(v * mult) : 0;
}

/* The largest context that fits budget, by halving from the trained one (0: none from 256 up). */
static int max_ctx(const lilac_model *m, int n_parallel, uint64_t budget,
                   uint64_t (*need_fn)(const lilac_model *, int, int, lilac_mem_report *))
{
    lilac_mem_report t;
    for (int c = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 32768; c >= 256; c /= 2)
        if (need_fn(m, c, n_parallel, &t) <= budget)
            return c;
    return 0;
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
    uint64_t cap = env_bytes("LILAC_MEM_LIMIT");
    if (cap && cap < r.budget)
        r.budget = cap;
    if (r.cgroup_limit) {
        uint64_t room = r.cgroup_limit > r.cgroup_usage ? r.cgroup_limit - r.cgroup_usage : 0;
        if (room < r.budget)
            r.budget = room;
    }
    /* Pages of the weights already in the page cache count in
     * MemAvailable as reclaimable, so a loaded file does not count twice. */
    r.fits = r.total <= r.budget;
    r.max_ctx = max_ctx(m, n_parallel, r.budget, need);
    return r;
}

/* Device memory for the model on the CUDA backend (model/cuda_mem.c's sizes, which the allocations use), with
 * prefill buffers of pf_rows rows. */
static uint64_t need_gpu_rows(const lilac_model *m, int n_ctx, int n_parallel, int pf_rows, lilac_mem_report *r)
{
    const lilac_hparams *hp = &m->hp;
    const uint64_t P = (uint64_t)n_parallel;
    lilac_cuda_seq_sizes s = lilac_cuda_seq_sizes_of(hp, n_ctx);
    uint64_t n_tensors = 0;
    for (size_t i = 0; i < m->n_counts; i++)
        n_tensors += m->counts[i].n_tensors;
    r->weights = m->weight_bytes; /* uploaded as the file holds them (tied embeddings once) */
    r->kv = (uint64_t)s.kv * P;
    r->recurrent = (uint64_t)s.recurrent * P;
    r->pf_rows = pf_rows;
    r->scratch = lilac_cuda_decode_sizes(hp, NULL) + lilac_cuda_prefill_sizes(hp, pf_rows, NULL) +
                 lilac_cuda_mma_scratch_bound(hp, pf_rows) + lilac_cuda_attn_split_bound(hp, n_ctx) +
                 (uint64_t)s.scores * P;
    r->other = LILAC_CUDA_MARGIN_BASE + n_tensors * LILAC_CUDA_MARGIN_TENSOR + P * LILAC_CUDA_MARGIN_SEQ;
    return r->weights + r->kv + r->recurrent + r->scratch + r->other;
}

/* need_gpu_rows at the prefill buffers' fewest rows (or LILAC_CUDA_PREFILL_CHUNK's, where larger): max_ctx's. */
static uint64_t need_gpu(const lilac_model *m, int n_ctx, int n_parallel, lilac_mem_report *r)
{
    return need_gpu_rows(m, n_ctx, n_parallel, lilac_cuda_pf_rows(), r);
}

/* The prefill chunk's rows for this plan: LILAC_CUDA_PREFILL_CHUNK's where it asks for more than PF_MAX; else
 * the first of PF_BIG, PF_MID whose rows the whole plan fits the budget with (a 35B-A3B pp4096: 12,014 tok/s in
 * one 4096-token chunk, 11,201 in 2048-token ones, ~7,100 in 512-token ones, H200; pp512 the same); else PF_MAX.
 * LILAC_CUDA_PREFILL_AUTO=0 keeps PF_MAX. */
static int plan_pf_rows(const lilac_model *m, int n_ctx, int n_parallel, uint64_t budget)
{
    const int env = lilac_cuda_pf_rows();
    if (env > LILAC_CUDA_PF_MAX || !lilac_env_switch("LILAC_CUDA_PREFILL_AUTO", true))
        return env;
    static const int choices[] = {LILAC_CUDA_PF_BIG, LILAC_CUDA_PF_MID};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        lilac_mem_report t;
        memset(&t, 0, sizeof t);
        if (need_gpu_rows(m, n_ctx, n_parallel, choices[i], &t) <= budget)
            return choices[i];
    }
    return env;
}

lilac_mem_report lilac_model_gpu_mem_report_budget(const lilac_model *m, int n_ctx, int n_parallel, uint64_t budget)
{
    lilac_mem_report r;
    memset(&r, 0, sizeof r);
    if (n_parallel < 1)
        n_parallel = 1;
    r.gpu = true;
    r.total = need_gpu_rows(m, n_ctx, n_parallel, plan_pf_rows(m, n_ctx, n_parallel, budget), &r);
    r.budget = budget;
    r.fits = r.total <= r.budget;
    r.max_ctx = max_ctx(m, n_parallel, r.budget, need_gpu);
    return r;
}

lilac_mem_report lilac_model_gpu_mem_report(const lilac_model *m, int n_ctx, int n_parallel)
{
    char why[192] = "";
    size_t total = 0, free_b = 0;
    int ccM = 0, ccm = 0;
    bool have = lilac_cuda_available(why, sizeof why) != 0;
    char name[128] = "";
    if (have)
        lilac_cuda_device_info(name, sizeof name, &total, &free_b, &ccM, &ccm);
    uint64_t held = m->cuda ? lilac_cuda_model_bytes(m->cuda) : 0, budget = have ? (uint64_t)free_b + held : 0;
    uint64_t cap = env_bytes("LILAC_GPU_MEM_LIMIT");
    if (cap && cap < budget)
        budget = cap;
    lilac_mem_report r = lilac_model_gpu_mem_report_budget(m, n_ctx, n_parallel, budget);
    r.have_device = have;
    r.held = held;
    r.mem_total = total;
    r.mem_available = free_b;
    if (have)
        snprintf(r.device, sizeof r.device, "%s (%.1f GiB, sm_%d%d)", name, total / 1073741824.0, ccM, ccm);
    else
        snprintf(r.device, sizeof r.device, "%s", why[0] ? why : "no CUDA device");
    return r;
}

/* The refusal: the numbers, and what to change (gpu: the device plan's wording). */
static lilac_status refuse(const lilac_model *m, const lilac_mem_report *r, int n_ctx, int n_parallel, bool gpu,
                           lilac_error *err)
{
    const double G = 1073741824.0;
    char advice[256], where[256];
    if (r->max_ctx > 0)
        snprintf(advice, sizeof advice, "use a context of %d or less%s", r->max_ctx,
                 n_parallel > 1 ? ", fewer parallel sequences" : "");
    else
        snprintf(advice, sizeof advice, "use a smaller quantization (%.2f GiB less)%s", (r->total - r->budget) / G,
                 gpu ? ", free GPU memory or run on the CPU (--backend cpu)" : " or free memory");
    if (gpu)
        snprintf(where, sizeof where, "%s has %.2f GiB available", r->have_device ? r->device : "no CUDA device",
                 r->budget / G);
    else
        snprintf(where, sizeof where, "%.2f GiB is available", r->budget / G);
    const bool limited = r->budget < r->mem_available + (gpu ? r->held : 0);
    return lilac_fail(err, LILAC_E_NOMEM,
                      "%s: needs %.2f GiB%s (weights %.2f, KV cache %.2f, recurrent state %.2f, scratch %.2f, other "
                      "%.2f) for context %d x %d but %s%s; %s",
                      m->path, r->total / G, gpu ? " of GPU memory" : "", r->weights / G, r->kv / G, r->recurrent / G,
                      r->scratch / G, r->other / G, n_ctx, n_parallel, where, limited ? " (a limit applies)" : "",
                      advice);
}

lilac_status lilac_model_mem_check(const lilac_model *m, int n_ctx, int n_parallel, lilac_error *err)
{
    /* on the CUDA backend the sequences live in device memory: that first (lilac_cuda_seq_new checks each
     * sequence again as it allocates it) */
    if (n_parallel < 1)
        n_parallel = 1;
    if (m->cuda) {
        lilac_mem_report g = lilac_model_gpu_mem_report(m, n_ctx, n_parallel);
        if (!g.fits)
            return refuse(m, &g, n_ctx, n_parallel, true, err);
        lilac_cuda_model_pf_rows_set(m->cuda, g.pf_rows); /* the prefill buffers the plan counted */
    }
    lilac_mem_report r = lilac_model_mem_report(m, n_ctx, n_parallel);
    return r.fits ? LILAC_OK : refuse(m, &r, n_ctx, n_parallel, false, err);
}
