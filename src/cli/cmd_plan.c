/* lilac plan (memory) and lilac doctor (what a user checks first). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "cli/cli.h"

static const double GiB = 1073741824.0;

/* Whether the plan fits, and what to change when it does not (no context fits: `otherwise`). */
static void print_verdict(const lilac_mem_report *r, const char *otherwise)
{
    if (r->fits)
        printf("fits: %.2f GiB to spare; the largest context that fits is %d\n", (r->budget - r->total) / GiB,
               r->max_ctx);
    else
        printf("does NOT fit: %.2f GiB short; %s\n", (r->total - r->budget) / GiB,
               r->max_ctx ? "lower the context or the number of parallel sequences" : otherwise);
}

static void print_plan(const lilac_mem_report *r, int ctx, int par, int kv_type)
{
    printf("memory plan for context %d x %d sequence%s:\n", ctx, par, par > 1 ? "s" : "");
    printf("  weights          %9.3f GiB (mapped, or repacked for the CPU: the same size; a MoE touches all)\n", r->weights / GiB);
    printf("  KV cache         %9.3f GiB (full-attention layers only, %s)\n", r->kv / GiB,
           kv_type == LILAC_KV_F16 ? "IEEE half" : "float32; --kv-type f16 halves it");
    printf("  recurrent state  %9.3f GiB (DeltaNet conv + state)\n", r->recurrent / GiB);
    printf("  scratch          %9.3f GiB\n", r->scratch / GiB);
    printf("  other            %9.3f GiB (tokenizer, small tensors, runtime)\n", r->other / GiB);
    printf("  total            %9.3f GiB\n", r->total / GiB);
    printf("machine: %.2f GiB total, %.2f GiB available, swap %.2f GiB", r->mem_total / GiB, r->mem_available / GiB,
           r->swap_total / GiB);
    if (r->cgroup_limit)
        printf(", cgroup limit %.2f GiB (%.2f used)", r->cgroup_limit / GiB, r->cgroup_usage / GiB);
    printf("\n");
    print_verdict(r, "use a smaller quantization or free memory");
}

/* GiB from 1 GiB on, MiB below (the tiny models' numbers stay readable). */
static void bytes9(uint64_t b)
{
    if (b >= (1ull << 30))
        printf("%9.3f GiB", b / GiB);
    else
        printf("%9.1f MiB", b / 1048576.0);
}

static void print_gpu_plan(const lilac_mem_report *r, int ctx, int par)
{
    printf("GPU memory plan for context %d x %d sequence%s:\n", ctx, par, par > 1 ? "s" : "");
    const struct {
        const char *name;
        uint64_t bytes;
        const char *what;
    } rows[] = {
        {"weights        ", r->weights, "uploaded as the file holds them"},
        {"KV cache       ", r->kv, "full-attention layers only, float32"},
        {"recurrent state", r->recurrent, "DeltaNet conv + state"},
        {"scratch        ", r->scratch, "one-token and prefill-chunk buffers, tensor-core scratch, logits"},
        {"other          ", r->other, "margin: CUDA context, allocator granularity, graphs"},
        {"total          ", r->total, NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        printf("  %s  ", rows[i].name);
        bytes9(rows[i].bytes);
        printf(rows[i].what ? " (%s)\n" : "\n", rows[i].what);
    }
    printf("prefill chunks of up to %d tokens\n", r->pf_rows);
    if (!r->have_device) {
        printf("no CUDA device to compare with: %s\n", r->device);
        return;
    }
    printf("gpu: %s, %.2f GiB free", r->device, r->mem_available / GiB);
    if (r->held)
        printf(", %.2f GiB held by this model", r->held / GiB);
    if (r->budget < r->mem_available + r->held)
        printf(", LILAC_GPU_MEM_LIMIT caps it at %.2f GiB", r->budget / GiB);
    printf("\n");
    print_verdict(r, "use a smaller quantization, free GPU memory or --backend cpu");
}

int cmd_plan(int argc, char **argv)
{
    const char *model = NULL;
    int ctx = 4096, par = 1;
    /* --backend (main.c passes it on as LILAC_BACKEND): cuda plans device memory; auto does where a GPU can
     * be used; cpu, or neither given, host memory */
    const char *be = getenv("LILAC_BACKEND");
    int backend = be && *be ? lilac_backend_parse(be) : LILAC_BACKEND_CPU;
    char why[320];
    bool gpu = backend == LILAC_BACKEND_CUDA || (backend == LILAC_BACKEND_AUTO && lilac_gpu_describe(why, sizeof why));
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(a, "--ctx") && i + 1 < argc) {
            if ((ctx = cli_parse_int(argv[++i])) < 1)
                return cli_fail("plan: --ctx wants a positive number, not '%s'", argv[i]);
        } else if (!strcmp(a, "--parallel") && i + 1 < argc) {
            if ((par = cli_parse_int(argv[++i])) < 1)
                return cli_fail("plan: --parallel wants a positive number, not '%s'", argv[i]);
        } else
            return cli_fail("plan: unknown or incomplete option '%s'", a);
    }
    if (!model)
        return cli_fail("%s", "plan: no model given (-m MODEL)");
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = 1;
    mp.log = cli_log;
    mp.backend = LILAC_BACKEND_CPU; /* a plan never uploads the weights */
    lilac_model *m;
    lilac_error err;
    if (lilac_model_open(model, &mp, &m, &err))
        return cli_fail_err(&err);
    lilac_mem_report r = gpu ? lilac_model_gpu_mem_report(m, ctx, par) : lilac_model_mem_report(m, ctx, par);
    if (gpu)
        print_gpu_plan(&r, ctx, par);
    else
        print_plan(&r, ctx, par, lilac_model_kv_type(m));
    lilac_model_free(m);
    return r.fits ? 0 : 1; /* no device: not fits */
}

/* Single-thread read bandwidth over a buffer larger than the caches. */
static double read_bandwidth(void)
{
    size_t n = (size_t)256 << 20;
    uint64_t *buf = malloc(n);
    if (!buf)
        return 0;
    for (size_t i = 0; i < n / 8; i++)
        buf[i] = i;
    struct timespec a, b;
    uint64_t sum = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < n / 8; i += 4)
            sum += buf[i] ^ buf[i + 1] ^ buf[i + 2] ^ buf[i + 3];
    clock_gettime(CLOCK_MONOTONIC, &b);
    free(buf);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    return sum == 42 ? 0 : 2.0 * n / s;
}

int cmd_doctor(int argc, char **argv)
{
    const char *model = NULL;
    int ctx = 4096;
    for (int i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            if ((ctx = cli_parse_int(argv[++i])) < 1)
                return cli_fail("doctor: --ctx wants a positive number, not '%s'", argv[i]);
        } else
            return cli_fail("doctor: unknown or incomplete option '%s'", argv[i]);
    }
    int problems = 0;
    char cpu[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    bool avx2 = false, avx512 = false, vnni = false, neon = false;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10) && strchr(line, ':'))
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2), cpu[strcspn(cpu, "\n")] = 0;
        if (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)) {
            avx2 = strstr(line, " avx2") != NULL;
            avx512 = strstr(line, " avx512bw") != NULL;
            vnni = strstr(line, " avx512_vnni") != NULL;
            neon = strstr(line, " asimd") != NULL;
        }
    }
    if (f)
        fclose(f);
    printf("cpu:      %s, %ld online cores\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
    printf("simd:     avx2 %s, avx512bw %s, avx512_vnni %s, neon %s\n", avx2 ? "yes" : "no", avx512 ? "yes" : "no",
           vnni ? "yes" : "no", neon ? "yes" : "no");
    if (!avx2 && !neon) {
        printf("problem:  no AVX2 or NEON: lilac runs its scalar kernels, many times slower; use a newer CPU\n");
        problems++;
    }
    double bw = read_bandwidth();
    printf("memory:   read bandwidth ~%.1f GB/s (one thread)\n", bw / 1e9);
    lilac_model *m = NULL;
    lilac_error err;
    if (model) {
        lilac_model_params mp = lilac_model_default_params();
        mp.log = cli_log;
        if (lilac_model_open(model, &mp, &m, &err)) {
            printf("problem:  %s\n", err.msg);
            problems++;
        }
    }
    printf("libs:     jansson %s, pcre2 %d.%d, utf8proc %s\n", JANSSON_VERSION, PCRE2_MAJOR, PCRE2_MINOR,
           utf8proc_version());
    char gpu[320];
    if (lilac_gpu_describe(gpu, sizeof gpu)) {
        printf("gpu:      %s: models run there (--backend cpu to keep them on the CPU)\n", gpu);
    } else if (access("/dev/nvidia0", F_OK) == 0) {
        printf("gpu:      an NVIDIA device is present but lilac cannot use it: %s\n", gpu);
        printf("problem:  the GPU is unused: %s\n", gpu);
        problems++;
    } else {
        printf("gpu:      none usable (%s); models run on the CPU\n", gpu);
    }
    if (m) {
        lilac_mem_report r = lilac_model_mem_report(m, ctx, 1);
        printf("model:    %s: %s, %.2f GiB, %.2f B parameters, %.2f GiB read per token\n", model,
               lilac_model_arch_name(m), lilac_model_weight_bytes(m) / GiB, lilac_model_n_params(m) / 1e9,
               lilac_model_active_bytes(m) / GiB);
        print_plan(&r, ctx, 1, lilac_model_kv_type(m));
        if (!r.fits) {
            printf("problem:  the model does not fit at context %d: %s\n", ctx,
                   r.max_ctx ? "lower --ctx" : "use a smaller quantization");
            problems++;
        }
        if (!strcmp(lilac_model_backend(m), "cuda")) {
            lilac_mem_report g = lilac_model_gpu_mem_report(m, ctx, 1);
            printf("gpu plan: %.2f GiB of device memory at context %d, %.2f GiB available: %s (lilac plan "
                   "--backend cuda for the parts)\n",
                   g.total / GiB, ctx, g.budget / GiB, g.fits ? "fits" : "does NOT fit");
            if (!g.fits) {
                printf("problem:  the model does not fit in GPU memory at context %d: %s\n", ctx,
                       g.max_ctx ? "lower --ctx" : "use a smaller quantization or --backend cpu");
                problems++;
            }
        }
        if (r.swap_total > 0)
            printf("note:     swap is on; lilac refuses plans that do not fit in memory, so it never relies on it\n");
        if (bw > 0)
            printf("speed:    the memory bound is about %.0f tok/s of generation with all cores streaming "
                   "(~%.1f tok/s per core's bandwidth measured here)\n",
                   bw * 2 / (double)lilac_model_active_bytes(m), bw / (double)lilac_model_active_bytes(m));
        lilac_model_free(m);
    }
    printf("%d problem%s found\n", problems, problems == 1 ? "" : "s");
    return problems ? 1 : 0;
}
