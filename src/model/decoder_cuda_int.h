/* decoder_cuda_int: what the CUDA decoder's files share (decoder_cuda.c
 * the model, sequences and the one-token step): the device copy of the
 * weights, the activation buffers and a sequence's device state. */
#ifndef LILAC_MODEL_DECODER_CUDA_INT_H
#define LILAC_MODEL_DECODER_CUDA_INT_H

#include <stdbool.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_sizes.h"
#include "model/cuda_mem.h"
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
    int32_t *tok_host;  /* pinned (host), 2: the token and position's way up (NULL: from the stack, staged) */
    void *top;          /* the sampler's reduction's scratch and result (lilac_cuda_logits_top) */
    char top_host[LILAC_CUDA_TOP_ROWS * LILAC_CUDA_TOP_OUT]; /* its results on their way down */
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

/* The decode step's switches (LILAC_CUDA_*), read at its first call (decoder_cuda.c says what each measured):
 * the batched step's exact mode (decoder_cuda_batch.c) takes the same paths. */
typedef struct lilac_cuda_step_sw {
    /* NORM_ROUTER=0: the post-attention norm and a float32 router apart (in one kernel: tg128 245 against 234
     * tok/s, H200, 2026-11-30) */
    bool norm_router;
    /* ROUTE_TAIL=1: the routing at the norm+router kernel's end, by its last block, where the router holds
     * the shared gate's row too (or there is no shared expert), instead of the route kernel. Slower, the
     * shared expert's branch starting after the routing: tg128 267 against 281 with one warp routing, 275
     * against 282 with the block's staged ranks (H200, 2026-11-30). */
    bool route_tail;
    /* SUM_GRID=0: the experts' sum and the next norm by one block, not over a grid */
    bool sum_grid;
    /* DOWN_SUM (on; =0 off): the routed down product, the experts' sum and the next norm in one kernel
     * (lilac_cuda_moe_down_sum) instead of the down product and the sum kernel; where it does not take the
     * layer, those two. tg128 (H200, one call, 2026-11-30): 349.5/350.4 against 339.7/338.1 at two rows a
     * lane group, 341.6/343.2 at one (LILAC_CUDA_DOWN_SUM_R=1) */
    bool down_sum;
    /* ROUTE_FUSED (on; =0 off): the routing by every block of the experts' gate+up product itself
     * (lilac_cuda_matvec_experts_routed) where the norm+router kernel gives the logits (and the shared gate's)
     * and gate and up are one product: the route kernel off the chain */
    bool route_fused;
} lilac_cuda_step_sw;
const lilac_cuda_step_sw *lilac_cuda_step_switches(void);

/* The prefill's and batched decode's chunk activations, [rows][width] each (dev; decoder_cuda_prefill.c
 * allocates them at the first use, sized by cuda_mem.c's table). */
struct cuda_prefill {
    int rows; /* the most tokens a chunk: lilac_cuda_pf_rows() when allocated */
    /* gbuf: the experts' gate outputs of a chunk's P = nt k pairs, then their up outputs (gbuf + P ff): one
     * grouped product can write both. rl: n_expert + 1 floats a row (the router's logits, the shared gate's);
     * rw: n_expert_used + 1 (the weights, the shared gate) */
    float *x, *xn, *tmp, *qg, *kb, *vb, *att, *qkv, *conv, *z, *a, *b, *o, *rl, *rw, *gbuf, *ex, *shg, *shu, *sho,
        *logits;
    int32_t *tok, *idx, *offsets, *pair_tok, *tok_pair; /* offsets [2 E + 1], pair_tok [2 rows k]: gate and up */
    /* batched decode: each row's position, its sequence's state pointers [n_layer][4][PF_BATCH] (K, V, conv,
     * ssm) and the attention's parts */
    int32_t *pos;
    float **ptrs;
    float *att_part;
    float *dntp; /* the delta rule's T and P (lilac_cuda_dn_tp_floats) */
    /* the exact batched step's (decoder_cuda_batch.c): a row's blocks' sums of squares (the down+sum or sum
     * grid kernel's, LILAC_CUDA_PART_MAXB floats a row) and its last-block counter (zero between launches) */
    float *bpart;
    unsigned *bcount;
    float **ptrs_host; /* the host side of ptrs, in the same allocation as this struct */
    /* LILAC_CUDA_BATCH_GRAPH=1: the batched step's layers captured per row count (forward_batch) */
    void *bgraph[LILAC_CUDA_PF_BATCH + 1];
    unsigned bgen[LILAC_CUDA_PF_BATCH + 1]; /* the tensor-core scratch's generation each was captured with */
    bool bseen[LILAC_CUDA_PF_BATCH + 1], bgraph_failed;
};

/* A batched decode step: row t of the chunk is the one token of its own sequence (NULL: a prefill, every row
 * of one sequence). */
typedef struct pf_rows {
    const int32_t *pos; /* (dev) [n] */
    float **ptrs;       /* (dev) [n_layer][4][PF_BATCH] */
} pf_rows;

/* LILAC_CUDA_BATCH_EXACT (on; =0 off, read at each call): whether the batched decode step runs the one-token
 * step's kernels row by row (decoder_cuda_batch.c), each sequence's logits the bits of its own step. */
bool lilac_cuda_batch_exact_wanted(const lilac_model *m);
/* The batched step's layers for the nt rows of pf (tokens, positions and state pointers uploaded: rows), the
 * one-token step's math and bits; max_pos: the rows' largest position (the attention's key ranges); the
 * final-normed rows to pf->xn. */
lilac_status lilac_cuda_batch_exact(lilac_model *m, int nt, const pf_rows *rows, int max_pos, lilac_error *err);
/* y rows = the lm head on nt rows of xn, as the one-token step computes it (exact mode) or not. */
void lilac_cuda_batch_logits(lilac_model *m, const float *xn, float *y, int nt, bool exact);

/* p = bytes of device memory owned by cm (freed with it), counted in cm->bytes. */
lilac_status lilac_cuda_model_alloc(lilac_cuda_model *cm, void **p, size_t bytes, lilac_error *err);

/* decoder_cuda.c: the sampler's candidates of `rows` rows (<= LILAC_CUDA_TOP_ROWS) of device logits, V floats
 * apart, into tops[r] (NULL: not wanted): reduced on the device (lilac_cuda_logits_top), or, for a shape its
 * kernels do not take, each wanted row down and reduced on the host (lilac_logits_top_of: the same answer).
 * Waits for the stream. 0, or -1 with msg filled. */
int lilac_cuda_top_rows(lilac_cuda_model *cm, const float *logits, int V, int rows, int k,
                        lilac_logits_top *const *tops, char *msg, size_t cap);

struct lilac_seq;
/* decoder_cuda_prefill.c: whether n tokens go through lilac_cuda_prefill (n > 1, shapes its kernels take, not
 * turned off by LILAC_CUDA_PREFILL=0), and the tokens through it in chunks, as lilac_cuda_eval answers. */
bool lilac_cuda_prefill_wanted(const struct lilac_seq *s, int n);
/* Whether the model's shapes are ones the prefill kernels take (for any token count). */
bool lilac_cuda_prefill_takes(const struct lilac_seq *s);
/* The prefill's buffers and the batched step's graphs (lilac_cuda_model_free). */
void lilac_cuda_prefill_free(lilac_cuda_model *cm);
/* LILAC_CUDA_TIMING=1: s synchronized, the seconds since *t counted against name (NULL: none) in the timing
 * table lilac_cuda_model_free prints, and *t set to now; otherwise nothing. */
void lilac_cuda_op_mark(lilac_cuda_stream *s, const char *name, double *t);
/* One token for each of n sequences in one step (batched decode: the weights read once for all), logits[i]
 * (V floats, NULL: not wanted) filled, or tops[i] (NULL: not wanted) with the top_k best (reduced on the
 * device, lilac_cuda_logits_top); each sequence's position advances. lilac_cuda_decode_batch_wanted: n > 1,
 * not turned off (LILAC_CUDA_BATCH=0) and shapes its kernels take. */
bool lilac_cuda_decode_batch_wanted(const lilac_model *m, int n);
lilac_status lilac_cuda_decode_batch(lilac_model *m, struct lilac_seq *const *seqs, const int32_t *tokens, int n,
                                     float *const *logits, lilac_logits_top *const *tops, int top_k,
                                     lilac_error *err);
lilac_status lilac_cuda_prefill(struct lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                                lilac_error *err);

#endif
