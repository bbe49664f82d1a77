// OPT as transformers' OPTForCausalLM computes it: learned positions offset
// by 2, pre- or post-LN, ReLU, optional project_in/project_out.
#include "runner.h"

#include <cmath>

namespace stowage::arch {
namespace {

class Opt : public Runner {
public:
    Opt(const ModelConfig& c, WeightStore& s) : m_store(s)
    {
        m_hidden = c.positive("hidden_size");
        m_heads = c.positive("num_attention_heads");
        m_layers = c.integer("num_hidden_layers");
        m_vocab = c.integer("vocab_size");
        m_before = c.boolOr("do_layer_norm_before", true);
        m_proj = c.has("word_embed_proj_dim") && c.integer("word_embed_proj_dim") != m_hidden;
        m_finalNorm = m_before && !c.boolOr("_remove_final_layer_norm", false);
        m_bias = c.boolOr("enable_bias", true);
        m_affine = c.boolOr("layer_norm_elementwise_affine", true);
        m_act = c.stringOr("activation_function", "relu");
    }
    int64_t vocabSize() const override { return m_vocab; }
    int64_t layers() const override { return m_layers; }

    at::Tensor forward(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache) override
    {
        const int64_t T = ids.size(1), hd = m_hidden / m_heads;
        at::Tensor h, idsOn = ids;
        {
            UnitScope u(m_store, "model.decoder.embed_tokens", idsOn);
            h = embed(u.w("weight"), idsOn[0], m_store.computeDType());
        }
        if (m_proj) {
            UnitScope u(m_store, "model.decoder.project_in", h);
            h = dense(h, u.w("weight"));
        }
        {
            UnitScope u(m_store, "model.decoder.embed_positions", h);
            h = h + embed(u.w("weight"), at::arange(past + 2, past + 2 + T, at::kLong).to(u.device()), m_store.computeDType());
        }
        for (int64_t l = 0; l < m_layers; ++l) {
            UnitScope u(m_store, "model.decoder.layers." + std::to_string(l), h);
            auto lin = [&](const at::Tensor& x, const std::string& n) {
                return m_bias ? dense(x, u.w(n + ".weight"), u.w(n + ".bias")) : dense(x, u.w(n + ".weight"));
            };
            auto ln = [&](const at::Tensor& x, const std::string& n) {
                return m_affine ? layerNorm(x, m_hidden, u.w(n + ".weight"), u.w(n + ".bias"), 1e-5)
                                : at::layer_norm(x, {m_hidden}, {}, {}, 1e-5);
            };
            at::Tensor residual = h;
            at::Tensor x = m_before ? ln(h, "self_attn_layer_norm") : h;
            auto heads = [&](const at::Tensor& t) { return t.view({1, T, m_heads, hd}).transpose(1, 2); };
            at::Tensor q = heads(lin(x, "self_attn.q_proj") * (1.0 / std::sqrt(double(hd))));
            auto [k, v] = appendCache(cache[size_t(l)], heads(lin(x, "self_attn.k_proj")), heads(lin(x, "self_attn.v_proj")));
            at::Tensor o = attention(q, k, v, 1.0).transpose(1, 2).reshape({T, m_hidden});
            h = residual + lin(o, "self_attn.out_proj");
            if (!m_before)
                h = ln(h, "self_attn_layer_norm");
            residual = h;
            x = m_before ? ln(h, "final_layer_norm") : h;
            x = lin(x, "fc1");
            x = m_act == "gelu" ? at::gelu(x) : at::relu(x);
            h = residual + lin(x, "fc2");
            if (!m_before)
                h = ln(h, "final_layer_norm");
        }
        if (m_finalNorm) {
            UnitScope u(m_store, "model.decoder.final_layer_norm", h);
            h = m_affine ? layerNorm(h, m_hidden, u.w("weight"), u.w("bias"), 1e-5)
                         : at::layer_norm(h, {m_hidden}, {}, {}, 1e-5);
        }
        if (m_proj) {
            UnitScope u(m_store, "model.decoder.project_out", h);
            h = dense(h, u.w("weight"));
        }
        UnitScope u(m_store, "lm_head", h);
        return logits(h, u.w("weight"));
    }

private:
    WeightStore& m_store;
    int64_t m_hidden, m_heads, m_layers, m_vocab;
    bool m_before, m_proj, m_finalNorm, m_bias, m_affine;
    std::string m_act;
};

} // namespace

std::unique_ptr<Runner> opt::makeRunner(const ModelConfig& c, WeightStore& s) { return std::make_unique<Opt>(c, s); }

} // namespace stowage::arch
