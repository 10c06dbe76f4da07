/* batch: several sequences in shared steps give each sequence what it
 * gets alone — bit for bit in decode (the same kernels per row, the same
 * recurrent step), and to float32 rounding in prefill (a prompt may be cut
 * into steps at other places, which moves the DeltaNet chunk boundaries),
 * with the same greedy tokens (2e-4 of the largest logit here: the
 * tiny random model amplifies a chunk boundary moved in a 300-token
 * prompt to ~7e-5). */
#include "models.h"

#define NSEQ 5
#define NGEN 8

static const int lens[NSEQ] = {1, 7, 40, 300, 65};

static int32_t *make_prompt(int n, unsigned seed, int V)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 8) % (unsigned)(V - 1));
    }
    return t;
}

/* Alone: prefill, then NGEN greedy tokens one at a time; logits of every
 * generated step ([NGEN + 1][V]: after the prompt, after each token). */
static float *solo(lilac_model *m, const int32_t *prompt, int n, int32_t *gen)
{
    int V = lilac_model_hparams(m)->n_vocab;
    float *lg = malloc((size_t)(NGEN + 1) * V * sizeof(float));
    lilac_seq *s;
    lilac_error err;
    if (lilac_seq_new(m, 512, &s, &err))
        return NULL;
    lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_LAST, .logits = lg};
    CHECK(lilac_seq_eval(s, prompt, n, &o, &err) == LILAC_OK);
    for (int g = 0; g < NGEN; g++) {
        gen[g] = tm_argmax(lg + (size_t)g * V, V);
        o.logits = lg + (size_t)(g + 1) * V;
        CHECK(lilac_seq_eval(s, &gen[g], 1, &o, &err) == LILAC_OK);
    }
    lilac_seq_free(s);
    return lg;
}

static void check_model(const char *path)
{
    lilac_model *m = tm_open(path, 2);
    CHECKF(m != NULL, "open %s", path);
    if (!m)
        return;
    int V = lilac_model_hparams(m)->n_vocab;
    lilac_error err;
    int32_t *prompts[NSEQ], gen[NSEQ][NGEN];
    float *want[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        prompts[i] = make_prompt(lens[i], 7u + 31u * (unsigned)i, V);
        want[i] = solo(m, prompts[i], lens[i], gen[i]);
    }

    /* 1. prompts together (the 300-token one spans steps), then decode together */
    lilac_batch *b;
    CHECK(lilac_batch_new(m, NSEQ, 512, &b, &err) == LILAC_OK);
    lilac_seq *seqs[NSEQ];
    lilac_batch_item items[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        CHECK(lilac_seq_new(m, 512, &seqs[i], &err) == LILAC_OK);
        items[i] = (lilac_batch_item){seqs[i], prompts[i], lens[i], true, 0};
    }
    CHECK(lilac_batch_eval(b, items, NSEQ, &err) == LILAC_OK);
    for (int i = 0; i < NSEQ; i++) {
        const float *got = lilac_batch_logits(b, i);
        CHECKF(got != NULL, "logits of item %d", i);
        if (!got)
            continue;
        float d = tm_max_diff(got, want[i], (size_t)V) / tm_max_abs(want[i], (size_t)V);
        CHECKF(d < 2e-4f, "%s prompt %d (%d tokens): batched prefill %.3g off alone", path, i, lens[i], d);
        CHECKF(tm_argmax(got, V) == gen[i][0], "prompt %d: greedy token", i);
        CHECK(lilac_seq_pos(seqs[i]) == lens[i]);
    }
    for (int g = 0; g < NGEN; g++) {
        for (int i = 0; i < NSEQ; i++)
            items[i] = (lilac_batch_item){seqs[i], &gen[i][g], 1, true, 0};
        CHECK(lilac_batch_eval(b, items, NSEQ, &err) == LILAC_OK);
        for (int i = 0; i < NSEQ; i++) {
            const float *got = lilac_batch_logits(b, i);
            const float *w = want[i] + (size_t)(g + 1) * V;
            float d = got ? tm_max_diff(got, w, (size_t)V) / tm_max_abs(w, (size_t)V) : 1;
            CHECKF(d < 2e-4f, "seq %d step %d: batched decode %.3g off alone", i, g, d);
            if (g + 1 < NGEN)
                CHECKF(got && tm_argmax(got, V) == gen[i][g + 1], "seq %d step %d: greedy token", i, g);
        }
    }

    /* 1b. the sampler's top form (top_k): one item a call, the same prompt and token as a call for the logits:
     * the candidates of those logits exactly (the prompt's step, then a decode step) */
    {
        lilac_seq *sa = NULL, *sb = NULL;
        CHECK(lilac_seq_new(m, 512, &sa, &err) == LILAC_OK && lilac_seq_new(m, 512, &sb, &err) == LILAC_OK);
        float *la = malloc((size_t)V * sizeof *la);
        for (int step = 0; sa && sb && la && step < 2; step++) {
            const int32_t *tk = step ? &gen[1][0] : prompts[1];
            const int n = step ? 1 : lens[1];
            lilac_batch_item ia = {sa, tk, n, true, 0}, ib = {sb, tk, n, true, 25};
            CHECK(lilac_batch_eval(b, &ia, 1, &err) == LILAC_OK && lilac_batch_logits(b, 0));
            memcpy(la, lilac_batch_logits(b, 0), (size_t)V * sizeof *la);
            CHECK(lilac_batch_eval(b, &ib, 1, &err) == LILAC_OK);
            const lilac_logits_top *t = lilac_batch_top(b, 0);
            lilac_logits_top w;
            lilac_logits_top_of(la, V, 25, &w);
            bool same = t && !lilac_batch_logits(b, 0) && t->n == w.n && t->lse == w.lse;
            for (int c = 0; same && c < w.n; c++)
                same = t->id[c] == w.id[c] && t->logit[c] == w.logit[c];
            CHECKF(same, "%s step %d: the batch's top 25 are those of the logits", path, step);
        }
        lilac_batch_item bad = {sa, gen[1], 1, true, LILAC_TOP_MAX + 1};
        CHECK(lilac_batch_eval(b, &bad, 1, &err) == LILAC_E_ARG && strstr(err.msg, "top_k"));
        lilac_seq_free(sa);
        lilac_seq_free(sb);
        free(la);
    }

    /* 2. decode bit for bit: each sequence prefilled alone, then decoded in
     * a batch that also takes a new prompt in the same steps */
    for (int i = 0; i < NSEQ; i++) {
        lilac_seq_reset(seqs[i]);
        if (i > 0) {
            lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_NONE};
            CHECK(lilac_seq_eval(seqs[i], prompts[i], lens[i], &o, &err) == LILAC_OK);
        }
    }
    for (int g = 0; g < NGEN; g++) {
        int n = 0;
        if (g == 0)
            items[n++] = (lilac_batch_item){seqs[0], prompts[0], lens[0], false, 0};
        for (int i = 1; i < NSEQ; i++)
            items[n++] = (lilac_batch_item){seqs[i], &gen[i][g], 1, true, 0};
        CHECK(lilac_batch_eval(b, items, n, &err) == LILAC_OK);
        for (int i = 1; i < NSEQ; i++) {
            const float *got = lilac_batch_logits(b, g == 0 ? i : i - 1);
            CHECKF(got && memcmp(got, want[i] + (size_t)(g + 1) * V, (size_t)V * sizeof(float)) == 0,
                   "seq %d step %d: batched decode not bitwise what it is alone", i, g);
        }
        if (g == 0)
            CHECK(lilac_batch_logits(b, 0) == NULL); /* not asked for */
    }

    /* a copy of a sequence goes on exactly as the original */
    lilac_seq *copy;
    CHECK(lilac_seq_new(m, 512, &copy, &err) == LILAC_OK);
    CHECK(lilac_seq_copy(copy, seqs[2], &err) == LILAC_OK && lilac_seq_pos(copy) == lilac_seq_pos(seqs[2]));
    float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
    lilac_eval_opts oa = {.logits_mode = LILAC_LOGITS_LAST, .logits = la}, ob = oa;
    ob.logits = lb;
    int32_t nxt = gen[2][0];
    CHECK(lilac_seq_eval(seqs[2], &nxt, 1, &oa, &err) == LILAC_OK);
    CHECK(lilac_seq_eval(copy, &nxt, 1, &ob, &err) == LILAC_OK);
    CHECKF(memcmp(la, lb, (size_t)V * sizeof(float)) == 0, "%s: the copy's next logits differ from the original's",
           path);
    free(la), free(lb);
    lilac_seq_free(copy);

    /* 3. refusals, with nothing evaluated */
    int pos1 = lilac_seq_pos(seqs[1]);
    lilac_batch_item dup[2] = {{seqs[1], gen[1], 1, true, 0}, {seqs[1], gen[1], 1, true, 0}};
    CHECK(lilac_batch_eval(b, dup, 2, &err) == LILAC_E_ARG && strstr(err.msg, "same sequence"));
    int32_t bad = V + 5;
    lilac_batch_item badtok[2] = {{seqs[1], gen[1], 1, true, 0}, {seqs[2], &bad, 1, true, 0}};
    CHECK(lilac_batch_eval(b, badtok, 2, &err) == LILAC_E_ARG && strstr(err.msg, "vocabulary"));
    lilac_batch_item many[NSEQ + 1];
    for (int i = 0; i <= NSEQ; i++)
        many[i] = (lilac_batch_item){seqs[i % NSEQ], gen[0], 1, false, 0};
    CHECK(lilac_batch_eval(b, many, NSEQ + 1, &err) == LILAC_E_ARG);
    int32_t *longp = make_prompt(600, 3, V);
    lilac_batch_item full = {seqs[1], longp, 600, true, 0};
    CHECK(lilac_batch_eval(b, &full, 1, &err) == LILAC_E_RANGE && strstr(err.msg, "do not fit"));
    CHECK(lilac_seq_pos(seqs[1]) == pos1);
    lilac_seq *big;
    CHECK(lilac_seq_new(m, 1024, &big, &err) == LILAC_OK);
    lilac_batch_item toobig = {big, gen[0], 1, true, 0};
    CHECK(lilac_batch_eval(b, &toobig, 1, &err) == LILAC_E_ARG && strstr(err.msg, "context"));
    lilac_seq_free(big);
    free(longp);

    for (int i = 0; i < NSEQ; i++) {
        lilac_seq_free(seqs[i]);
        free(prompts[i]);
        free(want[i]);
    }
    lilac_batch_free(b);
    lilac_model_free(m);
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    const char *files[] = {"model-bf16.gguf", "model-Q4_K_M.gguf", "model-Q8_0.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[8192];
        if (snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/%s", fx, files[i]) >= (int)sizeof path)
            SKIP("fixtures path too long");
        check_model(path);
    }
    lilac_batch *b;
    lilac_error err;
    CHECK(lilac_batch_new(NULL, 0, 10, &b, &err) == LILAC_E_ARG);
    TEST_END();
}
