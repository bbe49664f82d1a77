// Mixtral (Mixtral-8x7B) as transformers 5.6 builds it (models/mixtral/
// modeling_mixtral.py): Mistral's attention, and in every layer a sparse
// MoE block `mlp` of a router `gate` and the fused experts (3-D
// gate_up_proj and down_proj). Hub checkpoints store the experts one by one
// under block_sparse_moe (w1 gate, w3 up, w2 down) and the router as
// block_sparse_moe.gate; conversion_mapping.py's "mixtral" entry turns them
// into 5.6's parameters on load, which storedParts records.
#include "registry.h"

namespace stowage::arch::mixtral {
namespace {

Skeleton build(const ModelConfig& c, DType dt)
{
    // MixtralConfig's defaults.
    const int64_t vocab = c.integer("vocab_size", 32000);
    const int64_t hidden = c.integer("hidden_size", 4096);
    const int64_t inter = c.integer("intermediate_size", 14336);
    const int64_t layers = c.integer("num_hidden_layers", 32);
    const int64_t heads = c.positive("num_attention_heads", 32);
    const int64_t kvHeads = c.positive("num_key_value_heads", 8);
    // attribute_map: num_experts is num_local_experts.
    const int64_t experts = c.positive("num_local_experts", c.has("num_experts") ? c.positive("num_experts") : 8);
    c.requireDivisible("num_attention_heads", heads, "num_key_value_heads", kvHeads);
    // MixtralAttention: getattr(config, "head_dim", None) or hidden // heads.
    const bool explicitHeadDim = c.has("head_dim") && c.raw()["head_dim"].is_number();
    if (!explicitHeadDim)
        c.requireDivisible("hidden_size", hidden, "num_attention_heads", heads);
    const int64_t headDim = explicitHeadDim ? c.positive("head_dim") : hidden / heads;
    const std::string act = activationClass(c.stringOr("hidden_act", "silu"));
    const bool tied = c.boolOr("tie_word_embeddings", false); // MixtralConfig: False

    Skeleton s;
    s.basePrefix = "model";
    ModuleTree& t = s.tree;
    t.setModelType("mixtral", true);
    t.addModule(-1, "", "MixtralForCausalLM");
    int model = t.addModule(0, "model", "MixtralModel");
    int emb = t.addModule(model, "embed_tokens", "Embedding");
    t.addParam(emb, "weight", {vocab, hidden}, dt);
    int list = t.addModule(model, "layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        int l = t.addModule(list, std::to_string(i), "MixtralDecoderLayer");
        int a = t.addModule(l, "self_attn", "MixtralAttention");
        linear(t, a, "q_proj", hidden, heads * headDim, false, dt);
        linear(t, a, "k_proj", hidden, kvHeads * headDim, false, dt);
        linear(t, a, "v_proj", hidden, kvHeads * headDim, false, dt);
        linear(t, a, "o_proj", heads * headDim, hidden, false, dt);
        int moe = t.addModule(l, "mlp", "MixtralSparseMoeBlock");
        int gate = t.addModule(moe, "gate", "MixtralTopKRouter");
        t.addParam(gate, "weight", {experts, hidden}, dt);
        renameStored(s, L + "mlp.gate.weight", L + "block_sparse_moe.gate.weight", {experts, hidden});
        int ex = t.addModule(moe, "experts", "MixtralExperts");
        t.addParam(ex, "gate_up_proj", {experts, 2 * inter, hidden}, dt);
        t.addParam(ex, "down_proj", {experts, hidden, inter}, dt);
        t.addModule(ex, "act_fn", act);
        const std::string E = L + "block_sparse_moe.experts.{e}.";
        fuseExperts(s, L + "mlp.experts.gate_up_proj", experts,
                    {{E + "w1.weight", {inter, hidden}}, {E + "w3.weight", {inter, hidden}}});
        fuseExperts(s, L + "mlp.experts.down_proj", experts, {{E + "w2.weight", {hidden, inter}}});
        norm(t, l, "input_layernorm", "MixtralRMSNorm", hidden, false, dt);
        norm(t, l, "post_attention_layernorm", "MixtralRMSNorm", hidden, false, dt);
    }
    norm(t, model, "norm", "MixtralRMSNorm", hidden, false, dt);
    // inv_freq and original_inv_freq: non-persistent, float32 in any dtype
    // (torch.arange(0, dim, 2, dtype=torch.float)).
    rotaryEmbedding(t, model, "MixtralRotaryEmbedding", headDim);
    linear(t, 0, "lm_head", hidden, vocab, false, dt);
    if (tied)
        t.tie("lm_head.weight", "model.embed_tokens.weight");
    t.setNoSplit({"MixtralDecoderLayer"});
    t.setExpertsPerToken(c.positive("num_experts_per_tok", 2)); // the config class's default
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    AttentionShape a;
    a.hidden = c.positive("hidden_size", 4096);
    const int64_t heads = c.positive("num_attention_heads", 32);
    a.kvHeads = c.positive("num_key_value_heads", 8);
    a.headDim = c.has("head_dim") && c.raw()["head_dim"].is_number() ? c.positive("head_dim") : a.hidden / heads;
    // One expert's width: the experts run one after another, each on the
    // tokens routed to it, so one expert's [tokens, 2 x inter] is the widest
    // activation a prefill holds at once (all tokens to one expert at worst).
    a.inner = c.integer("intermediate_size", 14336);
    // sliding_window (MixtralConfig's default: none) slides every layer in 5.6's cache
    a.cache = slidingCache(c.integer("num_hidden_layers", 32), 2 * a.kvHeads * a.headDim, slidingWindowOf(c, 0),
                           [](int64_t) { return true; });
    return a;
}

} // namespace

Family family()
{
    Family f;
    f.types = {{"mixtral", true}}; // LlamaTokenizer: BOS first
    f.layersKey = "num_hidden_layers";
    f.defaultLayers = 32;
    f.build = build;
    f.attention = attention;
    f.units = {"model.embed_tokens", "model.layers.*", "model.norm", "lm_head"};
    return f;
}

} // namespace stowage::arch::mixtral
