/* synth: random-weight GGUF files in published models' shapes.
 *
 * 1. The tiny preset as BF16 and F32: the same metadata, tensor names,
 *    shapes, types and order as llama.cpp's converter wrote for the
 *    tiny-qwen35moe fixture (all but general.name; with the fixture's
 *    tokenizer); lilac runs it (finite logits); `lilac info` shows the shape;
 *    the plan matches the file byte for byte; the seed decides the bytes.
 * 2. The tiny preset as Q8_0 and Q4_K_M: every tensor's name, shape and
 *    type as the mix says (Q8_0: exactly the layout of the fixture's
 *    llama-quantize file); every block's scales finite, every dequantized
 *    weight small; lilac runs it where it has the kernels (else skipped).
 * 3. The plans of the big presets, without writing them: the Qwen3.6-35B-A3B
 *    Q4_K_M file comes to 19.65 GiB, with its layer pattern and shapes.
 * 4. Errors: unknown preset or type, a missing directory, a tokenizer too
 *    large, a full disk, an interruption: a clear error and no file left.
 * 5. Tokenizers: the byte-level fallback tokenizes; a GGUF's is copied. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "kernels/cpu/cpu.h"
#include "model/synth.h"
#include "gguf_compare.h"
#include "models.h"
#include "testutil.h"

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Neither FILE nor FILE.tmp. */
static bool no_file_left(const char *path)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    return !exists(path) && !exists(tmp);
}

static lilac_synth_params params(const char *preset, const char *type, const char *tokenizer)
{
    lilac_synth_params p = {.preset = preset, .type = type, .tokenizer = tokenizer, .seed = 1};
    return p;
}

static lilac_status synth(const char *preset, const char *type, const char *tokenizer, uint64_t seed,
                          const char *out, lilac_synth_plan **plan, lilac_error *err)
{
    lilac_synth_params p = params(preset, type, tokenizer);
    p.seed = seed;
    return lilac_synth_write(&p, out, plan, err);
}

/* ---- comparing with a fixture ---- */

/* The same keys in the same order with the same types and values (but
 * general.name), and the same tensors in the same order, names, shapes and
 * types; `types` false skips the tensor types and general.file_type. */
static void compare_layout(const char *what, const char *path, const char *fixture, bool types)
{
    lilac_error err;
    gguf_file *a = NULL, *b = NULL;
    if (gguf_open(path, &a, &err) || gguf_open(fixture, &b, &err)) {
        CHECKF(0, "%s: %s", what, err.msg);
        gguf_close(a);
        return;
    }
    CHECKF(gguf_n_kv(a) == gguf_n_kv(b), "%s: %zu keys, the fixture has %zu", what, gguf_n_kv(a), gguf_n_kv(b));
    for (size_t i = 0; i < gguf_n_kv(a) && i < gguf_n_kv(b); i++) {
        const gguf_kv *x = gguf_kv_at(a, i), *y = gguf_kv_at(b, i);
        CHECKF(!strcmp(x->key, y->key), "%s: key %zu is '%s', the fixture's '%s'", what, i, x->key, y->key);
        if (strcmp(x->key, "general.name") && (types || strcmp(x->key, "general.file_type")))
            CHECKF(gc_kv_equal(x, y, NULL, 0), "%s: '%s' differs from the fixture's", what, x->key);
    }
    CHECKF(gguf_n_tensors(a) == gguf_n_tensors(b), "%s: %zu tensors, the fixture has %zu", what, gguf_n_tensors(a),
           gguf_n_tensors(b));
    for (size_t i = 0; i < gguf_n_tensors(a) && i < gguf_n_tensors(b); i++) {
        const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
        bool same = !strcmp(x->name, y->name) && x->n_dims == y->n_dims && !memcmp(x->ne, y->ne, sizeof x->ne) &&
                    (!types || (x->type == y->type && x->nbytes == y->nbytes));
        CHECKF(same, "%s: tensor %zu '%s' (type %d) differs from the fixture's '%s' (type %d)", what, i, x->name,
               x->type, y->name, y->type);
    }
    gguf_close(a);
    gguf_close(b);
}

/* The plan says what the file holds, to the byte. */
static void check_plan_matches(const char *what, const char *path, const lilac_synth_plan *pl)
{
    lilac_error err;
    gguf_file *f = NULL;
    if (gguf_open(path, &f, &err)) {
        CHECKF(0, "%s: %s", what, err.msg);
        return;
    }
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == pl->file_bytes);
    CHECK(gguf_n_kv(f) == pl->n_kv);
    CHECKF(gguf_n_tensors(f) == pl->n_tensors, "%s: %zu tensors, plan %zu", what, gguf_n_tensors(f), pl->n_tensors);
    const uint8_t *base = gguf_n_tensors(f) ? gguf_tensor_at(f, 0)->data : NULL;
    uint64_t sum = 0;
    for (size_t i = 0; i < gguf_n_tensors(f) && i < pl->n_tensors; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const lilac_synth_tensor *p = &pl->tensors[i];
        bool ok = !strcmp(t->name, p->name) && t->type == p->type && t->n_dims == p->n_dims &&
                  !memcmp(t->ne, p->ne, sizeof t->ne) && t->nbytes == p->nbytes &&
                  (uint64_t)((const uint8_t *)t->data - base) == p->offset - pl->tensors[0].offset;
        CHECKF(ok, "%s: tensor %zu '%s' is not as planned", what, i, t->name);
        sum += t->nbytes;
    }
    CHECK(pl->data_bytes >= sum && pl->data_bytes - sum < 32 * pl->n_tensors);
    CHECK(pl->tensors[0].offset == pl->header_bytes && pl->header_bytes + pl->data_bytes == pl->file_bytes);
    gguf_close(f);
}

/* ---- running the model ---- */

static void check_runs(const char *what, const char *path, int n_vocab)
{
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = 2;
    lilac_model *m = NULL;
    lilac_error err;
    if (lilac_model_open(path, &mp, &m, &err)) {
        if (err.status == LILAC_E_UNSUPPORTED) {
            printf("note: %s: lilac cannot run it yet (%s); forward pass not checked\n", what, err.msg);
            return;
        }
        CHECKF(0, "%s: %s", what, err.msg);
        return;
    }
    CHECK(lilac_model_hparams(m)->n_vocab == n_vocab);
    const int32_t toks[8] = {1, 17, 256, 1000, 5, 2000, 42, 7};
    float *lg = tm_logits(m, toks, 8, 0, NULL);
    float *lg1 = tm_logits(m, toks, 8, 1, NULL);
    CHECKF(lg && lg1, "%s: evaluation failed", what);
    if (lg && lg1) {
        size_t n = (size_t)8 * (size_t)n_vocab, bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !isfinite(lg[i]) || !isfinite(lg1[i]);
        float mx = tm_max_abs(lg, n), d = tm_max_diff(lg, lg1, n);
        CHECKF(bad == 0, "%s: %zu non-finite logits", what, bad);
        CHECKF(mx > 0.01f && mx < 100.0f, "%s: largest logit %g", what, mx);
        CHECKF(d <= 1e-2f * mx, "%s: prefill and decode differ by %g (largest %g)", what, d, mx);
        printf("%s: 8 tokens, logits finite, largest |logit| %.3f, prefill vs decode %.2e\n", what, mx, d);
    }
    free(lg);
    free(lg1);
    lilac_model_free(m);
}

/* Run the command line; its output (stdout and stderr, all of it) into
 * *out (malloc'd). Returns the exit status, or -1 if the binary is not
 * there. */
static int run_cli(const char *args, char **out)
{
    char cmd[2048];
    *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/lilac", LILAC_BINARY_DIR);
    if (access(cmd, X_OK) != 0)
        return -1;
    snprintf(cmd, sizeof cmd, "%s/lilac %s 2>&1", LILAC_BINARY_DIR, args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (buf && n + 4096 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            } else {
                buf = nb;
            }
        }
        char tmp[4096];
        size_t k = fread(buf ? buf + n : tmp, 1, 4096, p);
        if (k == 0)
            break;
        if (buf)
            n += k;
    }
    if (buf)
        buf[n] = 0;
    int st = pclose(p);
    *out = buf ? buf : strdup("");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- block types ---- */

static float f16(const uint8_t *p)
{
    return lilac_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Dequantize one block (written here from the format, independently of
 * the kernels); false if a scale is not finite. */
static bool dequant_block(int type, const uint8_t *b, float *y)
{
    if (type == LILAC_Q8_0) {
        float d = f16(b);
        for (int i = 0; i < 32; i++)
            y[i] = d * (float)(int8_t)b[2 + i];
        return isfinite(d);
    }
    if (type == LILAC_Q4_K) {
        float d = f16(b), dmin = f16(b + 2);
        const uint8_t *q = b + 4, *qs = b + 16;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            if (j < 4) {
                sc = q[j] & 63;
                m = q[j + 4] & 63;
            } else {
                sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
                m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
            }
            for (int l = 0; l < 32; l++) {
                int v = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 0xF;
                y[32 * j + l] = d * (float)sc * (float)v - dmin * (float)m;
            }
        }
        return isfinite(d) && isfinite(dmin);
    }
    if (type == LILAC_Q6_K) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16(b + 208);
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
        return isfinite(d);
    }
    return false;
}

/* Every block's scales finite, every weight small, the deviation as
 * planned (0.5 / sqrt(fan_in); 0.02 for the embedding). */
static void check_blocks(const char *what, const char *path)
{
    lilac_error err;
    gguf_file *f = NULL;
    if (gguf_open(path, &f, &err)) {
        CHECKF(0, "%s: %s", what, err.msg);
        return;
    }
    size_t n_blocks = 0, bad_scale = 0, bad_tensors = 0;
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const lilac_dtype_info *di = lilac_dtype_get(t->type);
        if (t->type == LILAC_F32 || t->type == LILAC_BF16 || !di)
            continue;
        float y[256], mx = 0;
        double ss = 0;
        size_t nonfinite = 0;
        size_t nb = t->nbytes / di->size;
        for (size_t k = 0; k < nb; k++) {
            if (!dequant_block(t->type, (const uint8_t *)t->data + k * di->size, y))
                bad_scale++;
            for (uint32_t j = 0; j < di->blck; j++) {
                float a = fabsf(y[j]);
                if (!isfinite(a))
                    nonfinite++;
                else if (a > mx)
                    mx = a;
                ss += (double)y[j] * y[j];
            }
        }
        n_blocks += nb;
        double sd = sqrt(ss / ((double)nb * di->blck));
        double want = strstr(t->name, "token_embd") ? 0.02 : 0.5 / sqrt((double)t->ne[0]);
        bool ok = nonfinite == 0 && mx < 0.5f && sd > 0.85 * want && sd < 1.15 * want;
        bad_tensors += !ok;
        CHECKF(ok, "%s: %s (%s): largest |w| %g, deviation %g (want %g)", what, t->name, di->name, mx, sd, want);
    }
    CHECKF(bad_scale == 0, "%s: %zu of %zu blocks with non-finite scales", what, bad_scale, n_blocks);
    printf("%s: %zu blocks, scales finite, weights small, deviations as planned\n", what, n_blocks);
    gguf_close(f);
}

/* The type the mixes give a tensor (the rules of synth.h, restated). */
static int expected_type(const char *mix, const char *name)
{
    const char *s = strncmp(name, "blk.", 4) ? name : strchr(name + 4, '.') + 1;
    int il = strncmp(name, "blk.", 4) ? -1 : atoi(name + 4);
    bool small = strstr(s, "norm") || !strncmp(s, "ssm_conv1d", 10) || !strcmp(s, "ssm_a") ||
                 !strncmp(s, "ssm_dt", 6) || !strncmp(s, "ffn_gate_inp", 12);
    if (small || !strcmp(mix, "F32"))
        return LILAC_F32;
    if (!strcmp(mix, "BF16"))
        return LILAC_BF16;
    if (!strcmp(mix, "Q8_0"))
        return LILAC_Q8_0;
    if (!strncmp(s, "ssm_alpha", 9) || !strncmp(s, "ssm_beta", 8))
        return LILAC_Q8_0;
    if (!strncmp(s, "attn_v.", 7) || !strncmp(s, "ffn_down_shexp", 14) || !strcmp(s, "output.weight") ||
        (!strncmp(s, "ffn_down_exps", 13) && il % 2 == 0))
        return LILAC_Q6_K;
    return LILAC_Q4_K;
}

static void check_types(const char *what, const lilac_synth_plan *pl)
{
    size_t bad = 0;
    for (size_t i = 0; i < pl->n_tensors; i++) {
        const lilac_synth_tensor *t = &pl->tensors[i];
        int want = expected_type(pl->mix, t->name);
        if (t->type != want && bad++ < 5)
            CHECKF(0, "%s: %s is %s, the mix says %s", what, t->name, lilac_dtype_get(t->type)->name,
                   lilac_dtype_get(want)->name);
    }
    CHECKF(bad == 0, "%s: %zu tensors of the wrong type", what, bad);
}

static const lilac_synth_tensor *find(const lilac_synth_plan *pl, const char *name)
{
    for (size_t i = 0; i < pl->n_tensors; i++)
        if (!strcmp(pl->tensors[i].name, name))
            return &pl->tensors[i];
    return NULL;
}

static bool shape_is(const lilac_synth_plan *pl, const char *name, int type, int64_t a, int64_t b, int64_t c)
{
    const lilac_synth_tensor *t = find(pl, name);
    if (!t) {
        fprintf(stderr, "no tensor %s\n", name);
        return false;
    }
    bool ok = t->ne[0] == a && t->ne[1] == b && t->ne[2] == c && (type < 0 || t->type == type);
    if (!ok)
        fprintf(stderr, "%s: [%lld, %lld, %lld] %s\n", name, (long long)t->ne[0], (long long)t->ne[1],
                (long long)t->ne[2], lilac_dtype_get(t->type)->name);
    return ok;
}

/* ---- the parts ---- */

/* fx: the fixtures, or NULL (then the byte-level tokenizer, and no
 * comparison with the fixture files). */
static void test_tiny_float(const char *fx)
{
    char tok[1024], fixture[1024];
    snprintf(tok, sizeof tok, "%s/tiny-qwen35moe/hf", fx ? fx : "");
    snprintf(fixture, sizeof fixture, "%s/tiny-qwen35moe/gguf/model-bf16.gguf", fx ? fx : "");
    static const char *const mixes[2] = {"BF16", "F32"};
    for (int k = 0; k < 2; k++) {
        char name[64], what[64];
        snprintf(name, sizeof name, "tiny-%s.gguf", mixes[k]);
        snprintf(what, sizeof what, "tiny %s", mixes[k]);
        const char *out = tmp_path(name);
        lilac_synth_plan *pl = NULL;
        lilac_error err;
        lilac_status s = synth("tiny", mixes[k], fx ? tok : NULL, 1, out, &pl, &err);
        CHECKF(s == LILAC_OK, "%s: %s", what, err.msg);
        if (s)
            continue;
        check_plan_matches(what, out, pl);
        check_types(what, pl);
        /* the layout of llama.cpp's converter (F32: the types differ) */
        if (fx)
            compare_layout(what, out, fixture, k == 0);
        check_runs(what, out, 2048);
        lilac_synth_plan_free(pl);
    }
    /* the seed decides the bytes */
    const char *a = tmp_path("tiny-BF16.gguf"), *b = tmp_path("seed1.gguf"), *c = tmp_path("seed2.gguf");
    lilac_error err;
    CHECK(synth("tiny", "bf16", fx ? tok : NULL, 1, b, NULL, &err) == LILAC_OK);
    CHECK(synth("tiny", "BF16", fx ? tok : NULL, 2, c, NULL, &err) == LILAC_OK);
    size_t na = 0, nb = 0, nc = 0;
    uint8_t *fa = tu_read_file(a, &na), *fb = tu_read_file(b, &nb), *fc = tu_read_file(c, &nc);
    CHECK(fa && fb && fc && na == nb && nb == nc);
    if (fa && fb && fc && na == nb && nb == nc) {
        CHECK(memcmp(fa, fb, na) == 0);
        CHECK(memcmp(fa, fc, na) != 0);
    }
    free(fa);
    free(fb);
    free(fc);
    /* lilac info shows the shape */
    char args[1200], *outb = NULL;
    snprintf(args, sizeof args, "info %s", a);
    int rc = run_cli(args, &outb);
    if (rc < 0) {
        printf("note: no lilac binary in %s; lilac info not checked\n", LILAC_BINARY_DIR);
    } else {
        CHECKF(rc == 0 && strstr(outb, "[DDDA]") && strstr(outb, "hidden:       256, vocabulary 2048") &&
                   strstr(outb, "4 query / 2 key-value heads of 128, rotary on 32 dims") &&
                   strstr(outb, "2 key heads of 128, 4 value heads of 128, conv kernel 4") &&
                   strstr(outb, "experts:      8, 2 per token, width 256"),
               "lilac info: %s", outb);
    }
    free(outb);
}

static void test_tiny_quant(const char *fx)
{
    char tok[1024], fixture[1024];
    snprintf(tok, sizeof tok, "%s/tiny-qwen35moe/hf/tokenizer.json", fx ? fx : "");
    static const char *const mixes[2] = {"Q8_0", "Q4_K_M"};
    for (int k = 0; k < 2; k++) {
        char name[64], what[64];
        snprintf(name, sizeof name, "tiny-%s.gguf", mixes[k]);
        snprintf(what, sizeof what, "tiny %s", mixes[k]);
        const char *out = tmp_path(name);
        lilac_synth_plan *pl = NULL;
        lilac_error err;
        lilac_status s = synth("tiny", mixes[k], fx ? tok : NULL, 7, out, &pl, &err);
        CHECKF(s == LILAC_OK, "%s: %s", what, err.msg);
        if (s)
            continue;
        check_plan_matches(what, out, pl);
        check_types(what, pl);
        CHECK(shape_is(pl, "blk.0.ffn_gate_inp_shexp.weight", LILAC_F32, 256, 1, 1) &&
              find(pl, "blk.0.ffn_gate_inp_shexp.weight")->n_dims == 1);
        CHECK(shape_is(pl, "blk.3.attn_q.weight", -1, 256, 1024, 1));
        CHECK(shape_is(pl, "blk.2.ffn_down_exps.weight", -1, 256, 256, 8));
        /* llama-quantize's order: globals, then by layer and name */
        CHECK(!strcmp(pl->tensors[0].name, "output.weight") && !strcmp(pl->tensors[1].name, "output_norm.weight") &&
              !strcmp(pl->tensors[2].name, "token_embd.weight") &&
              !strcmp(pl->tensors[3].name, "blk.0.attn_gate.weight"));
        if (k == 0 && fx) { /* the whole layout of the fixture's llama-quantize file */
            snprintf(fixture, sizeof fixture, "%s/tiny-qwen35moe/gguf/model-Q8_0.gguf", fx);
            compare_layout(what, out, fixture, true);
        }
        check_blocks(what, out);
        check_runs(what, out, 2048);
        lilac_synth_plan_free(pl);
    }
    if (!fx) {
        printf("note: fixtures not found; the files were not compared with llama.cpp's\n");
        return;
    }
    /* qwen3moe: the fixture's metadata and layout, tokenizer copied from a GGUF */
    char src[1024];
    snprintf(src, sizeof src, "%s/tiny-qwen3moe/gguf/model-bf16.gguf", fx);
    const char *out = tmp_path("tiny-qwen3moe.gguf");
    lilac_error err;
    lilac_status s = synth("tiny-qwen3moe", "BF16", src, 3, out, NULL, &err);
    CHECKF(s == LILAC_OK, "tiny-qwen3moe: %s", err.msg);
    if (!s) {
        compare_layout("tiny-qwen3moe BF16", out, src, true);
        check_runs("tiny-qwen3moe BF16", out, 2048);
    }
    out = tmp_path("tiny-qwen3moe-q8.gguf");
    snprintf(src, sizeof src, "%s/tiny-qwen3moe/gguf/model-Q8_0.gguf", fx);
    s = synth("tiny-qwen3moe", "Q8_0", src, 3, out, NULL, &err);
    CHECKF(s == LILAC_OK, "tiny-qwen3moe Q8_0: %s", err.msg);
    if (!s)
        compare_layout("tiny-qwen3moe Q8_0", out, src, true);
}

static void test_big_plans(void)
{
    lilac_synth_params p = params("qwen3.6-35b-a3b", "Q4_K_M", NULL);
    lilac_synth_plan *pl = NULL;
    lilac_error err;
    lilac_status s = lilac_synth_plan_new(&p, &pl, &err);
    CHECKF(s == LILAC_OK, "plan: %s", err.msg);
    if (s)
        return;
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    uint64_t by_type[64] = {0}, tensors = 0;
    for (size_t i = 0; i < pl->n_tensors; i++) {
        by_type[pl->tensors[i].type] += pl->tensors[i].nbytes;
        tensors += pl->tensors[i].nbytes;
    }
    printf("qwen3.6-35b-a3b Q4_K_M: %zu tensors; Q4_K %.4f, Q6_K %.4f, Q8_0 %.4f, F32 %.4f GiB; "
           "tensor data %.4f GiB, file %.4f GiB (%llu bytes)\n",
           pl->n_tensors, by_type[LILAC_Q4_K] / GiB, by_type[LILAC_Q6_K] / GiB, by_type[LILAC_Q8_0] / GiB,
           by_type[LILAC_F32] / GiB, tensors / GiB, pl->file_bytes / GiB, (unsigned long long)pl->file_bytes);
    /* 19.65 GiB: the size llama.cpp reports for the published file (its
     * tensors); the file on disk adds the header (5.4 MiB here). */
    CHECKF(fabs(tensors / GiB - 19.65) < 0.01, "tensor data %.4f GiB, want 19.65", tensors / GiB);
    CHECKF(fabs(pl->file_bytes / GiB - 19.65) < 0.01, "file %.4f GiB, want 19.65", pl->file_bytes / GiB);
    CHECK(tensors == 21103667712ull);
    CHECK(by_type[LILAC_Q4_K] == 16146432000ull && by_type[LILAC_Q6_K] == 4864204800ull &&
          by_type[LILAC_Q8_0] == 4177920ull && by_type[LILAC_F32] == 88852992ull);
    CHECK(pl->n_tensors == 733 && pl->n_layer == 40 && pl->n_vocab == 248320);
    char pattern[41];
    for (int i = 0; i < 40; i++)
        pattern[i] = pl->is_ssm[i] ? 'D' : 'A';
    pattern[40] = 0;
    CHECKF(!strcmp(pattern, "DDDADDDADDDADDDADDDADDDADDDADDDADDDADDDA"), "layers %s", pattern);
    check_types("qwen3.6-35b-a3b Q4_K_M", pl);
    CHECK(shape_is(pl, "token_embd.weight", LILAC_Q4_K, 2048, 248320, 1));
    CHECK(shape_is(pl, "output.weight", LILAC_Q6_K, 2048, 248320, 1));
    CHECK(shape_is(pl, "blk.0.attn_qkv.weight", LILAC_Q4_K, 2048, 8192, 1));
    CHECK(shape_is(pl, "blk.0.attn_gate.weight", LILAC_Q4_K, 2048, 4096, 1));
    CHECK(shape_is(pl, "blk.0.ssm_alpha.weight", LILAC_Q8_0, 2048, 32, 1));
    CHECK(shape_is(pl, "blk.0.ssm_beta.weight", LILAC_Q8_0, 2048, 32, 1));
    CHECK(shape_is(pl, "blk.0.ssm_conv1d.weight", LILAC_F32, 4, 8192, 1));
    CHECK(shape_is(pl, "blk.0.ssm_a", LILAC_F32, 32, 1, 1));
    CHECK(shape_is(pl, "blk.0.ssm_dt.bias", LILAC_F32, 32, 1, 1));
    CHECK(shape_is(pl, "blk.0.ssm_norm.weight", LILAC_F32, 128, 1, 1));
    CHECK(shape_is(pl, "blk.0.ssm_out.weight", LILAC_Q4_K, 4096, 2048, 1));
    CHECK(shape_is(pl, "blk.3.attn_q.weight", LILAC_Q4_K, 2048, 8192, 1));
    CHECK(shape_is(pl, "blk.3.attn_k.weight", LILAC_Q4_K, 2048, 512, 1));
    CHECK(shape_is(pl, "blk.3.attn_v.weight", LILAC_Q6_K, 2048, 512, 1));
    CHECK(shape_is(pl, "blk.3.attn_output.weight", LILAC_Q4_K, 4096, 2048, 1));
    CHECK(shape_is(pl, "blk.3.attn_q_norm.weight", LILAC_F32, 256, 1, 1));
    CHECK(!find(pl, "blk.3.attn_qkv.weight") && !find(pl, "blk.0.attn_q.weight"));
    CHECK(shape_is(pl, "blk.0.ffn_gate_exps.weight", LILAC_Q4_K, 2048, 512, 256));
    CHECK(shape_is(pl, "blk.0.ffn_up_exps.weight", LILAC_Q4_K, 2048, 512, 256));
    CHECK(shape_is(pl, "blk.0.ffn_down_exps.weight", LILAC_Q6_K, 512, 2048, 256));
    CHECK(shape_is(pl, "blk.1.ffn_down_exps.weight", LILAC_Q4_K, 512, 2048, 256));
    CHECK(shape_is(pl, "blk.39.ffn_down_exps.weight", LILAC_Q4_K, 512, 2048, 256));
    CHECK(shape_is(pl, "blk.0.ffn_gate_inp.weight", LILAC_F32, 2048, 256, 1));
    CHECK(shape_is(pl, "blk.0.ffn_gate_shexp.weight", LILAC_Q4_K, 2048, 512, 1));
    CHECK(shape_is(pl, "blk.0.ffn_down_shexp.weight", LILAC_Q6_K, 512, 2048, 1));
    CHECK(shape_is(pl, "blk.0.ffn_gate_inp_shexp.weight", LILAC_F32, 2048, 1, 1));
    lilac_synth_plan_free(pl);

    p = params("qwen3-30b-a3b", "Q4_K_M", NULL);
    s = lilac_synth_plan_new(&p, &pl, &err);
    CHECKF(s == LILAC_OK, "plan: %s", err.msg);
    if (s)
        return;
    bool all_attn = true;
    for (int i = 0; i < 48; i++)
        all_attn = all_attn && !pl->is_ssm[i];
    CHECK(pl->n_layer == 48 && all_attn && pl->n_vocab == 151936 && pl->n_tensors == 3 + 48 * 12);
    CHECK(shape_is(pl, "blk.0.attn_q.weight", LILAC_Q4_K, 2048, 4096, 1));
    CHECK(shape_is(pl, "blk.0.attn_k.weight", LILAC_Q4_K, 2048, 512, 1));
    CHECK(shape_is(pl, "blk.0.attn_v.weight", LILAC_Q6_K, 2048, 512, 1));
    CHECK(shape_is(pl, "blk.0.attn_output.weight", LILAC_Q4_K, 4096, 2048, 1));
    CHECK(shape_is(pl, "blk.0.attn_q_norm.weight", LILAC_F32, 128, 1, 1));
    CHECK(shape_is(pl, "blk.0.ffn_gate_exps.weight", LILAC_Q4_K, 2048, 768, 128));
    CHECK(shape_is(pl, "blk.0.ffn_down_exps.weight", LILAC_Q6_K, 768, 2048, 128));
    CHECK(shape_is(pl, "blk.47.ffn_norm.weight", LILAC_F32, 2048, 1, 1));
    CHECK(shape_is(pl, "token_embd.weight", LILAC_Q4_K, 2048, 151936, 1));
    CHECK(!find(pl, "blk.0.ffn_gate_inp_shexp.weight") && !find(pl, "blk.0.ssm_a"));
    printf("qwen3-30b-a3b Q4_K_M: %zu tensors, %.3f B parameters, file %.2f GiB\n", pl->n_tensors,
           pl->n_params / 1e9, pl->file_bytes / GiB);
    lilac_synth_plan_free(pl);
}

static void test_errors(const char *fx)
{
    lilac_error err;
    const char *out = tmp_path("err.gguf");
    lilac_status s = synth("qwen9-1t", "Q4_K_M", NULL, 1, out, NULL, &err);
    CHECKF(s == LILAC_E_ARG && strstr(err.msg, "unknown preset 'qwen9-1t'") && strstr(err.msg, "qwen3.6-35b-a3b"),
           "unknown preset: %s", err.msg);
    CHECK(no_file_left(out));
    s = synth("tiny", "Q3_K_XL", NULL, 1, out, NULL, &err);
    CHECKF(s == LILAC_E_ARG && strstr(err.msg, "unknown type 'Q3_K_XL'") && strstr(err.msg, "Q4_K_M"),
           "unknown type: %s", err.msg);
    CHECK(no_file_left(out));
    lilac_synth_plan *pl = NULL;
    lilac_synth_params p = params("nope", "F32", NULL);
    CHECK(lilac_synth_plan_new(&p, &pl, &err) == LILAC_E_ARG && pl == NULL);

    const char *deep = tmp_path("no/such/dir/x.gguf");
    s = synth("tiny", "BF16", NULL, 1, deep, NULL, &err);
    CHECKF(s == LILAC_E_IO && strstr(err.msg, "no/such/dir") && strstr(err.msg, "No such file"),
           "missing directory: %s", err.msg);
    CHECK(no_file_left(deep));

    s = synth("tiny", "BF16", tmp_path("no-tokenizer.json"), 1, out, NULL, &err);
    CHECKF(s == LILAC_E_IO && strstr(err.msg, "no-tokenizer.json"), "missing tokenizer: %s", err.msg);
    CHECK(no_file_left(out));

    if (fx) { /* 151,936 tokens do not fit the tiny preset's 2,048 */
        char big[1024];
        snprintf(big, sizeof big, "%s/tokenizer/qwen35-vocab.gguf", fx);
        s = synth("tiny", "Q8_0", big, 1, out, NULL, &err);
        CHECKF(s == LILAC_E_ARG && strstr(err.msg, "151936 tokens do not fit"), "large tokenizer: %s", err.msg);
        CHECK(no_file_left(out));
    }

    /* interrupted before the first chunk */
    volatile sig_atomic_t stop = 1;
    p = params("tiny", "BF16", NULL);
    p.interrupt = &stop;
    s = lilac_synth_write(&p, out, NULL, &err);
    CHECKF(s != LILAC_OK && strstr(err.msg, "interrupted"), "interrupt: %s", err.msg);
    CHECK(no_file_left(out));

    /* a disk without room: the F32 Qwen3.6-35B-A3B (129 GiB) is refused up
     * front, where the disk has less */
    p = params("qwen3.6-35b-a3b", "F32", NULL);
    if (lilac_synth_plan_new(&p, &pl, &err) == LILAC_OK) {
        struct statvfs vs;
        const char *huge = tmp_path("huge.gguf");
        if (statvfs(tmpdir, &vs) == 0 && (uint64_t)vs.f_bavail * vs.f_frsize < pl->file_bytes) {
            s = lilac_synth_write(&p, huge, NULL, &err);
            CHECKF(s == LILAC_E_IO && strstr(err.msg, "not enough disk space"),
                   "full disk: %s", err.msg);
            CHECK(no_file_left(huge));
        } else {
            printf("note: %s has room for %.0f GiB; the full-disk refusal not checked\n", tmpdir,
                   pl->file_bytes / 1073741824.0);
        }
        lilac_synth_plan_free(pl);
    }

    /* the command line */
    char args[1200], *o = NULL;
    snprintf(args, sizeof args, "synth --preset nope --type Q8_0 -o %s", out);
    int rc = run_cli(args, &o);
    if (rc >= 0) {
        CHECKF(rc == 1 && strstr(o, "lilac: error: synth: unknown preset 'nope'"), "cli: %d %s", rc, o);
        CHECK(no_file_left(out));
        free(o);
        rc = run_cli("synth --preset tiny --type Q8_0", &o);
        CHECKF(rc == 1 && strstr(o, "no output file given"), "cli: %d %s", rc, o);
        free(o);
        snprintf(args, sizeof args, "synth --preset tiny --type Q8_0 --seed x -o %s", out);
        rc = run_cli(args, &o);
        CHECKF(rc == 1 && strstr(o, "--seed wants"), "cli: %d %s", rc, o);
        CHECK(no_file_left(out));
        free(o);
        rc = run_cli("synth --preset qwen3.6-35b-a3b --type Q4_K_M --dry-run", &o);
        CHECKF(rc == 0 && strstr(o, "blk.39.ffn_down_exps.weight") &&
                   strstr(o, "= 19.66 GiB (tensor data 19.6543 GiB)"),
               "cli dry run: %d %.2000s", rc, o);
        free(o);
        snprintf(args, sizeof args, "synth --preset tiny --type q4_k_m --seed 5 -o %s", out);
        rc = run_cli(args, &o);
        CHECKF(rc == 0 && strstr(o, "wrote ") && exists(out), "cli write: %d %s", rc, o);
        free(o);
        remove(out);
    }
}

static void test_tokenizers(void)
{
    /* the byte-level fallback */
    const char *out = tmp_path("bytes.gguf");
    lilac_error err;
    lilac_status s = synth("tiny", "Q8_0", NULL, 1, out, NULL, &err);
    CHECKF(s == LILAC_OK, "byte-level: %s", err.msg);
    if (s)
        return;
    lilac_tokenizer *t = NULL;
    s = lilac_tokenizer_load(out, &t, &err);
    CHECKF(s == LILAC_OK, "byte-level tokenizer: %s", err.msg);
    if (s)
        return;
    CHECK(lilac_tokenizer_n_vocab(t) == 2048);
    const char *text = "Hello, w\xc3\xb6rld!\n\t<|im_end|>";
    int32_t *ids = NULL;
    size_t n = 0;
    s = lilac_tokenize(t, text, strlen(text), true, &ids, &n, &err);
    CHECKF(s == LILAC_OK, "tokenize: %s", err.msg);
    if (!s) {
        CHECKF(n == strlen(text) - strlen("<|im_end|>") + 1 && ids[n - 1] == 258, "%zu ids", n);
        bool bytes = true;
        for (size_t i = 0; i + 1 < n; i++)
            bytes = bytes && ids[i] >= 0 && ids[i] < 256;
        CHECK(bytes);
        CHECK(lilac_token_is_eog(t, 258));
        char *back = NULL;
        CHECK(lilac_detokenize(t, ids, n - 1, &back, &err) == LILAC_OK && back &&
              !strncmp(back, text, strlen(text) - strlen("<|im_end|>")));
        free(back);
    }
    free(ids);
    lilac_tokenizer_free(t);
    gguf_file *f = NULL;
    if (gguf_open(out, &f, &err) == LILAC_OK) {
        const gguf_kv *tt = gguf_find_kv(f, "tokenizer.ggml.token_type"), *tk = gguf_find_kv(f, "tokenizer.ggml.tokens");
        int64_t ty = 0;
        CHECK(tt && tk && tt->v.arr.n == 2048 && tk->v.arr.n == 2048);
        CHECK(tk && tk->v.arr.strs[2047].len == 9 && !memcmp(tk->v.arr.strs[2047].ptr, "[PAD2047]", 9));
        CHECK(tt && gguf_arr_i64(tt, 2047, &ty) && ty == 5);
        CHECK(tk && tk->v.arr.strs[0].len == 1 && tk->v.arr.strs[0].ptr[0] == '!');
        gguf_close(f);
    }
}

static void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (remove(p) != 0)
            rm_rf(p), rmdir(p);
    }
    closedir(d);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/lilac-synth-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    const char *fx = tu_fixtures();
    test_big_plans();
    test_errors(fx);
    test_tokenizers();
    test_tiny_float(fx);
    test_tiny_quant(fx);
    rm_rf(tmpdir);
    rmdir(tmpdir);
    TEST_END();
}
