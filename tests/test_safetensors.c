/* test_safetensors: the safetensors reader on images built here (every
 * error case, every truncation), on sharded directories written to a temp
 * dir, and on the real fixture checkpoints when present. */
#ifndef _POSIX_C_SOURCE /* strdup, mkdtemp; the build may set it already */
#define _POSIX_C_SOURCE 200809L
#endif
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "format/dtype.h"
#include "format/safetensors.h"
#include "testutil.h"

#define FNAME "model-00001-of-00002.safetensors"

/* Own copy of the names: the library's lilac_status_name lives elsewhere. */
static const char *status_str(lilac_status s)
{
    static const char *n[] = {"OK", "E_IO", "E_FORMAT", "E_UNSUPPORTED", "E_ARG",
                              "E_NOMEM", "E_RANGE", "E_INTERNAL"};
    return (unsigned)s < sizeof n / sizeof n[0] ? n[s] : "?";
}

/* ---- a growing string --------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)k + 1 > b->cap) {
        b->cap = (b->n + (size_t)k + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

/* ---- a tiny writer ------------------------------------------------------ */

/* An image of header json (padded with spaces to a multiple of 8, as the
 * reference writer does) and data_len bytes of data, byte i being i*7+1. */
static uint8_t *raw_image(const char *json, size_t json_len, size_t data_len, size_t *size)
{
    size_t hlen = (json_len + 7) / 8 * 8;
    *size = 8 + hlen + data_len;
    uint8_t *img = malloc(*size ? *size : 1);
    if (!img)
        abort();
    for (int i = 0; i < 8; i++)
        img[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(img + 8, json, json_len);
    memset(img + 8 + json_len, ' ', hlen - json_len);
    for (size_t i = 0; i < data_len; i++)
        img[8 + hlen + i] = (uint8_t)(i * 7 + 1);
    return img;
}

static uint8_t *image_of(const char *json, size_t data_len, size_t *size)
{
    return raw_image(json, strlen(json), data_len, size);
}

typedef struct spec {
    const char *name, *dtype;
    int esize, nd;
    int64_t shape[ST_MAX_DIMS];
    int lilac; /* expected lilac_dtype */
} spec;

static uint64_t spec_bytes(const spec *s)
{
    uint64_t n = (uint64_t)s->esize;
    for (int d = 0; d < s->nd; d++)
        n *= (uint64_t)s->shape[d];
    return n;
}

/* A valid image of the tensors laid out back to back in the given order;
 * begins[i] receives tensor i's offset. */
static uint8_t *build(const spec *sp, int n, const char *meta, size_t *size, uint64_t *begins,
                      size_t *data_start)
{
    sbuf b = {0};
    sb_printf(&b, "{");
    if (meta)
        sb_printf(&b, "\"__metadata__\": %s", meta);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t nb = spec_bytes(&sp[i]);
        sb_printf(&b, "%s\"%s\": {\"dtype\": \"%s\", \"shape\": [", (meta || i) ? ", " : "",
                  sp[i].name, sp[i].dtype);
        for (int d = 0; d < sp[i].nd; d++)
            sb_printf(&b, "%s%lld", d ? ", " : "", (long long)sp[i].shape[d]);
        sb_printf(&b, "], \"data_offsets\": [%llu, %llu]}", (unsigned long long)off,
                  (unsigned long long)(off + nb));
        if (begins)
            begins[i] = off;
        off += nb;
    }
    sb_printf(&b, "}");
    uint8_t *img = raw_image(b.p, b.n, (size_t)off, size);
    if (data_start)
        *data_start = *size - (size_t)off;
    free(b.p);
    return img;
}

/* ---- valid images ------------------------------------------------------- */

static const spec all_types[] = {
    {"w.f32", "F32", 4, 2, {2, 3}, LILAC_F32},
    {"w.bf16", "BF16", 2, 1, {4}, LILAC_BF16},
    {"scalar.i64", "I64", 8, 0, {0}, LILAC_I64},
    {"empty.f16", "F16", 2, 2, {0, 5}, LILAC_F16},
    {"w.f64", "F64", 8, 1, {2}, LILAC_F64},
    {"w.i32", "I32", 4, 3, {1, 2, 1}, LILAC_I32},
    {"w.i16", "I16", 2, 1, {3}, LILAC_I16},
    {"w.i8", "I8", 1, 1, {5}, LILAC_I8},
    {"w.u64", "U64", 8, 1, {1}, LILAC_U64},
    {"w.u32", "U32", 4, 1, {2}, LILAC_U32},
    {"w.u16", "U16", 2, 1, {2}, LILAC_U16},
    {"w.u8", "U8", 1, 1, {3}, LILAC_U8},
    {"mask", "BOOL", 1, 2, {2, 2}, LILAC_BOOL},
    {"w.e4m3", "F8_E4M3", 1, 1, {7}, LILAC_F8_E4M3},
    {"w.e5m2", "F8_E5M2", 1, 8, {1, 1, 1, 1, 1, 1, 1, 2}, LILAC_F8_E5M2},
};
#define N_ALL_TYPES ((int)(sizeof all_types / sizeof all_types[0]))

static void test_valid(void)
{
    size_t size, ds;
    uint64_t begins[N_ALL_TYPES];
    uint8_t *img = build(all_types, N_ALL_TYPES, "{\"format\": \"pt\", \"note\": \"x\"}", &size,
                         begins, &ds);
    st_set *s = NULL;
    lilac_error err = {0};
    lilac_status st = st_parse(img, size, FNAME, &s, &err);
    CHECKF(st == LILAC_OK, "valid image: %s", err.msg);
    if (st != LILAC_OK) {
        free(img);
        return;
    }
    CHECK(st_n_tensors(s) == (size_t)N_ALL_TYPES);
    CHECK(st_n_files(s) == 1);
    CHECK(strcmp(st_file_path(s, 0), FNAME) == 0);
    CHECK(st_file_path(s, 1) == NULL);
    CHECK(st_metadata(s, 0, "format") && strcmp(st_metadata(s, 0, "format"), "pt") == 0);
    CHECK(st_metadata(s, 0, "note") && strcmp(st_metadata(s, 0, "note"), "x") == 0);
    CHECK(st_metadata(s, 0, "absent") == NULL);
    for (int i = 0; i < N_ALL_TYPES; i++) {
        const spec *sp = &all_types[i];
        const st_tensor *t = st_find(s, sp->name);
        CHECKF(t != NULL, "st_find(%s)", sp->name);
        if (!t)
            continue;
        CHECKF(strcmp(t->name, sp->name) == 0, "%s: name %s", sp->name, t->name);
        CHECKF(t->dtype == sp->lilac, "%s: dtype %d", sp->name, t->dtype);
        CHECKF(t->n_dims == sp->nd, "%s: n_dims %d", sp->name, t->n_dims);
        for (int d = 0; d < sp->nd; d++)
            CHECKF(t->shape[d] == sp->shape[d], "%s: shape[%d]", sp->name, d);
        CHECKF(t->nbytes == spec_bytes(sp), "%s: nbytes %zu", sp->name, t->nbytes);
        CHECKF(t->data == img + ds + begins[i], "%s: data pointer", sp->name);
        CHECKF(t->file == 0, "%s: file", sp->name);
        const lilac_dtype_info *di = lilac_dtype_get(t->dtype);
        CHECKF(di && strcmp(di->name, sp->dtype) == 0, "%s: dtype name", sp->name);
        if (t->nbytes)
            CHECKF(((const uint8_t *)t->data)[0] == (uint8_t)(begins[i] * 7 + 1),
                   "%s: data content", sp->name);
    }
    const st_tensor *sc = st_find(s, "scalar.i64");
    CHECK(sc && sc->n_dims == 0 && sc->nbytes == 8);
    const st_tensor *em = st_find(s, "empty.f16");
    CHECK(em && em->nbytes == 0);
    CHECK(st_find(s, "absent") == NULL);
    CHECK(st_find(s, "") == NULL);
    CHECK(st_find(s, "__metadata__") == NULL);
    CHECK(st_tensor_at(s, (size_t)N_ALL_TYPES) == NULL);
    for (size_t i = 1; i < st_n_tensors(s); i++)
        CHECK(strcmp(st_tensor_at(s, i - 1)->name, st_tensor_at(s, i)->name) < 0);
    st_close(s);
    free(img);

    /* Nothing but a header, and the smallest header. */
    img = image_of("{}", 0, &size);
    st = st_parse(img, size, FNAME, &s, &err);
    CHECKF(st == LILAC_OK && st_n_tensors(s) == 0, "empty header: %s", err.msg);
    st_close(s);
    free(img);

    /* A zero-size tensor anywhere, even inside another's bytes, holds no
     * bytes and overlaps nothing; gaps between tensors are allowed. An
     * unpadded header leaves the data unaligned, which is legal. */
    const char *j = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[2,2]},"
                    "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]},"
                    "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9,9]}}";
    size_t jl = strlen(j);
    size = 8 + jl + 9;
    img = malloc(size);
    for (int i = 0; i < 8; i++)
        img[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(img + 8, j, jl);
    memset(img + 8 + jl, 0xab, 9);
    st = st_parse(img, size, FNAME, &s, &err);
    CHECKF(st == LILAC_OK, "zero-size/gaps/unaligned: %s", err.msg);
    if (st == LILAC_OK) {
        CHECK(st_n_tensors(s) == 4);
        const st_tensor *e = st_find(s, "e");
        CHECK(e && e->nbytes == 0 && e->data == img + size); /* one past the end */
        const st_tensor *b = st_find(s, "b");
        CHECK(b && b->data == img + 8 + jl + 6 && b->nbytes == 2);
    }
    st_close(s);
    free(img);

    /* A name with unusual characters (UTF-8, escapes) is kept exactly. */
    img = image_of("{\"caf\\u00e9.w\\\"q\\\"\":{\"dtype\":\"U8\",\"shape\":[1],"
                   "\"data_offsets\":[0,1]}}",
                   1, &size);
    st = st_parse(img, size, NULL, &s, &err);
    CHECKF(st == LILAC_OK, "escaped name: %s", err.msg);
    CHECK(st == LILAC_OK && st_find(s, "caf\xc3\xa9.w\"q\"") != NULL);
    CHECK(st == LILAC_OK && strcmp(st_file_path(s, 0), "<memory>") == 0);
    st_close(s);
    free(img);
}

/* ---- errors ------------------------------------------------------------- */

/* Parse img and check the status and that the message is one line naming
 * the file and holding the key phrase. */
static void expect_fail_img(int line, const uint8_t *img, size_t size, lilac_status want,
                            const char *phrase)
{
    st_set *s = (st_set *)(uintptr_t)1;
    lilac_error err = {0};
    lilac_status st = st_parse(img, size, FNAME, &s, &err);
    CHECKF(st == want, "line %d: status %s, want %s (%s)", line, status_str(st),
           status_str(want), err.msg);
    CHECKF(s == NULL, "line %d: *out not cleared", line);
    CHECKF(err.status == st, "line %d: err.status", line);
    CHECKF(strncmp(err.msg, FNAME ": ", strlen(FNAME) + 2) == 0,
           "line %d: message does not start with the file: %s", line, err.msg);
    CHECKF(strstr(err.msg, phrase) != NULL, "line %d: message lacks '%s': %s", line, phrase,
           err.msg);
    CHECKF(strchr(err.msg, '\n') == NULL, "line %d: message spans lines: %s", line, err.msg);
    if (st == LILAC_OK)
        st_close(s);
}

static void expect_fail_json(int line, const char *json, size_t data_len, lilac_status want,
                             const char *phrase)
{
    size_t size;
    uint8_t *img = image_of(json, data_len, &size);
    expect_fail_img(line, img, size, want, phrase);
    free(img);
}

#define FAILS(json, data_len, phrase) \
    expect_fail_json(__LINE__, json, data_len, LILAC_E_FORMAT, phrase)

/* One tensor entry "t" with the given fields. */
#define T1(fields) "{\"t\": {" fields "}}"

static void test_errors(void)
{
    uint8_t small[16] = {0};
    size_t size;

    /* file too short for the length */
    expect_fail_img(__LINE__, small, 0, LILAC_E_FORMAT, "0 bytes, too short");
    expect_fail_img(__LINE__, small, 7, LILAC_E_FORMAT, "7 bytes, too short");

    /* header length past the file, and absurd */
    uint8_t *img = image_of("{}", 0, &size);
    img[0] = 100;
    expect_fail_img(__LINE__, img, size, LILAC_E_FORMAT,
                    "header length 100 runs past the end of the file (16 bytes)");
    memset(img, 0xff, 8);
    expect_fail_img(__LINE__, img, size, LILAC_E_FORMAT, "header length 18446744073709551615 is absurd");
    memset(img, 0, 8);
    img[3] = 0x10; /* 256 MiB */
    expect_fail_img(__LINE__, img, size, LILAC_E_FORMAT, "is absurd");
    free(img);
    /* an empty header is not JSON */
    expect_fail_img(__LINE__, small, 8, LILAC_E_FORMAT, "header is not valid JSON");

    /* bad JSON reports jansson's text and position */
    FAILS("{\"t\": {\"dtype\": \"F32\",,}}", 0, "header is not valid JSON");
    FAILS("{\"t\": {\"dtype\": \"F32\",,}}", 0, "near ',' (line 1, column 23, byte 23 of the header)");
    FAILS("{\"t\": 1} x", 0, "end of file expected");
    FAILS("{\"a\": {}, \"a\": {}}", 0, "duplicate object key");
    FAILS("{\"ab\\u0000c\": {}}", 0, "NUL byte in object key");
    FAILS("{\"t\": \"\xff\xfe\"}", 0, "header is not valid JSON"); /* bad UTF-8 */
    FAILS("[1, 2]", 0, "header is not a JSON object");

    /* metadata */
    FAILS("{\"__metadata__\": [1]}", 0, "__metadata__ is not an object");
    FAILS("{\"__metadata__\": {\"format\": 1}}", 0, "__metadata__ value of 'format' is not a string");

    /* names */
    FAILS("{\"\": {\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
          "a tensor name is empty");

    /* entries and their fields */
    FAILS("{\"t\": 5}", 0, "tensor 't': entry is not an object");
    FAILS("{\"t\": [1]}", 0, "tensor 't': entry is not an object");
    FAILS(T1("\"shape\":[1],\"data_offsets\":[0,1]"), 1, "tensor 't': missing dtype");
    FAILS(T1("\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]"), 1, "dtype is not a string");
    FAILS(T1("\"dtype\":\"U8\\u0000\",\"shape\":[1],\"data_offsets\":[0,1]"), 1,
          "dtype is not a string");
    expect_fail_json(__LINE__, T1("\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]"), 1,
                     LILAC_E_UNSUPPORTED, "tensor 't': dtype 'F4' is not supported");
    expect_fail_json(__LINE__, T1("\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4,
                     LILAC_E_UNSUPPORTED, "dtype 'f32' is not supported");
    FAILS(T1("\"dtype\":\"U8\",\"data_offsets\":[0,1]"), 1, "tensor 't': missing shape");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]"), 1, "shape is not an array");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1,-2],\"data_offsets\":[0,1]"), 1,
          "shape dim 1 is negative (-2)");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]"), 1,
          "shape dim 0 is not an integer");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]"), 1,
          "shape dim 0 is not an integer");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[null],\"data_offsets\":[0,1]"), 1,
          "shape dim 0 is not an integer");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 1,
          "shape has 9 dims, more than 8");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,1]"), 1,
          "header is not valid JSON"); /* too big for jansson's integers */
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1]"), 1, "tensor 't': missing data_offsets");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{}"), 1,
          "data_offsets is not an array of two non-negative integers");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]"), 1,
          "data_offsets is not an array of two");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]"), 1,
          "data_offsets is not an array of two");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]"), 1,
          "data_offsets is not an array of two");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.5]"), 1,
          "data_offsets is not an array of two");

    /* offsets against the data section and the shape */
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,2]"), 8,
          "data_offsets [3, 2] begin after end");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]"), 8,
          "data_offsets [6, 10] end past the data section (8 bytes)");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,9223372036854775807]"), 8,
          "end past the data section");
    FAILS(T1("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]"), 8,
          "shape [4294967296, 4294967296] of F32 has too many elements");
    FAILS(T1("\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]"), 8,
          "has too many elements"); /* elements fit, bytes do not */
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[2,3],\"data_offsets\":[0,5]"), 8,
          "data_offsets [0, 5] hold 5 bytes but shape [2, 3] of U8 needs 6");
    FAILS(T1("\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,4]"), 8,
          "data_offsets [0, 4] hold 4 bytes but shape [] of I64 needs 8");
    FAILS(T1("\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,1]"), 8,
          "hold 1 bytes but shape [0] of U8 needs 0");

    /* the example from the brief, to the letter */
    {
        const char *j = "{\"model.embed_tokens.weight\": {\"dtype\": \"BF16\", "
                        "\"shape\": [2048, 256], \"data_offsets\": [0, 999]}}";
        uint8_t *im = image_of(j, 999, &size);
        st_set *s = NULL;
        lilac_error err = {0};
        CHECK(st_parse(im, size, FNAME, &s, &err) == LILAC_E_FORMAT);
        CHECKF(strcmp(err.msg, FNAME ": tensor 'model.embed_tokens.weight': data_offsets "
                               "[0, 999] hold 999 bytes but shape [2048, 256] of BF16 needs "
                               "1048576") == 0,
               "message: %s", err.msg);
        free(im);
    }

    /* overlaps, whatever the order in the header */
    FAILS("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[3,7]}}",
          8, "tensors 'a' [0, 4] and 'b' [3, 7] overlap");
    FAILS("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
          "\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
          "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[7,8]}}",
          8, "tensors 'a' [0, 8] and 'b' [4, 6] overlap");
    FAILS("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
          8, "overlap");
    /* one contained in a long earlier one, with a short one between */
    FAILS("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
          8, "overlap");

    /* control characters in a name stay out of the one-line message */
    FAILS("{\"a\\nb\": 5}", 0, "tensor 'a?b': entry is not an object");
}

/* Every proper prefix of a valid image must fail cleanly. Each prefix is
 * copied to a buffer of exactly its size so ASan sees any overread. */
static void test_truncation(void)
{
    size_t size;
    uint8_t *img = build(all_types, N_ALL_TYPES, "{\"format\": \"pt\"}", &size, NULL, NULL);
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, img, n);
        st_set *s = NULL;
        lilac_error err = {0};
        lilac_status st = st_parse(cut, n, FNAME, &s, &err);
        if (st == LILAC_OK || s != NULL || strncmp(err.msg, FNAME ": ", strlen(FNAME) + 2)) {
            if (bad++ < 5)
                CHECKF(0, "prefix of %zu/%zu bytes: status %d msg %s", n, size, st, err.msg);
            st_close(s);
        }
        free(cut);
    }
    CHECKF(bad == 0, "%d prefixes misbehaved", bad);
    free(img);
}

/* Many tensors: lookups stay fast (bsearch, not a scan). */
static void test_many(void)
{
    enum { N = 30000 };
    spec *sp = calloc(N, sizeof *sp);
    char(*names)[64] = calloc(N, sizeof *names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.experts.%d.%s_proj.weight",
                 i / 768, i / 3 % 256, (const char *[]){"gate", "up", "down"}[i % 3]);
        sp[i] = (spec){names[i], "BF16", 2, 2, {2, 3}, LILAC_BF16};
    }
    size_t size, ds;
    uint64_t *begins = calloc(N, sizeof *begins);
    uint8_t *img = build(sp, N, NULL, &size, begins, &ds);
    st_set *s = NULL;
    lilac_error err = {0};
    lilac_status st = st_parse(img, size, FNAME, &s, &err);
    CHECKF(st == LILAC_OK, "30k tensors: %s", err.msg);
    if (st == LILAC_OK) {
        CHECK(st_n_tensors(s) == N);
        clock_t c0 = clock();
        int misses = 0;
        for (int r = 0; r < 10; r++)
            for (int i = 0; i < N; i++) {
                const st_tensor *t = st_find(s, names[i]);
                if (!t || t->data != img + ds + begins[i])
                    misses++;
            }
        double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
        CHECKF(misses == 0, "%d lookups failed", misses);
        CHECKF(secs < 5.0, "300k lookups took %.2f s", secs);
        CHECK(st_find(s, "model.layers.0.mlp.experts.0.gate_proj.weigh") == NULL);
    }
    st_close(s);
    free(img);
    free(begins);
    free(names);
    free(sp);
}

/* ---- directories -------------------------------------------------------- */

static char tmpdir[512];
static char *created[64]; /* paths to remove at the end, in creation order */
static int n_created;

static const char *track(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *track(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n_created < 64)
        created[n_created++] = strdup(buf);
    return created[n_created - 1];
}

static const char *make_dir(const char *sub)
{
    const char *p = track("%s/%s", tmpdir, sub);
    CHECKF(mkdir(p, 0700) == 0, "mkdir %s", p);
    return p;
}

static void put_file(const char *dir, const char *name, const void *data, size_t size)
{
    const char *p = track("%s/%s", dir, name);
    CHECKF(tu_write_file(p, data, size) == 0, "write %s", p);
}

static void put_text(const char *dir, const char *name, const char *text)
{
    put_file(dir, name, text, strlen(text));
}

static void put_shard(const char *dir, const char *name, const spec *sp, int n)
{
    size_t size;
    uint8_t *img = build(sp, n, "{\"format\": \"pt\"}", &size, NULL, NULL);
    put_file(dir, name, img, size);
    free(img);
}

static const spec shard1[] = {
    {"embed.weight", "BF16", 2, 2, {8, 4}, LILAC_BF16},
    {"layers.0.w", "F32", 4, 1, {4}, LILAC_F32},
};
static const spec shard2[] = {
    {"layers.1.w", "F32", 4, 2, {2, 2}, LILAC_F32},
    {"norm.weight", "BF16", 2, 1, {4}, LILAC_BF16},
    {"extra.unlisted", "U8", 1, 1, {3}, LILAC_U8},
};
#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"
#define INDEX_OK                                                                             \
    "{\"metadata\": {\"total_size\": 100}, \"weight_map\": {"                                \
    "\"embed.weight\": \"" S1 "\", \"layers.0.w\": \"" S1 "\", "                            \
    "\"layers.1.w\": \"" S2 "\", \"norm.weight\": \"" S2 "\"}}"

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void expect_open_fail(int line, const char *path, lilac_status want, const char *p1,
                             const char *p2)
{
    st_set *s = (st_set *)(uintptr_t)1;
    lilac_error err = {0};
    lilac_status st = st_open(path, &s, &err);
    CHECKF(st == want, "line %d: status %s, want %s (%s)", line, status_str(st),
           status_str(want), err.msg);
    CHECKF(s == NULL, "line %d: *out not cleared", line);
    CHECKF(strstr(err.msg, p1) != NULL, "line %d: message lacks '%s': %s", line, p1, err.msg);
    if (p2)
        CHECKF(strstr(err.msg, p2) != NULL, "line %d: message lacks '%s': %s", line, p2,
               err.msg);
    CHECKF(strchr(err.msg, '\n') == NULL, "line %d: message spans lines", line);
    if (st == LILAC_OK)
        st_close(s);
}

static void test_dirs(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/lilac-st-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmpdir)) {
        CHECKF(0, "mkdtemp %s failed", tmpdir);
        return;
    }

    /* a good sharded checkpoint */
    const char *ok = make_dir("ok");
    put_shard(ok, S1, shard1, 2);
    put_shard(ok, S2, shard2, 3);
    put_text(ok, "model.safetensors.index.json", INDEX_OK);
    put_text(ok, "config.json", "{}");
    char slash[1024];
    snprintf(slash, sizeof slash, "%s/", ok);
    for (int pass = 0; pass < 2; pass++) {
        st_set *s = NULL;
        lilac_error err = {0};
        lilac_status st = st_open(pass ? slash : ok, &s, &err);
        CHECKF(st == LILAC_OK, "sharded dir: %s", err.msg);
        if (st != LILAC_OK)
            continue;
        CHECK(st_n_tensors(s) == 5); /* the unlisted one is included */
        CHECK(st_n_files(s) == 2);
        const struct {
            const char *name, *file;
            int64_t d0;
        } want[] = {{"embed.weight", S1, 8}, {"layers.0.w", S1, 4}, {"layers.1.w", S2, 2},
                    {"norm.weight", S2, 4}, {"extra.unlisted", S2, 3}};
        for (int i = 0; i < 5; i++) {
            const st_tensor *t = st_find(s, want[i].name);
            CHECKF(t != NULL, "st_find(%s)", want[i].name);
            if (!t)
                continue;
            const char *fp = st_file_path(s, t->file);
            CHECKF(fp && strcmp(base_name(fp), want[i].file) == 0, "%s in %s", want[i].name,
                   fp);
            CHECK(t->shape[0] == want[i].d0);
            CHECK(t->data != NULL);
        }
        CHECK(st_metadata(s, 0, "format") != NULL);
        char expect[1024];
        snprintf(expect, sizeof expect, "%s/%s", ok, S2);
        CHECKF(strcmp(st_file_path(s, 1), expect) == 0, "path %s", st_file_path(s, 1));
        st_close(s);
    }

    /* one shard opened as a file */
    {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", ok, S2);
        st_set *s = NULL;
        lilac_error err = {0};
        CHECKF(st_open(p, &s, &err) == LILAC_OK, "shard as file: %s", err.msg);
        CHECK(st_n_tensors(s) == 3 && st_find(s, "norm.weight"));
        st_close(s);
    }

    /* a shard the index names is missing */
    const char *d = make_dir("missing");
    put_shard(d, S1, shard1, 2);
    put_text(d, "model.safetensors.index.json", INDEX_OK);
    expect_open_fail(__LINE__, d, LILAC_E_IO, S2, "cannot open");

    /* a listed tensor absent from its shard */
    d = make_dir("absent");
    put_shard(d, S1, shard1, 2);
    put_shard(d, S2, shard2, 3);
    put_text(d, "model.safetensors.index.json",
             "{\"weight_map\": {\"embed.weight\": \"" S1 "\", \"ghost.weight\": \"" S2 "\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "tensor 'ghost.weight' listed in", S2 ": ");

    /* a listed tensor found in another shard */
    d = make_dir("wrongshard");
    put_shard(d, S1, shard1, 2);
    put_shard(d, S2, shard2, 3);
    put_text(d, "model.safetensors.index.json",
             "{\"weight_map\": {\"embed.weight\": \"" S2 "\", \"layers.0.w\": \"" S1 "\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT,
                     "tensor 'embed.weight' is listed in shard " S2 " but is in shard " S1,
                     "model.safetensors.index.json: ");

    /* the same tensor in two shards */
    d = make_dir("dup");
    put_shard(d, S1, shard1, 2);
    put_shard(d, S2, shard1, 1);
    put_text(d, "model.safetensors.index.json",
             "{\"weight_map\": {\"embed.weight\": \"" S1 "\", \"layers.0.w\": \"" S2 "\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "tensor 'embed.weight' is in both", S2);

    /* shard names that leave the directory */
    d = make_dir("traversal");
    put_shard(d, S1, shard1, 2);
    put_text(d, "model.safetensors.index.json",
             "{\"weight_map\": {\"embed.weight\": \"../ok/" S1 "\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "shard '../ok/" S1 "' is not a plain file name",
                     "weight_map entry 'embed.weight'");
    d = make_dir("traversal2");
    put_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"..\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "'..' is not a plain file name", NULL);
    d = make_dir("traversal3");
    put_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"/etc/passwd\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "is not a plain file name", NULL);
    d = make_dir("traversal4");
    put_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "is not a plain file name", NULL);

    /* broken index files */
    d = make_dir("badindex");
    put_text(d, "model.safetensors.index.json", "{\"weight_map\": ");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "model.safetensors.index.json: not valid JSON",
                     "line 1");
    d = make_dir("nomap");
    put_text(d, "model.safetensors.index.json", "{\"metadata\": {}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "no \"weight_map\" object", NULL);
    d = make_dir("emptymap");
    put_text(d, "model.safetensors.index.json", "{\"weight_map\": {}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "weight_map is empty", NULL);
    d = make_dir("intshard");
    put_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": 3}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, "weight_map entry 'a': shard name is not a string",
                     NULL);

    /* a shard with a bad header: the message names that shard */
    d = make_dir("badshard");
    put_shard(d, S1, shard1, 2);
    put_text(d, S2, "garbage");
    put_text(d, "model.safetensors.index.json",
             "{\"weight_map\": {\"embed.weight\": \"" S1 "\", \"x\": \"" S2 "\"}}");
    expect_open_fail(__LINE__, d, LILAC_E_FORMAT, S2 ": file is 7 bytes", NULL);

    /* only model.safetensors */
    d = make_dir("single");
    put_shard(d, "model.safetensors", shard2, 3);
    {
        st_set *s = NULL;
        lilac_error err = {0};
        CHECKF(st_open(d, &s, &err) == LILAC_OK, "single: %s", err.msg);
        CHECK(st_n_tensors(s) == 3 && st_n_files(s) == 1);
        const st_tensor *t = st_find(s, "layers.1.w");
        CHECK(t && strcmp(base_name(st_file_path(s, t->file)), "model.safetensors") == 0);
        st_close(s);
    }

    /* neither, and a path that does not exist */
    d = make_dir("empty");
    put_text(d, "model-00001-of-00002.safetensors", "");
    expect_open_fail(__LINE__, d, LILAC_E_IO,
                     "no model.safetensors or model.safetensors.index.json", d);
    {
        char p[1024];
        snprintf(p, sizeof p, "%s/nonexistent", tmpdir);
        expect_open_fail(__LINE__, p, LILAC_E_IO, "nonexistent: cannot open", NULL);
        snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
        expect_open_fail(__LINE__, p, LILAC_E_FORMAT, "file is 0 bytes", NULL);
    }

    /* remove files before their directories: reverse creation order */
    for (int i = n_created - 1; i >= 0; i--) {
        if (remove(created[i]) != 0)
            fprintf(stderr, "cannot remove %s\n", created[i]);
        free(created[i]);
    }
    rmdir(tmpdir);
}

/* ---- the fixture checkpoints ------------------------------------------- */

static void check_shape(const st_set *s, const char *name, int dtype, int nd, const int64_t *shape)
{
    const st_tensor *t = st_find(s, name);
    CHECKF(t != NULL, "fixture: %s not found", name);
    if (!t)
        return;
    CHECKF(t->dtype == dtype, "%s: dtype %d", name, t->dtype);
    CHECKF(t->n_dims == nd, "%s: n_dims %d", name, t->n_dims);
    for (int d = 0; d < nd && d < t->n_dims; d++)
        CHECKF(t->shape[d] == shape[d], "%s: shape[%d] = %lld", name, d,
               (long long)t->shape[d]);
}

static void test_fixture_model(const char *fix, const char *model)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s/hf", fix, model);
    st_set *s = NULL;
    lilac_error err = {0};
    lilac_status st = st_open(dir, &s, &err);
    CHECKF(st == LILAC_OK, "%s: %s", model, err.msg);
    if (st != LILAC_OK)
        return;

    check_shape(s, "model.embed_tokens.weight", LILAC_BF16, 2, (const int64_t[]){2048, 256});
    if (strcmp(model, "tiny-qwen35moe") == 0) {
        check_shape(s, "model.layers.0.linear_attn.conv1d.weight", LILAC_BF16, 3,
                    (const int64_t[]){1024, 1, 4});
        check_shape(s, "model.layers.3.self_attn.q_proj.weight", LILAC_BF16, 2,
                    (const int64_t[]){1024, 256});
    }

    /* as many tensors as the index lists */
    json_error_t je;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *idx = json_load_file(path, 0, &je);
    CHECKF(idx != NULL, "%s: %s", path, je.text);
    if (idx) {
        size_t n = json_object_size(json_object_get(idx, "weight_map"));
        CHECKF(n > 0 && st_n_tensors(s) == n, "%s: %zu tensors, index lists %zu", model,
               st_n_tensors(s), n);
        json_decref(idx);
    }

    /* every tensor of the golden list, with its shape, dtype and file */
    snprintf(path, sizeof path, "%s/%s/golden/meta.json", fix, model);
    json_t *meta = json_load_file(path, 0, &je);
    CHECKF(meta != NULL, "%s: %s", path, je.text);
    const json_t *tens = meta ? json_object_get(meta, "tensors") : NULL;
    CHECKF(json_is_object(tens), "%s: no tensors object", path);
    size_t checked = 0;
    const char *name;
    json_t *g;
    json_object_foreach((json_t *)tens, name, g) {
        const st_tensor *t = st_find(s, name);
        CHECKF(t != NULL, "%s: golden tensor %s not found", model, name);
        if (!t)
            continue;
        const char *dt = json_string_value(json_object_get(g, "dtype"));
        const lilac_dtype_info *di = lilac_dtype_get(t->dtype);
        CHECKF(dt && di && strcmp(dt, di->name) == 0, "%s: dtype %s vs %s", name,
               di ? di->name : "?", dt ? dt : "?");
        const json_t *sh = json_object_get(g, "shape");
        CHECKF(json_array_size(sh) == (size_t)t->n_dims, "%s: n_dims", name);
        uint64_t elems = 1;
        for (int d = 0; d < t->n_dims; d++) {
            CHECKF(json_integer_value(json_array_get(sh, (size_t)d)) == t->shape[d],
                   "%s: shape[%d]", name, d);
            elems *= (uint64_t)t->shape[d];
        }
        CHECKF(di && t->nbytes == elems * di->size, "%s: nbytes", name);
        const char *gf = json_string_value(json_object_get(g, "file"));
        const char *fp = st_file_path(s, t->file);
        CHECKF(gf && fp && strcmp(base_name(fp), gf) == 0, "%s: file %s vs %s", name, fp,
               gf ? gf : "?");
        checked++;
    }
    CHECKF(checked > 0 && checked == st_n_tensors(s), "%s: %zu golden tensors, %zu read",
           model, checked, st_n_tensors(s));
    printf("%s: %zu tensors in %d files match golden/meta.json\n", model, st_n_tensors(s),
           st_n_files(s));
    json_decref(meta);
    st_close(s);
}

int main(void)
{
    test_valid();
    test_errors();
    test_truncation();
    test_many();
    test_dirs();

    const char *fix = tu_fixtures();
    if (!fix) {
        printf("skipping fixture checks: fixtures not found\n");
    } else {
        test_fixture_model(fix, "tiny-qwen35moe");
        test_fixture_model(fix, "tiny-qwen3moe");
    }
    TEST_END();
}
