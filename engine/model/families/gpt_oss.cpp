// gpt-oss (gpt-oss-20b, gpt-oss-120b) as transformers 5.6 builds it
// (models/gpt_oss/modeling_gpt_oss.py, configuration_gpt_oss.py): attention
// with q/k/v/o biases and one learned sink logit per head (`sinks`),
// alternating sliding-window and full layers (layer_types), yarn rotary
// embeddings, and in every layer a GptOssMLP: a router with a bias, then the
// experts as fused 3-D parameters with biases. Unlike Mixtral's and
// Qwen3-MoE's, these are stored [experts, in, out] (x @ W, the is_transposed
// layout of use_experts_implementation) and under the same names in the
// Hub's unquantized checkpoints (the BF16 re-uploads): conversion_mapping.py
// has no gpt_oss entry, so they are read 1:1. OpenAI's own checkpoints store
// the experts quantized as MXFP4 (`…_blocks` and `…_scales`): they are the
// fused parameters' stored form, sized as 5.6's MXFP4 quantizer sizes them
// where it applies and in the load dtype where it dequantizes
// (quantization.h); running one is refused with that reason (runtime/model.cpp).
#include "registry.h"

namespace stowage::arch::gpt_oss {
namespace {

// GptOssConfig.__post_init__: head_dim defaults to 64; only an explicit
// null falls back to hidden_size // num_attention_heads.
int64_t headDimOf(const ModelConfig& c, int64_t hidden, int64_t heads)
{
    const auto& raw = c.raw();
    auto it = raw.find("head_dim");
    if (it != raw.end() && it->is_null()) {
        c.requireDivisible("hidden_size", hidden, "num_attention_heads", heads);
        return hidden / heads;
    }
    return c.positive("head_dim", 64);
}

// num_key_value_heads: 8 when absent, num_attention_heads when null.
int64_t kvHeadsOf(const ModelConfig& c, int64_t heads)
{
    const auto& raw = c.raw();
    auto it = raw.find("num_key_value_heads");
    if (it != raw.end() && it->is_null())
        return heads;
    return c.positive("num_key_value_heads", 8);
}

int64_t expertsOf(const ModelConfig& c)
{
    // attribute_map: num_experts is num_local_experts.
    return c.has("num_local_experts") ? c.positive("num_local_experts") : c.positive("num_experts", 128);
}

Skeleton build(const ModelConfig& c, DType dt)
{
    // GptOssConfig's defaults (gpt-oss-120b's shape but for its 36 layers).
    const int64_t vocab = c.integer("vocab_size", 201088);
    const int64_t hidden = c.integer("hidden_size", 2880);
    const int64_t inter = c.integer("intermediate_size", 2880);
    const int64_t layers = c.integer("num_hidden_layers", 36);
    const int64_t heads = c.positive("num_attention_heads", 64);
    const int64_t kvHeads = kvHeadsOf(c, heads);
    c.requireDivisible("num_attention_heads", heads, "num_key_value_heads", kvHeads);
    const int64_t headDim = headDimOf(c, hidden, heads);
    const int64_t experts = expertsOf(c);
    const bool bias = c.boolOr("attention_bias", true);
    const bool tied = c.boolOr("tie_word_embeddings", false);

    Skeleton s;
    s.basePrefix = "model";
    ModuleTree& t = s.tree;
    t.setModelType("gpt_oss", true);
    t.addModule(-1, "", "GptOssForCausalLM");
    int model = t.addModule(0, "model", "GptOssModel");
    int emb = t.addModule(model, "embed_tokens", "Embedding");
    t.addParam(emb, "weight", {vocab, hidden}, dt);
    int list = t.addModule(model, "layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        int l = t.addModule(list, std::to_string(i), "GptOssDecoderLayer");
        int a = t.addModule(l, "self_attn", "GptOssAttention");
        linear(t, a, "q_proj", hidden, heads * headDim, bias, dt);
        linear(t, a, "k_proj", hidden, kvHeads * headDim, bias, dt);
        linear(t, a, "v_proj", hidden, kvHeads * headDim, bias, dt);
        linear(t, a, "o_proj", heads * headDim, hidden, bias, dt);
        // Registered after the projections, listed before them
        // (named_parameters: a module's own parameters first).
        t.addParam(a, "sinks", {heads}, dt);
        int mlp = t.addModule(l, "mlp", "GptOssMLP");
        int router = t.addModule(mlp, "router", "GptOssTopKRouter");
        t.addParam(router, "weight", {experts, hidden}, dt);
        t.addParam(router, "bias", {experts}, dt);
        int ex = t.addModule(mlp, "experts", "GptOssExperts");
        // Columns of gate_up_proj interleave gate and up (gate_up[..., ::2]).
        t.addParam(ex, "gate_up_proj", {experts, hidden, 2 * inter}, dt);
        t.addParam(ex, "gate_up_proj_bias", {experts, 2 * inter}, dt);
        t.addParam(ex, "down_proj", {experts, inter, hidden}, dt);
        t.addParam(ex, "down_proj_bias", {experts, hidden}, dt);
        for (const char* p : {"gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias"})
            t.markExperts(L + "mlp.experts." + p);
        norm(t, l, "input_layernorm", "GptOssRMSNorm", hidden, false, dt);
        norm(t, l, "post_attention_layernorm", "GptOssRMSNorm", hidden, false, dt);
    }
    norm(t, model, "norm", "GptOssRMSNorm", hidden, false, dt);
    // Yarn's inv_freq has head_dim / 2 values too (float32, non-persistent).
    rotaryEmbedding(t, model, "GptOssRotaryEmbedding", headDim);
    linear(t, 0, "lm_head", hidden, vocab, false, dt);
    if (tied)
        t.tie("lm_head.weight", "model.embed_tokens.weight");
    t.setNoSplit({"GptOssDecoderLayer"});
    t.setExpertsPerToken(c.positive("num_experts_per_tok", 4)); // the config class's default
    s.keepInFp32 = {"post_attention_layernorm", "input_layernorm", "norm"}; // modeling_gpt_oss.py:407
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    // Every layer caches kvHeads x headDim per position; the sliding layers
    // (layer_types "sliding_attention", every other one from layer 0) keep
    // at most sliding_window (128; null: no window) positions in 5.6's
    // cache, the full ones all. The sinks add no cached state.
    AttentionShape a;
    a.hidden = c.positive("hidden_size", 2880);
    const int64_t heads = c.positive("num_attention_heads", 64);
    a.kvHeads = kvHeadsOf(c, heads);
    a.headDim = headDimOf(c, a.hidden, heads);
    a.inner = c.integer("intermediate_size", 2880); // one expert's width: experts run one after another
    const int64_t window = slidingWindowOf(c, 128);
    const int64_t layers = c.positive("num_hidden_layers", 36);
    const auto listed = listedSlidingLayers(c, layers);
    for (int64_t i = 0; i < layers; ++i) {
        const bool sliding = listed ? (*listed)[size_t(i)] : i % 2 == 0;
        a.cache.push_back({2 * a.kvHeads * a.headDim, sliding ? window : 0});
    }
    return a;
}

} // namespace

Family family()
{
    Family f;
    f.types = {{"gpt_oss", false}}; // o200k_harmony adds no BOS
    f.layersKey = "num_hidden_layers";
    f.defaultLayers = 36;
    f.build = build;
    f.attention = attention;
    f.units = {"model.embed_tokens", "model.layers.*", "model.norm", "lm_head"};
    return f;
}

} // namespace stowage::arch::gpt_oss
