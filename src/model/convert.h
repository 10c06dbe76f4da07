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
 * is left behind. */
#ifndef LILAC_MODEL_CONVERT_H
#define LILAC_MODEL_CONVERT_H

#include "lilac.h"

typedef struct lilac_convert_params {
    lilac_log_fn log; /* notes (skipped tensors, no tokenizer); may be NULL */
    void *log_user;
} lilac_convert_params;

/* in_dir: the checkpoint directory (config.json, safetensors, optional
 * tokenizer.json / tokenizer_config.json); out_path: the GGUF to write.
 * params may be NULL. */
lilac_status lilac_convert_hf_to_gguf(const char *in_dir, const char *out_path,
                                      const lilac_convert_params *params, lilac_error *err);

#endif
