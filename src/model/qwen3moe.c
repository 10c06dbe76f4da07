/* qwen3moe: Qwen3-30B-A3B and kin: full attention with q/k RMSNorm and
 * rotary on whole heads in every layer, then a routed MoE without a shared
 * expert. Hyper-parameters and tensor names; the forward pass is the shared
 * decoder (model/decoder.c). */
#include <string.h>

#include "model/loader.h"
#include "util/err.h"

static lilac_status read_hparams(lilac_loader *ld, lilac_hparams *hp)
{
    lilac_status s = ld_moe_hparams(ld, hp);
    if (s)
        return s;
    hp->shared_ff = 0;
    hp->attn_output_gate = false;
    for (int i = 0; i < hp->n_layer; i++)
        hp->layer_kind[i] = LILAC_LAYER_ATTENTION;

    if (ld->is_gguf) {
        if ((s = ld_int(ld, "attention.key_length", NULL, &hp->head_dim)) ||
            (s = ld_int_or(ld, "rope.dimension_count", NULL, hp->head_dim, &hp->rope_dims)) ||
            (s = ld_f32(ld, "rope.freq_base", NULL, &hp->rope_theta)) ||
            /* absent: llama.cpp renormalizes for this architecture */
            (s = ld_gguf_flag(ld, "expert_weights_norm", true, &hp->norm_topk)))
            return s;
        return LILAC_OK;
    }
    int step;
    if ((s = ld_int_or(ld, NULL, "head_dim", hp->n_head ? hp->n_embd / hp->n_head : 0, &hp->head_dim)) ||
        (s = ld_int(ld, NULL, "vocab_size", &hp->n_vocab)) ||
        (s = ld_int_or(ld, NULL, "decoder_sparse_step", 1, &step)) ||
        (s = ld_hf_rope_f32(ld, "rope_theta", true, 0, &hp->rope_theta)))
        return s;
    json_t *mlp_only = json_object_get(ld->config, "mlp_only_layers");
    if (step != 1 || (json_is_array(mlp_only) && json_array_size(mlp_only) > 0))
        return lilac_fail(ld->err, LILAC_E_UNSUPPORTED,
                          "%s: dense MLP layers (decoder_sparse_step %d, mlp_only_layers) are not supported",
                          ld_hp_file(ld), step);
    hp->rope_dims = hp->head_dim;
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
