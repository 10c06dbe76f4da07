/* test_gguf: the GGUF reader on images built here by a tiny writer (every
 * value type, several tensor types, several alignments, every rejected
 * defect, every truncation of a valid image, split sets on disk), then on the
 * real fixture files when they are present.
 *
 *   test_gguf [-v]                 -v prints every expected error message
 *   test_gguf --write-seeds DIR    writes valid images for the fuzz corpus */
#ifndef _POSIX_C_SOURCE /* mkdtemp; the build may set it already */
#define _POSIX_C_SOURCE 200809L
#endif
#include <inttypes.h>
#include <stdint.h>
#include <unistd.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "testutil.h"

/* ---- a tiny GGUF writer ------------------------------------------------ */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void w_bytes(wbuf *w, const void *d, size_t n)
{
    if (w->n + n > w->cap) {
        size_t nc = w->cap ? w->cap : 256;
        while (nc < w->n + n)
            nc *= 2;
        w->p = realloc(w->p, nc);
        if (!w->p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
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

static void w_u8(wbuf *w, uint8_t v) { w_le(w, v, 1); }
static void w_u32(wbuf *w, uint32_t v) { w_le(w, v, 4); }
static void w_u64(wbuf *w, uint64_t v) { w_le(w, v, 8); }
static void w_f32(wbuf *w, float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    w_u32(w, b);
}
static void w_f64(wbuf *w, double v)
{
    uint64_t b;
    memcpy(&b, &v, 8);
    w_u64(w, b);
}
static void w_strn(wbuf *w, const char *s, size_t n)
{
    w_u64(w, n);
    w_bytes(w, s, n);
}
static void w_str(wbuf *w, const char *s) { w_strn(w, s, strlen(s)); }

/* Metadata being built: the kv bytes and their count. */
typedef struct kvs {
    wbuf b;
    uint64_t n;
} kvs;

static void kv_head(kvs *k, const char *key, uint32_t type)
{
    w_str(&k->b, key);
    w_u32(&k->b, type);
    k->n++;
}
static void kv_uint(kvs *k, const char *key, uint32_t type, uint64_t v, size_t size)
{
    kv_head(k, key, type);
    w_le(&k->b, v, size);
}
static void kv_u32(kvs *k, const char *key, uint32_t v) { kv_uint(k, key, GGUF_VT_U32, v, 4); }
static void kv_str(kvs *k, const char *key, const char *v)
{
    kv_head(k, key, GGUF_VT_STRING);
    w_str(&k->b, v);
}
/* An integer array: each value written in size bytes. */
static void kv_arr_int(kvs *k, const char *key, uint32_t et, size_t size, const int64_t *v, size_t n)
{
    kv_head(k, key, GGUF_VT_ARRAY);
    w_u32(&k->b, et);
    w_u64(&k->b, n);
    for (size_t i = 0; i < n; i++)
        w_le(&k->b, (uint64_t)v[i], size);
}

#define AUTO UINT64_MAX

typedef struct tspec {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[5];
    uint64_t offset; /* AUTO: the next aligned offset */
} tspec;

/* Bytes of a well-formed small tensor, else 0. */
static uint64_t tspec_bytes(const tspec *t)
{
    if (t->n_dims < 1 || t->n_dims > 4)
        return 0;
    uint64_t rows = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if (t->ne[d] == 0 || t->ne[d] > (1u << 20))
            return 0;
    for (uint32_t d = 1; d < t->n_dims; d++)
        rows *= t->ne[d];
    return (uint64_t)lilac_dtype_row_bytes((int)t->type, (int64_t)t->ne[0]) * rows;
}

/* The byte at data-section offset j of a file written with salt. */
static uint8_t pat(uint64_t j, unsigned salt) { return (uint8_t)(j * 131 + 7 + salt * 17); }

/* Header + metadata + tensor infos + padding to align + data covering every
 * tensor (filled with pat). *data_start gets where the data section begins. */
static wbuf assemble(uint32_t version, const kvs *k, const tspec *ts, size_t n_t, size_t align,
                     unsigned salt, size_t *data_start)
{
    wbuf w = {0};
    w_bytes(&w, "GGUF", 4);
    w_u32(&w, version);
    w_u64(&w, n_t);
    w_u64(&w, k ? k->n : 0);
    if (k)
        w_bytes(&w, k->b.p, k->b.n);
    uint64_t off = 0, end = 0;
    for (size_t i = 0; i < n_t; i++) {
        const tspec *t = &ts[i];
        w_str(&w, t->name);
        w_u32(&w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 5; d++)
            w_u64(&w, t->ne[d]);
        w_u32(&w, t->type);
        uint64_t nb = tspec_bytes(t);
        uint64_t o = t->offset == AUTO ? off : t->offset;
        w_u64(&w, o);
        if (t->offset == AUTO)
            off += (nb + align - 1) / align * align;
        if (nb && o < (1u << 24) && o + nb > end)
            end = o + nb;
    }
    while (w.n % align)
        w_u8(&w, 0);
    if (data_start)
        *data_start = w.n;
    for (uint64_t j = 0; j < end; j++)
        w_u8(&w, pat(j, salt));
    return w;
}

/* ---- checking helpers -------------------------------------------------- */

/* Parse a copy of exactly n bytes, so ASan sees any read past the end. */
static lilac_status parse_copy(const uint8_t *p, size_t n, const char *name, gguf_file **f, lilac_error *err,
                               uint8_t **copy)
{
    *copy = malloc(n ? n : 1);
    if (n)
        memcpy(*copy, p, n);
    return gguf_parse(n ? *copy : NULL, n, name, f, err);
}

static int verbose;

/* Parsing must fail with status want and a message naming the file and
 * holding phrase. */
static void expect_fail_n(const char *label, const uint8_t *p, size_t n, lilac_status want, const char *phrase)
{
    lilac_error err = {0};
    gguf_file *f = (gguf_file *)1;
    uint8_t *copy;
    lilac_status st = parse_copy(p, n, "bad.gguf", &f, &err, &copy);
    CHECKF(st == want, "%s: status %s, expected %s (%s)", label, lilac_status_name(st), lilac_status_name(want),
           err.msg);
    CHECKF(f == NULL, "%s: out not cleared", label);
    if (st != LILAC_OK) {
        CHECKF(strstr(err.msg, "bad.gguf") != NULL, "%s: message does not name the file: %s", label, err.msg);
        CHECKF(strstr(err.msg, phrase) != NULL, "%s: message lacks '%s': %s", label, phrase, err.msg);
        CHECKF(strchr(err.msg, '\n') == NULL, "%s: message is not one line: %s", label, err.msg);
        if (verbose)
            printf("  %-28s %s\n", label, err.msg);
    } else {
        gguf_close(f);
    }
    free(copy);
}

static void expect_fail(const char *label, wbuf w, lilac_status want, const char *phrase)
{
    expect_fail_n(label, w.p, w.n, want, phrase);
    free(w.p);
}

static void free_kvs(kvs *k) { free(k->b.p); }

/* ---- the full valid image ---------------------------------------------- */

static const int64_t A_U8[] = {1, 2, 255};
static const int64_t A_I8[] = {-1, 0, 127};
static const int64_t A_U16[] = {0, 65535};
static const int64_t A_I16[] = {-32768, 32767};
static const int64_t A_U32[] = {4000000000, 7};
static const int64_t A_I32[] = {6, 5, 5, 0, -2147483647 - 1};
static const int64_t A_BOOL[] = {1, 0, 1};
static const int64_t A_U64[] = {(int64_t)UINT64_MAX, 42}; /* written as bits */
static const int64_t A_I64[] = {INT64_MIN, -5, INT64_MAX};
#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Every value type and every numeric array type; general.alignment when
 * align != 32 (32 is also tested written explicitly when explicit_align). */
static void full_kvs(kvs *k, size_t align, int explicit_align)
{
    kv_str(k, "general.architecture", "testarch");
    kv_uint(k, "t.u8", GGUF_VT_U8, 200, 1);
    kv_uint(k, "t.i8", GGUF_VT_I8, (uint64_t)(int64_t)-100, 1);
    kv_uint(k, "t.u16", GGUF_VT_U16, 60000, 2);
    kv_uint(k, "t.i16", GGUF_VT_I16, (uint64_t)(int64_t)-30000, 2);
    kv_uint(k, "t.u32", GGUF_VT_U32, 4000000000u, 4);
    kv_uint(k, "t.i32", GGUF_VT_I32, (uint64_t)(int64_t)-2000000000, 4);
    kv_head(k, "t.f32", GGUF_VT_F32);
    w_f32(&k->b, 1.5f);
    kv_uint(k, "t.bool", GGUF_VT_BOOL, 1, 1);
    kv_uint(k, "t.bool0", GGUF_VT_BOOL, 0, 1);
    kv_str(k, "t.str", "hello, w\xc3\xb6rld");
    kv_str(k, "t.empty", "");
    kv_uint(k, "t.u64", GGUF_VT_U64, UINT64_MAX, 8);
    kv_uint(k, "t.i64", GGUF_VT_I64, (uint64_t)INT64_MIN, 8);
    kv_uint(k, "t.i64pos", GGUF_VT_I64, 123456789012345, 8);
    kv_head(k, "t.f64", GGUF_VT_F64);
    w_f64(&k->b, -2.25e300);
    kv_arr_int(k, "a.u8", GGUF_VT_U8, 1, A_U8, N(A_U8));
    kv_arr_int(k, "a.i8", GGUF_VT_I8, 1, A_I8, N(A_I8));
    kv_arr_int(k, "a.u16", GGUF_VT_U16, 2, A_U16, N(A_U16));
    kv_arr_int(k, "a.i16", GGUF_VT_I16, 2, A_I16, N(A_I16));
    kv_arr_int(k, "a.u32", GGUF_VT_U32, 4, A_U32, N(A_U32));
    kv_arr_int(k, "a.i32", GGUF_VT_I32, 4, A_I32, N(A_I32));
    kv_arr_int(k, "a.bool", GGUF_VT_BOOL, 1, A_BOOL, N(A_BOOL));
    kv_arr_int(k, "a.u64", GGUF_VT_U64, 8, A_U64, N(A_U64));
    kv_arr_int(k, "a.i64", GGUF_VT_I64, 8, A_I64, N(A_I64));
    kv_arr_int(k, "a.empty", GGUF_VT_U32, 4, NULL, 0);
    kv_head(k, "a.f32", GGUF_VT_ARRAY);
    w_u32(&k->b, GGUF_VT_F32);
    w_u64(&k->b, 2);
    w_f32(&k->b, 0.5f);
    w_f32(&k->b, -1e30f);
    kv_head(k, "a.f64", GGUF_VT_ARRAY);
    w_u32(&k->b, GGUF_VT_F64);
    w_u64(&k->b, 2);
    w_f64(&k->b, 3.25);
    w_f64(&k->b, -1e300);
    kv_head(k, "a.str", GGUF_VT_ARRAY);
    w_u32(&k->b, GGUF_VT_STRING);
    w_u64(&k->b, 3);
    w_str(&k->b, "a");
    w_str(&k->b, "");
    w_str(&k->b, "ccc");
    kv_head(k, "a.str0", GGUF_VT_ARRAY);
    w_u32(&k->b, GGUF_VT_STRING);
    w_u64(&k->b, 0);
    kv_str(k, "bad.utf8.\xff\xfe", "invalid UTF-8 in a key is accepted");
    if (align != 32 || explicit_align)
        kv_u32(k, "general.alignment", (uint32_t)align);
}

static const tspec FULL_TENSORS[] = {
    {"f32.2d", LILAC_F32, 2, {4, 3}, AUTO},
    {"f16.1d", LILAC_F16, 1, {8}, AUTO},
    {"bf16.2d", LILAC_BF16, 2, {16, 2}, AUTO},
    {"q8_0.2d", LILAC_Q8_0, 2, {64, 2}, AUTO},
    {"q4_k.3d", LILAC_Q4_K, 3, {256, 1, 2}, AUTO},
    {"f32.4d", LILAC_F32, 4, {2, 3, 1, 2}, AUTO},
};

static wbuf full_image(size_t align, int explicit_align, size_t *data_start)
{
    kvs k = {0};
    full_kvs(&k, align, explicit_align);
    wbuf w = assemble(3, &k, FULL_TENSORS, N(FULL_TENSORS), align, 0, data_start);
    free_kvs(&k);
    return w;
}

static void check_values(const gguf_file *f)
{
    lilac_error err = {0};
    uint64_t u = 0;
    double d = 0;
    bool b = false;
    char *s = NULL;

    CHECK(gguf_get_u64(f, "t.u8", &u, &err) == LILAC_OK && u == 200);
    CHECK(gguf_get_u64(f, "t.u16", &u, &err) == LILAC_OK && u == 60000);
    CHECK(gguf_get_u64(f, "t.u32", &u, &err) == LILAC_OK && u == 4000000000u);
    CHECK(gguf_get_u64(f, "t.u64", &u, &err) == LILAC_OK && u == UINT64_MAX);
    CHECK(gguf_get_u64(f, "t.i64pos", &u, &err) == LILAC_OK && u == 123456789012345u);
    CHECK(gguf_find_kv(f, "t.i8")->type == GGUF_VT_I8 && gguf_find_kv(f, "t.i8")->v.i == -100);
    CHECK(gguf_find_kv(f, "t.i16")->v.i == -30000);
    CHECK(gguf_find_kv(f, "t.i32")->v.i == -2000000000);
    CHECK(gguf_find_kv(f, "t.i64")->v.i == INT64_MIN);
    CHECK(gguf_find_kv(f, "t.u8")->type == GGUF_VT_U8);
    CHECK(gguf_find_kv(f, "t.f64")->type == GGUF_VT_F64);

    /* integers that do not fit, and non-integers, are errors naming the key */
    const char *no_u64[] = {"t.i8", "t.i16", "t.i32", "t.i64", "t.f32", "t.str", "t.bool", "a.u8"};
    for (size_t i = 0; i < N(no_u64); i++) {
        err.msg[0] = 0;
        CHECKF(gguf_get_u64(f, no_u64[i], &u, &err) == LILAC_E_FORMAT, "get_u64 %s", no_u64[i]);
        CHECKF(strstr(err.msg, no_u64[i]) && strstr(err.msg, "mem.gguf"), "message: %s", err.msg);
    }
    CHECK(gguf_get_u64(f, "no.such.key", &u, &err) == LILAC_E_FORMAT);
    CHECKF(strstr(err.msg, "no.such.key") && strstr(err.msg, "missing"), "message: %s", err.msg);

    CHECK(gguf_get_f64(f, "t.f32", &d, &err) == LILAC_OK && d == 1.5);
    CHECK(gguf_get_f64(f, "t.f64", &d, &err) == LILAC_OK && d == -2.25e300);
    CHECK(gguf_get_f64(f, "t.i32", &d, &err) == LILAC_OK && d == -2000000000.0);
    CHECK(gguf_get_f64(f, "t.u8", &d, &err) == LILAC_OK && d == 200.0);
    CHECK(gguf_get_f64(f, "t.str", &d, &err) == LILAC_E_FORMAT && strstr(err.msg, "t.str"));

    CHECK(gguf_get_bool(f, "t.bool", &b, &err) == LILAC_OK && b == true);
    CHECK(gguf_get_bool(f, "t.bool0", &b, &err) == LILAC_OK && b == false);
    CHECK(gguf_get_bool(f, "t.u8", &b, &err) == LILAC_E_FORMAT && strstr(err.msg, "t.u8"));

    CHECK(gguf_get_str(f, "t.str", &s, &err) == LILAC_OK && s && strcmp(s, "hello, w\xc3\xb6rld") == 0);
    free(s);
    s = NULL;
    CHECK(gguf_get_str(f, "t.empty", &s, &err) == LILAC_OK && s && s[0] == 0);
    free(s);
    s = NULL;
    CHECK(gguf_get_str(f, "general.architecture", &s, &err) == LILAC_OK && s && strcmp(s, "testarch") == 0);
    free(s);
    CHECK(gguf_get_str(f, "t.u32", &s, &err) == LILAC_E_FORMAT && strstr(err.msg, "STRING"));

    /* numeric arrays, read back through all three converters */
    struct {
        const char *key;
        gguf_vtype et;
        const int64_t *v;
        size_t n;
    } ints[] = {
        {"a.u8", GGUF_VT_U8, A_U8, N(A_U8)},       {"a.i8", GGUF_VT_I8, A_I8, N(A_I8)},
        {"a.u16", GGUF_VT_U16, A_U16, N(A_U16)},   {"a.i16", GGUF_VT_I16, A_I16, N(A_I16)},
        {"a.u32", GGUF_VT_U32, A_U32, N(A_U32)},   {"a.i32", GGUF_VT_I32, A_I32, N(A_I32)},
        {"a.bool", GGUF_VT_BOOL, A_BOOL, N(A_BOOL)}, {"a.i64", GGUF_VT_I64, A_I64, N(A_I64)},
    };
    for (size_t k = 0; k < N(ints); k++) {
        const gguf_kv *kv = gguf_find_kv(f, ints[k].key);
        CHECKF(kv && kv->type == GGUF_VT_ARRAY && kv->v.arr.type == ints[k].et && kv->v.arr.n == ints[k].n,
               "array %s", ints[k].key);
        if (!kv)
            continue;
        for (size_t i = 0; i < ints[k].n; i++) {
            int64_t want = ints[k].v[i], got_i = 0;
            uint64_t got_u = 0;
            double got_f = 0;
            CHECKF(gguf_arr_i64(kv, i, &got_i) && got_i == want, "%s[%zu] i64 %" PRId64, ints[k].key, i, got_i);
            CHECKF(gguf_arr_u64(kv, i, &got_u) == (want >= 0) && (want < 0 || got_u == (uint64_t)want),
                   "%s[%zu] u64", ints[k].key, i);
            CHECKF(gguf_arr_f64(kv, i, &got_f) && got_f == (double)want, "%s[%zu] f64", ints[k].key, i);
        }
        CHECKF(!gguf_arr_i64(kv, ints[k].n, &(int64_t){0}), "%s: index past the end", ints[k].key);
    }
    const gguf_kv *kv = gguf_find_kv(f, "a.u64");
    CHECK(kv && kv->v.arr.type == GGUF_VT_U64 && kv->v.arr.n == 2);
    CHECK(gguf_arr_u64(kv, 0, &u) && u == UINT64_MAX);
    CHECK(!gguf_arr_i64(kv, 0, &(int64_t){0})); /* does not fit */
    CHECK(gguf_arr_u64(kv, 1, &u) && u == 42);
    kv = gguf_find_kv(f, "a.f32");
    CHECK(kv && kv->v.arr.type == GGUF_VT_F32 && kv->v.arr.n == 2);
    CHECK(gguf_arr_f64(kv, 0, &d) && d == 0.5);
    CHECK(gguf_arr_f64(kv, 1, &d) && d == (double)-1e30f);
    CHECK(!gguf_arr_u64(kv, 1, &u)); /* negative */
    kv = gguf_find_kv(f, "a.f64");
    CHECK(kv && kv->v.arr.type == GGUF_VT_F64 && kv->v.arr.n == 2);
    CHECK(gguf_arr_f64(kv, 0, &d) && d == 3.25);
    CHECK(gguf_arr_f64(kv, 1, &d) && d == -1e300);
    CHECK(gguf_arr_i64(kv, 0, &(int64_t){0}));
    kv = gguf_find_kv(f, "a.empty");
    CHECK(kv && kv->v.arr.type == GGUF_VT_U32 && kv->v.arr.n == 0 && !gguf_arr_u64(kv, 0, &u));
    kv = gguf_find_kv(f, "a.str");
    CHECK(kv && kv->v.arr.type == GGUF_VT_STRING && kv->v.arr.n == 3 && kv->v.arr.strs);
    if (kv && kv->v.arr.strs) {
        CHECK(kv->v.arr.strs[0].len == 1 && memcmp(kv->v.arr.strs[0].ptr, "a", 1) == 0);
        CHECK(kv->v.arr.strs[1].len == 0);
        CHECK(kv->v.arr.strs[2].len == 3 && memcmp(kv->v.arr.strs[2].ptr, "ccc", 3) == 0);
    }
    CHECK(!gguf_arr_u64(kv, 0, &u)); /* not numeric */
    kv = gguf_find_kv(f, "a.str0");
    CHECK(kv && kv->v.arr.type == GGUF_VT_STRING && kv->v.arr.n == 0);
    CHECK(!gguf_arr_u64(gguf_find_kv(f, "t.u8"), 0, &u)); /* a scalar */
    CHECK(!gguf_arr_u64(NULL, 0, &u));
    CHECK(gguf_find_kv(f, "bad.utf8.\xff\xfe") != NULL);
}

static void check_tensors(const gguf_file *f, const uint8_t *base, size_t data_start, size_t align)
{
    CHECK(gguf_n_tensors(f) == N(FULL_TENSORS));
    uint64_t off = 0;
    for (size_t i = 0; i < N(FULL_TENSORS); i++) {
        const tspec *s = &FULL_TENSORS[i];
        const gguf_tensor *t = gguf_find_tensor(f, s->name);
        CHECKF(t != NULL, "tensor %s", s->name);
        if (!t)
            continue;
        CHECK(t == gguf_tensor_at(f, i));
        CHECKF(strcmp(t->name, s->name) == 0 && t->type == (int)s->type && t->n_dims == (int)s->n_dims,
               "tensor %s: type %d n_dims %d", s->name, t->type, t->n_dims);
        for (int d = 0; d < 4; d++) {
            int64_t want = d < (int)s->n_dims ? (int64_t)s->ne[d] : 1;
            CHECKF(t->ne[d] == want, "tensor %s ne[%d] = %" PRId64 ", want %" PRId64, s->name, d, t->ne[d], want);
        }
        uint64_t nb = tspec_bytes(s);
        CHECKF(t->nbytes == nb, "tensor %s nbytes %zu, want %" PRIu64, s->name, t->nbytes, nb);
        CHECKF((const uint8_t *)t->data == base + data_start + off, "tensor %s data pointer", s->name);
        CHECK(t->file == 0);
        const uint8_t *p = t->data;
        CHECKF(p[0] == pat(off, 0) && p[t->nbytes - 1] == pat(off + t->nbytes - 1, 0), "tensor %s data",
               s->name);
        off += (nb + align - 1) / align * align;
    }
    CHECK(gguf_find_tensor(f, "nope") == NULL);
    CHECK(gguf_find_tensor(f, "") == NULL);
    CHECK(gguf_tensor_at(f, N(FULL_TENSORS)) == NULL);
}

static void test_valid(void)
{
    size_t aligns[] = {32, 64, 32, 1, 4096};
    for (size_t a = 0; a < N(aligns); a++) {
        size_t ds;
        int explicit_align = a == 2;
        wbuf w = full_image(aligns[a], explicit_align, &ds);
        CHECK(ds % aligns[a] == 0);
        gguf_file *f = NULL;
        lilac_error err = {0};
        uint8_t *copy;
        lilac_status st = parse_copy(w.p, w.n, "mem.gguf", &f, &err, &copy);
        CHECKF(st == LILAC_OK, "align %zu: %s", aligns[a], err.msg);
        if (st == LILAC_OK) {
            CHECK(gguf_version(f) == 3);
            CHECK(gguf_alignment(f) == aligns[a]);
            CHECK(gguf_n_files(f) == 1);
            CHECK(strcmp(gguf_file_path(f, 0), "mem.gguf") == 0);
            CHECK(gguf_file_path(f, 1) == NULL);
            size_t want_kv = 31 + (aligns[a] != 32 || explicit_align);
            CHECKF(gguf_n_kv(f) == want_kv, "n_kv %zu", gguf_n_kv(f));
            /* kv_at walks them in file order */
            CHECK(strcmp(gguf_kv_at(f, 0)->key, "general.architecture") == 0);
            CHECK(gguf_kv_at(f, gguf_n_kv(f)) == NULL);
            for (size_t i = 0; i < gguf_n_kv(f); i++)
                CHECK(gguf_find_kv(f, gguf_kv_at(f, i)->key) == gguf_kv_at(f, i));
            check_values(f);
            check_tensors(f, copy, ds, aligns[a]);
            gguf_close(f);
        }
        free(copy);
        free(w.p);
    }

    /* version 2 parses too */
    kvs k = {0};
    kv_u32(&k, "x", 1);
    tspec t = {"w", LILAC_F32, 1, {8}, AUTO};
    wbuf w = assemble(2, &k, &t, 1, 32, 0, NULL);
    gguf_file *f = NULL;
    lilac_error err = {0};
    CHECKF(gguf_parse(w.p, w.n, "v2.gguf", &f, &err) == LILAC_OK, "v2: %s", err.msg);
    CHECK(f && gguf_version(f) == 2);
    gguf_close(f);
    free(w.p);
    free_kvs(&k);

    /* no kvs, no tensors, not even padding: an empty but valid file */
    w = assemble(3, NULL, NULL, 0, 1, 0, NULL);
    CHECK(w.n == 24);
    f = NULL;
    CHECKF(gguf_parse(w.p, w.n, "empty.gguf", &f, &err) == LILAC_OK, "empty: %s", err.msg);
    CHECK(f && gguf_n_kv(f) == 0 && gguf_n_tensors(f) == 0 && gguf_alignment(f) == 32);
    gguf_close(f);
    free(w.p);

    /* a scalar BOOL byte other than 0/1 reads as true */
    k = (kvs){0};
    kv_uint(&k, "b", GGUF_VT_BOOL, 7, 1);
    w = assemble(3, &k, NULL, 0, 1, 0, NULL);
    f = NULL;
    bool bv = false;
    CHECK(gguf_parse(w.p, w.n, "b.gguf", &f, &err) == LILAC_OK);
    CHECK(f && gguf_get_bool(f, "b", &bv, &err) == LILAC_OK && bv);
    gguf_close(f);
    free(w.p);
    free_kvs(&k);
}

/* Many tensors and keys: every one found through the index. */
static void test_many(void)
{
    enum { NT = 1500 };
    static tspec ts[NT];
    static char names[NT][32];
    kvs k = {0};
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "blk.%d.weight", i);
        ts[i] = (tspec){names[i], LILAC_F32, 1, {1 + (uint64_t)(i % 5)}, AUTO};
        char key[32];
        snprintf(key, sizeof key, "key.%d", i);
        kv_u32(&k, key, (uint32_t)i);
    }
    wbuf w = assemble(3, &k, ts, NT, 32, 0, NULL);
    gguf_file *f = NULL;
    lilac_error err = {0};
    CHECKF(gguf_parse(w.p, w.n, "many.gguf", &f, &err) == LILAC_OK, "%s", err.msg);
    if (f) {
        int bad = 0;
        for (int i = 0; i < NT; i++) {
            const gguf_tensor *t = gguf_find_tensor(f, names[i]);
            if (!t || t != gguf_tensor_at(f, (size_t)i) || t->ne[0] != 1 + i % 5)
                bad++;
            char key[32];
            uint64_t v;
            snprintf(key, sizeof key, "key.%d", i);
            if (gguf_get_u64(f, key, &v, &err) != LILAC_OK || v != (uint64_t)i)
                bad++;
        }
        CHECKF(bad == 0, "%d lookups failed", bad);
        gguf_close(f);
    }
    free(w.p);
    free_kvs(&k);
}

/* ---- rejected images --------------------------------------------------- */

/* One tensor image with the given spec, metadata optional. */
static wbuf one_tensor(const kvs *k, tspec t, size_t align)
{
    return assemble(3, k, &t, 1, align, 0, NULL);
}

static void test_errors(void)
{
    kvs none = {0};
    wbuf w;

    /* header */
    w = full_image(32, 0, NULL);
    memcpy(w.p, "GGUX", 4);
    expect_fail("bad magic", w, LILAC_E_FORMAT, "not a GGUF file (magic 'GGUX')");
    w = full_image(32, 0, NULL);
    memcpy(w.p, "\x00\x01GG", 4);
    expect_fail("binary magic", w, LILAC_E_FORMAT, "not a GGUF file (magic '\\x00\\x01GG')");
    w = assemble(1, NULL, NULL, 0, 1, 0, NULL);
    expect_fail("version 1", w, LILAC_E_UNSUPPORTED, "version 1 is not supported");
    w = assemble(4, NULL, NULL, 0, 1, 0, NULL);
    expect_fail("version 4", w, LILAC_E_UNSUPPORTED, "version 4 is not supported");
    w = assemble(0x03000000, NULL, NULL, 0, 1, 0, NULL);
    expect_fail("big-endian", w, LILAC_E_UNSUPPORTED, "big-endian");
    expect_fail_n("empty file", (const uint8_t *)"", 0, LILAC_E_FORMAT, "truncated");

    /* impossible counts must fail at once, without allocating or looping */
    w = assemble(3, NULL, NULL, 0, 1, 0, NULL);
    memcpy(w.p + 16, "\x00\x00\x00\x00\x00\x00\x00\x80", 8); /* kv count 2^63 */
    expect_fail("kv count 2^63", w, LILAC_E_FORMAT, "9223372036854775808 metadata kv pairs");
    w = assemble(3, NULL, NULL, 0, 1, 0, NULL);
    memcpy(w.p + 8, "\xff\xff\xff\xff\xff\xff\xff\xff", 8); /* tensor count 2^64-1 */
    expect_fail("tensor count 2^64-1", w, LILAC_E_FORMAT, "18446744073709551615 tensors");
    {
        kvs k = {0};
        for (int i = 0; i < 21; i++) {
            char key[4] = {'k', (char)('a' + i), 0, 0};
            kv_u32(&k, key, 1);
        }
        w = assemble(3, &k, NULL, 0, 1, 0, NULL);
        memcpy(w.p + 8, "\x03\x00\x00\x00\x00\x00\x00\x00", 8); /* 3 tensors: 96 bytes < 21 kvs */
        /* the 21 kvs are 21 * 18 = 378 bytes; after them nothing is left */
        expect_fail("tensor count after kvs", w, LILAC_E_FORMAT, "hold at most 0 tensor infos");
        free_kvs(&k);
    }

    /* metadata */
    {
        kvs k = {0};
        kv_uint(&k, "foo", 99, 0, 8);
        expect_fail("unknown value type", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_UNSUPPORTED,
                    "unknown metadata value type 99 for key 'foo'");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        kv_head(&k, "arr", GGUF_VT_ARRAY);
        w_u32(&k.b, 13);
        w_u64(&k.b, 0);
        expect_fail("unknown element type", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_UNSUPPORTED,
                    "unknown array element type 13 for key 'arr'");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        kv_head(&k, "nest", GGUF_VT_ARRAY);
        w_u32(&k.b, GGUF_VT_ARRAY);
        w_u64(&k.b, 1);
        w_u32(&k.b, GGUF_VT_U8);
        w_u64(&k.b, 0);
        expect_fail("nested array", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_UNSUPPORTED, "nested arrays");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        kv_head(&k, "big", GGUF_VT_ARRAY);
        w_u32(&k.b, GGUF_VT_U64);
        w_u64(&k.b, UINT64_C(1) << 62);
        w_u64(&k.b, 0);
        expect_fail("huge numeric array", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "array 'big' of 4611686018427387904 U64 elements");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        kv_head(&k, "strs", GGUF_VT_ARRAY);
        w_u32(&k.b, GGUF_VT_STRING);
        w_u64(&k.b, UINT64_MAX);
        w_u64(&k.b, 0);
        expect_fail("huge string array", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "string array 'strs' of 18446744073709551615 entries");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        w_u64(&k.b, UINT64_C(1) << 40); /* key length far past the end */
        w_bytes(&k.b, "abcdefgh", 8);
        k.n = 1;
        expect_fail("key longer than file", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "a string of 1099511627776 bytes");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        kv_head(&k, "s", GGUF_VT_STRING);
        w_u64(&k.b, UINT64_MAX); /* value length */
        w_bytes(&k.b, "abcdefgh", 8);
        expect_fail("value longer than file", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "the value of key 0 ('s'): a string of 18446744073709551615 bytes");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        w_strn(&k.b, "a\0b", 3);
        w_u32(&k.b, GGUF_VT_U8);
        w_u8(&k.b, 1);
        k.n = 1;
        expect_fail("NUL in key", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "the key 'a\\x00b' at byte 32 contains a NUL byte");
        free_kvs(&k);
    }
    {
        kvs k = {0};
        kv_u32(&k, "dup", 1);
        kv_u32(&k, "other", 2);
        kv_str(&k, "dup", "again");
        expect_fail("duplicate key", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "duplicate key 'dup' (entries 0 and 2)");
        free_kvs(&k);
    }
    {
        uint32_t bad[] = {0, 48, 3, 0x80000001u};
        const char *want[] = {"general.alignment is 0;", "general.alignment is 48;", "general.alignment is 3;",
                              "general.alignment is 2147483649;"};
        for (size_t i = 0; i < N(bad); i++) {
            kvs k = {0};
            kv_u32(&k, "general.alignment", bad[i]);
            expect_fail("bad alignment", one_tensor(&k, (tspec){"w", LILAC_F32, 1, {4}, AUTO}, 32),
                        LILAC_E_FORMAT, want[i]);
            free_kvs(&k);
        }
        kvs k = {0};
        kv_str(&k, "general.alignment", "32");
        expect_fail("alignment as string", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "general.alignment has type STRING");
        free_kvs(&k);
        k = (kvs){0};
        kv_uint(&k, "general.alignment", GGUF_VT_I32, (uint64_t)(int64_t)-32, 4);
        expect_fail("negative alignment", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "general.alignment is -32;");
        free_kvs(&k);
        k = (kvs){0};
        kv_uint(&k, "general.alignment", GGUF_VT_U64, UINT64_C(1) << 40, 8);
        expect_fail("alignment 2^40", assemble(3, &k, NULL, 0, 1, 0, NULL), LILAC_E_FORMAT,
                    "general.alignment is 1099511627776;");
        free_kvs(&k);
    }

    /* tensor infos */
    expect_fail("unknown tensor type", one_tensor(&none, (tspec){"x", 99, 1, {4}, AUTO}, 32),
                LILAC_E_UNSUPPORTED, "tensor 'x' has unknown type 99");
    expect_fail("removed tensor type 4", one_tensor(&none, (tspec){"x", 4, 1, {32}, AUTO}, 32),
                LILAC_E_UNSUPPORTED, "unknown type 4");
    expect_fail("safetensors-only type", one_tensor(&none, (tspec){"x", LILAC_U8, 1, {4}, AUTO}, 32),
                LILAC_E_UNSUPPORTED, "unknown type 1000");
    expect_fail("n_dims 0", one_tensor(&none, (tspec){"x", LILAC_F32, 0, {0}, AUTO}, 32), LILAC_E_FORMAT,
                "tensor 'x' has n_dims 0");
    expect_fail("n_dims 5", one_tensor(&none, (tspec){"x", LILAC_F32, 5, {1, 1, 1, 1, 1}, AUTO}, 32),
                LILAC_E_FORMAT, "tensor 'x' has n_dims 5");
    expect_fail("ne 0", one_tensor(&none, (tspec){"x", LILAC_F32, 2, {4, 0}, AUTO}, 32), LILAC_E_FORMAT,
                "tensor 'x' has ne[1] = 0 (must be positive)");
    expect_fail("ne negative", one_tensor(&none, (tspec){"x", LILAC_F32, 2, {UINT64_MAX, 1}, AUTO}, 32),
                LILAC_E_FORMAT, "tensor 'x' has ne[0] = -1 (must be positive)");
    expect_fail("ne not whole blocks", one_tensor(&none, (tspec){"x", LILAC_Q8_0, 2, {33, 1}, AUTO}, 32),
                LILAC_E_FORMAT, "not a multiple of the block size 32");
    expect_fail("Q4_K ne0 128", one_tensor(&none, (tspec){"x", LILAC_Q4_K, 1, {128}, AUTO}, 32),
                LILAC_E_FORMAT, "ne[0] = 128, not a multiple of the block size 256");
    expect_fail("element overflow",
                one_tensor(&none, (tspec){"x", LILAC_F32, 3, {1u << 31, 1u << 31, 1u << 31}, 0}, 32),
                LILAC_E_FORMAT, "overflow");
    expect_fail("byte overflow", one_tensor(&none, (tspec){"x", LILAC_F64, 1, {UINT64_C(1) << 62}, 0}, 32),
                LILAC_E_FORMAT, "too large");
    expect_fail("offset unaligned", one_tensor(&none, (tspec){"x", LILAC_F32, 1, {8}, 8}, 32), LILAC_E_FORMAT,
                "tensor 'x' has offset 8, not a multiple of the alignment 32");
    {
        kvs k = {0};
        kv_u32(&k, "general.alignment", 64);
        expect_fail("offset unaligned 64", one_tensor(&k, (tspec){"x", LILAC_F32, 1, {8}, 32}, 64),
                    LILAC_E_FORMAT, "offset 32, not a multiple of the alignment 64");
        free_kvs(&k);
    }
    expect_fail("offset past end", one_tensor(&none, (tspec){"x", LILAC_F32, 1, {8}, UINT64_C(1) << 40}, 32),
                LILAC_E_FORMAT, "tensor 'x' (offset 1099511627776, 32 bytes");
    expect_fail("offset 2^64-32", one_tensor(&none, (tspec){"x", LILAC_F32, 1, {8}, UINT64_MAX - 31}, 32),
                LILAC_E_FORMAT, "extends past the end of the file");
    {
        w = one_tensor(&none, (tspec){"x", LILAC_F32, 2, {256, 1024}, AUTO}, 32);
        w.n -= 1; /* one byte short */
        expect_fail("data past end", w, LILAC_E_FORMAT,
                    "tensor 'x' (offset 0, 1048576 bytes, data section at byte 96) extends past the end of the file "
                    "(1048671 bytes)");
    }
    {
        tspec ts[] = {{"a", LILAC_F32, 1, {8}, AUTO}, {"b", LILAC_F32, 1, {8}, AUTO}, {"a", LILAC_F16, 1, {8}, AUTO}};
        expect_fail("duplicate tensor", assemble(3, NULL, ts, 3, 32, 0, NULL), LILAC_E_FORMAT,
                    "duplicate tensor name 'a' (tensor infos 0 and 2)");
    }
    {
        kvs k = {0};
        w = one_tensor(&k, (tspec){"a?b", LILAC_F32, 1, {8}, AUTO}, 32);
        w.p[24 + 8 + 1] = 0; /* the name's middle byte */
        expect_fail("NUL in tensor name", w, LILAC_E_FORMAT, "tensor info 0: the name 'a\\x00b'");
    }
    expect_fail("empty tensor name", one_tensor(&none, (tspec){"", LILAC_F32, 1, {8}, AUTO}, 32), LILAC_E_FORMAT,
                "tensor info 0 has an empty name");
    {
        tspec ts[] = {{"first", LILAC_F32, 1, {8}, AUTO}, {"blk.0.attn_q.weight", LILAC_F32, 1, {8}, AUTO}};
        w = assemble(3, NULL, ts, 2, 32, 0, NULL);
        w.n = 24 + 8 + 5 + 4 + 8 + 4 + 8 + 8 + 19 + 4; /* into the second info's ne */
        expect_fail("truncated info", w, LILAC_E_FORMAT,
                    "truncated: tensor info 1 ('blk.0.attn_q.weight') needs 8 bytes at byte 92 but the file has 92 "
                    "bytes");
    }
    {
        kvs k = {0};
        kv_head(&k, "last", GGUF_VT_U64);
        w_u32(&k.b, 7); /* 4 of 8 bytes */
        w = assemble(3, &k, NULL, 0, 1, 0, NULL);
        expect_fail("truncated value", w, LILAC_E_FORMAT,
                    "truncated: the value of key 0 ('last') needs 8 bytes at byte 40 but the file has 44 bytes");
        free_kvs(&k);
    }
}

/* Every proper prefix of a valid image must fail cleanly. */
static void test_truncation(void)
{
    wbuf w = full_image(64, 0, NULL);
    int ok = 0, msg_bad = 0;
    for (size_t n = 0; n < w.n; n++) {
        uint8_t *copy;
        gguf_file *f = NULL;
        lilac_error err = {0};
        lilac_status st = parse_copy(w.p, n, "cut.gguf", &f, &err, &copy);
        if (st == LILAC_OK) {
            ok++;
            gguf_close(f);
        } else if (st != LILAC_E_FORMAT || !strstr(err.msg, "cut.gguf") ||
                   !(strstr(err.msg, "truncated") || strstr(err.msg, "past the end"))) {
            if (msg_bad++ < 5)
                fprintf(stderr, "prefix %zu: %s: %s\n", n, lilac_status_name(st), err.msg);
        }
        free(copy);
    }
    CHECKF(ok == 0, "%d truncated images parsed", ok);
    CHECKF(msg_bad == 0, "%d truncations gave an unexpected error", msg_bad);
    printf("truncation: all %zu prefixes rejected\n", w.n);
    free(w.p);
}

/* ---- split sets -------------------------------------------------------- */

enum { SPLIT_OK, SPLIT_BAD_NO, SPLIT_BAD_COUNT, SPLIT_DUP, SPLIT_BAD_TOTAL };

/* Write dir/m-0000i-of-00003.gguf for i = 1..3; tensors a,b | c | d,e. */
static void write_split(const char *dir, int variant)
{
    static const tspec parts[3][2] = {
        {{"a", LILAC_F32, 2, {4, 2}, AUTO}, {"b", LILAC_BF16, 1, {64}, AUTO}},
        {{"c", LILAC_Q8_0, 2, {32, 3}, AUTO}, {0}},
        {{"d", LILAC_F16, 1, {8}, AUTO}, {"e", LILAC_F32, 1, {1}, AUTO}},
    };
    static const size_t counts[3] = {2, 1, 2};
    for (int i = 0; i < 3; i++) {
        kvs k = {0};
        if (i == 0)
            kv_str(&k, "general.architecture", "splitarch");
        kv_uint(&k, "split.no", GGUF_VT_U16, (uint64_t)(variant == SPLIT_BAD_NO && i == 1 ? 5 : i), 2);
        kv_uint(&k, "split.count", GGUF_VT_U16, variant == SPLIT_BAD_COUNT && i == 2 ? 4 : 3, 2);
        kv_uint(&k, "split.tensors.count", GGUF_VT_I32, variant == SPLIT_BAD_TOTAL ? 6 : 5, 4);
        tspec ts[2] = {parts[i][0], parts[i][1]};
        if (variant == SPLIT_DUP && i == 2)
            ts[1].name = "b";
        wbuf w = assemble(3, &k, ts, counts[i], 32, (unsigned)i + 1, NULL);
        char path[512];
        snprintf(path, sizeof path, "%s/m-%05d-of-00003.gguf", dir, i + 1);
        CHECKF(tu_write_file(path, w.p, w.n) == 0, "write %s", path);
        free(w.p);
        free_kvs(&k);
    }
}

static void expect_open_fail(const char *label, const char *path, lilac_status want, const char *p1,
                             const char *p2)
{
    gguf_file *f = (gguf_file *)1;
    lilac_error err = {0};
    lilac_status st = gguf_open(path, &f, &err);
    CHECKF(st == want, "%s: status %s, expected %s (%s)", label, lilac_status_name(st), lilac_status_name(want),
           err.msg);
    CHECKF(f == NULL, "%s: out not cleared", label);
    CHECKF(strstr(err.msg, p1) != NULL, "%s: message lacks '%s': %s", label, p1, err.msg);
    CHECKF(!p2 || strstr(err.msg, p2) != NULL, "%s: message lacks '%s': %s", label, p2, err.msg);
    if (verbose)
        printf("  %-28s %s\n", label, err.msg);
    if (st == LILAC_OK)
        gguf_close(f);
}

static void test_split(void)
{
    char dir[] = "/tmp/lilac-gguf-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECKF(0, "mkdtemp failed");
        return;
    }
    char p1[600], p2[600], p3[600], plain[600];
    snprintf(p1, sizeof p1, "%s/m-00001-of-00003.gguf", dir);
    snprintf(p2, sizeof p2, "%s/m-00002-of-00003.gguf", dir);
    snprintf(p3, sizeof p3, "%s/m-00003-of-00003.gguf", dir);
    snprintf(plain, sizeof plain, "%s/plain.gguf", dir);

    write_split(dir, SPLIT_OK);
    gguf_file *f = NULL;
    lilac_error err = {0};
    lilac_status st = gguf_open(p1, &f, &err);
    CHECKF(st == LILAC_OK, "split open: %s", err.msg);
    if (st == LILAC_OK) {
        CHECK(gguf_n_files(f) == 3);
        CHECK(strcmp(gguf_file_path(f, 0), p1) == 0 && strcmp(gguf_file_path(f, 2), p3) == 0);
        CHECK(gguf_n_tensors(f) == 5);
        char *arch = NULL;
        CHECK(gguf_get_str(f, "general.architecture", &arch, &err) == LILAC_OK && strcmp(arch, "splitarch") == 0);
        free(arch);
        const char *names[] = {"a", "b", "c", "d", "e"};
        const int file[] = {0, 0, 1, 2, 2};
        const size_t nbytes[] = {32, 128, 102, 16, 4};
        const uint64_t offset[] = {0, 32, 0, 0, 32};
        for (int i = 0; i < 5; i++) {
            const gguf_tensor *t = gguf_find_tensor(f, names[i]);
            CHECKF(t && t->file == file[i] && t->nbytes == nbytes[i], "split tensor %s", names[i]);
            if (!t)
                continue;
            const uint8_t *p = t->data;
            unsigned salt = (unsigned)file[i] + 1;
            CHECKF(p[0] == pat(offset[i], salt) && p[t->nbytes - 1] == pat(offset[i] + t->nbytes - 1, salt),
                   "split tensor %s data", names[i]);
        }
        CHECK(gguf_find_tensor(f, "c")->ne[0] == 32 && gguf_find_tensor(f, "c")->ne[1] == 3);
        gguf_close(f);
    }

    /* opening a later part is refused, pointing at the first */
    expect_open_fail("open part 2", p2, LILAC_E_ARG, "part 2 of 3", "m-00001-of-00003.gguf");

    /* a split set whose first part is not named NAME-00001-of-0000N.gguf */
    {
        size_t n;
        void *d = tu_read_file(p1, &n);
        CHECK(d && tu_write_file(plain, d, n) == 0);
        free(d);
    }
    expect_open_fail("split bad name", plain, LILAC_E_FORMAT, "plain.gguf", "-00001-of-00003.gguf");

    write_split(dir, SPLIT_BAD_NO);
    expect_open_fail("split bad split.no", p1, LILAC_E_FORMAT, p2, "split.no is 5");
    write_split(dir, SPLIT_BAD_COUNT);
    expect_open_fail("split bad split.count", p1, LILAC_E_FORMAT, p3, "split.count is 4");
    write_split(dir, SPLIT_DUP);
    expect_open_fail("split duplicate tensor", p1, LILAC_E_FORMAT, "duplicate tensor name 'b'", p3);
    write_split(dir, SPLIT_BAD_TOTAL);
    expect_open_fail("split bad total", p1, LILAC_E_FORMAT, "split.tensors.count is 6", "hold 5 tensors");

    /* a corrupt later part: its own message, naming it */
    write_split(dir, SPLIT_OK);
    {
        size_t n;
        uint8_t *d = tu_read_file(p2, &n);
        CHECK(d && tu_write_file(p2, d, n - 1) == 0);
        free(d);
    }
    expect_open_fail("split truncated part", p1, LILAC_E_FORMAT, p2, "past the end");

    write_split(dir, SPLIT_OK);
    unlink(p3);
    expect_open_fail("split missing part", p1, LILAC_E_IO, p3, "part 3 of 3");

    expect_open_fail("no such file", "/nonexistent/x.gguf", LILAC_E_IO, "/nonexistent/x.gguf", "cannot open");
    expect_open_fail("directory", dir, LILAC_E_IO, dir, "not a regular file");

    unlink(p1);
    unlink(p2);
    unlink(p3);
    unlink(plain);
    CHECKF(rmdir(dir) == 0, "rmdir %s", dir);
}

/* ---- real files -------------------------------------------------------- */

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static void test_fixture_bf16(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/model-bf16.gguf", dir);
    gguf_file *f = NULL;
    lilac_error err = {0};
    lilac_status st = gguf_open(path, &f, &err);
    CHECKF(st == LILAC_OK, "%s", err.msg);
    if (st)
        return;
    CHECK(gguf_version(f) == 3);
    CHECK(gguf_n_files(f) == 1);
    char *arch = NULL;
    CHECK(gguf_get_str(f, "general.architecture", &arch, &err) == LILAC_OK && arch &&
          strcmp(arch, "qwen35moe") == 0);
    free(arch);
    uint64_t u = 0;
    CHECK(gguf_get_u64(f, "qwen35moe.block_count", &u, &err) == LILAC_OK && u == 4);
    CHECK(gguf_get_u64(f, "qwen35moe.embedding_length", &u, &err) == LILAC_OK && u == 256);

    const gguf_kv *kv = gguf_find_kv(f, "qwen35moe.rope.dimension_sections");
    CHECK(kv && kv->type == GGUF_VT_ARRAY && kv->v.arr.n == 4);
    if (kv && kv->type == GGUF_VT_ARRAY) {
        const int64_t want[4] = {6, 5, 5, 0};
        for (uint64_t i = 0; i < 4 && i < kv->v.arr.n; i++) {
            int64_t v = -1;
            CHECKF(gguf_arr_i64(kv, i, &v) && v == want[i], "dimension_sections[%" PRIu64 "] = %" PRId64, i, v);
        }
    }
    kv = gguf_find_kv(f, "qwen35moe.attention.recurrent_layers");
    CHECK(kv && kv->type == GGUF_VT_ARRAY && kv->v.arr.type == GGUF_VT_BOOL && kv->v.arr.n == 4);
    if (kv && kv->type == GGUF_VT_ARRAY) {
        const uint64_t want[4] = {1, 1, 1, 0};
        for (uint64_t i = 0; i < 4 && i < kv->v.arr.n; i++) {
            uint64_t v = 9;
            CHECKF(gguf_arr_u64(kv, i, &v) && v == want[i], "recurrent_layers[%" PRIu64 "]", i);
        }
    }
    kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    CHECK(kv && kv->type == GGUF_VT_ARRAY && kv->v.arr.type == GGUF_VT_STRING && kv->v.arr.n == 2048);

    CHECKF(gguf_n_tensors(f) == 76, "%zu tensors", gguf_n_tensors(f));
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 256 && t->ne[1] == 2048 && t->type == LILAC_BF16 &&
          t->nbytes == 256 * 2048 * 2);
    t = gguf_find_tensor(f, "blk.0.ffn_gate_exps.weight");
    CHECK(t && t->n_dims == 3 && t->ne[0] == 256 && t->ne[1] == 256 && t->ne[2] == 8 && t->ne[3] == 1);
    t = gguf_find_tensor(f, "blk.0.ssm_conv1d.weight");
    CHECK(t && t->ne[0] == 4 && t->ne[1] == 1024 && t->type == LILAC_F32);

    /* Every tensor's data inside the file: parse an in-memory copy, where
     * the bounds are known, and check the map gives the same layout. */
    size_t size = 0;
    uint8_t *copy = tu_read_file(path, &size);
    gguf_file *m = NULL;
    CHECK(copy && gguf_parse(copy, size, path, &m, &err) == LILAC_OK);
    if (m) {
        CHECK(gguf_n_tensors(m) == gguf_n_tensors(f));
        const uint8_t *f0 = gguf_tensor_at(f, 0)->data, *m0 = gguf_tensor_at(m, 0)->data;
        int outside = 0, differ = 0;
        for (size_t i = 0; i < gguf_n_tensors(m); i++) {
            const gguf_tensor *a = gguf_tensor_at(m, i), *b = gguf_tensor_at(f, i);
            const uint8_t *p = a->data;
            if (p < copy || p > copy + size || a->nbytes > (size_t)(copy + size - p))
                outside++;
            if (strcmp(a->name, b->name) != 0 || a->nbytes != b->nbytes ||
                (const uint8_t *)b->data - f0 != p - m0 || memcmp(p, b->data, a->nbytes) != 0)
                differ++;
        }
        CHECKF(outside == 0, "%d tensors outside the file", outside);
        CHECKF(differ == 0, "%d tensors differ between the map and the copy", differ);
        gguf_close(m);
    }
    free(copy);
    gguf_close(f);
}

static void test_fixture_quants(const char *dir)
{
    const char *types[] = {"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"};
    for (size_t i = 0; i < N(types); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/model-%s.gguf", dir, types[i]);
        gguf_file *f = NULL;
        lilac_error err = {0};
        lilac_status st = gguf_open(path, &f, &err);
        CHECKF(st == LILAC_OK, "%s", err.msg);
        if (st)
            continue;
        uint64_t sum = 0;
        for (size_t j = 0; j < gguf_n_tensors(f); j++)
            sum += gguf_tensor_at(f, j)->nbytes;
        long long size = file_size(path);
        CHECKF(gguf_n_tensors(f) == 76, "%s: %zu tensors", types[i], gguf_n_tensors(f));
        CHECKF(size > 0 && sum <= (uint64_t)size, "%s: tensors %" PRIu64 " bytes, file %lld", types[i], sum, size);
        gguf_close(f);
    }
}

/* fuzz/run.sh seeds its corpus with the valid images built here. */
static int write_seeds(const char *dir)
{
    int bad = 0;
    size_t aligns[] = {32, 64, 1};
    for (size_t a = 0; a < N(aligns); a++) {
        wbuf w = full_image(aligns[a], 0, NULL);
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-full-align%zu.gguf", dir, aligns[a]);
        bad |= tu_write_file(path, w.p, w.n);
        free(w.p);
    }
    kvs k = {0};
    kv_uint(&k, "split.no", GGUF_VT_U16, 0, 2);
    kv_uint(&k, "split.count", GGUF_VT_U16, 2, 2);
    kv_uint(&k, "split.tensors.count", GGUF_VT_I32, 2, 4);
    tspec ts[] = {{"blk.0.attn_q.weight", LILAC_Q6_K, 2, {256, 2}, AUTO}, {"x", LILAC_I8, 1, {3}, AUTO}};
    wbuf w = assemble(2, &k, ts, 2, 32, 0, NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-v2-split.gguf", dir);
    bad |= tu_write_file(path, w.p, w.n);
    free(w.p);
    free_kvs(&k);
    w = assemble(3, NULL, NULL, 0, 1, 0, NULL);
    snprintf(path, sizeof path, "%s/seed-empty.gguf", dir);
    bad |= tu_write_file(path, w.p, w.n);
    free(w.p);
    if (bad)
        fprintf(stderr, "cannot write seeds to %s\n", dir);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--write-seeds") == 0)
        return write_seeds(argv[2]);
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    test_valid();
    test_many();
    test_errors();
    test_truncation();
    test_split();
    const char *fx = tu_fixtures();
    if (fx) {
        test_fixture_bf16(fx);
        test_fixture_quants(fx);
    } else {
        printf("skipping fixture checks: fixtures not found (set LILAC_FIXTURES or place them at "
               "%s/../shared/fixtures)\n", LILAC_SOURCE_DIR);
    }
    TEST_END();
}
