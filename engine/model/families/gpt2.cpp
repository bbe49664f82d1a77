// GPT2LMHeadModel as transformers' modeling_gpt2.py defines it (distilgpt2 too).
#include "registry.h"

namespace stowage::arch::gpt2 {
namespace {

// transformers' Conv1D stores weight as [in, out], the transpose of Linear.
int conv1d(ModuleTree& t, int parent, const std::string& name, int64_t in, int64_t out, DType dt)
{
    int m = t.addModule(parent, name, "Conv1D");
    t.addParam(m, "weight", {in, out}, dt);
    t.addParam(m, "bias", {out}, dt);
    return m;
}

Skeleton build(const ModelConfig& c, DType dt)
{
    const int64_t vocab = c.integer("vocab_size", 50257);
    const int64_t positions = c.integer("n_positions", 1024);
    const int64_t embd = c.positive("n_embd", 768);
    c.requireDivisible("n_embd", embd, "n_head", c.positive("n_head", 12));
    const int64_t layers = c.integer("n_layer", 12);
    const int64_t inner = c.has("n_inner") ? c.integer("n_inner") : 4 * embd;
    const std::string act = activationClass(c.stringOr("activation_function", "gelu_new"));
    const bool cross = c.boolOr("add_cross_attention", false);

    Skeleton s;
    s.basePrefix = "transformer";
    s.ignoredSuffixes = {".attn.bias", ".attn.masked_bias", ".crossattention.bias", ".crossattention.masked_bias"};
    ModuleTree& t = s.tree;
    t.setModelType("gpt2", true);
    // transformers 5.6 registers no buffer in GPT-2 (the old attn.bias masks are gone).
    t.addModule(-1, "", "GPT2LMHeadModel");
    int tr = t.addModule(0, "transformer", "GPT2Model");
    int wte = t.addModule(tr, "wte", "Embedding");
    t.addParam(wte, "weight", {vocab, embd}, dt);
    int wpe = t.addModule(tr, "wpe", "Embedding");
    t.addParam(wpe, "weight", {positions, embd}, dt);
    t.addModule(tr, "drop", "Dropout");
    int h = t.addModule(tr, "h", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
        int b = t.addModule(h, std::to_string(i), "GPT2Block");
        norm(t, b, "ln_1", "LayerNorm", embd, true, dt);
        int attn = t.addModule(b, "attn", "GPT2Attention");
        conv1d(t, attn, "c_attn", embd, 3 * embd, dt);
        conv1d(t, attn, "c_proj", embd, embd, dt);
        t.addModule(attn, "attn_dropout", "Dropout");
        t.addModule(attn, "resid_dropout", "Dropout");
        norm(t, b, "ln_2", "LayerNorm", embd, true, dt);
        if (cross) {
            int ca = t.addModule(b, "crossattention", "GPT2Attention");
            conv1d(t, ca, "c_attn", embd, 2 * embd, dt);
            int q = t.addModule(ca, "q_attn", "Conv1D");
            t.addParam(q, "weight", {embd, embd}, dt);
            t.addParam(q, "bias", {embd}, dt);
            conv1d(t, ca, "c_proj", embd, embd, dt);
            t.addModule(ca, "attn_dropout", "Dropout");
            t.addModule(ca, "resid_dropout", "Dropout");
            norm(t, b, "ln_cross_attn", "LayerNorm", embd, true, dt);
        }
        int mlp = t.addModule(b, "mlp", "GPT2MLP");
        conv1d(t, mlp, "c_fc", embd, inner, dt);
        conv1d(t, mlp, "c_proj", inner, embd, dt);
        t.addModule(mlp, "act", act);
        t.addModule(mlp, "dropout", "Dropout");
    }
    norm(t, tr, "ln_f", "LayerNorm", embd, true, dt);
    linear(t, 0, "lm_head", embd, vocab, false, dt);
    if (c.tieWordEmbeddings())
        t.tie("lm_head.weight", "transformer.wte.weight");
    t.setNoSplit({"GPT2Block"});
    return s;
}

AttentionShape attention(const ModelConfig& c)
{
    AttentionShape a;
    a.hidden = c.positive("n_embd", 768);
    a.kvHeads = c.positive("n_head", 12);
    a.headDim = a.hidden / a.kvHeads;
    a.inner = c.has("n_inner") ? c.integer("n_inner") : 4 * a.hidden;
    return a;
}

} // namespace

Family family()
{
    Family f;
    f.types = {{"gpt2", false}};
    f.layersKey = "n_layer";
    f.defaultLayers = 12;
    f.build = build;
    f.attention = attention;
    f.units = {"transformer.wte", "transformer.wpe", "transformer.h.*", "transformer.ln_f", "lm_head"};
    return f;
}

} // namespace stowage::arch::gpt2
