// Gemma 3's text model (gemma3_text, and the language model of gemma3's
// composite), following transformers 5.6 modeling_gemma3.py: a scaled
// embedding, Gemma's RMSNorm ((1 + weight), in fp32), q/k norms, four norms
// a layer, a gelu-tanh MLP, query_pre_attn_scalar scaling, sliding-window
// and global layers with a rotary base each, optional logit softcapping.
#include "runner.h"

#include "stowage/error.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace stowage::arch {
namespace {

// Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), all in fp32, then
// back to x's dtype (Llama's rounds before it multiplies).
at::Tensor gemmaNorm(const at::Tensor& x, const at::Tensor& w, double eps)
{
    at::Tensor f = x.to(at::kFloat);
    f = f * at::rsqrt(f.pow(2).mean(-1, true) + eps);
    f = f * (w.to(at::kFloat) + 1.0);
    return f.to(x.scalar_type());
}

// Rotary parameters of one layer type (rope_parameters[type] in 5.6).
struct Rope {
    double theta = 10000.0;
    double factor = 1.0; // "linear": inv_freq / factor
};

std::optional<double> numberOrNull(const nlohmann::json& j, const char* key)
{
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return std::nullopt;
    if (!it->is_number())
        throw std::invalid_argument(key);
    return it->get<double>();
}

// Gemma3TextConfig.convert_rope_params_to_dict: global layers take
// rope_theta (default 1e6) and rope_scaling, sliding ones
// rope_local_base_freq (default 1e4); a 5.x config.json may hold
// rope_parameters per layer type instead.
Rope ropeFor(const ModelConfig& c, const std::string& type)
{
    const bool global = type == "full_attention";
    nlohmann::json params = nlohmann::json::object();
    auto rp = c.raw().find("rope_parameters");
    if (rp != c.raw().end() && rp->is_object() && rp->contains(type) && (*rp)[type].is_object())
        params = (*rp)[type];
    else if (global && c.raw().contains("rope_scaling") && c.raw()["rope_scaling"].is_object())
        params = c.raw()["rope_scaling"];
    Rope r;
    r.theta = global ? c.number("rope_theta", 1e6) : c.number("rope_local_base_freq", 1e4);
    const std::string kind = params.value("rope_type", params.value("type", std::string("default")));
    try {
        if (auto t = numberOrNull(params, "rope_theta"))
            r.theta = *t;
        if (kind == "linear")
            r.factor = numberOrNull(params, "factor").value_or(1.0);
    } catch (const std::invalid_argument& e) {
        throw InputError(c.path(), std::string("the rope parameters' '") + e.what() + "' is not a number");
    }
    if (kind != "default" && kind != "linear")
        throw InputError(c.path(), "rope_type '" + kind + "' of the " + type +
                                       " layers cannot be run yet (default and linear can)");
    return r;
}

class Gemma3Family : public Runner {
public:
    Gemma3Family(const ModelConfig& config, WeightStore& s) : m_store(s)
    {
        const bool composite = config.modelType() == "gemma3";
        const ModelConfig c = composite ? config.sub("text_config") : config;
        m_prefix = composite ? "model.language_model." : "model.";
        m_hidden = c.positive("hidden_size", 2304);
        m_heads = c.positive("num_attention_heads", 8);
        m_kvHeads = c.positive("num_key_value_heads", 4);
        m_headDim = c.positive("head_dim", 256);
        m_layers = c.integer("num_hidden_layers", 26);
        m_vocab = c.integer("vocab_size", 262208);
        m_eps = c.number("rms_norm_eps", 1e-6);
        m_bias = c.boolOr("attention_bias", false);
        m_scale = 1.0 / std::sqrt(c.number("query_pre_attn_scalar", 256));
        if (c.has("attn_logit_softcapping"))
            m_attnCap = c.number("attn_logit_softcapping", 0);
        if (c.has("final_logit_softcapping"))
            m_finalCap = c.number("final_logit_softcapping", 0);
        if (c.boolOr("use_bidirectional_attention", false))
            throw InputError(c.path(), "use_bidirectional_attention (an encoder's mask) cannot be run yet");
        const std::string act = c.stringOr("hidden_activation", "gelu_pytorch_tanh");
        if (act != "gelu_pytorch_tanh")
            throw InputError(c.path(), "hidden_activation '" + act + "' cannot be run yet (gelu_pytorch_tanh can)");
        m_sliding = slidingLayers(c);
        m_windows = cacheWindows(config, m_layers); // sliding_window's default (4096) is the registry's
        for (const char* type : {"sliding_attention", "full_attention"}) {
            const Rope r = ropeFor(c, type);
            at::Tensor inv = 1.0 / at::pow(r.theta, at::arange(0, m_headDim, 2, at::kLong).to(at::kFloat) /
                                                        double(m_headDim));
            m_invFreq.push_back(r.factor != 1.0 ? inv / r.factor : inv);
        }
    }
    int64_t vocabSize() const override { return m_vocab; }
    int64_t layers() const override { return m_layers; }

    at::Tensor forward(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache) override
    {
        const int64_t T = ids.size(1);
        const at::ScalarType dt = m_store.computeDType();
        at::Tensor h, idsOn = ids;
        {
            UnitScope u(m_store, m_prefix + "embed_tokens", idsOn);
            // Gemma3TextScaledWordEmbedding: times sqrt(hidden) in the weights' dtype
            h = embed(u.w("weight"), idsOn[0], dt);
            h = h * at::scalar_tensor(std::sqrt(double(m_hidden)), h.options());
        }
        // cos/sin per layer type, as Gemma3RotaryEmbedding: fp32, then to the activations' dtype
        at::Tensor pos = at::arange(past, past + T, at::kFloat);
        std::vector<std::pair<at::Tensor, at::Tensor>> rope;
        for (const at::Tensor& inv : m_invFreq) {
            at::Tensor freqs = at::outer(pos, inv);
            at::Tensor emb = at::cat({freqs, freqs}, -1);
            rope.push_back({emb.cos().to(dt), emb.sin().to(dt)});
        }
        for (int64_t l = 0; l < m_layers; ++l) {
            UnitScope u(m_store, m_prefix + "layers." + std::to_string(l), h);
            const bool sliding = m_sliding[size_t(l)];
            const auto& cs = rope[sliding ? 0 : 1];
            const at::Tensor cos = cs.first.to(u.device()), sin = cs.second.to(u.device());
            at::Tensor x = gemmaNorm(h, u.w("input_layernorm.weight"), m_eps);
            auto qkv = qkvProjections(u, x, m_bias);
            const auto split = [&](const at::Tensor& y, int64_t heads) {
                return y.view({1, T, heads, m_headDim}).transpose(1, 2);
            };
            at::Tensor q = gemmaNorm(split(qkv[0], m_heads), u.w("self_attn.q_norm.weight"), m_eps);
            at::Tensor k = gemmaNorm(split(qkv[1], m_kvHeads), u.w("self_attn.k_norm.weight"), m_eps);
            at::Tensor v = split(qkv[2], m_kvHeads);
            q = rotary(q, cos, sin);
            k = rotary(k, cos, sin);
            const int64_t window = m_windows[size_t(l)];
            auto [kk, vv] = appendCache(cache[size_t(l)], k, v, window);
            at::Tensor o = attend(q, kk, vv, window);
            o = o.transpose(1, 2).reshape({T, m_heads * m_headDim});
            o = dense(o, u.w("self_attn.o_proj.weight"), m_bias ? u.w("self_attn.o_proj.bias") : at::Tensor());
            h = h + gemmaNorm(o, u.w("post_attention_layernorm.weight"), m_eps);
            x = gemmaNorm(h, u.w("pre_feedforward_layernorm.weight"), m_eps);
            auto gateUp = denseAll(x, {u.w("mlp.gate_proj.weight"), u.w("mlp.up_proj.weight")});
            at::Tensor g = dense(at::gelu(gateUp[0], "tanh") * gateUp[1], u.w("mlp.down_proj.weight"));
            h = h + gemmaNorm(g, u.w("post_feedforward_layernorm.weight"), m_eps);
        }
        {
            UnitScope u(m_store, m_prefix + "norm", h);
            h = gemmaNorm(h, u.w("weight"), m_eps);
        }
        UnitScope u(m_store, "lm_head", h);
        if (!m_finalCap)
            return logits(h, u.w("weight"));
        at::Tensor y = dense(h, u.w("weight")); // capped in the activations' dtype, as transformers does
        return (at::tanh(y / *m_finalCap) * *m_finalCap).to(at::kFloat).cpu();
    }

private:
    // Which layers slide: layer_types, else every sliding_window_pattern-th
    // (default 6) is global (Gemma3TextConfig.__post_init__).
    std::vector<bool> slidingLayers(const ModelConfig& c) const
    {
        std::vector<bool> out;
        auto it = c.raw().find("layer_types");
        if (it != c.raw().end() && it->is_array()) {
            for (const auto& t : *it)
                out.push_back(t.is_string() && t.get<std::string>() == "sliding_attention");
        } else {
            const int64_t pattern = c.positive("sliding_window_pattern", 6);
            for (int64_t i = 0; i < m_layers; ++i)
                out.push_back((i + 1) % pattern != 0);
        }
        if (int64_t(out.size()) != m_layers)
            throw InputError(c.path(), "'layer_types' does not list num_hidden_layers layers");
        return out;
    }

    // Eager attention over the cache: q [1, H, T, D], k/v [1, KV, S, D].
    // Position p sees keys j <= p with j > p - window (window 0: all of them),
    // as masking_utils' sliding_window_overlay; softcapping tanh-bounds the
    // scaled scores before the mask.
    at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window) const
    {
        const int64_t T = q.size(2), S = k.size(2);
        if (T == 1 && !m_attnCap) // decoding: the shared kernel over the window's keys
            return attention(q, k, v, m_scale, window);
        at::Tensor scores = at::matmul(q, repeatKv(k, q).transpose(-1, -2)) * m_scale;
        if (m_attnCap)
            scores = at::tanh(scores / *m_attnCap) * *m_attnCap;
        scores = scores.masked_fill(hiddenKeys(T, S, window, q.device()), -std::numeric_limits<float>::infinity());
        at::Tensor probs = at::softmax(scores.to(at::kFloat), -1).to(q.scalar_type());
        return at::matmul(probs, repeatKv(v, q));
    }

    WeightStore& m_store;
    std::string m_prefix;
    int64_t m_hidden, m_heads, m_kvHeads, m_headDim, m_layers, m_vocab;
    double m_eps, m_scale;
    bool m_bias;
    std::optional<double> m_attnCap, m_finalCap;
    std::vector<bool> m_sliding;     // which rotary a layer uses
    std::vector<int64_t> m_windows; // positions a layer sees and keeps (0: all)
    std::vector<at::Tensor> m_invFreq; // sliding, global
};

} // namespace

std::unique_ptr<Runner> gemma3::makeRunner(const ModelConfig& c, WeightStore& s)
{
    return std::make_unique<Gemma3Family>(c, s);
}

} // namespace stowage::arch
