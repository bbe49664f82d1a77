#pragma once
// Skeletons of the architectures Stowage knows: the module tree transformers
// builds for a config, with parameter shapes, buffers, ties and no-split classes.
// A new family must register every buffer its transformers module does
// (register_buffer, persistent or not, with the dtype it is created in):
// both references count buffers, so a missing one changes the map.
#include "stowage/config.h"
#include "stowage/families.h"
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

// A family as the registry holds it: the model_types it covers (with the
// tokenizer's BOS default for each), its skeleton and its attention shape.
struct Family {
    struct Type {
        const char* modelType;
        bool addsBos;
    };
    const char* name;
    std::vector<Type> types;
    // config.json's layer count and transformers' default for it: checked
    // against the checkpoint before a tree is built, so a config claiming
    // 10^9 layers is an error at once, not a hang.
    const char* layersKey;
    int64_t defaultLayers;
    Skeleton (*build)(const ModelConfig& config, DType dt);
    AttentionShape (*attention)(const ModelConfig& config);
};
const std::vector<Family>& families();
const Family* familyFor(const std::string& modelType);

// nullopt when config.model_type is not a known family. Throws InputError
// when the config claims more layers than `storedTensors` (the checkpoint's
// tensor count, 0 when unknown) could hold.
std::optional<Skeleton> buildSkeleton(const ModelConfig& config, DType paramDType, size_t storedTensors);

// Per-family builders and shapes (one file each), registered in registry.cpp.
Skeleton buildGpt2(const ModelConfig& config, DType dt);
AttentionShape gpt2Attention(const ModelConfig& config);
Skeleton buildLlamaFamily(const ModelConfig& config, DType dt);
AttentionShape llamaAttention(const ModelConfig& config);
Skeleton buildOpt(const ModelConfig& config, DType dt);
AttentionShape optAttention(const ModelConfig& config);

// The module class transformers' ACT2FN makes for an activation name.
std::string activationClass(const std::string& name);

// Helpers shared by the builders.
int linear(ModuleTree& t, int parent, const std::string& name, int64_t in, int64_t out, bool bias, DType dt);
int norm(ModuleTree& t, int parent, const std::string& name, const std::string& cls, int64_t dim, bool bias, DType dt);

} // namespace stowage::arch
