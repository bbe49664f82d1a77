// The mixture-of-experts pieces (moe.h), following transformers 5.6's
// modeling_mixtral.py and modeling_qwen3_moe.py.
#include "moe.h"

#include "stowage/error.h"

#include <cmath>
#include <functional>
#include <stdexcept>

namespace stowage::arch {

at::Tensor routedSum(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& index, int64_t experts,
                     const std::function<at::Tensor(const at::Tensor&, int64_t)>& expert,
                     const std::function<at::Device(int64_t)>& where)
{
    const int64_t T = x.size(0), topK = index.size(1);
    // The routing is tiny ([T, k]): read on the CPU, it says which experts
    // to fetch before any expert weight moves.
    const at::Tensor idx = index.to(at::kCPU).contiguous();
    const int64_t* id = idx.data_ptr<int64_t>();
    std::vector<std::vector<std::pair<int64_t, int64_t>>> picked(static_cast<size_t>(experts)); // expert -> (token, slot)
    for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < topK; ++k) {
            const int64_t e = id[t * topK + k];
            if (e < 0 || e >= experts)
                throw std::runtime_error("router picked expert " + std::to_string(e) + " of " + std::to_string(experts));
            picked[size_t(e)].push_back({t, k});
        }
    at::Tensor out = at::zeros_like(x);
    for (int64_t e = 0; e < experts; ++e) {
        const auto& rows = picked[size_t(e)];
        if (rows.empty())
            continue; // never fetched
        std::vector<int64_t> tok, slot;
        for (const auto& [t, k] : rows) {
            tok.push_back(t);
            slot.push_back(k);
        }
        at::Tensor xe, we;
        at::Tensor ti = at::tensor(tok, at::kLong).to(x.device());
        if (T == 1) {
            xe = x;
            we = weights.narrow(1, slot[0], 1); // [1, 1]
        } else {
            xe = x.index_select(0, ti);
            we = weights.index({ti, at::tensor(slot, at::kLong).to(x.device())}).unsqueeze(1);
        }
        if (where)
            if (const at::Device d = where(e); d != x.device())
                xe = xe.to(d);
        at::Tensor y = (expert(xe, e).to(x.device()) * we).to(out.scalar_type());
        out.index_add_(0, ti, y);
    }
    return out;
}

at::Tensor routedExperts(WeightStore& store, const std::string& experts, const at::Tensor& x, const at::Tensor& index,
                         const at::Tensor& weights, int64_t count)
{
    const std::string gateUp = experts + ".gate_up_proj", down = experts + ".down_proj";
    return routedSum(x, weights, index, count, [&](const at::Tensor& xe, int64_t e) {
        std::vector<at::Tensor> gu = store.expert(gateUp, e);
        std::vector<at::Tensor> g2; // gate, up
        if (gu.size() == 2)
            g2 = denseAll(xe, gu);
        else // stored fused [2 x inter, hidden]: gate rows first, then up
            g2 = dense(xe, gu.at(0)).chunk(2, -1);
        return dense(siluMul(g2[0], g2[1]), store.expert(down, e).at(0));
    }, [&](int64_t e) { return store.expertDevice(gateUp, e); });
}

at::Tensor sparseMoe(WeightStore& store, const std::string& experts, const at::Tensor& x, const at::Tensor& router,
                     const Routing& r)
{
    at::Tensor logitsR = dense(x, router);                      // [T, E] in x's dtype
    at::Tensor probs = at::softmax(logitsR.to(at::kFloat), -1); // float32, as both routers
    auto [top, index] = at::topk(probs, r.topK, -1);
    if (r.renormalise)
        top = top / top.sum(-1, true);
    if (r.weightsInActivationDType)
        top = top.to(x.scalar_type());
    return routedExperts(store, experts, x, index, top, r.experts);
}

namespace {

class MoeDecoder : public Runner {
public:
    MoeDecoder(const ModelConfig& c, WeightStore& s, const MoeDecoderSpec& spec) : m_store(s), m_spec(spec)
    {
        m_hidden = c.positive("hidden_size");
        m_heads = c.positive("num_attention_heads");
        m_kvHeads = c.positive("num_key_value_heads", m_heads);
        m_headDim = c.has("head_dim") && c.raw()["head_dim"].is_number() ? c.positive("head_dim") : m_hidden / m_heads;
        m_layers = c.integer("num_hidden_layers");
        m_vocab = c.integer("vocab_size");
        m_eps = c.number("rms_norm_eps", 1e-6);
        m_bias = c.boolOr("attention_bias", false);
        m_spec.routing.experts = c.has(spec.expertsKey) ? c.integer(spec.expertsKey)
                                                        : c.integer("num_local_experts", spec.defaultExperts);
        m_spec.routing.topK = c.positive("num_experts_per_tok");
        if (m_spec.routing.topK > m_spec.routing.experts)
            throw InputError(c.path(), "num_experts_per_tok is larger than the number of experts");
        // rope_theta (4.x configs) or rope_parameters.rope_theta (5.x).
        double theta = spec.defaultTheta;
        std::string ropeType = "default";
        const auto& raw = c.raw();
        if (auto rp = raw.find("rope_parameters"); rp != raw.end() && rp->is_object()) {
            theta = rp->value("rope_theta", theta);
            ropeType = rp->value("rope_type", ropeType);
        }
        theta = c.number("rope_theta", theta);
        if (auto rs = raw.find("rope_scaling"); rs != raw.end() && rs->is_object())
            ropeType = rs->value("rope_type", rs->value("type", ropeType));
        if (ropeType != "default")
            throw InputError(c.path(), "rope type '" + ropeType + "' is not run for " + c.modelType());
        m_invFreq =
            1.0 / at::pow(theta, at::arange(0, m_headDim, 2, at::kLong).to(at::kFloat) / double(m_headDim));
        m_windows = cacheWindows(c, m_layers); // sliding_window (Mixtral), use_sliding_window (Qwen3-MoE)
    }
    int64_t vocabSize() const override { return m_vocab; }
    int64_t layers() const override { return m_layers; }

    at::Tensor forward(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache) override
    {
        const int64_t T = ids.size(1);
        at::Tensor h, idsOn = ids;
        {
            UnitScope u(m_store, "model.embed_tokens", idsOn);
            h = embed(u.w("weight"), idsOn[0], m_store.computeDType());
        }
        // cos/sin for these positions in float32 (the rotary module's forward).
        at::Tensor freqs = at::outer(at::arange(past, past + T, at::kFloat), m_invFreq);
        at::Tensor emb = at::cat({freqs, freqs}, -1);
        const at::Tensor cos32 = emb.cos(), sin32 = emb.sin();
        for (int64_t l = 0; l < m_layers; ++l) {
            const std::string name = "model.layers." + std::to_string(l);
            UnitScope u(m_store, name, h);
            const at::Tensor cos = cos32.to(u.device(), h.scalar_type()), sin = sin32.to(u.device(), h.scalar_type());
            at::Tensor x = rmsNorm(h, u.w("input_layernorm.weight"), m_eps);
            auto qkv = qkvProjections(u, x, m_bias);
            const auto split = [&](const at::Tensor& y, int64_t heads) {
                return T == 1 ? y.view({1, heads, 1, m_headDim}) : y.view({1, T, heads, m_headDim});
            };
            at::Tensor q = split(qkv[0], m_heads), k = split(qkv[1], m_kvHeads), v = split(qkv[2], m_kvHeads);
            if (m_spec.qkNorm) {
                q = rmsNorm(q, u.w("self_attn.q_norm.weight"), m_eps);
                k = rmsNorm(k, u.w("self_attn.k_norm.weight"), m_eps);
            }
            if (T > 1) {
                q = q.transpose(1, 2);
                k = k.transpose(1, 2);
                v = v.transpose(1, 2);
            }
            q = rotary(q, cos, sin);
            k = rotary(k, cos, sin);
            auto [kk, vv] = appendCache(cache[size_t(l)], k, v, m_windows[size_t(l)]);
            at::Tensor o = attention(q, kk, vv, 1.0 / std::sqrt(double(m_headDim)), m_windows[size_t(l)]);
            o = T == 1 && o.is_contiguous() ? o.view({1, m_heads * m_headDim})
                                            : o.transpose(1, 2).reshape({T, m_heads * m_headDim});
            h = addDense(h, o, u.w("self_attn.o_proj.weight"), m_bias ? u.w("self_attn.o_proj.bias") : at::Tensor());
            x = rmsNorm(h, u.w("post_attention_layernorm.weight"), m_eps);
            if (m_store.has(name + ".mlp.gate.weight")) {
                h = h + sparseMoe(m_store, name + ".mlp.experts", x, u.w("mlp.gate.weight"), m_spec.routing);
            } else { // a dense layer (Qwen3-MoE's mlp_only_layers)
                auto gateUp = denseAll(x, {u.w("mlp.gate_proj.weight"), u.w("mlp.up_proj.weight")});
                h = addDense(h, siluMul(gateUp[0], gateUp[1]), u.w("mlp.down_proj.weight"));
            }
        }
        {
            UnitScope u(m_store, "model.norm", h);
            h = rmsNorm(h, u.w("weight"), m_eps);
        }
        UnitScope u(m_store, "lm_head", h);
        return logits(h, u.w("weight"));
    }

private:
    WeightStore& m_store;
    MoeDecoderSpec m_spec;
    int64_t m_hidden, m_heads, m_kvHeads, m_headDim, m_layers, m_vocab;
    double m_eps;
    bool m_bias;
    at::Tensor m_invFreq;
    std::vector<int64_t> m_windows; // positions a layer sees and keeps (0: all)
};

} // namespace

std::unique_ptr<Runner> makeMoeDecoder(const ModelConfig& c, WeightStore& s, const MoeDecoderSpec& spec)
{
    return std::make_unique<MoeDecoder>(c, s, spec);
}

} // namespace stowage::arch
