/* safetensors: reader for Hugging Face safetensors files: one file, or a
 * directory of shards listed by model.safetensors.index.json. Tensors point
 * into the read-only file maps; nothing is copied. */
#ifndef LILAC_FORMAT_SAFETENSORS_H
#define LILAC_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;       /* owned */
    int dtype;        /* lilac_dtype: F32, F16, BF16, F64, I8..I64, U8..U64, BOOL, F8_* */
    int n_dims;       /* 0..ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* row-major: shape[n_dims-1] is the fastest */
    const void *data; /* into the map of file `file` */
    size_t nbytes;
    int file;
} st_tensor;

typedef struct st_set st_set;

/* Parse one safetensors image held in memory; name is used in messages.
 * The result points into base, which must outlive it. Used by the fuzzer. */
lilac_status st_parse(const uint8_t *base, size_t size, const char *name,
                      st_set **out, lilac_error *err);

/* path: a .safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json plus the shards it names. */
lilac_status st_open(const char *path, st_set **out, lilac_error *err);
void st_close(st_set *s);

size_t st_n_tensors(const st_set *s);
const st_tensor *st_tensor_at(const st_set *s, size_t i);
const st_tensor *st_find(const st_set *s, const char *name); /* NULL if absent */
const char *st_file_path(const st_set *s, int file);         /* for messages */

/* Tensors are ordered by name (st_tensor_at walks them so). The files are
 * the shards in order of first mention in the index, or the one file. */
int st_n_files(const st_set *s);
/* A file's "__metadata__" value for key, or NULL if absent. */
const char *st_metadata(const st_set *s, int file, const char *key);

#endif
