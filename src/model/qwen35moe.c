/* qwen35moe: the Qwen3.5/3.6-MoE text decoder (e.g. Qwen3.6-35B-A3B):
 * Gated DeltaNet and gated full-attention layers in the pattern the file
 * gives, each followed by a routed MoE with a gated shared expert. This
 * file reads its hyper-parameters and binds its tensors; the forward pass
 * is the shared decoder (model/decoder.c). */
#include <math.h>
#include <string.h>

#include "model/loader.h"
#include "util/err.h"

static lilac_status layer_pattern_gguf(lilac_loader *ld, lilac_hparams *hp)
{
    const gguf_kv *kv = gguf_find_kv(ld->gguf, "qwen35moe.attention.recurrent_layers");
    if (kv) {
        if (kv->type != GGUF_VT_ARRAY || kv->v.arr.n != (uint64_t)hp->n_layer)
            return lilac_fail(ld->err, LILAC_E_FORMAT,
                              "%s: 'qwen35moe.attention.recurrent_layers' must be an array of %d flags",
                              ld->m->path, hp->n_layer);
        for (int i = 0; i < hp->n_layer; i++) {
            uint64_t v;
            if (!gguf_arr_u64(kv, (uint64_t)i, &v))
                return lilac_fail(ld->err, LILAC_E_FORMAT,
                                  "%s: 'qwen35moe.attention.recurrent_layers' holds a non-integer", ld->m->path);
            hp->layer_kind[i] = v ? LILAC_LAYER_DELTANET : LILAC_LAYER_ATTENTION;
        }
        return LILAC_OK;
    }
    uint32_t interval;
    lilac_status s = ld_u32(ld, "full_attention_interval", NULL, &interval);
    if (s)
        return s;
    if (interval == 0)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: full_attention_interval is 0", ld->m->path);
    for (int i = 0; i < hp->n_layer; i++)
        hp->layer_kind[i] = (i + 1) % interval == 0 ? LILAC_LAYER_ATTENTION : LILAC_LAYER_DELTANET;
    return LILAC_OK;
}

static lilac_status layer_pattern_hf(lilac_loader *ld, lilac_hparams *hp)
{
    json_t *types = json_object_get(ld->config, "layer_types");
    if (types) {
        if (!json_is_array(types) || json_array_size(types) != (size_t)hp->n_layer)
            return lilac_fail(ld->err, LILAC_E_FORMAT, "%s/config.json: 'layer_types' must list %d layers",
                              ld->m->path, hp->n_layer);
        for (int i = 0; i < hp->n_layer; i++) {
            const char *t = json_string_value(json_array_get(types, (size_t)i));
            if (t && strcmp(t, "linear_attention") == 0)
                hp->layer_kind[i] = LILAC_LAYER_DELTANET;
            else if (t && strcmp(t, "full_attention") == 0)
                hp->layer_kind[i] = LILAC_LAYER_ATTENTION;
            else
                return lilac_fail(ld->err, LILAC_E_UNSUPPORTED,
                                  "%s/config.json: layer_types[%d] is '%s'; lilac knows linear_attention and full_attention",
                                  ld->m->path, i, t ? t : "(not a string)");
        }
        return LILAC_OK;
    }
    uint32_t interval;
    lilac_status s = ld_u32_or(ld, NULL, "full_attention_interval", 4, &interval);
    if (s)
        return s;
    if (interval == 0)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s/config.json: full_attention_interval is 0", ld->m->path);
    for (int i = 0; i < hp->n_layer; i++)
        hp->layer_kind[i] = (i + 1) % interval == 0 ? LILAC_LAYER_ATTENTION : LILAC_LAYER_DELTANET;
    return LILAC_OK;
}

static lilac_status read_hparams(lilac_loader *ld, lilac_hparams *hp)
{
    lilac_status s;
    if ((s = ld_moe_hparams(ld, hp)) ||
        (s = ld_int_or(ld, "expert_shared_feed_forward_length", "shared_expert_intermediate_size", 0, &hp->shared_ff)) ||
        (s = ld_int(ld, "ssm.conv_kernel", "linear_conv_kernel_dim", &hp->ssm_conv_kernel)) ||
        (s = ld_int(ld, "ssm.state_size", "linear_key_head_dim", &hp->ssm_k_dim)) ||
        (s = ld_int(ld, "ssm.group_count", "linear_num_key_heads", &hp->ssm_k_heads)) ||
        (s = ld_int(ld, "ssm.time_step_rank", "linear_num_value_heads", &hp->ssm_v_heads)))
        return s;
    hp->attn_output_gate = true;
    hp->norm_topk = true;

    if (ld->is_gguf) {
        int vd, inner;
        if ((s = ld_int(ld, "attention.key_length", NULL, &hp->head_dim)) ||
            (s = ld_int_or(ld, "attention.value_length", NULL, hp->head_dim, &vd)) ||
            (s = ld_int(ld, "ssm.inner_size", NULL, &inner)) ||
            (s = ld_int_or(ld, "rope.dimension_count", NULL, hp->head_dim, &hp->rope_dims)) ||
            (s = ld_f32(ld, "rope.freq_base", NULL, &hp->rope_theta)) ||
            /* absent: llama.cpp renormalizes for this architecture */
            (s = ld_gguf_flag(ld, "expert_weights_norm", true, &hp->norm_topk)))
            return s;
        if (vd != hp->head_dim)
            return lilac_fail(ld->err, LILAC_E_UNSUPPORTED, "%s: key length %d differs from value length %d",
                              ld->m->path, hp->head_dim, vd);
        if (hp->ssm_v_heads == 0 || inner % hp->ssm_v_heads != 0)
            return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: ssm.inner_size %d is not a multiple of %d value heads",
                              ld->m->path, inner, hp->ssm_v_heads);
        hp->ssm_v_dim = inner / hp->ssm_v_heads;
        return layer_pattern_gguf(ld, hp);
    }

    float prf;
    if ((s = ld_int_or(ld, NULL, "head_dim", hp->n_head ? hp->n_embd / hp->n_head : 0, &hp->head_dim)) ||
        (s = ld_int(ld, NULL, "linear_value_head_dim", &hp->ssm_v_dim)) ||
        (s = ld_int(ld, NULL, "vocab_size", &hp->n_vocab)) ||
        (s = ld_hf_rope_f32(ld, "rope_theta", true, 0, &hp->rope_theta)) ||
        (s = ld_hf_rope_f32(ld, "partial_rotary_factor", false, 1.0f, &prf)))
        return s;
    hp->rope_dims = (int)(hp->head_dim * prf); /* as the reference: int(head_dim * factor) */
    hp->tied_embeddings = ld_hf_bool(ld, "tie_word_embeddings", false);
    hp->attn_output_gate = ld_hf_bool(ld, "attn_output_gate", true);
    return layer_pattern_hf(ld, hp);
}

static lilac_status bind_deltanet(lilac_loader *ld, int il, lilac_layer_weights *lw)
{
    const lilac_hparams *hp = &ld->m->hp;
    int64_t E = hp->n_embd, nk = hp->ssm_k_heads, nv = hp->ssm_v_heads;
    int64_t dk = hp->ssm_k_dim, dv = hp->ssm_v_dim, K = hp->ssm_conv_kernel;
    int64_t conv_ch = 2 * nk * dk + nv * dv;
    lilac_status s;
    if ((s = ld_mat(ld, il, "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", conv_ch, E, &lw->ssm_qkv)) ||
        (s = ld_mat(ld, il, "attn_gate.weight", "linear_attn.in_proj_z.weight", nv * dv, E, &lw->ssm_z)) ||
        (s = ld_mat(ld, il, "ssm_alpha.weight", "linear_attn.in_proj_a.weight", nv, E, &lw->ssm_alpha)) ||
        (s = ld_mat(ld, il, "ssm_beta.weight", "linear_attn.in_proj_b.weight", nv, E, &lw->ssm_beta)) ||
        (s = ld_mat(ld, il, "ssm_out.weight", "linear_attn.out_proj.weight", E, nv * dv, &lw->ssm_out)) ||
        (s = ld_vec(ld, il, "ssm_conv1d.weight", "linear_attn.conv1d.weight", conv_ch * K, 0, &lw->ssm_conv)) ||
        (s = ld_vec(ld, il, "ssm_a", "linear_attn.A_log", nv, 0, &lw->ssm_a)) ||
        (s = ld_vec(ld, il, "ssm_dt.bias", "linear_attn.dt_bias", nv, 0, &lw->ssm_dt)) ||
        (s = ld_vec(ld, il, "ssm_norm.weight", "linear_attn.norm.weight", dv, 0, &lw->ssm_norm)))
        return s;
    if (!ld->is_gguf) /* GGUF stores -exp(A_log) already */
        for (int64_t j = 0; j < nv; j++)
            lw->ssm_a[j] = -expf(lw->ssm_a[j]);
    return LILAC_OK;
}

lilac_status qwen35moe_load(lilac_loader *ld)
{
    lilac_model *m = ld->m;
    lilac_hparams *hp = &m->hp;
    lilac_status s = read_hparams(ld, hp);
    if (s || (s = ld_prepare(ld)))
        return s;
    /* HF stores zero-centred norm weights (applied as 1 + w); llama.cpp's
     * converter folds the 1 in. The DeltaNet output norm is plain in both. */
    float norm_add = ld->is_gguf || ld->mlx_layout ? 0.0f : 1.0f; /* mlx-lm folds it in too */
    m->w.ssm_v_tiled = ld->is_gguf;
    if ((s = ld_globals(ld, norm_add)))
        return s;
    for (int il = 0; il < hp->n_layer; il++) {
        lilac_layer_weights *lw = &m->w.layers[il];
        if ((s = ld_vec(ld, il, "attn_norm.weight", "input_layernorm.weight", hp->n_embd, norm_add, &lw->attn_norm)) ||
            (s = ld_vec(ld, il, "post_attention_norm.weight", "post_attention_layernorm.weight", hp->n_embd,
                        norm_add, &lw->post_norm)))
            return s;
        if (hp->layer_kind[il] == LILAC_LAYER_DELTANET)
            s = bind_deltanet(ld, il, lw);
        else
            s = ld_attention(ld, il, norm_add, lw);
        if (s || (s = ld_moe(ld, il, lw)))
            return s;
    }
    return LILAC_OK;
}
