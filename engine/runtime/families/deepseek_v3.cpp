// DeepSeek-V3's forward pass as transformers 5.6's modeling_deepseek_v3.py
// runs it (eager): multi-head latent attention with the default or yarn rope
// (interleaved rope dims by default), dense MLPs in the first
// first_k_dense_replace layers, then MoE blocks with a grouped sigmoid
// router, routed experts read one by one (moe.h) and shared experts.
//
// The cache is MLA's compressed one, not transformers': per position the
// kv_a_layernorm output (kv_lora_rank values) in LayerCache::k and the
// rotated shared key part (qk_rope_head_dim) in LayerCache::v, one copy for
// all heads (576 values a position for DeepSeek-V3, where transformers'
// DynamicCache keeps 128 heads x (192 + 128) = 40,960). Each forward
// decompresses the cached latents through kv_b_proj into every head's keys
// and values, then attends as transformers does. The absorbed form (kv_b_proj's
// key half folded into the queries and its value half applied after the
// softmax) reads far less per step at long contexts, but multiplies in
// another order than transformers, so its logits would drift from the
// reference's; decompressing gives transformers' numbers with the small cache.
// The planner's KV reserve counts this cache (AttentionShape::cache in the
// skeleton, engine/model/families/deepseek_v3.cpp).
#include "moe.h"

#include "stowage/error.h"

#include <cmath>

namespace stowage::arch {
namespace {

// yarn_get_mscale of modeling_deepseek_v3.py / modeling_rope_utils.py.
double yarnMscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

class DeepseekV3 : public Runner {
public:
    DeepseekV3(const ModelConfig& c, WeightStore& s) : m_store(s)
    {
        m_hidden = c.positive("hidden_size");
        m_heads = c.positive("num_attention_heads");
        m_layers = c.integer("num_hidden_layers");
        m_vocab = c.integer("vocab_size");
        m_eps = c.number("rms_norm_eps", 1e-6);
        m_bias = c.boolOr("attention_bias", false);
        const auto& raw = c.raw();
        auto ql = raw.find("q_lora_rank");
        m_qLora = !(ql != raw.end() && ql->is_null());
        m_kvLora = c.positive("kv_lora_rank", 512);
        m_rope = c.positive("qk_rope_head_dim", 64);
        m_nope = c.integer("qk_nope_head_dim", 128);
        m_vDim = c.positive("v_head_dim", 128);
        m_interleave = c.boolOr("rope_interleave", true);
        m_dense = c.integer("first_k_dense_replace", 3);
        m_experts = c.has("n_routed_experts") ? c.integer("n_routed_experts") : c.integer("num_local_experts", 256);
        m_topK = c.positive("num_experts_per_tok", 8);
        m_groups = c.positive("n_group", 8);
        m_topGroups = c.positive("topk_group", 4);
        m_normTopK = c.boolOr("norm_topk_prob", true);
        m_routedScale = c.number("routed_scaling_factor", 2.5);
        if (m_layers > m_dense) {
            c.requireDivisible("n_routed_experts", m_experts, "n_group", m_groups);
            if (m_topGroups > m_groups || m_topK > m_topGroups * (m_experts / m_groups) || m_experts / m_groups < 2)
                throw InputError(c.path(), "num_experts_per_tok, topk_group and n_group do not fit n_routed_experts "
                                           "(the router takes the top 2 of each group, top-k of the kept groups)");
        }
        rope(c);
        for (int64_t l = m_dense; l < m_layers; ++l) {
            const std::string name = "model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias";
            at::Tensor b = m_store.storedBuffer(name); // 5.6 zero-initialises one the file lacks
            m_correction.push_back(b.defined() ? b.reshape({m_experts}) : at::zeros({m_experts}, at::kFloat));
        }
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
        // DeepseekV3RotaryEmbedding.forward: float32, times attention_scaling.
        const at::Tensor freqs = at::outer(at::arange(past, past + T, at::kFloat), m_invFreq);
        const at::Tensor emb = at::cat({freqs, freqs}, -1);
        const at::Tensor cos32 = emb.cos() * m_attnFactor, sin32 = emb.sin() * m_attnFactor;
        for (int64_t l = 0; l < m_layers; ++l) {
            const std::string name = "model.layers." + std::to_string(l);
            UnitScope u(m_store, name, h);
            const at::Tensor cos = cos32.to(u.device(), h.scalar_type()), sin = sin32.to(u.device(), h.scalar_type());
            h = h + attend(u, rmsNorm(h, u.w("input_layernorm.weight"), m_eps), cos, sin, cache[size_t(l)]);
            const at::Tensor x = rmsNorm(h, u.w("post_attention_layernorm.weight"), m_eps);
            if (l < m_dense)
                h = h + mlp(u, "mlp.", x);
            else // DeepseekV3MoE: routed experts plus shared experts, then the residual
                h = h + (moe(u, name, x, m_correction[size_t(l - m_dense)]) + mlp(u, "mlp.shared_experts.", x));
        }
        {
            UnitScope u(m_store, "model.norm", h);
            h = rmsNorm(h, u.w("weight"), m_eps);
        }
        UnitScope u(m_store, "lm_head", h);
        return logits(h, u.w("weight"));
    }

private:
    at::Tensor bias(const UnitScope& u, const std::string& name) const
    {
        return m_bias ? u.w(name + ".bias") : at::Tensor();
    }

    // apply_rotary_pos_emb(_interleave) on x [1, heads, T, rope]: the
    // interleaved form first gathers the even dims, then the odd ones.
    at::Tensor rotate(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin) const
    {
        if (m_interleave) {
            const auto sz = x.sizes().vec();
            x = x.reshape({sz[0], sz[1], sz[2], m_rope / 2, 2}).transpose(4, 3).reshape(sz);
        }
        return rotary(x.contiguous(), cos, sin);
    }

    // DeepseekV3Attention on x [T, hidden]; returns o_proj's output [T, hidden].
    at::Tensor attend(const UnitScope& u, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                      LayerCache& cache) const
    {
        const int64_t T = x.size(0), qk = m_nope + m_rope;
        // q_a_layernorm and kv_a_layernorm are built with the default eps (1e-6), not rms_norm_eps.
        at::Tensor q = m_qLora ? dense(rmsNorm(dense(x, u.w("self_attn.q_a_proj.weight"), bias(u, "self_attn.q_a_proj")),
                                               u.w("self_attn.q_a_layernorm.weight"), 1e-6),
                                       u.w("self_attn.q_b_proj.weight"))
                               : dense(x, u.w("self_attn.q_proj.weight"));
        q = q.view({1, T, m_heads, qk}).transpose(1, 2); // [1, H, T, qk]
        at::Tensor qPass = q.narrow(-1, 0, m_nope), qRot = rotate(q.narrow(-1, m_nope, m_rope), cos, sin);
        const at::Tensor ckv =
            dense(x, u.w("self_attn.kv_a_proj_with_mqa.weight"), bias(u, "self_attn.kv_a_proj_with_mqa"));
        const at::Tensor latent = rmsNorm(ckv.narrow(-1, 0, m_kvLora), u.w("self_attn.kv_a_layernorm.weight"), 1e-6);
        const at::Tensor kRot = rotate(ckv.narrow(-1, m_kvLora, m_rope).reshape({1, 1, T, m_rope}), cos, sin);
        auto [latents, kRots] = appendCache(cache, latent.reshape({1, 1, T, m_kvLora}), kRot);
        const int64_t S = latents.size(2);
        // Every cached position's keys and values, decompressed.
        at::Tensor kv = dense(latents.reshape({S, m_kvLora}).to(x.scalar_type()), u.w("self_attn.kv_b_proj.weight"));
        kv = kv.view({1, S, m_heads, m_nope + m_vDim}).transpose(1, 2); // [1, H, S, nope + v]
        const at::Tensor key =
            at::cat({kv.narrow(-1, 0, m_nope), kRots.to(x.scalar_type()).expand({1, m_heads, S, m_rope})}, -1);
        const at::Tensor value = kv.narrow(-1, m_nope, m_vDim).contiguous();
        const at::Tensor query = at::cat({qPass, qRot}, -1);
        at::Tensor o = attention(query, key, value, m_scale); // [1, H, T, v]
        o = o.transpose(1, 2).reshape({T, m_heads * m_vDim});
        return dense(o, u.w("self_attn.o_proj.weight"), bias(u, "self_attn.o_proj"));
    }

    // DeepseekV3MLP: down(silu(gate(x)) * up(x)).
    at::Tensor mlp(const UnitScope& u, const std::string& p, const at::Tensor& x) const
    {
        auto gu = denseAll(x, {u.w(p + "gate_proj.weight"), u.w(p + "up_proj.weight")});
        return dense(siluMul(gu[0], gu[1]), u.w(p + "down_proj.weight"));
    }

    // DeepseekV3TopkRouter + route_tokens_to_experts: sigmoid scores in
    // float32; the correction bias steers the choice only (groups ranked by
    // their two best biased scores, the best topk_group kept, then the
    // top-k biased scores among them); the weights are the unbiased scores,
    // over their sum (+1e-20) with norm_topk_prob, times routed_scaling_factor.
    at::Tensor moe(const UnitScope& u, const std::string& layer, const at::Tensor& x, const at::Tensor& corr) const
    {
        const int64_t T = x.size(0), per = m_experts / m_groups;
        const at::Tensor scores = dense(x.to(at::kFloat), u.w("mlp.gate.weight").to(at::kFloat)).sigmoid();
        const at::Tensor choice = scores + corr.to(scores.device());
        const at::Tensor groupScores = std::get<0>(choice.view({T, m_groups, per}).topk(2, -1)).sum(-1);
        const at::Tensor groupIdx = std::get<1>(groupScores.topk(m_topGroups, -1, true, false));
        const at::Tensor keep = at::zeros_like(groupScores).scatter_(1, groupIdx, 1.0).gt(0);
        const at::Tensor mask = keep.unsqueeze(-1).expand({T, m_groups, per}).reshape({T, m_experts});
        const at::Tensor masked = choice.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
        const at::Tensor index = std::get<1>(masked.topk(m_topK, -1, true, false));
        at::Tensor weights = scores.gather(1, index);
        if (m_normTopK)
            weights = weights / (weights.sum(-1, true) + 1e-20);
        weights = weights * m_routedScale;
        return routedExperts(m_store, layer + ".mlp.experts", x, index, weights, m_experts);
    }

    // inv_freq (default rope, or yarn with its ramp), the cos/sin factor and
    // the softmax scale, as DeepseekV3RotaryEmbedding and DeepseekV3Attention
    // derive them from rope_parameters (5.x) or rope_scaling (4.x files).
    void rope(const ModelConfig& c)
    {
        const auto& raw = c.raw();
        nlohmann::json rp = nlohmann::json::object();
        for (const char* key : {"rope_parameters", "rope_scaling"})
            if (auto it = raw.find(key); it != raw.end() && it->is_object() && !it->empty()) {
                rp = *it;
                break;
            }
        const std::string type = rp.value("rope_type", rp.value("type", std::string("default")));
        const double theta = rp.contains("rope_theta") ? rp["rope_theta"].get<double>() : c.number("rope_theta", 10000.0);
        const double dim = double(m_rope);
        const at::Tensor pos = at::pow(theta, at::arange(0, m_rope, 2, at::kLong).to(at::kFloat) / dim);
        m_scale = 1.0 / std::sqrt(double(m_nope + m_rope));
        if (type == "default") {
            m_invFreq = 1.0 / pos;
            return;
        }
        if (type != "yarn")
            throw InputError(c.path(), "rope type '" + type + "' is not run for deepseek_v3 (default or yarn)");
        const double orig = rp.value("original_max_position_embeddings", double(c.integer("max_position_embeddings", 4096)));
        const double factor = rp.contains("factor") && rp["factor"].is_number()
                                  ? rp["factor"].get<double>()
                                  : double(c.integer("max_position_embeddings", 4096)) / orig;
        const auto num = [&](const char* k) { return rp.contains(k) && rp[k].is_number() ? rp[k].get<double>() : 0.0; };
        const double mscale = num("mscale"), mscaleAll = num("mscale_all_dim");
        if (rp.contains("attention_factor") && rp["attention_factor"].is_number())
            m_attnFactor = rp["attention_factor"].get<double>();
        else if (mscale != 0.0 && mscaleAll != 0.0)
            m_attnFactor = yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAll);
        else
            m_attnFactor = yarnMscale(factor, 1.0);
        const double betaFast = num("beta_fast") != 0.0 ? num("beta_fast") : 32.0;
        const double betaSlow = num("beta_slow") != 0.0 ? num("beta_slow") : 1.0;
        const auto corrDim = [&](double rotations) {
            return dim * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(theta));
        };
        double low = corrDim(betaFast), high = corrDim(betaSlow);
        if (rp.value("truncate", true)) {
            low = std::floor(low);
            high = std::ceil(high);
        }
        low = std::max(low, 0.0);
        high = std::min(high, dim - 1);
        if (low == high)
            high += 0.001;
        const at::Tensor ramp = ((at::arange(m_rope / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
        const at::Tensor extrapolation = 1 - ramp;
        m_invFreq = (1.0 / (factor * pos)) * (1 - extrapolation) + (1.0 / pos) * extrapolation;
        // DeepseekV3Attention: the softmax scale grows by mscale(factor, mscale_all_dim)^2.
        if (mscaleAll != 0.0) {
            const double m = yarnMscale(factor, mscaleAll);
            m_scale *= m * m;
        }
    }

    WeightStore& m_store;
    int64_t m_hidden, m_heads, m_layers, m_vocab, m_kvLora, m_rope, m_nope, m_vDim, m_dense, m_experts, m_topK,
        m_groups, m_topGroups;
    double m_eps, m_routedScale, m_scale = 1.0, m_attnFactor = 1.0;
    bool m_bias, m_qLora, m_interleave, m_normTopK;
    at::Tensor m_invFreq;
    std::vector<at::Tensor> m_correction; // each MoE layer's e_score_correction_bias, float32 on the CPU
};

} // namespace

std::unique_ptr<Runner> deepseek_v3::makeRunner(const ModelConfig& c, WeightStore& s)
{
    return std::make_unique<DeepseekV3>(c, s);
}

} // namespace stowage::arch
