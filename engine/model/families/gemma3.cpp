// Gemma 3 as transformers 5.6 builds it (models/gemma3/modeling_gemma3.py,
// configuration_gemma3.py; the vision tower from models/siglip):
//   gemma3_text  Gemma3ForCausalLM (gemma-3-270m, 1b)
//   gemma3       Gemma3ForConditionalGeneration (gemma-3-4b/12b/27b): a SigLIP
//                vision tower and a projector beside the text model, whose
//                config.json nests text_config and vision_config.
// Only the text model runs (text-only prompts); the vision tower and the
// projector are counted and placed as transformers places them.
#include "registry.h"

#include "stowage/error.h"

#include <algorithm>

namespace stowage::arch::gemma3 {
namespace {

// Each layer's attention: config.json's layer_types, else the pattern.
std::vector<std::string> layerTypes(const ModelConfig& text)
{
    const int64_t layers = text.integer("num_hidden_layers", 26);
    std::vector<std::string> types;
    auto it = text.raw().find("layer_types");
    if (it != text.raw().end() && !it->is_null()) {
        if (!it->is_array())
            throw InputError(text.path(), "'layer_types' is not a list");
        for (const auto& t : *it) {
            const std::string s = t.is_string() ? t.get<std::string>() : std::string();
            if (s != "sliding_attention" && s != "full_attention")
                throw InputError(text.path(), "'layer_types' holds " + t.dump() +
                                                  "; Gemma 3 layers are sliding_attention or full_attention");
            types.push_back(s);
        }
        // PreTrainedConfig.validate_layer_type
        if (int64_t(types.size()) != layers)
            throw InputError(text.path(), "'layer_types' lists " + std::to_string(types.size()) +
                                              " layers but num_hidden_layers is " + std::to_string(layers));
        return types;
    }
    // Gemma3TextConfig.__post_init__: every `sliding_window_pattern`-th layer
    // (default 6) is global, the others slide.
    const int64_t pattern = text.positive("sliding_window_pattern", 6);
    for (int64_t i = 0; i < layers; ++i)
        types.push_back((i + 1) % pattern ? "sliding_attention" : "full_attention");
    return types;
}

// Gemma3TextConfig's defaults (gemma-3-2b-like sizes).
struct TextShape {
    int64_t vocab, hidden, inter, layers, heads, kvHeads, headDim;
    bool bias;
    std::string act;
};

TextShape textShape(const ModelConfig& c)
{
    TextShape s;
    s.vocab = c.integer("vocab_size", 262208);
    s.hidden = c.integer("hidden_size", 2304);
    s.inter = c.integer("intermediate_size", 9216);
    s.layers = c.integer("num_hidden_layers", 26);
    s.heads = c.positive("num_attention_heads", 8);
    s.kvHeads = c.positive("num_key_value_heads", 4);
    c.requireDivisible("num_attention_heads", s.heads, "num_key_value_heads", s.kvHeads);
    // Gemma3TextConfig.validate_architecture, although head_dim is its own key
    c.requireDivisible("hidden_size", s.hidden, "num_attention_heads", s.heads);
    s.headDim = c.positive("head_dim", 256);
    s.bias = c.boolOr("attention_bias", false);
    s.act = activationClass(c.stringOr("hidden_activation", "gelu_pytorch_tanh"));
    return s;
}

// Gemma3TextModel under `prefix` ("model" or "model.language_model").
void addTextModel(ModuleTree& t, int parent, const std::string& local, const ModelConfig& c, DType dt)
{
    const TextShape s = textShape(c);
    const auto types = layerTypes(c);
    int model = t.addModule(parent, local, "Gemma3TextModel");
    int emb = t.addModule(model, "embed_tokens", "Gemma3TextScaledWordEmbedding");
    t.addParam(emb, "weight", {s.vocab, s.hidden}, dt);
    // torch.tensor(hidden ** 0.5): a 0-d tensor in the default dtype, which
    // from_pretrained sets to the requested one while it builds the model.
    t.addBuffer(emb, "embed_scale", {}, dt, false);
    int list = t.addModule(model, "layers", "ModuleList");
    for (int64_t i = 0; i < s.layers; ++i) {
        int l = t.addModule(list, std::to_string(i), "Gemma3DecoderLayer");
        int a = t.addModule(l, "self_attn", "Gemma3Attention");
        linear(t, a, "q_proj", s.hidden, s.heads * s.headDim, s.bias, dt);
        linear(t, a, "k_proj", s.hidden, s.kvHeads * s.headDim, s.bias, dt);
        linear(t, a, "v_proj", s.hidden, s.kvHeads * s.headDim, s.bias, dt);
        linear(t, a, "o_proj", s.heads * s.headDim, s.hidden, s.bias, dt);
        norm(t, a, "q_norm", "Gemma3RMSNorm", s.headDim, false, dt);
        norm(t, a, "k_norm", "Gemma3RMSNorm", s.headDim, false, dt);
        int mlp = t.addModule(l, "mlp", "Gemma3MLP");
        linear(t, mlp, "gate_proj", s.hidden, s.inter, false, dt);
        linear(t, mlp, "up_proj", s.hidden, s.inter, false, dt);
        linear(t, mlp, "down_proj", s.inter, s.hidden, false, dt);
        t.addModule(mlp, "act_fn", s.act);
        for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                              "post_feedforward_layernorm"})
            norm(t, l, n, "Gemma3RMSNorm", s.hidden, false, dt);
    }
    norm(t, model, "norm", "Gemma3RMSNorm", s.hidden, false, dt);
    // Gemma3RotaryEmbedding registers <type>_inv_freq and
    // <type>_original_inv_freq (non-persistent, float32: arange(...,
    // dtype=torch.float)) for each layer type the model has. It walks
    // list(set(layer_types)), whose order Python's string hashing picks anew
    // in each process; the sizes do not depend on it. Here: first use.
    int rotary = t.addModule(model, "rotary_emb", "Gemma3RotaryEmbedding");
    std::vector<std::string> seen;
    for (const auto& type : types) {
        if (std::find(seen.begin(), seen.end(), type) != seen.end())
            continue;
        seen.push_back(type);
        t.addBuffer(rotary, type + "_inv_freq", {(s.headDim + 1) / 2}, DType::F32, false);
        t.addBuffer(rotary, type + "_original_inv_freq", {(s.headDim + 1) / 2}, DType::F32, false);
    }
}

int layerNorm(ModuleTree& t, int parent, const std::string& name, int64_t dim, DType dt)
{
    return norm(t, parent, name, "LayerNorm", dim, true, dt);
}

void addSiglipMlp(ModuleTree& t, int parent, int64_t hidden, int64_t inter, const std::string& act, DType dt)
{
    int mlp = t.addModule(parent, "mlp", "SiglipMLP");
    t.addModule(mlp, "activation_fn", act);
    linear(t, mlp, "fc1", hidden, inter, true, dt);
    linear(t, mlp, "fc2", inter, hidden, true, dt);
}

// SiglipVisionModel (AutoModel for siglip_vision_model). In 5.6 it holds the
// embeddings, encoder and norms itself: no vision_model child any more.
void addVisionTower(ModuleTree& t, int parent, const ModelConfig& v, DType dt)
{
    const int64_t hidden = v.integer("hidden_size", 768);
    const int64_t inter = v.integer("intermediate_size", 3072);
    const int64_t layers = v.integer("num_hidden_layers", 12);
    const int64_t heads = v.positive("num_attention_heads", 12);
    v.requireDivisible("hidden_size", hidden, "num_attention_heads", heads); // SiglipAttention raises
    const int64_t channels = v.integer("num_channels", 3);
    const int64_t image = v.integer("image_size", 224);
    const int64_t patch = v.positive("patch_size", 16);
    const std::string act = activationClass(v.stringOr("hidden_act", "gelu_pytorch_tanh"));
    // SiglipVisionConfig has no such field: only a config.json that sets it
    // (Gemma 3's say false) leaves the pooling head out.
    const bool head = v.boolOr("vision_use_head", true);
    const int64_t positions = (image / patch) * (image / patch);

    int tower = t.addModule(parent, "vision_tower", "SiglipVisionModel");
    int emb = t.addModule(tower, "embeddings", "SiglipVisionEmbeddings");
    int conv = t.addModule(emb, "patch_embedding", "Conv2d");
    t.addParam(conv, "weight", {hidden, channels, patch, patch}, dt);
    t.addParam(conv, "bias", {hidden}, dt);
    int pos = t.addModule(emb, "position_embedding", "Embedding");
    t.addParam(pos, "weight", {positions, hidden}, dt);
    t.addBuffer(emb, "position_ids", {1, positions}, DType::I64, false); // arange(n).expand((1, -1))
    int encoder = t.addModule(tower, "encoder", "SiglipEncoder");
    int list = t.addModule(encoder, "layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        int l = t.addModule(list, std::to_string(i), "SiglipEncoderLayer");
        layerNorm(t, l, "layer_norm1", hidden, dt);
        int a = t.addModule(l, "self_attn", "SiglipAttention");
        for (const char* n : {"k_proj", "v_proj", "q_proj", "out_proj"})
            linear(t, a, n, hidden, hidden, true, dt);
        layerNorm(t, l, "layer_norm2", hidden, dt);
        addSiglipMlp(t, l, hidden, inter, act, dt);
    }
    layerNorm(t, tower, "post_layernorm", hidden, dt);
    if (head) {
        int h = t.addModule(tower, "head", "SiglipMultiheadAttentionPoolingHead");
        t.addParam(h, "probe", {1, 1, hidden}, dt);
        int mha = t.addModule(h, "attention", "MultiheadAttention");
        t.addParam(mha, "in_proj_weight", {3 * hidden, hidden}, dt);
        t.addParam(mha, "in_proj_bias", {3 * hidden}, dt);
        int out = t.addModule(mha, "out_proj", "NonDynamicallyQuantizableLinear");
        t.addParam(out, "weight", {hidden, hidden}, dt);
        t.addParam(out, "bias", {hidden}, dt);
        layerNorm(t, h, "layernorm", hidden, dt);
        addSiglipMlp(t, h, hidden, inter, act, dt);
    }
}

Skeleton build(const ModelConfig& c, DType dt)
{
    Skeleton s;
    s.basePrefix = "model";
    ModuleTree& t = s.tree;
    t.setModelType(c.modelType(), true);
    // _no_split_modules: Gemma3PreTrainedModel lists the SigLIP classes too,
    // and post_init() unions each child's set into its parent's, so a
    // composite model also gets SiglipPreTrainedModel's SiglipTextEmbeddings.
    // The decoder layer first: the KV reserve names its class (kvcache.h).
    std::vector<std::string> noSplit{"Gemma3DecoderLayer", "SiglipVisionEmbeddings", "SiglipEncoderLayer",
                                     "SiglipMultiheadAttentionPoolingHead"};
    if (c.modelType() == "gemma3_text") {
        const TextShape ts = textShape(c);
        t.addModule(-1, "", "Gemma3ForCausalLM");
        addTextModel(t, 0, "model", c, dt);
        linear(t, 0, "lm_head", ts.hidden, ts.vocab, false, dt);
        if (c.boolOr("tie_word_embeddings", true)) // Gemma3TextConfig's default
            t.tie("lm_head.weight", "model.embed_tokens.weight");
        t.setNoSplit(noSplit);
        return s;
    }
    // Gemma3Config: missing sub-configs are their classes' defaults.
    const ModelConfig text = c.sub("text_config"), vision = c.sub("vision_config");
    const TextShape ts = textShape(text);
    const int64_t visionHidden = vision.integer("hidden_size", 768);
    c.positive("mm_tokens_per_image", 256); // the projector's pooling divides by its square root
    t.addModule(-1, "", "Gemma3ForConditionalGeneration");
    int model = t.addModule(0, "model", "Gemma3Model");
    addVisionTower(t, model, vision, dt);
    int proj = t.addModule(model, "multi_modal_projector", "Gemma3MultiModalProjector");
    t.addParam(proj, "mm_input_projection_weight", {visionHidden, ts.hidden}, dt);
    norm(t, proj, "mm_soft_emb_norm", "Gemma3RMSNorm", visionHidden, false, dt);
    t.addModule(proj, "avg_pool", "AvgPool2d");
    addTextModel(t, model, "language_model", text, dt);
    linear(t, 0, "lm_head", ts.hidden, ts.vocab, false, dt);
    // The top-level tie_word_embeddings (Gemma3Config's, default true) decides,
    // not text_config's.
    if (c.boolOr("tie_word_embeddings", true))
        t.tie("lm_head.weight", "model.language_model.embed_tokens.weight");
    noSplit.push_back("SiglipTextEmbeddings");
    t.setNoSplit(noSplit);
    // transformers' conversion mapping ("llava" for gemma3, then
    // siglip_vision_model's PrefixChange): the Hub's files and 4.5x saves.
    s.storedPrefixes = {{"model.language_model", "language_model.model"},
                        {"lm_head", "language_model.lm_head"},
                        {"model.vision_tower", "vision_tower.vision_model"},
                        {"model.vision_tower", "model.vision_tower.vision_model"},
                        {"model.multi_modal_projector", "multi_modal_projector"}};
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    const ModelConfig text = c.modelType() == "gemma3" ? c.sub("text_config") : c;
    const TextShape s = textShape(text);
    AttentionShape a;
    a.hidden = s.hidden;
    a.kvHeads = s.kvHeads;
    a.headDim = s.headDim;
    a.inner = s.inter;
    // transformers 5.6's DynamicCache keeps a sliding layer's last
    // sliding_window positions (Gemma3TextConfig's default 4096), a global
    // layer's all of them.
    const int64_t window = text.positive("sliding_window", 4096);
    for (const std::string& type : layerTypes(text))
        a.cache.push_back({2 * s.kvHeads * s.headDim, type == "sliding_attention" ? window : 0});
    return a;
}

} // namespace

Family family()
{
    Family f;
    // Gemma's tokenizer puts <bos> first.
    f.types = {{"gemma3_text", true}, {"gemma3", true}};
    f.layersKey = "num_hidden_layers"; // text_config's for gemma3 (buildSkeleton)
    f.defaultLayers = 26;
    f.build = build;
    f.attention = attention;
    // rotary_emb holds only buffers; the vision tower and the projector do
    // not run for text prompts: no units.
    // gemma3_text has the first three, gemma3 the next three.
    f.units = {"model.embed_tokens?",
               "model.layers.*?",
               "model.norm?",
               "model.language_model.embed_tokens?",
               "model.language_model.layers.*?",
               "model.language_model.norm?",
               "lm_head"};
    return f;
}

} // namespace stowage::arch::gemma3
