// Qwen3-MoE (Qwen3-30B-A3B) as transformers 5.6 builds it (models/qwen3_moe/
// modeling_qwen3_moe.py): Qwen3's attention (q_norm/k_norm over each head),
// and per layer either a sparse MoE block `mlp` (fused `experts` first, then
// the router `gate`) or, for layers in mlp_only_layers or off the
// decoder_sparse_step, a dense Qwen3MoeMLP. Hub checkpoints store the
// experts one by one (mlp.experts.E.gate_proj/up_proj/down_proj);
// conversion_mapping.py's "qwen3_moe" entry (a copy of qwen2_moe's) fuses
// them on load, which storedParts records.
#include "registry.h"

#include <algorithm>

namespace stowage::arch::qwen3_moe {
namespace {

int64_t headDimOf(const ModelConfig& c, int64_t hidden, int64_t heads)
{
    // getattr(config, "head_dim", hidden_size // num_attention_heads)
    if (c.has("head_dim") && c.raw()["head_dim"].is_number())
        return c.positive("head_dim");
    c.requireDivisible("hidden_size", hidden, "num_attention_heads", heads);
    return hidden / heads;
}

int64_t expertsOf(const ModelConfig& c)
{
    // Qwen3MoeConfig maps num_experts to num_local_experts (attribute_map).
    return c.has("num_experts") ? c.integer("num_experts") : c.integer("num_local_experts", 128);
}

// Qwen3MoeDecoderLayer: sparse unless in mlp_only_layers, and only every
// decoder_sparse_step-th layer (counted from 1), with experts at all.
bool sparseLayer(const ModelConfig& c, int64_t layer)
{
    const auto& raw = c.raw();
    auto only = raw.find("mlp_only_layers");
    if (only != raw.end() && only->is_array())
        for (const auto& v : *only)
            if (v.is_number_integer() && v.get<int64_t>() == layer)
                return false;
    const int64_t step = c.positive("decoder_sparse_step", 1);
    return expertsOf(c) > 0 && (layer + 1) % step == 0;
}

Skeleton build(const ModelConfig& c, DType dt)
{
    // Qwen3MoeConfig's defaults.
    const int64_t vocab = c.integer("vocab_size", 151936);
    const int64_t hidden = c.integer("hidden_size", 2048);
    const int64_t inter = c.integer("intermediate_size", 6144);
    const int64_t moeInter = c.integer("moe_intermediate_size", 768);
    const int64_t layers = c.integer("num_hidden_layers", 24);
    const int64_t heads = c.positive("num_attention_heads", 32);
    const int64_t kvHeads = c.positive("num_key_value_heads", 4);
    c.requireDivisible("num_attention_heads", heads, "num_key_value_heads", kvHeads);
    const int64_t headDim = headDimOf(c, hidden, heads);
    const int64_t experts = expertsOf(c);
    const bool bias = c.boolOr("attention_bias", false);
    const std::string act = activationClass(c.stringOr("hidden_act", "silu"));
    const bool tied = c.boolOr("tie_word_embeddings", false); // Qwen3MoeConfig: False

    Skeleton s;
    s.basePrefix = "model";
    ModuleTree& t = s.tree;
    t.setModelType("qwen3_moe", true);
    t.addModule(-1, "", "Qwen3MoeForCausalLM");
    int model = t.addModule(0, "model", "Qwen3MoeModel");
    int emb = t.addModule(model, "embed_tokens", "Embedding");
    t.addParam(emb, "weight", {vocab, hidden}, dt);
    int list = t.addModule(model, "layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        int l = t.addModule(list, std::to_string(i), "Qwen3MoeDecoderLayer");
        int a = t.addModule(l, "self_attn", "Qwen3MoeAttention");
        linear(t, a, "q_proj", hidden, heads * headDim, bias, dt);
        linear(t, a, "k_proj", hidden, kvHeads * headDim, bias, dt);
        linear(t, a, "v_proj", hidden, kvHeads * headDim, bias, dt);
        linear(t, a, "o_proj", heads * headDim, hidden, bias, dt);
        norm(t, a, "q_norm", "Qwen3MoeRMSNorm", headDim, false, dt);
        norm(t, a, "k_norm", "Qwen3MoeRMSNorm", headDim, false, dt);
        if (sparseLayer(c, i)) {
            int moe = t.addModule(l, "mlp", "Qwen3MoeSparseMoeBlock");
            int ex = t.addModule(moe, "experts", "Qwen3MoeExperts");
            t.addParam(ex, "gate_up_proj", {experts, 2 * moeInter, hidden}, dt);
            t.addParam(ex, "down_proj", {experts, hidden, moeInter}, dt);
            t.addModule(ex, "act_fn", act);
            const std::string E = L + "mlp.experts.{e}.";
            fuseExperts(s, L + "mlp.experts.gate_up_proj", experts,
                        {{E + "gate_proj.weight", {moeInter, hidden}}, {E + "up_proj.weight", {moeInter, hidden}}});
            fuseExperts(s, L + "mlp.experts.down_proj", experts, {{E + "down_proj.weight", {hidden, moeInter}}});
            int gate = t.addModule(moe, "gate", "Qwen3MoeTopKRouter");
            t.addParam(gate, "weight", {experts, hidden}, dt);
        } else {
            int mlp = t.addModule(l, "mlp", "Qwen3MoeMLP");
            linear(t, mlp, "gate_proj", hidden, inter, false, dt);
            linear(t, mlp, "up_proj", hidden, inter, false, dt);
            linear(t, mlp, "down_proj", inter, hidden, false, dt);
            t.addModule(mlp, "act_fn", act);
        }
        norm(t, l, "input_layernorm", "Qwen3MoeRMSNorm", hidden, false, dt);
        norm(t, l, "post_attention_layernorm", "Qwen3MoeRMSNorm", hidden, false, dt);
    }
    norm(t, model, "norm", "Qwen3MoeRMSNorm", hidden, false, dt);
    rotaryEmbedding(t, model, "Qwen3MoeRotaryEmbedding", headDim);
    linear(t, 0, "lm_head", hidden, vocab, false, dt);
    if (tied)
        t.tie("lm_head.weight", "model.embed_tokens.weight");
    t.setNoSplit({"Qwen3MoeDecoderLayer"});
    t.setExpertsPerToken(c.positive("num_experts_per_tok", 8)); // the config class's default
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    AttentionShape a;
    a.hidden = c.positive("hidden_size", 2048);
    const int64_t heads = c.positive("num_attention_heads", 32);
    a.kvHeads = c.positive("num_key_value_heads", 4);
    a.headDim = headDimOf(c, a.hidden, heads);
    // The widest MLP a token passes through: one expert's (experts run one
    // after another), or a dense layer's where the config has one.
    a.inner = c.integer("moe_intermediate_size", 768);
    const int64_t layers = c.integer("num_hidden_layers", 24);
    for (int64_t i = 0; i < layers; ++i)
        if (!sparseLayer(c, i)) {
            a.inner = std::max(a.inner, c.integer("intermediate_size", 6144));
            break;
        }
    // use_sliding_window (default false) slides every layer by sliding_window (default 4096) in 5.6's cache
    if (c.boolOr("use_sliding_window", false))
        a.cache = slidingCache(layers, 2 * a.kvHeads * a.headDim, slidingWindowOf(c, 4096), [](int64_t) { return true; });
    return a;
}

} // namespace

Family family()
{
    Family f;
    f.types = {{"qwen3_moe", false}}; // Qwen2Tokenizer adds no BOS
    f.layersKey = "num_hidden_layers";
    f.defaultLayers = 24;
    f.build = build;
    f.attention = attention;
    f.units = {"model.embed_tokens", "model.layers.*", "model.norm", "lm_head"};
    return f;
}

} // namespace stowage::arch::qwen3_moe
