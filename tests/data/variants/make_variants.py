#!/usr/bin/env python3
"""Make the shape-variant test models and their reference outputs.

Run where transformers 5.17 + torch are installed (the lent GPU machine has
them; it runs on the CPU):  python3 make_variants.py OUTDIR
Each variant is a random-weight model of an architecture lilac runs, with
hyper-parameters unlike the shared fixtures' (layer counts and patterns, head
counts and sizes, key/value head ratios, rotary fraction, expert counts, tied
embeddings), saved as the HF checkpoint it is, with the reference's logits
(float64 forward over the bf16-exact weights) and greedy continuation.
"""
import json, math, os, sys, traceback

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

OUT = sys.argv[1]
N_TOKENS = 40
N_PROMPT, N_NEW = 6, 12

VARIANTS = {
    # 6 layers, an irregular layer pattern, GQA 4:1, head_dim 64, half the
    # dims rotated, DeltaNet with 1 key head for 3 value heads and dk != dv,
    # conv kernel 3, 6 experts top-3, tied embeddings.
    "q35-a": dict(model_type="qwen3_5_moe_text", vocab_size=320, hidden_size=128,
                  num_hidden_layers=6,
                  layer_types=["linear_attention", "full_attention", "linear_attention",
                               "linear_attention", "full_attention", "linear_attention"],
                  num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                  partial_rotary_factor=0.5,
                  rope_parameters={"rope_type": "default", "rope_theta": 50000.0,
                                   "partial_rotary_factor": 0.5,
                                   "mrope_section": [8, 4, 4], "mrope_interleaved": True},
                  linear_num_key_heads=1, linear_num_value_heads=3,
                  linear_key_head_dim=32, linear_value_head_dim=48, linear_conv_kernel_dim=3,
                  num_experts=6, num_experts_per_tok=3, moe_intermediate_size=96,
                  shared_expert_intermediate_size=64, tie_word_embeddings=True,
                  rms_norm_eps=1e-5, max_position_embeddings=1024),
    # 3 layers, attention first, no GQA, full rotary, one key head per value
    # head, 4 experts top-1, untied.
    "q35-b": dict(model_type="qwen3_5_moe_text", vocab_size=256, hidden_size=64,
                  num_hidden_layers=3,
                  layer_types=["full_attention", "linear_attention", "linear_attention"],
                  num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                  partial_rotary_factor=1.0,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                   "partial_rotary_factor": 1.0,
                                   "mrope_section": [6, 5, 5], "mrope_interleaved": True},
                  linear_num_key_heads=2, linear_num_value_heads=2,
                  linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
                  num_experts=4, num_experts_per_tok=1, moe_intermediate_size=48,
                  shared_expert_intermediate_size=32, tie_word_embeddings=False,
                  rms_norm_eps=1e-6, max_position_embeddings=1024),
    # qwen3moe: 3 layers, 6 heads / 2 KV heads of 32, 5 experts top-2 without
    # renormalization, tied embeddings.
    "q3-a": dict(model_type="qwen3_moe", vocab_size=300, hidden_size=96,
                 num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2,
                 head_dim=32, intermediate_size=128, moe_intermediate_size=80,
                 num_experts=5, num_experts_per_tok=2, norm_topk_prob=False,
                 decoder_sparse_step=1, mlp_only_layers=[],
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                 tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=1024),
}


def randomize(model, arch, seed):
    """Weights with spread: the init of a fresh model leaves norms at 0/1 and
    projections tiny, which would hide a wrong norm or a wrong head map."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("A_log"):
                v = torch.log(torch.rand(shape, generator=g) * 15 + 1)
            elif name.endswith("dt_bias"):
                v = torch.randn(shape, generator=g) * 0.5
            elif "norm" in name:
                base = 0.0 if arch == "qwen3_5_moe_text" and "linear_attn.norm" not in name else 1.0
                v = base + torch.randn(shape, generator=g) * 0.2
            elif "embed_tokens" in name or "lm_head" in name:
                v = torch.randn(shape, generator=g) * 0.5
            elif "conv1d" in name:
                v = torch.randn(shape, generator=g) * 0.4
            elif name.endswith("mlp.gate.weight"):
                v = torch.randn(shape, generator=g) * 2.0 / math.sqrt(shape[-1])
            else:
                fan_in = shape[-1]
                v = torch.randn(shape, generator=g) / math.sqrt(fan_in)
                # Strong layer outputs, so that with tied embeddings the
                # greedy path does not just repeat the last input token.
                if any(s in name for s in ("down_proj", "o_proj", "out_proj")):
                    v = v * 4.0
            p.copy_(v.to(p.dtype))


def make(name, kw, seed):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "hf"), exist_ok=True)
    arch = kw["model_type"]
    cfg = AutoConfig.for_model(**kw)
    torch.manual_seed(seed)
    # The grouped-mm expert kernels refuse float64: ask for the eager loop.
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                 experts_implementation="eager")
    except TypeError:
        cfg._experts_implementation = "eager"
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    randomize(model, arch, seed)
    model.save_pretrained(os.path.join(d, "hf"), max_shard_size="200KB" if name == "q35-b" else "50MB")
    sd_bf16 = {k: v.detach().clone() for k, v in model.state_dict().items()}

    ref = model.to(torch.float64).eval()
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, kw["vocab_size"], (N_TOKENS,), generator=g)
    with torch.no_grad():
        out = ref(tokens[None], output_hidden_states=True)
        logits = out.logits[0].to(torch.float32).contiguous()
        gen = ref.generate(tokens[None, :N_PROMPT], max_new_tokens=N_NEW, do_sample=False,
                           min_new_tokens=N_NEW)
    logits.numpy().tofile(os.path.join(d, "logits.f32"))
    meta = {"name": name, "model_type": arch, "tokens": tokens.tolist(),
            "vocab": kw["vocab_size"], "logits": {"file": "logits.f32", "shape": list(logits.shape)},
            "greedy": {"prompt": tokens[:N_PROMPT].tolist(),
                       "continuation": gen[0, N_PROMPT:].tolist()},
            "reference": "transformers %s, float64 forward over bf16-exact weights" % __import__("transformers").__version__}
    json.dump(meta, open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(name, "saved:", sorted(os.listdir(os.path.join(d, "hf"))), "logits", tuple(logits.shape),
          "max|logit|", float(logits.abs().max()), "greedy", meta["greedy"]["continuation"])
    return d, sd_bf16, cfg


def fused_multimodal(src_name, sd, cfg):
    """The layout of the published Qwen3_5MoeForConditionalGeneration
    checkpoints: config nested under text_config, text weights under
    model.language_model., experts fused, plus vision and mtp tensors that
    the engine must skip."""
    d = os.path.join(OUT, src_name + "-fused", "hf")
    os.makedirs(d, exist_ok=True)
    out = {}
    for k, v in sd.items():
        if k.startswith("model."):
            k = "model.language_model." + k[len("model."):]
        out[k] = v.contiguous()
    keys = list(out.keys())
    if not any("experts.gate_up_proj" in k for k in keys):
        # The in-memory model kept experts apart: fuse them as published checkpoints do.
        layers = sorted({int(k.split(".layers.")[1].split(".")[0]) for k in keys if ".layers." in k})
        E = cfg.num_experts
        for L in layers:
            pre = "model.language_model.layers.%d.mlp.experts." % L
            if pre + "0.gate_proj.weight" not in out:
                continue
            gu = torch.stack([torch.cat([out.pop(pre + "%d.gate_proj.weight" % e),
                                         out.pop(pre + "%d.up_proj.weight" % e)], 0) for e in range(E)])
            dn = torch.stack([out.pop(pre + "%d.down_proj.weight" % e) for e in range(E)])
            out[pre + "gate_up_proj"] = gu.contiguous()
            out[pre + "down_proj"] = dn.contiguous()
    if cfg.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    out["model.visual.patch_embed.proj.weight"] = torch.zeros(8, 3, 2, 2, dtype=torch.bfloat16)
    out["mtp.fc.weight"] = torch.zeros(4, 8, dtype=torch.bfloat16)
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    text = cfg.to_dict()
    text["model_type"] = "qwen3_5_moe_text"
    conf = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "text_config": text, "vision_config": {"depth": 1, "hidden_size": 8},
            "tie_word_embeddings": cfg.tie_word_embeddings}
    json.dump(conf, open(os.path.join(d, "config.json"), "w"), indent=1)
    print(src_name + "-fused saved:", sorted(k for k in out if "layers.0." in k or "layers" not in k))


if __name__ == "__main__":
    ok = True
    for i, (name, kw) in enumerate(VARIANTS.items()):
        try:
            d, sd, cfg = make(name, kw, 1234 + i)
            if name == "q35-a":
                fused_multimodal(name, sd, cfg)
        except Exception:
            traceback.print_exc()
            ok = False
    sys.exit(0 if ok else 1)
