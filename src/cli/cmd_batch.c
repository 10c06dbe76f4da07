/* lilac batch: offline requests from a JSONL file (the library's lilac_jobs_run). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

int cmd_batch(int argc, char **argv)
{
    lilac_jobs_params p = {.n_parallel = 4, .n_ctx = 4096, .progress = isatty(2)};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: lilac batch -m MODEL -i REQUESTS.jsonl -o RESULTS.jsonl [--parallel 4] [--ctx 4096]\n"
                 "                   [--max-tokens N] [-t THREADS] [--precise]\n"
                 "Each input line: a chat (\"messages\") or completion (\"prompt\") request with an \"id\".\n"
                 "Each output line: {\"id\", \"response\"} or {\"id\", \"error\"}, written as it completes.\n"
                 "Run again with the same output file to resume: ids already there are skipped.");
            return 0;
        }
        if (!strcmp(a, "--precise")) {
            p.precise = true;
            continue;
        }
        if (!v)
            return cli_fail("batch: option '%s' needs a value", a);
        i++;
        int n = cli_parse_int(v);
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            p.model_path = v;
        else if (!strcmp(a, "-i") || !strcmp(a, "--input"))
            p.in_path = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            p.out_path = v;
        else if (!strcmp(a, "--parallel") && n > 0)
            p.n_parallel = n;
        else if (!strcmp(a, "--ctx") && n > 1)
            p.n_ctx = n;
        else if (!strcmp(a, "--max-tokens") && n > 0)
            p.default_max_tokens = n;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && n > 0)
            p.n_threads = n;
        else
            return cli_fail("batch: bad option or value: %s", a);
    }
    if (!p.model_path || !p.in_path || !p.out_path)
        return cli_fail("%s", "batch: needs -m MODEL -i REQUESTS.jsonl -o RESULTS.jsonl");
    lilac_jobs_result res;
    lilac_error err;
    if (lilac_jobs_run(&p, &res, &err))
        return cli_fail_err(&err);
    fprintf(stderr, "lilac: batch: %d requests: %d answered, %d failed, %d done before\n", res.n_total, res.n_done,
            res.n_failed, res.n_skipped);
    return res.n_failed ? 3 : 0;
}
