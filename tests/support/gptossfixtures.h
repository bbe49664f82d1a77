#pragma once
// Test support for gpt-oss (model_type gpt_oss), header only: the tensors a
// Hub checkpoint holds and its config.json, written from the Hub's layout
// (gpt-oss-20b's files), not from the skeleton they test. Unquantized saves
// (the BF16 re-uploads) store the experts fused under transformers 5.x's own
// names; OpenAI's original files store them as MXFP4 blocks and scales.
#include "fixtures.h"

#include <algorithm>

namespace fixtures {

struct GptOssShape {
    int64_t vocab = 201088, hidden = 2880, intermediate = 2880, layers = 24, heads = 64, kvHeads = 8, headDim = 64;
    int64_t experts = 32, topK = 4, window = 128;
    bool mxfp4 = false; // experts as _blocks (U8) and _scales (U8), as OpenAI ships gpt-oss-20b
};

inline std::vector<Tensor> gptOssTensors(const GptOssShape& s, stowage::DType dt)
{
    using stowage::DType;
    std::vector<Tensor> t;
    t.push_back({"model.embed_tokens.weight", dt, {s.vocab, s.hidden}});
    for (int64_t i = 0; i < s.layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        t.push_back({p + "input_layernorm.weight", dt, {s.hidden}});
        t.push_back({p + "post_attention_layernorm.weight", dt, {s.hidden}});
        const int64_t q = s.heads * s.headDim, kv = s.kvHeads * s.headDim;
        t.push_back({p + "self_attn.q_proj.weight", dt, {q, s.hidden}});
        t.push_back({p + "self_attn.q_proj.bias", dt, {q}});
        t.push_back({p + "self_attn.k_proj.weight", dt, {kv, s.hidden}});
        t.push_back({p + "self_attn.k_proj.bias", dt, {kv}});
        t.push_back({p + "self_attn.v_proj.weight", dt, {kv, s.hidden}});
        t.push_back({p + "self_attn.v_proj.bias", dt, {kv}});
        t.push_back({p + "self_attn.o_proj.weight", dt, {s.hidden, q}});
        t.push_back({p + "self_attn.o_proj.bias", dt, {s.hidden}});
        t.push_back({p + "self_attn.sinks", dt, {s.heads}});
        t.push_back({p + "mlp.router.weight", dt, {s.experts, s.hidden}});
        t.push_back({p + "mlp.router.bias", dt, {s.experts}});
        const std::string x = p + "mlp.experts.";
        t.push_back({x + "gate_up_proj_bias", dt, {s.experts, 2 * s.intermediate}});
        t.push_back({x + "down_proj_bias", dt, {s.experts, s.hidden}});
        if (s.mxfp4) { // 32 values a block, two 4-bit values a byte, one U8 exponent a block
            t.push_back({x + "gate_up_proj_blocks", DType::U8, {s.experts, 2 * s.intermediate, s.hidden / 32, 16}});
            t.push_back({x + "gate_up_proj_scales", DType::U8, {s.experts, 2 * s.intermediate, s.hidden / 32}});
            t.push_back({x + "down_proj_blocks", DType::U8, {s.experts, s.hidden, s.intermediate / 32, 16}});
            t.push_back({x + "down_proj_scales", DType::U8, {s.experts, s.hidden, s.intermediate / 32}});
        } else {
            t.push_back({x + "gate_up_proj", dt, {s.experts, s.hidden, 2 * s.intermediate}});
            t.push_back({x + "down_proj", dt, {s.experts, s.intermediate, s.hidden}});
        }
    }
    t.push_back({"model.norm.weight", dt, {s.hidden}});
    t.push_back({"lm_head.weight", dt, {s.vocab, s.hidden}});
    std::sort(t.begin(), t.end(), [](const Tensor& a, const Tensor& b) { return a.name < b.name; });
    return t;
}

// gpt-oss-20b's config.json (4.55's save) for the shape.
inline nlohmann::json gptOssConfig(const GptOssShape& s, stowage::DType dt)
{
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < s.layers; ++i)
        types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    nlohmann::json c{{"architectures", {"GptOssForCausalLM"}},
                     {"attention_bias", true},
                     {"head_dim", s.headDim},
                     {"hidden_size", s.hidden},
                     {"intermediate_size", s.intermediate},
                     {"layer_types", types},
                     {"max_position_embeddings", 131072},
                     {"model_type", "gpt_oss"},
                     {"num_attention_heads", s.heads},
                     {"num_experts_per_tok", s.topK},
                     {"num_hidden_layers", s.layers},
                     {"num_key_value_heads", s.kvHeads},
                     {"num_local_experts", s.experts},
                     {"rms_norm_eps", 1e-5},
                     {"rope_scaling",
                      {{"beta_fast", 32.0},
                       {"beta_slow", 1.0},
                       {"factor", 32.0},
                       {"original_max_position_embeddings", 4096},
                       {"rope_type", "yarn"},
                       {"truncate", false}}},
                     {"rope_theta", 150000},
                     {"sliding_window", s.window},
                     {"swiglu_limit", 7.0},
                     {"tie_word_embeddings", false},
                     {"torch_dtype", stowage::dtypeTorchName(dt)},
                     {"vocab_size", s.vocab}};
    if (s.mxfp4)
        c["quantization_config"] = {{"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                "model.embed_tokens", "lm_head"}},
                                    {"quant_method", "mxfp4"}};
    return c;
}

} // namespace fixtures
