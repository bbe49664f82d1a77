// OPTForCausalLM as transformers' modeling_opt.py defines it.
#include "registry.h"

namespace stowage::arch::opt {
namespace {

Skeleton build(const ModelConfig& c, DType dt)
{
    const int64_t vocab = c.integer("vocab_size", 50272);
    const int64_t hidden = c.positive("hidden_size", 768);
    c.requireDivisible("hidden_size", hidden, "num_attention_heads", c.positive("num_attention_heads", 12));
    const int64_t layers = c.integer("num_hidden_layers", 12);
    const int64_t ffn = c.integer("ffn_dim", 3072);
    const int64_t positions = c.integer("max_position_embeddings", 2048);
    const int64_t proj = c.has("word_embed_proj_dim") ? c.integer("word_embed_proj_dim") : hidden;
    const bool lnBefore = c.boolOr("do_layer_norm_before", true);
    const bool removeFinal = c.boolOr("_remove_final_layer_norm", false);
    const bool bias = c.boolOr("enable_bias", true);
    const bool affine = c.boolOr("layer_norm_elementwise_affine", true);
    const std::string act = activationClass(c.stringOr("activation_function", "relu"));

    Skeleton s;
    s.basePrefix = "model";
    ModuleTree& t = s.tree;
    t.setModelType("opt", true);
    // transformers 5.6 registers no buffer in OPT.
    t.addModule(-1, "", "OPTForCausalLM");
    int model = t.addModule(0, "model", "OPTModel");
    int dec = t.addModule(model, "decoder", "OPTDecoder");
    int emb = t.addModule(dec, "embed_tokens", "Embedding");
    t.addParam(emb, "weight", {vocab, proj}, dt);
    // Learned positions are offset by 2 (a fairseq legacy), so the table is longer.
    int pos = t.addModule(dec, "embed_positions", "OPTLearnedPositionalEmbedding");
    t.addParam(pos, "weight", {positions + 2, hidden}, dt);
    if (proj != hidden) {
        linear(t, dec, "project_out", hidden, proj, false, dt);
        linear(t, dec, "project_in", proj, hidden, false, dt);
    }
    // Without elementwise affine a LayerNorm has no parameters at all.
    auto layerNorm = [&](int parent, const std::string& name) {
        return affine ? norm(t, parent, name, "LayerNorm", hidden, true, dt) : t.addModule(parent, name, "LayerNorm");
    };
    if (lnBefore && !removeFinal)
        layerNorm(dec, "final_layer_norm");
    int list = t.addModule(dec, "layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        int l = t.addModule(list, std::to_string(i), "OPTDecoderLayer");
        int a = t.addModule(l, "self_attn", "OPTAttention");
        linear(t, a, "k_proj", hidden, hidden, bias, dt);
        linear(t, a, "v_proj", hidden, hidden, bias, dt);
        linear(t, a, "q_proj", hidden, hidden, bias, dt);
        linear(t, a, "out_proj", hidden, hidden, bias, dt);
        t.addModule(l, "activation_fn", act);
        layerNorm(l, "self_attn_layer_norm");
        linear(t, l, "fc1", hidden, ffn, bias, dt);
        linear(t, l, "fc2", ffn, hidden, bias, dt);
        layerNorm(l, "final_layer_norm");
    }
    linear(t, 0, "lm_head", proj, vocab, false, dt);
    if (c.tieWordEmbeddings())
        t.tie("lm_head.weight", "model.decoder.embed_tokens.weight");
    t.setNoSplit({"OPTDecoderLayer"});
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    AttentionShape a;
    a.hidden = c.positive("hidden_size");
    a.kvHeads = c.positive("num_attention_heads");
    a.headDim = a.hidden / a.kvHeads;
    a.inner = c.integer("ffn_dim");
    return a;
}

} // namespace

Family family()
{
    Family f;
    f.types = {{"opt", true}};
    f.layersKey = "num_hidden_layers";
    f.defaultLayers = 12;
    f.build = build;
    f.attention = attention;
    // Execution order, not definition order: project_in (when
    // word_embed_proj_dim differs from hidden_size) before the positions,
    // project_out after the final norm (which post-LN models lack).
    f.units = {"model.decoder.embed_tokens",
               "model.decoder.project_in?",
               "model.decoder.embed_positions",
               "model.decoder.layers.*",
               "model.decoder.final_layer_norm?",
               "model.decoder.project_out?",
               "lm_head"};
    return f;
}

} // namespace stowage::arch::opt
