/* test_split: GGUF split sets as llama.cpp's gguf-split writes them
 * (NAME-00001-of-00003.gguf ...). The tensors of the fixture's bf16 GGUF are
 * rewritten here into 3 parts: the first keeps all the metadata, every part
 * carries split.no (u16), split.count (u16) and split.tensors.count (i32),
 * and holds its own tensor infos and data, aligned to 32 bytes. The split
 * model must give logits bitwise identical to the unsplit file; a missing,
 * truncated or inconsistent part must give a clear error naming it. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "format/gguf.h"
#include "models.h"

static int verbose;
static char tmpdir[256];

/* ---- a GGUF writer ------------------------------------------------------ */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} wbuf;

static void w_bytes(wbuf *w, const void *d, size_t n)
{
    if (w->oom)
        return;
    if (w->n + n > w->cap) {
        size_t nc = w->cap ? w->cap : 4096;
        while (nc < w->n + n)
            nc *= 2;
        uint8_t *p = realloc(w->p, nc);
        if (!p) {
            w->oom = 1;
            return;
        }
        w->p = p;
        w->cap = nc;
    }
    if (n)
        memcpy(w->p + w->n, d, n);
    w->n += n;
}

static void w_le(wbuf *w, uint64_t v, size_t n)
{
    uint8_t b[8];
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    w_bytes(w, b, n);
}

static void w_str(wbuf *w, const char *s, uint64_t n)
{
    w_le(w, n, 8);
    w_bytes(w, s, (size_t)n);
}

static void w_pad(wbuf *w, size_t align)
{
    static const uint8_t zero[64];
    while (w->n % align)
        w_bytes(w, zero, align - w->n % align < sizeof zero ? align - w->n % align : sizeof zero);
}

/* Bytes of one element of a numeric value type (0: STRING/ARRAY). */
static size_t vsize(gguf_vtype t)
{
    static const uint8_t s[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < 13 ? s[t] : 0;
}

/* A scalar value of type t as gguf_kv keeps it, written back. */
static void w_scalar(wbuf *w, const gguf_kv *kv)
{
    switch (kv->type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64: case GGUF_VT_BOOL:
        w_le(w, kv->v.u, vsize(kv->type));
        break;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        w_le(w, (uint64_t)kv->v.i, vsize(kv->type));
        break;
    case GGUF_VT_F32: {
        float f = (float)kv->v.f; /* exact: it was a float before */
        uint32_t b;
        memcpy(&b, &f, 4);
        w_le(w, b, 4);
        break;
    }
    case GGUF_VT_F64: {
        uint64_t b;
        memcpy(&b, &kv->v.f, 8);
        w_le(w, b, 8);
        break;
    }
    default:
        break;
    }
}

static void w_kv(wbuf *w, const gguf_kv *kv)
{
    w_str(w, kv->key, strlen(kv->key));
    w_le(w, (uint32_t)kv->type, 4);
    if (kv->type == GGUF_VT_STRING) {
        w_str(w, kv->v.s.ptr, kv->v.s.len);
    } else if (kv->type == GGUF_VT_ARRAY) {
        w_le(w, (uint32_t)kv->v.arr.type, 4);
        w_le(w, kv->v.arr.n, 8);
        if (kv->v.arr.type == GGUF_VT_STRING)
            for (uint64_t j = 0; j < kv->v.arr.n; j++)
                w_str(w, kv->v.arr.strs[j].ptr, kv->v.arr.strs[j].len);
        else
            w_bytes(w, kv->v.arr.data, (size_t)kv->v.arr.n * vsize(kv->v.arr.type));
    } else {
        w_scalar(w, kv);
    }
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

typedef struct split_opts {
    int n_parts;
    size_t first[8];        /* part p holds tensors first[p] .. first[p+1]-1 (first[n_parts] = n_tensors) */
    int64_t tensors_count;  /* split.tensors.count written (normally the total) */
} split_opts;

/* The path of part p (1-based) of n: DIR/NAME-0000p-of-0000n.gguf. */
static const char *part_path(const char *name, int p, int n)
{
    static char bufs[4][4096];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 4096, "%s/%s-%05d-of-%05d.gguf", tmpdir, name, p, n);
    return b;
}

/* Write f's tensors as a split set NAME-*-of-N.gguf in tmpdir; 0 on success. */
static int write_split(const gguf_file *f, const char *name, const split_opts *o)
{
    const size_t align = 32; /* GGUF's default; gguf-split writes no general.alignment in later parts */
    for (int p = 0; p < o->n_parts; p++) {
        wbuf w = {0};
        size_t t0 = o->first[p], t1 = o->first[p + 1];
        uint64_t n_kv = 3 + (p == 0 ? gguf_n_kv(f) : 0);
        w_bytes(&w, "GGUF", 4);
        w_le(&w, 3, 4);
        w_le(&w, t1 - t0, 8);
        w_le(&w, n_kv, 8);
        if (p == 0) /* all metadata in the first part only, as gguf-split */
            for (size_t i = 0; i < gguf_n_kv(f); i++)
                w_kv(&w, gguf_kv_at(f, i));
        w_str(&w, "split.no", 8);
        w_le(&w, GGUF_VT_U16, 4);
        w_le(&w, (uint64_t)p, 2);
        w_str(&w, "split.count", 11);
        w_le(&w, GGUF_VT_U16, 4);
        w_le(&w, (uint64_t)o->n_parts, 2);
        w_str(&w, "split.tensors.count", 19);
        w_le(&w, GGUF_VT_I32, 4);
        w_le(&w, (uint64_t)o->tensors_count, 4);
        size_t off = 0;
        for (size_t i = t0; i < t1; i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            w_str(&w, t->name, strlen(t->name));
            w_le(&w, (uint32_t)t->n_dims, 4);
            for (int d = 0; d < t->n_dims; d++)
                w_le(&w, (uint64_t)t->ne[d], 8);
            w_le(&w, (uint32_t)t->type, 4);
            w_le(&w, off, 8);
            off += round_up(t->nbytes, align);
        }
        w_pad(&w, align);
        for (size_t i = t0; i < t1; i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            w_bytes(&w, t->data, t->nbytes);
            w_pad(&w, align);
        }
        const char *path = part_path(name, p + 1, o->n_parts);
        int rc = w.oom ? -1 : tu_write_file(path, w.p, w.n);
        CHECKF(rc == 0, "cannot write %s", path);
        free(w.p);
        if (rc)
            return -1;
    }
    return 0;
}

static void remove_split(const char *name, int n)
{
    for (int p = 1; p <= n; p++)
        unlink(part_path(name, p, n));
}

/* ---- checks ------------------------------------------------------------- */

static int kv_equal(const gguf_kv *a, const gguf_kv *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case GGUF_VT_STRING:
        return a->v.s.len == b->v.s.len && memcmp(a->v.s.ptr, b->v.s.ptr, (size_t)a->v.s.len) == 0;
    case GGUF_VT_ARRAY:
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n)
            return 0;
        if (a->v.arr.type == GGUF_VT_STRING) {
            for (uint64_t j = 0; j < a->v.arr.n; j++)
                if (a->v.arr.strs[j].len != b->v.arr.strs[j].len ||
                    memcmp(a->v.arr.strs[j].ptr, b->v.arr.strs[j].ptr, (size_t)a->v.arr.strs[j].len) != 0)
                    return 0;
            return 1;
        }
        return memcmp(a->v.arr.data, b->v.arr.data, (size_t)a->v.arr.n * vsize(a->v.arr.type)) == 0;
    case GGUF_VT_F32: case GGUF_VT_F64:
        return memcmp(&a->v.f, &b->v.f, sizeof a->v.f) == 0;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        return a->v.i == b->v.i;
    default:
        return a->v.u == b->v.u;
    }
}

/* The reader sees the split set as the original plus the split.* keys. */
static void check_reader(const gguf_file *orig, const char *name, const split_opts *o)
{
    const char *p1 = part_path(name, 1, o->n_parts);
    gguf_file *s = NULL;
    lilac_error err;
    lilac_status st = gguf_open(p1, &s, &err);
    CHECKF(st == LILAC_OK, "gguf_open(%s): %s", p1, err.msg);
    if (st)
        return;
    CHECKF(gguf_n_files(s) == o->n_parts, "%s: %d files, expected %d", p1, gguf_n_files(s), o->n_parts);
    for (int i = 0; i < gguf_n_files(s) && i < o->n_parts; i++) {
        const char *want = part_path(name, i + 1, o->n_parts);
        CHECKF(strcmp(gguf_file_path(s, i), want) == 0, "file %d is %s, expected %s", i, gguf_file_path(s, i),
               want);
    }
    CHECKF(gguf_n_kv(s) == gguf_n_kv(orig) + 3, "%zu kv pairs, expected %zu", gguf_n_kv(s), gguf_n_kv(orig) + 3);
    for (size_t i = 0; i < gguf_n_kv(orig); i++) {
        const gguf_kv *a = gguf_kv_at(orig, i), *b = gguf_find_kv(s, a->key);
        CHECKF(b && kv_equal(a, b), "metadata '%s' differs in the split set", a->key);
    }
    uint64_t v = 0;
    CHECK(gguf_get_u64(s, "split.count", &v, &err) == LILAC_OK && v == (uint64_t)o->n_parts);
    CHECK(gguf_get_u64(s, "split.no", &v, &err) == LILAC_OK && v == 0);
    CHECK(gguf_get_u64(s, "split.tensors.count", &v, &err) == LILAC_OK && v == gguf_n_tensors(orig));
    CHECKF(gguf_n_tensors(s) == gguf_n_tensors(orig), "%zu tensors, expected %zu", gguf_n_tensors(s),
           gguf_n_tensors(orig));
    size_t bad = 0;
    for (size_t i = 0; i < gguf_n_tensors(orig); i++) {
        const gguf_tensor *a = gguf_tensor_at(orig, i), *b = gguf_find_tensor(s, a->name);
        int part = 0;
        while (part + 1 < o->n_parts && i >= o->first[part + 1])
            part++;
        if (!b || b->type != a->type || b->n_dims != a->n_dims || memcmp(b->ne, a->ne, sizeof a->ne) != 0 ||
            b->nbytes != a->nbytes || b->file != part || memcmp(b->data, a->data, a->nbytes) != 0) {
            if (bad++ < 5)
                CHECKF(0, "tensor '%s' differs in the split set", a->name);
        }
        if (b)
            CHECKF((uintptr_t)b->data % 32 == 0, "tensor '%s' is not 32-byte aligned in memory", a->name);
    }
    CHECKF(bad == 0, "%zu tensors differ", bad);
    gguf_close(s);
}

/* lilac_model_open(path) fails with a one-line message holding each phrase. */
static void expect_open_fail(const char *label, const char *path, lilac_status want, const char *p1,
                             const char *p2, const char *p3)
{
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = 1;
    lilac_model *m = (lilac_model *)(uintptr_t)1;
    lilac_error err;
    memset(&err, 0, sizeof err);
    lilac_status st = lilac_model_open(path, &mp, &m, &err);
    CHECKF(st == want, "%s: status '%s', expected '%s': %s", label, lilac_status_name(st), lilac_status_name(want),
           err.msg);
    if (st == LILAC_OK) {
        lilac_model_free(m);
        return;
    }
    CHECKF(m == NULL, "%s: *out not cleared", label);
    CHECKF(strchr(err.msg, '\n') == NULL, "%s: message is not one line: %s", label, err.msg);
    const char *ph[3] = {p1, p2, p3};
    for (int i = 0; i < 3; i++)
        if (ph[i])
            CHECKF(strstr(err.msg, ph[i]) != NULL, "%s: message lacks '%s': %s", label, ph[i], err.msg);
    if (verbose)
        printf("  %-30s [%s] %s\n", label, lilac_status_name(st), err.msg);
}

/* The split model's logits against the unsplit file's, bit for bit. */
static void check_logits(const char *label, const char *path, const float *want, const int32_t *toks, int n,
                         uint64_t weight_bytes)
{
    lilac_model *m = tm_open(path, 2);
    CHECKF(m != NULL, "%s: %s does not load", label, path);
    if (!m)
        return;
    CHECKF(strcmp(lilac_model_format(m), "gguf") == 0, "%s: format %s", label, lilac_model_format(m));
    CHECKF(lilac_model_weight_bytes(m) == weight_bytes, "%s: %llu weight bytes, unsplit %llu", label,
           (unsigned long long)lilac_model_weight_bytes(m), (unsigned long long)weight_bytes);
    int V = lilac_model_hparams(m)->n_vocab;
    float *got = tm_logits(m, toks, n, 0, NULL);
    CHECKF(got != NULL, "%s: evaluation failed", label);
    if (got) {
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)n * V; i++)
            diff += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        CHECKF(diff == 0, "%s: %zu of %zu logits differ from the unsplit file (max|d| %g)", label, diff,
               (size_t)n * V, tm_max_diff(got, want, (size_t)n * V));
        printf("%s: %d x %d logits, %zu differ from the unsplit file\n", label, n, V, diff);
    }
    free(got);
    lilac_model_free(m);
}

static void run(const char *fx, const char *model)
{
    char src[4096], mp[4096];
    snprintf(src, sizeof src, "%s/%s/gguf/model-bf16.gguf", fx, model);
    snprintf(mp, sizeof mp, "%s/%s/golden/meta.json", fx, model);
    json_error_t je;
    json_t *meta = json_load_file(mp, 0, &je);
    CHECKF(meta != NULL, "%s: %s", mp, je.text);
    int n = 0;
    int32_t *toks = meta ? tm_json_ints(meta, "tokens", NULL, &n) : NULL;
    CHECKF(toks && n == 64, "%s: 64 tokens expected", mp);
    gguf_file *f = NULL;
    lilac_error err;
    lilac_status st = gguf_open(src, &f, &err);
    CHECKF(st == LILAC_OK, "%s: %s", src, err.msg);
    lilac_model *m = tm_open(src, 2);
    CHECKF(m != NULL, "%s loads", src);
    float *want = m && toks ? tm_logits(m, toks, n, 0, NULL) : NULL;
    uint64_t weight_bytes = m ? lilac_model_weight_bytes(m) : 0;
    lilac_model_free(m);
    CHECKF(want != NULL, "%s: unsplit logits", src);
    if (st || !want || !toks)
        goto done;
    CHECKF(gguf_alignment(f) == 32, "%s: alignment %zu (the writer assumes 32)", src, gguf_alignment(f));
    size_t nt = gguf_n_tensors(f);
    char label[160];

    /* 3 parts of about a third of the tensors each, as --split-max-tensors */
    split_opts o = {.n_parts = 3, .first = {0, nt / 3, 2 * nt / 3, nt}, .tensors_count = (int64_t)nt};
    if (write_split(f, model, &o) == 0) {
        check_reader(f, model, &o);
        snprintf(label, sizeof label, "%s split in 3", model);
        check_logits(label, part_path(model, 1, 3), want, toks, n, weight_bytes);

        /* part 2 opened instead of part 1 */
        snprintf(label, sizeof label, "%s open part 2", model);
        expect_open_fail(label, part_path(model, 2, 3), LILAC_E_ARG, part_path(model, 2, 3), "part 2 of 3",
                         "-00001-of-00003.gguf");
        /* part 3 cut short */
        const char *p3 = part_path(model, 3, 3);
        size_t sz = 0;
        uint8_t *img = tu_read_file(p3, &sz);
        CHECK(img != NULL);
        if (img) {
            CHECK(tu_write_file(p3, img, sz - 100) == 0);
            snprintf(label, sizeof label, "%s part 3 truncated", model);
            expect_open_fail(label, part_path(model, 1, 3), LILAC_E_FORMAT, p3, "extends past the end", NULL);
            CHECK(tu_write_file(p3, img, sz) == 0);
            free(img);
        }
        /* part 1 under another name: the other parts cannot be found */
        char other[4096];
        snprintf(other, sizeof other, "%s/%s-renamed.gguf", tmpdir, model);
        CHECK(rename(part_path(model, 1, 3), other) == 0);
        snprintf(label, sizeof label, "%s part 1 renamed", model);
        expect_open_fail(label, other, LILAC_E_FORMAT, other, "split.count is 3", "-00001-of-00003.gguf");
        CHECK(rename(other, part_path(model, 1, 3)) == 0);
        /* part 2 missing */
        const char *p2 = part_path(model, 2, 3);
        CHECK(unlink(p2) == 0);
        snprintf(label, sizeof label, "%s part 2 missing", model);
        expect_open_fail(label, part_path(model, 1, 3), LILAC_E_IO, p2, "part 2 of 3", "No such file");
    }
    remove_split(model, 3);

    /* the first part holding metadata only (gguf-split --no-tensor-first-split) */
    split_opts o2 = {.n_parts = 3, .first = {0, 0, nt / 2, nt}, .tensors_count = (int64_t)nt};
    if (write_split(f, model, &o2) == 0) {
        check_reader(f, model, &o2);
        snprintf(label, sizeof label, "%s split 0/half/half", model);
        check_logits(label, part_path(model, 1, 3), want, toks, n, weight_bytes);
    }
    remove_split(model, 3);

    /* split.tensors.count disagreeing with the parts */
    split_opts o3 = {.n_parts = 3, .first = {0, nt / 3, 2 * nt / 3, nt}, .tensors_count = (int64_t)nt - 1};
    if (write_split(f, model, &o3) == 0) {
        char total[64];
        snprintf(total, sizeof total, "split.tensors.count is %zu", nt - 1);
        snprintf(label, sizeof label, "%s wrong tensors.count", model);
        expect_open_fail(label, part_path(model, 1, 3), LILAC_E_FORMAT, part_path(model, 1, 3), total, NULL);
    }
    remove_split(model, 3);

    /* a tensor in two parts */
    split_opts o4 = {.n_parts = 2, .first = {0, nt / 2 + 1, nt}, .tensors_count = (int64_t)nt + 1};
    if (write_split(f, model, &o4) == 0) {
        /* part 2 rewritten to start one tensor earlier: that tensor is in both */
        split_opts o5 = o4;
        o5.first[1] = nt / 2;
        char tmpname[300];
        snprintf(tmpname, sizeof tmpname, "%s-dup", model);
        if (write_split(f, tmpname, &o5) == 0) {
            CHECK(rename(part_path(tmpname, 2, 2), part_path(model, 2, 2)) == 0);
            snprintf(label, sizeof label, "%s tensor in two parts", model);
            expect_open_fail(label, part_path(model, 1, 2), LILAC_E_FORMAT, part_path(model, 2, 2),
                             "duplicate tensor name", gguf_tensor_at(f, nt / 2)->name);
        }
        remove_split(tmpname, 2);
    }
    remove_split(model, 2);
done:
    free(want);
    free(toks);
    json_decref(meta);
    gguf_close(f);
}

int main(int argc, char **argv)
{
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    const char *fx = tu_require_fixtures();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lilac-split-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    run(fx, "tiny-qwen35moe");
    run(fx, "tiny-qwen3moe");
    CHECKF(rmdir(tmpdir) == 0, "%s not empty at the end: %s", tmpdir, strerror(errno));
    TEST_END();
}
