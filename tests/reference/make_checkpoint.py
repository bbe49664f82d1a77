#!/usr/bin/python3
"""Writes a tiny random-weight checkpoint in the exact Hugging Face layout.

Usage:
  make_checkpoint.py --family {gpt2,llama,llama3,mistral,qwen2,qwen3,opt,opt-proj,
                               gemma3_text,gemma3,phi3,phi4mini,mixtral,qwen3_moe,gpt_oss}
                     --out DIR [--seed N] [--dtype float32|bfloat16|float16]
                     [--shards K] [--tied | --untied] [--no-prefix]
                     [--pre-ln | --post-ln]   (opt families only)

Writes DIR/config.json, DIR/generation_config.json and either
DIR/model.safetensors (K=1) or DIR/model-0000i-of-0000K.safetensors plus
DIR/model.safetensors.index.json. See README.md for the tensor names.
Exit status 3: torch is not importable by this interpreter.
"""
import argparse
import json
import math
import os
import sys

try:
    import torch
except ImportError:
    print("torch is not importable by " + sys.executable, file=sys.stderr)
    sys.exit(3)

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
import fam_deepseek  # noqa: E402
import fam_gptoss  # noqa: E402
import quant_ref  # noqa: E402

TRANSFORMERS_VERSION = "4.46.0"
FAMILIES = ["gpt2", "llama", "llama3", "mistral", "qwen2", "qwen3", "opt", "opt-proj",
            "gemma3_text", "gemma3", "phi3", "phi4mini", "mixtral", "qwen3_moe", "gpt_oss"] + fam_deepseek.FAMILIES
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ----------------------------------------------------------------------------- configs

def gpt2_config(tied):
    v = 211
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": v - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": v - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": 128,
        "n_embd": 48,
        "n_head": 4,
        "n_inner": None,
        "n_layer": 3,
        "n_positions": 128,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "vocab_size": v,
    }


def llama_like_config(family, tied):
    # Field sets follow what transformers 4.4x writes for each config class.
    if family in ("llama", "llama3"):
        llama3 = family == "llama3"
        v = 280 if llama3 else 256
        c = {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 256 if llama3 else 1,
            "eos_token_id": 257 if llama3 else 2,
            "head_dim": 16,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 160 if llama3 else 128,
            "max_position_embeddings": 1024 if llama3 else 256,
            "mlp_bias": False,
            "model_type": "llama",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 500000.0 if llama3 else 10000.0,
            "tie_word_embeddings": tied,
            "use_cache": True,
            "vocab_size": v,
        }
        if llama3:
            # original_max_position_embeddings is small so that, with head_dim 16 and
            # theta 5e5, the three llama3 bands (kept / smoothed / divided by factor)
            # are all populated: wavelengths 6.3 | 32 | 167 ... 6.1e5 vs 16 and 64.
            c["rope_scaling"] = {
                "factor": 8.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 64,
                "rope_type": "llama3",
            }
        return c
    if family == "mistral":
        return {
            "architectures": ["MistralForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "head_dim": 8,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 112,
            "max_position_embeddings": 512,
            "model_type": "mistral",
            "num_attention_heads": 8,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "sliding_window": 4096,
            "tie_word_embeddings": tied,
            "use_cache": True,
            "vocab_size": 192,
        }
    if family == "qwen2":
        return {
            "architectures": ["Qwen2ForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 297,
            "eos_token_id": 299,
            "hidden_act": "silu",
            "hidden_size": 48,
            "initializer_range": 0.02,
            "intermediate_size": 96,
            "max_position_embeddings": 512,
            "max_window_layers": 3,
            "model_type": "qwen2",
            "num_attention_heads": 4,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000.0,
            "sliding_window": 512,
            "tie_word_embeddings": tied,
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": 300,
        }
    if family == "qwen3":
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 148,
            "eos_token_id": 150,
            "head_dim": 16,
            "hidden_act": "silu",
            "hidden_size": 48,
            "initializer_range": 0.02,
            "intermediate_size": 96,
            "max_position_embeddings": 512,
            "max_window_layers": 2,
            "model_type": "qwen3",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "tie_word_embeddings": tied,
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": 151,
        }
    raise ValueError(family)


def opt_config(family, tied, pre_ln):
    proj = family == "opt-proj"
    hidden = 64 if proj else 48
    return {
        "_remove_final_layer_norm": False,
        "activation_dropout": 0.0,
        "activation_function": "relu",
        "architectures": ["OPTForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 2,
        "do_layer_norm_before": pre_ln,
        "dropout": 0.1,
        "enable_bias": True,
        "eos_token_id": 2,
        "ffn_dim": 4 * hidden // 2 if proj else 2 * hidden,
        "hidden_size": hidden,
        "init_std": 0.02,
        "layer_norm_elementwise_affine": True,
        "layerdrop": 0.0,
        "max_position_embeddings": 128,
        "model_type": "opt",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "pad_token_id": 1,
        "prefix": "</s>",
        "tie_word_embeddings": tied,
        "use_cache": True,
        "vocab_size": 130 if proj else 120,
        "word_embed_proj_dim": 32 if proj else hidden,
    }


def gemma3_text_config(tied):
    # Gemma3ForCausalLM (gemma-3-1b style): 3 layers, every 2nd global
    # (sliding_window_pattern, no layer_types), a window of 4 positions,
    # head_dim 24 != hidden / heads, query_pre_attn_scalar 32 != head_dim.
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "final_logit_softcapping": None,
        "head_dim": 24,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "max_position_embeddings": 512,
        "model_type": "gemma3_text",
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "pad_token_id": 0,
        "query_pre_attn_scalar": 32,
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 4,
        "sliding_window_pattern": 2,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "vocab_size": 262,
    }


def gemma3_config(tied):
    # Gemma3ForConditionalGeneration (gemma-3-4b style): a tiny SigLIP tower
    # without the pooling head (vision_use_head false, as Google's configs),
    # linear rope scaling on the global layers (factor 8, as the 4b), explicit
    # layer_types, and both softcaps set so that those paths are exercised.
    # tie_word_embeddings is left out when tied: Gemma3Config's default.
    c = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "boi_token_index": 297,
        "eoi_token_index": 298,
        "eos_token_id": [1, 106],
        "image_token_index": 299,
        "initializer_range": 0.02,
        "mm_tokens_per_image": 4,
        "model_type": "gemma3",
        "text_config": {
            "attn_logit_softcapping": 5.0,
            "final_logit_softcapping": 30.0,
            "head_dim": 16,
            "hidden_size": 48,
            "intermediate_size": 96,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "model_type": "gemma3_text",
            "num_attention_heads": 4,
            "num_hidden_layers": 3,
            "num_key_value_heads": 1,
            "query_pre_attn_scalar": 16,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 3,
            "vocab_size": 300,
        },
        "vision_config": {
            "hidden_size": 32,
            "image_size": 16,
            "intermediate_size": 48,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "patch_size": 4,
            "vision_use_head": False,
        },
    }
    if not tied:
        c["tie_word_embeddings"] = False
    return c
def phi3_config(family, tied):
    """Phi3Config fields as microsoft/Phi-3-mini-4k-instruct (phi3: default rope) and
    microsoft/Phi-4-mini-instruct (phi4mini: longrope, partial_rotary_factor 0.75,
    grouped-query attention) write them, at tiny sizes. phi3's sliding_window is 4
    (Phi-3-mini-4k: 2047) so that a test's prompt and decoding both pass it."""
    if family == "phi3":
        v = 320
        return {
            "architectures": ["Phi3ForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "embd_pdrop": 0.0,
            "eos_token_id": 300,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 96,
            "max_position_embeddings": 256,
            "model_type": "phi3",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 4,
            "original_max_position_embeddings": 256,
            "pad_token_id": 300,
            "resid_pdrop": 0.0,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 10000.0,
            "sliding_window": 4,
            "tie_word_embeddings": tied,
            "use_cache": True,
            "vocab_size": v,
        }
    if family == "phi4mini":
        v = 352
        # head_dim 64 / 4 = 16, rotary dims int(16 * 0.75) = 12: six factors each.
        # original_max_position_embeddings 16 (Phi-4-mini: 4096) so that a test's
        # sequence passes it: the prefill uses short_factor, decoding switches to
        # long_factor at 17 positions (and drops the cache once, as generate does).
        # factor = 64 / 16 = 4: attention_factor sqrt(1 + ln 4 / ln 16) = sqrt(1.5).
        return {
            "architectures": ["Phi3ForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": v - 1,
            "embd_pdrop": 0.0,
            "eos_token_id": v - 1,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 128,
            "max_position_embeddings": 64,
            "model_type": "phi3",
            "num_attention_heads": 4,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "original_max_position_embeddings": 16,
            "pad_token_id": v - 1,
            "partial_rotary_factor": 0.75,
            "resid_pdrop": 0.0,
            "rms_norm_eps": 1e-05,
            "rope_scaling": {
                "long_factor": [1.0, 1.25, 2.5, 5.0, 9.0, 20.0],
                "short_factor": [1.0, 1.0, 1.1, 1.3, 1.6, 2.0],
                "type": "longrope",
            },
            "rope_theta": 10000.0,
            "sliding_window": 262144,
            "tie_word_embeddings": tied,
            "use_cache": True,
            "vocab_size": v,
        }
    raise ValueError(family)


# ----------------------------------------------------------------------------- tensor layouts
# Each entry: (name, shape, kind). kind picks the init distribution.

def gpt2_layout(c, prefix, tied):
    H, P, V = c["n_embd"], c["n_positions"], c["vocab_size"]
    inner = c["n_inner"] or 4 * H
    p = "transformer." if prefix else ""
    t = [(p + "wte.weight", [V, H], "embed"), (p + "wpe.weight", [P, H], "pos")]
    for i in range(c["n_layer"]):
        h = "%sh.%d." % (p, i)
        t += [(h + "ln_1.weight", [H], "norm"), (h + "ln_1.bias", [H], "bias")]
        if not prefix:
            # Old GPT2Model files (distilgpt2, gpt2) carry the causal-mask buffers.
            t += [(h + "attn.bias", [1, 1, P, P], "causal_mask"), (h + "attn.masked_bias", [], "masked_bias")]
        t += [(h + "attn.c_attn.weight", [H, 3 * H], "conv1d"), (h + "attn.c_attn.bias", [3 * H], "bias"),
              (h + "attn.c_proj.weight", [H, H], "conv1d"), (h + "attn.c_proj.bias", [H], "bias"),
              (h + "ln_2.weight", [H], "norm"), (h + "ln_2.bias", [H], "bias"),
              (h + "mlp.c_fc.weight", [H, inner], "conv1d"), (h + "mlp.c_fc.bias", [inner], "bias"),
              (h + "mlp.c_proj.weight", [inner, H], "conv1d"), (h + "mlp.c_proj.bias", [H], "bias")]
    t += [(p + "ln_f.weight", [H], "norm"), (p + "ln_f.bias", [H], "bias")]
    if not tied:
        t.append(("lm_head.weight", [V, H], "embed"))
    return t


def llama_like_layout(family, c, prefix, tied):
    H, V, I = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or H // nh
    qkv_bias = family == "qwen2"
    p = "model." if prefix else ""
    t = [(p + "embed_tokens.weight", [V, H], "embed")]
    for i in range(c["num_hidden_layers"]):
        l = "%slayers.%d." % (p, i)
        t.append((l + "input_layernorm.weight", [H], "norm"))
        for proj, rows in (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)):
            t.append((l + "self_attn.%s.weight" % proj, [rows, H], "linear"))
            if qkv_bias:
                t.append((l + "self_attn.%s.bias" % proj, [rows], "bias"))
        t.append((l + "self_attn.o_proj.weight", [H, nh * hd], "linear"))
        if family == "qwen3":
            t += [(l + "self_attn.q_norm.weight", [hd], "qk_norm"), (l + "self_attn.k_norm.weight", [hd], "qk_norm")]
        t += [(l + "post_attention_layernorm.weight", [H], "norm"),
              (l + "mlp.gate_proj.weight", [I, H], "linear"),
              (l + "mlp.up_proj.weight", [I, H], "linear"),
              (l + "mlp.down_proj.weight", [H, I], "linear")]
    t.append((p + "norm.weight", [H], "norm"))
    if not tied:
        t.append(("lm_head.weight", [V, H], "embed"))
    return t


def phi3_layout(c, prefix, tied):
    H, V, I = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = H // nh
    p = "model." if prefix else ""
    t = [(p + "embed_tokens.weight", [V, H], "embed")]
    for i in range(c["num_hidden_layers"]):
        l = "%slayers.%d." % (p, i)
        t += [(l + "input_layernorm.weight", [H], "norm"),
              (l + "self_attn.qkv_proj.weight", [(nh + 2 * nkv) * hd, H], "linear"),
              (l + "self_attn.o_proj.weight", [H, nh * hd], "linear"),
              (l + "post_attention_layernorm.weight", [H], "norm"),
              (l + "mlp.gate_up_proj.weight", [2 * I, H], "linear"),
              (l + "mlp.down_proj.weight", [H, I], "linear")]
    t.append((p + "norm.weight", [H], "norm"))
    if not tied:
        t.append(("lm_head.weight", [V, H], "embed"))
    return t


def opt_layout(c, prefix, tied):
    H, V, F = c["hidden_size"], c["vocab_size"], c["ffn_dim"]
    W = c["word_embed_proj_dim"]
    p = "model.decoder." if prefix else "decoder."
    # OPTLearnedPositionalEmbedding allocates max_position_embeddings + 2 rows (offset 2).
    t = [(p + "embed_tokens.weight", [V, W], "embed"),
         (p + "embed_positions.weight", [c["max_position_embeddings"] + 2, H], "pos")]
    if W != H:
        t += [(p + "project_out.weight", [W, H], "linear"), (p + "project_in.weight", [H, W], "linear")]
    if c["do_layer_norm_before"] and not c["_remove_final_layer_norm"]:
        t += [(p + "final_layer_norm.weight", [H], "norm"), (p + "final_layer_norm.bias", [H], "bias")]
    for i in range(c["num_hidden_layers"]):
        l = "%slayers.%d." % (p, i)
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            t += [(l + "self_attn.%s.weight" % proj, [H, H], "linear"), (l + "self_attn.%s.bias" % proj, [H], "bias")]
        t += [(l + "self_attn_layer_norm.weight", [H], "norm"), (l + "self_attn_layer_norm.bias", [H], "bias"),
              (l + "fc1.weight", [F, H], "linear"), (l + "fc1.bias", [F], "bias"),
              (l + "fc2.weight", [H, F], "linear"), (l + "fc2.bias", [H], "bias"),
              (l + "final_layer_norm.weight", [H], "norm"), (l + "final_layer_norm.bias", [H], "bias")]
    if not tied:
        t.append(("lm_head.weight", [V, W], "embed"))
    return t


def gemma3_text_layout(c, p, tied, head):
    """Gemma3TextModel's tensors under prefix p, and the head under `head`."""
    H, V, I = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    t = [(p + "embed_tokens.weight", [V, H], "gemma_embed")]
    for i in range(c["num_hidden_layers"]):
        l = "%slayers.%d." % (p, i)
        t += [(l + "input_layernorm.weight", [H], "gemma_norm"),
              (l + "mlp.down_proj.weight", [H, I], "linear"),
              (l + "mlp.gate_proj.weight", [I, H], "linear"),
              (l + "mlp.up_proj.weight", [I, H], "linear"),
              (l + "post_attention_layernorm.weight", [H], "gemma_post_norm"),
              (l + "post_feedforward_layernorm.weight", [H], "gemma_post_norm"),
              (l + "pre_feedforward_layernorm.weight", [H], "gemma_norm"),
              (l + "self_attn.k_norm.weight", [hd], "gemma_norm"),
              (l + "self_attn.k_proj.weight", [nkv * hd, H], "linear"),
              (l + "self_attn.o_proj.weight", [H, nh * hd], "linear"),
              (l + "self_attn.q_norm.weight", [hd], "gemma_norm"),
              (l + "self_attn.q_proj.weight", [nh * hd, H], "linear"),
              (l + "self_attn.v_proj.weight", [nkv * hd, H], "linear")]
    t.append((p + "norm.weight", [H], "gemma_norm"))
    if not tied:
        t.append((head, [V, H], "gemma_embed"))
    return t


def gemma3_layout(c, tied):
    """The names google/gemma-3-4b-it's files hold (transformers 4.50's layout,
    which 5.6 renames on load): language_model.model.*, multi_modal_projector.*,
    vision_tower.vision_model.*."""
    t = gemma3_text_layout(c["text_config"], "language_model.model.", tied, "language_model.lm_head.weight")
    v = c["vision_config"]
    VH, VI, P = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    n = (v["image_size"] // P) ** 2
    t += [("multi_modal_projector.mm_input_projection_weight", [VH, c["text_config"]["hidden_size"]], "linear_t"),
          ("multi_modal_projector.mm_soft_emb_norm.weight", [VH], "gemma_norm")]
    vp = "vision_tower.vision_model."
    t += [(vp + "embeddings.patch_embedding.bias", [VH], "bias"),
          (vp + "embeddings.patch_embedding.weight", [VH, 3, P, P], "bias"),
          (vp + "embeddings.position_embedding.weight", [n, VH], "pos")]
    for i in range(v["num_hidden_layers"]):
        l = "%sencoder.layers.%d." % (vp, i)
        t += [(l + "layer_norm1.bias", [VH], "bias"), (l + "layer_norm1.weight", [VH], "norm"),
              (l + "layer_norm2.bias", [VH], "bias"), (l + "layer_norm2.weight", [VH], "norm"),
              (l + "mlp.fc1.bias", [VI], "bias"), (l + "mlp.fc1.weight", [VI, VH], "linear"),
              (l + "mlp.fc2.bias", [VH], "bias"), (l + "mlp.fc2.weight", [VH, VI], "linear")]
        for proj in ("k_proj", "out_proj", "q_proj", "v_proj"):
            t += [(l + "self_attn.%s.bias" % proj, [VH], "bias"), (l + "self_attn.%s.weight" % proj, [VH, VH], "linear")]
    t += [(vp + "post_layernorm.bias", [VH], "bias"), (vp + "post_layernorm.weight", [VH], "norm")]
    return t
def moe_config(family, tied, norm_topk):
    # The fields a 4.4x MixtralConfig / Qwen3MoeConfig save writes.
    if family == "mixtral":
        return {
            "architectures": ["MixtralForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "hidden_act": "silu",
            "hidden_size": 48,
            "initializer_range": 0.02,
            "intermediate_size": 64,
            "max_position_embeddings": 512,
            "model_type": "mixtral",
            "num_attention_heads": 4,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "num_local_experts": 4,
            "output_router_logits": False,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "router_aux_loss_coef": 0.02,
            "router_jitter_noise": 0.0,
            "sliding_window": None,
            "tie_word_embeddings": tied,
            "use_cache": True,
            "vocab_size": 160,
        }
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 167,
        "decoder_sparse_step": 1,
        "eos_token_id": 169,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "max_position_embeddings": 512,
        "max_window_layers": 3,
        "mlp_only_layers": [1],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": 40,
        "norm_topk_prob": norm_topk,
        "num_attention_heads": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 170,
    }


def moe_layout(family, c, prefix, tied):
    """Per-expert names, as save_pretrained of the pre-5.x models wrote them (and Hub
    checkpoints hold): state_dict order, router before experts."""
    H, V = c["hidden_size"], c["vocab_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or H // nh
    mixtral = family == "mixtral"
    E = c["num_local_experts"] if mixtral else c["num_experts"]
    I = c["intermediate_size"] if mixtral else c["moe_intermediate_size"]
    p = "model." if prefix else ""
    t = [(p + "embed_tokens.weight", [V, H], "embed")]
    for i in range(c["num_hidden_layers"]):
        l = "%slayers.%d." % (p, i)
        t += [(l + "self_attn.q_proj.weight", [nh * hd, H], "linear"),
              (l + "self_attn.k_proj.weight", [nkv * hd, H], "linear"),
              (l + "self_attn.v_proj.weight", [nkv * hd, H], "linear"),
              (l + "self_attn.o_proj.weight", [H, nh * hd], "linear")]
        if not mixtral:
            t += [(l + "self_attn.q_norm.weight", [hd], "qk_norm"), (l + "self_attn.k_norm.weight", [hd], "qk_norm")]
        if mixtral:
            # MixtralSparseMoeBlock (4.x): gate, experts[e] = MixtralBlockSparseTop2MLP(w1, w2, w3)
            b = l + "block_sparse_moe."
            t.append((b + "gate.weight", [E, H], "linear"))
            for e in range(E):
                x = "%sexperts.%d." % (b, e)
                t += [(x + "w1.weight", [I, H], "linear"), (x + "w2.weight", [H, I], "linear"),
                      (x + "w3.weight", [I, H], "linear")]
        elif i not in c["mlp_only_layers"] and (i + 1) % c["decoder_sparse_step"] == 0:
            # Qwen3MoeSparseMoeBlock (4.x): gate, experts[e] = Qwen3MoeMLP(gate_proj, up_proj, down_proj)
            t.append((l + "mlp.gate.weight", [E, H], "linear"))
            for e in range(E):
                x = "%smlp.experts.%d." % (l, e)
                t += [(x + "gate_proj.weight", [I, H], "linear"), (x + "up_proj.weight", [I, H], "linear"),
                      (x + "down_proj.weight", [H, I], "linear")]
        else:
            D = c["intermediate_size"]
            t += [(l + "mlp.gate_proj.weight", [D, H], "linear"), (l + "mlp.up_proj.weight", [D, H], "linear"),
                  (l + "mlp.down_proj.weight", [H, D], "linear")]
        t += [(l + "input_layernorm.weight", [H], "norm"), (l + "post_attention_layernorm.weight", [H], "norm")]
    t.append((p + "norm.weight", [H], "norm"))
    if not tied:
        t.append(("lm_head.weight", [V, H], "embed"))
    return t


def fuse_experts(family, tensors):
    """The same weights as transformers 5.x names them in memory (and as a checkpoint that
    stores experts fused holds them): per layer mlp.gate.weight, then
    mlp.experts.gate_up_proj = cat([stack(gate over experts), stack(up)], dim=1) [E, 2I, H]
    and mlp.experts.down_proj = stack(down) [E, H, I] (conversion_mapping.py's operations)."""
    gate_name, up_name, down_name = ("w1", "w3", "w2") if family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    block = ".block_sparse_moe." if family == "mixtral" else ".mlp."
    by_name = dict(tensors)
    out = []
    for name, t in tensors:
        if block + "experts." in name:
            continue
        if not name.endswith(block + "gate.weight"):
            out.append((name, t))
            continue
        layer = name[: -len(block + "gate.weight")]
        src = layer + block + "experts."
        n = 0
        while "%s%d.%s.weight" % (src, n, gate_name) in by_name:
            n += 1

        def stack(piece):
            return torch.stack([by_name["%s%d.%s.weight" % (src, e, piece)] for e in range(n)], dim=0)
        out.append((layer + ".mlp.gate.weight", t))
        out.append((layer + ".mlp.experts.gate_up_proj", torch.cat([stack(gate_name), stack(up_name)], dim=1)))
        out.append((layer + ".mlp.experts.down_proj", stack(down_name)))
    return out


# ----------------------------------------------------------------------------- weights

EMBED_STD = 0.15   # token embeddings (and an untied lm_head)
POS_STD = 0.5      # learned position tables (gpt2 wpe, opt embed_positions)
LINEAR_GAIN = 1.5  # projections: normal(0, gain / sqrt(fan_in))
GEMMA_EMBED_STD = 0.1  # Gemma 3's token embeddings (tied), before the sqrt(hidden) scale


def make_tensor(shape, kind, gen):
    """fp32 tensor for one parameter, drawn in layout order from one seeded generator.

    The scales are chosen, not inherited from initializer_range (0.02): with 0.02
    everywhere the residual stream is the token embedding, a tied model greedily
    repeats its input and every step picks the same id. Projections get
    gain/sqrt(fan_in) so activations stay O(1) (fp32 cache/no-cache noise stays
    well under 1e-5), the small embedding scale keeps the token from dominating,
    and the big position scale makes learned-position models position dependent.
    Logits come out with a std of about 1 and |max| of 3-5."""
    if kind == "causal_mask":
        n = shape[-1]
        return torch.tril(torch.ones(n, n)).view(shape)
    if kind == "masked_bias":
        return torch.tensor(-1e4)
    x = torch.randn(shape, generator=gen)
    if kind == "embed":
        return x * EMBED_STD
    if kind == "pos":
        return x * POS_STD
    if kind == "linear":    # nn.Linear weight [out, in]
        return x * (LINEAR_GAIN / math.sqrt(shape[1]))
    if kind == "conv1d":    # GPT-2 Conv1D weight [in, out]
        return x * (LINEAR_GAIN / math.sqrt(shape[0]))
    if kind == "linear_t":  # a projection stored [in, out] (Gemma 3's mm_input_projection_weight)
        return x * (LINEAR_GAIN / math.sqrt(shape[0]))
    if kind == "norm":
        return 1.0 + 0.1 * x
    if kind == "gemma_norm":  # Gemma3RMSNorm multiplies by (1 + weight): about 1
        return 0.1 * x
    if kind == "gemma_post_norm":  # the layer's outputs at about three times the unit rms, so that the
        return 2.0 + 0.1 * x       # embedding (times sqrt(hidden)) does not drown them
    if kind == "gemma_embed":  # Gemma multiplies the rows by sqrt(hidden)
        return x * GEMMA_EMBED_STD
    if kind == "qk_norm":   # qwen3 q_norm/k_norm: sharper attention, as in real Qwen3
        return 1.3 + 0.1 * x
    if kind == "bias":
        return 0.1 * x
    raise ValueError(kind)


def build(family, seed, tied, prefix, pre_ln, norm_topk=True, overrides=None):
    if family == "gpt_oss":  # fam_gptoss.py
        cfg = dict(fam_gptoss.config(tied), **(overrides or {}))
        layout = fam_gptoss.layout(cfg, prefix, tied)
    elif family in fam_deepseek.FAMILIES:
        cfg = fam_deepseek.config(family, tied)
        layout = fam_deepseek.layout(cfg, prefix, tied)
    elif family in ("mixtral", "qwen3_moe"):
        cfg = moe_config(family, tied, norm_topk)
        layout = moe_layout(family, cfg, prefix, tied)
    elif family == "gpt2":
        cfg = gpt2_config(tied)
        layout = gpt2_layout(cfg, prefix, tied)
    elif family in ("opt", "opt-proj"):
        cfg = opt_config(family, tied, pre_ln)
        layout = opt_layout(cfg, prefix, tied)
    elif family == "gemma3_text":
        cfg = gemma3_text_config(tied)
        layout = gemma3_text_layout(cfg, "model." if prefix else "", tied, "lm_head.weight")
    elif family == "gemma3":
        cfg = gemma3_config(tied)
        layout = gemma3_layout(cfg, tied)
    elif family in ("phi3", "phi4mini"):
        cfg = phi3_config(family, tied)
        layout = phi3_layout(cfg, prefix, tied)
    else:
        cfg = llama_like_config(family, tied)
        layout = llama_like_layout(family, cfg, prefix, tied)
    gen = torch.Generator().manual_seed(seed)
    tensors = [(name, fam_gptoss.make_tensor(shape, kind, gen, make_tensor)) for name, shape, kind in layout]
    return cfg, tensors


def generation_config(cfg):
    g = {"_from_model_config": True, "bos_token_id": cfg.get("bos_token_id", 2), "eos_token_id": cfg["eos_token_id"]}
    if "pad_token_id" in cfg:
        g["pad_token_id"] = cfg["pad_token_id"]
    g["transformers_version"] = TRANSFORMERS_VERSION
    return g


def split_shards(tensors, k):
    """Contiguous groups with about total/k bytes each, none empty."""
    sizes = [len(st_io.tensor_bytes(t)) for _, t in tensors]
    total = sum(sizes)
    k = max(1, min(k, len(tensors)))
    groups, cur, acc = [], [], 0
    for i, ((name, t), s) in enumerate(zip(tensors, sizes)):
        remaining_items = len(tensors) - i
        remaining_groups = k - len(groups)
        if cur and (acc + s > total * (len(groups) + 1) / k or remaining_items < remaining_groups) \
                and len(groups) < k - 1:
            groups.append(cur)
            cur = []
        cur.append((name, t))
        acc += s
    groups.append(cur)
    assert len(groups) == k, (len(groups), k)
    return groups, total


def write(out, cfg, tensors, dtype_name, shards, raw=None):
    """raw: {name: safetensors dtype} of tensors written as they are (quantized forms)."""
    os.makedirs(out, exist_ok=True)
    dtype = TORCH_DTYPES[dtype_name]
    raw = raw or {}
    stored = [(n, t if n in raw else t.to(fam_deepseek.stored_dtype(n, dtype))) for n, t in tensors]
    cfg = dict(cfg)
    cfg["torch_dtype"] = dtype_name
    cfg["transformers_version"] = TRANSFORMERS_VERSION
    cfg = dict(sorted(cfg.items()))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(generation_config(cfg), f, indent=2)
        f.write("\n")
    for stale in os.listdir(out):
        if stale.endswith(".safetensors") or stale == "model.safetensors.index.json":
            os.remove(os.path.join(out, stale))
    if shards <= 1:
        st_io.save_file(stored, os.path.join(out, "model.safetensors"), dtypes=raw)
        return
    groups, total = split_shards(stored, shards)
    weight_map = {}
    for i, group in enumerate(groups):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(groups))
        st_io.save_file(group, os.path.join(out, fname), dtypes=raw)
        for n, _ in group:
            weight_map[n] = fname
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


DEFAULT_TIED = {"gpt2": True, "llama": False, "llama3": True, "mistral": False,
                "qwen2": True, "qwen3": True, "opt": True, "opt-proj": True,
                "gemma3_text": True, "gemma3": True, "phi3": False, "phi4mini": True,
                "mixtral": False, "qwen3_moe": False, "gpt_oss": False, "deepseek_v3": False, "deepseek_v3-mha": False}
DEFAULT_PRE_LN = {"opt": True, "opt-proj": False}  # opt-proj mirrors opt-350m (post-LN)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", required=True, choices=FAMILIES)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=sorted(TORCH_DTYPES))
    ap.add_argument("--shards", type=int, default=1)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--tied", dest="tied", action="store_true", default=None)
    g.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--no-prefix", action="store_true",
                    help="base-model layout: gpt2 'h.0...' (+attn.bias/masked_bias buffers), "
                         "llama and phi3 families 'layers.0...', opt 'decoder.layers.0...'; implies tied")
    g2 = ap.add_mutually_exclusive_group()
    g2.add_argument("--pre-ln", dest="pre_ln", action="store_true", default=None)
    g2.add_argument("--post-ln", dest="pre_ln", action="store_false")
    ap.add_argument("--no-norm-topk", action="store_true",
                    help="qwen3_moe only: norm_topk_prob false (the config class default); true otherwise, "
                         "as Qwen3-30B-A3B")
    ap.add_argument("--sliding-window", type=int, default=None, metavar="N",
                    help="mistral/mixtral: sliding_window N; qwen2/qwen3/qwen3_moe: use_sliding_window with "
                         "sliding_window N (qwen2/qwen3: from layer 1 on, max_window_layers 1)")
    ap.add_argument("--fused-experts", action="store_true",
                    help="mixtral/qwen3_moe: store the experts fused under transformers 5.x's names "
                         "(mlp.experts.gate_up_proj, mlp.experts.down_proj, mlp.gate) instead of one by one")
    ap.add_argument("--quantize", choices=["fp8", "mxfp4"],
                    help="store the weights quantized as the Hub's checkpoints do (quant_ref.py): fp8 "
                         "(qwen3_moe, deepseek_v3: every layer projection float8_e4m3fn with a "
                         "weight_scale_inv per --fp8-block block) or mxfp4 (gpt_oss: the experts as _blocks "
                         "and _scales; hidden_size 64 and intermediate_size 32, multiples of 32)")
    ap.add_argument("--fp8-block", default="4,4", help="weight_block_size rows,cols for --quantize fp8")
    a = ap.parse_args(argv)
    tied = DEFAULT_TIED[a.family] if a.tied is None else a.tied
    if a.no_prefix:
        if a.tied is False:
            ap.error("--no-prefix writes the base model only (no lm_head.weight); it cannot be --untied")
        tied = True
    if a.no_prefix and a.family == "gemma3":
        ap.error("--no-prefix: gemma3 is written in the Hub's composite layout only")
    if a.pre_ln is not None and a.family not in DEFAULT_PRE_LN:
        ap.error("--pre-ln/--post-ln apply to opt and opt-proj only")
    pre_ln = DEFAULT_PRE_LN.get(a.family, True) if a.pre_ln is None else a.pre_ln
    if a.shards < 1:
        ap.error("--shards must be >= 1")
    if a.no_norm_topk and a.family != "qwen3_moe":
        ap.error("--no-norm-topk applies to qwen3_moe only")
    if a.quantize == "mxfp4" and a.family != "gpt_oss":
        ap.error("--quantize mxfp4 applies to gpt_oss only")
    if a.quantize == "fp8" and a.family not in ("qwen3_moe", "deepseek_v3", "deepseek_v3-mha", "llama"):
        ap.error("--quantize fp8 applies to qwen3_moe, deepseek_v3 and llama only")
    overrides = {"hidden_size": 64, "intermediate_size": 32} if a.quantize == "mxfp4" else None
    cfg, tensors = build(a.family, a.seed, tied, not a.no_prefix, pre_ln, not a.no_norm_topk, overrides)
    if a.sliding_window is not None:
        if a.family in ("mistral", "mixtral"):
            cfg["sliding_window"] = a.sliding_window
        elif a.family in ("qwen2", "qwen3", "qwen3_moe"):
            cfg.update(use_sliding_window=True, sliding_window=a.sliding_window)
            if a.family != "qwen3_moe":
                cfg["max_window_layers"] = 1
        else:
            ap.error("--sliding-window applies to mistral, mixtral, qwen2, qwen3 and qwen3_moe only")
    if a.fused_experts:
        if a.family not in ("mixtral", "qwen3_moe"):
            ap.error("--fused-experts applies to mixtral and qwen3_moe only")
        tensors = fuse_experts(a.family, tensors)
    raw = {}
    if a.quantize:
        block = tuple(int(v) for v in a.fp8_block.split(","))
        cfg, tensors, raw = quant_ref.quantize(a.quantize, cfg, tensors, block)
    write(a.out, cfg, tensors, a.dtype, a.shards, raw)


if __name__ == "__main__":
    main()
