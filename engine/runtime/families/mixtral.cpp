// Mixtral's forward pass: Mistral attention and a sparse MoE block in every
// layer (moe.h), as transformers 5.6's modeling_mixtral.py runs it.
#include "moe.h"

namespace stowage::arch {

std::unique_ptr<Runner> mixtral::makeRunner(const ModelConfig& c, WeightStore& s)
{
    MoeDecoderSpec spec;
    spec.expertsKey = "num_local_experts"; // MixtralConfig's name (num_experts maps to it)
    spec.defaultExperts = 8;
    spec.defaultTheta = 1000000.0; // MixtralConfig.default_theta
    // MixtralTopKRouter: softmax -> top-k -> divided by their sum, kept in float32.
    spec.routing.renormalise = true;
    spec.routing.weightsInActivationDType = false;
    if (!c.has("num_local_experts") && c.has("num_experts"))
        spec.expertsKey = "num_experts";
    return makeMoeDecoder(c, s, spec);
}

} // namespace stowage::arch
