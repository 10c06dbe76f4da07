/* lilac synth: a GGUF of random weights in a published model's shape. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/dtype.h"
#include "model/synth.h"

static const char *synth_usage =
    "usage: lilac synth --preset NAME --type MIX [--tokenizer PATH] [--seed N] -o FILE.gguf\n"
    "       lilac synth --preset NAME --type MIX [--tokenizer PATH] --dry-run\n"
    "  --preset NAME     qwen3.6-35b-a3b, qwen3-30b-a3b; tiny, tiny-qwen3moe (the test fixtures' shapes)\n"
    "  --type MIX        F32, BF16, Q8_0 or Q4_K_M\n"
    "  --tokenizer PATH  a tokenizer.json, a directory holding one, or a GGUF with tokenizer.ggml.*;\n"
    "                    padded to the preset's vocabulary. Default: a byte-level vocabulary\n"
    "                    (256 byte tokens, <|endoftext|>, <|im_start|>, <|im_end|>; no chat template)\n"
    "  --seed N          the random values (default 1); the same seed gives the same file\n"
    "  -o FILE           the file to write (via FILE.tmp; nothing is left behind on failure)\n"
    "  --dry-run         list the tensors and the size, write nothing\n";

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void print_plan(const lilac_synth_plan *pl, bool list)
{
    if (list) {
        for (size_t i = 0; i < pl->n_tensors; i++) {
            const lilac_synth_tensor *t = &pl->tensors[i];
            char shape[96];
            int o = snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < t->n_dims; d++)
                o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%" PRId64, d ? ", " : "", t->ne[d]);
            snprintf(shape + o, sizeof shape - (size_t)o, "]");
            printf("%-34s %-5s %-22s %12" PRIu64 "\n", t->name, lilac_dtype_get(t->type)->name, shape, t->nbytes);
        }
    }
    printf("preset %s (%s, %d layers ", pl->preset, pl->arch, pl->n_layer);
    for (int i = 0; i < pl->n_layer; i++)
        putchar(pl->is_ssm[i] ? 'D' : 'A');
    printf("), type %s: %zu tensors, %.3f B parameters, vocabulary %" PRId64 "\n", pl->mix, pl->n_tensors,
           pl->n_params / 1e9, pl->n_vocab);
    /* bytes by type, in order of first appearance */
    int types[16];
    size_t n_types = 0, count[16] = {0};
    uint64_t bytes[16] = {0};
    for (size_t i = 0; i < pl->n_tensors; i++) {
        size_t k = 0;
        while (k < n_types && types[k] != pl->tensors[i].type)
            k++;
        if (k == n_types) {
            if (n_types == 16)
                continue;
            types[n_types++] = pl->tensors[i].type;
        }
        count[k]++;
        bytes[k] += pl->tensors[i].nbytes;
    }
    for (size_t k = 0; k < n_types; k++)
        printf("  %-6s %5zu tensors %15" PRIu64 " bytes  %9.4f GiB\n", lilac_dtype_get(types[k])->name, count[k],
               bytes[k], bytes[k] / 1073741824.0);
    uint64_t pad = pl->data_bytes;
    for (size_t i = 0; i < pl->n_tensors; i++)
        pad -= pl->tensors[i].nbytes;
    printf("  header (%" PRIu64 " metadata keys, tokenizer, tensor infos) %" PRIu64 " bytes, alignment padding %" PRIu64
           " bytes\n",
           pl->n_kv, pl->header_bytes, pad);
    printf("  total  %" PRIu64 " bytes = %.2f GiB (tensor data %.4f GiB)\n", pl->file_bytes,
           pl->file_bytes / 1073741824.0, pl->data_bytes / 1073741824.0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_synth(int argc, char **argv)
{
    lilac_synth_params p = {.seed = 1};
    const char *out = NULL;
    bool dry = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(synth_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--dry-run")) {
            dry = true;
        } else if (!v && (!strcmp(a, "--preset") || !strcmp(a, "--type") || !strcmp(a, "--tokenizer") ||
                          !strcmp(a, "--seed") || !strcmp(a, "-o") || !strcmp(a, "--output"))) {
            return cli_fail("synth: option '%s' needs a value", a);
        } else if (!strcmp(a, "--preset")) {
            p.preset = argv[++i];
        } else if (!strcmp(a, "--type")) {
            p.type = argv[++i];
        } else if (!strcmp(a, "--tokenizer")) {
            p.tokenizer = argv[++i];
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = argv[++i];
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 0);
            if (errno || end == v || *end || *v == '-')
                return cli_fail("synth: --seed wants a non-negative integer, not '%s'", v);
            p.seed = s;
            i++;
        } else {
            fputs(synth_usage, stderr);
            return cli_fail("synth: unknown option '%s'", a);
        }
    }
    if (!p.preset || !p.type || (!out && !dry)) {
        fputs(synth_usage, stderr);
        return cli_fail("%s", !p.preset ? "synth: no --preset given"
                              : !p.type ? "synth: no --type given"
                                        : "synth: no output file given (-o FILE.gguf, or --dry-run)");
    }
    p.log = cli_log;
    lilac_error err;
    lilac_synth_plan *plan = NULL;
    if (dry) {
        if (lilac_synth_plan_new(&p, &plan, &err))
            return cli_fail_err(&err);
        print_plan(plan, true);
        lilac_synth_plan_free(plan);
        return 0;
    }
    p.progress = isatty(2);
    p.interrupt = &interrupted;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    double t0 = now_s();
    lilac_status s = lilac_synth_write(&p, out, &plan, &err);
    double dt = now_s() - t0;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (s)
        return cli_fail_err(&err);
    print_plan(plan, false);
    printf("wrote %s in %.1f s (%.0f MiB/s)\n", out, dt, plan->file_bytes / 1048576.0 / (dt > 0 ? dt : 1));
    lilac_synth_plan_free(plan);
    return 0;
}
