/* gguf: reader for GGUF v2/v3 model files (llama.cpp's format), including
 * split files (NAME-00001-of-0000N.gguf). Tensors are pointers into the
 * read-only file maps; nothing is copied. Every length, count and offset read
 * from a file is checked against the file's size before use. */
#ifndef LILAC_FORMAT_GGUF_H
#define LILAC_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

typedef enum gguf_vtype {
    GGUF_VT_U8 = 0,
    GGUF_VT_I8 = 1,
    GGUF_VT_U16 = 2,
    GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4,
    GGUF_VT_I32 = 5,
    GGUF_VT_F32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_U64 = 10,
    GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
} gguf_vtype;

/* A string inside the map: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    char *key;          /* owned, NUL-terminated */
    gguf_vtype type;
    union {
        uint64_t u;     /* U8..U64, BOOL (0/1) */
        int64_t i;      /* I8..I64 */
        double f;       /* F32, F64 */
        gguf_str s;     /* STRING */
        struct {
            gguf_vtype type; /* element type; never ARRAY (nested arrays are rejected) */
            uint64_t n;
            const uint8_t *data; /* numeric elements, packed little-endian, unaligned */
            gguf_str *strs;      /* owned: the n strings, for a string array */
        } arr;
    } v;
} gguf_kv;

typedef struct gguf_tensor {
    char *name;          /* owned */
    int type;            /* lilac_dtype (ggml type id) */
    int n_dims;          /* 1..4 */
    int64_t ne[4];       /* ggml order: ne[0] is the fastest dimension; unused dims are 1 */
    const void *data;    /* into the map of file `file` */
    size_t nbytes;
    int file;            /* index of the split file holding it */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Parse a GGUF image held in memory (base, size); name is used in messages.
 * The result points into base, which must outlive it. Used by the fuzzer. */
lilac_status gguf_parse(const uint8_t *base, size_t size, const char *name,
                        gguf_file **out, lilac_error *err);

/* Map and parse path; when it is the first of a split set
 * (split.count > 1), the other parts are opened too and their tensors
 * merged. Errors name the file and the problem. */
lilac_status gguf_open(const char *path, gguf_file **out, lilac_error *err);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
size_t gguf_alignment(const gguf_file *f);
int gguf_n_files(const gguf_file *f);
const char *gguf_file_path(const gguf_file *f, int i); /* for messages */

size_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key); /* NULL if absent */

/* Typed getters: LILAC_OK and *out set, or an error naming the key when it is
 * absent or of an incompatible type. Integer getters accept any integer type
 * whose value fits. */
lilac_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, lilac_error *err);
lilac_status gguf_get_f64(const gguf_file *f, const char *key, double *out, lilac_error *err); /* F32/F64 */
lilac_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, lilac_error *err);
/* Returns a NUL-terminated copy the caller frees. */
lilac_status gguf_get_str(const gguf_file *f, const char *key, char **out, lilac_error *err);

/* Element i of a numeric array value as u64/i64/f64 (converted); false when
 * out of range or not numeric. */
bool gguf_arr_u64(const gguf_kv *kv, uint64_t i, uint64_t *out);
bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
bool gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out);

size_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

#endif
