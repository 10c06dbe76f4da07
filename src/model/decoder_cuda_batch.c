/* decoder_cuda_batch: the batched decode step with the one-token step's
 * bits (LILAC_CUDA_BATCH_EXACT, the default). Row t of the chunk is one
 * token of its own sequence; every operation is the kernel the one-token
 * step (decoder_cuda.c's step) runs for it, launched once for all rows with
 * a row index (blockIdx), or, for the matrix products, k_mv over the rows
 * with the lanes a row of the one-token product it stands for
 * (lilac_cuda_matvec_like): with the products' folds rounded explicitly
 * (cuda_quant.cu's kq_fold) a row's dot is then the same sum in the same
 * order. So each sequence's logits in a batch are the bits of its own
 * steps, and its greedy tokens the same whatever the batch; the faster
 * step of decoder_cuda_prefill.c (tensor cores, grouped experts: the sums
 * in other orders) is LILAC_CUDA_BATCH_EXACT=0. The paths mirror the
 * step's switches (lilac_cuda_step_sw); the one it cannot mirror (the
 * routing at the norm+router kernel's end, LILAC_CUDA_ROUTE_TAIL=1) turns
 * the exact mode off. */
#include "model/decoder_cuda.h"

#ifdef LILAC_CUDA

#include "format/dtype.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_sizes.h"
#include "model/decoder_cuda_int.h"
#include "model/model.h"
#include "util/env.h"
#include "util/err.h"

bool lilac_cuda_batch_exact_wanted(const lilac_model *m)
{
    (void)m;
    return lilac_env_switch("LILAC_CUDA_BATCH_EXACT", true) && !lilac_cuda_step_switches()->route_tail;
}

/* y = W x over the nt rows (x rows W->cols apart, y rows W->rows), each row as the step's product of `like` (W,
 * or the joined matrix W is part of) computes it; accumulate: y += it. */
static void dense(const lilac_cuda_mat *W, const lilac_cuda_mat *like, const float *x, float *y, int nt, int acc,
                  const float *x2, lilac_cuda_stream *s)
{
    lilac_cuda_matvec_like(W, 0, NULL, 1, x, 0, x2, y, nt, acc, like && like->data ? like : W, 0, 1, s);
}

void lilac_cuda_batch_logits(lilac_model *m, const float *xn, float *y, int nt, bool exact)
{
    lilac_cuda_model *cm = m->cuda;
    if (exact)
        dense(&cm->output, NULL, xn, y, nt, 0, NULL, cm->stream);
    else
        lilac_cuda_matvec(&cm->output, xn, y, nt, cm->stream);
}

/* The attention's key ranges as the step takes them (lilac_cuda_attention_ranges), over the rows: where no row
 * has more keys than the batched buffer's ranges hold, one launch with those (the ranges in use are the same: a
 * row's count depends on its keys, not on the most); otherwise rows a launch as the buffer holds at the step's
 * most ranges. */
static int attention(lilac_model *m, int il, int nt, const pf_rows *rows, int max_pos, lilac_cuda_stream *s)
{
    const lilac_hparams *hp = &m->hp;
    struct cuda_prefill *pf = m->cuda->pf;
    const int nh = hp->n_head, hd = hp->head_dim, q_step = hd * (hp->attn_output_gate ? 2 : 1);
    const long long q_tok = (long long)nh * q_step;
    float **kp = rows->ptrs + (size_t)(4 * il) * LILAC_CUDA_PF_BATCH, **vp = kp + LILAC_CUDA_PF_BATCH;
    int nsplit, min_keys;
    lilac_cuda_attention_ranges(&nsplit, &min_keys);
    if (lilac_cuda_attention_ranges_used(max_pos + 1, nsplit, min_keys) <= LILAC_CUDA_ATT_SPLIT_ROWS)
        return lilac_cuda_attention_rows(pf->qg, q_step, q_tok, kp, vp, rows->pos, nh, hp->n_head_kv, hd, pf->att,
                                         pf->att_part, hp->attn_output_gate, nt, LILAC_CUDA_ATT_SPLIT_ROWS, min_keys,
                                         s);
    const size_t cap = lilac_cuda_att_rows_part_floats(nh, hd, LILAC_CUDA_PF_BATCH),
                 row = (size_t)nh * (size_t)nsplit * (size_t)(hd + 2);
    const int per = (int)(cap / row) < 1 ? 1 : (int)(cap / row);
    for (int r0 = 0; r0 < nt; r0 += per) {
        const int rn = nt - r0 < per ? nt - r0 : per;
        if (lilac_cuda_attention_rows(pf->qg + r0 * q_tok, q_step, q_tok, kp + r0, vp + r0, rows->pos + r0, nh,
                                      hp->n_head_kv, hd, pf->att + (size_t)r0 * nh * hd, pf->att_part,
                                      hp->attn_output_gate, rn, nsplit, min_keys, s))
            return -1;
    }
    return 0;
}

lilac_status lilac_cuda_batch_exact(lilac_model *m, int nt, const pf_rows *rows, int max_pos, lilac_error *err)
{
    lilac_cuda_model *cm = m->cuda;
    struct cuda_prefill *pf = cm->pf;
    const lilac_hparams *hp = &m->hp;
    lilac_cuda_stream *s = cm->stream;
    const lilac_cuda_step_sw *sw = lilac_cuda_step_switches();
    const int E = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv, kvw = nkv * hd;
    const int q_step = hd * (hp->attn_output_gate ? 2 : 1);
    const int nk = hp->ssm_k_heads, nv = hp->ssm_v_heads, dk = hp->ssm_k_dim, dv = hp->ssm_v_dim;
    const int C = 2 * nk * dk + nv * dv, k = hp->n_expert_used, ff = hp->expert_ff, NE = hp->n_expert;
    const float eps = hp->norm_eps;
    const bool shared = hp->shared_ff > 0;
    float *const ubuf = pf->gbuf + (size_t)nt * k * ff;
    double t_ = 0; /* LILAC_CUDA_TIMING=1: the sections timed (lilac_cuda_op_mark) */
    lilac_cuda_op_mark(s, NULL, &t_);
    lilac_cuda_get_rows(&cm->tok_embd, pf->tok, nt, pf->x, s);
    lilac_cuda_rmsnorm(pf->x, cm->layers[0].attn_norm, pf->xn, nt, E, eps, s);
    for (int il = 0; il < hp->n_layer; il++) {
        const cuda_layer *cl = &cm->layers[il];
        /* x += mixer(xn) */
        if (hp->layer_kind[il] == LILAC_LAYER_ATTENTION) {
            dense(&cl->wq, &cl->wqk, pf->xn, pf->qg, nt, 0, NULL, s);
            dense(&cl->wk, &cl->wqk, pf->xn, pf->kb, nt, 0, NULL, s);
            dense(&cl->wv, NULL, pf->xn, pf->vb, nt, 0, NULL, s);
            float **kp = rows->ptrs + (size_t)(4 * il) * LILAC_CUDA_PF_BATCH, **vp = kp + LILAC_CUDA_PF_BATCH;
            lilac_cuda_norm_rope_kv_rows(pf->qg, cl->q_norm, q_step, (long long)nh * q_step, nh, pf->kb, pf->vb, kvw,
                                         cl->k_norm, kp, vp, nkv, hd, hp->rope_dims, rows->pos, hp->rope_theta, eps,
                                         nt, s);
            if (attention(m, il, nt, rows, max_pos, s))
                return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: attention with %d heads of %d", nh,
                                  hd);
            lilac_cuda_op_mark(s, "pf attention", &t_);
            dense(&cl->wo, NULL, pf->att, pf->x, nt, 1, NULL, s);
        } else {
            dense(&cl->ssm_qkv, &cl->ssm_qkvz, pf->xn, pf->qkv, nt, 0, NULL, s);
            dense(&cl->ssm_z, &cl->ssm_qkvz, pf->xn, pf->z, nt, 0, NULL, s);
            dense(&cl->ssm_alpha, &cl->ssm_ab, pf->xn, pf->a, nt, 0, NULL, s);
            dense(&cl->ssm_beta, &cl->ssm_ab, pf->xn, pf->b, nt, 0, NULL, s);
            float **cp = rows->ptrs + (size_t)(4 * il + 2) * LILAC_CUDA_PF_BATCH, **sp = cp + LILAC_CUDA_PF_BATCH;
            lilac_cuda_conv_step_rows(pf->qkv, cp, cl->ssm_conv, pf->conv, C, hp->ssm_conv_kernel, nt, s);
            if (lilac_cuda_deltanet_rows(pf->conv, pf->a, pf->b, cl->ssm_a, cl->ssm_dt, sp, pf->o, pf->z, cl->ssm_norm,
                                         nk, nv, dk, dv, m->w.ssm_v_tiled, eps, nt, s))
                return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: DeltaNet heads of %d x %d", dk, dv);
            lilac_cuda_op_mark(s, "pf deltanet", &t_);
            dense(&cl->ssm_out, NULL, pf->o, pf->x, nt, 1, NULL, s);
        }
        lilac_cuda_op_mark(s, "pf out", &t_);
        /* the post-attention norm and the router: one kernel for a float32 router, as the step */
        const float *next_norm = il + 1 < hp->n_layer ? cm->layers[il + 1].attn_norm : cm->output_norm;
        const bool gate_row = shared && cl->router_gate_row;
        long long l_row = NE + 1;
        const bool routed = sw->norm_router && cl->router.type == LILAC_F32 &&
                            !lilac_cuda_norm_router_rows(pf->x, cl->post_norm, pf->xn, cl->router.data,
                                                         (long long)(cl->router.row_bytes / sizeof(float)),
                                                         (int)cl->router.rows + gate_row, pf->rl, l_row, E, eps, nt, s);
        if (!routed) {
            lilac_cuda_rmsnorm(pf->x, cl->post_norm, pf->xn, nt, E, eps, s);
            l_row = NE;
            dense(&cl->router, NULL, pf->xn, pf->rl, nt, 0, NULL, s);
        }
        if (lilac_cuda_route_rows(pf->rl, NE, k, hp->norm_topk, pf->idx, pf->rw, 0,
                                  shared && !(routed && gate_row) ? cl->sh_gate_inp : NULL, pf->xn, E,
                                  shared && routed && gate_row ? pf->rl + NE : NULL, nt, l_row, k, k + 1, s))
            return lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA batched decode: routing %d of %d experts", k, NE);
        lilac_cuda_op_mark(s, "pf norm+route", &t_);
        if (shared) {
            dense(&cl->sh_gate, &cl->sh_gu, pf->xn, pf->shg, nt, 0, NULL, s);
            dense(&cl->sh_up, &cl->sh_gu, pf->xn, pf->shu, nt, 0, NULL, s);
            dense(&cl->sh_down, NULL, pf->shg, pf->sho, nt, 0, pf->shu, s);
            lilac_cuda_op_mark(s, "pf shared expert", &t_);
        }
        /* the routed experts a (token, expert) pair a slot, each as the step's product of its k (or, gate and
         * up in one allocation, 2k) slots */
        lilac_cuda_pf_pair_rows(pf->xn, nt, k, E, pf->ex, pf->tok_pair, s);
        const int gu_slots = cl->gu_fused ? 2 * k : k;
        lilac_cuda_matvec_like(&cl->exp_gate, cl->gate_stride, pf->idx, nt * k, pf->ex, 1, NULL, pf->gbuf, 1, 0,
                               &cl->exp_gate, cl->gate_stride, gu_slots, s);
        lilac_cuda_matvec_like(&cl->exp_up, cl->up_stride, pf->idx, nt * k, pf->ex, 1, NULL, ubuf, 1, 0,
                               cl->gu_fused ? &cl->exp_gate : &cl->exp_up, cl->gu_fused ? cl->gate_stride : cl->up_stride,
                               gu_slots, s);
        lilac_cuda_op_mark(s, "pf experts (pairs)", &t_);
        const float *sho = shared ? pf->sho : NULL;
        if (sw->down_sum && !lilac_cuda_moe_down_sum_batch(&cl->exp_down, cl->down_stride, pf->idx, k, pf->gbuf, ubuf,
                                                           pf->rw, sho, pf->x, next_norm, pf->xn, eps, pf->bpart,
                                                           pf->bcount, nt, k, k + 1, (long long)k * ff, s)) {
            lilac_cuda_op_mark(s, "pf sum", &t_);
            continue;
        }
        lilac_cuda_matvec_like(&cl->exp_down, cl->down_stride, pf->idx, nt * k, pf->gbuf, 1, ubuf, pf->ex, 1, 0,
                               &cl->exp_down, cl->down_stride, k, s);
        if (!sw->sum_grid || lilac_cuda_moe_sum_norm_grid_rows(pf->x, pf->ex, pf->rw, k, sho, pf->rw + k, next_norm,
                                                               pf->xn, E, eps, pf->bpart, pf->bcount, nt,
                                                               (long long)k * E, k + 1, s))
            lilac_cuda_moe_sum_norm_rows(pf->x, pf->ex, pf->rw, k, sho, pf->rw + k, next_norm, pf->xn, E, eps, nt,
                                         (long long)k * E, k + 1, s);
        lilac_cuda_op_mark(s, "pf sum", &t_);
    }
    return LILAC_OK;
}

#endif
