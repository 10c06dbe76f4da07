/* test_active_bytes: lilac_model_active_bytes (what `lilac plan` and `lilac bench`'s weights_gb_s take as the
 * bytes one generated token reads) against a count made here from the GGUF file's own tensor list: every tensor's
 * bytes, the routed experts' (`*_exps.*`) times n_expert_used / n_expert, and one row of `token_embd.weight` where
 * the file has an `output.weight` of its own (else the output reads the whole tied table). On the tiny fixtures'
 * quantized files. Skips without the fixtures. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/gguf.h"
#include "models.h"

static void check_file(const char *dir, const char *file)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) {
        CHECKF(0, "%s/%s: path too long", dir, file);
        return;
    }
    gguf_file *g = NULL;
    lilac_error err = {0};
    CHECKF(gguf_open(path, &g, &err) == LILAC_OK, "%s: %s", path, err.msg);
    if (!g)
        return;
    lilac_model *m = tm_open(path, 1);
    CHECKF(m != NULL, "%s opens", path);
    if (!m) {
        gguf_close(g);
        return;
    }
    const lilac_hparams *hp = lilac_model_hparams(m);
    const bool tied = gguf_find_tensor(g, "output.weight") == NULL;
    double want = 0;
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        double b = (double)t->nbytes;
        if (strstr(t->name, "_exps."))
            b *= (double)hp->n_expert_used / hp->n_expert;
        else if (!strcmp(t->name, "token_embd.weight") && !tied)
            b /= (double)t->ne[1]; /* one row of ne[1] */
        want += b;
    }
    const double got = (double)lilac_model_active_bytes(m), w = (double)lilac_model_weight_bytes(m);
    printf("%-22s %s: %.0f bytes a token of %.0f (%.1f %%), counted here %.0f\n", file, tied ? "tied " : "untied", got,
           w, 100.0 * got / w, want);
    /* rounding: the experts' share is cast to whole bytes once */
    CHECKF(got >= want - 2 && got <= want + 2, "%s: lilac_model_active_bytes %.0f, the file's tensors say %.0f", file,
           got, want);
    CHECKF(got < w, "%s: a token reads all %.0f weight bytes", file, w);
    lilac_model_free(m);
    gguf_close(g);
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    char dir[4096];
    static const char *files[] = {"model-Q4_K_M.gguf", "model-Q8_0.gguf", "model-bf16.gguf"};
    static const char *models[] = {"tiny-qwen35moe", "tiny-qwen3moe"};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        if (snprintf(dir, sizeof dir, "%s/%s/gguf", fx, models[mi]) >= (int)sizeof dir) {
            CHECKF(0, "%s: path too long", fx);
            continue;
        }
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            check_file(dir, files[i]);
    }
    TEST_END();
}
