#pragma once
// What the mixture-of-experts families share: top-k routing, the sparse
// block that reads only the routed experts through the weight store, and a
// decoder of Llama-style attention with such blocks (Mixtral, Qwen3-MoE).
#include "runner.h"

#include <functional>

namespace stowage::arch {

// How a family's router turns its logits into expert weights.
struct Routing {
    int64_t experts = 0, topK = 0;
    // Divide the top-k probabilities by their sum (Mixtral always;
    // Qwen3-MoE iff norm_topk_prob).
    bool renormalise = true;
    // Round the weights to the activations' dtype before they scale an
    // expert's output (Qwen3MoeTopKRouter casts them back; Mixtral's stay
    // float32, so a bf16 expert output is widened for the product).
    bool weightsInActivationDType = false;
};

// The sum over the routed experts that every *Experts.forward of 5.6 runs:
// for each expert some token picked (index [T, k], int64), in increasing
// expert order, `expert(x rows routed to e, e)` times each row's weight
// (weights [T, k], the slot's column), rounded to x's dtype and added into
// the output per token (index_add_). An expert no token picked is never
// asked for, so its weights are never fetched. `where` (optional; the
// store's expertDevice) names the device an expert computes on: its rows
// go there and its output comes back, so an expert kept in RAM beside a GPU
// layer is multiplied in RAM.
at::Tensor routedSum(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& index, int64_t experts,
                     const std::function<at::Tensor(const at::Tensor& xe, int64_t e)>& expert,
                     const std::function<at::Device(int64_t e)>& where = {});

// The sparse MoE block of transformers 5.6 (MixtralSparseMoeBlock,
// Qwen3MoeSparseMoeBlock and their *Experts) on x [T, hidden]: router
// logits x Wr^T, softmax in float32, top-k (torch.topk order), weights per
// `r`; then for each expert some token picked, in increasing expert order,
// silu(x Wg^T) * (x Wu^T) Wd^T times the token's weight, summed into the
// output per token in that order (index_add_). `layer` is the unit's module
// name ("model.layers.3"): its experts are `<layer>.<experts>.gate_up_proj`
// and `.down_proj`, read with WeightStore::expert(), so only the experts
// picked are ever fetched.
at::Tensor sparseMoe(WeightStore& store, const std::string& experts, const at::Tensor& x, const at::Tensor& router,
                     const Routing& r);
// The experts' half of it, for a router of the family's own (DeepSeek-V3's
// grouped sigmoid): `index` [T, k] the experts each token picked (any
// device), `weights` [T, k] their weights (float32 or x's dtype); each
// expert's output times its weight, rounded to x's dtype, summed per token
// in increasing expert order. Only the picked experts are read.
at::Tensor routedExperts(WeightStore& store, const std::string& experts, const at::Tensor& x, const at::Tensor& index,
                         const at::Tensor& weights, int64_t count);

// The decoder Mixtral and Qwen3-MoE share (each family's runner file picks
// its flavour): embed, per layer RMSNorm, attention with rotary (q_norm and
// k_norm per head where `qkNorm`), RMSNorm, then the sparse block or, in a
// layer the skeleton built dense, a SiLU-gated MLP; final norm and head.
struct MoeDecoderSpec {
    bool qkNorm = false;        // Qwen3-MoE
    std::string expertsKey;     // config key of the expert count
    int64_t defaultExperts = 0; // its default
    double defaultTheta = 10000.0;
    Routing routing;
};
std::unique_ptr<Runner> makeMoeDecoder(const ModelConfig& config, WeightStore& store, const MoeDecoderSpec& spec);

} // namespace stowage::arch
