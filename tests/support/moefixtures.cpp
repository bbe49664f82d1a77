#include "moefixtures.h"

#include <algorithm>
#include <filesystem>

namespace fixtures {

std::vector<Tensor> moeTensors(const MoeShape& s, stowage::DType dt)
{
    const bool mixtral = s.type == "mixtral";
    const int64_t hd = s.headDim ? s.headDim : s.hidden / s.heads;
    const int64_t inter = mixtral ? s.intermediate : s.moeIntermediate;
    std::vector<Tensor> t;
    t.push_back({"model.embed_tokens.weight", dt, {s.vocab, s.hidden}});
    for (int64_t i = 0; i < s.layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        t.push_back({p + "input_layernorm.weight", dt, {s.hidden}});
        t.push_back({p + "post_attention_layernorm.weight", dt, {s.hidden}});
        t.push_back({p + "self_attn.q_proj.weight", dt, {s.heads * hd, s.hidden}});
        t.push_back({p + "self_attn.k_proj.weight", dt, {s.kvHeads * hd, s.hidden}});
        t.push_back({p + "self_attn.v_proj.weight", dt, {s.kvHeads * hd, s.hidden}});
        t.push_back({p + "self_attn.o_proj.weight", dt, {s.hidden, s.heads * hd}});
        if (!mixtral) {
            t.push_back({p + "self_attn.q_norm.weight", dt, {hd}});
            t.push_back({p + "self_attn.k_norm.weight", dt, {hd}});
        }
        const bool dense = !mixtral && std::find(s.mlpOnly.begin(), s.mlpOnly.end(), i) != s.mlpOnly.end();
        if (dense) {
            t.push_back({p + "mlp.gate_proj.weight", dt, {s.intermediate, s.hidden}});
            t.push_back({p + "mlp.up_proj.weight", dt, {s.intermediate, s.hidden}});
            t.push_back({p + "mlp.down_proj.weight", dt, {s.hidden, s.intermediate}});
            continue;
        }
        const std::string b = p + (mixtral ? "block_sparse_moe." : "mlp.");
        t.push_back({b + "gate.weight", dt, {s.experts, s.hidden}});
        for (int64_t e = 0; e < s.experts; ++e) {
            const std::string x = b + "experts." + std::to_string(e) + ".";
            t.push_back({x + (mixtral ? "w1" : "gate_proj") + ".weight", dt, {inter, s.hidden}});
            t.push_back({x + (mixtral ? "w2" : "down_proj") + ".weight", dt, {s.hidden, inter}});
            t.push_back({x + (mixtral ? "w3" : "up_proj") + ".weight", dt, {inter, s.hidden}});
        }
    }
    t.push_back({"model.norm.weight", dt, {s.hidden}});
    if (!s.tied)
        t.push_back({"lm_head.weight", dt, {s.vocab, s.hidden}});
    std::sort(t.begin(), t.end(), [](const Tensor& a, const Tensor& b) { return a.name < b.name; });
    return t;
}

nlohmann::json moeConfig(const MoeShape& s, stowage::DType dt)
{
    nlohmann::json c{{"model_type", s.type},
                     {"vocab_size", s.vocab},
                     {"hidden_size", s.hidden},
                     {"intermediate_size", s.intermediate},
                     {"num_hidden_layers", s.layers},
                     {"num_attention_heads", s.heads},
                     {"num_key_value_heads", s.kvHeads},
                     {"num_experts_per_tok", s.topK},
                     {"tie_word_embeddings", s.tied},
                     {"rms_norm_eps", 1e-5},
                     {"rope_theta", 1e6},
                     {"torch_dtype", stowage::dtypeTorchName(dt)}};
    if (s.headDim)
        c["head_dim"] = s.headDim;
    if (s.type == "mixtral") {
        c["architectures"] = {"MixtralForCausalLM"};
        c["num_local_experts"] = s.experts;
    } else {
        c["architectures"] = {"Qwen3MoeForCausalLM"};
        c["num_experts"] = s.experts;
        c["moe_intermediate_size"] = s.moeIntermediate;
        c["mlp_only_layers"] = s.mlpOnly;
        c["decoder_sparse_step"] = 1;
        c["norm_topk_prob"] = true;
    }
    return c;
}

void writeMixtral8x7bIndex(const std::string& dir, stowage::DType dt)
{
    MoeShape m;
    m.vocab = 32000;
    m.hidden = 4096;
    m.intermediate = 14336;
    m.layers = 32;
    m.heads = 32;
    m.kvHeads = 8;
    m.experts = 8;
    m.topK = 2;
    std::filesystem::create_directories(dir);
    writeSharded(dir, moeTensors(m, dt), 4, false, /*writeShards=*/false);
    writeJson(dir + "/config.json", moeConfig(m, dt));
}

} // namespace fixtures
