// Phi-3 and Phi-4-mini, following transformers 5.6's modeling_phi3.py: a
// Llama whose q/k/v and gate/up projections are each one Linear (split after
// the product, as Phi3Attention and Phi3MLP slice theirs), with partial
// rotary (the first int(head_dim * partial_rotary_factor) dims of each head),
// the `default` or `longrope` rope (modeling_rope_utils.py) and a sliding window.
#include "runner.h"

#include "stowage/error.h"

#include <cmath>
#include <optional>
#include <vector>

namespace stowage::arch {
namespace {

class Phi3Family : public Runner {
public:
    Phi3Family(const ModelConfig& c, WeightStore& s) : m_store(s)
    {
        m_hidden = c.positive("hidden_size", 3072);
        m_heads = c.positive("num_attention_heads", 32);
        m_kvHeads = c.positive("num_key_value_heads", m_heads);
        m_headDim = c.has("head_dim") ? c.positive("head_dim") : m_hidden / m_heads;
        m_inter = c.positive("intermediate_size", 8192);
        m_layers = c.integer("num_hidden_layers", 32);
        m_vocab = c.integer("vocab_size", 32064);
        m_eps = c.number("rms_norm_eps", 1e-5);
        if (c.stringOr("hidden_act", "silu") != "silu")
            throw InputError(c.path(), "hidden_act \"" + c.stringOr("hidden_act", "") + "\": only silu is run for phi3");
        readRope(c);
        if (auto it = c.raw().find("sliding_window"); it != c.raw().end() && !it->is_null() &&
                                                        (!it->is_number_integer() || it->get<int64_t>() < 1))
            throw InputError(c.path(), "sliding_window must be a positive integer or null");
        m_windows = cacheWindows(c, m_layers); // the registry's, which the KV reserve counts
    }
    int64_t vocabSize() const override { return m_vocab; }
    int64_t layers() const override { return m_layers; }

    at::Tensor forward(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache) override
    {
        // The ids seen so far, to recompute the cache with (below).
        const int64_t T = ids.size(1);
        const bool known = int64_t(m_ids.size()) >= past;
        if (known)
            m_ids.resize(size_t(past));
        const int64_t* p = ids.data_ptr<int64_t>();
        if (known)
            m_ids.insert(m_ids.end(), p, p + T);
        // Phi3ForCausalLM.prepare_inputs_for_generation drops the cache the
        // first time the sequence passes original_max_position_embeddings
        // (input length >= original + 1 with at most `original` cached), so
        // that every cached key is rotated with long_factor from then on:
        // here the whole sequence is run again and its last T rows returned.
        if (m_longrope && known && past > 0 && past <= m_originalMax && past + T > m_originalMax) {
            for (LayerCache& c : cache)
                c.clear();
            at::Tensor all = at::tensor(m_ids, at::kLong).view({1, int64_t(m_ids.size())});
            return run(all, 0, cache).narrow(0, past, T);
        }
        return run(ids, past, cache);
    }

private:
    at::Tensor run(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache)
    {
        const int64_t T = ids.size(1);
        const int64_t qRows = m_heads * m_headDim, kvRows = m_kvHeads * m_headDim;
        at::Tensor h, idsOn = ids;
        {
            UnitScope u(m_store, "model.embed_tokens", idsOn);
            h = embed(u.w("weight"), idsOn[0], m_store.computeDType());
        }
        Rope rope = table(past, T);
        for (int64_t l = 0; l < m_layers; ++l) {
            UnitScope u(m_store, "model.layers." + std::to_string(l), h);
            const auto [cos, sin] = rope.on(u.device(), h.scalar_type());
            at::Tensor x = rmsNorm(h, u.w("input_layernorm.weight"), m_eps);
            // qkv_proj's rows: the query heads, then the key heads, then the value heads.
            at::Tensor qkv = dense(x, u.w("self_attn.qkv_proj.weight"));
            const auto heads = [&](int64_t from, int64_t rows, int64_t n) {
                at::Tensor y = qkv.narrow(1, from, rows);
                return T == 1 ? y.view({1, n, 1, m_headDim}) : y.reshape({1, T, n, m_headDim}).transpose(1, 2);
            };
            at::Tensor q = heads(0, qRows, m_heads), k = heads(qRows, kvRows, m_kvHeads),
                       v = heads(qRows + kvRows, kvRows, m_kvHeads);
            q = rotatePart(q, cos, sin);
            k = rotatePart(k, cos, sin);
            auto [kk, vv] = appendCache(cache[size_t(l)], k, v, m_windows[size_t(l)]);
            // Phi3Model masks with create_sliding_window_causal_mask when config.sliding_window is
            // set (Phi-3-mini-4k: 2047): query i sees keys j with i - window < j <= i.
            at::Tensor o = attention(q, kk, vv, std::pow(double(m_headDim), -0.5), m_windows[size_t(l)]);
            o = T == 1 && o.is_contiguous() ? o.view({1, qRows}) : o.transpose(1, 2).reshape({T, qRows});
            h = addDense(h, o, u.w("self_attn.o_proj.weight"));
            x = rmsNorm(h, u.w("post_attention_layernorm.weight"), m_eps);
            // gate_up_proj(x).chunk(2): the gate first, then up; up * silu(gate).
            at::Tensor gu = dense(x, u.w("mlp.gate_up_proj.weight"));
            at::Tensor g = siluMul(gu.narrow(1, 0, m_inter), gu.narrow(1, m_inter, m_inter));
            h = addDense(h, g, u.w("mlp.down_proj.weight"));
        }
        {
            UnitScope u(m_store, "model.norm", h);
            h = rmsNorm(h, u.w("weight"), m_eps);
        }
        UnitScope u(m_store, "lm_head", h);
        return logits(h, u.w("weight"));
    }

    // apply_rotary_pos_emb: rotary over the first m_rotary dims of each head,
    // the rest passed through.
    at::Tensor rotatePart(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const
    {
        if (m_rotary == m_headDim)
            return rotary(x, cos, sin);
        if (m_rotary == 0)
            return x;
        return at::cat({rotary(x.narrow(3, 0, m_rotary), cos, sin), x.narrow(3, m_rotary, m_headDim - m_rotary)}, 3);
    }

    // cos/sin of positions [past, past + T) as Phi3RotaryEmbedding computes
    // them: float32, times attention_scaling, then in the activations' dtype,
    // one copy per device and dtype the layers ask for.
    struct Rope {
        at::Tensor cos, sin; // float32 on the CPU
        struct Copy {
            at::Device device;
            at::ScalarType type;
            at::Tensor cos, sin;
        };
        std::vector<Copy> copies;
        std::pair<at::Tensor, at::Tensor> on(at::Device device, at::ScalarType type)
        {
            for (const Copy& c : copies)
                if (c.device == device && c.type == type)
                    return {c.cos, c.sin};
            copies.push_back({device, type, cos.to(device, type), sin.to(device, type)});
            return {copies.back().cos, copies.back().sin};
        }
    };

    Rope table(int64_t past, int64_t T) const
    {
        // dynamic_rope_update (longrope): long_factor once the sequence,
        // max(position_ids) + 1, passes original_max_position_embeddings.
        const at::Tensor& inv = m_longrope && past + T > m_originalMax ? m_invLong : m_invShort;
        at::Tensor pos = at::arange(past, past + T, at::kFloat);
        at::Tensor freqs = at::outer(pos, inv);
        at::Tensor emb = at::cat({freqs, freqs}, -1);
        return {emb.cos() * m_attentionScaling, emb.sin() * m_attentionScaling, {}};
    }

    // Phi3Config and modeling_rope_utils: `rope_scaling or rope_parameters`
    // from config.json; rope_theta from that dict, else top-level, else 1e4;
    // types default and longrope (su and yarn renamed to longrope); for
    // longrope, original_max_position_embeddings is Phi3Config's own field
    // (default 4096), which standardize_rope_params puts over the dict's.
    void readRope(const ModelConfig& c)
    {
        const nlohmann::json& raw = c.raw();
        nlohmann::json rope = nlohmann::json::object();
        for (const char* key : {"rope_scaling", "rope_parameters"}) {
            auto it = raw.find(key);
            if (it != raw.end() && it->is_object() && !it->empty()) {
                rope = *it;
                break;
            }
        }
        std::string type = "default";
        if (rope.contains("rope_type") && rope["rope_type"].is_string())
            type = rope["rope_type"].get<std::string>();
        else if (rope.contains("type") && rope["type"].is_string())
            type = rope["type"].get<std::string>();
        if (type == "su" || type == "yarn")
            type = "longrope";
        if (type != "default" && type != "longrope")
            throw InputError(c.path(), "rope type \"" + type + "\": Phi3Config allows only default and longrope");
        m_longrope = type == "longrope";
        const auto num = [](const nlohmann::json& j, const char* key) -> std::optional<double> {
            auto it = j.find(key);
            return it != j.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
        };
        const double theta = num(rope, "rope_theta").value_or(num(raw, "rope_theta").value_or(10000.0));
        // partial_rotary_factor: see rotaryDim() in engine/model/families/phi3.cpp.
        const std::optional<double> top = num(raw, "partial_rotary_factor"), inDict = num(rope, "partial_rotary_factor");
        const double partial = m_longrope ? top.value_or(inDict.value_or(1.0)) : inDict.value_or(top.value_or(1.0));
        if (!(partial > 0.0 && partial <= 1.0))
            throw InputError(c.path(), "partial_rotary_factor must lie in (0, 1]");
        m_rotary = int64_t(double(m_headDim) * partial);
        // arange(0, dim, 2, int64).float() / dim
        at::Tensor shape = at::arange(0, m_rotary, 2, at::kLong).to(at::kFloat) / double(m_rotary);
        if (!m_longrope) {
            m_invShort = 1.0 / at::pow(theta, shape);
            return;
        }
        m_originalMax = c.integer("original_max_position_embeddings", 4096);
        const double maxPositions = double(c.integer("max_position_embeddings", 4096));
        const double factor = num(rope, "factor").value_or(maxPositions / double(m_originalMax));
        m_attentionScaling = num(rope, "attention_factor")
                                 .value_or(factor <= 1.0 ? 1.0
                                                         : std::sqrt(1.0 + std::log(factor) /
                                                                               std::log(double(m_originalMax))));
        const auto factors = [&](const char* key) {
            auto it = rope.find(key);
            if (it == rope.end() || !it->is_array() || int64_t(it->size()) != shape.size(0))
                throw InputError(c.path(), std::string("rope_scaling.") + key + " must hold " +
                                               std::to_string(shape.size(0)) + " numbers (rotary dims / 2)");
            std::vector<float> f;
            for (const auto& x : *it) {
                if (!x.is_number())
                    throw InputError(c.path(), std::string("rope_scaling.") + key + " must hold numbers");
                f.push_back(x.get<float>());
            }
            return at::tensor(f, at::kFloat);
        };
        // 1 / (ext_factors * base ** shape), ext_factors in float32
        m_invShort = 1.0 / (factors("short_factor") * at::pow(theta, shape));
        m_invLong = 1.0 / (factors("long_factor") * at::pow(theta, shape));
    }

    WeightStore& m_store;
    int64_t m_hidden, m_heads, m_kvHeads, m_headDim, m_inter, m_layers, m_vocab;
    int64_t m_rotary = 0;
    double m_eps;
    bool m_longrope = false;
    int64_t m_originalMax = 0;
    double m_attentionScaling = 1.0;
    at::Tensor m_invShort, m_invLong;
    std::vector<int64_t> m_windows; // positions a layer sees and keeps (0: all)
    std::vector<int64_t> m_ids;
};

} // namespace

std::unique_ptr<Runner> phi3::makeRunner(const ModelConfig& c, WeightStore& s)
{
    return std::make_unique<Phi3Family>(c, s);
}

} // namespace stowage::arch
