// GPT-2 (and distilgpt2) as transformers' GPT2LMHeadModel computes it.
#include "runner.h"

#include <cmath>

namespace stowage::arch {
namespace {

at::Tensor geluNew(const at::Tensor& x)
{
    return 0.5 * x * (1.0 + at::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * at::pow(x, 3.0))));
}

// Conv1D stores [in, out]: y = x W + b.
at::Tensor conv1d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) { return denseInOut(x, w, b); }

class Gpt2 : public Runner {
public:
    Gpt2(const ModelConfig& c, WeightStore& s) : m_store(s)
    {
        m_embd = c.positive("n_embd", 768);
        m_heads = c.positive("n_head", 12);
        m_layers = c.integer("n_layer", 12);
        m_vocab = c.integer("vocab_size", 50257);
        m_eps = c.number("layer_norm_epsilon", 1e-5);
        m_act = c.stringOr("activation_function", "gelu_new");
    }
    int64_t vocabSize() const override { return m_vocab; }
    int64_t layers() const override { return m_layers; }

    at::Tensor forward(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache) override
    {
        const int64_t T = ids.size(1);
        at::Tensor h, pos = at::arange(past, past + T, at::kLong);
        at::Tensor idsOn = ids;
        {
            UnitScope u(m_store, "transformer.wte", idsOn);
            h = embed(u.w("weight"), idsOn[0], m_store.computeDType());
        }
        {
            UnitScope u(m_store, "transformer.wpe", h);
            h = h + embed(u.w("weight"), pos.to(u.device()), m_store.computeDType());
        }
        const int64_t hd = m_embd / m_heads;
        for (int64_t l = 0; l < m_layers; ++l) {
            UnitScope u(m_store, "transformer.h." + std::to_string(l), h);
            at::Tensor a = layerNorm(h, m_embd, u.w("ln_1.weight"), u.w("ln_1.bias"), m_eps);
            at::Tensor qkv = conv1d(a, u.w("attn.c_attn.weight"), u.w("attn.c_attn.bias"));
            auto parts = qkv.split(m_embd, -1);
            auto heads = [&](const at::Tensor& x) { return x.view({1, T, m_heads, hd}).transpose(1, 2); };
            auto [k, v] = appendCache(cache[size_t(l)], heads(parts[1]), heads(parts[2]));
            at::Tensor o = attention(heads(parts[0]), k, v, 1.0 / std::sqrt(double(hd)));
            o = o.transpose(1, 2).reshape({T, m_embd});
            h = h + conv1d(o, u.w("attn.c_proj.weight"), u.w("attn.c_proj.bias"));
            at::Tensor m = layerNorm(h, m_embd, u.w("ln_2.weight"), u.w("ln_2.bias"), m_eps);
            m = conv1d(m, u.w("mlp.c_fc.weight"), u.w("mlp.c_fc.bias"));
            m = m_act == "relu" ? at::relu(m) : m_act == "gelu" ? at::gelu(m) : geluNew(m);
            h = h + conv1d(m, u.w("mlp.c_proj.weight"), u.w("mlp.c_proj.bias"));
        }
        {
            UnitScope u(m_store, "transformer.ln_f", h);
            h = layerNorm(h, m_embd, u.w("weight"), u.w("bias"), m_eps);
        }
        UnitScope u(m_store, "lm_head", h);
        return logits(h, u.w("weight"));
    }

private:
    WeightStore& m_store;
    int64_t m_embd, m_heads, m_layers, m_vocab;
    double m_eps;
    std::string m_act;
};

} // namespace

std::unique_ptr<Runner> gpt2::makeRunner(const ModelConfig& c, WeightStore& s) { return std::make_unique<Gpt2>(c, s); }

} // namespace stowage::arch
