/* lilac convert: HF checkpoint -> GGUF in llama.cpp's layout.
 * - the tiny fixtures convert to exactly what llama.cpp's
 *   convert_hf_to_gguf.py made of them (every tensor's name, shape, type
 *   and bytes; every metadata key and value);
 * - the variants (other head ratios, tied embeddings, layer patterns,
 *   fused experts under model.language_model) give the same logits from the
 *   GGUF as from the HF directory;
 * - errors leave no file behind; the writer round-trips every KV type. */
#include <math.h>
#include <unistd.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/convert.h"
#include "gguf_compare.h"
#include "models.h"

static char tmpdir[256];

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void rm_out(const char *p)
{
    char t[4200];
    snprintf(t, sizeof t, "%s.tmp", p);
    remove(p);
    remove(t);
}

/* Neither OUT nor OUT.tmp exists. */
static bool nothing_left(const char *p)
{
    char t[4200];
    snprintf(t, sizeof t, "%s.tmp", p);
    return !exists(p) && !exists(t);
}

/* ---- oracle comparison ---- */

static void compare_to_oracle(const char *fx, const char *model)
{
    char in[4096], oracle[4096], out[4096];
    snprintf(in, sizeof in, "%s/%s/hf", fx, model);
    snprintf(oracle, sizeof oracle, "%s/%s/gguf/model-bf16.gguf", fx, model);
    snprintf(out, sizeof out, "%s/%s.gguf", tmpdir, model);
    if (!exists(oracle) || !exists(in)) {
        printf("SKIP part: %s: no %s or %s\n", model, in, oracle);
        return;
    }
    lilac_error err;
    lilac_status s = lilac_convert_hf_to_gguf(in, out, NULL, &err);
    CHECKF(s == LILAC_OK, "%s: convert: %s", model, err.msg);
    if (s)
        return;
    gguf_file *a = NULL, *b = NULL;
    CHECKF(gguf_open(out, &a, &err) == LILAC_OK, "%s: reopen: %s", model, err.msg);
    CHECKF(gguf_open(oracle, &b, &err) == LILAC_OK, "%s: oracle: %s", model, err.msg);
    if (!a || !b) {
        gguf_close(a);
        gguf_close(b);
        return;
    }
    /* tensors: same order, names, shapes, types, bytes */
    size_t na = gguf_n_tensors(a), nb = gguf_n_tensors(b);
    CHECKF(na == nb, "%s: %zu tensors, the oracle has %zu", model, na, nb);
    size_t same_bytes = 0;
    for (size_t i = 0; i < nb; i++) {
        const gguf_tensor *tb = gguf_tensor_at(b, i);
        const gguf_tensor *ta = gguf_find_tensor(a, tb->name);
        CHECKF(ta != NULL, "%s: tensor '%s' missing", model, tb->name);
        if (!ta)
            continue;
        CHECKF(i < na && gguf_tensor_at(a, i) == ta, "%s: tensor '%s' is not at position %zu", model, tb->name, i);
        bool shape = ta->n_dims == tb->n_dims;
        for (int d = 0; d < 4; d++)
            shape = shape && ta->ne[d] == tb->ne[d];
        CHECKF(shape, "%s: '%s' ne [%lld %lld %lld %lld]/%d vs oracle [%lld %lld %lld %lld]/%d", model, tb->name,
               (long long)ta->ne[0], (long long)ta->ne[1], (long long)ta->ne[2], (long long)ta->ne[3], ta->n_dims,
               (long long)tb->ne[0], (long long)tb->ne[1], (long long)tb->ne[2], (long long)tb->ne[3], tb->n_dims);
        CHECKF(ta->type == tb->type, "%s: '%s' type %d vs oracle %d", model, tb->name, ta->type, tb->type);
        if (!shape || ta->type != tb->type || ta->nbytes != tb->nbytes)
            continue;
        size_t first = ta->nbytes;
        const uint8_t *pa = ta->data, *pb = tb->data;
        for (size_t k = 0; k < ta->nbytes && first == ta->nbytes; k++)
            if (pa[k] != pb[k])
                first = k;
        CHECKF(first == ta->nbytes, "%s: '%s' bytes differ from byte %zu of %zu", model, tb->name, first,
               ta->nbytes);
        same_bytes += first == ta->nbytes;
    }
    /* metadata: every oracle key, same type and value; no extra keys */
    size_t kv_same = 0;
    for (size_t i = 0; i < gguf_n_kv(b); i++) {
        const gguf_kv *kb = gguf_kv_at(b, i);
        const gguf_kv *ka = gguf_find_kv(a, kb->key);
        CHECKF(ka != NULL, "%s: metadata '%s' missing", model, kb->key);
        if (!ka)
            continue;
        CHECKF(i < gguf_n_kv(a) && gguf_kv_at(a, i) == ka, "%s: metadata '%s' is not at position %zu", model,
               kb->key, i);
        char why[300];
        bool eq = gc_kv_equal(ka, kb, why, sizeof why);
        bool naming = !strcmp(kb->key, "general.name") || !strcmp(kb->key, "general.size_label");
        if (!eq && naming)
            printf("%s: note: '%s' differs (allowed): %s\n", model, kb->key, why);
        else
            CHECKF(eq, "%s: metadata '%s': %s (ours vs oracle)", model, kb->key, why);
        kv_same += eq;
    }
    for (size_t i = 0; i < gguf_n_kv(a); i++)
        CHECKF(gguf_find_kv(b, gguf_kv_at(a, i)->key) != NULL, "%s: extra metadata '%s'", model,
               gguf_kv_at(a, i)->key);
    /* and the file as a whole */
    size_t sa = 0, sb = 0;
    void *fa = tu_read_file(out, &sa), *fb = tu_read_file(oracle, &sb);
    bool whole = fa && fb && sa == sb && memcmp(fa, fb, sa) == 0;
    printf("%s: %zu/%zu tensors byte-identical, %zu/%zu metadata keys equal, whole file %s\n", model, same_bytes,
           nb, kv_same, gguf_n_kv(b), whole ? "byte-identical" : "differs");
    free(fa);
    free(fb);
    gguf_close(a);
    gguf_close(b);
    rm_out(out);
}

/* ---- variants: the GGUF runs like the HF directory ---- */

static void check_variant(const char *name, const char *golden_of)
{
    char in[4096], meta_path[4096], out[4096];
    snprintf(in, sizeof in, "%s/tests/data/variants/%s/hf", LILAC_SOURCE_DIR, name);
    snprintf(meta_path, sizeof meta_path, "%s/tests/data/variants/%s/meta.json", LILAC_SOURCE_DIR, golden_of);
    snprintf(out, sizeof out, "%s/%s.gguf", tmpdir, name);
    lilac_error err;
    lilac_status s = lilac_convert_hf_to_gguf(in, out, NULL, &err);
    CHECKF(s == LILAC_OK, "%s: convert: %s", name, err.msg);
    if (s)
        return;
    json_error_t je;
    json_t *meta = json_load_file(meta_path, 0, &je);
    CHECKF(meta != NULL, "%s: %s", meta_path, je.text);
    lilac_model *mh = tm_open(in, 2), *mg = tm_open(out, 2);
    CHECKF(mh && mg, "%s: both the HF directory and the GGUF load", name);
    int n = 0;
    int32_t *toks = meta ? tm_json_ints(meta, "tokens", NULL, &n) : NULL;
    if (mh && mg && toks) {
        const lilac_hparams *hh = lilac_model_hparams(mh), *hg = lilac_model_hparams(mg);
        CHECKF(hh->n_vocab == hg->n_vocab && hh->n_layer == hg->n_layer &&
                   hh->tied_embeddings == hg->tied_embeddings && hh->norm_topk == hg->norm_topk &&
                   hh->rope_dims == hg->rope_dims && hh->ssm_v_heads == hg->ssm_v_heads &&
                   memcmp(hh->layer_kind, hg->layer_kind, (size_t)hh->n_layer) == 0,
               "%s: hyper-parameters differ between the HF directory and the GGUF", name);
        int V = hh->n_vocab;
        float *lh = tm_logits(mh, toks, n, 0, NULL), *lg = tm_logits(mg, toks, n, 0, NULL);
        CHECKF(lh && lg, "%s: logits", name);
        if (lh && lg) {
            size_t cnt = (size_t)n * (size_t)V;
            bool bitwise = memcmp(lh, lg, cnt * sizeof(float)) == 0;
            float mx = tm_max_abs(lh, cnt), d = tm_max_diff(lh, lg, cnt);
            printf("%s: GGUF vs HF logits over %d tokens: %s (max|d| %.3g, max|logit| %.3g)\n", name, n,
                   bitwise ? "bitwise identical" : "not bitwise", d, mx);
            CHECKF(bitwise || d <= 1e-6f * mx, "%s: GGUF logits differ from HF by %.4g (max|logit| %.4g)", name, d,
                   mx);
        }
        free(lh);
        free(lg);
    }
    free(toks);
    json_decref(meta);
    lilac_model_free(mh);
    lilac_model_free(mg);
    rm_out(out);
}

/* ---- errors ---- */

static void check_errors(void)
{
    lilac_error err;
    char out[4096], in[4096];
    const char *q35a = LILAC_SOURCE_DIR "/tests/data/variants/q35-a/hf";

    snprintf(out, sizeof out, "%s/no-such-dir/x.gguf", tmpdir);
    lilac_status s = lilac_convert_hf_to_gguf(q35a, out, NULL, &err);
    printf("missing output directory: %s\n", s ? err.msg : "(accepted)");
    CHECK(s == LILAC_E_IO && strstr(err.msg, "no-such-dir"));
    CHECK(nothing_left(out));

    /* unsupported model_type */
    snprintf(in, sizeof in, "%s/llama", tmpdir);
    CHECK(mkdir(in, 0755) == 0);
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", in);
    const char *js = "{\"model_type\": \"llama\", \"num_hidden_layers\": 2}";
    CHECK(tu_write_file(cfg, js, strlen(js)) == 0);
    snprintf(out, sizeof out, "%s/llama.gguf", tmpdir);
    s = lilac_convert_hf_to_gguf(in, out, NULL, &err);
    printf("unsupported model_type: %s\n", s ? err.msg : "(accepted)");
    CHECK(s == LILAC_E_UNSUPPORTED && strstr(err.msg, "llama") && strstr(err.msg, "config.json"));
    CHECK(nothing_left(out));
    remove(cfg);
    rmdir(in);

    /* an input that is not a directory */
    snprintf(out, sizeof out, "%s/file.gguf", tmpdir);
    const char *file = LILAC_SOURCE_DIR "/tests/data/variants/q35-a/meta.json";
    s = lilac_convert_hf_to_gguf(file, out, NULL, &err);
    printf("input not a directory: %s\n", s ? err.msg : "(accepted)");
    CHECK(s != LILAC_OK && strstr(err.msg, "meta.json") && strstr(err.msg, "not a directory"));
    CHECK(nothing_left(out));

    /* a missing input */
    s = lilac_convert_hf_to_gguf(LILAC_SOURCE_DIR "/tests/data/no-such-model", out, NULL, &err);
    CHECK(s == LILAC_E_IO && strstr(err.msg, "no-such-model"));
    CHECK(nothing_left(out));
}

/* ---- the writer on its own ---- */

static void check_writer(void)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/w.gguf", tmpdir);
    lilac_error err;
    gguf_writer *w = NULL;
    CHECK(gguf_writer_open(out, &w, &err) == LILAC_OK);
    if (!w)
        return;
    int32_t ia[3] = {-1, 2, 3};
    uint8_t ba[2] = {1, 0};
    double da[2] = {0.5, -2.25};
    const char *sa[3] = {"a", "", "h\xc3\xa9llo"};
    float t0[5] = {1, 2, 3, 4, 5};
    uint16_t t1[6] = {1, 2, 3, 4, 5, 6};
    int64_t ne0[1] = {5}, ne1[2] = {3, 2};
    CHECK(gguf_writer_kv_u8(w, "k.u8", 200, &err) == 0 && gguf_writer_kv_i8(w, "k.i8", -5, &err) == 0 &&
          gguf_writer_kv_u16(w, "k.u16", 60000, &err) == 0 && gguf_writer_kv_i16(w, "k.i16", -300, &err) == 0 &&
          gguf_writer_kv_u32(w, "k.u32", 4000000000u, &err) == 0 && gguf_writer_kv_i32(w, "k.i32", -7, &err) == 0 &&
          gguf_writer_kv_u64(w, "k.u64", 1ull << 40, &err) == 0 && gguf_writer_kv_i64(w, "k.i64", -(1ll << 40), &err) == 0 &&
          gguf_writer_kv_f32(w, "k.f32", 0.25f, &err) == 0 && gguf_writer_kv_f64(w, "k.f64", 1e-300, &err) == 0 &&
          gguf_writer_kv_bool(w, "k.bool", true, &err) == 0 && gguf_writer_kv_str(w, "k.str", "hi", &err) == 0 &&
          gguf_writer_kv_arr(w, "k.ai32", GGUF_VT_I32, ia, 3, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.abool", GGUF_VT_BOOL, ba, 2, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.af64", GGUF_VT_F64, da, 2, &err) == 0 &&
          gguf_writer_kv_str_arr(w, "k.astr", sa, NULL, 3, &err) == 0 &&
          gguf_writer_kv_u32(w, "general.alignment", 64, &err) == 0);
    CHECK(gguf_writer_kv_u32(w, "k.u8", 1, &err) == LILAC_E_ARG && strstr(err.msg, "twice"));
    CHECK(gguf_writer_add_tensor(w, "t0", LILAC_F32, 1, ne0, &err) == 0 &&
          gguf_writer_add_tensor(w, "t1", LILAC_BF16, 2, ne1, &err) == 0);
    CHECK(gguf_writer_add_tensor(w, "t0", LILAC_F32, 1, ne0, &err) == LILAC_E_ARG);
    CHECK(gguf_writer_begin_data(w, &err) == 0);
    CHECK(gguf_writer_write(w, t0, 8, &err) == 0 && gguf_writer_write(w, (char *)t0 + 8, 12, &err) == 0 &&
          gguf_writer_write(w, t1, sizeof t1, &err) == 0);
    CHECK(gguf_writer_write(w, t1, 1, &err) != 0); /* beyond the last tensor */
    CHECK(gguf_writer_finish(w, &err) != 0); /* the failed writer will not finish */
    gguf_writer_free(w);
    CHECK(nothing_left(out));

    /* again, correctly, and read it back */
    w = NULL;
    CHECK(gguf_writer_open(out, &w, &err) == LILAC_OK);
    if (!w)
        return;
    CHECK(gguf_writer_kv_u8(w, "k.u8", 200, &err) == 0 && gguf_writer_kv_i8(w, "k.i8", -5, &err) == 0 &&
          gguf_writer_kv_i64(w, "k.i64", -(1ll << 40), &err) == 0 && gguf_writer_kv_f32(w, "k.f32", 0.25f, &err) == 0 &&
          gguf_writer_kv_f64(w, "k.f64", 1e-300, &err) == 0 && gguf_writer_kv_bool(w, "k.bool", true, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.ai32", GGUF_VT_I32, ia, 3, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.abool", GGUF_VT_BOOL, ba, 2, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.af64", GGUF_VT_F64, da, 2, &err) == 0 &&
          gguf_writer_kv_str_arr(w, "k.astr", sa, NULL, 3, &err) == 0 &&
          gguf_writer_kv_u32(w, "general.alignment", 64, &err) == 0 &&
          gguf_writer_add_tensor(w, "t0", LILAC_F32, 1, ne0, &err) == 0 &&
          gguf_writer_add_tensor(w, "t1", LILAC_BF16, 2, ne1, &err) == 0 && gguf_writer_begin_data(w, &err) == 0 &&
          gguf_writer_write(w, t0, sizeof t0, &err) == 0);
    CHECK(gguf_writer_finish(w, &err) != 0 && strstr(err.msg, "t1")); /* t1 got no bytes */
    gguf_writer_free(w);
    CHECK(nothing_left(out));

    w = NULL;
    CHECK(gguf_writer_open(out, &w, &err) == LILAC_OK);
    if (!w)
        return;
    CHECK(gguf_writer_kv_u8(w, "k.u8", 200, &err) == 0 && gguf_writer_kv_i8(w, "k.i8", -5, &err) == 0 &&
          gguf_writer_kv_i64(w, "k.i64", -(1ll << 40), &err) == 0 && gguf_writer_kv_f32(w, "k.f32", 0.25f, &err) == 0 &&
          gguf_writer_kv_f64(w, "k.f64", 1e-300, &err) == 0 && gguf_writer_kv_bool(w, "k.bool", true, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.ai32", GGUF_VT_I32, ia, 3, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.abool", GGUF_VT_BOOL, ba, 2, &err) == 0 &&
          gguf_writer_kv_arr(w, "k.af64", GGUF_VT_F64, da, 2, &err) == 0 &&
          gguf_writer_kv_str_arr(w, "k.astr", sa, NULL, 3, &err) == 0 &&
          gguf_writer_kv_u32(w, "general.alignment", 64, &err) == 0 &&
          gguf_writer_add_tensor(w, "t0", LILAC_F32, 1, ne0, &err) == 0 &&
          gguf_writer_add_tensor(w, "t1", LILAC_BF16, 2, ne1, &err) == 0 && gguf_writer_begin_data(w, &err) == 0 &&
          gguf_writer_write(w, t0, sizeof t0, &err) == 0 && gguf_writer_write(w, t1, sizeof t1, &err) == 0);
    CHECK(gguf_writer_finish(w, &err) == 0);
    gguf_writer_free(w);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    CHECK(exists(out) && !exists(tmp));
    gguf_file *f = NULL;
    CHECKF(gguf_open(out, &f, &err) == LILAC_OK, "writer output: %s", err.msg);
    if (f) {
        uint64_t u;
        double d;
        bool b;
        const gguf_kv *kv;
        CHECK(gguf_version(f) == 3 && gguf_alignment(f) == 64);
        CHECK(gguf_get_u64(f, "k.u8", &u, &err) == 0 && u == 200);
        CHECK((kv = gguf_find_kv(f, "k.i8")) && kv->type == GGUF_VT_I8 && kv->v.i == -5);
        CHECK((kv = gguf_find_kv(f, "k.i64")) && kv->type == GGUF_VT_I64 && kv->v.i == -(1ll << 40));
        CHECK(gguf_get_f64(f, "k.f32", &d, &err) == 0 && d == 0.25);
        CHECK(gguf_get_f64(f, "k.f64", &d, &err) == 0 && d == 1e-300);
        CHECK(gguf_get_bool(f, "k.bool", &b, &err) == 0 && b);
        int64_t iv;
        double dv;
        CHECK((kv = gguf_find_kv(f, "k.ai32")) && kv->v.arr.n == 3 && gguf_arr_i64(kv, 0, &iv) && iv == -1 &&
              gguf_arr_i64(kv, 2, &iv) && iv == 3);
        CHECK((kv = gguf_find_kv(f, "k.abool")) && kv->v.arr.type == GGUF_VT_BOOL && gguf_arr_u64(kv, 0, &u) &&
              u == 1 && gguf_arr_u64(kv, 1, &u) && u == 0);
        CHECK((kv = gguf_find_kv(f, "k.af64")) && gguf_arr_f64(kv, 1, &dv) && dv == -2.25);
        CHECK((kv = gguf_find_kv(f, "k.astr")) && kv->v.arr.type == GGUF_VT_STRING && kv->v.arr.n == 3 &&
              kv->v.arr.strs[1].len == 0 && kv->v.arr.strs[2].len == 6 && !memcmp(kv->v.arr.strs[2].ptr, sa[2], 6));
        const gguf_tensor *a = gguf_find_tensor(f, "t0"), *c = gguf_find_tensor(f, "t1");
        CHECK(a && a->type == LILAC_F32 && a->n_dims == 1 && a->ne[0] == 5 && !memcmp(a->data, t0, sizeof t0));
        CHECK(c && c->type == LILAC_BF16 && c->n_dims == 2 && c->ne[0] == 3 && c->ne[1] == 2 &&
              !memcmp(c->data, t1, sizeof t1) && ((const uint8_t *)c->data - (const uint8_t *)a->data) % 64 == 0);
        gguf_close(f);
    }
    rm_out(out);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lilac-convert-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    check_writer();
    check_errors();
    const char *fx = tu_fixtures();
    if (fx) {
        compare_to_oracle(fx, "tiny-qwen35moe");
        compare_to_oracle(fx, "tiny-qwen3moe");
    } else {
        printf("SKIP part: oracle comparison: fixtures not found (set LILAC_FIXTURES or place them at "
               "%s/../shared/fixtures)\n", LILAC_SOURCE_DIR);
    }
    check_variant("q35-a", "q35-a");
    check_variant("q35-a-fused", "q35-a");
    check_variant("q35-b", "q35-b");
    check_variant("q3-a", "q3-a");
    rmdir(tmpdir);
    TEST_END();
}
