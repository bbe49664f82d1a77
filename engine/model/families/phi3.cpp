// The Phi-3 family as transformers 5.6 defines it (models/phi3/modeling_phi3.py,
// configuration_phi3.py): Phi-3-mini/medium (4k: default rope; 128k: longrope)
// and Phi-4-mini (longrope, partial rotary, tied embeddings). A Llama with
// fused projections: self_attn.qkv_proj and mlp.gate_up_proj.
#include "registry.h"

#include "stowage/error.h"

#include <optional>

namespace stowage::arch::phi3 {
namespace {

// The rotary width Phi3RotaryEmbedding makes its buffers for:
// int(head_dim * partial_rotary_factor). Phi3Config.convert_rope_params_to_dict
// puts config.json's top-level partial_rotary_factor into the rope dict only
// where the dict lacks one (setdefault); _compute_longrope_parameters calls
// standardize_rope_params() again, by then with the top-level value as an
// attribute, which then overwrites the dict's. So: default rope, the dict's
// value first; longrope, the top-level one first.
int64_t rotaryDim(const ModelConfig& c, int64_t headDim)
{
    const nlohmann::json& raw = c.raw();
    const nlohmann::json* rope = nullptr;
    for (const char* key : {"rope_scaling", "rope_parameters"}) { // `rope_scaling or rope_parameters`
        auto it = raw.find(key);
        if (it != raw.end() && it->is_object() && !it->empty()) {
            rope = &*it;
            break;
        }
    }
    std::string type = "default";
    if (rope) {
        auto t = rope->find("rope_type");
        if (t == rope->end() || !t->is_string())
            t = rope->find("type");
        if (t != rope->end() && t->is_string())
            type = t->get<std::string>();
    }
    const bool longrope = type == "longrope" || type == "su" || type == "yarn"; // su and yarn are renamed
    std::optional<double> top, inDict;
    if (auto it = raw.find("partial_rotary_factor"); it != raw.end() && it->is_number())
        top = it->get<double>();
    if (rope)
        if (auto it = rope->find("partial_rotary_factor"); it != rope->end() && it->is_number())
            inDict = it->get<double>();
    const double factor = longrope ? top.value_or(inDict.value_or(1.0)) : inDict.value_or(top.value_or(1.0));
    if (!(factor > 0.0 && factor <= 1.0))
        throw InputError(c.path(), "partial_rotary_factor must lie in (0, 1]");
    return int64_t(double(headDim) * factor);
}

int64_t headDimOf(const ModelConfig& c, int64_t hidden, int64_t heads)
{
    // Phi3Attention: getattr(config, "head_dim", hidden_size // num_attention_heads);
    // Phi3Config has no head_dim field, a config.json key becomes one.
    if (c.has("head_dim"))
        return c.positive("head_dim");
    c.requireDivisible("hidden_size", hidden, "num_attention_heads", heads);
    return hidden / heads;
}

Skeleton build(const ModelConfig& c, DType dt)
{
    // Phi3Config's defaults (Phi-3-mini-4k).
    const int64_t vocab = c.integer("vocab_size", 32064);
    const int64_t hidden = c.integer("hidden_size", 3072);
    const int64_t inter = c.integer("intermediate_size", 8192);
    const int64_t layers = c.integer("num_hidden_layers", 32);
    const int64_t heads = c.positive("num_attention_heads", 32);
    const int64_t kvHeads = c.positive("num_key_value_heads", heads); // None: num_attention_heads
    c.requireDivisible("num_attention_heads", heads, "num_key_value_heads", kvHeads);
    const int64_t headDim = headDimOf(c, hidden, heads);
    const int64_t rotary = rotaryDim(c, headDim);
    const std::string act = activationClass(c.stringOr("hidden_act", "silu"));
    // Phi3Config.tie_word_embeddings defaults to False; Phi-4-mini's config says true.
    const bool tied = c.boolOr("tie_word_embeddings", false);

    Skeleton s;
    s.basePrefix = "model";
    ModuleTree& t = s.tree;
    t.setModelType(c.modelType(), true);
    t.addModule(-1, "", "Phi3ForCausalLM");
    int model = t.addModule(0, "model", "Phi3Model");
    int emb = t.addModule(model, "embed_tokens", "Embedding");
    t.addParam(emb, "weight", {vocab, hidden}, dt);
    int list = t.addModule(model, "layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        int l = t.addModule(list, std::to_string(i), "Phi3DecoderLayer");
        // Phi3Attention defines o_proj before qkv_proj; no biases.
        int a = t.addModule(l, "self_attn", "Phi3Attention");
        linear(t, a, "o_proj", heads * headDim, hidden, false, dt);
        linear(t, a, "qkv_proj", hidden, heads * headDim + 2 * kvHeads * headDim, false, dt);
        int mlp = t.addModule(l, "mlp", "Phi3MLP");
        linear(t, mlp, "gate_up_proj", hidden, 2 * inter, false, dt);
        linear(t, mlp, "down_proj", inter, hidden, false, dt);
        t.addModule(mlp, "activation_fn", act);
        norm(t, l, "input_layernorm", "Phi3RMSNorm", hidden, false, dt);
        norm(t, l, "post_attention_layernorm", "Phi3RMSNorm", hidden, false, dt);
        t.addModule(l, "resid_attn_dropout", "Dropout");
        t.addModule(l, "resid_mlp_dropout", "Dropout");
    }
    norm(t, model, "norm", "Phi3RMSNorm", hidden, false, dt);
    // inv_freq and original_inv_freq (register_buffer, non-persistent), the
    // same for default rope and longrope (short_factor at init): float32 from
    // torch.arange(0, dim, 2, dtype=int64).float(), ceil(dim / 2) each, where
    // dim = int(head_dim * partial_rotary_factor). longrope's long_inv_freq is
    // registered only when a forward first passes original_max_position_embeddings.
    rotaryEmbedding(t, model, "Phi3RotaryEmbedding", rotary);
    linear(t, 0, "lm_head", hidden, vocab, false, dt);
    if (tied)
        t.tie("lm_head.weight", "model.embed_tokens.weight");
    t.setNoSplit({"Phi3DecoderLayer"});
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    AttentionShape a;
    a.hidden = c.positive("hidden_size", 3072);
    const int64_t heads = c.positive("num_attention_heads", 32);
    a.kvHeads = c.positive("num_key_value_heads", heads);
    a.headDim = headDimOf(c, a.hidden, heads);
    a.inner = c.integer("intermediate_size", 8192);
    // With sliding_window set (Phi-3-mini-4k: 2047) transformers 5.6's
    // DynamicCache makes every layer a sliding one, keeping at most that
    // many positions; null (Phi3Config's default) keeps them all.
    if (c.has("sliding_window"))
        a.cache.assign(size_t(c.integer("num_hidden_layers", 32)),
                       LayerCacheShape{2 * a.kvHeads * a.headDim, c.positive("sliding_window")});
    return a;
}

} // namespace

Family family()
{
    Family f;
    // transformers 5.6 loads Phi-3's tokenizer as its tokenizer_config.json's
    // LlamaTokenizer (add_bos_token defaults to True); Phi-4-mini's names
    // GPT2Tokenizer (default False). One default per model_type: Phi-3's;
    // a Phi-4-mini tokenizer_config.json without add_bos_token gets BOS.
    f.types = {{"phi3", true}};
    f.layersKey = "num_hidden_layers";
    f.defaultLayers = 32;
    f.build = build;
    f.attention = attention;
    // rotary_emb holds only buffers the runner computes itself: no unit.
    f.units = {"model.embed_tokens", "model.layers.*", "model.norm", "lm_head"};
    return f;
}

} // namespace stowage::arch::phi3
