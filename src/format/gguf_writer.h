/* gguf_writer: a streaming writer of GGUF v3 files (llama.cpp's format).
 *
 * Use: gguf_writer_open; add metadata (gguf_writer_kv_*) and tensor infos
 * (gguf_writer_add_tensor) in the order they should appear; then
 * gguf_writer_begin_data writes the header, and the tensors' bytes are
 * streamed in the order their infos were added (gguf_writer_write, any
 * number of calls per tensor; the alignment padding after each tensor is
 * written by the writer); gguf_writer_finish checks that every tensor got
 * all its bytes and renames the file into place.
 *
 * The data goes to PATH.tmp; it becomes PATH only on a successful finish.
 * Freeing a writer that was not finished (after any error) removes the
 * temporary file, so no partial file is ever left behind. Errors name the
 * file and the problem. Only the metadata and tensor infos are kept in
 * memory; tensor data passes straight through. */
#ifndef LILAC_FORMAT_GGUF_WRITER_H
#define LILAC_FORMAT_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "lilac.h"

typedef struct gguf_writer gguf_writer;

/* Create PATH.tmp for writing. */
lilac_status gguf_writer_open(const char *path, gguf_writer **out, lilac_error *err);
/* Close; removes PATH.tmp unless gguf_writer_finish succeeded. NULL is fine. */
void gguf_writer_free(gguf_writer *w);

/* Metadata. Keys must be unique. A "general.alignment" U32 sets the data
 * alignment (default 32; a nonzero power of two). */
lilac_status gguf_writer_kv_u8(gguf_writer *w, const char *key, uint8_t v, lilac_error *err);
lilac_status gguf_writer_kv_i8(gguf_writer *w, const char *key, int8_t v, lilac_error *err);
lilac_status gguf_writer_kv_u16(gguf_writer *w, const char *key, uint16_t v, lilac_error *err);
lilac_status gguf_writer_kv_i16(gguf_writer *w, const char *key, int16_t v, lilac_error *err);
lilac_status gguf_writer_kv_u32(gguf_writer *w, const char *key, uint32_t v, lilac_error *err);
lilac_status gguf_writer_kv_i32(gguf_writer *w, const char *key, int32_t v, lilac_error *err);
lilac_status gguf_writer_kv_u64(gguf_writer *w, const char *key, uint64_t v, lilac_error *err);
lilac_status gguf_writer_kv_i64(gguf_writer *w, const char *key, int64_t v, lilac_error *err);
lilac_status gguf_writer_kv_f32(gguf_writer *w, const char *key, float v, lilac_error *err);
lilac_status gguf_writer_kv_f64(gguf_writer *w, const char *key, double v, lilac_error *err);
lilac_status gguf_writer_kv_bool(gguf_writer *w, const char *key, bool v, lilac_error *err);
lilac_status gguf_writer_kv_str(gguf_writer *w, const char *key, const char *v, lilac_error *err);
/* An array of n numeric or bool elements of elem_type (not STRING/ARRAY),
 * given in host order as an array of that C type (bool: one byte each). */
lilac_status gguf_writer_kv_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *data,
                                size_t n, lilac_error *err);
/* An array of n strings; lens may be NULL (then each is NUL-terminated). */
lilac_status gguf_writer_kv_str_arr(gguf_writer *w, const char *key, const char *const *strs,
                                    const size_t *lens, size_t n, lilac_error *err);

/* A tensor info: ne in ggml order (ne[0] fastest), n_dims 1..4. Its size
 * follows from type and ne; ne[0] must be a whole number of blocks. */
lilac_status gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims,
                                    const int64_t *ne, lilac_error *err);
size_t gguf_writer_tensor_nbytes(const gguf_writer *w, size_t i);
size_t gguf_writer_n_tensors(const gguf_writer *w);

/* Write the header, metadata and tensor infos; after this only tensor data. */
lilac_status gguf_writer_begin_data(gguf_writer *w, lilac_error *err);
/* The next n bytes of tensor data; may span tensors. Writing more than the
 * tensors hold is an error. */
lilac_status gguf_writer_write(gguf_writer *w, const void *data, size_t n, lilac_error *err);
/* Check that all data was written, flush, close and rename PATH.tmp to PATH. */
lilac_status gguf_writer_finish(gguf_writer *w, lilac_error *err);

#endif
