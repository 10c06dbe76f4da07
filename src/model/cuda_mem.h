/* cuda_mem: the device memory the CUDA backend allocates for a model and
 * its sequences, from the hyper-parameters alone (no GPU, no CUDA needed).
 * decoder_cuda.c and decoder_cuda_prefill.c allocate by these tables, and
 * the GPU memory plan (engine/plan.c) adds them up, so that the plan and
 * the allocations cannot drift apart. */
#ifndef LILAC_MODEL_CUDA_MEM_H
#define LILAC_MODEL_CUDA_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

/* Tokens a prefill chunk by default, and the fewest rows of the prefill buffers (the batched decode step's
 * PF_BATCH rows among them). LILAC_CUDA_PREFILL_CHUNK=N (1..PF_LIMIT) sets the chunk; over PF_MAX, the
 * buffers and the plan take N rows (lilac_cuda_pf_rows). pp4096 of the 35B-A3B Q4_K_M file in 2048-token
 * chunks: 8,421 tok/s against 6,959 at 512 and 7,323 at 1024 (H200, one call, 2026-11-30): an expert's ~64
 * pairs take the 64-token tensor-core tiles; in one 4096-token chunk 12,014 against 11,201 (2026-12-01: the
 * weights read once, not twice, and ~128 pairs an expert). The GPU plan gives the buffers PF_BIG rows where the
 * whole plan fits with them (~1.5 GB more than PF_MAX's for that file), else PF_MID's where those fit, else
 * PF_MAX's (LILAC_CUDA_PREFILL_AUTO=0: PF_MAX's always). */
#define LILAC_CUDA_PF_MAX 512
#define LILAC_CUDA_PF_MID 2048 /* the plan's second choice */
#define LILAC_CUDA_PF_BIG 4096 /* the rows the GPU plan gives the prefill where they fit (unless LILAC_CUDA_PREFILL_AUTO=0) */
#define LILAC_CUDA_PF_LIMIT 4096

/* The prefill buffers' rows: PF_MAX, or LILAC_CUDA_PREFILL_CHUNK where larger (read at each call). */
int lilac_cuda_pf_rows(void);
#define LILAC_CUDA_PF_LOGIT_ROWS 32 /* rows of logits a download (LOGITS_ALL): the buffer is rows x vocab */
#define LILAC_CUDA_PF_BATCH 64      /* sequences a batched decode step (lilac_cuda_decode_batch) takes at once */

/* One sequence's device state (lilac_cuda_seq_new: one block). */
typedef struct lilac_cuda_seq_sizes {
    size_t kv_layer;   /* K, and V again, of one full-attention layer: n_ctx x n_head_kv x head_dim floats */
    size_t conv_layer; /* a DeltaNet layer's conv window: (kernel - 1) x conv channels floats */
    size_t ssm_layer;  /* a DeltaNet layer's state: v_heads x k_dim x v_dim floats */
    size_t kv;         /* 2 kv_layer a full-attention layer */
    size_t recurrent;  /* conv_layer + ssm_layer a DeltaNet layer */
    size_t scores;     /* the attention's scores, n_head x n_ctx floats */
    size_t total;      /* kv + recurrent + scores */
} lilac_cuda_seq_sizes;
lilac_cuda_seq_sizes lilac_cuda_seq_sizes_of(const lilac_hparams *hp, int n_ctx);

/* Conv channels of a DeltaNet layer: q, k (k_heads x k_dim each) and v (v_heads x v_dim). */
size_t lilac_cuda_conv_channels(const lilac_hparams *hp);

/* The one-token step's activation buffers (lilac_cuda_model_new), bytes each in the order x, xn, tmp, qg (then
 * kb), vb, att, qkv (then z), conv, a (then b), o, rl, rw, gbuf, ex, shg (then shu), sho, logits, att_part, tok, idx,
 * count, part, top; bytes may be NULL. Returns their sum. */
#define LILAC_CUDA_DEC_NBUF 23
uint64_t lilac_cuda_decode_sizes(const lilac_hparams *hp, size_t *bytes);

/* The prefill's and batched decode's chunk buffers of `rows` tokens (decoder_cuda_prefill.c's pf_alloc, at the
 * first prompt of more than one token or the first batched step; among the last, dntp, the delta rule's T and
 * P, then bpart and bcount, the exact batched step's), bytes each in pf_alloc's order; bytes may be NULL.
 * Returns their sum. */
#define LILAC_CUDA_PF_NBUF 32
uint64_t lilac_cuda_prefill_sizes(const lilac_hparams *hp, int rows, size_t *bytes);

/* A bound on the tensor-core products' scratch (cuda_mma.cu: one buffer for the model's stream, grown to the
 * largest request): the most rows a product digitizes at once is a chunk's gate and up pairs, 2 rows
 * n_expert_used, of n_embd columns, or a chunk's rows of the widest input (n_embd, n_head x head_dim,
 * v_heads x v_dim, shared_ff), or its rows x n_expert_used pairs of expert_ff columns (the down products);
 * and the second stream's, for a chunk's rows of n_embd or shared_ff columns (the products it runs beside). */
uint64_t lilac_cuda_mma_scratch_bound(const lilac_hparams *hp, int rows);
/* A bound on the prefill attention's split K and V (cuda_attn.cu: one buffer for the model's stream, grown to
 * the largest request): a context's keys, rounded up as the kernel asks (LILAC_CUDA_ATT_GROW), of n_head_kv
 * heads (lilac_cuda_attn_split_bytes); 0 without attention layers or for a head size the kernel does not take. */
uint64_t lilac_cuda_attn_split_bound(const lilac_hparams *hp, int n_ctx);

/* The margin for what is not counted buffer by buffer: the kernels' code loaded into the context, the
 * allocator's granularity (1 MiB a weight tensor: half of a 2 MiB page on average), each sequence's
 * captured decode step (a CUDA graph). */
#define LILAC_CUDA_MARGIN_BASE (256ull << 20)
#define LILAC_CUDA_MARGIN_TENSOR (1ull << 20)
#define LILAC_CUDA_MARGIN_SEQ (2ull << 20)

#endif
