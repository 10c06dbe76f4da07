/* seq: one sequence's state — the KV cache of the full-attention layers,
 * the conv and recurrent state of the DeltaNet layers, its position — and
 * the scratch its forward passes use. */
#ifndef LILAC_ENGINE_SEQ_H
#define LILAC_ENGINE_SEQ_H

#include "model/model.h"

typedef struct lilac_layer_state {
    void *k, *v;  /* attention: [n_ctx][n_head_kv * head_dim] of the sequence's kv_type */
    float *conv;  /* DeltaNet: the last K-1 inputs of the conv, [K-1][channels] */
    float *ssm;   /* DeltaNet: [v_heads][k_dim][v_dim] */
} lilac_layer_state;

/* Activations for up to n_tok tokens at once; sized at creation. */
typedef struct lilac_scratch {
    int n_tok;
    float *x, *xn, *tmp;         /* [n_tok][n_embd] */
    float *big0, *big1, *big2;   /* [n_tok][widest projection] */
    size_t big_floats;           /* floats in each of them */
    float *small0, *small1;      /* [n_tok][max(v_heads, n_expert)] */
    float *ex_in, *ex_out;       /* gathered rows for one expert */
    int *route_idx;              /* [n_tok][n_expert_used] */
    float *route_w;
    int *ex_rows;                /* [n_tok] token rows routed to one expert */
    int *tok_seg, *tok_pos;      /* [n_tok] each token's segment and position */
    float *per_thread;           /* [n_threads][per_thread_floats] */
    size_t per_thread_floats;
    float *attn_parts;           /* [attn_n_parts] partial attention states (model/attn.h) */
    int attn_n_parts;
    const void **attn_kv;        /* [n_tok][2]: each token's K and V cache */
    float *mem;                  /* the floats above live here */
    int *ints;                   /* and the ints here */
} lilac_scratch;

/* Scratch for up to n_tok tokens of sequences of up to n_ctx tokens. */
lilac_status lilac_scratch_init(lilac_scratch *sc, const lilac_model *m, int n_tok, int n_ctx, lilac_error *err);
void lilac_scratch_free(lilac_scratch *sc);

struct lilac_seq {
    lilac_model *m;
    int n_ctx;
    int pos;
    int kv_type;   /* LILAC_KV_F32 / _F16, the model's */
    size_t kv_es;  /* bytes of one KV element */
    lilac_layer_state *layers;
    lilac_scratch sc;
    float *mem; /* one block holds the state */
    size_t mem_floats;
    struct lilac_cuda_seq *cuda; /* the state in device memory when the model runs on CUDA (mem is then NULL) */
};

/* Snapshots of a sequence's state at its position (prefix reuse): the KV
 * rows [0, pos) of the attention layers (as the cache holds them: float32
 * or half) and the DeltaNet conv and recurrent state, in that order, in a
 * buffer of floats (the bytes, rounded up to whole floats). */
size_t lilac_seq_snapshot_floats(const lilac_seq *s);
void lilac_seq_snapshot_save(const lilac_seq *s, float *dst);
/* Load one saved at pos (<= s->n_ctx) from a sequence of the same model. */
void lilac_seq_snapshot_load(lilac_seq *s, const float *src, int pos);

/* The bytes of a sequence's state (KV cache of kv_type, and recurrent state). */
void lilac_state_sizes(const lilac_hparams *hp, int n_ctx, int kv_type, uint64_t *kv_bytes, uint64_t *rec_bytes);

/* The forward pass over n tokens of one sequence (decoder.c). */
lilac_status lilac_decoder_eval(lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                                lilac_error *err);

/* One step over several sequences (decoder.c): segment g feeds tokens
 * [t0, t0 + n) of the step to seq s at its position. Logits are computed
 * for the rows listed in last_rows (n_last of them), written row after
 * row to logits. The caller has checked contexts, tokens and the scratch
 * size (sum of n <= sc->n_tok; per-thread scratch sized for every seq's
 * context). */
typedef struct lilac_dec_seg {
    lilac_seq *s;
    int t0, n;
} lilac_dec_seg;

void lilac_decoder_step_multi(lilac_scratch *sc, const lilac_model *m, const lilac_dec_seg *segs, int n_seg,
                              const int32_t *tokens, const int *last_rows, int n_last, float *logits);

/* Tokens one internal step takes at most; longer inputs run in steps. */
#define LILAC_UBATCH 256

#endif
