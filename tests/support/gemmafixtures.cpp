#include "gemmafixtures.h"

namespace fixtures {

// Tiny Gemma 3 text config: 3 layers, every 3rd global (sliding_window_pattern,
// no layer_types), head_dim 12 (not 16 / 2), tie_word_embeddings left out
// (Gemma3TextConfig's default: true).
nlohmann::json gemma3TextConfig()
{
    return {{"model_type", "gemma3_text"}, {"vocab_size", 100},   {"hidden_size", 16},
            {"intermediate_size", 24},     {"num_hidden_layers", 3}, {"num_attention_heads", 2},
            {"num_key_value_heads", 1},    {"head_dim", 12},      {"sliding_window_pattern", 3}};
}

// The composite gemma3 config around it: a SigLIP tower of one layer.
nlohmann::json gemma3Config(bool visionHead)
{
    nlohmann::json text = gemma3TextConfig();
    text.erase("sliding_window_pattern");
    text["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention"};
    nlohmann::json vision{{"model_type", "siglip_vision_model"}, {"hidden_size", 8}, {"intermediate_size", 12},
                          {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"image_size", 8}, {"patch_size", 4}};
    if (!visionHead)
        vision["vision_use_head"] = false; // as Google's gemma-3 configs say
    return {{"model_type", "gemma3"}, {"mm_tokens_per_image", 4}, {"text_config", text}, {"vision_config", vision}};
}

// The tensors of gemma3Config(false) under the three layouts a checkpoint may
// use: `lm` the language model's prefix, `vt` the vision tower's (before
// "embeddings."), `mm` the projector's. Written from the transformers layouts,
// not from the skeleton.
std::vector<Tensor> gemma3Tensors(const std::string& lm, const std::string& vt, const std::string& mm)
{
    const stowage::DType f = stowage::DType::BF16;
    std::vector<Tensor> ts{{lm + "embed_tokens.weight", f, {100, 16}}, {lm + "norm.weight", f, {16}}};
    for (int i = 0; i < 3; ++i) {
        const std::string l = lm + "layers." + std::to_string(i) + ".";
        for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                              "post_feedforward_layernorm"})
            ts.push_back({l + n + ".weight", f, {16}});
        ts.push_back({l + "self_attn.q_proj.weight", f, {24, 16}});
        ts.push_back({l + "self_attn.k_proj.weight", f, {12, 16}});
        ts.push_back({l + "self_attn.v_proj.weight", f, {12, 16}});
        ts.push_back({l + "self_attn.o_proj.weight", f, {16, 24}});
        ts.push_back({l + "self_attn.q_norm.weight", f, {12}});
        ts.push_back({l + "self_attn.k_norm.weight", f, {12}});
        ts.push_back({l + "mlp.gate_proj.weight", f, {24, 16}});
        ts.push_back({l + "mlp.up_proj.weight", f, {24, 16}});
        ts.push_back({l + "mlp.down_proj.weight", f, {16, 24}});
    }
    ts.push_back({mm + "mm_input_projection_weight", f, {8, 16}});
    ts.push_back({mm + "mm_soft_emb_norm.weight", f, {8}});
    ts.push_back({vt + "embeddings.patch_embedding.weight", f, {8, 3, 4, 4}});
    ts.push_back({vt + "embeddings.patch_embedding.bias", f, {8}});
    ts.push_back({vt + "embeddings.position_embedding.weight", f, {4, 8}});
    const std::string l = vt + "encoder.layers.0.";
    for (const char* n : {"layer_norm1", "layer_norm2", "self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj",
                          "self_attn.out_proj", "mlp.fc2"}) {
        const bool ln = std::string(n).rfind("layer_norm", 0) == 0;
        if (!ln)
            ts.push_back({l + n + ".weight", f, {8, std::string(n) == "mlp.fc2" ? 12 : 8}});
        else
            ts.push_back({l + n + ".weight", f, {8}});
        ts.push_back({l + n + ".bias", f, {8}});
    }
    ts.push_back({l + "mlp.fc1.weight", f, {12, 8}});
    ts.push_back({l + "mlp.fc1.bias", f, {12}});
    ts.push_back({vt + "post_layernorm.weight", f, {8}});
    ts.push_back({vt + "post_layernorm.bias", f, {8}});
    return ts;
}

} // namespace fixtures
