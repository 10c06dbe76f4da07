/* lilac: the command line, a thin client of the library. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "lilac.h"
#include "model/convert.h"

static void usage(FILE *f)
{
    fputs("usage: lilac COMMAND [options]\n"
          "\n"
          "commands:\n"
          "  run -m MODEL -p PROMPT [options]   generate text, streamed (lilac run --help)\n"
          "  serve -m MODEL [--port 8080] [--parallel 4] [--ctx 4096] [--queue 16] ...\n"
          "                                an OpenAI-compatible HTTP service (lilac serve --help)\n"
          "  batch -m MODEL -i REQUESTS.jsonl -o RESULTS.jsonl   offline requests, resumable\n"
          "  chat -m MODEL [options]       an interactive conversation; each turn costs only its tokens\n"
          "  tokenize -m MODEL (--text T | --file F | --jsonl [--file F] | --decode IDS)\n"
          "                                token ids, or the text of ids (MODEL may be a tokenizer.json)\n"
          "  bench -m MODEL [-p 512] [-n 64] [-d DEPTH[,DEPTH...]] [-t THREADS] [-P PARALLEL] [-r REPS] [--json] [--precise]\n"
          "                                prompt processing and generation speed (llama-bench's tests);\n"
          "                                -P N: generation of N sequences together (total tokens/s),\n"
          "                                after one sequence alone\n"
          "  eval -m MODEL -f TEXT [--ctx 512] [--reference REF] [--save-logits F] [--json]\n"
          "  eval --compare A.gguf B.gguf ... --reference REF -f TEXT\n"
          "                                perplexity; KL and top-1 against a reference model or logits\n"
          "  plan -m MODEL [--ctx N] [--parallel P] [--backend cuda]\n"
          "                                memory needed against memory available (--backend cuda:\n"
          "                                device memory against the GPU's; default: host memory)\n"
          "  doctor [-m MODEL]             CPU, SIMD paths, memory, libraries; whether a model fits\n"
          "  info MODEL [--ctx N]          architecture, hyper-parameters, tensors, memory\n"
          "  verify FILE... [--sha256 HEX | --manifest SUMS]\n"
          "                                SHA-256 of model files, as sha256sum prints it or checked\n"
          "                                against a published hash or manifest (lilac verify --help)\n"
          "  logits -m MODEL --tokens 1,2,3 [-o OUT.f32] [--threads N] [--step] [--hidden H.f32] [--precise]\n"
          "                                float32 logits of every position, row-major;\n"
          "                                --step feeds one token at a time (the decode path),\n"
          "                                --hidden writes the residual stream after each layer\n"
          "  convert IN_HF_DIR OUT.gguf    write a Hugging Face checkpoint as a BF16 GGUF (llama.cpp's layout)\n"
          "  quantize IN OUT.gguf TYPE     quantize a checkpoint or GGUF as llama-quantize does (Q8_0, Q6_K, Q4_K_M, ...)\n"
          "  synth --preset NAME --type MIX [--tokenizer PATH] [--seed N] -o FILE.gguf\n"
          "                                random weights in a published model's shape (lilac synth --help)\n"
          "\n"
          "MODEL is a GGUF file or a Hugging Face checkpoint directory.\n"
          "--backend cpu|cuda|auto (any command that loads a model; default auto, or $LILAC_BACKEND):\n"
          "where the model runs; auto takes a CUDA GPU when lilac was built with CUDA and one is present.\n"
          "--kv-type f32|f16 (any command that loads a model; default f32, or $LILAC_KV_TYPE): the KV\n"
          "cache's element type; f16 halves its memory and what a token reads at depth (CPU backend only).\n"
          "--no-repack (any command that loads a model, or LILAC_REPACK=0): keep Q4_K/Q6_K weights as mapped\n"
          "from the file; by default the CPU copies them once, before the first token, into a layout its\n"
          "kernels read about twice as fast (same memory; loading then reads the whole file).\n"
          "--precise (run, chat, bench, logits): keep activations in float32 against quantized\n"
          "weights; slower. By default they are rounded to 16 bits per block of 32 for integer\n"
          "dot products (far closer to the model than 8-bit activations).\n",
          f);
}

int cli_fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "lilac: error: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return 1;
}

int cli_fail_err(const lilac_error *e)
{
    fprintf(stderr, "lilac: error: %s\n", e->msg);
    return 1;
}

void cli_log(void *user, lilac_log_level level, const char *msg)
{
    (void)user;
    static const char *names[] = {"error", "warning", "note", "debug"};
    if (level <= LILAC_LOG_INFO)
        fprintf(stderr, "lilac: %s: %s\n", names[level], msg);
}

/* A positive int from a flag's value; -1 if it is not one. */
int cli_parse_int(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 1 << 30)
        return -1;
    return (int)v;
}

int cli_parse_tokens(const char *s, int32_t **out, int *n)
{
    size_t cap = 16, len = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long t = strtol(p, &end, 10);
        if (errno || end == p || t < 0 || t > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return -1;
        }
        if (len == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[len++] = (int32_t)t;
        p = *end ? end + 1 : end;
    }
    if (len == 0) {
        free(v);
        return -1;
    }
    *out = v;
    *n = (int)len;
    return 0;
}

static const char *human(double bytes, char *buf, size_t size)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4)
        bytes /= 1024, i++;
    snprintf(buf, size, i ? "%.2f %s" : "%.0f %s", bytes, u[i]);
    return buf;
}

static int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    int ctx = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            if ((ctx = cli_parse_int(argv[++i])) < 0)
                return cli_fail("--ctx wants a positive number, not '%s'", argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_fail("info: unknown option '%s'", argv[i]);
        else if (!path)
            path = argv[i];
        else
            return cli_fail("info: unexpected argument '%s'", argv[i]);
    }
    if (!path)
        return cli_fail("%s", "info: no MODEL given");
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = 1;
    mp.log = cli_log;
    lilac_model *m;
    lilac_error err;
    if (lilac_model_open(path, &mp, &m, &err))
        return cli_fail_err(&err);
    const lilac_hparams *hp = lilac_model_hparams(m);
    char b1[64], b2[64], b3[64], b4[64];
    printf("model:        %s\n", path);
    printf("format:       %s\n", lilac_model_format(m));
    printf("architecture: %s\n", lilac_model_arch_name(m));
    printf("parameters:   %.3f M (%s of weights)\n", lilac_model_n_params(m) / 1e6,
           human((double)lilac_model_weight_bytes(m), b1, sizeof b1));
    printf("layers:       %d  [", hp->n_layer);
    int n_attn = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        n_attn += hp->layer_kind[i] == LILAC_LAYER_ATTENTION;
        putchar(hp->layer_kind[i] == LILAC_LAYER_ATTENTION ? 'A' : 'D');
    }
    printf("]  (A: full attention %d, D: Gated DeltaNet %d)\n", n_attn, hp->n_layer - n_attn);
    printf("hidden:       %d, vocabulary %d, trained context %d, rms eps %g\n", hp->n_embd, hp->n_vocab,
           hp->n_ctx_train, hp->norm_eps);
    if (n_attn)
        printf("attention:    %d query / %d key-value heads of %d, rotary on %d dims (theta %g)%s\n", hp->n_head,
               hp->n_head_kv, hp->head_dim, hp->rope_dims, hp->rope_theta,
               hp->attn_output_gate ? ", sigmoid output gate" : "");
    if (n_attn < hp->n_layer)
        printf("deltanet:     %d key heads of %d, %d value heads of %d, conv kernel %d\n", hp->ssm_k_heads,
               hp->ssm_k_dim, hp->ssm_v_heads, hp->ssm_v_dim, hp->ssm_conv_kernel);
    printf("experts:      %d, %d per token, width %d%s", hp->n_expert, hp->n_expert_used, hp->expert_ff,
           hp->norm_topk ? " (weights renormalized)" : "");
    if (hp->shared_ff)
        printf("; shared expert width %d", hp->shared_ff);
    printf("\nembeddings:   %s\n", hp->tied_embeddings ? "tied" : "untied");
    lilac_type_count tc[16];
    size_t nt = lilac_model_type_counts(m, tc, 16);
    printf("tensors:\n");
    for (size_t i = 0; i < nt && i < 16; i++)
        printf("  %-6s %5zu tensors  %s\n", tc[i].type_name, tc[i].n_tensors, human((double)tc[i].bytes, b1, sizeof b1));
    int ctxs[3] = {ctx ? ctx : 4096, hp->n_ctx_train > 0 ? hp->n_ctx_train : 32768, 0};
    printf("memory per sequence (beside the weights):\n");
    for (int i = 0; i < 2; i++) {
        if (i == 1 && (ctx || ctxs[1] == ctxs[0]))
            break;
        lilac_mem_plan p = lilac_model_mem_plan(m, ctxs[i], 256);
        printf("  context %7d: KV cache (%s) %s, recurrent state %s, scratch %s, total %s\n", ctxs[i],
               lilac_kv_type_name(lilac_model_kv_type(m)), human((double)p.kv_bytes, b1, sizeof b1), human((double)p.recurrent_bytes, b2, sizeof b2),
               human((double)p.scratch_bytes, b3, sizeof b3),
               human((double)(p.kv_bytes + p.recurrent_bytes + p.scratch_bytes), b4, sizeof b4));
    }
    lilac_model_free(m);
    return 0;
}

/* Write n floats; on failure say why, remove the partial file, return -1. */
static int write_f32(const char *path, const float *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "lilac: error: %s: cannot create: %s\n", path, strerror(errno));
        return -1;
    }
    size_t w = fwrite(v, sizeof(float), n, f);
    if (fclose(f) != 0 || w != n) {
        fprintf(stderr, "lilac: error: %s: write failed\n", path);
        remove(path);
        return -1;
    }
    return 0;
}

static int cmd_logits(int argc, char **argv)
{
    const char *path = NULL, *out = NULL, *toks = NULL, *hidden_out = NULL;
    int threads = 0;
    int step = 0;
    bool precise = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has)
            path = argv[++i];
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has)
            out = argv[++i];
        else if (!strcmp(a, "--tokens") && has)
            toks = argv[++i];
        else if (!strcmp(a, "--hidden") && has)
            hidden_out = argv[++i];
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) {
            if ((threads = cli_parse_int(argv[++i])) < 0)
                return cli_fail("--threads wants a positive number, not '%s'", argv[i]);
        } else if (!strcmp(a, "--step"))
            step = 1;
        else if (!strcmp(a, "--precise"))
            precise = true;
        else
            return cli_fail("logits: unknown or incomplete option '%s'", a);
    }
    if (!path)
        return cli_fail("%s", "logits: no model given (-m MODEL)");
    if (!toks)
        return cli_fail("%s", "logits: no tokens given (--tokens 1,2,3)");
    int32_t *tokens;
    int n;
    if (cli_parse_tokens(toks, &tokens, &n))
        return cli_fail("logits: --tokens wants comma-separated token ids, not '%s'", toks);
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = threads;
    mp.precise = precise;
    mp.log = cli_log;
    lilac_model *m = NULL;
    lilac_seq *s = NULL;
    lilac_error err;
    float *logits = NULL, *hidden = NULL;
    int rc = 1;
    if (lilac_model_open(path, &mp, &m, &err) || lilac_seq_new(m, n, &s, &err)) {
        cli_fail_err(&err);
        goto done;
    }
    size_t vocab = (size_t)lilac_model_hparams(m)->n_vocab;
    logits = malloc((size_t)n * vocab * sizeof(float));
    if (!logits) {
        cli_fail("%s", "out of memory for the logits");
        goto done;
    }
    if (step) { /* one token at a time: the decode path */
        for (int i = 0; i < n; i++) {
            lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_LAST, .logits = logits + (size_t)i * vocab};
            if (lilac_seq_eval(s, tokens + i, 1, &o, &err)) {
                cli_fail_err(&err);
                goto done;
            }
        }
    } else {
        const lilac_hparams *hp = lilac_model_hparams(m);
        size_t n_hidden = (size_t)(hp->n_layer + 1) * (size_t)n * (size_t)hp->n_embd;
        if (hidden_out && !(hidden = malloc(n_hidden * sizeof(float)))) {
            cli_fail("%s", "out of memory for the hidden states");
            goto done;
        }
        lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_ALL, .logits = logits, .hidden = hidden};
        if (lilac_seq_eval(s, tokens, n, &o, &err)) {
            cli_fail_err(&err);
            goto done;
        }
        if (hidden_out && write_f32(hidden_out, hidden, n_hidden))
            goto done;
    }
    if (out) {
        if (write_f32(out, logits, (size_t)n * vocab))
            goto done;
        fprintf(stderr, "lilac: wrote %d x %zu float32 logits to %s\n", n, vocab, out);
    } else {
        for (int i = 0; i < n; i++) {
            const float *row = logits + (size_t)i * vocab;
            const int best = lilac_argmax(row, (int)vocab);
            printf("%d\ttoken %d\targmax %d\tlogit %.6f\n", i, tokens[i], best, row[best]);
        }
    }
    rc = 0;
done:
    free(logits);
    free(hidden);
    free(tokens);
    lilac_seq_free(s);
    lilac_model_free(m);
    return rc;
}

static int cmd_convert(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1])
            return cli_fail("convert: unknown option '%s'", argv[i]);
        else if (!in)
            in = argv[i];
        else if (!out)
            out = argv[i];
        else
            return cli_fail("convert: unexpected argument '%s'", argv[i]);
    }
    if (!in || !out)
        return cli_fail("%s", "convert: usage: lilac convert IN_HF_DIR OUT.gguf");
    lilac_convert_params cp = {.log = cli_log, .log_user = NULL};
    lilac_error err;
    if (lilac_convert_hf_to_gguf(in, out, &cp, &err))
        return cli_fail_err(&err);
    return 0;
}

static bool backend_ok(const char *v) { return lilac_backend_parse(v) >= 0; }
static bool kv_type_ok(const char *v) { return lilac_kv_type_parse(v) >= 0; }

/* Removes every `opt VALUE` (or, with no check function, the flag `opt`,
 * whose value is then "0") from argv[2..] and sets env to the value;
 * returns the exit status of a bad value, 0 when fine. */
static int take_env_option(int *argc, char **argv, const char *opt, const char *env, bool (*ok)(const char *),
                           const char *bad_fmt)
{
    int take = ok ? 2 : 1;
    for (int i = 2; i < *argc; i++)
        if (!strcmp(argv[i], opt)) {
            if (ok && (i + 1 >= *argc || !ok(argv[i + 1])))
                return cli_fail(bad_fmt, i + 1 < *argc ? argv[i + 1] : "");
            setenv(env, ok ? argv[i + 1] : "0", 1);
            memmove(&argv[i], &argv[i + take], (size_t)(*argc - i - take) * sizeof *argv);
            *argc -= take;
            argv[*argc] = NULL;
            i--;
        }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    /* Options of every command that loads a model, taken out of the
     * arguments and passed on in the environment, which
     * lilac_model_default_params reads: --backend cpu|cuda|auto
     * (LILAC_BACKEND), --kv-type f32|f16 (LILAC_KV_TYPE), --no-repack
     * (LILAC_REPACK=0). */
    int bad;
    if ((bad = take_env_option(&argc, argv, "--backend", "LILAC_BACKEND", backend_ok,
                                 "--backend takes cpu, cuda or auto, not '%s'")) ||
        (bad = take_env_option(&argc, argv, "--kv-type", "LILAC_KV_TYPE", kv_type_ok,
                                 "--kv-type takes f32 or f16, not '%s'")) ||
        (bad = take_env_option(&argc, argv, "--no-repack", "LILAC_REPACK", NULL, NULL)))
        return bad;
    if (!strcmp(cmd, "plan"))
        return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "doctor"))
        return cmd_doctor(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval"))
        return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat"))
        return cmd_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize"))
        return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve"))
        return cmd_serve(argc - 2, argv + 2);
    if (!strcmp(cmd, "batch"))
        return cmd_batch(argc - 2, argv + 2);
    if (!strcmp(cmd, "verify"))
        return cmd_verify(argc - 2, argv + 2);
    if (!strcmp(cmd, "info"))
        return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "logits"))
        return cmd_logits(argc - 2, argv + 2);
    if (!strcmp(cmd, "convert"))
        return cmd_convert(argc - 2, argv + 2);
    if (!strcmp(cmd, "quantize"))
        return cmd_quantize(argc - 2, argv + 2);
    if (!strcmp(cmd, "synth"))
        return cmd_synth(argc - 2, argv + 2);
    fprintf(stderr, "lilac: error: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
