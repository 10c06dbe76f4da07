/* The CPU repack (model/repack.c, kernels/cpu/qr16.h): the Q4_K / Q6_K
 * matrices of a quantized model are repacked at the first sequence; the
 * repacked model's logits agree with the file layout's as closely as the
 * file layout's kernel sets agree with each other (prefill and decode,
 * every kernel set this CPU runs), each repacked row
 * converts back to exactly the file's values, and LILAC_REPACK=0 /
 * no_repack keeps the file layout. */
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "model/model.h"
#include "models.h"

static lilac_model *open_model(const char *path, bool no_repack, const char *kernels)
{
    if (kernels)
        setenv("LILAC_CPU_KERNELS", kernels, 1);
    else
        unsetenv("LILAC_CPU_KERNELS");
    lilac_model_params p = lilac_model_default_params();
    p.n_threads = 2;
    p.no_repack = no_repack;
    p.backend = LILAC_BACKEND_CPU;
    return tm_open_with(path, &p);
}

/* every repacked matrix of a layer converts back to the file's rows */
static void check_rows(const lilac_model *file, const lilac_model *packed)
{
    int checked = 0, bad = 0;
    size_t cols_max = 1 << 16;
    float *a = malloc(cols_max * sizeof(float)), *b = malloc(cols_max * sizeof(float));
    for (int il = 0; il < file->hp.n_layer && a && b; il++) {
        const lilac_layer_weights *fw = &file->w.layers[il], *pw = &packed->w.layers[il];
        const lilac_mat *pairs[][2] = {{&fw->wq, &pw->wq},           {&fw->ssm_qkv, &pw->ssm_qkv},
                                       {&fw->ssm_out, &pw->ssm_out}, {&fw->sh_down, &pw->sh_down},
                                       {&fw->exp_gate[1], &pw->exp_gate[1]}, {&fw->exp_down[2], &pw->exp_down[2]}};
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
            const lilac_mat *f = pairs[i][0], *p = pairs[i][1];
            if (!f->data || lilac_cpu_r16_base(p->type) < 0 || (size_t)f->cols > cols_max)
                continue;
            CHECKF(lilac_cpu_r16_base(p->type) == f->type && p->rows == f->rows && p->cols == f->cols,
                   "layer %d: repacked matrix %zu has type %d from %d", il, i, p->type, f->type);
            for (int64_t r = 0; r < f->rows; r += 7) {
                lilac_mat_row_to_f32(f, r, a);
                lilac_mat_row_to_f32(p, r, b);
                bad += memcmp(a, b, (size_t)f->cols * sizeof(float)) != 0;
                checked++;
            }
        }
    }
    CHECKF(checked > 0 && bad == 0, "%d of %d repacked rows differ from the file's", bad, checked);
    free(a);
    free(b);
}

static void check_model(const char *dir, const char *file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    lilac_model *ref = open_model(path, true, NULL);
    CHECKF(ref != NULL, "%s opens", path);
    if (!ref)
        return;
    int V = lilac_model_hparams(ref)->n_vocab, n = 24;
    int32_t toks[24];
    for (int i = 0; i < n; i++)
        toks[i] = (int32_t)((i * 7919 + 13) % (V > 1000 ? 1000 : V));
    float *want = tm_logits(ref, toks, n, 0, NULL);
    CHECK(lilac_model_repacked_bytes(ref) == 0);
    const char *sets[] = {NULL, "avx2", "scalar"};
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        lilac_model *m = open_model(path, false, sets[si]);
        CHECK(m != NULL);
        if (!m || !want)
            continue;
        CHECKF(lilac_model_repacked_bytes(m) == 0, "not repacked before the first sequence");
        float *pre = tm_logits(m, toks, n, 0, NULL), *dec = tm_logits(m, toks, n, 1, NULL);
        uint64_t rb = lilac_model_repacked_bytes(m);
        const char *kn = m->kern->name;
        CHECKF(rb > 0, "%s (%s): nothing repacked", file, kn);
        if (pre && dec) {
            size_t cnt = (size_t)n * V;
            float scale = tm_max_abs(want, cnt);
            float dp = tm_max_diff(want, pre, cnt) / scale, dd = tm_max_diff(want, dec, cnt) / scale;
            printf("%s, %s kernels, %.2f MiB repacked: max|d|/max|logit| prefill %.2e, decode %.2e\n", file, kn,
                   rb / 1048576.0, dp, dd);
            /* 2e-4: the old layout's own kernel sets (scalar, AVX2, AVX-512)
             * differ by 7-8e-5 of max|logit| on these models, as do its
             * prefill and decode, float32 rounding amplified through the
             * layers; the repacked kernels land in the same range */
            CHECKF(dp <= 2e-4 && dd <= 2e-4, "%s (%s): repacked logits off by %.2e / %.2e of max|logit|", file, kn, dp,
                   dd);
            CHECKF(tm_argmax_agree(want, pre, n, V) == n, "%s (%s): argmax differs", file, kn);
        } else {
            CHECKF(0, "%s (%s): eval failed", file, kn);
        }
        if (!sets[si])
            check_rows(ref, m);
        free(pre);
        free(dec);
        lilac_model_free(m);
    }
    unsetenv("LILAC_CPU_KERNELS");
    free(want);
    lilac_model_free(ref);

    /* LILAC_REPACK=0 is the default's off switch */
    setenv("LILAC_REPACK", "0", 1);
    lilac_model *m = tm_open(path, 1);
    unsetenv("LILAC_REPACK");
    CHECK(m != NULL);
    if (m) {
        float *l = tm_logits(m, toks, 4, 0, NULL);
        CHECKF(l && lilac_model_repacked_bytes(m) == 0, "LILAC_REPACK=0 repacked %llu bytes",
               (unsigned long long)lilac_model_repacked_bytes(m));
        free(l);
        lilac_model_free(m);
    }
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s/tiny-qwen35moe/gguf", fx) >= (int)sizeof dir)
        return 1;
    check_model(dir, "model-Q4_K_M.gguf");
    check_model(dir, "model-Q6_K.gguf");
    TEST_END();
}
