/* qwen3moe: Qwen3-30B-A3B and kin: full attention with q/k RMSNorm and
 * rotary on whole heads in every layer, then a routed MoE without a shared
 * expert. Hyper-parameters and tensor names; the forward pass is the shared
 * decoder (model/decoder.c). */
#include <string.h>

#include "model/loader.h"
#include "util/err.h"

static lilac_status read_hparams(lilac_loader *ld, lilac_hparams *hp)
{
    uint32_t u[10];
    lilac_status s;
    if ((s = ld_u32(ld, "block_count", "num_hidden_layers", &u[0])) ||
        (s = ld_u32(ld, "embedding_length", "hidden_size", &u[1])) ||
        (s = ld_u32(ld, "attention.head_count", "num_attention_heads", &u[2])) ||
        (s = ld_u32(ld, "attention.head_count_kv", "num_key_value_heads", &u[3])) ||
        (s = ld_u32(ld, "expert_count", "num_experts|num_local_experts", &u[4])) ||
        (s = ld_u32(ld, "expert_used_count", "num_experts_per_tok", &u[5])) ||
        (s = ld_u32(ld, "expert_feed_forward_length", "moe_intermediate_size", &u[6])) ||
        (s = ld_u32_or(ld, "context_length", "max_position_embeddings", 0, &u[7])) ||
        (s = ld_f32(ld, "attention.layer_norm_rms_epsilon", "rms_norm_eps", &hp->norm_eps)))
        return s;
    if (u[0] < 1 || u[0] > LILAC_MAX_LAYERS)
        return lilac_fail(ld->err, LILAC_E_FORMAT, "%s: %u layers; lilac runs 1 to %d", ld_hp_file(ld), u[0],
                          LILAC_MAX_LAYERS);
    hp->n_layer = (int)u[0];
    hp->n_embd = (int)u[1];
    hp->n_head = (int)u[2];
    hp->n_head_kv = (int)u[3];
    hp->n_expert = (int)u[4];
    hp->n_expert_used = (int)u[5];
    hp->expert_ff = (int)u[6];
    hp->n_ctx_train = (int)u[7];
    hp->shared_ff = 0;
    hp->attn_output_gate = false;
    for (int i = 0; i < hp->n_layer; i++)
        hp->layer_kind[i] = LILAC_LAYER_ATTENTION;

    uint32_t hd, rot;
    if (ld->is_gguf) {
        uint32_t norm;
        if ((s = ld_u32(ld, "attention.key_length", NULL, &hd)) ||
            (s = ld_u32_or(ld, "rope.dimension_count", NULL, hd, &rot)) ||
            (s = ld_f32(ld, "rope.freq_base", NULL, &hp->rope_theta)) ||
            (s = ld_u32_or(ld, "expert_weights_norm", NULL, 1, &norm)))
            return s;
        hp->head_dim = (int)hd;
        hp->rope_dims = (int)rot;
        hp->norm_topk = norm != 0; /* llama.cpp renormalizes for this architecture */
        return LILAC_OK;
    }
    uint32_t vocab, step;
    if ((s = ld_u32_or(ld, NULL, "head_dim", hp->n_head ? (uint32_t)(hp->n_embd / hp->n_head) : 0, &hd)) ||
        (s = ld_u32(ld, NULL, "vocab_size", &vocab)) ||
        (s = ld_u32_or(ld, NULL, "decoder_sparse_step", 1, &step)) ||
        (s = ld_hf_rope_f32(ld, "rope_theta", true, 0, &hp->rope_theta)))
        return s;
    json_t *mlp_only = json_object_get(ld->config, "mlp_only_layers");
    if (step != 1 || (json_is_array(mlp_only) && json_array_size(mlp_only) > 0))
        return lilac_fail(ld->err, LILAC_E_UNSUPPORTED,
                          "%s/config.json: dense MLP layers (decoder_sparse_step %u, mlp_only_layers) are not supported",
                          ld->m->path, step);
    hp->head_dim = (int)hd;
    hp->rope_dims = (int)hd;
    hp->n_vocab = (int)vocab;
    hp->norm_topk = ld_hf_bool(ld, "norm_topk_prob", false); /* the transformers default */
    hp->tied_embeddings = ld_hf_bool(ld, "tie_word_embeddings", false);
    return LILAC_OK;
}

lilac_status qwen3moe_load(lilac_loader *ld)
{
    lilac_model *m = ld->m;
    lilac_hparams *hp = &m->hp;
    lilac_status s = read_hparams(ld, hp);
    if (s || (s = ld_prepare(ld)) || (s = ld_globals(ld, 0.0f)))
        return s;
    for (int il = 0; il < hp->n_layer; il++) {
        lilac_layer_weights *lw = &m->w.layers[il];
        if ((s = ld_vec(ld, il, "attn_norm.weight", "input_layernorm.weight", hp->n_embd, 0, &lw->attn_norm)) ||
            (s = ld_vec(ld, il, "ffn_norm.weight", "post_attention_layernorm.weight", hp->n_embd, 0, &lw->post_norm)) ||
            (s = ld_attention(ld, il, 0.0f, lw)) || (s = ld_moe(ld, il, lw)))
            return s;
    }
    return LILAC_OK;
}
