/* The text commands: lilac run, lilac chat, lilac tokenize. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

typedef struct run_opts {
    const char *model, *prompt, *prompt_file, *tokens, *system, *out;
    bool raw;
    int thinking; /* -1 default */
    int n_predict, n_ctx, threads, n_logprobs;
    bool seed_set;
    lilac_sampler_params sp;
    const char *stop[16];
    int n_stop;
    bool quiet;
    bool precise; /* float32 activations against quantized weights */
} run_opts;

static const char *run_usage =
    "usage: lilac run -m MODEL (-p PROMPT | -f FILE | --tokens 1,2,3) [options]\n"
    "       lilac chat -m MODEL [options]\n"
    "  --raw               the prompt as is, no chat template\n"
    "  --system TEXT       a system message\n"
    "  --think / --no-think  thinking on or off (the template's default otherwise)\n"
    "  -n N                new tokens at most (default 512; run only)\n"
    "  --temp T  --top-k K  --top-p P  --min-p P      (temp 0: greedy)\n"
    "  --repeat-penalty R  --presence-penalty P  --frequency-penalty F  --penalty-last-n N\n"
    "  --seed S            reproducible sampling (default: from the clock, printed)\n"
    "  --stop TEXT         a stop string (repeatable)\n"
    "  --logprobs N        print the top-N log-probabilities of each token to stderr\n"
    "  -o FILE             also write the generated text to FILE\n"
    "  --ctx N             context size (default 4096)\n"
    "  -t, --threads N\n"
    "  --precise           float32 activations against quantized weights (slower; by default\n"
    "                      they are rounded to 16 bits per 32 for integer dot products)\n";

static int parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return -1;
    *out = (float)v;
    return 0;
}

/* 0 ok, else the exit status. */
static int parse_run_opts(int argc, char **argv, bool chat, run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->thinking = -1;
    o->n_predict = chat ? 0 : 512;
    o->n_ctx = 4096;
    o->sp = lilac_sampler_default_params();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int iv;
        float fv;
#define NEED_V                                                                                              \
    do {                                                                                                    \
        if (!v)                                                                                             \
            return cli_fail("option '%s' needs a value", a);                                                \
        i++;                                                                                                \
    } while (0)
#define INT_V(dst)                                                                                          \
    do {                                                                                                    \
        NEED_V;                                                                                             \
        if ((iv = cli_parse_int(v)) < 0)                                                                    \
            return cli_fail("option wants a positive number, not '%s'", v);                                 \
        dst = iv;                                                                                           \
    } while (0)
#define FLOAT_V(dst)                                                                                        \
    do {                                                                                                    \
        NEED_V;                                                                                             \
        if (parse_float(v, &fv))                                                                            \
            return cli_fail("option wants a number, not '%s'", v);                                          \
        dst = fv;                                                                                           \
    } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            NEED_V;
            o->model = v;
        } else if (!chat && (!strcmp(a, "-p") || !strcmp(a, "--prompt"))) {
            NEED_V;
            o->prompt = v;
        } else if (!chat && (!strcmp(a, "-f") || !strcmp(a, "--file"))) {
            NEED_V;
            o->prompt_file = v;
        } else if (!chat && !strcmp(a, "--tokens")) {
            NEED_V;
            o->tokens = v;
        } else if (!strcmp(a, "--system")) {
            NEED_V;
            o->system = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            NEED_V;
            o->out = v;
        } else if (!chat && !strcmp(a, "--raw"))
            o->raw = true;
        else if (!strcmp(a, "--precise"))
            o->precise = true;
        else if (!strcmp(a, "--think"))
            o->thinking = 1;
        else if (!strcmp(a, "--no-think"))
            o->thinking = 0;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            INT_V(o->n_predict);
        else if (!strcmp(a, "--ctx"))
            INT_V(o->n_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            INT_V(o->threads);
        else if (!strcmp(a, "--logprobs"))
            INT_V(o->n_logprobs);
        else if (!strcmp(a, "--top-k")) {
            NEED_V;
            char *end;
            long k = strtol(v, &end, 10);
            if (*end || end == v || k < 0 || k > 1 << 30)
                return cli_fail("--top-k wants a number >= 0, not '%s'", v);
            o->sp.top_k = (int)k;
        } else if (!strcmp(a, "--penalty-last-n")) {
            NEED_V;
            char *end;
            long k = strtol(v, &end, 10);
            if (*end || end == v || k < -1 || k > 1 << 20)
                return cli_fail("--penalty-last-n wants a number >= -1, not '%s'", v);
            o->sp.penalty_last_n = (int)k;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature"))
            FLOAT_V(o->sp.temperature);
        else if (!strcmp(a, "--top-p"))
            FLOAT_V(o->sp.top_p);
        else if (!strcmp(a, "--min-p"))
            FLOAT_V(o->sp.min_p);
        else if (!strcmp(a, "--repeat-penalty"))
            FLOAT_V(o->sp.repeat_penalty);
        else if (!strcmp(a, "--presence-penalty"))
            FLOAT_V(o->sp.presence_penalty);
        else if (!strcmp(a, "--frequency-penalty"))
            FLOAT_V(o->sp.frequency_penalty);
        else if (!strcmp(a, "--seed")) {
            NEED_V;
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || *end || end == v)
                return cli_fail("--seed wants a non-negative number, not '%s'", v);
            o->sp.seed = s;
            o->seed_set = true;
        } else if (!strcmp(a, "--stop")) {
            NEED_V;
            if (o->n_stop == 16)
                return cli_fail("%s", "at most 16 --stop strings");
            o->stop[o->n_stop++] = v;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(run_usage, stdout);
            return -1;
        } else {
            fputs(run_usage, stderr);
            return cli_fail("unknown option '%s'", a) + 1;
        }
#undef NEED_V
#undef INT_V
#undef FLOAT_V
    }
    if (!o->model)
        return cli_fail("%s", "no model given (-m MODEL)");
    if (!chat && !!o->prompt + !!o->prompt_file + !!o->tokens != 1)
        return cli_fail("%s", "give exactly one of -p PROMPT, -f FILE, --tokens IDS");
    if (!o->seed_set)
        o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    return 0;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    return buf;
}

/* The conversation JSON for a system message (optional) and a user message. */
static char *conversation(const char *system, const char *user)
{
    json_t *msgs = json_array();
    if (system)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", user));
    char *s = json_dumps(msgs, 0);
    json_decref(msgs);
    return s;
}

/* Tokens of a chat turn rendered by the model's template. */
static int render_tokens(lilac_model *m, lilac_tokenizer *tok, const char *conv, int thinking, const char *prefix,
                         int32_t **ids, size_t *n)
{
    lilac_error err;
    char *text = NULL;
    lilac_chat_opts co = {.add_generation_prompt = true, .thinking = thinking};
    if (lilac_chat_render(lilac_model_chat_template(m), conv, &co, &text, &err))
        return cli_fail_err(&err);
    size_t lp = prefix ? strlen(prefix) : 0, lt = strlen(text);
    char *full = malloc(lp + lt + 1);
    if (!full) {
        free(text);
        return cli_fail("%s", "out of memory");
    }
    memcpy(full, prefix ? prefix : "", lp);
    memcpy(full + lp, text, lt + 1);
    free(text);
    int rc = lilac_tokenize(tok, full, lp + lt, true, ids, n, &err) ? cli_fail_err(&err) : 0;
    free(full);
    return rc;
}

typedef struct {
    FILE *out;
    int n_logprobs;
    lilac_tokenizer *tok;
} stream_ctx;

static bool on_token(void *user, const lilac_gen_event *ev)
{
    stream_ctx *c = user;
    if (ev->len) {
        fwrite(ev->text, 1, ev->len, stdout);
        fflush(stdout);
        if (c->out)
            fwrite(ev->text, 1, ev->len, c->out);
    }
    if (c->n_logprobs && ev->token >= 0) {
        fprintf(stderr, "\n[token %d logprob %.4f; top:", ev->token, ev->logprob);
        for (int i = 0; i < ev->n_top; i++)
            fprintf(stderr, " %d:%.4f", ev->top[i].token, ev->top[i].logprob);
        fprintf(stderr, "]\n");
    }
    return true;
}

static const char *finish_name(lilac_finish f)
{
    static const char *n[] = {"stop", "length", "context full", "cancelled"};
    return n[f];
}

static void print_stats(const lilac_gen_result *r, uint64_t seed)
{
    fprintf(stderr, "\nlilac: prompt %d tokens in %.0f ms (%.1f tok/s); generated %d tokens in %.0f ms (%.1f tok/s); "
                    "finish: %s; seed %llu\n",
            r->n_prompt, r->prompt_ms, r->prompt_ms > 0 ? r->n_prompt * 1e3 / r->prompt_ms : 0, r->n_generated,
            r->gen_ms, r->gen_ms > 0 ? r->n_generated * 1e3 / r->gen_ms : 0, finish_name(r->finish),
            (unsigned long long)seed);
}

typedef struct session {
    run_opts o;
    lilac_model *m;
    lilac_tokenizer *tok;
    lilac_seq *seq;
    lilac_sampler *smp;
    FILE *out;
} session;

static void session_end(session *s)
{
    if (s->out)
        fclose(s->out);
    lilac_sampler_free(s->smp);
    lilac_seq_free(s->seq);
    lilac_model_free(s->m);
}

static int session_start(session *s)
{
    lilac_error err;
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = s->o.threads;
    mp.precise = s->o.precise;
    mp.log = cli_log;
    if (lilac_model_open(s->o.model, &mp, &s->m, &err) || lilac_model_mem_check(s->m, s->o.n_ctx, 1, &err) ||
        lilac_model_tokenizer(s->m, &s->tok, &err) || lilac_seq_new(s->m, s->o.n_ctx, &s->seq, &err) ||
        lilac_sampler_new(&s->o.sp, lilac_model_hparams(s->m)->n_vocab, &s->smp, &err))
        return cli_fail_err(&err);
    if (s->o.out && !(s->out = fopen(s->o.out, "wb"))) {
        fprintf(stderr, "lilac: error: %s: cannot create: %s\n", s->o.out, strerror(errno));
        return 1;
    }
    return 0;
}

static int generate(session *s, const int32_t *ids, size_t n, lilac_gen_result *res)
{
    lilac_error err;
    lilac_gen_params gp = {.max_tokens = s->o.n_predict, .stop = s->o.stop, .n_stop = s->o.n_stop,
                           .n_logprobs = s->o.n_logprobs};
    stream_ctx sc = {s->out, s->o.n_logprobs, s->tok};
    if (lilac_generate(s->seq, s->tok, s->smp, ids, (int)n, &gp, on_token, &sc, res, &err))
        return cli_fail_err(&err);
    return 0;
}

int cmd_run(int argc, char **argv)
{
    session s = {0};
    int rc = parse_run_opts(argc, argv, false, &s.o);
    if (rc)
        return rc < 0 ? 0 : rc;
    int32_t *ids = NULL;
    size_t n = 0;
    char *prompt = NULL, *conv = NULL;
    if ((rc = session_start(&s)))
        goto done;
    lilac_error err;
    if (s.o.tokens) {
        int ni;
        if (cli_parse_tokens(s.o.tokens, &ids, &ni)) {
            rc = cli_fail("--tokens wants comma-separated token ids, not '%s'", s.o.tokens);
            goto done;
        }
        n = (size_t)ni;
    } else {
        prompt = s.o.prompt ? strdup(s.o.prompt) : read_file(s.o.prompt_file);
        if (!prompt) {
            rc = cli_fail("cannot read the prompt file '%s'", s.o.prompt_file ? s.o.prompt_file : "");
            goto done;
        }
        if (s.o.raw) {
            if (lilac_tokenize(s.tok, prompt, strlen(prompt), true, &ids, &n, &err)) {
                rc = cli_fail_err(&err);
                goto done;
            }
        } else if (!(conv = conversation(s.o.system, prompt)) ||
                   (rc = render_tokens(s.m, s.tok, conv, s.o.thinking, NULL, &ids, &n)))
            goto done;
    }
    if (n >= (size_t)s.o.n_ctx) {
        fprintf(stderr, "lilac: error: the prompt has %zu tokens but the context holds %d; raise --ctx\n", n,
                s.o.n_ctx);
        rc = 1;
        goto done;
    }
    lilac_gen_result res;
    if ((rc = generate(&s, ids, n, &res)))
        goto done;
    printf("\n");
    print_stats(&res, s.o.sp.seed);
done:
    free(ids);
    free(prompt);
    free(conv);
    session_end(&s);
    return rc;
}

/* One line of input, without its newline; NULL at end of input. */
static char *read_line(FILE *f)
{
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    int c;
    while (buf && (c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
            if (!buf)
                break;
        }
        buf[n++] = (char)c;
    }
    if (buf && c == EOF && n == 0) {
        free(buf);
        return NULL;
    }
    if (buf)
        buf[n] = 0;
    return buf;
}

int cmd_chat(int argc, char **argv)
{
    session s = {0};
    int rc = parse_run_opts(argc, argv, true, &s.o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = session_start(&s)))
        goto done;
    if (!lilac_model_chat_template(s.m)) {
        rc = cli_fail("%s: the model has no chat template; use lilac run --raw", s.o.model);
        goto done;
    }
    fprintf(stderr, "lilac chat: one message per line; /reset starts over, /exit (or end of input) quits.\n");
    bool first = true, ended_cleanly = true;
    for (;;) {
        fprintf(stderr, "> ");
        char *line = read_line(stdin);
        if (!line || !strcmp(line, "/exit")) {
            free(line);
            break;
        }
        if (!strcmp(line, "/reset")) {
            lilac_seq_reset(s.seq);
            lilac_sampler_reset(s.smp);
            first = true;
            free(line);
            continue;
        }
        /* The sequence keeps every earlier token: a turn adds only its own.
         * After a reply that ended without <|im_end|> (length, stop string)
         * the turn is closed first. */
        char *conv = conversation(first ? s.o.system : NULL, line);
        int32_t *ids = NULL;
        size_t n = 0;
        const char *prefix = first ? NULL : ended_cleanly ? "\n" : "<|im_end|>\n";
        rc = conv ? render_tokens(s.m, s.tok, conv, s.o.thinking, prefix, &ids, &n) : cli_fail("%s", "out of memory");
        free(conv);
        free(line);
        if (rc)
            break;
        if (lilac_seq_pos(s.seq) + (int)n >= s.o.n_ctx) {
            fprintf(stderr, "lilac: the context is full (%d of %d tokens); /reset to start over\n",
                    lilac_seq_pos(s.seq), s.o.n_ctx);
            free(ids);
            continue;
        }
        lilac_gen_result res;
        rc = generate(&s, ids, n, &res);
        free(ids);
        if (rc)
            break;
        printf("\n");
        print_stats(&res, s.o.sp.seed);
        ended_cleanly = res.finish == LILAC_FINISH_STOP && s.o.n_stop == 0;
        first = false;
    }
done:
    session_end(&s);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL, *decode = NULL;
    bool jsonl = false, no_special = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has)
            model = argv[++i];
        else if (!strcmp(a, "--text") && has)
            text = argv[++i];
        else if ((!strcmp(a, "--file") || !strcmp(a, "-f")) && has)
            file = argv[++i];
        else if (!strcmp(a, "--decode") && has)
            decode = argv[++i];
        else if (!strcmp(a, "--jsonl"))
            jsonl = true;
        else if (!strcmp(a, "--no-special"))
            no_special = true;
        else
            return cli_fail("tokenize: unknown or incomplete option '%s'", a);
    }
    if (!model)
        return cli_fail("%s", "tokenize: no model given (-m MODEL: a model, a tokenizer.json or a GGUF file)");
    if (!jsonl && !!text + !!file + !!decode != 1)
        return cli_fail("%s", "tokenize: give --text TEXT, --file FILE or --decode IDS");
    lilac_tokenizer *tok;
    lilac_error err;
    if (lilac_tokenizer_load(model, &tok, &err))
        return cli_fail_err(&err);
    int rc = 0;
    if (decode) {
        int32_t *ids = NULL;
        int n = 0;
        char *out = NULL;
        if (cli_parse_tokens(decode, &ids, &n))
            rc = cli_fail("tokenize: --decode wants comma-separated token ids, not '%s'", decode);
        else if (lilac_detokenize(tok, ids, (size_t)n, &out, &err))
            rc = cli_fail_err(&err);
        else
            fputs(out, stdout);
        free(ids);
        free(out);
    } else if (!jsonl) {
        char *buf = text ? strdup(text) : read_file(file);
        int32_t *ids = NULL;
        size_t n = 0;
        if (!buf)
            rc = cli_fail("tokenize: cannot read '%s'", file ? file : "");
        else if (lilac_tokenize(tok, buf, strlen(buf), !no_special, &ids, &n, &err))
            rc = cli_fail_err(&err);
        for (size_t i = 0; !rc && i < n; i++)
            printf("%s%d", i ? "," : "", ids[i]);
        if (!rc)
            printf("\n");
        free(ids);
        free(buf);
    } else {
        FILE *in = file ? fopen(file, "rb") : stdin;
        if (!in) {
            lilac_tokenizer_free(tok);
            return cli_fail("tokenize: cannot open '%s'", file);
        }
        char *line;
        for (long ln = 1; !rc && (line = read_line(in)); ln++) {
            json_error_t je;
            json_t *j = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            int32_t *ids = NULL;
            size_t n = 0;
            if (!json_is_string(j)) {
                fprintf(stderr, "lilac: error: line %ld: not a JSON string\n", ln);
                rc = 1;
            } else if (lilac_tokenize(tok, json_string_value(j), json_string_length(j), !no_special, &ids, &n, &err)) {
                fprintf(stderr, "lilac: error: line %ld: %s\n", ln, err.msg);
                rc = 1;
            } else {
                putchar('[');
                for (size_t i = 0; i < n; i++)
                    printf("%s%d", i ? "," : "", ids[i]);
                printf("]\n");
            }
            free(ids);
            json_decref(j);
            free(line);
        }
        if (file)
            fclose(in);
    }
    lilac_tokenizer_free(tok);
    return rc;
}
