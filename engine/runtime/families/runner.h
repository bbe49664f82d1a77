#pragma once
// One forward pass per family, written against the weight store so that
// every execution unit goes through the pre/post hooks.
#include "../weightstore.h"
#include "stowage/config.h"
#include "stowage/families.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace stowage::arch {

struct LayerCache {
    // [batch, kv_heads, capacity, head_dim] on the layer's device; the first
    // `length` positions are filled. Grown a block of positions at a time,
    // so a decode step writes one position instead of copying them all.
    at::Tensor k, v;
    int64_t length = 0;
    // Where the held positions begin in the buffer: a sliding layer drops
    // its oldest positions by moving this on (appendCache).
    int64_t start = 0;
    // Positions the run is expected to reach (Model::resetCache): a CPU
    // buffer takes them at its first allocation instead of growing.
    int64_t expected = 0;
    // The dtype keys and values are kept in where it differs from the
    // activations' (Undefined: theirs). fp16 checkpoints computed in fp32 on
    // the CPU keep them in fp16, as transformers does and as the planner's
    // KV reserve counts them (kvcache.h): half the bytes held and read.
    at::ScalarType storeAs = at::ScalarType::Undefined;
    // Forget every position, keeping the buffer.
    void clear() { length = start = 0; }
};

// A family's forward pass. Its execution units, the modules it wraps in a
// UnitScope each, are the family's registry row's (executionUnits(), in
// families.h): the weight store prefetches along them.
class Runner {
public:
    virtual ~Runner() = default;
    // ids: [1, T] int64 on the CPU, following `past` cached positions.
    // Returns float32 logits [T, vocab] on the CPU.
    virtual at::Tensor forward(const at::Tensor& ids, int64_t past, std::vector<LayerCache>& cache) = 0;
    virtual int64_t vocabSize() const = 0;
    virtual int64_t layers() const = 0;
};

// The forward pass for config.model_type's family (registry.cpp); null for
// a model_type no family covers.
std::unique_ptr<Runner> makeRunner(const ModelConfig& config, WeightStore& store);

// Each family's runner (one runner file each), declared from families.def.
// clang-format off
#define STOWAGE_FAMILY(id) \
    namespace id { std::unique_ptr<Runner> makeRunner(const ModelConfig& config, WeightStore& store); }
// clang-format on
#include "stowage/families.def"
#undef STOWAGE_FAMILY

// Shared pieces.
// RAII pre/post hook around one unit; moves `x` to the unit's device.
class UnitScope {
public:
    UnitScope(WeightStore& store, const std::string& unit, at::Tensor& x);
    ~UnitScope();
    UnitScope(const UnitScope&) = delete;
    UnitScope& operator=(const UnitScope&) = delete;
    const at::Tensor& w(const std::string& local) const { return m_store.get(m_prefix + local); }
    at::Device device() const { return m_device; }

private:
    WeightStore& m_store;
    std::string m_unit, m_prefix;
    at::Device m_device;
    double m_t0;
};

// Softmax attention over the cache: q [B,H,T,D], k/v [B,KV,S,D]; causal for
// the T new positions that follow S-T cached ones, and with window > 0 (a
// sliding layer's, as masking_utils' sliding_window_overlay) a position p
// sees only keys after p - window. Grouped-query heads repeat. k/v may be
// held narrower than q (LayerCache::storeAs): they are widened.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, int64_t window = 0);
// repeat_kv: keys or values [B, KV, S, D] as q's [B, H, ...] heads, in q's dtype.
at::Tensor repeatKv(const at::Tensor& kv, const at::Tensor& q);
// What masking_utils hides from T new queries that follow S - T cached
// positions: [T, S], true where key j is after the query's position p, or
// (window > 0, sliding_window_overlay) where j <= p - window.
at::Tensor hiddenKeys(int64_t T, int64_t S, int64_t window, at::Device device);
// self_attn.q_proj, k_proj and v_proj of x (with their biases where `bias`), as denseAll.
std::vector<at::Tensor> qkvProjections(const UnitScope& u, const at::Tensor& x, bool bias);
// y = x W^T (+ b) for W stored [out, in] (Linear). One row at a time
// (decoding) goes through a matrix-vector kernel (gemv.h), several times
// faster than the matrix-matrix path for a single row. W may be fp16 with an
// fp32 x (fp16 weights on the CPU, weightstore.h).
at::Tensor dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});
// dense() of each weight (and bias, where given) on the same x; one row on
// the CPU multiplies them all in one GEMV job (gemvAll).
std::vector<at::Tensor> denseAll(const at::Tensor& x, const std::vector<at::Tensor>& ws,
                                 const std::vector<at::Tensor>& bs = {});
// h + dense(x, w, b): a residual stream's sum. One row on the CPU without
// a bias is added by the GEMV job as it stores the product (gemv.h
// GemvAfter), with the same roundings.
at::Tensor addDense(const at::Tensor& h, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});
// dense(x, w).to(kFloat).cpu(): logits in fp32 on the CPU, their values
// rounded to x's dtype. One row on the CPU comes widened from the GEMV job.
at::Tensor logits(const at::Tensor& x, const at::Tensor& w);
// y = x W + b for W stored [in, out] (GPT-2's Conv1D).
at::Tensor denseInOut(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// LayerNorm over the last n features; weights in another dtype than x are widened.
at::Tensor layerNorm(const at::Tensor& x, int64_t n, const at::Tensor& w, const at::Tensor& b, double eps);
// LlamaRMSNorm over the last dimension: in fp32, rounded to x's dtype, times
// the weight. On the CPU for fp32 and bf16 activations one loop over the rows
// with LibTorch's roundings (its seven operations cost 34 us a call in bf16
// at hidden 1024, most of a small model's norm time); elsewhere those operations.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps);
// q * cos + rotate_half(q) * sin for q [1, heads, T, dim], cos/sin [T, dim] in
// q's dtype. One new position on the CPU (fp32, bf16): one loop with the
// roundings of LibTorch's five operations, which cost 25 us a call.
at::Tensor rotary(const at::Tensor& q, const at::Tensor& cos, const at::Tensor& sin);
// silu(gate) * up (LlamaMLP's act_fn(gate_proj(x)) * up_proj(x)). One row on
// the CPU in fp32 or bf16: one loop (gemv.h siluTimes) for LibTorch's two
// operations, which took 17 us a layer of the small bf16 model's decode step.
at::Tensor siluMul(const at::Tensor& gate, const at::Tensor& up);
// Rows of an embedding table in the activations' dtype (WeightStore::computeDType).
at::Tensor embed(const at::Tensor& w, const at::Tensor& ids, at::ScalarType dtype);
// Appends k/v [B, KV, T, D] to the layer's cache (in c.storeAs where set)
// and returns views of all held positions (the new ones last). A sliding
// layer (window > 0) first drops all but its last window - 1 positions, so
// it returns window - 1 + T at most: masks over them are relative
// (hiddenKeys), rotary positions absolute (the runner's `past`).
std::pair<at::Tensor, at::Tensor> appendCache(LayerCache& c, const at::Tensor& k, const at::Tensor& v,
                                              int64_t window = 0);
// Each decoder layer's window (0: every position) as the family's registry
// row gives it (families.h AttentionShape::cache), the one the KV reserve
// counts; all 0 for a family whose cache is uniform.
std::vector<int64_t> cacheWindows(const ModelConfig& config, int64_t layers);

} // namespace stowage::arch
