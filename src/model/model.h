/* model: the loaded model — hyper-parameters, weights bound to the mapped
 * file, and the CPU resources that run it. One struct for the weights of a
 * layer, as in llama2.c; which members are set depends on the layer kind. */
#ifndef LILAC_MODEL_MODEL_H
#define LILAC_MODEL_MODEL_H

#include <stdarg.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "kernels/cpu/cpu.h"
#include "kernels/mat.h"
#include "lilac.h"
#include "util/pool.h"

typedef struct lilac_layer_weights {
    float *attn_norm; /* [n_embd], applied as x * w (a +1 is folded in at load where needed) */
    float *post_norm; /* [n_embd] */

    /* full attention */
    lilac_mat wq;     /* [n_head * head_dim * (gate ? 2 : 1), n_embd]: per head q then gate */
    lilac_mat wk, wv; /* [n_head_kv * head_dim, n_embd] */
    lilac_mat wo;     /* [n_embd, n_head * head_dim] */
    float *q_norm, *k_norm; /* [head_dim] */

    /* Gated DeltaNet */
    lilac_mat ssm_qkv;   /* [2 * k_heads * k_dim + v_heads * v_dim, n_embd] */
    lilac_mat ssm_z;     /* [v_heads * v_dim, n_embd] */
    lilac_mat ssm_alpha; /* [v_heads, n_embd] (in_proj_a) */
    lilac_mat ssm_beta;  /* [v_heads, n_embd] (in_proj_b) */
    lilac_mat ssm_out;   /* [n_embd, v_heads * v_dim] */
    float *ssm_conv;     /* [conv channels][kernel] */
    float *ssm_a;        /* [v_heads]: -exp(A_log) */
    float *ssm_dt;       /* [v_heads]: dt_bias */
    float *ssm_norm;     /* [v_dim] */

    /* mixture of experts */
    lilac_mat router;                     /* [n_expert, n_embd] */
    lilac_mat *exp_gate, *exp_up, *exp_down; /* n_expert each; owned arrays of views */
    lilac_mat sh_gate, sh_up, sh_down;    /* shared expert (shared_ff > 0) */
    float *sh_gate_inp;                   /* [n_embd]: the shared expert's sigmoid gate */
} lilac_layer_weights;

typedef struct lilac_weights {
    lilac_mat tok_embd; /* [n_vocab, n_embd] */
    lilac_mat output;   /* [n_vocab, n_embd]; the embedding itself when tied */
    float *output_norm; /* [n_embd] */
    lilac_layer_weights *layers;
    /* How DeltaNet value heads map to key heads. HF checkpoints keep value
     * heads grouped by key head (j / ratio); llama.cpp's converter reorders
     * them so head j uses key head j % k_heads. */
    bool ssm_v_tiled;
} lilac_weights;

typedef struct lilac_alloc_list {
    void **ptrs;
    size_t n, cap;
} lilac_alloc_list;

struct lilac_model {
    lilac_hparams hp;
    const char *arch_name;
    const char *format;
    char *path;
    lilac_weights w;

    gguf_file *gguf; /* owns the maps the weights point into (one of the two) */
    st_set *st;

    lilac_pool *pool;
    const lilac_cpu_kernels *kern;
    struct lilac_cuda_model *cuda; /* set when the model runs on a CUDA GPU (decoder_cuda.c) */
    lilac_model_params params;

    lilac_type_count counts[16];
    size_t n_counts;
    uint64_t weight_bytes, n_params;
    uint64_t expert_bytes; /* of the routed experts, within weight_bytes */

    void *repack_mem; /* the repacked Q4_K / Q6_K matrices (model/repack.c), or NULL */
    size_t repack_bytes;
    bool prepared; /* lilac_model_prepare ran (model/repack.c) */

    lilac_alloc_list owned; /* small arrays converted at load */
    uint64_t owned_bytes;

    struct lilac_tokenizer *tokenizer; /* loaded on first use (engine/text.c) */
    char *chat_template;               /* likewise; NULL until asked */
    bool chat_template_loaded;
};

/* Frees what engine/text.c attached to the model. */
void lilac_model_free_text(lilac_model *m);

/* Memory owned by the model, freed with it. */
void *lilac_model_alloc(lilac_model *m, size_t bytes);

/* Messages for the user (notes about skipped tensors and the like). */
void lilac_model_log(const lilac_model *m, lilac_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
