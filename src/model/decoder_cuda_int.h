/* decoder_cuda_int: what the CUDA decoder's files share (decoder_cuda.c
 * the model, sequences and the one-token step): the device copy of the
 * weights, the activation buffers and a sequence's device state. */
#ifndef LILAC_MODEL_DECODER_CUDA_INT_H
#define LILAC_MODEL_DECODER_CUDA_INT_H

#include <stdbool.h>

#include "kernels/cuda/cuda.h"
#include "model/decoder_cuda.h"

typedef struct cuda_layer {
    float *attn_norm, *post_norm, *q_norm, *k_norm;
    lilac_cuda_mat wq, wk, wv, wo;
    lilac_cuda_mat ssm_qkv, ssm_z, ssm_alpha, ssm_beta, ssm_out;
    /* where the two have one type (up_joined): one allocation, wq's rows then wk's (and so on), as one matrix
     * for one product; the views above into it. data NULL: apart. */
    lilac_cuda_mat wqk, ssm_qkvz, ssm_ab, sh_gu;
    float *ssm_conv, *ssm_a, *ssm_dt, *ssm_norm;
    lilac_cuda_mat router, exp_gate, exp_up, exp_down, sh_gate, sh_up, sh_down;
    size_t gate_stride, up_stride, down_stride;
    float *sh_gate_inp;
    bool gu_fused; /* up expert e stored at gate expert n_expert + e: one product for both */
    bool router_gate_row; /* the shared expert's gate_inp stored as the router's row n_expert (up_router) */
} cuda_layer;

struct lilac_cuda_model {
    lilac_cuda_stream *stream;
    lilac_cuda_stream *aux; /* the step's second branch (products independent of the main chain) */
    void *ev[2];            /* fork and join events */
    lilac_cuda_mat tok_embd, output;
    float *output_norm;
    cuda_layer *layers;
    int n_layer;
    void **allocs; /* every device allocation, freed together */
    size_t n_allocs, cap_allocs;
    size_t bytes;
    /* one token's activations (steps run one after another on the stream) */
    float *x, *xn, *tmp, *qg, *kb, *vb, *att, *qkv, *conv, *z, *a, *b, *o, *rl, *rw, *gbuf, *ubuf, *ex, *shg, *shu,
        *sho, *logits, *att_part;
    int32_t *tok, *idx; /* tok[0]: the token, tok[1]: its position */
    unsigned *count;    /* [0] the norm+router kernel's blocks done (lilac_cuda_route_args), [1] the sum's */
    float *part;        /* the grid sum's blocks' sums of squares (lilac_cuda_moe_sum_norm_grid) */
    float *logits_host; /* pinned (host), n_vocab: the logits' way down */
    char device[160];
    struct cuda_prefill *pf; /* the prefill's activations (decoder_cuda_prefill.c), allocated at its first use */
    int pf_rows;             /* their rows, as the memory plan chose them (lilac_cuda_model_pf_rows_set; 0: none) */
};

struct lilac_cuda_seq {
    float **k, **v, **conv, **ssm; /* per layer (dev) */
    float *scores;                 /* [n_head][n_ctx] (dev) */
    void *graph;                   /* the decode step captured for this sequence's buffers */
    bool graph_failed;
    int steps;
    void *block;
    size_t bytes;
    int n_ctx;
};

/* p = bytes of device memory owned by cm (freed with it), counted in cm->bytes. */
lilac_status lilac_cuda_model_alloc(lilac_cuda_model *cm, void **p, size_t bytes, lilac_error *err);

struct lilac_seq;
/* decoder_cuda_prefill.c: whether n tokens go through lilac_cuda_prefill (n > 1, shapes its kernels take, not
 * turned off by LILAC_CUDA_PREFILL=0), and the tokens through it in chunks, as lilac_cuda_eval answers. */
bool lilac_cuda_prefill_wanted(const struct lilac_seq *s, int n);
/* Whether the model's shapes are ones the prefill kernels take (for any token count). */
bool lilac_cuda_prefill_takes(const struct lilac_seq *s);
/* One token for each of n sequences in one step (batched decode: the weights read once for all), logits[i]
 * (V floats, NULL: not wanted) filled; each sequence's position advances. lilac_cuda_decode_batch_wanted: n > 1,
 * not turned off (LILAC_CUDA_BATCH=0) and shapes its kernels take. */
/* The prefill's buffers and the batched step's graphs (lilac_cuda_model_free). */
void lilac_cuda_prefill_free(lilac_cuda_model *cm);
/* LILAC_CUDA_TIMING=1: s synchronized, the seconds since *t counted against name (NULL: none) in the timing
 * table lilac_cuda_model_free prints, and *t set to now; otherwise nothing. */
void lilac_cuda_op_mark(lilac_cuda_stream *s, const char *name, double *t);
bool lilac_cuda_decode_batch_wanted(const lilac_model *m, int n);
lilac_status lilac_cuda_decode_batch(lilac_model *m, struct lilac_seq *const *seqs, const int32_t *tokens, int n,
                                     float *const *logits, lilac_error *err);
lilac_status lilac_cuda_prefill(struct lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                                lilac_error *err);

#endif
