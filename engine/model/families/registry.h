#pragma once
// Skeletons of the architectures Stowage knows: the module tree transformers
// builds for a config, with parameter shapes, buffers, ties and no-split classes.
// A new family must register every buffer its transformers module does
// (register_buffer, persistent or not, with the dtype it is created in):
// both references count buffers, so a missing one changes the map.
#include "stowage/config.h"
#include "stowage/families.h"
#include "stowage/moduletree.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stowage::arch {

struct Skeleton {
    ModuleTree tree;
    // transformers' base_model_prefix: checkpoints saved from the base model
    // lack it ("h.0..." where the causal-LM tree has "transformer.h.0...").
    std::string basePrefix;
    // Stored tensors transformers ignores when loading (regex-free suffixes).
    std::vector<std::string> ignoredSuffixes;
    // Stored tensors transformers ignores by where they lie (DeepSeek-V3's
    // multi-token-prediction layer "model.layers.61."): name prefixes.
    std::vector<std::string> ignoredPrefixes;
    // Older layouts of the same model, as transformers' checkpoint conversion
    // mapping renames them on load: {module-name prefix, stored prefix}, each
    // tried in order after the name itself (Gemma 3's Hub files keep
    // "language_model.model." where 5.6 builds "model.language_model.").
    // Prefixes end at a dot boundary; one module prefix may have several.
    std::vector<std::pair<std::string, std::string>> storedPrefixes;
    // Parameters transformers 5.6 builds on load from several stored tensors
    // (its conversion_mapping.py), by full parameter name: the parts in
    // order, each with where it lands in the parameter. buildModuleTree
    // gives them to the tree's Param::parts when the checkpoint does not
    // hold the parameter itself under its own name (a fused save).
    // fuseExperts() fills it for per-expert checkpoints.
    std::map<std::string, std::vector<StoredPart>> storedParts;
    // The model class's _keep_in_fp32_modules: quantizers never replace
    // modules these patterns match (quantization.h).
    std::vector<std::string> keepInFp32;
};

// A family's row of the registry, defined by its skeleton file as
// `Family arch::<id>::family()` (families.def). What each field must hold:
// docs/architecture.md, "Adding a family".
struct Family {
    struct Type {
        const char* modelType;
        bool addsBos; // the tokenizer's default when tokenizer_config.json does not say
    };
    std::vector<Type> types;
    // config.json's layer count and transformers' default for it: checked
    // against the checkpoint before a tree is built, so a config claiming
    // 10^9 layers is an error at once, not a hang.
    const char* layersKey = nullptr;
    int64_t defaultLayers = 0;
    Skeleton (*build)(const ModelConfig& config, DType dt) = nullptr;
    AttentionShape (*attention)(const ModelConfig& config) = nullptr;
    // The execution units in the order the runner runs them, as module names
    // of the skeleton: "a.b" the module a.b; "a.b.*" each child of a.b in
    // order (the decoder layers); "a.b?" (or "a.b.*?") a.b where the skeleton
    // has it (a config option, or which of the family's model types it is,
    // may leave it out). expandUnits() reads them.
    std::vector<std::string> units;

    // Filled by the registry from families.def, not by the family's file.
    Arch arch{};
    const char* name = nullptr;
};
// Every family, indexed by Arch.
const std::vector<Family>& families();
// nullptr for a model_type no family covers.
const Family* familyFor(const std::string& modelType);

// Each family's row (one skeleton file each), declared from families.def.
// clang-format off
#define STOWAGE_FAMILY(id) namespace id { Family family(); }
// clang-format on
#include "stowage/families.def"
#undef STOWAGE_FAMILY

// nullopt when config.model_type is not a known family. Throws InputError
// when the config claims more layers than `storedTensors` (the checkpoint's
// tensor count, 0 when unknown) could hold.
std::optional<Skeleton> buildSkeleton(const ModelConfig& config, DType paramDType, size_t storedTensors);
// The family's units (Family::units) in `tree`, which its skeleton built.
// Throws std::logic_error for a unit the tree lacks that is not optional:
// the family's row and its skeleton disagree.
std::vector<std::string> expandUnits(const Family& family, const ModuleTree& tree);

// The module class transformers' ACT2FN makes for an activation name.
std::string activationClass(const std::string& name);

// Helpers shared by the builders.
int linear(ModuleTree& t, int parent, const std::string& name, int64_t in, int64_t out, bool bias, DType dt);
int norm(ModuleTree& t, int parent, const std::string& name, const std::string& cls, int64_t dim, bool bias, DType dt);
// `rotary_emb` of class `cls` under `parent`, with the inv_freq and
// original_inv_freq buffers transformers 5.6's rotary embeddings register
// (non-persistent, float32 in any dtype: torch.arange(0, dim, 2) made
// .float()), ceil(rotaryDim / 2) values each. Returns the module.
int rotaryEmbedding(ModuleTree& t, int parent, const std::string& cls, int64_t rotaryDim);
// The window config.json's sliding_window gives as transformers 5.6 reads
// it: `def` (the config class's default; 0 for none) when the key is
// absent, 0 when it is null, else a positive integer.
int64_t slidingWindowOf(const ModelConfig& c, int64_t def);
// Whether layer i slides as config.json's layer_types says ("sliding_attention"),
// where it lists all `layers`; nullopt where it is absent or lists another number.
std::optional<std::vector<bool>> listedSlidingLayers(const ModelConfig& c, int64_t layers);
// AttentionShape::cache for a family whose layers are uniform but may slide
// (5.6's DynamicCache makes the layers a config marks sliding keep their
// last `window` positions): one row per layer, `window` where `slides(i)`;
// empty when window is 0 or no layer slides.
std::vector<LayerCacheShape> slidingCache(int64_t layers, int64_t perPosition, int64_t window,
                                          const std::function<bool(int64_t)>& slides);
// Records that the fused expert parameter `param` ([experts, sum of the
// pieces' rows, ...]) is stored per expert: for expert e, each of `pieces`
// (a name with "{e}" for the expert's number, and its shape) in order,
// stacked along dim 1 (transformers' MergeModulelist(dim=0) then
// Concatenate(dim=1): gate rows first, then up).
// Records that `param` is stored whole under another name (transformers
// 5.6's WeightRenaming: Mixtral's block_sparse_moe.gate -> mlp.gate).
void renameStored(Skeleton& s, const std::string& param, const std::string& storedName, std::vector<int64_t> shape);
void fuseExperts(Skeleton& s, const std::string& param, int64_t experts,
                 const std::vector<std::pair<std::string, std::vector<int64_t>>>& pieces);

} // namespace stowage::arch
