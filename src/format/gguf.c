/* gguf: reader for GGUF v2/v3 files. The parser reads through a bounds-checked
 * cursor over the image; every count read from the file is bounded by the
 * bytes that remain before anything is allocated or looped over, so a hostile
 * file can only make it fail, never overread, overallocate or spin. */
#include "format/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "util/err.h"
#include "util/mapfile.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
/* Smallest encodings, used to bound counts by the bytes left:
 * a kv is a key length (8) + value type (4) + at least a 1-byte value,
 * a tensor info is name length (8) + n_dims (4) + one ne (8) + type (4) + offset (8). */
#define KV_MIN_BYTES 12
#define TENSOR_INFO_MIN_BYTES 32
/* gguf-split names its parts PREFIX-%05d-of-%05d.gguf. */
#define SPLIT_SUFFIX_LEN 20 /* strlen("-00001-of-00003.gguf") */
#define SPLIT_MAX_PARTS 99999

/* Open-addressing hash of names to array indices, for the kv and tensor lookups
 * and for catching duplicates. slots hold index + 1; 0 is empty. */
typedef struct name_index {
    size_t *slots;
    size_t cap; /* a power of two, or 0 */
} name_index;

struct gguf_file {
    uint32_t version;
    size_t alignment;
    gguf_kv *kv;
    size_t n_kv, cap_kv;
    gguf_tensor *t;
    size_t n_t, cap_t;
    name_index kv_ix, t_ix;
    int n_files;
    char **paths;        /* n_files owned paths (the name given to gguf_parse) */
    lilac_mapfile *maps; /* n_files maps; NULL when parsed from memory */
};

/* ---- small helpers ----------------------------------------------------- */

/* strdup is POSIX, not C11. */
static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Grow *arr (elements of size elem) so it holds at least n + 1 elements.
 * Growth is geometric and driven by entries actually parsed, so a huge count
 * in the header allocates nothing by itself. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    if (nc < *cap || nc > SIZE_MAX / elem)
        return -1;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return -1;
    memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return 0;
}

/* A printable form of a name for messages: control bytes escaped, long names
 * cut, so a hostile key cannot garble the one-line error. */
static const char *show(char *buf, size_t cap, const char *s, size_t len)
{
    size_t o = 0;
    const size_t max_shown = 80;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        if (i == max_shown) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f || ch == '\'' || ch == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
        else
            buf[o++] = (char)ch;
    }
    buf[o] = '\0';
    return buf;
}

static const char *vtype_name(uint32_t t)
{
    static const char *names[] = {"U8",  "I8",    "U16",    "I16",   "U32", "I32", "F32",
                                  "BOOL", "STRING", "ARRAY", "U64", "I64", "F64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Byte size of a numeric/bool element type, 0 for STRING/ARRAY/unknown. */
static size_t vtype_size(uint32_t t)
{
    static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < sizeof sizes ? sizes[t] : 0;
}

static uint64_t load_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A decoded number: which of u/i/f holds it. */
typedef struct num {
    enum { NUM_U, NUM_I, NUM_F } kind;
    uint64_t u;
    int64_t i;
    double f;
} num;

/* Decode one numeric/bool element of type t at p (vtype_size(t) bytes). */
static num decode_num(uint32_t t, const uint8_t *p)
{
    num r = {NUM_U, 0, 0, 0.0};
    uint64_t raw = load_le(p, vtype_size(t));
    switch (t) {
    case GGUF_VT_I8: r.kind = NUM_I; r.i = (int8_t)(uint8_t)raw; break;
    case GGUF_VT_I16: r.kind = NUM_I; r.i = (int16_t)(uint16_t)raw; break;
    case GGUF_VT_I32: r.kind = NUM_I; r.i = (int32_t)(uint32_t)raw; break;
    case GGUF_VT_I64: r.kind = NUM_I; r.i = (int64_t)raw; break;
    case GGUF_VT_F32: {
        uint32_t b = (uint32_t)raw;
        float x;
        memcpy(&x, &b, sizeof x);
        r.kind = NUM_F;
        r.f = x;
        break;
    }
    case GGUF_VT_F64: {
        double x;
        memcpy(&x, &raw, sizeof x);
        r.kind = NUM_F;
        r.f = x;
        break;
    }
    case GGUF_VT_BOOL: r.u = raw != 0; break;
    default: r.u = raw; break; /* U8, U16, U32, U64 */
    }
    return r;
}

static bool num_to_u64(num n, uint64_t *out)
{
    switch (n.kind) {
    case NUM_U: *out = n.u; return true;
    case NUM_I:
        if (n.i < 0)
            return false;
        *out = (uint64_t)n.i;
        return true;
    case NUM_F:
        /* 18446744073709551616.0 is 2^64; NaN fails both comparisons. */
        if (!(n.f >= 0.0 && n.f < 18446744073709551616.0))
            return false;
        *out = (uint64_t)n.f;
        return true;
    }
    return false;
}

static bool num_to_i64(num n, int64_t *out)
{
    switch (n.kind) {
    case NUM_U:
        if (n.u > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)n.u;
        return true;
    case NUM_I: *out = n.i; return true;
    case NUM_F:
        if (!(n.f >= -9223372036854775808.0 && n.f < 9223372036854775808.0))
            return false;
        *out = (int64_t)n.f;
        return true;
    }
    return false;
}

static double num_to_f64(num n)
{
    return n.kind == NUM_U ? (double)n.u : n.kind == NUM_I ? (double)n.i : n.f;
}

/* A scalar kv's value as a num; false for STRING/ARRAY. */
static bool kv_num(const gguf_kv *kv, num *out)
{
    num r = {NUM_U, 0, 0, 0.0};
    switch (kv->type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64: case GGUF_VT_BOOL:
        r.u = kv->v.u;
        break;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        r.kind = NUM_I;
        r.i = kv->v.i;
        break;
    case GGUF_VT_F32: case GGUF_VT_F64:
        r.kind = NUM_F;
        r.f = kv->v.f;
        break;
    default:
        return false;
    }
    *out = r;
    return true;
}

/* ---- name index -------------------------------------------------------- */

typedef const char *(*name_of_fn)(const gguf_file *f, size_t i);

static const char *kv_name_of(const gguf_file *f, size_t i) { return f->kv[i].key; }
static const char *t_name_of(const gguf_file *f, size_t i) { return f->t[i].name; }

static void index_free(name_index *ix)
{
    free(ix->slots);
    ix->slots = NULL;
    ix->cap = 0;
}

/* Look name up; returns the index or SIZE_MAX. */
static size_t index_find(const name_index *ix, const gguf_file *f, name_of_fn name_of,
                         const char *name)
{
    if (!ix->cap)
        return SIZE_MAX;
    size_t mask = ix->cap - 1;
    for (size_t h = (size_t)hash_name(name) & mask;; h = (h + 1) & mask) {
        size_t s = ix->slots[h];
        if (!s)
            return SIZE_MAX;
        if (strcmp(name_of(f, s - 1), name) == 0)
            return s - 1;
    }
}

/* Index entries 0..n-1. Returns 0, -1 when out of memory, or 1 with *dup_a <
 * *dup_b two entries of the same name. */
static int index_build(name_index *ix, const gguf_file *f, name_of_fn name_of, size_t n,
                       size_t *dup_a, size_t *dup_b)
{
    index_free(ix);
    size_t cap = 16;
    while (cap < n * 2) /* load factor at most 1/2; n is bounded by the file size */
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return -1;
    ix->cap = cap;
    for (size_t i = 0; i < n; i++) {
        const char *name = name_of(f, i);
        size_t h = (size_t)hash_name(name) & (cap - 1);
        while (ix->slots[h]) {
            if (strcmp(name_of(f, ix->slots[h] - 1), name) == 0) {
                *dup_a = ix->slots[h] - 1;
                *dup_b = i;
                return 1;
            }
            h = (h + 1) & (cap - 1);
        }
        ix->slots[h] = i + 1;
    }
    return 0;
}

/* ---- cursor ------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *base;
    size_t size, pos;
    const char *name; /* the file, for messages */
    lilac_error *err;
    char what[256];   /* what is being read, for truncation messages */
} cursor;

static lilac_status need(cursor *c, uint64_t n)
{
    if (n <= c->size - c->pos)
        return LILAC_OK;
    return lilac_fail(c->err, LILAC_E_FORMAT,
                      "%s: truncated: %s needs %" PRIu64 " bytes at byte %zu but the file has %zu bytes",
                      c->name, c->what, n, c->pos, c->size);
}

static lilac_status read_bytes(cursor *c, size_t n, const uint8_t **p)
{
    lilac_status st = need(c, n);
    if (st)
        return st;
    *p = c->base + c->pos;
    c->pos += n;
    return LILAC_OK;
}

static lilac_status read_uint(cursor *c, size_t n, uint64_t *v)
{
    const uint8_t *p = NULL;
    lilac_status st = read_bytes(c, n, &p);
    *v = st ? 0 : load_le(p, n);
    return st;
}

static lilac_status read_u32(cursor *c, uint32_t *v)
{
    uint64_t x = 0;
    lilac_status st = read_uint(c, 4, &x);
    *v = (uint32_t)x;
    return st;
}

static lilac_status read_u64(cursor *c, uint64_t *v) { return read_uint(c, 8, v); }

/* A length-prefixed string, left in the image. */
static lilac_status read_str(cursor *c, gguf_str *s)
{
    uint64_t len;
    lilac_status st = read_u64(c, &len);
    if (st)
        return st;
    if (len > c->size - c->pos)
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: truncated: %s: a string of %" PRIu64
                          " bytes at byte %zu runs past the end of the file (%zu bytes)",
                          c->name, c->what, len, c->pos, c->size);
    s->ptr = len ? (const char *)c->base + c->pos : "";
    s->len = len;
    c->pos += (size_t)len;
    return LILAC_OK;
}

/* A key or tensor name: an owned NUL-terminated copy; embedded NULs are
 * rejected since the copy would silently cut them. */
static lilac_status read_name(cursor *c, const char *kind, char **out)
{
    gguf_str s = {"", 0};
    size_t name_start = c->pos + 8;
    lilac_status st = read_str(c, &s);
    if (st)
        return st;
    if (memchr(s.ptr, '\0', (size_t)s.len)) {
        char b[400];
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: %s: %s '%s' at byte %zu contains a NUL byte",
                          c->name, c->what, kind, show(b, sizeof b, s.ptr, (size_t)s.len), name_start);
    }
    char *p = malloc((size_t)s.len + 1);
    if (!p)
        return lilac_fail(c->err, LILAC_E_NOMEM, "%s: out of memory reading %s", c->name, c->what);
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    *out = p;
    return LILAC_OK;
}

/* ---- parsing ----------------------------------------------------------- */

static lilac_status nomem(cursor *c)
{
    return lilac_fail(c->err, LILAC_E_NOMEM, "%s: out of memory reading %s", c->name, c->what);
}

static lilac_status read_value(cursor *c, gguf_kv *kv)
{
    char b[400];
    const char *key = show(b, sizeof b, kv->key, strlen(kv->key));
    lilac_status st;
    if (kv->type == GGUF_VT_STRING)
        return read_str(c, &kv->v.s);
    if (kv->type != GGUF_VT_ARRAY) {
        const uint8_t *p;
        if ((st = read_bytes(c, vtype_size(kv->type), &p)))
            return st;
        num n = decode_num(kv->type, p);
        if (n.kind == NUM_U)
            kv->v.u = n.u;
        else if (n.kind == NUM_I)
            kv->v.i = n.i;
        else
            kv->v.f = n.f;
        return LILAC_OK;
    }

    uint32_t et;
    uint64_t n;
    size_t at = c->pos;
    if ((st = read_u32(c, &et)) || (st = read_u64(c, &n)))
        return st;
    if (et == GGUF_VT_ARRAY)
        return lilac_fail(c->err, LILAC_E_UNSUPPORTED,
                          "%s: key '%s' is an array of arrays (at byte %zu); nested arrays are not supported",
                          c->name, key, at);
    if (et > GGUF_VT_F64)
        return lilac_fail(c->err, LILAC_E_UNSUPPORTED,
                          "%s: unknown array element type %" PRIu32 " for key '%s' (at byte %zu)",
                          c->name, et, key, at);
    kv->v.arr.type = (gguf_vtype)et;
    kv->v.arr.n = n;
    size_t left = c->size - c->pos;
    if (et != GGUF_VT_STRING) {
        size_t es = vtype_size(et);
        if (n > left / es)
            return lilac_fail(c->err, LILAC_E_FORMAT,
                              "%s: truncated: array '%s' of %" PRIu64 " %s elements (%zu bytes each) at byte %zu "
                              "runs past the end of the file (%zu bytes)",
                              c->name, key, n, vtype_name(et), es, c->pos, c->size);
        kv->v.arr.data = c->base + c->pos;
        c->pos += (size_t)n * es;
        return LILAC_OK;
    }
    if (n > left / 8) /* each string takes at least its 8-byte length */
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: truncated: string array '%s' of %" PRIu64
                          " entries at byte %zu cannot fit in the %zu bytes left in the file",
                          c->name, key, n, c->pos, left);
    size_t cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (grow((void **)&kv->v.arr.strs, &cap, (size_t)i, sizeof(gguf_str)))
            return nomem(c);
        snprintf(c->what, sizeof c->what, "string %" PRIu64 " of array '%s'", i, key);
        if ((st = read_str(c, &kv->v.arr.strs[i])))
            return st;
    }
    return LILAC_OK;
}

static lilac_status parse_kvs(cursor *c, gguf_file *f, uint64_t n_kv)
{
    lilac_status st;
    char b[400];
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow((void **)&f->kv, &f->cap_kv, f->n_kv, sizeof *f->kv))
            return nomem(c);
        gguf_kv *kv = &f->kv[f->n_kv];
        snprintf(c->what, sizeof c->what, "key %" PRIu64, i);
        if ((st = read_name(c, "the key", &kv->key)))
            return st;
        f->n_kv++; /* from here gguf_close frees what kv owns */
        const char *key = show(b, sizeof b, kv->key, strlen(kv->key));
        snprintf(c->what, sizeof c->what, "the value of key %" PRIu64 " ('%s')", i, key);
        uint32_t t;
        size_t at = c->pos;
        if ((st = read_u32(c, &t)))
            return st;
        if (t > GGUF_VT_F64)
            return lilac_fail(c->err, LILAC_E_UNSUPPORTED,
                              "%s: unknown metadata value type %" PRIu32 " for key '%s' (at byte %zu)",
                              c->name, t, key, at);
        kv->type = (gguf_vtype)t;
        if ((st = read_value(c, kv)))
            return st;
    }
    size_t a, d;
    int r = index_build(&f->kv_ix, f, kv_name_of, f->n_kv, &a, &d);
    if (r < 0)
        return nomem(c);
    if (r > 0)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: duplicate key '%s' (entries %zu and %zu)", c->name,
                          show(b, sizeof b, f->kv[a].key, strlen(f->kv[a].key)), a, d);
    return LILAC_OK;
}

/* general.alignment: any integer type holding a nonzero power of two that
 * fits in u32 (llama.cpp writes a U32). */
static lilac_status read_alignment(cursor *c, gguf_file *f)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv)
        return LILAC_OK;
    num n;
    uint64_t a;
    if (kv->type == GGUF_VT_BOOL || !kv_num(kv, &n) || n.kind == NUM_F)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: general.alignment has type %s; it must be an integer",
                          c->name, vtype_name(kv->type));
    if (!num_to_u64(n, &a) || a == 0 || a > UINT32_MAX || (a & (a - 1)) != 0) {
        if (n.kind == NUM_I)
            return lilac_fail(c->err, LILAC_E_FORMAT,
                              "%s: general.alignment is %" PRId64 "; it must be a nonzero power of two",
                              c->name, n.i);
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: general.alignment is %" PRIu64 "; it must be a nonzero power of two", c->name,
                          n.u);
    }
    f->alignment = (size_t)a;
    return LILAC_OK;
}

static lilac_status parse_tensor_info(cursor *c, gguf_file *f, uint64_t i, uint64_t *offset)
{
    lilac_status st;
    char b[400];
    gguf_tensor *t = &f->t[f->n_t];
    snprintf(c->what, sizeof c->what, "tensor info %" PRIu64, i);
    if ((st = read_name(c, "the name", &t->name)))
        return st;
    f->n_t++;
    const char *name = show(b, sizeof b, t->name, strlen(t->name));
    snprintf(c->what, sizeof c->what, "tensor info %" PRIu64 " ('%s')", i, name);
    if (!t->name[0])
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: tensor info %" PRIu64 " has an empty name", c->name, i);

    uint32_t n_dims;
    if ((st = read_u32(c, &n_dims)))
        return st;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: tensor '%s' has n_dims %" PRIu32 " (must be 1..%d)",
                          c->name, name, n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    int64_t count = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < (int)n_dims && (st = read_u64(c, &ne)))
            return st;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return lilac_fail(c->err, LILAC_E_FORMAT, "%s: tensor '%s' has ne[%d] = %" PRId64
                              " (must be positive)", c->name, name, d, (int64_t)ne);
        t->ne[d] = (int64_t)ne;
        if (t->ne[d] > INT64_MAX / count)
            return lilac_fail(c->err, LILAC_E_FORMAT,
                              "%s: tensor '%s' has too many elements: dimensions [%" PRId64 ", %" PRId64
                              ", %" PRId64 ", %" PRId64 "] overflow a 64-bit count",
                              c->name, name, t->ne[0], d > 0 ? t->ne[1] : 1, d > 1 ? t->ne[2] : 1,
                              d > 2 ? t->ne[3] : 1);
        count *= t->ne[d];
    }

    uint32_t type;
    size_t at = c->pos;
    if ((st = read_u32(c, &type)))
        return st;
    const lilac_dtype_info *info = type < LILAC_U8 ? lilac_dtype_get((int)type) : NULL;
    if (!info)
        return lilac_fail(c->err, LILAC_E_UNSUPPORTED, "%s: tensor '%s' has unknown type %" PRIu32
                          " (at byte %zu)", c->name, name, type, at);
    t->type = (int)type;
    if (t->ne[0] % info->blck != 0)
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: tensor '%s' of type %s has ne[0] = %" PRId64
                          ", not a multiple of the block size %" PRIu32,
                          c->name, name, info->name, t->ne[0], info->blck);
    /* A block can take more bytes than it has values (F64: 8 per value), so
     * the byte size can overflow even when the element count does not. */
    uint64_t blocks = (uint64_t)(t->ne[0] / info->blck);
    uint64_t rows = (uint64_t)(count / t->ne[0]);
    if (blocks > UINT64_MAX / info->size || blocks * info->size > SIZE_MAX / rows)
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: tensor '%s' is too large: %" PRId64 " elements of type %s overflow the address space",
                          c->name, name, count, info->name);
    t->nbytes = (size_t)(blocks * info->size * rows);
    return read_u64(c, offset);
}

static lilac_status parse_body(cursor *c, gguf_file *f)
{
    lilac_status st;
    char b[400];
    const uint8_t *magic;
    snprintf(c->what, sizeof c->what, "the header");
    if ((st = read_bytes(c, 4, &magic)))
        return st;
    if (memcmp(magic, "GGUF", 4) != 0)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: not a GGUF file (magic '%s')", c->name,
                          show(b, sizeof b, (const char *)magic, 4));
    if ((st = read_u32(c, &f->version)))
        return st;
    if (f->version != 2 && f->version != 3) {
        uint32_t v = f->version;
        uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
        if (swapped == 2 || swapped == 3)
            return lilac_fail(c->err, LILAC_E_UNSUPPORTED,
                              "%s: big-endian GGUF (version %" PRIu32 " byte-swapped) is not supported", c->name,
                              swapped);
        return lilac_fail(c->err, LILAC_E_UNSUPPORTED,
                          "%s: GGUF version %" PRIu32 " is not supported (only versions 2 and 3)", c->name, v);
    }
    uint64_t n_t, n_kv;
    if ((st = read_u64(c, &n_t)) || (st = read_u64(c, &n_kv)))
        return st;
    size_t left = c->size - c->pos;
    if (n_kv > left / KV_MIN_BYTES)
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: truncated or corrupt: the header declares %" PRIu64
                          " metadata kv pairs but the %zu bytes after it hold at most %zu",
                          c->name, n_kv, left, left / KV_MIN_BYTES);
    if (n_t > left / TENSOR_INFO_MIN_BYTES)
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: truncated or corrupt: the header declares %" PRIu64
                          " tensors but the %zu bytes after it hold at most %zu tensor infos",
                          c->name, n_t, left, left / TENSOR_INFO_MIN_BYTES);

    if ((st = parse_kvs(c, f, n_kv)) || (st = read_alignment(c, f)))
        return st;

    left = c->size - c->pos;
    if (n_t > left / TENSOR_INFO_MIN_BYTES)
        return lilac_fail(c->err, LILAC_E_FORMAT,
                          "%s: truncated: the header declares %" PRIu64 " tensors but the %zu bytes after "
                          "the metadata (byte %zu on) hold at most %zu tensor infos",
                          c->name, n_t, left, c->pos, left / TENSOR_INFO_MIN_BYTES);
    /* n_t is now bounded by the file size / 32, so these arrays are too. */
    f->cap_t = n_t ? (size_t)n_t : 1;
    f->t = calloc(f->cap_t, sizeof *f->t);
    uint64_t *offsets = calloc(f->cap_t, sizeof *offsets);
    if (!f->t || !offsets) {
        free(offsets);
        return nomem(c);
    }
    for (uint64_t i = 0; i < n_t && !st; i++)
        st = parse_tensor_info(c, f, i, &offsets[i]);

    /* The data section starts at the next multiple of the alignment. */
    uint64_t data_start = 0, size = c->size;
    if (!st) {
        data_start = ((uint64_t)c->pos + f->alignment - 1) / f->alignment * f->alignment;
        for (size_t i = 0; i < f->n_t; i++) {
            gguf_tensor *t = &f->t[i];
            const char *name = show(b, sizeof b, t->name, strlen(t->name));
            if (offsets[i] % f->alignment != 0) {
                st = lilac_fail(c->err, LILAC_E_FORMAT,
                                "%s: tensor '%s' has offset %" PRIu64 ", not a multiple of the alignment %zu",
                                c->name, name, offsets[i], f->alignment);
                break;
            }
            if (data_start > size || offsets[i] > size - data_start ||
                t->nbytes > size - data_start - offsets[i]) {
                st = lilac_fail(c->err, LILAC_E_FORMAT,
                                "%s: tensor '%s' (offset %" PRIu64 ", %zu bytes, data section at byte %" PRIu64
                                ") extends past the end of the file (%zu bytes)",
                                c->name, name, offsets[i], t->nbytes, data_start, c->size);
                break;
            }
            t->data = c->base + data_start + offsets[i];
        }
    }
    free(offsets);
    if (st)
        return st;

    size_t a, d;
    int r = index_build(&f->t_ix, f, t_name_of, f->n_t, &a, &d);
    if (r < 0)
        return nomem(c);
    if (r > 0)
        return lilac_fail(c->err, LILAC_E_FORMAT, "%s: duplicate tensor name '%s' (tensor infos %zu and %zu)",
                          c->name, show(b, sizeof b, f->t[a].name, strlen(f->t[a].name)), a, d);
    return LILAC_OK;
}

static gguf_file *file_new(const char *name)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->paths = calloc(1, sizeof *f->paths);
    if (f->paths)
        f->paths[0] = dup_str(name);
    if (!f->paths || !f->paths[0]) {
        free(f->paths);
        free(f);
        return NULL;
    }
    f->n_files = 1;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    return f;
}

lilac_status gguf_parse(const uint8_t *base, size_t size, const char *name, gguf_file **out,
                        lilac_error *err)
{
    *out = NULL;
    if (!name)
        name = "(memory)";
    if (!base && size)
        return lilac_fail(err, LILAC_E_ARG, "%s: no image to parse", name);
    gguf_file *f = file_new(name);
    if (!f)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", name);
    cursor c = {.base = base, .size = size, .pos = 0, .name = name, .err = err};
    lilac_status st = parse_body(&c, f);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return LILAC_OK;
}

void gguf_close(gguf_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        if (kv->type == GGUF_VT_ARRAY && kv->v.arr.type == GGUF_VT_STRING)
            free(kv->v.arr.strs);
        free(kv->key);
    }
    for (size_t i = 0; i < f->n_t; i++)
        free(f->t[i].name);
    free(f->kv);
    free(f->t);
    index_free(&f->kv_ix);
    index_free(&f->t_ix);
    for (int i = 0; i < f->n_files; i++) {
        if (f->maps)
            lilac_mapfile_close(&f->maps[i]);
        free(f->paths[i]);
    }
    free(f->maps);
    free(f->paths);
    free(f);
}

/* ---- split files ------------------------------------------------------- */

/* An integer split.* key of part f: 1 found, 0 absent, or an error. */
static lilac_status split_key(const gguf_file *f, const char *key, uint64_t *v, bool *found,
                              lilac_error *err)
{
    *found = false;
    if (!gguf_find_kv(f, key))
        return LILAC_OK;
    lilac_status st = gguf_get_u64(f, key, v, err);
    if (!st)
        *found = true;
    return st;
}

/* Where in path the "-00001-of-0000N.gguf" suffix starts, with the part
 * number and count it names; false when path does not end that way. */
static bool split_name(const char *path, size_t *prefix_len, unsigned *no, unsigned *count)
{
    size_t len = strlen(path);
    if (len <= SPLIT_SUFFIX_LEN)
        return false;
    const char *s = path + len - SPLIT_SUFFIX_LEN;
    const char *fmt = "-#####-of-#####.gguf";
    unsigned a = 0, b = 0;
    for (size_t i = 0; i < SPLIT_SUFFIX_LEN; i++) {
        if (fmt[i] == '#') {
            if (s[i] < '0' || s[i] > '9')
                return false;
            if (i < 6)
                a = a * 10 + (unsigned)(s[i] - '0');
            else
                b = b * 10 + (unsigned)(s[i] - '0');
        } else if (s[i] != fmt[i]) {
            return false;
        }
    }
    *prefix_len = len - SPLIT_SUFFIX_LEN;
    *no = a;
    *count = b;
    return true;
}

/* Open part `no` (1-based) of n, check its split keys and move its tensors
 * into f as file index no - 1. */
static lilac_status add_part(gguf_file *f, const char *path, unsigned no, unsigned n, lilac_error *err)
{
    int fi = f->n_files;
    lilac_mapfile *m = &f->maps[fi];
    lilac_status st = lilac_mapfile_open(m, path, err);
    if (st) {
        /* mapfile's message already starts with the path; say which part it is. */
        char old[sizeof err->msg];
        if (err) {
            memcpy(old, err->msg, sizeof old);
            return lilac_fail(err, st, "%s (part %u of %u of the split model %s)", old, no, n, f->paths[0]);
        }
        return st;
    }
    f->paths[fi] = dup_str(m->path);
    f->n_files++; /* close now unmaps and frees it */
    if (!f->paths[fi])
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);

    gguf_file *p;
    if ((st = gguf_parse(m->data, m->size, path, &p, err)))
        return st;
    uint64_t pno = 0, pcount = 0;
    bool has_no, has_count;
    if ((st = split_key(p, "split.no", &pno, &has_no, err)) ||
        (st = split_key(p, "split.count", &pcount, &has_count, err))) {
        gguf_close(p);
        return st;
    }
    if (!has_no || !has_count || pno != no - 1 || pcount != n) {
        gguf_close(p);
        char sno[32] = "absent", scount[32] = "absent";
        if (has_no)
            snprintf(sno, sizeof sno, "%" PRIu64, pno);
        if (has_count)
            snprintf(scount, sizeof scount, "%" PRIu64, pcount);
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: split.no is %s and split.count is %s, but as part %u of %u of %s they must be "
                          "%u and %u",
                          path, sno, scount, no, n, f->paths[0], no - 1, n);
    }
    if (p->n_t > SIZE_MAX / sizeof *f->t - f->n_t) {
        gguf_close(p);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    }
    gguf_tensor *nt = realloc(f->t, (f->n_t + p->n_t + 1) * sizeof *f->t);
    if (!nt) {
        gguf_close(p);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    }
    f->t = nt;
    f->cap_t = f->n_t + p->n_t + 1;
    for (size_t i = 0; i < p->n_t; i++) {
        f->t[f->n_t] = p->t[i];
        f->t[f->n_t].file = fi;
        f->n_t++;
        p->t[i].name = NULL; /* now owned by f */
    }
    gguf_close(p);
    return LILAC_OK;
}

static lilac_status open_split(gguf_file *f, unsigned n, lilac_error *err)
{
    const char *first = f->paths[0];
    size_t plen;
    unsigned no, count;
    if (!split_name(first, &plen, &no, &count) || count != n || no != 1)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: split.count is %u but the file name does not end in -00001-of-%05u.gguf, "
                          "so the other parts cannot be found",
                          first, n, n);
    lilac_mapfile *maps = realloc(f->maps, n * sizeof *maps);
    if (!maps)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", first);
    f->maps = maps;
    memset(maps + 1, 0, (n - 1) * sizeof *maps);
    char **paths = realloc(f->paths, n * sizeof *paths);
    if (!paths)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", first);
    f->paths = paths;
    first = f->paths[0];
    size_t plen_buf = plen + SPLIT_SUFFIX_LEN + 1;
    char *path = malloc(plen_buf);
    if (!path)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", first);
    lilac_status st = LILAC_OK;
    for (unsigned i = 2; i <= n && !st; i++) {
        snprintf(path, plen_buf, "%.*s-%05u-of-%05u.gguf", (int)plen, first, i, n);
        st = add_part(f, path, i, n, err);
    }
    free(path);
    if (st)
        return st;

    uint64_t total;
    bool has_total;
    if ((st = split_key(f, "split.tensors.count", &total, &has_total, err)))
        return st;
    if (has_total && total != f->n_t)
        return lilac_fail(err, LILAC_E_FORMAT,
                          "%s: split.tensors.count is %" PRIu64 " but the %u parts hold %zu tensors", first,
                          total, n, f->n_t);
    size_t a, d;
    int r = index_build(&f->t_ix, f, t_name_of, f->n_t, &a, &d);
    if (r < 0)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", first);
    if (r > 0) {
        char b[400];
        return lilac_fail(err, LILAC_E_FORMAT, "%s: duplicate tensor name '%s': in %s and in %s", first,
                          show(b, sizeof b, f->t[a].name, strlen(f->t[a].name)), f->paths[f->t[a].file],
                          f->paths[f->t[d].file]);
    }
    return LILAC_OK;
}

lilac_status gguf_open(const char *path, gguf_file **out, lilac_error *err)
{
    *out = NULL;
    lilac_mapfile m;
    lilac_status st = lilac_mapfile_open(&m, path, err);
    if (st)
        return st;
    gguf_file *f;
    if ((st = gguf_parse(m.data, m.size, path, &f, err))) {
        lilac_mapfile_close(&m);
        return st;
    }
    f->maps = malloc(sizeof *f->maps);
    if (!f->maps) {
        lilac_mapfile_close(&m);
        gguf_close(f);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    }
    f->maps[0] = m;

    uint64_t no = 0, count = 1;
    bool has_no, has_count;
    if ((st = split_key(f, "split.no", &no, &has_no, err)) ||
        (st = split_key(f, "split.count", &count, &has_count, err)))
        goto fail;
    if (has_count && count > 1) {
        if (count > SPLIT_MAX_PARTS) {
            st = lilac_fail(err, LILAC_E_FORMAT, "%s: split.count is %" PRIu64 " (at most %d parts are supported)",
                            path, count, SPLIT_MAX_PARTS);
            goto fail;
        }
        /* Opening a later part is refused rather than redirected: the caller
         * named a file that is not the model's entry point. */
        if (no != 0) {
            size_t plen;
            unsigned pn, pc;
            if (split_name(path, &plen, &pn, &pc))
                st = lilac_fail(err, LILAC_E_ARG,
                                "%s: this is part %" PRIu64 " of %" PRIu64
                                " of a split model; open the first part, %.*s-00001-of-%05" PRIu64 ".gguf",
                                path, no + 1, count, (int)plen, path, count);
            else
                st = lilac_fail(err, LILAC_E_ARG,
                                "%s: this is part %" PRIu64 " of %" PRIu64 " of a split model; open the first part",
                                path, no + 1, count);
            goto fail;
        }
        if ((st = open_split(f, (unsigned)count, err)))
            goto fail;
    }
    *out = f;
    return LILAC_OK;
fail:
    gguf_close(f);
    return st;
}

/* ---- accessors --------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *f) { return f->version; }
size_t gguf_alignment(const gguf_file *f) { return f->alignment; }
int gguf_n_files(const gguf_file *f) { return f->n_files; }

const char *gguf_file_path(const gguf_file *f, int i)
{
    return i >= 0 && i < f->n_files ? f->paths[i] : NULL;
}

size_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }

const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i) { return i < f->n_kv ? &f->kv[i] : NULL; }

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key)
{
    size_t i = index_find(&f->kv_ix, f, kv_name_of, key);
    return i == SIZE_MAX ? NULL : &f->kv[i];
}

size_t gguf_n_tensors(const gguf_file *f) { return f->n_t; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i) { return i < f->n_t ? &f->t[i] : NULL; }

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    size_t i = index_find(&f->t_ix, f, t_name_of, name);
    return i == SIZE_MAX ? NULL : &f->t[i];
}

/* The kv for a getter, or an error naming the file and key. */
static const gguf_kv *need_kv(const gguf_file *f, const char *key, lilac_error *err)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        lilac_fail(err, LILAC_E_FORMAT, "%s: missing metadata key '%s'", f->paths[0], key);
    return kv;
}

static lilac_status wrong_type(const gguf_file *f, const gguf_kv *kv, const char *want, lilac_error *err)
{
    char b[400];
    return lilac_fail(err, LILAC_E_FORMAT, "%s: metadata key '%s' has type %s%s%s, expected %s", f->paths[0],
                      show(b, sizeof b, kv->key, strlen(kv->key)), vtype_name(kv->type),
                      kv->type == GGUF_VT_ARRAY ? " of " : "",
                      kv->type == GGUF_VT_ARRAY ? vtype_name(kv->v.arr.type) : "", want);
}

lilac_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, lilac_error *err)
{
    const gguf_kv *kv = need_kv(f, key, err);
    if (!kv)
        return LILAC_E_FORMAT;
    num n;
    if (kv->type == GGUF_VT_BOOL || !kv_num(kv, &n) || n.kind == NUM_F)
        return wrong_type(f, kv, "an integer", err);
    if (!num_to_u64(n, out)) {
        char b[400];
        return lilac_fail(err, LILAC_E_FORMAT, "%s: metadata key '%s' is %" PRId64 ", expected a non-negative integer",
                          f->paths[0], show(b, sizeof b, kv->key, strlen(kv->key)), n.i);
    }
    return LILAC_OK;
}

lilac_status gguf_get_f64(const gguf_file *f, const char *key, double *out, lilac_error *err)
{
    const gguf_kv *kv = need_kv(f, key, err);
    if (!kv)
        return LILAC_E_FORMAT;
    num n;
    if (kv->type == GGUF_VT_BOOL || !kv_num(kv, &n))
        return wrong_type(f, kv, "a number", err);
    *out = num_to_f64(n);
    return LILAC_OK;
}

lilac_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, lilac_error *err)
{
    const gguf_kv *kv = need_kv(f, key, err);
    if (!kv)
        return LILAC_E_FORMAT;
    if (kv->type != GGUF_VT_BOOL)
        return wrong_type(f, kv, "BOOL", err);
    *out = kv->v.u != 0;
    return LILAC_OK;
}

lilac_status gguf_get_str(const gguf_file *f, const char *key, char **out, lilac_error *err)
{
    const gguf_kv *kv = need_kv(f, key, err);
    if (!kv)
        return LILAC_E_FORMAT;
    if (kv->type != GGUF_VT_STRING)
        return wrong_type(f, kv, "STRING", err);
    char *s = malloc((size_t)kv->v.s.len + 1); /* len <= file size, so no overflow */
    if (!s)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory copying key '%s'", f->paths[0], key);
    memcpy(s, kv->v.s.ptr, (size_t)kv->v.s.len);
    s[kv->v.s.len] = '\0';
    *out = s;
    return LILAC_OK;
}

/* Element i of a numeric array, decoded. */
static bool arr_num(const gguf_kv *kv, uint64_t i, num *out)
{
    if (!kv || kv->type != GGUF_VT_ARRAY || i >= kv->v.arr.n)
        return false;
    size_t es = vtype_size(kv->v.arr.type);
    if (!es)
        return false;
    *out = decode_num(kv->v.arr.type, kv->v.arr.data + (size_t)i * es);
    return true;
}

bool gguf_arr_u64(const gguf_kv *kv, uint64_t i, uint64_t *out)
{
    num n;
    return arr_num(kv, i, &n) && num_to_u64(n, out);
}

bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out)
{
    num n;
    return arr_num(kv, i, &n) && num_to_i64(n, out);
}

bool gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out)
{
    num n;
    if (!arr_num(kv, i, &n))
        return false;
    *out = num_to_f64(n);
    return true;
}
