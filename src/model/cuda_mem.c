/* cuda_mem: the CUDA backend's device buffers, sized without a GPU (see
 * cuda_mem.h). */
#include "model/cuda_mem.h"

#include <string.h>

#include "kernels/cuda/cuda_sizes.h"
#include "util/env.h"

size_t lilac_cuda_conv_channels(const lilac_hparams *hp)
{
    return (size_t)(2 * hp->ssm_k_heads * hp->ssm_k_dim + hp->ssm_v_heads * hp->ssm_v_dim);
}

lilac_cuda_seq_sizes lilac_cuda_seq_sizes_of(const lilac_hparams *hp, int n_ctx)
{
    lilac_cuda_seq_sizes s;
    memset(&s, 0, sizeof s);
    s.kv_layer = (size_t)n_ctx * (size_t)(hp->n_head_kv * hp->head_dim) * sizeof(float);
    s.conv_layer = (size_t)(hp->ssm_conv_kernel - 1) * lilac_cuda_conv_channels(hp) * sizeof(float);
    s.ssm_layer = (size_t)hp->ssm_v_heads * hp->ssm_k_dim * hp->ssm_v_dim * sizeof(float);
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION)
            s.kv += 2 * s.kv_layer;
        else
            s.recurrent += s.conv_layer + s.ssm_layer;
    }
    s.scores = (size_t)hp->n_head * (size_t)n_ctx * sizeof(float);
    s.total = s.kv + s.recurrent + s.scores;
    return s;
}

static uint64_t fill(const size_t *b, size_t n, size_t *out)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += b[i];
        if (out)
            out[i] = b[i];
    }
    return sum;
}

uint64_t lilac_cuda_decode_sizes(const lilac_hparams *hp, size_t *bytes)
{
    const size_t f = sizeof(float), E = (size_t)hp->n_embd, C = lilac_cuda_conv_channels(hp);
    const size_t nh = (size_t)hp->n_head, hd = (size_t)hp->head_dim, k = (size_t)hp->n_expert_used;
    const size_t ff = (size_t)hp->expert_ff, sff = (size_t)(hp->shared_ff > 0 ? hp->shared_ff : 1);
    const size_t nvd = (size_t)hp->ssm_v_heads * hp->ssm_v_dim + 1, nv = (size_t)hp->ssm_v_heads + 1;
    const size_t b[LILAC_CUDA_DEC_NBUF] = {
        E * f,                                                    /* x */
        E * f,                                                    /* xn */
        E * f,                                                    /* tmp */
        (nh * hd * 2 + nh * hd) * f,                              /* qg: q and its gate, then k (kb) */
        nh * hd * f,                                              /* vb */
        nh * hd * f,                                              /* att */
        (C + nvd) * f,                                            /* qkv, then z: one product may write both */
        (C + 1) * f,                                              /* conv */
        2 * nv * f,                                               /* a, then b */
        nvd * f,                                                  /* o */
        ((size_t)hp->n_expert + 1) * f,                           /* rl: the router's logits, the shared gate's */
        (k + 1) * f,                                              /* rw */
        2 * k * ff * f,                                           /* gbuf: gate, then up outputs */
        k * E * f,                                                /* ex */
        2 * sff * f,                                              /* shg, then shu */
        E * f,                                                    /* sho */
        (size_t)hp->n_vocab * f,                                  /* logits */
        lilac_cuda_att_part_floats(hp->n_head, hp->head_dim) * f, /* att_part */
        2 * sizeof(int32_t),                                      /* tok: the token, its position */
        2 * k * sizeof(int32_t),                                  /* idx */
        2 * sizeof(unsigned),                                     /* count: the route's, the sum's */
        LILAC_CUDA_PART_MAXB * f, /* part: the sum's blocks' squares (or lilac_cuda_moe_down_sum's) */
        lilac_cuda_top_bytes(hp->n_vocab, LILAC_TOP_MAX, LILAC_CUDA_TOP_ROWS), /* top: the sampler's reduction */
    };
    return fill(b, LILAC_CUDA_DEC_NBUF, bytes);
}

/* Rows of the prefill buffers for a chunk of `rows` tokens: never fewer than PF_MAX. */
static int pf_rows_of(int rows) { return rows > LILAC_CUDA_PF_MAX ? rows : LILAC_CUDA_PF_MAX; }

int lilac_cuda_pf_rows(void)
{
    return pf_rows_of(lilac_env_int("LILAC_CUDA_PREFILL_CHUNK", LILAC_CUDA_PF_MAX, 1, LILAC_CUDA_PF_LIMIT));
}

uint64_t lilac_cuda_prefill_sizes(const lilac_hparams *hp, int rows, size_t *bytes)
{
    const size_t T = (size_t)pf_rows_of(rows), E = (size_t)hp->n_embd, nh = (size_t)hp->n_head;
    const size_t hd = (size_t)hp->head_dim;
    const size_t kvw = (size_t)hp->n_head_kv * hd, k = (size_t)hp->n_expert_used, ff = (size_t)hp->expert_ff;
    const size_t sff = (size_t)(hp->shared_ff > 0 ? hp->shared_ff : 1);
    const size_t C = lilac_cuda_conv_channels(hp) + 1;
    const size_t nvd = (size_t)hp->ssm_v_heads * hp->ssm_v_dim + 1, nv = (size_t)hp->ssm_v_heads + 1;
    const size_t q_width = nh * hd * (hp->attn_output_gate ? 2 : 1);
    const size_t b[LILAC_CUDA_PF_NBUF] = {
        T * E * 4,                                      /* x */
        T * E * 4,                                      /* xn */
        T * E * 4,                                      /* tmp */
        T * q_width * 4,                                /* qg */
        T * kvw * 4,                                    /* kb */
        T * kvw * 4,                                    /* vb */
        T * nh * hd * 4,                                /* att */
        T * C * 4,                                      /* qkv */
        T * C * 4,                                      /* conv */
        T * nvd * 4,                                    /* z */
        T * nv * 4,                                     /* a */
        T * nv * 4,                                     /* b */
        T * nvd * 4,                                    /* o */
        T * ((size_t)hp->n_expert + 1) * 4,             /* rl: the router's logits, the shared gate's */
        T * (k + 1) * 4,                                /* rw: the weights, the shared gate */
        2 * T * k * ff * 4,                             /* gbuf: gate, then up outputs */
        T * k * E * 4,                                  /* ex */
        T * sff * 4,                                    /* shg */
        T * sff * 4,                                    /* shu */
        T * E * 4,                                      /* sho */
        (size_t)LILAC_CUDA_PF_LOGIT_ROWS * (size_t)hp->n_vocab * 4, /* logits */
        T * 4,                                          /* tok */
        T * k * 4,                                      /* idx */
        (2 * (size_t)hp->n_expert + 1) * 4,             /* offsets */
        2 * T * k * 4,                                  /* pair_tok */
        T * k * 4,                                      /* tok_pair */
        LILAC_CUDA_PF_BATCH * 4,                        /* pos */
        (size_t)hp->n_layer * 4 * LILAC_CUDA_PF_BATCH * sizeof(float *), /* ptrs */
        lilac_cuda_att_rows_part_floats(hp->n_head, hp->head_dim, LILAC_CUDA_PF_BATCH) * 4, /* att_part */
        lilac_cuda_dn_tp_floats(hp->ssm_v_heads > 0 ? hp->ssm_v_heads : 1, (int)T) * 4, /* dntp */
        (size_t)LILAC_CUDA_PF_BATCH * LILAC_CUDA_PART_MAXB * 4, /* bpart: the exact batched step's squares */
        (size_t)LILAC_CUDA_PF_BATCH * sizeof(unsigned), /* bcount: its counters */
    };
    return fill(b, LILAC_CUDA_PF_NBUF, bytes);
}

uint64_t lilac_cuda_attn_split_bound(const lilac_hparams *hp, int n_ctx)
{
    int attn = 0;
    for (int i = 0; i < hp->n_layer; i++)
        attn |= hp->layer_kind[i] == LILAC_LAYER_ATTENTION;
    const int hd = hp->head_dim;
    if (!attn || n_ctx < 1 || (hd != 64 && hd != 128 && hd != 256))
        return 0;
    const size_t keys = ((size_t)n_ctx + LILAC_CUDA_ATT_GROW - 1) / LILAC_CUDA_ATT_GROW * LILAC_CUDA_ATT_GROW;
    return lilac_cuda_scratch_round(lilac_cuda_attn_split_bytes(keys, (size_t)hp->n_head_kv, (size_t)hd));
}

uint64_t lilac_cuda_mma_scratch_bound(const lilac_hparams *hp, int rows)
{
    const size_t T = (size_t)pf_rows_of(rows), E = (size_t)hp->n_embd, k = (size_t)hp->n_expert_used;
    size_t wide = E;
    const size_t cand[] = {(size_t)hp->n_head * hp->head_dim, (size_t)hp->ssm_v_heads * hp->ssm_v_dim,
                           (size_t)(hp->shared_ff > 0 ? hp->shared_ff : 0)};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (cand[i] > wide)
            wide = cand[i];
    size_t need = lilac_cuda_xq_bytes(T, wide), g = lilac_cuda_xq_bytes(2 * T * k, E),
           d = lilac_cuda_xq_bytes(T * k, (size_t)hp->expert_ff);
    if (g > need)
        need = g;
    if (d > need)
        need = d;
    /* and the second stream's (the prefill's LILAC_CUDA_PF_AUX): k/v, alpha/beta and the shared expert's gate
     * and up take n_embd columns, its down shared_ff */
    const size_t aux = hp->shared_ff > 0 && (size_t)hp->shared_ff > E ? (size_t)hp->shared_ff : E;
    return lilac_cuda_scratch_round(need) + lilac_cuda_scratch_round(lilac_cuda_xq_bytes(T, aux));
}
