/* lilac quantize IN OUT TYPE: a checkpoint or GGUF to a quantized GGUF, as
 * llama-quantize makes it (model/quantize.h). On a terminal the progress
 * (percentage and tensor) is redrawn in place on stderr. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model/quantize.h"

typedef struct progress_state {
    bool tty;
    bool drawn;      /* a progress line is on the screen */
    int last_pct;
    const char *last_name;
} progress_state;

static void clear_line(progress_state *p)
{
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        p->drawn = false;
    }
}

static void on_log(void *user, lilac_log_level level, const char *msg)
{
    clear_line(user);
    cli_log(NULL, level, msg);
}

static void on_progress(void *user, const char *tensor, uint64_t done, uint64_t total)
{
    progress_state *p = user;
    if (!p->tty)
        return;
    int pct = total ? (int)(done * 100 / total) : 100;
    if (pct == p->last_pct && tensor == p->last_name)
        return;
    p->last_pct = pct;
    p->last_name = tensor;
    fprintf(stderr, "\r\033[Klilac: quantizing %3d%%  %s", pct, tensor ? tensor : "");
    fflush(stderr);
    p->drawn = true;
}

static void help(FILE *f)
{
    fprintf(f,
            "usage: lilac quantize IN OUT.gguf TYPE [--threads N]\n"
            "\n"
            "IN is a Hugging Face checkpoint directory or a GGUF file (F32/F16/BF16; a quantized\n"
            "GGUF is requantized, with a warning). The output is what llama.cpp's llama-quantize\n"
            "makes of it: the same type for every tensor and the same bytes.\n"
            "\n"
            "TYPE: Q8_0, Q6_K, Q4_0            llama.cpp's file types of those names\n"
            "      Q4_K_M, Q5_K_M, Q4_K_S, Q5_K_S   its k-quant mixes\n"
            "      Q4_K, Q5_K                  every quantized tensor in that type (--pure)\n"
            "      BF16, F16, F32              the matrices in that type\n"
            "\n"
            "--threads N: threads that quantize (default: one per CPU; the bytes do not depend on it)\n");
}

int cmd_quantize(int argc, char **argv)
{
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0, threads = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            help(stdout);
            return 0;
        }
        if ((!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) && i + 1 < argc) {
            if ((threads = cli_parse_int(argv[++i])) < 0)
                return cli_fail("--threads wants a positive number, not '%s'", argv[i]);
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1])
            return cli_fail("quantize: unknown option '%s'", argv[i]);
        if (n_pos == 3)
            return cli_fail("quantize: unexpected argument '%s'", argv[i]);
        pos[n_pos++] = argv[i];
    }
    if (n_pos < 3) {
        fprintf(stderr, "lilac: error: quantize: usage: lilac quantize IN OUT.gguf TYPE (TYPE: %s)\n",
                lilac_quantize_type_names());
        return 2;
    }
    if (lilac_quantize_file_type(pos[2]) < 0) {
        fprintf(stderr, "lilac: error: quantize: unknown type '%s' (one of: %s)\n", pos[2],
                lilac_quantize_type_names());
        return 2;
    }
    progress_state ps = {.tty = isatty(2) != 0, .last_pct = -1};
    lilac_quantize_params qp = {
        .log = on_log, .log_user = &ps, .progress = on_progress, .progress_user = &ps, .n_threads = threads};
    lilac_error err;
    lilac_status s = lilac_quantize(pos[0], pos[1], pos[2], &qp, &err);
    clear_line(&ps);
    if (s)
        return cli_fail_err(&err);
    return 0;
}
