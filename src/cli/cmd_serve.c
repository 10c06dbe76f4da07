/* lilac serve: the OpenAI-compatible service (the library's lilac_serve). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void serve_usage(FILE *f)
{
    fputs("usage: lilac serve -m MODEL [options]\n"
          "  --host H             address to listen on (127.0.0.1)\n"
          "  --port N             port (8080; 0: any free port, logged)\n"
          "  --parallel N         sequences decoded together (4)\n"
          "  --ctx N              tokens per sequence (4096)\n"
          "  --queue N            requests waiting at most; more get 429 at once (16)\n"
          "  --queue-timeout S    a request waiting longer gets 503 (60)\n"
          "  --grace S            on SIGTERM, time running requests get to finish (30)\n"
          "  --cache-mib N        prompt-state snapshots kept for prefix reuse (1024)\n"
          "  --max-tokens N       default max_tokens (until the context is full)\n"
          "  --api-key KEY        require Authorization: Bearer KEY (or $LILAC_API_KEY)\n"
          "  --alias NAME         the model's name in /v1/models (the file's name)\n"
          "  -t, --threads N      threads (all cores)\n"
          "  --no-supervise       no parent process that restarts the engine when it dies\n"
          "  --precise            float32 activations against quantized weights\n",
          f);
}

static double parse_seconds(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    return end == s || *end || v < 0 ? -1 : v;
}

int cmd_serve(int argc, char **argv)
{
    lilac_serve_params p = {.port = 8080, .n_parallel = 4, .n_ctx = 4096, .queue = 16, .queue_timeout_s = 60,
                            .grace_s = 30, .cache_bytes = (size_t)1024 << 20, .supervise = true};
    p.api_key = getenv("LILAC_API_KEY");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-supervise")) {
            p.supervise = false;
            continue;
        }
        if (!strcmp(a, "--precise")) {
            p.precise = true;
            continue;
        }
        if (!v)
            return cli_fail("serve: option '%s' needs a value (lilac serve --help)", a);
        i++;
        int n = cli_parse_int(v);
        double sec = parse_seconds(v);
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            p.model_path = v;
        else if (!strcmp(a, "--host"))
            p.host = v;
        else if (!strcmp(a, "--alias"))
            p.model_name = v;
        else if (!strcmp(a, "--api-key"))
            p.api_key = v;
        else if (!strcmp(a, "--port") && (n >= 0 || !strcmp(v, "0")) && n <= 65535)
            p.port = n < 0 ? 0 : n;
        else if (!strcmp(a, "--parallel") && n > 0)
            p.n_parallel = n;
        else if (!strcmp(a, "--ctx") && n > 1)
            p.n_ctx = n;
        else if (!strcmp(a, "--queue") && (n >= 0 || !strcmp(v, "0")))
            p.queue = n < 0 ? 0 : n;
        else if (!strcmp(a, "--queue-timeout") && sec >= 0)
            p.queue_timeout_s = sec;
        else if (!strcmp(a, "--grace") && sec >= 0)
            p.grace_s = sec;
        else if (!strcmp(a, "--cache-mib") && (n >= 0 || !strcmp(v, "0")))
            p.cache_bytes = (size_t)(n < 0 ? 0 : n) << 20;
        else if (!strcmp(a, "--max-tokens") && n > 0)
            p.default_max_tokens = n;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && n > 0)
            p.n_threads = n;
        else {
            fprintf(stderr, "lilac: error: serve: bad option or value: %s %s\n", a, v);
            serve_usage(stderr);
            return 2;
        }
    }
    if (!p.model_path)
        return cli_fail("%s", "serve: no model given (-m MODEL)");
    if (!p.model_name) {
        const char *slash = strrchr(p.model_path, '/');
        p.model_name = slash && slash[1] ? slash + 1 : p.model_path;
    }
    lilac_error err;
    if (lilac_serve(&p, &err))
        return cli_fail_err(&err);
    return 0;
}
