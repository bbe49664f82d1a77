#pragma once
// Skeletons of the architectures Stowage knows: the module tree transformers
// builds for a config, with parameter shapes, buffers, ties and no-split classes.
// A new family must register every buffer its transformers module does
// (register_buffer, persistent or not, with the dtype it is created in):
// both references count buffers, so a missing one changes the map.
#include "stowage/config.h"
#include "stowage/moduletree.h"

#include <optional>
#include <string>
#include <vector>

namespace stowage::arch {

struct Skeleton {
    ModuleTree tree;
    // transformers' base_model_prefix: checkpoints saved from the base model
    // lack it ("h.0..." where the causal-LM tree has "transformer.h.0...").
    std::string basePrefix;
    // Stored tensors transformers ignores when loading (regex-free suffixes).
    std::vector<std::string> ignoredSuffixes;
};

// nullopt when config.model_type is not a known family.
std::optional<Skeleton> buildSkeleton(const ModelConfig& config, DType paramDType);
std::vector<std::string> knownModelTypes();

// Per-family builders (one file each).
Skeleton buildGpt2(const ModelConfig& config, DType dt);
Skeleton buildLlamaFamily(const ModelConfig& config, DType dt);
Skeleton buildOpt(const ModelConfig& config, DType dt);

// The module class transformers' ACT2FN makes for an activation name.
std::string activationClass(const std::string& name);

// Helpers shared by the builders.
int linear(ModuleTree& t, int parent, const std::string& name, int64_t in, int64_t out, bool bias, DType dt);
int norm(ModuleTree& t, int parent, const std::string& name, const std::string& cls, int64_t dim, bool bias, DType dt);

} // namespace stowage::arch
