/* synth: a GGUF of random weights in the exact shape of a published model
 * (Qwen3.6-35B-A3B, Qwen3-30B-A3B, or tiny ones for tests: "tiny" and
 * "tiny-qwen3moe", the shapes of the test fixtures), so speed and
 * memory can be measured on the real shape without the real weights.
 *
 * The file is laid out as llama.cpp lays out that model: the converter's
 * metadata keys (gguf_meta), tensor names and shapes; F32 and BF16 in the
 * converter's tensor order, Q8_0 and Q4_K_M as llama-quantize writes its
 * files (tensors by layer, then by name; general.quantization_version and
 * general.file_type last; ffn_gate_inp_shexp 1-D [n_embd] where the
 * converter writes [n_embd, 1]). Type mixes:
 *   F32     every tensor F32 (general.file_type 0)
 *   BF16    matrices BF16, the small tensors F32 (as the converter writes)
 *   Q8_0    matrices Q8_0, the small tensors F32
 *   Q4_K_M  as the benchmark file has it: Q4_K for the matrices, token_embd
 *           included; Q6_K for attn_v, ffn_down_shexp, output, and
 *           ffn_down_exps of even layers (0, 2, 4, ...); Q8_0 for ssm_alpha
 *           and ssm_beta. (llama-quantize's own rule picks other layers
 *           for Q6_K ffn_down_exps, 0-4, 7, 10, ..., 34, 35-39 of 40: as
 *           many, so the same size.)
 * For qwen3.6-35b-a3b the Q4_K_M tensors come to 21,103,667,712 bytes,
 * 19.65 GiB, the size llama.cpp reports for the published Q4_K_M file
 * (its "file size" counts the tensors): Q4_K 301 tensors 15.0375 GiB
 * (token_embd included), Q6_K 71 tensors 4.5301 GiB, Q8_0 60 tensors
 * 0.0039 GiB, F32 301 tensors 0.0828 GiB; the file adds its header
 * (5.4 MiB with the byte-level vocabulary) for 19.66 GiB on disk.
 * "Small tensors" are always F32: the norms, ssm_conv1d, ssm_a, ssm_dt and
 * the routers (ffn_gate_inp, ffn_gate_inp_shexp). A matrix whose rows are
 * not whole blocks of its type falls back to Q8_0, then to BF16 (none of
 * the presets has one).
 *
 * Values: random, from xoshiro256** seeded by the seed and the tensor's
 * index (so a file is a pure function of preset, mix, tokenizer and seed),
 * scaled so that a forward pass stays finite: matrices have standard
 * deviation 0.5 / sqrt(fan_in), the embedding 0.02, norms 1 +- 0.02,
 * routers 0.02, ssm_a = -exp(z / 2) < 0. Block types hold random quants
 * with their fp16 / int8 scales set so that every dequantized weight has
 * that deviation (Q4_K / Q5_K: all sub-block scales 8 / 4, mins 60 / 62,
 * dmin = d, centring the weights on 0; Q6_K: scales 4).
 *
 * Tokenizer (the tokenizer.ggml.* keys): from a tokenizer.json (or a
 * checkpoint directory holding one; tokenizer_config.json and
 * chat_template.jinja beside it are used as the converter uses them), or
 * copied from a GGUF file's tokenizer.* keys; padded to the preset's
 * vocabulary with "[PAD<id>]" tokens of type UNUSED (5), as llama.cpp pads.
 * Without one, a byte-level vocabulary: the 256 byte tokens of GPT-2's byte
 * alphabet, <|endoftext|> (256, padding), <|im_start|> (257), <|im_end|>
 * (258, end of sequence), no merges and no chat template, then padding.
 *
 * Writing streams tensor by tensor through a fixed 4 MiB buffer into
 * OUT.tmp, renamed to OUT at the end; on any error or interruption no file
 * is left. A disk without room for the whole file is refused up front. */
#ifndef LILAC_MODEL_SYNTH_H
#define LILAC_MODEL_SYNTH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

typedef struct lilac_synth_params {
    const char *preset;    /* "qwen3.6-35b-a3b", "qwen3-30b-a3b", "tiny", "tiny-qwen3moe" */
    const char *type;      /* "F32", "BF16", "Q8_0", "Q4_K_M" (any case) */
    const char *tokenizer; /* tokenizer.json, a directory holding one, or a GGUF; NULL: byte-level */
    uint64_t seed;
    bool progress;         /* a percentage line on stderr, updated in place */
    /* Set (e.g. by a SIGINT handler) to stop writing; may be NULL. */
    const volatile sig_atomic_t *interrupt;
    lilac_log_fn log;      /* notes; may be NULL */
    void *log_user;
} lilac_synth_params;

typedef struct lilac_synth_tensor {
    char name[64];
    int type; /* lilac_dtype */
    int n_dims;
    int64_t ne[4];   /* ggml order */
    uint64_t offset; /* of its data, from the start of the file */
    uint64_t nbytes;
    int role;        /* what its values are (internal) */
} lilac_synth_tensor;

typedef struct lilac_synth_plan {
    const char *preset, *arch, *mix; /* static strings */
    int n_layer;
    uint8_t is_ssm[LILAC_MAX_LAYERS]; /* per layer: Gated DeltaNet (1) or full attention (0) */
    int64_t n_vocab;
    size_t n_tensors;
    lilac_synth_tensor *tensors;
    uint64_t n_kv;         /* metadata keys */
    uint64_t header_bytes; /* header, metadata and tensor infos, padded */
    uint64_t data_bytes;   /* tensor data with its alignment padding */
    uint64_t file_bytes;   /* the whole file */
    uint64_t n_params;
} lilac_synth_plan;

/* The presets, by index (NULL past the end). */
const char *lilac_synth_preset_name(size_t i);
/* The type mixes, by index (NULL past the end). */
const char *lilac_synth_mix_name(size_t i);

/* What the file would hold, without writing it (the tokenizer is read, as
 * its metadata counts toward the size). Free with lilac_synth_plan_free. */
lilac_status lilac_synth_plan_new(const lilac_synth_params *p, lilac_synth_plan **out, lilac_error *err);
void lilac_synth_plan_free(lilac_synth_plan *plan);

/* Write the file. *plan_out (if not NULL) receives the plan it followed. */
lilac_status lilac_synth_write(const lilac_synth_params *p, const char *out_path, lilac_synth_plan **plan_out,
                               lilac_error *err);

#endif
