// The Llama family as transformers defines it: llama, mistral, qwen2 (q/k/v
// bias) and qwen3 (q/k RMSNorm). Same skeleton, family-prefixed class names.
#include "registry.h"

namespace stowage::arch::llama {
namespace {

Skeleton build(const ModelConfig& c, DType dt)
{
    const std::string type = c.modelType();
    const std::string P = type == "llama" ? "Llama" : type == "mistral" ? "Mistral" : type == "qwen2" ? "Qwen2" : "Qwen3";
    const int64_t vocab = c.integer("vocab_size", 32000);
    const int64_t hidden = c.integer("hidden_size", 4096);
    const int64_t inter = c.integer("intermediate_size", 11008);
    const int64_t layers = c.integer("num_hidden_layers", 32);
    const int64_t heads = c.positive("num_attention_heads", 32);
    const int64_t kvHeads = c.positive("num_key_value_heads", heads);
    c.requireDivisible("num_attention_heads", heads, "num_key_value_heads", kvHeads);
    if (!c.has("head_dim"))
        c.requireDivisible("hidden_size", hidden, "num_attention_heads", heads);
    const int64_t headDim = c.has("head_dim") ? c.positive("head_dim") : hidden / heads;
    const bool qkvBias = type == "qwen2" ? true : c.boolOr("attention_bias", false);
    const bool oBias = type == "qwen2" ? false : c.boolOr("attention_bias", false);
    const bool mlpBias = c.boolOr("mlp_bias", false);
    const std::string act = activationClass(c.stringOr("hidden_act", "silu"));
    // LlamaConfig and friends default tie_word_embeddings to False.
    const bool tied = c.boolOr("tie_word_embeddings", false);

    Skeleton s;
    s.basePrefix = "model";
    ModuleTree& t = s.tree;
    t.setModelType(type, true);
    t.addModule(-1, "", P + "ForCausalLM");
    int model = t.addModule(0, "model", P + "Model");
    int emb = t.addModule(model, "embed_tokens", "Embedding");
    t.addParam(emb, "weight", {vocab, hidden}, dt);
    int list = t.addModule(model, "layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        int l = t.addModule(list, std::to_string(i), P + "DecoderLayer");
        int a = t.addModule(l, "self_attn", P + "Attention");
        linear(t, a, "q_proj", hidden, heads * headDim, qkvBias, dt);
        linear(t, a, "k_proj", hidden, kvHeads * headDim, qkvBias, dt);
        linear(t, a, "v_proj", hidden, kvHeads * headDim, qkvBias, dt);
        linear(t, a, "o_proj", heads * headDim, hidden, oBias, dt);
        if (type == "qwen3") {
            norm(t, a, "q_norm", P + "RMSNorm", headDim, false, dt);
            norm(t, a, "k_norm", P + "RMSNorm", headDim, false, dt);
        }
        int mlp = t.addModule(l, "mlp", P + "MLP");
        linear(t, mlp, "gate_proj", hidden, inter, mlpBias, dt);
        linear(t, mlp, "up_proj", hidden, inter, mlpBias, dt);
        linear(t, mlp, "down_proj", inter, hidden, mlpBias, dt);
        t.addModule(mlp, "act_fn", act);
        norm(t, l, "input_layernorm", P + "RMSNorm", hidden, false, dt);
        norm(t, l, "post_attention_layernorm", P + "RMSNorm", hidden, false, dt);
    }
    norm(t, model, "norm", P + "RMSNorm", hidden, false, dt);
    // transformers 5.6 registers inv_freq and original_inv_freq (non-persistent,
    // never in the checkpoint), made with an explicit .float(): float32 in any
    // dtype, torch.arange(0, head_dim, 2) long.
    rotaryEmbedding(t, model, P + "RotaryEmbedding", headDim);
    linear(t, 0, "lm_head", hidden, vocab, false, dt);
    if (tied)
        t.tie("lm_head.weight", "model.embed_tokens.weight");
    t.setNoSplit({P + "DecoderLayer"});
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    AttentionShape a;
    a.hidden = c.positive("hidden_size");
    const int64_t heads = c.positive("num_attention_heads");
    a.kvHeads = c.positive("num_key_value_heads", heads);
    a.headDim = c.has("head_dim") ? c.positive("head_dim") : a.hidden / heads;
    a.inner = c.integer("intermediate_size");
    // Sliding layers as 5.6's configs give them: every Mistral layer slides
    // by sliding_window (MistralConfig's default 4096; null: none); Qwen2 and
    // Qwen3 only with use_sliding_window, by sliding_window (default 4096),
    // the layers layer_types names or else those from max_window_layers (28)
    // on; Llama never.
    const int64_t layers = c.integer("num_hidden_layers", 32), perPosition = 2 * a.kvHeads * a.headDim;
    const std::string type = c.modelType();
    if (type == "mistral")
        a.cache = slidingCache(layers, perPosition, slidingWindowOf(c, 4096), [](int64_t) { return true; });
    if ((type == "qwen2" || type == "qwen3") && c.boolOr("use_sliding_window", false)) {
        const auto listed = listedSlidingLayers(c, layers);
        const int64_t from = c.integer("max_window_layers", 28);
        a.cache = slidingCache(layers, perPosition, slidingWindowOf(c, 4096),
                               [&](int64_t i) { return listed ? (*listed)[size_t(i)] : i >= from; });
    }
    return a;
}

} // namespace

Family family()
{
    Family f;
    // Llama and Mistral tokenizers put BOS first; Qwen's do not.
    f.types = {{"llama", true}, {"mistral", true}, {"qwen2", false}, {"qwen3", false}};
    f.layersKey = "num_hidden_layers";
    f.defaultLayers = 32;
    f.build = build;
    f.attention = attention;
    // rotary_emb holds only buffers the runner computes itself: no unit.
    f.units = {"model.embed_tokens", "model.layers.*", "model.norm", "lm_head"};
    return f;
}

} // namespace stowage::arch::llama
