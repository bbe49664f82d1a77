// gpt-oss's forward pass as transformers 5.6's modeling_gpt_oss.py runs it
// (eager attention): yarn rotary embeddings (cos and sin times the
// attention factor), q/k/v/o with biases, one learned sink logit per head
// joining each softmax and dropped after it, sliding-window layers where
// layer_types says so, and an MoE block in every layer: router logits with a
// bias, top-k over the logits, softmax over the k picked, and experts whose
// fused weights are [in, out] with biases, gate and up interleaved in the
// columns, and a clamped SwiGLU ((up + 1) * gate * sigmoid(1.702 gate)).
#include "moe.h"

#include "stowage/error.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace stowage::arch {
namespace {

// GptOssExperts: alpha and limit are fixed in 5.6 (config.json's
// swiglu_limit, 7.0 in the released models, is not read).
constexpr double kAlpha = 1.702;
constexpr double kLimit = 7.0;

std::optional<double> numberIn(const nlohmann::json& j, const char* key)
{
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
}

// The rotary parameters 5.6 ends up with: rope_parameters (5.x), else a 4.x
// config's rope_scaling with its top-level rope_theta, else
// GptOssConfig.__post_init__'s yarn defaults; rope_theta defaults to
// default_theta, 150000.
struct Rope {
    at::Tensor invFreq;
    double attentionScaling = 1.0;
};

Rope readRope(const ModelConfig& c, int64_t dim)
{
    const nlohmann::json& raw = c.raw();
    nlohmann::json p = {{"rope_type", "yarn"},  {"factor", 32.0}, {"beta_fast", 32.0},
                        {"beta_slow", 1.0},     {"truncate", false}, {"original_max_position_embeddings", 4096}};
    for (const char* key : {"rope_parameters", "rope_scaling"}) {
        auto it = raw.find(key);
        if (it != raw.end() && it->is_object() && !it->empty()) {
            p = *it;
            break;
        }
    }
    const std::string type = p.value("rope_type", p.value("type", std::string("default")));
    const double base = numberIn(p, "rope_theta").value_or(numberIn(raw, "rope_theta").value_or(150000.0));
    // base ** (arange(0, dim, 2).float() / dim), float32
    const at::Tensor posFreqs = at::pow(base, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / double(dim));
    Rope r;
    if (type == "default") {
        r.invFreq = 1.0 / posFreqs;
        return r;
    }
    if (type != "yarn")
        throw InputError(c.path(), "rope type '" + type + "' cannot be run for gpt_oss (yarn and default can)");
    // modeling_rope_utils._compute_yarn_parameters
    const double originalMax = numberIn(p, "original_max_position_embeddings")
                                   .value_or(double(c.integer("max_position_embeddings", 131072)));
    const double factor =
        numberIn(p, "factor").value_or(double(c.integer("max_position_embeddings", 131072)) / originalMax);
    const auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    const auto ms = numberIn(p, "mscale"), msAll = numberIn(p, "mscale_all_dim");
    r.attentionScaling = numberIn(p, "attention_factor")
                             .value_or(ms && msAll && *ms && *msAll ? mscale(factor, *ms) / mscale(factor, *msAll)
                                                                    : mscale(factor, 1.0));
    const double betaFast = numberIn(p, "beta_fast").value_or(0) ? *numberIn(p, "beta_fast") : 32.0;
    const double betaSlow = numberIn(p, "beta_slow").value_or(0) ? *numberIn(p, "beta_slow") : 1.0;
    const auto correctionDim = [&](double rotations) {
        return (double(dim) * std::log(originalMax / (rotations * 2 * M_PI))) / (2 * std::log(base));
    };
    double low = correctionDim(betaFast), high = correctionDim(betaSlow);
    auto tr = p.find("truncate");
    if (tr == p.end() || !tr->is_boolean() || tr->get<bool>()) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high)
        high += 0.001;
    const at::Tensor ramp = at::clamp((at::arange(dim / 2, at::kFloat) - low) / (high - low), 0, 1);
    const at::Tensor extrapolation = 1 - ramp;
    r.invFreq = (1.0 / (factor * posFreqs)) * (1 - extrapolation) + (1.0 / posFreqs) * extrapolation;
    return r;
}

// GptOssRMSNorm: normalised in fp32 and multiplied by the weight there,
// then rounded (Llama's rounds first, which for fp32 is the same).
at::Tensor gptNorm(const at::Tensor& x, const at::Tensor& w, double eps)
{
    if (x.scalar_type() == at::kFloat)
        return rmsNorm(x, w, eps);
    at::Tensor f = x.to(at::kFloat);
    f = f * at::rsqrt(f.pow(2).mean(-1, true) + eps);
    return (w * f).to(x.scalar_type());
}

at::Tensor as(const at::Tensor& w, const at::Tensor& x) { return w.to(x.device(), x.scalar_type()); }

class GptOss : public Runner {
public:
    GptOss(const ModelConfig& c, WeightStore& s) : m_store(s)
    {
        m_hidden = c.positive("hidden_size", 2880);
        m_heads = c.positive("num_attention_heads", 64);
        const auto& raw = c.raw();
        auto kv = raw.find("num_key_value_heads");
        m_kvHeads = kv != raw.end() && kv->is_null() ? m_heads : c.positive("num_key_value_heads", 8);
        auto hd = raw.find("head_dim");
        m_headDim = hd != raw.end() && hd->is_null() ? m_hidden / m_heads : c.positive("head_dim", 64);
        m_layers = c.integer("num_hidden_layers", 36);
        m_vocab = c.integer("vocab_size", 201088);
        m_eps = c.number("rms_norm_eps", 1e-5);
        m_bias = c.boolOr("attention_bias", true);
        m_experts = c.has("num_local_experts") ? c.positive("num_local_experts") : c.positive("num_experts", 128);
        m_topK = c.positive("num_experts_per_tok", 4);
        if (m_topK > m_experts)
            throw InputError(c.path(), "num_experts_per_tok is larger than the number of experts");
        // layer_types, else layer 0 slides and every other one after it; sliding_window 128 unless given
        // (null: none): the registry's rows, which the KV reserve counts too
        if (auto types = raw.find("layer_types"); types != raw.end() && types->is_array() && int64_t(types->size()) != m_layers)
            throw InputError(c.path(), "'layer_types' does not list num_hidden_layers layers");
        m_windows = cacheWindows(c, m_layers);
        m_rope = readRope(c, m_headDim);
    }
    int64_t vocabSize() const override { return m_vocab; }
    int64_t layers() const override { return m_layers; }

    at::Tensor forward(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache) override
    {
        const int64_t T = ids.size(1);
        const at::ScalarType dt = m_store.computeDType();
        at::Tensor h, idsOn = ids;
        {
            UnitScope u(m_store, "model.embed_tokens", idsOn);
            h = embed(u.w("weight"), idsOn[0], dt);
        }
        // GptOssRotaryEmbedding.forward: fp32, times the attention factor,
        // then the activations' dtype; _apply_rotary_emb on the two halves
        // is rotate_half's product with the frequencies repeated.
        at::Tensor freqs = at::outer(at::arange(past, past + T, at::kFloat), m_rope.invFreq);
        at::Tensor emb = at::cat({freqs, freqs}, -1);
        const at::Tensor cos32 = (emb.cos() * m_rope.attentionScaling).to(dt),
                         sin32 = (emb.sin() * m_rope.attentionScaling).to(dt);
        for (int64_t l = 0; l < m_layers; ++l) {
            const std::string name = "model.layers." + std::to_string(l);
            UnitScope u(m_store, name, h);
            const at::Tensor cos = cos32.to(u.device()), sin = sin32.to(u.device());
            at::Tensor x = gptNorm(h, u.w("input_layernorm.weight"), m_eps);
            auto qkv = qkvProjections(u, x, m_bias);
            const auto split = [&](const at::Tensor& y, int64_t heads) {
                return y.view({1, T, heads, m_headDim}).transpose(1, 2);
            };
            at::Tensor q = rotary(split(qkv[0], m_heads), cos, sin);
            at::Tensor k = rotary(split(qkv[1], m_kvHeads), cos, sin);
            const int64_t window = m_windows[size_t(l)];
            auto [kk, vv] = appendCache(cache[size_t(l)], k, split(qkv[2], m_kvHeads), window);
            at::Tensor o = attend(q, kk, vv, u.w("self_attn.sinks"), window);
            o = o.transpose(1, 2).reshape({T, m_heads * m_headDim});
            h = addDense(h, o, u.w("self_attn.o_proj.weight"), m_bias ? u.w("self_attn.o_proj.bias") : at::Tensor());
            x = gptNorm(h, u.w("post_attention_layernorm.weight"), m_eps);
            h = h + experts(name + ".mlp.", x, u);
        }
        {
            UnitScope u(m_store, "model.norm", h);
            h = gptNorm(h, u.w("weight"), m_eps);
        }
        UnitScope u(m_store, "lm_head", h);
        return logits(h, u.w("weight"));
    }

private:
    // eager_attention_forward with s_aux: scores (+ the causal mask, and the
    // window's: key j visible from p when p - window < j <= p), the head's
    // sink as one more column, max subtracted, softmax in the scores' dtype,
    // the sink's column dropped, then the values.
    at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                      int64_t window) const
    {
        const int64_t T = q.size(2), S = k.size(2);
        at::Tensor scores = at::matmul(q, repeatKv(k, q).transpose(-1, -2)) * (1.0 / std::sqrt(double(m_headDim)));
        scores = scores.masked_fill(hiddenKeys(T, S, window, q.device()), -std::numeric_limits<float>::infinity());
        at::Tensor sink = as(sinks, scores).view({1, m_heads, 1, 1}).expand({1, m_heads, T, 1});
        at::Tensor all = at::cat({scores, sink}, -1);
        all = all - std::get<0>(all.max(-1, true));
        at::Tensor probs = at::softmax(all, -1).narrow(-1, 0, S);
        return at::matmul(probs, repeatKv(v, q));
    }

    // GptOssMLP: GptOssTopKRouter, then GptOssExperts.forward over the
    // experts picked, each read alone from the weight store.
    at::Tensor experts(const std::string& mlp, const at::Tensor& x, const UnitScope& u)
    {
        at::Tensor routerLogits = dense(x, u.w("mlp.router.weight"), u.w("mlp.router.bias")); // [T, E]
        auto [top, index] = at::topk(routerLogits, m_topK, -1);
        at::Tensor weights = at::softmax(top, 1); // in the logits' dtype
        const std::string gu = mlp + "experts.gate_up_proj", down = mlp + "experts.down_proj";
        return routedSum(x, weights, index, m_experts, [&](const at::Tensor& xe, int64_t e) {
            at::Tensor w1 = m_store.expert(gu, e).at(0), b1 = m_store.expert(gu + "_bias", e).at(0);
            at::Tensor gateUp = denseInOut(xe, w1, as(b1, xe)); // [n, 2 x inter]
            at::Tensor gate = gateUp.slice(-1, 0, gateUp.size(-1), 2).clamp_max(kLimit);
            at::Tensor up = gateUp.slice(-1, 1, gateUp.size(-1), 2).clamp(-kLimit, kLimit);
            at::Tensor glu = gate * at::sigmoid(gate * kAlpha);
            at::Tensor w2 = m_store.expert(down, e).at(0), b2 = m_store.expert(down + "_bias", e).at(0);
            return denseInOut((up + 1) * glu, w2, as(b2, xe));
        }, [&](int64_t e) { return m_store.expertDevice(gu, e); });
    }

    WeightStore& m_store;
    int64_t m_hidden, m_heads, m_kvHeads, m_headDim, m_layers, m_vocab, m_experts, m_topK;
    double m_eps;
    bool m_bias;
    std::vector<int64_t> m_windows; // positions a layer sees and keeps (0: all)
    Rope m_rope;
};

} // namespace

std::unique_ptr<Runner> gpt_oss::makeRunner(const ModelConfig& c, WeightStore& s)
{
    return std::make_unique<GptOss>(c, s);
}

} // namespace stowage::arch
