#include "format/gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "util/err.h"

#define GW_DEFAULT_ALIGN 32

typedef struct gw_tensor {
    char *name;
    int type;
    int n_dims;
    int64_t ne[4];
    uint64_t offset; /* from the start of the data section */
    size_t nbytes;
} gw_tensor;

struct gguf_writer {
    char *path, *tmp;
    FILE *f;
    bool finished, data_started, failed;
    size_t alignment;

    /* metadata, serialized as it will be written */
    uint8_t *kv;
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys; /* for the duplicate check */
    size_t keys_cap;

    gw_tensor *t;
    size_t n_t, t_cap;
    uint64_t data_size; /* aligned end of the last tensor */

    /* streaming state */
    size_t cur;        /* tensor being written */
    size_t cur_done;   /* bytes of it written */
};

lilac_status gguf_writer_open(const char *path, gguf_writer **out, lilac_error *err)
{
    *out = NULL;
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    size_t n = strlen(path);
    w->path = malloc(n + 1);
    w->tmp = malloc(n + 5);
    if (!w->path || !w->tmp) {
        gguf_writer_free(w);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    }
    memcpy(w->path, path, n + 1);
    memcpy(w->tmp, path, n);
    memcpy(w->tmp + n, ".tmp", 5);
    w->alignment = GW_DEFAULT_ALIGN;
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        int e = errno;
        lilac_status s = lilac_fail(err, LILAC_E_IO, "%s: cannot create: %s", w->tmp, strerror(e));
        free(w->path);
        free(w->tmp);
        free(w);
        return s;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    *out = w;
    return LILAC_OK;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w)
        return;
    if (w->f) {
        fclose(w->f);
        w->f = NULL;
    }
    if (!w->finished && w->tmp)
        remove(w->tmp);
    for (size_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w->path);
    free(w->tmp);
    free(w);
}

/* ---- metadata ---- */

static lilac_status phase_check(gguf_writer *w, const char *what, lilac_error *err)
{
    if (w->failed)
        return lilac_fail(err, LILAC_E_ARG, "%s: the writer failed earlier; %s is refused", w->path, what);
    if (w->data_started || w->finished)
        return lilac_fail(err, LILAC_E_ARG, "%s: %s after the tensor data began", w->path, what);
    return LILAC_OK;
}

static bool kv_reserve(gguf_writer *w, size_t more)
{
    if (w->kv_len + more <= w->kv_cap)
        return true;
    size_t cap = w->kv_cap ? w->kv_cap : 4096;
    while (cap < w->kv_len + more) {
        if (cap > SIZE_MAX / 2)
            return false;
        cap *= 2;
    }
    uint8_t *p = realloc(w->kv, cap);
    if (!p)
        return false;
    w->kv = p;
    w->kv_cap = cap;
    return true;
}

/* Little-endian integer of `bytes` bytes. */
static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void kv_put(gguf_writer *w, uint64_t v, int bytes)
{
    put_le(w->kv + w->kv_len, v, bytes);
    w->kv_len += (size_t)bytes;
}

static void kv_put_str(gguf_writer *w, const char *s, size_t n)
{
    kv_put(w, n, 8);
    if (n)
        memcpy(w->kv + w->kv_len, s, n);
    w->kv_len += n;
}

static int vtype_size(gguf_vtype t)
{
    switch (t) {
    case GGUF_VT_U8: case GGUF_VT_I8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_U16: case GGUF_VT_I16: return 2;
    case GGUF_VT_U32: case GGUF_VT_I32: case GGUF_VT_F32: return 4;
    case GGUF_VT_U64: case GGUF_VT_I64: case GGUF_VT_F64: return 8;
    default: return 0;
    }
}

/* Check the key, record it, and reserve room for key + type + payload. */
static lilac_status kv_begin(gguf_writer *w, const char *key, gguf_vtype type, size_t payload,
                             lilac_error *err)
{
    lilac_status s = phase_check(w, "adding metadata", err);
    if (s)
        return s;
    size_t klen = key ? strlen(key) : 0;
    if (klen == 0)
        return lilac_fail(err, LILAC_E_ARG, "%s: empty metadata key", w->path);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0)
            return lilac_fail(err, LILAC_E_ARG, "%s: metadata key '%s' added twice", w->path, key);
    if (w->n_kv == w->keys_cap) {
        size_t cap = w->keys_cap ? w->keys_cap * 2 : 64;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k)
            return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", w->path);
        w->keys = k;
        w->keys_cap = cap;
    }
    char *kc = malloc(klen + 1);
    if (!kc || payload > SIZE_MAX - klen - 64 || !kv_reserve(w, 8 + klen + 4 + payload)) {
        free(kc);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory for metadata '%s'", w->path, key);
    }
    memcpy(kc, key, klen + 1);
    w->keys[w->n_kv++] = kc;
    kv_put_str(w, key, klen);
    kv_put(w, (uint64_t)type, 4);
    return LILAC_OK;
}

static lilac_status kv_scalar(gguf_writer *w, const char *key, gguf_vtype type, uint64_t bits,
                              lilac_error *err)
{
    int size = vtype_size(type);
    lilac_status s = kv_begin(w, key, type, (size_t)size, err);
    if (s)
        return s;
    kv_put(w, bits, size);
    return LILAC_OK;
}

lilac_status gguf_writer_kv_u8(gguf_writer *w, const char *key, uint8_t v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_U8, v, err);
}
lilac_status gguf_writer_kv_i8(gguf_writer *w, const char *key, int8_t v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_I8, (uint8_t)v, err);
}
lilac_status gguf_writer_kv_u16(gguf_writer *w, const char *key, uint16_t v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_U16, v, err);
}
lilac_status gguf_writer_kv_i16(gguf_writer *w, const char *key, int16_t v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_I16, (uint16_t)v, err);
}
lilac_status gguf_writer_kv_u32(gguf_writer *w, const char *key, uint32_t v, lilac_error *err)
{
    if (strcmp(key, "general.alignment") == 0) {
        if (v == 0 || (v & (v - 1)) != 0)
            return lilac_fail(err, LILAC_E_ARG, "%s: general.alignment %u is not a nonzero power of two", w->path, v);
        lilac_status s = kv_scalar(w, key, GGUF_VT_U32, v, err);
        if (!s)
            w->alignment = v;
        return s;
    }
    return kv_scalar(w, key, GGUF_VT_U32, v, err);
}
lilac_status gguf_writer_kv_i32(gguf_writer *w, const char *key, int32_t v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_I32, (uint32_t)v, err);
}
lilac_status gguf_writer_kv_u64(gguf_writer *w, const char *key, uint64_t v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_U64, v, err);
}
lilac_status gguf_writer_kv_i64(gguf_writer *w, const char *key, int64_t v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_I64, (uint64_t)v, err);
}
lilac_status gguf_writer_kv_f32(gguf_writer *w, const char *key, float v, lilac_error *err)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    return kv_scalar(w, key, GGUF_VT_F32, b, err);
}
lilac_status gguf_writer_kv_f64(gguf_writer *w, const char *key, double v, lilac_error *err)
{
    uint64_t b;
    memcpy(&b, &v, 8);
    return kv_scalar(w, key, GGUF_VT_F64, b, err);
}
lilac_status gguf_writer_kv_bool(gguf_writer *w, const char *key, bool v, lilac_error *err)
{
    return kv_scalar(w, key, GGUF_VT_BOOL, v ? 1 : 0, err);
}
lilac_status gguf_writer_kv_str(gguf_writer *w, const char *key, const char *v, lilac_error *err)
{
    size_t n = strlen(v);
    lilac_status s = kv_begin(w, key, GGUF_VT_STRING, 8 + n, err);
    if (s)
        return s;
    kv_put_str(w, v, n);
    return LILAC_OK;
}

lilac_status gguf_writer_kv_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *data,
                                size_t n, lilac_error *err)
{
    int size = vtype_size(elem_type);
    if (size == 0)
        return lilac_fail(err, LILAC_E_ARG, "%s: metadata '%s': array element type %d is not numeric", w->path,
                          key, (int)elem_type);
    if (n > (SIZE_MAX - 64) / 8)
        return lilac_fail(err, LILAC_E_ARG, "%s: metadata '%s': array too long", w->path, key);
    lilac_status s = kv_begin(w, key, GGUF_VT_ARRAY, 12 + n * (size_t)size, err);
    if (s)
        return s;
    kv_put(w, (uint64_t)elem_type, 4);
    kv_put(w, n, 8);
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;
        switch (size) {
        case 1: v = p[i]; break;
        case 2: { uint16_t x; memcpy(&x, p + 2 * i, 2); v = x; break; }
        case 4: { uint32_t x; memcpy(&x, p + 4 * i, 4); v = x; break; }
        default: memcpy(&v, p + 8 * i, 8); break;
        }
        if (elem_type == GGUF_VT_BOOL)
            v = v != 0;
        kv_put(w, v, size);
    }
    return LILAC_OK;
}

lilac_status gguf_writer_kv_str_arr(gguf_writer *w, const char *key, const char *const *strs,
                                    const size_t *lens, size_t n, lilac_error *err)
{
    size_t total = 12;
    for (size_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(strs[i]);
        if (l > SIZE_MAX / 2 - total - 8)
            return lilac_fail(err, LILAC_E_ARG, "%s: metadata '%s': array too long", w->path, key);
        total += 8 + l;
    }
    lilac_status s = kv_begin(w, key, GGUF_VT_ARRAY, total, err);
    if (s)
        return s;
    kv_put(w, (uint64_t)GGUF_VT_STRING, 4);
    kv_put(w, n, 8);
    for (size_t i = 0; i < n; i++)
        kv_put_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
    return LILAC_OK;
}

/* ---- tensors ---- */

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

lilac_status gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims,
                                    const int64_t *ne, lilac_error *err)
{
    lilac_status s = phase_check(w, "adding a tensor", err);
    if (s)
        return s;
    if (!name || !*name)
        return lilac_fail(err, LILAC_E_ARG, "%s: a tensor without a name", w->path);
    if (n_dims < 1 || n_dims > 4)
        return lilac_fail(err, LILAC_E_ARG, "%s: tensor '%s' has %d dimensions; GGUF holds 1 to 4", w->path, name,
                          n_dims);
    const lilac_dtype_info *di = lilac_dtype_get(type);
    if (!di || type >= LILAC_U8)
        return lilac_fail(err, LILAC_E_ARG, "%s: tensor '%s' has type %d, which GGUF does not know", w->path, name,
                          type);
    uint64_t rows = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 1 || (i > 0 && (uint64_t)ne[i] > UINT64_MAX / 2 / rows))
            return lilac_fail(err, LILAC_E_ARG, "%s: tensor '%s' has a bad dimension %lld", w->path, name,
                              (long long)ne[i]);
        if (i > 0)
            rows *= (uint64_t)ne[i];
    }
    size_t row = lilac_dtype_row_bytes(type, ne[0]);
    if (row == 0)
        return lilac_fail(err, LILAC_E_ARG, "%s: tensor '%s': rows of %lld values are not whole %s blocks", w->path,
                          name, (long long)ne[0], di->name);
    if (rows > SIZE_MAX / row)
        return lilac_fail(err, LILAC_E_ARG, "%s: tensor '%s' is too large", w->path, name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return lilac_fail(err, LILAC_E_ARG, "%s: tensor '%s' added twice", w->path, name);
    if (w->n_t == w->t_cap) {
        size_t cap = w->t_cap ? w->t_cap * 2 : 256;
        gw_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", w->path);
        w->t = t;
        w->t_cap = cap;
    }
    gw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    size_t nlen = strlen(name);
    t->name = malloc(nlen + 1);
    if (!t->name)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", w->path);
    memcpy(t->name, name, nlen + 1);
    t->type = type;
    t->n_dims = n_dims;
    for (int i = 0; i < 4; i++)
        t->ne[i] = i < n_dims ? ne[i] : 1;
    t->nbytes = (size_t)rows * row;
    w->n_t++;
    return LILAC_OK;
}

size_t gguf_writer_tensor_nbytes(const gguf_writer *w, size_t i)
{
    return i < w->n_t ? w->t[i].nbytes : 0;
}

size_t gguf_writer_n_tensors(const gguf_writer *w)
{
    return w->n_t;
}

/* ---- the file ---- */

static lilac_status io_fail(gguf_writer *w, lilac_error *err)
{
    int e = errno;
    w->failed = true;
    return lilac_fail(err, LILAC_E_IO, "%s: write failed: %s", w->tmp, e ? strerror(e) : "unknown error");
}

static lilac_status put(gguf_writer *w, const void *p, size_t n, lilac_error *err)
{
    errno = 0;
    if (n && fwrite(p, 1, n, w->f) != n)
        return io_fail(w, err);
    return LILAC_OK;
}

static lilac_status put_zeros(gguf_writer *w, size_t n, lilac_error *err)
{
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        lilac_status s = put(w, zeros, k, err);
        if (s)
            return s;
        n -= k;
    }
    return LILAC_OK;
}

static lilac_status put_u(gguf_writer *w, uint64_t v, int bytes, lilac_error *err)
{
    uint8_t b[8];
    put_le(b, v, bytes);
    return put(w, b, (size_t)bytes, err);
}

lilac_status gguf_writer_begin_data(gguf_writer *w, lilac_error *err)
{
    lilac_status s = phase_check(w, "beginning the data", err);
    if (s)
        return s;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off = align_up(off + w->t[i].nbytes, w->alignment);
    }
    w->data_size = off;
    uint64_t pos = 0;
    if ((s = put(w, "GGUF", 4, err)) || (s = put_u(w, 3, 4, err)) || (s = put_u(w, w->n_t, 8, err)) ||
        (s = put_u(w, w->n_kv, 8, err)) || (s = put(w, w->kv, w->kv_len, err)))
        return s;
    pos = 24 + w->kv_len;
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_tensor *t = &w->t[i];
        size_t nlen = strlen(t->name);
        if ((s = put_u(w, nlen, 8, err)) || (s = put(w, t->name, nlen, err)) ||
            (s = put_u(w, (uint64_t)t->n_dims, 4, err)))
            return s;
        for (int d = 0; d < t->n_dims; d++)
            if ((s = put_u(w, (uint64_t)t->ne[d], 8, err)))
                return s;
        if ((s = put_u(w, (uint64_t)t->type, 4, err)) || (s = put_u(w, t->offset, 8, err)))
            return s;
        pos += 8 + nlen + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    if ((s = put_zeros(w, (size_t)(align_up(pos, w->alignment) - pos), err)))
        return s;
    w->data_started = true;
    w->cur = 0;
    w->cur_done = 0;
    /* Tensors of zero bytes cannot exist (dimensions are >= 1). */
    return LILAC_OK;
}

lilac_status gguf_writer_write(gguf_writer *w, const void *data, size_t n, lilac_error *err)
{
    if (w->failed)
        return lilac_fail(err, LILAC_E_ARG, "%s: the writer failed earlier; no more data", w->path);
    if (!w->data_started || w->finished)
        return lilac_fail(err, LILAC_E_ARG, "%s: tensor data written outside the data phase", w->path);
    const uint8_t *p = data;
    while (n) {
        if (w->cur >= w->n_t) {
            w->failed = true;
            return lilac_fail(err, LILAC_E_INTERNAL, "%s: %zu bytes of tensor data beyond the last tensor",
                              w->path, n);
        }
        gw_tensor *t = &w->t[w->cur];
        size_t k = t->nbytes - w->cur_done;
        if (k > n)
            k = n;
        lilac_status s = put(w, p, k, err);
        if (s)
            return s;
        p += k;
        n -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            uint64_t end = t->offset + t->nbytes;
            if ((s = put_zeros(w, (size_t)(align_up(end, w->alignment) - end), err)))
                return s;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return LILAC_OK;
}

lilac_status gguf_writer_finish(gguf_writer *w, lilac_error *err)
{
    lilac_status s;
    if (!w->data_started && (s = gguf_writer_begin_data(w, err)))
        return s;
    if (w->failed)
        return lilac_fail(err, LILAC_E_ARG, "%s: the writer failed earlier; not finishing", w->path);
    if (w->cur < w->n_t) {
        w->failed = true;
        return lilac_fail(err, LILAC_E_INTERNAL, "%s: tensor '%s' got %zu of its %zu bytes", w->path,
                          w->t[w->cur].name, w->cur_done, w->t[w->cur].nbytes);
    }
    errno = 0;
    int rc = fflush(w->f);
    int rc2 = fclose(w->f);
    w->f = NULL;
    if (rc || rc2)
        return io_fail(w, err);
    if (rename(w->tmp, w->path) != 0) {
        int e = errno;
        w->failed = true;
        return lilac_fail(err, LILAC_E_IO, "%s: cannot rename %s into place: %s", w->path, w->tmp, strerror(e));
    }
    w->finished = true;
    return LILAC_OK;
}
