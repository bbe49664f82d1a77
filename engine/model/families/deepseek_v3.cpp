// DeepSeek-V3 (and its derivatives: R1, V3.1, Kimi-K2-shaped configs) as
// transformers 5.6 builds it (models/deepseek_v3/modeling_deepseek_v3.py,
// configuration_deepseek_v3.py): multi-head latent attention (MLA: queries
// through a low-rank q_a/q_b pair, or one q_proj when q_lora_rank is null;
// keys and values from one compressed kv_a projection, decompressed by
// kv_b_proj), the first `first_k_dense_replace` layers with a dense MLP, the
// others a DeepseekV3MoE: fused routed experts, a sigmoid router with its
// e_score_correction_bias, and shared experts. Hub checkpoints store the
// experts one by one (mlp.experts.E.gate_proj/up_proj/down_proj);
// conversion_mapping.py maps deepseek_v3 to qwen2_moe's fusing, which
// storedParts records. The multi-token-prediction layer DeepSeek-V3 ships
// (model.layers.61.*, num_nextn_predict_layers) is not built: 5.6 ignores it
// on load (_keys_to_ignore_on_load_unexpected).
#include "registry.h"

#include "stowage/error.h"

#include <algorithm>

namespace stowage::arch::deepseek_v3 {
namespace {

// DeepseekV3Config's fields with its defaults (DeepSeek-V3's own sizes).
struct Shape {
    int64_t vocab, hidden, inter, moeInter, layers, heads, experts, shared, denseLayers;
    int64_t qLora; // 0: no q LoRA (q_lora_rank null): one q_proj
    int64_t kvLora, rope, nope, vDim;
    bool bias, tied;
    std::string act;
};

Shape shapeOf(const ModelConfig& c)
{
    Shape s;
    s.vocab = c.integer("vocab_size", 129280);
    s.hidden = c.positive("hidden_size", 7168);
    s.inter = c.integer("intermediate_size", 18432);
    s.moeInter = c.integer("moe_intermediate_size", 2048);
    s.layers = c.integer("num_hidden_layers", 61);
    s.heads = c.positive("num_attention_heads", 128);
    // n_routed_experts, also spelled num_local_experts (attribute_map).
    s.experts = c.has("n_routed_experts") ? c.integer("n_routed_experts") : c.integer("num_local_experts", 256);
    s.shared = c.integer("n_shared_experts", 1);
    s.denseLayers = c.integer("first_k_dense_replace", 3);
    // q_lora_rank: absent means the default 1536; an explicit null means none.
    const auto& raw = c.raw();
    auto q = raw.find("q_lora_rank");
    s.qLora = q != raw.end() && q->is_null() ? 0 : c.positive("q_lora_rank", 1536);
    s.kvLora = c.positive("kv_lora_rank", 512);
    s.rope = c.positive("qk_rope_head_dim", 64);
    s.nope = c.integer("qk_nope_head_dim", 128);
    s.vDim = c.positive("v_head_dim", 128);
    if (s.rope % 2)
        throw InputError(c.path(), "qk_rope_head_dim must be even (rotary pairs)");
    s.bias = c.boolOr("attention_bias", false);
    s.tied = c.boolOr("tie_word_embeddings", false); // DeepseekV3Config: False
    s.act = activationClass(c.stringOr("hidden_act", "silu"));
    if (s.experts > 0 && s.layers > s.denseLayers) {
        // The router's grouping divides the experts into n_group groups.
        const int64_t groups = c.positive("n_group", 8);
        c.requireDivisible("n_routed_experts", s.experts, "n_group", groups);
    }
    return s;
}

// DeepseekV3MLP: gate_proj, up_proj, down_proj, act_fn.
void mlp(ModuleTree& t, int parent, const std::string& name, const Shape& s, int64_t inter, DType dt)
{
    const int m = t.addModule(parent, name, "DeepseekV3MLP");
    linear(t, m, "gate_proj", s.hidden, inter, false, dt);
    linear(t, m, "up_proj", s.hidden, inter, false, dt);
    linear(t, m, "down_proj", inter, s.hidden, false, dt);
    t.addModule(m, "act_fn", s.act);
}

Skeleton build(const ModelConfig& c, DType dt)
{
    const Shape s = shapeOf(c);
    const int64_t qkDim = s.nope + s.rope;

    Skeleton sk;
    sk.basePrefix = "model";
    // The multi-token-prediction layers follow the decoder layers in the Hub's
    // files (model.layers.61.* for 61 layers); 5.6 builds none of them.
    const int64_t mtp = c.integer("num_nextn_predict_layers", 0);
    for (int64_t i = 0; i < std::max<int64_t>(mtp, 1); ++i)
        sk.ignoredPrefixes.push_back("model.layers." + std::to_string(s.layers + i) + ".");
    ModuleTree& t = sk.tree;
    t.setModelType("deepseek_v3", true);
    t.addModule(-1, "", "DeepseekV3ForCausalLM");
    const int model = t.addModule(0, "model", "DeepseekV3Model");
    const int emb = t.addModule(model, "embed_tokens", "Embedding");
    t.addParam(emb, "weight", {s.vocab, s.hidden}, dt);
    const int list = t.addModule(model, "layers", "ModuleList");
    for (int64_t i = 0; i < s.layers; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        const int l = t.addModule(list, std::to_string(i), "DeepseekV3DecoderLayer");
        const int a = t.addModule(l, "self_attn", "DeepseekV3Attention");
        if (s.qLora == 0) {
            linear(t, a, "q_proj", s.hidden, s.heads * qkDim, false, dt);
        } else {
            linear(t, a, "q_a_proj", s.hidden, s.qLora, s.bias, dt);
            norm(t, a, "q_a_layernorm", "DeepseekV3RMSNorm", s.qLora, false, dt);
            linear(t, a, "q_b_proj", s.qLora, s.heads * qkDim, false, dt);
        }
        linear(t, a, "kv_a_proj_with_mqa", s.hidden, s.kvLora + s.rope, s.bias, dt);
        norm(t, a, "kv_a_layernorm", "DeepseekV3RMSNorm", s.kvLora, false, dt);
        linear(t, a, "kv_b_proj", s.kvLora, s.heads * (s.nope + s.vDim), false, dt);
        linear(t, a, "o_proj", s.heads * s.vDim, s.hidden, s.bias, dt);
        if (i < s.denseLayers) {
            mlp(t, l, "mlp", s, s.inter, dt);
        } else {
            const int moe = t.addModule(l, "mlp", "DeepseekV3MoE");
            const int ex = t.addModule(moe, "experts", "DeepseekV3NaiveMoe");
            t.addParam(ex, "gate_up_proj", {s.experts, 2 * s.moeInter, s.hidden}, dt);
            t.addParam(ex, "down_proj", {s.experts, s.hidden, s.moeInter}, dt);
            t.addModule(ex, "act_fn", s.act);
            const std::string E = L + "mlp.experts.{e}.";
            fuseExperts(sk, L + "mlp.experts.gate_up_proj", s.experts,
                        {{E + "gate_proj.weight", {s.moeInter, s.hidden}}, {E + "up_proj.weight", {s.moeInter, s.hidden}}});
            fuseExperts(sk, L + "mlp.experts.down_proj", s.experts, {{E + "down_proj.weight", {s.hidden, s.moeInter}}});
            const int gate = t.addModule(moe, "gate", "DeepseekV3TopkRouter");
            t.addParam(gate, "weight", {s.experts, s.hidden}, dt);
            // register_buffer (persistent: the Hub's files hold it) as
            // torch.zeros, so in the dtype the model is built in: that is
            // what 5.6's planner sizes (tests/reference/hf56). Loading then
            // keeps it in float32 (_keep_in_fp32_modules_strict), 2 bytes an
            // expert more in bf16 than planned, as in transformers.
            t.addBuffer(gate, "e_score_correction_bias", {s.experts}, dt, true);
            mlp(t, moe, "shared_experts", s, s.moeInter * s.shared, dt);
        }
        norm(t, l, "input_layernorm", "DeepseekV3RMSNorm", s.hidden, false, dt);
        norm(t, l, "post_attention_layernorm", "DeepseekV3RMSNorm", s.hidden, false, dt);
    }
    norm(t, model, "norm", "DeepseekV3RMSNorm", s.hidden, false, dt);
    // DeepseekV3Config sets head_dim = qk_rope_head_dim: the rotary buffers
    // (default or yarn: both make dim // 2 float32 values) cover the rope part.
    rotaryEmbedding(t, model, "DeepseekV3RotaryEmbedding", s.rope);
    linear(t, 0, "lm_head", s.hidden, s.vocab, false, dt);
    if (s.tied)
        t.tie("lm_head.weight", "model.embed_tokens.weight");
    t.setNoSplit({"DeepseekV3DecoderLayer"});
    t.setExpertsPerToken(c.positive("num_experts_per_tok", 8)); // the config class's default
    return sk;
}

AttentionShape attention(const ModelConfig& c)
{
    const Shape s = shapeOf(c);
    AttentionShape a;
    a.hidden = s.hidden;
    // What transformers' attention computes with: every head's keys (nope +
    // rope) and values, decompressed.
    a.kvHeads = s.heads;
    a.headDim = s.nope + s.rope;
    // The widest MLP a token passes: a dense layer's, else one expert's or
    // the shared experts' (experts run one after another).
    a.inner = std::max(s.moeInter * std::max<int64_t>(s.shared, 1), s.denseLayers > 0 ? s.inter : 0);
    // The runner's cache (engine/runtime/families/deepseek_v3.cpp) is MLA's
    // compressed one: per position the normalised latent (kv_lora_rank) and
    // the rotated shared key part (qk_rope_head_dim), one copy for all heads.
    // transformers 5.6's DynamicCache holds the decompressed keys and values
    // instead: heads x (qk_nope + qk_rope + v_head_dim) per position.
    a.cache.assign(size_t(s.layers), LayerCacheShape{s.kvLora + s.rope, 0});
    return a;
}

} // namespace

Family family()
{
    Family f;
    // DeepSeek-V3's tokenizer_config.json says add_bos_token true; LlamaTokenizerFast's default too.
    f.types = {{"deepseek_v3", true}};
    f.layersKey = "num_hidden_layers";
    f.defaultLayers = 61;
    f.build = build;
    f.attention = attention;
    f.units = {"model.embed_tokens", "model.layers.*", "model.norm", "lm_head"};
    return f;
}

} // namespace stowage::arch::deepseek_v3
