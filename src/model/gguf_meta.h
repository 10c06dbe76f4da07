/* gguf_meta: the metadata llama.cpp's converter writes into a GGUF of the
 * MoE architectures lilac knows (qwen35moe, qwen3moe): the hyper-parameter
 * keys, in its order and types, and the BPE tokenizer of a tokenizer.json.
 * Shared by convert (Hugging Face checkpoint -> GGUF) and synth (a GGUF of
 * random weights in a published model's shape).
 *
 * Every key goes through a gm_out, which passes it to a gguf_writer (when
 * it has one) and counts the bytes it takes in the file, so that a file's
 * size can be planned exactly without writing it. */
#ifndef LILAC_MODEL_GGUF_META_H
#define LILAC_MODEL_GGUF_META_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf_writer.h"
#include "lilac.h"

typedef struct gm_out {
    gguf_writer *w;  /* NULL: only count */
    uint64_t bytes;  /* bytes of the key/value pairs so far, as serialized */
    uint64_t n_kv;
} gm_out;

lilac_status gm_u32(gm_out *o, const char *key, uint32_t v, lilac_error *err);
lilac_status gm_f32(gm_out *o, const char *key, float v, lilac_error *err);
lilac_status gm_bool(gm_out *o, const char *key, bool v, lilac_error *err);
lilac_status gm_str(gm_out *o, const char *key, const char *v, lilac_error *err);
/* n numeric or bool elements of elem_type (see gguf_writer_kv_arr). */
lilac_status gm_arr(gm_out *o, const char *key, gguf_vtype elem_type, const void *data, size_t n, lilac_error *err);
/* n strings; lens may be NULL (then each is NUL-terminated). */
lilac_status gm_str_arr(gm_out *o, const char *key, const char *const *strs, const size_t *lens, size_t n,
                        lilac_error *err);

/* A key/value pair of a GGUF file as it is (any type). */
lilac_status gm_copy_kv(gm_out *o, const gguf_kv *kv, lilac_error *err);

/* Bytes of a GGUF v3 file's header: magic, counts, the key/value pairs
 * counted in o, and the infos of tensors with these names and dimension
 * counts, padded to the alignment (32). */
uint64_t gm_tensor_info_bytes(const char *name, int n_dims);
uint64_t gm_header_bytes(const gm_out *o, uint64_t tensor_info_bytes);

/* The hyper-parameters llama.cpp's converter writes. */
typedef struct gm_hparams {
    const char *arch; /* "qwen35moe" or "qwen3moe" */
    bool q35;         /* the qwen35moe keys (shared expert, DeltaNet, layer pattern) */
    const char *name; /* general.name */
    const char *size_label;
    uint32_t file_type; /* general.file_type: LLAMA_FTYPE_* */
    int64_t n_layer, n_ctx, n_embd, ff, n_head, n_head_kv, head_dim;
    int64_t n_expert, n_used, eff, sff;
    int64_t K, dk, nk, nv, dv, interval, rope_dims; /* qwen35moe */
    int64_t sections[4];
    bool has_sections, norm_topk;
    float eps, theta;
    const uint8_t *is_ssm; /* n_layer flags (qwen35moe) */
    /* Leave out general.file_type and general.quantization_version, for
     * gm_write_type_keys to write last, where llama-quantize puts them. */
    bool type_keys_last;
} gm_hparams;

/* llama.cpp's general.file_type values. */
enum {
    GM_FTYPE_ALL_F32 = 0,
    GM_FTYPE_MOSTLY_Q8_0 = 7,
    GM_FTYPE_MOSTLY_Q4_K_M = 15,
    GM_FTYPE_MOSTLY_BF16 = 32,
};

lilac_status gm_write_hparams(gm_out *o, const gm_hparams *hp, lilac_error *err);
/* general.quantization_version, then general.file_type. */
lilac_status gm_write_type_keys(gm_out *o, uint32_t file_type, lilac_error *err);

/* gguf-py's size label "NxCOUNT" (e.g. "8x4.7M"): n_expert and the
 * parameters of the model with one expert per layer. */
void gm_size_label(int64_t n_expert, uint64_t n_params_one_expert, char *buf, size_t size);

/* The BPE tokenizer of tokenizer.json at path, as gguf-py writes it:
 * tokens (ids up to vocab - 1, padded with "[PAD<id>]" UNUSED tokens),
 * token types, merges, special token ids, add_*_token flags and the chat
 * template. dir: where tokenizer_config.json and chat_template.jinja are
 * looked for (optional files); cfg / root: config.json's text config and
 * root object for *_token_id fallbacks (may be NULL). When fixed_vocab,
 * a tokenizer with more than vocab tokens is an error; otherwise the
 * vocabulary grows to hold them. */
lilac_status gm_write_tokenizer_json(gm_out *o, const char *path, const char *dir, json_t *cfg, json_t *root,
                                     int64_t vocab, bool fixed_vocab, lilac_error *err);

#endif
