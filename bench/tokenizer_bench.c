/* tokenizer_bench: encode/decode throughput of the byte-level BPE tokenizer
 * on one core, over a few MB of mixed text (English prose, code, CJK, emoji,
 * numbers, whitespace runs) built by repeating the golden cases' texts in a
 * shuffled order.
 *
 *   tokenizer_bench [-t TOKENIZER] [-g GOLDEN_JSON] [-m MB] [-r REPEATS]
 *
 * TOKENIZER: a tokenizer.json, its directory, or a GGUF (default: the
 * fixtures' qwen3/tokenizer.json); GOLDEN_JSON: qwen3-golden.json. The
 * fixtures are $LILAC_FIXTURES, else ../shared/fixtures beside the source
 * tree. Build with bench/build.sh (see bench/README.md). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "tokenizer/tokenizer.h"

#ifndef LILAC_SOURCE_DIR
#define LILAC_SOURCE_DIR "."
#endif

static void die(const char *what, const lilac_error *err)
{
    fprintf(stderr, "tokenizer_bench: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

int main(int argc, char **argv)
{
    char tok_path[4096] = "", golden_path[4096] = "";
    double mb = 4.0;
    int repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-t") == 0)
            snprintf(tok_path, sizeof tok_path, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "-g") == 0)
            snprintf(golden_path, sizeof golden_path, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "-m") == 0)
            mb = atof(argv[i + 1]);
        else if (strcmp(argv[i], "-r") == 0)
            repeats = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-t TOKENIZER] [-g GOLDEN_JSON] [-m MB] [-r REPEATS]\n", argv[0]);
            return 2;
        }
    }
    const char *fx = getenv("LILAC_FIXTURES");
    char fxbuf[2048];
    if (!fx || !*fx) {
        snprintf(fxbuf, sizeof fxbuf, "%s/../shared/fixtures", LILAC_SOURCE_DIR);
        fx = fxbuf;
    }
    if (!tok_path[0])
        snprintf(tok_path, sizeof tok_path, "%s/tokenizer/qwen3/tokenizer.json", fx);
    if (!golden_path[0])
        snprintf(golden_path, sizeof golden_path, "%s/tokenizer/qwen3-golden.json", fx);
    if (mb <= 0 || repeats < 1)
        return 2;

    lilac_error err;
    tok_tokenizer *t = NULL;
    double t0 = bu_now();
    if (tok_load(tok_path, &t, &err) != LILAC_OK)
        die("loading the tokenizer", &err);
    double t_load = bu_now() - t0;

    json_error_t je;
    json_t *root = json_load_file(golden_path, 0, &je);
    json_t *cases = json_object_get(root, "cases");
    size_t nc = json_array_size(cases);
    if (!nc) {
        fprintf(stderr, "tokenizer_bench: %s: no cases (%s)\n", golden_path, je.text);
        return 1;
    }
    /* the text: golden texts in a shuffled order, one per line, to MB */
    size_t want = (size_t)(mb * 1e6), n = 0, cap = want + 65536;
    char *text = malloc(cap);
    uint64_t rng = 42;
    while (n < want) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        json_t *s = json_object_get(json_array_get(cases, (rng >> 33) % nc), "text");
        size_t l = json_string_length(s);
        if (n + l + 1 >= cap)
            break;
        memcpy(text + n, json_string_value(s), l);
        n += l;
        text[n++] = '\n';
    }
    json_decref(root);

    tok_ids ids = {0};
    double best_warm = 1e30, best_cold = 1e30, best_dec = 1e30, best_stream = 1e30;
    size_t n_ids = 0;
    for (int cold = 0; cold < 2; cold++) {
        tok_set_cache(t, cold ? 0 : 65536);
        for (int r = 0; r < repeats + (cold ? 0 : 1); r++) { /* one warm-up pass with the cache */
            ids.n = 0;
            t0 = bu_now();
            if (tok_encode(t, text, n, NULL, &ids, &err) != LILAC_OK)
                die("encoding", &err);
            double dt = bu_now() - t0;
            if (cold && dt < best_cold)
                best_cold = dt;
            if (!cold && r > 0 && dt < best_warm)
                best_warm = dt;
            n_ids = ids.n;
        }
    }
    char *out = NULL;
    size_t out_len = 0;
    for (int r = 0; r < repeats; r++) {
        t0 = bu_now();
        if (tok_decode(t, ids.ids, ids.n, false, &out, &out_len, &err) != LILAC_OK)
            die("decoding", &err);
        double dt = bu_now() - t0;
        if (dt < best_dec)
            best_dec = dt;
        free(out);
    }
    tok_stream *s = NULL;
    if (tok_stream_new(t, false, &s, &err) != LILAC_OK)
        die("stream", &err);
    size_t streamed = 0;
    for (int r = 0; r < repeats; r++) {
        streamed = 0;
        t0 = bu_now();
        for (size_t i = 0; i < ids.n; i++) {
            const char *txt;
            size_t l;
            if (tok_stream_feed(s, ids.ids[i], &txt, &l, &err) != LILAC_OK)
                die("stream feed", &err);
            streamed += l;
        }
        size_t l;
        tok_stream_flush(s, &l);
        streamed += l;
        double dt = bu_now() - t0;
        if (dt < best_stream)
            best_stream = dt;
    }
    tok_stream_free(s);

    printf("tokenizer: %s (%d ids, pre-tokenizer %s), loaded in %.0f ms\n", tok_path, tok_n_vocab(t),
           tok_pre_name(t), 1e3 * t_load);
    printf("text: %.2f MB of mixed text from %zu golden cases, %zu tokens (%.2f bytes/token)\n", n / 1e6, nc, n_ids,
           (double)n / (double)n_ids);
    printf("encode, piece cache on:   %8.1f MB/s  (%.0f ms)\n", n / 1e6 / best_warm, 1e3 * best_warm);
    printf("encode, piece cache off:  %8.1f MB/s  (%.0f ms)\n", n / 1e6 / best_cold, 1e3 * best_cold);
    printf("decode:                   %8.1f MB/s  (%.1f M tokens/s)\n", n / 1e6 / best_dec,
           n_ids / 1e6 / best_dec);
    printf("stream decode:            %8.1f MB/s  (%.1f M tokens/s)\n", streamed / 1e6 / best_stream,
           n_ids / 1e6 / best_stream);
    tok_ids_free(&ids);
    free(text);
    tok_free(t);
    return 0;
}
