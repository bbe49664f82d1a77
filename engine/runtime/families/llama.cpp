// Llama 2/3 (with llama3 rope scaling), Mistral, Qwen2 (q/k/v bias) and Qwen3
// (per-head q/k RMSNorm before rotary), following transformers' modeling files.
#include "runner.h"

#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

namespace stowage::arch {
namespace {

// h + the projection `name` of x.
at::Tensor addLinear(const at::Tensor& h, const at::Tensor& x, const UnitScope& u, const std::string& name, bool bias)
{
    return addDense(h, x, u.w(name + ".weight"), bias ? u.w(name + ".bias") : at::Tensor());
}

// The projections `names` of x (their biases where `bias`), as one job.
std::vector<at::Tensor> linears(const at::Tensor& x, const UnitScope& u, std::initializer_list<const char*> names,
                                bool bias)
{
    std::vector<at::Tensor> ws, bs;
    for (const char* name : names) {
        ws.push_back(u.w(std::string(name) + ".weight"));
        if (bias)
            bs.push_back(u.w(std::string(name) + ".bias"));
    }
    return denseAll(x, ws, bs);
}

class LlamaFamily : public Runner {
public:
    LlamaFamily(const ModelConfig& c, WeightStore& s) : m_store(s)
    {
        m_type = c.modelType();
        m_hidden = c.positive("hidden_size");
        m_heads = c.positive("num_attention_heads");
        m_kvHeads = c.positive("num_key_value_heads", m_heads);
        m_headDim = c.has("head_dim") ? c.positive("head_dim") : m_hidden / m_heads;
        m_layers = c.integer("num_hidden_layers");
        m_vocab = c.integer("vocab_size");
        m_eps = c.number("rms_norm_eps", 1e-6);
        m_qkvBias = m_type == "qwen2" || c.boolOr("attention_bias", false);
        m_oBias = m_type != "qwen2" && c.boolOr("attention_bias", false);
        m_mlpBias = c.boolOr("mlp_bias", false);
        m_invFreq = inverseFrequencies(c);
        m_windows = cacheWindows(c, m_layers); // sliding layers (Mistral, Qwen2/3 with use_sliding_window)
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
        RopeTable prefill;
        RopeTable& positions = T == 1 ? decodeTable(past) : (prefill = table(past, T));
        RopeRows rope{positions, past - positions.from, T, {}};
        for (int64_t l = 0; l < m_layers; ++l) {
            UnitScope u(m_store, "model.layers." + std::to_string(l), h);
            const auto [cos, sin] = rope.on(u.device(), h.scalar_type());
            at::Tensor x = rmsNorm(h, u.w("input_layernorm.weight"), m_eps);
            auto qkv = linears(x, u, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, m_qkvBias);
            // [T, heads * dim] as [1, heads, T, dim]. One position is that
            // already in memory: one view, where the transpose after it is
            // an operation too (views cost 1-2 us each in decode).
            const auto split = [&](const at::Tensor& y, int64_t heads) {
                return T == 1 ? y.view({1, heads, 1, m_headDim}) : y.view({1, T, heads, m_headDim});
            };
            at::Tensor q = split(qkv[0], m_heads), k = split(qkv[1], m_kvHeads), v = split(qkv[2], m_kvHeads);
            if (m_type == "qwen3") { // over each head's dim, whichever the layout
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
            h = addLinear(h, o, u, "self_attn.o_proj", m_oBias);
            x = rmsNorm(h, u.w("post_attention_layernorm.weight"), m_eps);
            auto gateUp = linears(x, u, {"mlp.gate_proj", "mlp.up_proj"}, m_mlpBias);
            at::Tensor g = siluMul(gateUp[0], gateUp[1]);
            h = addLinear(h, g, u, "mlp.down_proj", m_mlpBias);
        }
        {
            UnitScope u(m_store, "model.norm", h);
            h = rmsNorm(h, u.w("weight"), m_eps);
        }
        UnitScope u(m_store, "lm_head", h);
        return logits(h, u.w("weight"));
    }

private:
    // cos/sin of rotary in float32, as LlamaRotaryEmbedding computes them.
    // Decoding takes one position at a time from a table of kRopeBlock
    // positions made at once (the same elementwise operations, so the same
    // values), converted once to each layer device and dtype: a step's five
    // LibTorch operations and a conversion a layer cost 120 us of the small
    // bf16 model's 7.7 ms token, caches cold from the weights' stream.
    struct RopeCopy {
        at::Device device;
        at::ScalarType type;
        at::Tensor cos, sin;
    };
    static RopeCopy* find(std::vector<RopeCopy>& copies, at::Device device, at::ScalarType type)
    {
        for (RopeCopy& c : copies)
            if (c.device == device && c.type == type)
                return &c;
        return nullptr;
    }
    // Positions [from, from + count): [0] float32 on the CPU, then the copies
    // the layers asked for.
    struct RopeTable {
        int64_t from = 0, count = 0;
        std::vector<RopeCopy> copies;
        const RopeCopy& on(at::Device device, at::ScalarType type)
        {
            if (const RopeCopy* c = find(copies, device, type))
                return *c;
            const RopeCopy& f = copies.front();
            copies.push_back({device, type, f.cos.to(device, type), f.sin.to(device, type)});
            return copies.back();
        }
    };
    // The rows [first, first + length) of a table one forward uses, narrowed
    // once a device and dtype (two operations a layer otherwise).
    struct RopeRows {
        RopeTable& table;
        int64_t first, length;
        std::vector<RopeCopy> rows;
        std::pair<at::Tensor, at::Tensor> on(at::Device device, at::ScalarType type)
        {
            const RopeCopy* r = find(rows, device, type);
            if (!r) {
                const RopeCopy& c = table.on(device, type);
                rows.push_back({device, type, c.cos.narrow(0, first, length), c.sin.narrow(0, first, length)});
                r = &rows.back();
            }
            return {r->cos, r->sin};
        }
    };
    static constexpr int64_t kRopeBlock = 64;

    RopeTable table(int64_t from, int64_t count) const
    {
        at::Tensor pos = at::arange(from, from + count, at::kFloat);
        at::Tensor freqs = at::outer(pos, m_invFreq);
        at::Tensor emb = at::cat({freqs, freqs}, -1);
        return {from, count, {{at::Device(at::kCPU), at::kFloat, emb.cos(), emb.sin()}}};
    }

    // Decoding's table, made anew when `past` runs past it.
    RopeTable& decodeTable(int64_t past)
    {
        if (m_rope.count == 0 || past < m_rope.from || past >= m_rope.from + m_rope.count)
            m_rope = table(past, kRopeBlock);
        return m_rope;
    }

    at::Tensor inverseFrequencies(const ModelConfig& c) const
    {
        const double theta = c.number("rope_theta", 10000.0);
        at::Tensor inv = 1.0 / at::pow(theta, at::arange(0, m_headDim, 2, at::kLong).to(at::kFloat) / double(m_headDim));
        auto rs = c.raw().find("rope_scaling");
        if (rs == c.raw().end() || !rs->is_object())
            return inv;
        std::string type = rs->value("rope_type", rs->value("type", std::string("default")));
        if (type != "llama3")
            return inv; // "default"; other types are not used by the families run here
        const double factor = rs->value("factor", 8.0), low = rs->value("low_freq_factor", 1.0),
                     high = rs->value("high_freq_factor", 4.0),
                     oldLen = rs->value("original_max_position_embeddings", 8192.0);
        const double lowWave = oldLen / low, highWave = oldLen / high;
        at::Tensor wavelen = 2 * M_PI / inv;
        at::Tensor scaled = at::where(wavelen > lowWave, inv / factor, inv);
        at::Tensor smooth = (oldLen / wavelen - low) / (high - low);
        at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
        at::Tensor medium = (wavelen >= highWave).logical_and(wavelen <= lowWave);
        return at::where(medium, smoothed, scaled);
    }

    WeightStore& m_store;
    std::string m_type;
    int64_t m_hidden, m_heads, m_kvHeads, m_headDim, m_layers, m_vocab;
    double m_eps;
    bool m_qkvBias, m_oBias, m_mlpBias;
    at::Tensor m_invFreq;
    std::vector<int64_t> m_windows; // positions a layer sees and keeps (0: all)
    RopeTable m_rope; // decoding's
};

} // namespace

std::unique_ptr<Runner> llama::makeRunner(const ModelConfig& c, WeightStore& s)
{
    return std::make_unique<LlamaFamily>(c, s);
}

} // namespace stowage::arch
