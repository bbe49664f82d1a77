// Qwen3-MoE's forward pass: Qwen3 attention (q_norm/k_norm per head) and
// sparse MoE blocks, dense MLPs in mlp_only_layers (moe.h), as transformers
// 5.6's modeling_qwen3_moe.py runs it.
#include "moe.h"

namespace stowage::arch {

std::unique_ptr<Runner> qwen3_moe::makeRunner(const ModelConfig& c, WeightStore& s)
{
    MoeDecoderSpec spec;
    spec.qkNorm = true;
    spec.expertsKey = "num_experts";
    spec.defaultExperts = 128;
    // Qwen3MoeTopKRouter: softmax -> top-k, divided by their sum only with
    // norm_topk_prob (default false), then cast to the activations' dtype.
    spec.routing.renormalise = c.boolOr("norm_topk_prob", false);
    spec.routing.weightsInActivationDType = true;
    return makeMoeDecoder(c, s, spec);
}

} // namespace stowage::arch
