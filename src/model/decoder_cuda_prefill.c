/* decoder_cuda_prefill: the forward pass on the GPU for many tokens at once
 * (prompt processing). The tokens go through the model in chunks of at
 * most the buffers' rows (PF_MAX, or more where the memory plan or
 * LILAC_CUDA_PREFILL_CHUNK sized them so), each layer taking a whole
 * chunk: dense products over all its rows, attention over the keys up
 * to each token, the delta rule walked through the chunk's tokens in
 * order on the device, and the routed experts grouped by expert on the
 * device, so that an expert's weights are read once per pass of a few
 * tokens instead of once per token. The math is decoder_cuda.c's
 * one-token step, row by row; the results agree with it to float32
 * rounding (summation orders differ in attention only).
 * LILAC_CUDA_PREFILL=0 turns it off (the token path). */
#include "model/decoder_cuda.h"

#ifdef LILAC_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/seq.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/cuda_mem.h"
#include "model/decoder_cuda_int.h"
#include "model/model.h"
#include "util/env.h"
#include "util/err.h"

/* model/cuda_mem.h: the sizes, shared with the GPU memory plan */
#define PF_MAX LILAC_CUDA_PF_MAX             /* tokens a chunk by default, and the buffers' fewest rows */
#define PF_LOGIT_ROWS LILAC_CUDA_PF_LOGIT_ROWS /* rows of logits a download (LOGITS_ALL) */
_Static_assert(PF_LOGIT_ROWS <= LILAC_CUDA_TOP_ROWS, "the sampler's reduction takes a chunk of logits at once");
#define PF_BATCH LILAC_CUDA_PF_BATCH         /* sequences a batched decode step takes at once */

/* Tokens a chunk: LILAC_CUDA_PREFILL_CHUNK=N (smaller chunks for tests, larger ones where the buffers were
 * sized for them: lilac_cuda_pf_rows), else the buffers' rows; at most those. */
static int chunk_tokens(const struct cuda_prefill *pf)
{
    const int n = lilac_env_int("LILAC_CUDA_PREFILL_CHUNK", pf->rows, 1, LILAC_CUDA_PF_LIMIT);
    return n < pf->rows ? n : pf->rows;
}

void lilac_cuda_model_pf_rows_set(lilac_cuda_model *cm, int rows)
{
    if (cm && !cm->pf && rows >= 0 && rows <= LILAC_CUDA_PF_LIMIT)
        cm->pf_rows = rows;
}

/* The rows pf_alloc gives the buffers: the environment's, or PF_MAX; the plan's where larger. */
static int pf_rows_wanted(const lilac_cuda_model *cm)
{
    const int r = lilac_cuda_pf_rows();
    return cm->pf_rows > r ? cm->pf_rows : r;
}

int lilac_cuda_model_prompt_rows(const lilac_cuda_model *cm)
{
    if (!cm)
        return 0;
    return cm->pf ? cm->pf->rows : pf_rows_wanted(cm);
}

bool lilac_cuda_prefill_wanted(const lilac_seq *s, int n)
{
    return n >= 2 && lilac_env_switch("LILAC_CUDA_PREFILL", true) && lilac_cuda_prefill_takes(s);
}

bool lilac_cuda_prefill_takes(const lilac_seq *s)
{
    const lilac_hparams *hp = &s->m->hp;
    bool attn = false;
    for (int il = 0; il < hp->n_layer; il++)
        attn |= hp->layer_kind[il] == LILAC_LAYER_ATTENTION;
    /* shapes the prefill kernels do not take go token by token */
    if (attn && (!lilac_cuda_pf_attention_supported(hp->head_dim) || hp->n_head_kv < 1 ||
                 hp->n_head % hp->n_head_kv))
        return false;
    return lilac_cuda_pf_moe_supported(hp->n_expert, hp->n_expert_used);
}

static lilac_status pf_alloc(lilac_model *m, lilac_error *err)
{
    lilac_cuda_model *cm = m->cuda;
    const lilac_hparams *hp = &m->hp;
    size_t n_ptrs = (size_t)hp->n_layer * 4 * PF_BATCH;
    struct cuda_prefill *pf = calloc(1, sizeof *pf + n_ptrs * sizeof(float *));
    if (!pf)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    pf->ptrs_host = (float **)(pf + 1);
    /* sizes from cuda_mem.c's table, in its order */
    void **bufs[LILAC_CUDA_PF_NBUF] = {
        (void **)&pf->x,        (void **)&pf->xn,     (void **)&pf->tmp,      (void **)&pf->qg,
        (void **)&pf->kb,       (void **)&pf->vb,     (void **)&pf->att,      (void **)&pf->qkv,
        (void **)&pf->conv,     (void **)&pf->z,      (void **)&pf->a,        (void **)&pf->b,
        (void **)&pf->o,        (void **)&pf->rl,     (void **)&pf->rw,       (void **)&pf->gbuf,
        (void **)&pf->ex,       (void **)&pf->shg,    (void **)&pf->shu,      (void **)&pf->sho,
        (void **)&pf->logits,   (void **)&pf->tok,    (void **)&pf->idx,      (void **)&pf->offsets,
        (void **)&pf->pair_tok, (void **)&pf->tok_pair, (void **)&pf->pos,    (void **)&pf->ptrs,
        (void **)&pf->att_part, (void **)&pf->dntp,   (void **)&pf->bpart,  (void **)&pf->bcount,
    };
    size_t sizes[LILAC_CUDA_PF_NBUF];
    pf->rows = pf_rows_wanted(cm);
    lilac_cuda_prefill_sizes(hp, pf->rows, sizes);
    lilac_status st = LILAC_OK;
    for (size_t i = 0; !st && i < LILAC_CUDA_PF_NBUF; i++)
        st = lilac_cuda_model_alloc(cm, bufs[i], sizes[i], err);
    if (!st && lilac_cuda_memset(pf->bcount, 0, sizes[LILAC_CUDA_PF_NBUF - 1], cm->stream))
        st = lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA: clearing the batched step's counters failed");
    if (st) { /* what was allocated stays in cm->allocs, freed with the model */
        free(pf);
        return st;
    }
    cm->pf = pf;
    return LILAC_OK;
}

/* Where a prefill writes the residual stream (lilac_eval_opts.hidden, the CPU decoder's layout): row l of
 * token t at h + (l n_total + off + t) E: the embeddings, each layer's output but the last, the final norm's. */
typedef struct pf_hidden {
    float *h;
    int n_total, off;
} pf_hidden;

/* The chunk's nt rows of src (device) as row l of the residual stream (hid set; a download: synchronous). */
static lilac_status hidden_put(const lilac_model *m, const pf_hidden *hid, int l, const float *src, int nt,
                               lilac_error *err)
{
    char msg[256];
    const size_t E = (size_t)m->hp.n_embd;
    if (hid && lilac_cuda_download(hid->h + ((size_t)l * hid->n_total + hid->off) * E, src, nt * E * sizeof(float),
                                   m->cuda->stream, msg, sizeof msg))
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA prefill: the residual stream: %s", msg);
    return LILAC_OK;
}

/* The shared expert of layer cl over the chunk's nt rows of pf->xn into pf->sho, on stream s. */
static void shared_expert(const cuda_layer *cl, struct cuda_prefill *pf, int nt, int ff, lilac_cuda_stream *s)
{
    const lilac_cuda_mat *gu_w[] = {&cl->sh_gate, &cl->sh_up};
    float *const gu_y[] = {pf->shg, pf->shu};
    lilac_cuda_matvec_multi(gu_w, gu_y, 2, pf->xn, nt, s);
    lilac_cuda_swiglu(pf->shg, pf->shu, nt * ff, s);
    lilac_cuda_matvec(&cl->sh_down, pf->shg, pf->sho, nt, s);
}

/* The products W[i] x -> y[i] (i < n) of one input of nt rows: with aux, W[n_s ..) on the second stream beside
 * the first n_s on s, joined back into s; without, all on s (x converted for the tensor cores once). The same
 * kernels either way, the same bits. */
static void products(lilac_cuda_model *cm, lilac_cuda_stream *s, lilac_cuda_stream *aux, const lilac_cuda_mat *const *W,
                     float *const *y, int n_s, int n, const float *x, int nt)
{
    if (!aux) {
        lilac_cuda_matvec_multi(W, y, n, x, nt, s);
        return;
    }
    lilac_cuda_fork(s, aux, cm->ev[0]);
    lilac_cuda_matvec_multi(W + n_s, y + n_s, n - n_s, x, nt, aux);
    lilac_cuda_matvec_multi(W, y, n_s, x, nt, s);
    lilac_cuda_fork(aux, s, cm->ev[1]);
}

/* LILAC_CUDA_PF_AB=0: the DeltaNet alpha and beta (32 rows each in the 35B-A3B file) as two products, on the CUDA
 * cores (under LILAC_CUDA_MMA_MIN_ROWS); on, one product of the joined matrix (64 rows: the tensor cores), then
 * split. The two took 1.8 % of pp4096 in ncu (119 us a call); joined: pp4096 13,514/13,508 against 13,383/13,406,
 * pp512 10,957/10,924 against 10,939/10,938 (H200, alternated in one call, session 19). Read once. */
static bool pf_ab_joined(void)
{
    static int on = -1;
    if (on < 0)
        on = lilac_env_switch("LILAC_CUDA_PF_AB", true);
    return on;
}

/* The routed experts' SwiGLU computed by the down product's pre-pass as it converts its rows (k_swiglu's bits),
 * not by k_swiglu first; LILAC_CUDA_PF_GLU=0 off. H200: pp512 11,092/11,096 vs 11,020/11,018, pp4096
 * 13,747/13,753 vs 13,664/13,664 (one call, alternated). Read once. */
static bool pf_glu_prep(void)
{
    static int on = -1;
    if (on < 0)
        on = lilac_env_switch("LILAC_CUDA_PF_GLU", true);
    return on;
}

/* The chunk's nt tokens (in pf->tok) at positions pos0 .. of cs, or with rows one token of each row's own
 * sequence: the final-normed rows to pf->xn; with hid, the residual stream's rows of them as well. */
static lilac_status forward(lilac_model *m, lilac_cuda_seq *cs, int nt, int pos0, const pf_rows *rows,
                            const pf_hidden *hid, lilac_error *err)
{
    lilac_cuda_model *cm = m->cuda;
    struct cuda_prefill *pf = cm->pf;
    const lilac_hparams *hp = &m->hp;
    lilac_cuda_stream *s = cm->stream;
    int E = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv, kvw = nkv * hd;
    int q_step = hd * (hp->attn_output_gate ? 2 : 1);
    int nk = hp->ssm_k_heads, nv = hp->ssm_v_heads, dk = hp->ssm_k_dim, dv = hp->ssm_v_dim;
    int C = 2 * nk * dk + nv * dv, k = hp->n_expert_used, ff = hp->expert_ff, NE = hp->n_expert;
    bool gu_one = lilac_env_switch("LILAC_CUDA_PF_GU", true); /* =0: gate and up experts in two grouped products */
    /* LILAC_CUDA_PAIRS=0: the grouped products for every token count */
    static int below = -1; /* LILAC_CUDA_PAIRS_BELOW=N: the pairs' path under N tokens (for measuring) */
    if (below < 0) {
        const char *e = getenv("LILAC_CUDA_PAIRS_BELOW");
        below = e && atoi(e) > 0 ? atoi(e) : lilac_cuda_mma_min_pairs();
    }
    bool by_pair = nt < below && lilac_env_switch("LILAC_CUDA_PAIRS", true);
    /* LILAC_CUDA_PF_AUX=0: everything on the one stream; on, the second stream takes the products a layer's chain
     * does not wait on at once, to fill the multiprocessors the others leave idle (the same kernels, the same
     * bits): the small alpha/beta and k/v products beside the big qkv/z and q ones, and the shared expert while
     * the routing and the routed experts run */
    lilac_cuda_stream *aux = lilac_env_switch("LILAC_CUDA_PF_AUX", true) ? cm->aux : NULL;
    const bool shared = hp->shared_ff > 0, sh_aux = shared && aux;
    double t_ = 0; /* LILAC_CUDA_TIMING=1: the sections below timed (lilac_cuda_op_mark) */
    lilac_cuda_op_mark(s, NULL, &t_);
    lilac_cuda_get_rows(&cm->tok_embd, pf->tok, nt, pf->x, s);
    lilac_status st = hidden_put(m, hid, 0, pf->x, nt, err);
    for (int il = 0; !st && il < hp->n_layer; il++) {
        const cuda_layer *cl = &cm->layers[il];
        lilac_cuda_rmsnorm(pf->x, cl->attn_norm, pf->xn, nt, E, hp->norm_eps, s);
        if (hp->layer_kind[il] == LILAC_LAYER_ATTENTION) {
            const lilac_cuda_mat *qkv_w[] = {&cl->wq, &cl->wk, &cl->wv};
            float *const qkv_y[] = {pf->qg, pf->kb, pf->vb};
            products(cm, s, aux, qkv_w, qkv_y, 1, 3, pf->xn, nt); /* k and v beside q */
            lilac_cuda_op_mark(s, "pf norm+qkv", &t_);
            if (rows) { /* each row against its own sequence's cache */
                float **kp = rows->ptrs + (size_t)(4 * il) * PF_BATCH, **vp = kp + PF_BATCH;
                lilac_cuda_norm_rope_kv_rows(pf->qg, cl->q_norm, q_step, (long long)nh * q_step, nh, pf->kb, pf->vb,
                                             kvw, cl->k_norm, kp, vp, nkv, hd, hp->rope_dims, rows->pos,
                                             hp->rope_theta, hp->norm_eps, nt, s);
                if (lilac_cuda_attention_rows(pf->qg, q_step, (long long)nh * q_step, kp, vp, rows->pos, nh, nkv, hd,
                                              pf->att, pf->att_part, hp->attn_output_gate, nt, 0, 0, s))
                    return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: attention with %d heads of %d",
                                      nh, hd);
                lilac_cuda_op_mark(s, "pf attention", &t_);
                lilac_cuda_matvec(&cl->wo, pf->att, pf->tmp, nt, s);
                goto ffn;
            }
            lilac_cuda_pf_norm_rope(pf->qg, cl->q_norm, nh, q_step, (long long)nh * q_step, hd, hp->rope_dims, pos0,
                                    hp->rope_theta, hp->norm_eps, nt, s);
            lilac_cuda_pf_norm_rope(pf->kb, cl->k_norm, nkv, hd, kvw, hd, hp->rope_dims, pos0, hp->rope_theta,
                                    hp->norm_eps, nt, s);
            /* the chunk's K and V rows into the caches, before the attention reads them */
            size_t at = (size_t)pos0 * kvw, bytes = (size_t)nt * kvw * sizeof(float);
            if (lilac_cuda_copy(cs->k[il] + at, pf->kb, bytes, s) || lilac_cuda_copy(cs->v[il] + at, pf->vb, bytes, s))
                return lilac_fail(err, LILAC_E_INTERNAL, "CUDA prefill: storing K and V failed");
            if (lilac_cuda_pf_attention(pf->qg, q_step, (long long)nh * q_step, cs->k[il], cs->v[il], nh, nkv, hd, pos0,
                                        nt, pf->att, hp->attn_output_gate, s))
                return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA prefill: attention with head size %d", hd);
            lilac_cuda_op_mark(s, "pf attention", &t_);
            lilac_cuda_matvec(&cl->wo, pf->att, pf->tmp, nt, s);
        } else {
            /* alpha and beta beside qkv and z; where they are joined (ssm_ab), as one product of twice the rows
             * (into o, free until the delta rule writes it), then split into a and b; a prompt's chunk only */
            const bool ab = !rows && cl->ssm_ab.data && pf_ab_joined();
            const lilac_cuda_mat *in_w[] = {&cl->ssm_qkv, &cl->ssm_z, ab ? &cl->ssm_ab : &cl->ssm_alpha, &cl->ssm_beta};
            float *const in_y[] = {pf->qkv, pf->z, ab ? pf->o : pf->a, pf->b};
            products(cm, s, aux, in_w, in_y, 2, ab ? 3 : 4, pf->xn, nt);
            if (ab)
                lilac_cuda_pf_split_cols(pf->o, nv, pf->a, pf->b, nt, s);
            lilac_cuda_op_mark(s, "pf norm+qkv", &t_);
            if (rows) { /* each row with its own sequence's conv and recurrent state */
                float **cp = rows->ptrs + (size_t)(4 * il + 2) * PF_BATCH, **sp = cp + PF_BATCH;
                lilac_cuda_conv_step_rows(pf->qkv, cp, cl->ssm_conv, pf->conv, C, hp->ssm_conv_kernel, nt, s);
                if (lilac_cuda_deltanet_rows(pf->conv, pf->a, pf->b, cl->ssm_a, cl->ssm_dt, sp, pf->o, pf->z,
                                             cl->ssm_norm, nk, nv, dk, dv, m->w.ssm_v_tiled, hp->norm_eps, nt, s))
                    return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: DeltaNet heads of %d x %d", dk,
                                      dv);
                lilac_cuda_op_mark(s, "pf deltanet", &t_);
                lilac_cuda_matvec(&cl->ssm_out, pf->o, pf->tmp, nt, s);
                goto ffn;
            }
            lilac_cuda_pf_conv(pf->qkv, cs->conv[il], cl->ssm_conv, pf->conv, C, hp->ssm_conv_kernel, nt, s);
            lilac_cuda_pf_deltanet(pf->conv, C, pf->a, pf->b, cl->ssm_a, cl->ssm_dt, cs->ssm[il], pf->o, pf->z,
                                   cl->ssm_norm, nk, nv, dk, dv, m->w.ssm_v_tiled, hp->norm_eps, nt, pf->dntp, s);
            lilac_cuda_op_mark(s, "pf deltanet", &t_);
            lilac_cuda_matvec(&cl->ssm_out, pf->o, pf->tmp, nt, s);
        }
    ffn:
        /* Measured and removed (session 29, code at 6b7a00f, LILAC_CUDA_PF_FUSE): the product added into x by
         * k_mma's epilogue, and the next layer's norm by the experts' sum kernel: pp512 and pp4096 0.3-1 % slower */
        lilac_cuda_add(pf->x, pf->tmp, nt * E, s);
        lilac_cuda_op_mark(s, "pf out", &t_);
        lilac_cuda_rmsnorm(pf->x, cl->post_norm, pf->xn, nt, E, hp->norm_eps, s);
        if (sh_aux) { /* joined before the sum (which writes xn, the shared expert's input) */
            lilac_cuda_fork(s, aux, cm->ev[0]);
            shared_expert(cl, pf, nt, hp->shared_ff, aux);
        }
        /* routed experts: route, group the (token, expert) pairs by expert, the products per group */
        lilac_cuda_matvec(&cl->router, pf->xn, pf->rl, nt, s);
        lilac_cuda_pf_topk(pf->rl, NE, k, hp->norm_topk, nt, pf->idx, pf->rw, s);
        lilac_cuda_op_mark(s, "pf norm+route", &t_);
        float *ubuf = pf->gbuf + (size_t)nt * k * ff;
        if (by_pair) {
            /* each (token, expert) pair a slot of the token step's expert product, over pf->ex as its x rows:
             * an expert's rows spread over the GPU. The grouped product that fewer than
             * lilac_cuda_mma_min_pairs() tokens get runs on the CUDA cores with an expert's rows on one or two
             * blocks: at 8 sequences 134 us (gate and up) and 279 (a Q6_K down) a layer, 80 % of the step. */
            lilac_cuda_pf_pair_rows(pf->xn, nt, k, E, pf->ex, pf->tok_pair, s);
            lilac_cuda_matvec_experts(&cl->exp_gate, cl->gate_stride, pf->idx, nt * k, pf->ex, 1, pf->gbuf, s);
            lilac_cuda_matvec_experts(&cl->exp_up, cl->up_stride, pf->idx, nt * k, pf->ex, 1, ubuf, s);
            lilac_cuda_matvec_fused(&cl->exp_down, cl->down_stride, pf->idx, nt * k, pf->gbuf, ubuf, 1, pf->ex, 0, s);
        } else {
            if (cl->gu_fused && gu_one) {
                /* up expert e is gate expert NE + e of the one allocation: 2 NE experts, their outputs gate then
                 * up (the pairs in all are nt k: topk names k valid experts a token) */
                lilac_cuda_pf_moe_group_gu(pf->idx, nt, k, NE, pf->offsets, pf->pair_tok, pf->tok_pair, s);
                lilac_cuda_matvec_grouped(&cl->exp_gate, cl->gate_stride, 2 * NE, pf->offsets, pf->pair_tok, nt, nt,
                                          2 * nt * k, pf->xn, E, pf->gbuf, s);
            } else {
                lilac_cuda_pf_moe_group(pf->idx, nt, k, NE, pf->offsets, pf->pair_tok, pf->tok_pair, s);
                lilac_cuda_matvec_grouped(&cl->exp_gate, cl->gate_stride, NE, pf->offsets, pf->pair_tok, nt, nt,
                                          nt * k, pf->xn, E, pf->gbuf, s);
                lilac_cuda_matvec_grouped(&cl->exp_up, cl->up_stride, NE, pf->offsets, pf->pair_tok, nt, nt, nt * k,
                                          pf->xn, E, ubuf, s);
            }
            /* the down product's pre-pass computing the SwiGLU (LILAC_CUDA_PF_GLU=0: apart) */
            if (!pf_glu_prep() || lilac_cuda_matvec_grouped_glu(&cl->exp_down, cl->down_stride, NE, pf->offsets, nt,
                                                                nt * k, pf->gbuf, ubuf, ff, pf->ex, s)) {
                lilac_cuda_swiglu(pf->gbuf, ubuf, nt * k * ff, s);
                lilac_cuda_matvec_grouped(&cl->exp_down, cl->down_stride, NE, pf->offsets, NULL, 0, nt, nt * k,
                                          pf->gbuf, ff, pf->ex, s);
            }
        }
        lilac_cuda_op_mark(s, by_pair ? "pf experts (pairs)" : "pf experts (grouped)", &t_);
        if (sh_aux) {
            lilac_cuda_fork(aux, s, cm->ev[1]);
        } else if (shared) {
            shared_expert(cl, pf, nt, hp->shared_ff, s);
            lilac_cuda_op_mark(s, "pf shared expert", &t_);
        }
        lilac_cuda_pf_moe_sum(pf->x, pf->ex, pf->rw, pf->tok_pair, k, shared ? pf->sho : NULL, cl->sh_gate_inp, pf->xn,
                              E, nt, s);
        lilac_cuda_op_mark(s, "pf sum", &t_);
        if (il < hp->n_layer - 1)
            st = hidden_put(m, hid, il + 1, pf->x, nt, err);
    }
    lilac_cuda_rmsnorm(pf->x, cm->output_norm, pf->xn, nt, E, hp->norm_eps, s);
    return st ? st : hidden_put(m, hid, hp->n_layer, pf->xn, nt, err);
}

/* Launch errors: refused products (lilac_cuda_check) and CUDA's own. */
static lilac_status check(lilac_error *err)
{
    char msg[512];
    if (lilac_cuda_check(msg, sizeof msg))
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA prefill: %s", msg);
    return LILAC_OK;
}

lilac_status lilac_cuda_prefill(lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                                lilac_error *err)
{
    lilac_model *m = s->m;
    lilac_cuda_model *cm = m->cuda;
    lilac_cuda_seq *cs = s->cuda;
    const lilac_hparams *hp = &m->hp;
    int V = hp->n_vocab, E = hp->n_embd;
    char msg[256];
    if (n < 1 || n > cs->n_ctx - s->pos)
        return lilac_fail(err, LILAC_E_RANGE, "%d tokens do not fit: the sequence holds %d of its %d-token context", n,
                          s->pos, cs->n_ctx);
    lilac_status st;
    if (!cm->pf && (st = pf_alloc(m, err)))
        return st;
    struct cuda_prefill *pf = cm->pf;
    int chunk = chunk_tokens(pf);
    for (int off = 0; off < n; off += chunk) {
        int nt = n - off < chunk ? n - off : chunk;
        if (lilac_cuda_upload_async(pf->tok, tokens + off, (size_t)nt * sizeof(int32_t), cm->stream))
            return lilac_fail(err, LILAC_E_INTERNAL, "CUDA prefill: uploading the tokens failed");
        const pf_hidden hid = {opts->hidden, n, off};
        if ((st = forward(m, cs, nt, s->pos, NULL, opts->hidden ? &hid : NULL, err)))
            return st;
        if (opts->logits_mode == LILAC_LOGITS_ALL) {
            for (int r0 = 0; r0 < nt; r0 += PF_LOGIT_ROWS) {
                int rows = nt - r0 < PF_LOGIT_ROWS ? nt - r0 : PF_LOGIT_ROWS;
                lilac_cuda_matvec(&cm->output, pf->xn + (size_t)r0 * E, pf->logits, rows, cm->stream);
                if ((st = check(err)))
                    return st;
                if (lilac_cuda_download(opts->logits + (size_t)(off + r0) * V, pf->logits,
                                        (size_t)rows * V * sizeof(float), cm->stream, msg, sizeof msg))
                    return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA prefill: %s", msg);
            }
        } else if (opts->logits_mode == LILAC_LOGITS_LAST && off + nt == n) {
            lilac_cuda_matvec(&cm->output, pf->xn + (size_t)(nt - 1) * E, pf->logits, 1, cm->stream);
            if ((st = check(err)))
                return st;
            if (lilac_cuda_download(opts->logits, pf->logits, (size_t)V * sizeof(float), cm->stream, msg, sizeof msg))
                return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA prefill: %s", msg);
        } else if (lilac_cuda_sync(cm->stream, msg, sizeof msg)) {
            return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA prefill: %s", msg);
        }
        if ((st = check(err)))
            return st;
        s->pos += nt;
    }
    return LILAC_OK;
}

bool lilac_cuda_decode_batch_wanted(const lilac_model *m, int n)
{
    if (n < 2 || !lilac_env_switch("LILAC_CUDA_BATCH", true)) /* =0: one sequence after another */
        return false;
    const lilac_hparams *hp = &m->hp;
    int G = hp->n_head_kv > 0 ? hp->n_head / hp->n_head_kv : 0;
    return G >= 1 && G <= 8 && hp->head_dim % 32 == 0 && hp->head_dim <= 256 &&
           lilac_cuda_pf_moe_supported(hp->n_expert, hp->n_expert_used);
}

/* The batched step's layer loop (forward with rows). LILAC_CUDA_BATCH_GRAPH=1: as a CUDA graph, one per row
 * count, captured at the second step of that count (the first sets the kernels' attributes and sizes the
 * tensor-core scratch, which capture does not allow) and replayed after; its inputs (tokens, positions, state
 * pointers) are uploaded to the same buffers before each step. A graph is dropped when the scratch it captured
 * has moved since (a larger prefill grew it). Where capture fails, the steps run plainly from then on. */
static lilac_status forward_batch(lilac_model *m, int nt, const pf_rows *rows, lilac_error *err)
{
    lilac_cuda_model *cm = m->cuda;
    struct cuda_prefill *pf = cm->pf;
    static int use = -1;
    if (use < 0) /* LILAC_CUDA_TIMING=1 synchronizes between the sections: no capture then */
        use = lilac_env_switch("LILAC_CUDA_BATCH_GRAPH", false) && !lilac_env_switch("LILAC_CUDA_TIMING", false);
    if (!use || pf->bgraph_failed || nt < 1 || nt > PF_BATCH)
        return forward(m, NULL, nt, 0, rows, NULL, err);
    unsigned gen = lilac_cuda_mma_scratch_gen(cm->stream);
    if (pf->bgraph[nt] && pf->bgen[nt] != gen) {
        lilac_cuda_graph_free(pf->bgraph[nt]);
        pf->bgraph[nt] = NULL;
        pf->bseen[nt] = false;
    }
    if (!pf->bgraph[nt]) {
        if (!pf->bseen[nt]) {
            pf->bseen[nt] = true;
            return forward(m, NULL, nt, 0, rows, NULL, err);
        }
        if (lilac_cuda_capture_begin(cm->stream)) {
            pf->bgraph_failed = true;
            return forward(m, NULL, nt, 0, rows, NULL, err);
        }
        lilac_status st = forward(m, NULL, nt, 0, rows, NULL, err);
        void *g = NULL;
        int bad = lilac_cuda_capture_end(cm->stream, &g);
        if (st || bad || lilac_cuda_mma_scratch_gen(cm->stream) != gen) { /* nothing ran: plainly, from now on */
            char why[8];
            lilac_cuda_graph_free(g);
            (void)lilac_cuda_check(why, sizeof why); /* a refusal under capture is no error of the step */
            pf->bgraph_failed = true;
            return forward(m, NULL, nt, 0, rows, NULL, err);
        }
        pf->bgraph[nt] = g;
        pf->bgen[nt] = gen;
    }
    if (lilac_cuda_graph_launch(pf->bgraph[nt], cm->stream)) {
        pf->bgraph_failed = true;
        return forward(m, NULL, nt, 0, rows, NULL, err);
    }
    return LILAC_OK;
}

void lilac_cuda_prefill_free(lilac_cuda_model *cm)
{
    if (!cm || !cm->pf)
        return;
    for (int i = 0; i <= PF_BATCH; i++)
        lilac_cuda_graph_free(cm->pf->bgraph[i]);
    free(cm->pf);
    cm->pf = NULL;
}

lilac_status lilac_cuda_decode_batch(lilac_model *m, lilac_seq *const *seqs, const int32_t *tokens, int n,
                                     float *const *logits, lilac_logits_top *const *tops, int top_k,
                                     lilac_error *err)
{
    lilac_cuda_model *cm = m->cuda;
    const lilac_hparams *hp = &m->hp;
    int V = hp->n_vocab, E = hp->n_embd, L = hp->n_layer;
    char msg[256];
    for (int i = 0; i < n; i++)
        if (!seqs[i]->cuda || seqs[i]->m != m || seqs[i]->pos >= seqs[i]->cuda->n_ctx)
            return lilac_fail(err, LILAC_E_RANGE, "CUDA batched decode: sequence %d is full or not on this GPU", i);
    lilac_status st;
    if (!cm->pf && (st = pf_alloc(m, err)))
        return st;
    struct cuda_prefill *pf = cm->pf;
    float **ptrs = pf->ptrs_host;
    int32_t pos[PF_BATCH];
    const bool exact = lilac_cuda_batch_exact_wanted(m); /* the one-token step's bits (decoder_cuda_batch.c) */
    st = LILAC_OK;
    for (int off = 0; !st && off < n; off += PF_BATCH) {
        int nt = n - off < PF_BATCH ? n - off : PF_BATCH;
        double t_ = 0; /* LILAC_CUDA_TIMING=1: the step's parts timed (lilac_cuda_op_mark) */
        lilac_cuda_op_mark(cm->stream, NULL, &t_);
        memset(ptrs, 0, (size_t)L * 4 * PF_BATCH * sizeof *ptrs);
        int max_pos = 0;
        for (int t = 0; t < nt; t++) {
            lilac_cuda_seq *cs = seqs[off + t]->cuda;
            pos[t] = seqs[off + t]->pos;
            max_pos = pos[t] > max_pos ? pos[t] : max_pos;
            for (int il = 0; il < L; il++) {
                float **p = ptrs + (size_t)(4 * il) * PF_BATCH + t;
                p[0] = cs->k[il], p[PF_BATCH] = cs->v[il], p[2 * PF_BATCH] = cs->conv[il], p[3 * PF_BATCH] = cs->ssm[il];
            }
        }
        if (lilac_cuda_upload_async(pf->tok, tokens + off, (size_t)nt * sizeof(int32_t), cm->stream) ||
            lilac_cuda_upload_async(pf->pos, pos, (size_t)nt * sizeof(int32_t), cm->stream) ||
            lilac_cuda_upload_async(pf->ptrs, ptrs, (size_t)L * 4 * PF_BATCH * sizeof *ptrs, cm->stream)) {
            st = lilac_fail(err, LILAC_E_INTERNAL, "CUDA batched decode: uploading the step failed");
            break;
        }
        pf_rows rows = {pf->pos, pf->ptrs};
        lilac_cuda_op_mark(cm->stream, "pf upload", &t_);
        if ((st = exact ? lilac_cuda_batch_exact(m, nt, &rows, max_pos, err) : forward_batch(m, nt, &rows, err)))
            break;
        lilac_cuda_op_mark(cm->stream, NULL, &t_);
        /* the logits of the rows that want them, PF_LOGIT_ROWS rows a product */
        for (int r0 = 0; !st && r0 < nt; r0 += PF_LOGIT_ROWS) {
            int rn = nt - r0 < PF_LOGIT_ROWS ? nt - r0 : PF_LOGIT_ROWS;
            bool any = false, any_top = false;
            for (int r = 0; r < rn; r++) {
                any |= logits[off + r0 + r] != NULL;
                any_top |= tops && tops[off + r0 + r] != NULL;
            }
            if (!any && !any_top)
                continue;
            lilac_cuda_batch_logits(m, pf->xn + (size_t)r0 * E, pf->logits, rn, exact);
            if ((st = check(err)))
                break;
            if (any_top && lilac_cuda_top_rows(cm, pf->logits, V, rn, top_k, tops + off + r0, msg, sizeof msg)) {
                st = lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: the sampler's reduction: %s", msg);
                break;
            }
            /* a download per run of rows whose destinations follow one another (lilac_batch's are one array) */
            for (int r = 0, r1; r < rn; r = r1) {
                float *d = logits[off + r0 + r];
                for (r1 = r + 1; r1 < rn && d && logits[off + r0 + r1] == d + (size_t)(r1 - r) * V; r1++)
                    ;
                if (d && lilac_cuda_download(d, pf->logits + (size_t)r * V, (size_t)(r1 - r) * V * sizeof(float),
                                             cm->stream, msg, sizeof msg)) {
                    st = lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: %s", msg);
                    break;
                }
            }
        }
        lilac_cuda_op_mark(cm->stream, "pf logits+download", &t_);
        if (!st && lilac_cuda_sync(cm->stream, msg, sizeof msg))
            st = lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: %s", msg);
        if (!st)
            st = check(err);
        for (int t = 0; !st && t < nt; t++)
            seqs[off + t]->pos++;
    }
    return st;
}

#endif
