/* convert: a Hugging Face checkpoint (qwen3_5_moe / qwen3_5_moe_text,
 * qwen3_moe) to a GGUF file laid out as llama.cpp's convert_hf_to_gguf.py
 * lays it out: the same tensor names, shapes, order and bytes (BF16
 * matrices; F32 norms, router, conv and other small tensors; DeltaNet
 * value heads regrouped, +1 folded into Qwen3.5 norms, ssm_a = -exp(A_log),
 * experts stacked into 3-D tensors), the model's metadata and the BPE
 * tokenizer (when the checkpoint has a tokenizer.json).
 *
 * Tensors stream from the mapped safetensors into the file one row at a
 * time; nothing larger than a row is converted in memory. The output is
 * written to OUT.tmp and renamed to OUT on success; on any failure no file
 * is left behind.
 *
 * The same plans serve `lilac quantize` as a tensor source
 * (lilac_hf_source_*): each tensor streams in any output type, every GGUF
 * row going through that type's row quantizer; `lilac convert` is the
 * source written in its own types (BF16, F32), in its own order. */
#ifndef LILAC_MODEL_CONVERT_H
#define LILAC_MODEL_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf_writer.h"
#include "lilac.h"
#include "util/pool.h"

typedef struct lilac_convert_params {
    lilac_log_fn log; /* notes (skipped tensors, no tokenizer); may be NULL */
    void *log_user;
} lilac_convert_params;

/* in_dir: the checkpoint directory (config.json, safetensors, optional
 * tokenizer.json / tokenizer_config.json); out_path: the GGUF to write.
 * params may be NULL. */
lilac_status lilac_convert_hf_to_gguf(const char *in_dir, const char *out_path,
                                      const lilac_convert_params *params, lilac_error *err);

/* ---- The converter as a source of GGUF tensors ---- */

typedef struct lilac_hf_source lilac_hf_source;

typedef struct lilac_hf_tensor {
    const char *name; /* the GGUF name; lives as long as the source */
    int type;         /* what the converter writes: BF16 (matrices) or F32 */
    int n_dims;
    int64_t ne[4];    /* ggml order */
} lilac_hf_tensor;

/* Read config.json and the safetensors index, and plan every tensor. */
lilac_status lilac_hf_source_open(const char *in_dir, const lilac_convert_params *params, lilac_hf_source **out,
                                  lilac_error *err);
void lilac_hf_source_free(lilac_hf_source *src);
const char *lilac_hf_source_arch(const lilac_hf_source *src); /* "qwen35moe", "qwen3moe" */
void lilac_hf_source_counts(const lilac_hf_source *src, int *n_layer, int *n_expert);
/* The tensors, in the converter's order. */
size_t lilac_hf_source_n_tensors(const lilac_hf_source *src);
lilac_hf_tensor lilac_hf_source_tensor(const lilac_hf_source *src, size_t i);

/* The converter's metadata (hyper-parameters, tokenizer). file_type < 0:
 * exactly as the converter writes it (general.file_type MOSTLY_BF16 in
 * its place); otherwise general.quantization_version and that
 * general.file_type come last, as llama-quantize leaves them. */
lilac_status lilac_hf_source_write_metadata(lilac_hf_source *src, gguf_writer *w, int file_type, lilac_error *err);

/* Tensor i's data as `type` (any type with a row quantizer whose block
 * divides the rows), into w. Values are first those the converter writes
 * (rounded to its type), then quantized row by row, batches of rows
 * split over the pool's threads (pool may be NULL). progress (may be
 * NULL) is told every million or so elements how many were written. */
lilac_status lilac_hf_source_write_tensor(lilac_hf_source *src, size_t i, int type, gguf_writer *w, lilac_pool *pool,
                                          void (*progress)(void *user, int64_t n), void *progress_user,
                                          lilac_error *err);

#endif
