/* loader: binds a model's weights to tensors of a GGUF file or a Hugging
 * Face checkpoint, checking each one's shape and type. The architecture
 * files name tensors in both layouts; this module finds them, checks them
 * and turns them into matrix views (no copy) or small float32 arrays. */
#ifndef LILAC_MODEL_LOADER_H
#define LILAC_MODEL_LOADER_H

#include <jansson.h>

#include "model/model.h"

typedef struct ld_tensor {
    const char *name;
    int type;
    int n_dims;
    int64_t shape[8]; /* row-major: shape[n_dims - 1] is the fastest dimension */
    const void *data;
    size_t nbytes;
    const char *file; /* the file holding it, for messages */
    size_t index;     /* in its source, for the used-tensor bookkeeping */
} ld_tensor;

typedef struct lilac_loader {
    lilac_model *m;
    lilac_error *err;
    bool is_gguf;
    gguf_file *gguf;
    st_set *st;
    const char *hf_prefix; /* "model." or "model.language_model." */
    json_t *config;        /* HF: the text model's config object (borrowed) */
    /* MLX checkpoints (model/loader_mlx.c) */
    const char *hf_head_prefix; /* before HF's lm_head.weight: NULL, or MLX's "language_model." */
    json_t *mlx_quant;          /* the config's affine quantization block (borrowed), or NULL */
    bool mlx_layout;            /* saved by mlx-lm: qwen3.5 norms hold their +1 already */
    uint8_t *used;         /* per source tensor: bound to the model */
    char name[512];        /* scratch for composed names */
} lilac_loader;

/* Names: `il` >= 0 names a layer tensor ("blk.IL.NAME" in GGUF,
 * "PREFIX layers.IL.NAME" in HF); il < 0 a global one ("NAME" /
 * "PREFIX NAME", except HF's lm_head.weight which has no prefix).
 * Either name may be NULL where that layout has no such tensor. */

/* Find a tensor; LILAC_E_FORMAT "missing tensor" if absent. */
lilac_status ld_get(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name,
                    ld_tensor *out);
/* Whether it exists (no error). */
bool ld_has(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name);

/* A [rows, cols] matrix view. */
lilac_status ld_mat(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name,
                    int64_t rows, int64_t cols, lilac_mat *out);
/* n values as float32 owned by the model; add is added to each (the +1 of
 * zero-centred norms in HF checkpoints). Any shape with n elements. */
lilac_status ld_vec(lilac_loader *ld, int il, const char *gguf_name, const char *hf_name,
                    int64_t n, float add, float **out);
/* A view of matrix e of a stacked [E, rows, cols] tensor, from row r0. */
lilac_status ld_stacked(lilac_loader *ld, const ld_tensor *t, int64_t n_mats, int64_t rows,
                        int64_t cols, int64_t r0, int64_t e, lilac_mat *out);
/* The routed experts of layer il: GGUF's stacked ffn_*_exps, HF's per-expert
 * mlp.experts.E.*_proj, or HF's fused mlp.experts.gate_up_proj/down_proj. */
lilac_status ld_experts(lilac_loader *ld, int il, int n_expert, int64_t n_embd, int64_t ff,
                        lilac_layer_weights *lw);

/* GGUF metadata "ARCH.KEY" and HF config values. */
lilac_status ld_u32(lilac_loader *ld, const char *gguf_key, const char *hf_key, uint32_t *out);
lilac_status ld_u32_or(lilac_loader *ld, const char *gguf_key, const char *hf_key, uint32_t dflt, uint32_t *out);
/* The same as non-negative ints (values past INT32_MAX are errors). */
lilac_status ld_int(lilac_loader *ld, const char *gguf_key, const char *hf_key, int *out);
lilac_status ld_int_or(lilac_loader *ld, const char *gguf_key, const char *hf_key, int dflt, int *out);
/* A GGUF flag "ARCH.KEY", stored as BOOL (as llama.cpp writes flags) or
 * as an integer; dflt when absent. */
lilac_status ld_gguf_flag(lilac_loader *ld, const char *gguf_key, bool dflt, bool *out);
/* What every MoE decoder has: layers, widths, heads, experts, context, eps. */
lilac_status ld_moe_hparams(lilac_loader *ld, lilac_hparams *hp);
lilac_status ld_f32(lilac_loader *ld, const char *gguf_key, const char *hf_key, float *out);
/* HF: a key of rope_parameters (transformers 5) or the top level (older configs). */
lilac_status ld_hf_rope_f32(lilac_loader *ld, const char *key, bool required, float dflt, float *out);
bool ld_hf_bool(lilac_loader *ld, const char *key, bool dflt);

/* The file hyper-parameters come from, for messages: the GGUF file or the
 * checkpoint's config.json (in ld->name: use before composing another name). */
const char *ld_hp_file(lilac_loader *ld);

/* Architecture entry points. */
lilac_status qwen35moe_load(lilac_loader *ld);
lilac_status qwen3moe_load(lilac_loader *ld);



/* MLX checkpoints (model/loader_mlx.c): safetensors directories saved by
 * mlx / mlx-lm, affine-quantized (NAME.weight packed uint32 codes with
 * NAME.scales and NAME.biases) or not. */
/* After the prefix is guessed: picks MLX's prefixes ("language_model.model."
 * and "language_model." before lm_head) and reads the quantization block of
 * config.json (`root`: "quantization" or "quantization_config"). */
lilac_status ld_mlx_detect(lilac_loader *ld, json_t *root);
/* Whether t is an MLX-quantized weight (packed uint32, or with NAME.scales). */
bool ld_mlx_quantized(lilac_loader *ld, const ld_tensor *t);
/* If t is MLX-quantized: its last dimension in values instead of words;
 * fails when its quantization is one lilac cannot read. */
lilac_status ld_mlx_unpack_shape(lilac_loader *ld, ld_tensor *t);
/* ld_mat / ld_vec for an MLX-quantized tensor t (from ld_get). */
lilac_status ld_mlx_mat(lilac_loader *ld, const ld_tensor *t, int64_t rows, int64_t cols, lilac_mat *out);
lilac_status ld_mlx_vec(lilac_loader *ld, const ld_tensor *t, int64_t n, float add, float **out);
/* MLX's stacked experts mlp.switch_mlp.{gate,up,down}_proj [E, rows, ...],
 * quantized or not. */
lilac_status ld_mlx_experts(lilac_loader *ld, int il, int n_expert, int64_t n_embd, int64_t ff,
                            lilac_layer_weights *lw);

/* Shared bindings: both architectures name these tensors alike. */
/* Full attention of layer il (q/k norms get `norm_add`). */
lilac_status ld_attention(lilac_loader *ld, int il, float norm_add, lilac_layer_weights *lw);
/* Router, routed experts and (when shared_ff > 0) the gated shared expert. */
lilac_status ld_moe(lilac_loader *ld, int il, lilac_layer_weights *lw);
/* Embedding, final norm and output head (tied when the file has none). */
lilac_status ld_globals(lilac_loader *ld, float norm_add);
/* Checks common to every architecture's hyper-parameters, then makes the
 * layer table the bindings fill. */
lilac_status ld_prepare(lilac_loader *ld);
#endif
