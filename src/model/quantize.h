/* quantize: `lilac quantize IN OUT TYPE` — a Hugging Face checkpoint
 * directory or a GGUF file to a GGUF quantized as llama.cpp's
 * llama-quantize quantizes it (without an importance matrix):
 *
 * - the same type for every tensor: llama.cpp's rules of which tensors are
 *   quantized at all (matrices whose name ends in "weight"; not norms,
 *   routers, convolutions), of its mixes (llama_tensor_get_type: output at
 *   Q6_K, attn_v / attn_qkv and ffn_down with more bits in the layers
 *   use_more_bits picks, attention at Q8_0 for 8-expert models, ...) and of
 *   the fallback types of rows that are not a whole number of blocks;
 * - the same bytes: the reference quantizers (kernels/cpu/quantize.h);
 * - the same file: tensors in llama.cpp's order (by layer, then name), the
 *   input's metadata (or, from a checkpoint, the converter's) with
 *   general.quantization_version 2 and general.file_type last.
 *
 * From a checkpoint the tensors stream through convert.c's plans, so the
 * result is what quantizing the converter's BF16 GGUF gives, byte for byte.
 * A quantized GGUF is dequantized and quantized again (with a warning), as
 * llama-quantize --allow-requantize does. The output is written to OUT.tmp
 * and renamed; on any failure no file is left. */
#ifndef LILAC_MODEL_QUANTIZE_H
#define LILAC_MODEL_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

typedef struct lilac_quantize_params {
    lilac_log_fn log; /* warnings (requantizing, fallback types) and notes; may be NULL */
    void *log_user;
    /* Called before each tensor and every million or so elements: the
     * tensor being written, elements written so far of the total. May be
     * NULL. */
    void (*progress)(void *user, const char *tensor, uint64_t done, uint64_t total);
    void *progress_user;
    int n_threads; /* threads that quantize rows; 0: one per online CPU. The bytes do not depend on it. */
} lilac_quantize_params;

/* What TYPE may be (case does not matter):
 *   Q8_0, Q6_K, Q4_0  llama.cpp's file types of those names (its mix
 *                     rules apply: e.g. output.weight at Q6_K for Q4_0)
 *   Q4_K_M, Q5_K_M, Q4_K_S, Q5_K_S   llama.cpp's k-quant mixes
 *   Q4_K, Q5_K        every quantized tensor of that type (llama-quantize
 *                     --pure of Q4_K_S / Q5_K_S), fallbacks aside
 *   BF16, F16, F32    the matrices in that type, the rest as they are
 * A space-separated list for messages. */
const char *lilac_quantize_type_names(void);
/* general.file_type of a TYPE (llama_ftype), or -1 when TYPE is unknown. */
int lilac_quantize_file_type(const char *type);

lilac_status lilac_quantize(const char *in_path, const char *out_path, const char *type,
                            const lilac_quantize_params *params, lilac_error *err);

/* The per-tensor decision alone. tensors: all tensors of a model (any
 * order; they are visited in llama.cpp's), each with its name, its type in
 * the input and its ggml shape; out[i] receives tensor i's output type.
 * n_layer and n_expert are the model's block_count and expert_count.
 * Warnings (fallback types) go to log, which may be NULL. */
typedef struct lilac_qtensor {
    const char *name;
    int type;
    int64_t ne[4];
} lilac_qtensor;

lilac_status lilac_quantize_choose_types(const char *type, int n_layer, int n_expert, const lilac_qtensor *tensors,
                                         size_t n, int *out, lilac_log_fn log, void *log_user, lilac_error *err);

#endif
