"""Writes the config.json of each model the transformers 5.6 planning vectors
cover (tests/reference/hf56/configs/NAME/config.json): the shapes of the
checkpoints people open, one or two per family, as their Hub configs give
them. Plain Python, no dependencies; hf56_plan.py then adds each folder's
index and computes the vectors.

    python3 tests/reference/hf56/make_configs.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def llama3_8b():
    with open(os.path.join(HERE, "..", "..", "..", "resources", "configs", "llama-3-8b", "config.json")) as f:
        return json.load(f)


def longrope(n, long):
    return [round(1.0 + (i * (long - 1.0)) / max(1, n - 1), 4) for i in range(n)]


CONFIGS = {
    # DistilGPT-2
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 6, "n_embd": 768, "n_head": 12,
             "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257, "activation_function": "gelu_new",
             "layer_norm_epsilon": 1e-5},
    "llama": llama3_8b(),
    # Mistral-7B-v0.1
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
                "rope_theta": 10000.0, "sliding_window": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu",
                "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2},
    # Qwen2-0.5B
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
              "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
              "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 131072,
              "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True,
              "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 24,
              "bos_token_id": 151643, "eos_token_id": 151643},
    # Qwen3-0.6B
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
              "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
              "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True,
              "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
              "max_window_layers": 28, "bos_token_id": 151643, "eos_token_id": 151645},
    # OPT-125m
    "opt": {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 768, "ffn_dim": 3072,
            "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 50272,
            "max_position_embeddings": 2048, "word_embed_proj_dim": 768, "do_layer_norm_before": True,
            "activation_function": "relu", "enable_bias": True, "layer_norm_elementwise_affine": True,
            "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1},
    # gemma-3-1b-it
    "gemma3_text": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 1152,
                    "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
                    "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
                    "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6,
                    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
                    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh",
                    "final_logit_softcapping": None, "attn_logit_softcapping": None, "bos_token_id": 2,
                    "eos_token_id": [1, 106], "pad_token_id": 0},
    # gemma-3-4b-it: the vision tower and projector beside the text model
    "gemma3": {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
               "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
               "mm_tokens_per_image": 256, "eos_token_id": [1, 106],
               "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                               "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
                               "head_dim": 256, "sliding_window": 1024, "rope_theta": 1000000.0,
                               "rope_local_base_freq": 10000.0,
                               "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                               "query_pre_attn_scalar": 256, "vocab_size": 262208,
                               "max_position_embeddings": 131072},
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                                 "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
                                 "image_size": 896, "patch_size": 14, "vision_use_head": False}},
    # Phi-3-mini-4k-instruct
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
             "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
             "original_max_position_embeddings": 4096, "rope_theta": 10000.0, "rope_scaling": None,
             "sliding_window": 2047, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
             "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000},
    # Phi-4-mini-instruct: partial rotary, longrope, tied
    "phi4_mini": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
                  "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 24,
                  "num_key_value_heads": 8, "vocab_size": 200064, "max_position_embeddings": 131072,
                  "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75,
                  "rope_theta": 10000.0,
                  "rope_scaling": {"type": "longrope", "long_factor": longrope(48, 60.0),
                                   "short_factor": longrope(48, 3.0)},
                  "sliding_window": 262144, "rms_norm_eps": 1e-5, "hidden_act": "silu",
                  "tie_word_embeddings": True, "bos_token_id": 199999, "eos_token_id": 199999,
                  "pad_token_id": 199999},
    # Mixtral-8x7B-v0.1
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
                "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                "sliding_window": None, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
                "router_aux_loss_coef": 0.02, "bos_token_id": 1, "eos_token_id": 2},
    # Qwen3-30B-A3B
    "qwen3_moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
                  "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
                  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                  "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "norm_topk_prob": True, "vocab_size": 151936, "max_position_embeddings": 40960,
                  "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                  "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
                  "max_window_layers": 48, "bos_token_id": 151643, "eos_token_id": 151645},
    # gpt-oss-20b, its bf16 form (no quantization_config)
    "gpt_oss": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
                "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
                "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)],
                "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
                "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32, "rms_norm_eps": 1e-5,
                "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                 "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                 "truncate": False},
                "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
                "vocab_size": 201088},
    # DeepSeek-V3 (its bf16 conversion: no quantization_config)
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
                    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
                    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
                    "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
                    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
                    "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                    "norm_topk_prob": True, "vocab_size": 129280, "max_position_embeddings": 163840,
                    "rope_theta": 10000,
                    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                     "type": "yarn"},
                    "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
                    "num_nextn_predict_layers": 1, "bos_token_id": 0, "eos_token_id": 1},
}


MXFP4 = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"], "quant_method": "mxfp4"}
FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
# bitsandbytes as save_pretrained writes its BitsAndBytesConfig (unsloth's
# llama-3-8b-bnb-4bit; the 8-bit form of the same)
BNB = {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
       "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
       "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False,
       "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False,
       "quant_method": "bitsandbytes"}
BNB8 = dict(BNB, _load_in_4bit=False, _load_in_8bit=True, load_in_4bit=False, load_in_8bit=True)
# Quantized releases: gpt-oss-20b as OpenAI ships it, DeepSeek-V3's own FP8
# release, Qwen3-0.6B-FP8 and Qwen3-30B-A3B-FP8 (block-wise FP8), Llama-3-8B in
# bitsandbytes 4-bit (NF4, double quantization) and 8-bit.
QUANTIZED = {
    "gpt_oss_mxfp4": ("gpt_oss", MXFP4),
    "deepseek_v3_fp8": ("deepseek_v3", FP8),
    "qwen3_fp8": ("qwen3", FP8),
    "qwen3_moe_fp8": ("qwen3_moe", FP8),
    "llama_bnb4": ("llama", BNB),
    "llama_bnb8": ("llama", BNB8),
}
for _name, (_base, _q) in QUANTIZED.items():
    CONFIGS[_name] = dict(CONFIGS[_base], quantization_config=_q, torch_dtype="bfloat16")


def main():
    for name, config in CONFIGS.items():
        folder = os.path.join(HERE, "configs", name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
