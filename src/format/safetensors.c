/* safetensors: reader for Hugging Face safetensors files and sharded
 * checkpoint directories. Every header field is validated before use; the
 * tensors point into the read-only maps (or the caller's image). */
#ifndef _POSIX_C_SOURCE /* strdup, mkdtemp; the build may set it already */
#define _POSIX_C_SOURCE 200809L
#endif
#include "format/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/dtype.h"
#include "util/err.h"
#include "util/mapfile.h"

/* A header is a few KiB to a few MiB even for 30k-tensor checkpoints; a
 * larger length is corruption, and would make jansson allocate a lot. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

typedef struct st_meta {
    char *key, *value; /* owned */
} st_meta;

typedef struct st_file {
    char *path;        /* owned: the file's path, or the image's name */
    lilac_mapfile map; /* zeroed for images given to st_parse */
    st_meta *meta;
    size_t n_meta;
} st_file;

struct st_set {
    st_file *files;
    int n_files;
    st_tensor *tensors; /* sorted by name once built */
    size_t n_tensors, cap_tensors;
};

/* A tensor's byte range inside its file's data section, for the overlap check. */
typedef struct st_span {
    uint64_t begin, end;
    size_t idx; /* into s->tensors */
} st_span;

static const struct {
    const char *name;
    int dtype;
} st_dtypes[] = {
    {"F64", LILAC_F64},   {"F32", LILAC_F32},         {"F16", LILAC_F16},
    {"BF16", LILAC_BF16}, {"I64", LILAC_I64},         {"I32", LILAC_I32},
    {"I16", LILAC_I16},   {"I8", LILAC_I8},           {"U64", LILAC_U64},
    {"U32", LILAC_U32},   {"U16", LILAC_U16},         {"U8", LILAC_U8},
    {"BOOL", LILAC_BOOL}, {"F8_E4M3", LILAC_F8_E4M3}, {"F8_E5M2", LILAC_F8_E5M2},
};

/* ---- small helpers ------------------------------------------------------ */

/* Names come from the file: cap their length and blank control characters
 * so every message stays one readable line. */
static const char *show(char buf[static 208], const char *s)
{
    size_t i = 0;
    for (; s[i] && i < 200; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (s[i]) {
        memcpy(buf + i, "...", 4);
        return buf;
    }
    buf[i] = '\0';
    return buf;
}

static void format_shape(char *buf, size_t size, const st_tensor *t)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->n_dims && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "",
                              (long long)t->shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* A JSON string without embedded NUL bytes (the header is parsed with
 * JSON_ALLOW_NUL so that NULs in names get jansson's clearer message). */
static const char *plain_string(const json_t *v)
{
    if (!json_is_string(v))
        return NULL;
    const char *s = json_string_value(v);
    return strlen(s) == json_string_length(v) ? s : NULL;
}

static char *join_path(const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    size_t nl = strlen(name);
    char *p = malloc(dl + 1 + nl + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, name, nl + 1);
    return p;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_span(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* ---- the set ------------------------------------------------------------ */

static st_set *set_new(void)
{
    return calloc(1, sizeof(st_set));
}

/* Add a file entry (not yet mapped); returns its index or -1. */
static int set_add_file(st_set *s, const char *path)
{
    st_file *f = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *f);
    if (!f)
        return -1;
    s->files = f;
    memset(&f[s->n_files], 0, sizeof *f);
    f[s->n_files].path = strdup(path);
    if (!f[s->n_files].path)
        return -1;
    return s->n_files++;
}

static int set_reserve(st_set *s, size_t extra)
{
    if (s->cap_tensors - s->n_tensors >= extra)
        return 0;
    size_t cap = s->cap_tensors ? s->cap_tensors : 64;
    while (cap - s->n_tensors < extra) {
        if (cap > SIZE_MAX / 2 / sizeof(st_tensor))
            return -1;
        cap *= 2;
    }
    st_tensor *t = realloc(s->tensors, cap * sizeof *t);
    if (!t)
        return -1;
    s->tensors = t;
    s->cap_tensors = cap;
    return 0;
}

void st_close(st_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_tensors; i++)
        free(s->tensors[i].name);
    free(s->tensors);
    for (int i = 0; i < s->n_files; i++) {
        st_file *f = &s->files[i];
        for (size_t j = 0; j < f->n_meta; j++) {
            free(f->meta[j].key);
            free(f->meta[j].value);
        }
        free(f->meta);
        lilac_mapfile_close(&f->map);
        free(f->path);
    }
    free(s->files);
    free(s);
}

/* ---- one file's header -------------------------------------------------- */

static lilac_status parse_metadata(st_file *f, const json_t *obj, lilac_error *err)
{
    char nb[208];
    if (!json_is_object(obj))
        return lilac_fail(err, LILAC_E_FORMAT, "%s: __metadata__ is not an object", f->path);
    size_t n = json_object_size(obj);
    if (n == 0)
        return LILAC_OK;
    f->meta = calloc(n, sizeof *f->meta);
    if (!f->meta)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", f->path);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        const char *val = plain_string(v);
        if (!val)
            return lilac_fail(err, LILAC_E_FORMAT,
                              "%s: __metadata__ value of '%s' is not a string", f->path,
                              show(nb, key));
        st_meta *m = &f->meta[f->n_meta];
        m->key = strdup(key);
        m->value = strdup(val);
        if (!m->key || !m->value) {
            free(m->key);
            free(m->value);
            m->key = m->value = NULL;
            return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", f->path);
        }
        f->n_meta++;
    }
    return LILAC_OK;
}

/* Read a non-negative JSON integer; -1 when v is not one. */
static long long json_uint(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (long long)x;
}

/* Validate one tensor entry and fill t (name excepted) and its span. */
static lilac_status parse_entry(const char *fname, const char *name, const json_t *e,
                                const uint8_t *data, uint64_t data_size, st_tensor *t,
                                st_span *span, lilac_error *err)
{
    char nb[208];
    const char *tn = show(nb, name);
    if (!json_is_object(e))
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tensor '%s': entry is not an object",
                          fname, tn);

    /* dtype */
    const json_t *jd = json_object_get(e, "dtype");
    if (!jd)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tensor '%s': missing dtype", fname, tn);
    const char *ds = plain_string(jd);
    if (!ds)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tensor '%s': dtype is not a string",
                          fname, tn);
    t->dtype = -1;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(ds, st_dtypes[i].name) == 0)
            t->dtype = st_dtypes[i].dtype;
    if (t->dtype < 0) {
        char db[208];
        return lilac_fail(err, LILAC_E_UNSUPPORTED,
                          "%s: tensor '%s': dtype '%s' is not supported", fname, tn,
                          show(db, ds));
    }
    const lilac_dtype_info *di = lilac_dtype_get(t->dtype);
    if (!di || di->blck != 1)
        return lilac_fail(err, LILAC_E_INTERNAL, "%s: tensor '%s': no size for dtype %s",
                          fname, tn, ds);

    /* shape */
    const json_t *js = json_object_get(e, "shape");
    if (!js)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tensor '%s': missing shape", fname, tn);
    if (!json_is_array(js))
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tensor '%s': shape is not an array",
                          fname, tn);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: tensor '%s': shape has %zu dims, more than %d", fname, tn, nd,
                          ST_MAX_DIMS);
    t->n_dims = (int)nd;
    for (size_t d = 0; d < nd; d++) {
        const json_t *jv = json_array_get(js, d);
        long long v = json_uint(jv);
        if (v < 0) {
            if (json_is_integer(jv))
                return lilac_fail(err, LILAC_E_FORMAT,
                                  "%s: tensor '%s': shape dim %zu is negative (%lld)", fname,
                                  tn, d, (long long)json_integer_value(jv));
            return lilac_fail(err, LILAC_E_FORMAT,
                              "%s: tensor '%s': shape dim %zu is not an integer", fname, tn,
                              d);
        }
        t->shape[d] = (int64_t)v;
    }
    for (size_t d = nd; d < ST_MAX_DIMS; d++)
        t->shape[d] = 0;

    /* data_offsets */
    const json_t *jo = json_object_get(e, "data_offsets");
    if (!jo)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: tensor '%s': missing data_offsets",
                          fname, tn);
    long long b = -1, en = -1;
    if (json_is_array(jo) && json_array_size(jo) == 2) {
        b = json_uint(json_array_get(jo, 0));
        en = json_uint(json_array_get(jo, 1));
    }
    if (b < 0 || en < 0)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: tensor '%s': data_offsets is not an array of two "
                          "non-negative integers",
                          fname, tn);
    uint64_t begin = (uint64_t)b, end = (uint64_t)en;
    if (begin > end)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] begin after end", fname,
                          tn, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] end past the data "
                          "section (%llu bytes)",
                          fname, tn, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_size);

    /* Elements × element size, refusing anything past INT64_MAX; a zero dim
     * makes the product 0 however large the others are. */
    char sb[256];
    uint64_t count = 1;
    int overflow = 0;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t v = (uint64_t)t->shape[d];
        if (v == 0) {
            count = 0;
            overflow = 0;
            break;
        }
        if (count > (uint64_t)INT64_MAX / v)
            overflow = 1;
        else
            count *= v;
    }
    if (!overflow && count > (uint64_t)INT64_MAX / di->size)
        overflow = 1;
    if (overflow) {
        format_shape(sb, sizeof sb, t);
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: tensor '%s': shape %s of %s has too many elements", fname, tn,
                          sb, ds);
    }
    uint64_t need = count * di->size;
    if (end - begin != need) {
        format_shape(sb, sizeof sb, t);
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but "
                          "shape %s of %s needs %llu",
                          fname, tn, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)(end - begin), sb, ds,
                          (unsigned long long)need);
    }
    t->data = data + begin;
    t->nbytes = (size_t)need;
    span->begin = begin;
    span->end = end;
    return LILAC_OK;
}

/* Reject tensors sharing bytes. Sorted by begin, a tensor overlaps an
 * earlier one exactly when it starts before the furthest end seen so far. */
static lilac_status check_overlap(const st_set *s, const char *fname, st_span *sp, size_t n,
                                  lilac_error *err)
{
    qsort(sp, n, sizeof *sp, cmp_span);
    size_t far = SIZE_MAX; /* index in sp of the span reaching furthest */
    for (size_t i = 0; i < n; i++) {
        if (sp[i].begin == sp[i].end)
            continue; /* holds no bytes */
        if (far != SIZE_MAX && sp[i].begin < sp[far].end) {
            char a[208], b[208];
            return lilac_fail(err, LILAC_E_FORMAT,
                              "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
                              fname, show(a, s->tensors[sp[far].idx].name),
                              (unsigned long long)sp[far].begin,
                              (unsigned long long)sp[far].end,
                              show(b, s->tensors[sp[i].idx].name),
                              (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end);
        }
        if (far == SIZE_MAX || sp[i].end > sp[far].end)
            far = i;
    }
    return LILAC_OK;
}

/* Parse the image of file `fi` and append its tensors to s. */
static lilac_status parse_image(st_set *s, int fi, const uint8_t *base, size_t size,
                                lilac_error *err)
{
    st_file *f = &s->files[fi];
    const char *fname = f->path;
    if (size < 8)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: file is %zu bytes, too short for the 8-byte header length",
                          fname, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | base[i];
    if (hlen > ST_MAX_HEADER)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: header length %llu is absurd (more than %llu bytes)", fname,
                          (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    if (hlen > size - 8)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: header length %llu runs past the end of the file (%zu bytes)",
                          fname, (unsigned long long)hlen, size);

    json_error_t je;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen,
                              JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: header is not valid JSON: %s (line %d, column %d, byte %d of "
                          "the header)",
                          fname, je.text, je.line, je.column, je.position);
    lilac_status st = LILAC_OK;
    st_span *spans = NULL;
    size_t n_spans = 0;
    if (!json_is_object(root)) {
        st = lilac_fail(err, LILAC_E_FORMAT, "%s: header is not a JSON object", fname);
        goto out;
    }
    size_t n_entries = json_object_size(root);
    spans = malloc((n_entries ? n_entries : 1) * sizeof *spans);
    if (!spans || set_reserve(s, n_entries) != 0) {
        st = lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", fname);
        goto out;
    }
    const uint8_t *data = base + 8 + hlen;
    uint64_t data_size = (uint64_t)size - 8 - hlen;

    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            st = parse_metadata(f, v, err);
            if (st)
                goto out;
            continue;
        }
        /* jansson itself refuses keys holding a NUL byte ("NUL byte in
         * object key not supported"), so only the empty name is left. */
        if (!key[0]) {
            st = lilac_fail(err, LILAC_E_FORMAT, "%s: a tensor name is empty", fname);
            goto out;
        }
        st_tensor *t = &s->tensors[s->n_tensors];
        memset(t, 0, sizeof *t);
        st = parse_entry(fname, key, v, data, data_size, t, &spans[n_spans], err);
        if (st)
            goto out;
        t->file = fi;
        t->name = strdup(key);
        if (!t->name) {
            st = lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", fname);
            goto out;
        }
        spans[n_spans++].idx = s->n_tensors++;
    }
    st = check_overlap(s, fname, spans, n_spans, err);
out:
    free(spans);
    json_decref(root);
    return st;
}

/* Sort by name for st_find; a name in two files is an error. */
static lilac_status set_finish(st_set *s, lilac_error *err)
{
    if (s->n_tensors > 1)
        qsort(s->tensors, s->n_tensors, sizeof *s->tensors, cmp_tensor_name);
    for (size_t i = 1; i < s->n_tensors; i++) {
        const st_tensor *a = &s->tensors[i - 1], *b = &s->tensors[i];
        if (strcmp(a->name, b->name) == 0) {
            char nb[208];
            return lilac_fail(err, LILAC_E_FORMAT, "tensor '%s' is in both %s and %s",
                              show(nb, a->name), s->files[a->file].path,
                              s->files[b->file].path);
        }
    }
    return LILAC_OK;
}

/* Map path as a new file of s and parse it. */
static lilac_status open_one(st_set *s, const char *path, lilac_error *err)
{
    int fi = set_add_file(s, path);
    if (fi < 0)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    lilac_status st = lilac_mapfile_open(&s->files[fi].map, path, err);
    if (st)
        return st;
    return parse_image(s, fi, s->files[fi].map.data, s->files[fi].map.size, err);
}

/* ---- sharded directories ------------------------------------------------ */

/* Shard names come from the index: only plain names inside the directory. */
static int plain_file_name(const char *n)
{
    return n[0] && !strchr(n, '/') && !strstr(n, "..");
}

static lilac_status open_index(st_set *s, const char *dir, const char *ipath,
                               lilac_error *err)
{
    lilac_mapfile im;
    lilac_status st = lilac_mapfile_open(&im, ipath, err);
    if (st)
        return st;
    json_error_t je;
    json_t *root = json_loadb((const char *)im.data, im.size,
                              JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    lilac_mapfile_close(&im);
    if (!root)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: not valid JSON: %s (line %d, column %d)", ipath, je.text,
                          je.line, je.column);

    const char **shards = NULL; /* distinct shard names, into root */
    size_t n_shards = 0;
    char nb[208], sb[208];
    const json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!wm || !json_is_object(wm)) {
        st = lilac_fail(err, LILAC_E_FORMAT, "%s: no \"weight_map\" object", ipath);
        goto out;
    }
    if (json_object_size(wm) == 0) {
        st = lilac_fail(err, LILAC_E_FORMAT, "%s: weight_map is empty", ipath);
        goto out;
    }
    shards = malloc(json_object_size(wm) * sizeof *shards);
    if (!shards) {
        st = lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", ipath);
        goto out;
    }

    /* Collect the distinct shards, in order of first mention. Entries come
     * grouped by shard, so checking the last one first is usually a hit. */
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
        const char *sh = plain_string(v);
        if (!sh) {
            st = lilac_fail(err, LILAC_E_FORMAT,
                            "%s: weight_map entry '%s': shard name is not a string", ipath,
                            show(nb, key));
            goto out;
        }
        if (!plain_file_name(sh)) {
            st = lilac_fail(err, LILAC_E_FORMAT,
                            "%s: weight_map entry '%s': shard '%s' is not a plain file name "
                            "in the directory",
                            ipath, show(nb, key), show(sb, sh));
            goto out;
        }
        size_t j = n_shards;
        while (j > 0 && strcmp(shards[j - 1], sh) != 0)
            j--;
        if (j == 0)
            shards[n_shards++] = sh;
    }

    for (size_t i = 0; i < n_shards; i++) {
        char *p = join_path(dir, shards[i]);
        if (!p) {
            st = lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", dir);
            goto out;
        }
        st = open_one(s, p, err);
        free(p);
        if (st)
            goto out;
    }
    st = set_finish(s, err);
    if (st)
        goto out;

    /* Every listed tensor must be in the shard the index names. Files were
     * added in the order of shards[], so file i is shards[i]. */
    json_object_foreach((json_t *)wm, key, v) {
        const char *sh = json_string_value(v);
        const st_tensor *t = st_find(s, key);
        if (!t) {
            size_t j = 0;
            while (strcmp(shards[j], sh) != 0)
                j++;
            st = lilac_fail(err, LILAC_E_FORMAT,
                            "%s: tensor '%s' listed in %s is not in this shard",
                            s->files[j].path, show(nb, key), ST_INDEX_NAME);
            goto out;
        }
        if (strcmp(shards[t->file], sh) != 0) {
            st = lilac_fail(err, LILAC_E_FORMAT,
                            "%s: tensor '%s' is listed in shard %s but is in shard %s", ipath,
                            show(nb, key), sh, shards[t->file]);
            goto out;
        }
    }
out:
    free(shards);
    json_decref(root);
    return st;
}

/* ---- public ------------------------------------------------------------- */

lilac_status st_parse(const uint8_t *base, size_t size, const char *name, st_set **out,
                      lilac_error *err)
{
    if (!out || (!base && size))
        return lilac_fail(err, LILAC_E_ARG, "st_parse: bad arguments");
    *out = NULL;
    if (!name)
        name = "<memory>";
    st_set *s = set_new();
    if (!s || set_add_file(s, name) < 0) {
        st_close(s);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", name);
    }
    lilac_status st = parse_image(s, 0, base, size, err);
    if (!st)
        st = set_finish(s, err);
    if (st) {
        st_close(s);
        return st;
    }
    *out = s;
    return LILAC_OK;
}

lilac_status st_open(const char *path, st_set **out, lilac_error *err)
{
    if (!out || !path)
        return lilac_fail(err, LILAC_E_ARG, "st_open: bad arguments");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot open: %s", path, strerror(errno));
    st_set *s = set_new();
    if (!s)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);

    lilac_status st;
    if (!S_ISDIR(sb.st_mode)) {
        st = open_one(s, path, err);
        if (!st)
            st = set_finish(s, err);
    } else {
        char *ipath = join_path(path, ST_INDEX_NAME);
        char *spath = join_path(path, ST_SINGLE_NAME);
        struct stat xb;
        if (!ipath || !spath)
            st = lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
        else if (stat(ipath, &xb) == 0)
            st = open_index(s, path, ipath, err);
        else if (stat(spath, &xb) == 0) {
            st = open_one(s, spath, err);
            if (!st)
                st = set_finish(s, err);
        } else
            st = lilac_fail(err, LILAC_E_IO, "%s: no %s or %s", path, ST_SINGLE_NAME,
                            ST_INDEX_NAME);
        free(ipath);
        free(spath);
    }
    if (st) {
        st_close(s);
        return st;
    }
    *out = s;
    return LILAC_OK;
}

size_t st_n_tensors(const st_set *s)
{
    return s ? s->n_tensors : 0;
}

const st_tensor *st_tensor_at(const st_set *s, size_t i)
{
    return s && i < s->n_tensors ? &s->tensors[i] : NULL;
}

const st_tensor *st_find(const st_set *s, const char *name)
{
    if (!s || !name || !s->n_tensors)
        return NULL;
    st_tensor key = {.name = (char *)name};
    return bsearch(&key, s->tensors, s->n_tensors, sizeof key, cmp_tensor_name);
}

const char *st_file_path(const st_set *s, int file)
{
    return s && file >= 0 && file < s->n_files ? s->files[file].path : NULL;
}

int st_n_files(const st_set *s)
{
    return s ? s->n_files : 0;
}

const char *st_metadata(const st_set *s, int file, const char *key)
{
    if (!s || !key || file < 0 || file >= s->n_files)
        return NULL;
    const st_file *f = &s->files[file];
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}
