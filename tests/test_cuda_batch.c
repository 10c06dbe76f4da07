/* cuda_batch: batched decode on the GPU (lilac_cuda_decode_batch through
 * lilac_batch_eval, the default; LILAC_CUDA_BATCH=0 turns it off) against each sequence run alone on
 * the GPU: five sequences with prompts of different lengths (so different
 * positions) decode greedily together; every step's logits must be the bits
 * of the sequence's own run (the exact batched step, the default), or match
 * them to float32 rounding (LILAC_CUDA_BATCH_EXACT=0), and the tokens must be the same.
 * One step also feeds a new prompt beside the decoding sequences (the
 * mixed path). Skips where no GPU can be used — unless
 * LILAC_REQUIRE_CUDA=1, then it fails. */
#include "kernels/cuda/cuda.h"
#include "model/decoder_cuda_int.h"
#include "cudatest.h"
#include "models.h"
#include "util/env.h"

enum { MAXSEQ = 64, STEPS = 8 };
/* The decode steps a sequence takes: STEPS, or fewer under LILAC_CUDA_TEST_TOKENS=N (run.sh sanitize's racecheck:
 * every kernel launch of a step is instrumented, and the quick mode's 5 sequences alone and together ran past
 * 280 s); the arrays keep STEPS. */
static int g_steps = STEPS;

/* Sequence i's prompt: the first 3 + (2i mod 40) golden tokens. */
static int prompt_len(int i) { return 3 + (2 * i) % 40; }

/* Alone: the prompt, then STEPS greedy tokens one per call; the logits before each chosen token into
 * lg[step][V], the tokens into out. 0 on failure. */
static int run_alone(lilac_model *m, const int32_t *toks, int np, int32_t *out, float *lg)
{
    int V = lilac_model_hparams(m)->n_vocab;
    lilac_seq *s = NULL;
    lilac_error err;
    if (lilac_seq_new(m, np + STEPS + 1, &s, &err))
        return 0;
    lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_LAST, .logits = lg};
    int ok = !lilac_seq_eval(s, toks, np, &o, &err);
    for (int st = 0; ok && st < g_steps; st++) {
        out[st] = tm_argmax(lg + (size_t)st * V, V);
        if (st + 1 < g_steps) {
            o.logits = lg + (size_t)(st + 1) * V;
            ok = !lilac_seq_eval(s, &out[st], 1, &o, &err);
        }
    }
    if (!ok)
        fprintf(stderr, "alone: %s\n", err.msg);
    lilac_seq_free(s);
    return ok;
}

/* NSEQ sequences decode together: 5 and 24 take the CUDA-core products and the routed experts a (token,
 * expert) pair a slot (LILAC_CUDA_PAIRS=0: the grouped product), 64 the tensor cores for every quantized
 * matrix and the grouped experts. */
static void run(const char *fx, const char *model, const char *file, const int NSEQ, bool exact)
{
    setenv("LILAC_CUDA_BATCH_EXACT", exact ? "1" : "0", 1);
    char path[8192], mp[8192];
    snprintf(path, sizeof path, "%s/%s/%s", fx, model, file);
    snprintf(mp, sizeof mp, "%s/%s/golden/meta.json", fx, model);
    json_t *meta = json_load_file(mp, 0, NULL);
    int n = 0;
    int32_t *toks = tm_json_ints(meta, "tokens", NULL, &n);
    lilac_model *m = tm_open_backend(path, LILAC_BACKEND_CUDA);
    CHECKF(meta && toks && m && n >= 3 + 40, "%s: meta, tokens and the model on CUDA", path);
    if (!meta || !toks || !m || n < 3 + 40)
        goto done;
    int V = lilac_model_hparams(m)->n_vocab;
    CHECKF(lilac_cuda_decode_batch_wanted(m, NSEQ), "%s: the batched step is taken (not one sequence after another)",
           path);
    CHECKF(lilac_cuda_batch_exact_wanted(m) == exact, "%s: the exact batched step is %s", path, exact ? "on" : "off");
    float *ref = malloc((size_t)NSEQ * STEPS * V * sizeof(float));
    int32_t ref_tok[MAXSEQ][STEPS], got_tok[MAXSEQ][STEPS];
    int ok = ref != NULL;
    for (int i = 0; ok && i < NSEQ; i++)
        ok = run_alone(m, toks, prompt_len(i), ref_tok[i], ref + (size_t)i * STEPS * V);
    CHECKF(ok, "%s: each sequence alone", path);
    lilac_batch *b = NULL;
    lilac_seq *seqs[MAXSEQ] = {0};
    lilac_error err;
    ok = ok && !lilac_batch_new(m, NSEQ, 64, &b, &err);
    for (int i = 0; ok && i < NSEQ; i++)
        ok = !lilac_seq_new(m, prompt_len(i) + STEPS + 1, &seqs[i], &err);
    /* step 0: sequences 0..3 take their prompts, one at a time inside; sequence 4's prompt goes in at step 1
     * beside the others' first decode tokens (the mixed path) */
    double worst = 0;
    int bad_tok = 0, bad_top = 0;
    for (int st = 0; ok && st <= g_steps; st++) {
        lilac_batch_item it[MAXSEQ];
        int ni = 0, who[MAXSEQ];
        for (int i = 0; i < NSEQ; i++) {
            int first = i == NSEQ - 1 ? 1 : 0; /* the step its prompt goes in */
            int k = st - first;                /* its decode steps done before this one */
            if (k < 0 || k >= g_steps)
                continue;
            /* odd sequences ask for the sampler's top 40 instead of the logits (the prompt's through the host's
             * reduction, the batched step's on the device) */
            const int top_k = i % 2 ? 40 : 0;
            if (k == 0)
                it[ni] = (lilac_batch_item){seqs[i], toks, prompt_len(i), true, top_k};
            else
                it[ni] = (lilac_batch_item){seqs[i], &got_tok[i][k - 1], 1, true, top_k};
            who[ni++] = i;
        }
        if (!ni)
            continue;
        if (lilac_batch_eval(b, it, ni, &err)) {
            CHECKF(0, "%s: batch step %d: %s", path, st, err.msg);
            ok = 0;
            break;
        }
        for (int j = 0; j < ni; j++) {
            int i = who[j], k = st - (i == NSEQ - 1 ? 1 : 0);
            const float *lg = lilac_batch_logits(b, j), *rf = ref + ((size_t)i * STEPS + k) * V;
            if (i % 2) { /* the top form: exact, the host's reduction of the lone run's logits; else its best */
                const lilac_logits_top *t = lilac_batch_top(b, j);
                lilac_logits_top want;
                lilac_logits_top_of(rf, V, 40, &want);
                bool same = t && !lg && t->n == want.n;
                for (int c = 0; same && exact && c < want.n; c++)
                    same = t->id[c] == want.id[c] && t->logit[c] == want.logit[c];
                const double scale = fabs(want.lse) > 1 ? fabs(want.lse) : 1;
                bad_top += !same || (exact && fabs(t->lse - want.lse) > 1e-6 * scale);
                got_tok[i][k] = t ? t->id[0] : -1;
                bad_tok += got_tok[i][k] != ref_tok[i][k];
                continue;
            }
            if (!lg) {
                CHECKF(0, "%s: no logits for sequence %d at step %d", path, i, st);
                ok = 0;
                break;
            }
            double d = tm_max_diff(lg, rf, (size_t)V) / tm_max_abs(rf, (size_t)V);
            worst = d > worst ? d : worst;
            got_tok[i][k] = tm_argmax(lg, V);
            bad_tok += got_tok[i][k] != ref_tok[i][k];
        }
    }
    if (ok) {
        printf("%s: batched decode of %d sequences vs alone (%s): max|d|/max|logit| %.3e, %d tokens differ\n", path,
               NSEQ, exact ? "exact" : "not exact", worst, bad_tok);
        /* exact: the one-token step's kernels, its bits. Otherwise, from 8 sequences the experts' products run on
         * the tensor cores (64 pairs and more; the dense ones from 48 rows), activations as two fp16 digits (~22
         * bits): logits differ from the lone runs' CUDA-core ones by ~1.7e-5 (H200) */
        const double bound = exact ? 0.0 : NSEQ >= 8 ? 5e-5 : 1e-5;
        CHECKF(worst <= bound, "%s: batched logits within %.0e of max|logit| of each sequence alone (%.3e)", path,
               bound, worst);
        CHECKF(bad_tok == 0, "%s: batched greedy tokens equal each sequence's alone (%d differ)", path, bad_tok);
        CHECKF(bad_top == 0, "%s: %d steps' top 40 (odd sequences) not %s the lone run's", path, bad_top,
               exact ? "those of" : "as many as");
    }
    for (int i = 0; i < NSEQ; i++)
        lilac_seq_free(seqs[i]);
    lilac_batch_free(b);
    free(ref);
done:
    lilac_model_free(m);
    free(toks);
    json_decref(meta);
}

int main(void)
{
    TM_REQUIRE_CUDA();
    const char *fx = tu_require_fixtures();
    unsetenv("LILAC_CUDA_BATCH"); /* the default: batched */
    /* LILAC_CUDA_TEST_QUICK=1 (the sanitizers' slow runs): 5 and 64 sequences of the Q4_K_M file only */
    const bool quick = lilac_env_switch("LILAC_CUDA_TEST_QUICK", false);
    g_steps = lilac_env_int("LILAC_CUDA_TEST_TOKENS", STEPS, 1, STEPS);
    /* LILAC_CUDA_TEST_PARTS (racecheck: a part at a time): exact, fast (the two steps), x64 (the 64-sequence runs) */
    int ran = 0;
    for (int exact = 1; exact >= 0; exact--) { /* the exact step (the default), then the faster one */
        if (!ct_part(exact ? "exact" : "fast"))
            continue;
        if (!quick) {
            run(fx, "tiny-qwen35moe", "gguf/model-bf16.gguf", 5, exact);
            run(fx, "tiny-qwen3moe", "gguf/model-bf16.gguf", 5, exact);
        }
        run(fx, "tiny-qwen35moe", "gguf/model-Q4_K_M.gguf", 5, exact);
        if (!quick)
            run(fx, "tiny-qwen35moe", "gguf/model-Q4_K_M.gguf", 24, exact);
        if (ct_part("x64"))
            run(fx, "tiny-qwen35moe", "gguf/model-Q4_K_M.gguf", MAXSEQ, exact);
        ran++;
    }
    CHECKF(ran > 0, "LILAC_CUDA_TEST_PARTS=%s names neither step (exact, fast)", getenv("LILAC_CUDA_TEST_PARTS"));
    TEST_END();
}
