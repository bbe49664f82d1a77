#pragma once
// The one registry of model families. A family (gpt2, llama, opt, ...) is
// one line of stowage/families.def, which makes it an `Arch` here: its
// skeleton file (engine/model/families/) gives the model_types it covers,
// the module tree transformers builds (with buffers, ties, no-split
// classes), its attention shape and its execution units; its runner file
// (engine/runtime/families/) the forward pass, found by the same Arch.
// Everything that needs to know families asks here.
#include "stowage/config.h"
#include "stowage/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

class Checkpoint;
class ModuleTree;

// The families, in registry order (families.def); each enumerator is the
// family's name.
enum class Arch {
#define STOWAGE_FAMILY(id) id,
#include "stowage/families.def"
#undef STOWAGE_FAMILY
};

// Every config.json model_type a skeleton exists for, in registry order.
std::vector<std::string> knownModelTypes();
// The family a model_type belongs to (mistral -> Arch::llama); nullopt if unknown.
std::optional<Arch> archOf(const std::string& modelType);
// The family's name as a string ("mistral" -> "llama"); nullopt if unknown.
std::optional<std::string> familyOf(const std::string& modelType);
// Whether transformers' tokenizer for this model_type puts BOS first when
// tokenizer_config.json does not say (Llama and OPT tokenizers do).
bool addsBosByDefault(const std::string& modelType);
// Whether an encoded prompt starts with BOS: tokenizer_config.json's
// add_bos_token when it says, else addsBosByDefault(config's model_type).
bool addsBos(const Checkpoint& ck);

// One decoder layer's KV cache where it is not 2 x kvHeads x headDim values
// at every position (AttentionShape::cache).
struct LayerCacheShape {
    int64_t elementsPerPosition = 0; // values kept per position and sequence
    int64_t window = 0;              // positions kept at most (sliding attention); 0: every one
};

// What a KV cache and activations of one layer need.
struct AttentionShape {
    int64_t hidden = 0, kvHeads = 0, headDim = 0, inner = 0; // inner: the MLP's width
    // Per decoder layer, in order, where a family's cache is not uniform:
    // sliding layers (Gemma 3, Phi-3's sliding_window, gpt-oss) keep at most
    // `window` positions, MLA (DeepSeek-V3) keeps a compressed latent. Empty:
    // every layer keeps 2 x kvHeads x headDim values a position, all positions.
    std::vector<LayerCacheShape> cache;
};
// nullopt for a model_type no family knows.
std::optional<AttentionShape> attentionShape(const ModelConfig& config);

// The execution units of a family's tree (tree.modelType()) in the order
// its runner runs them: the modules it wraps in one pre/post hook pair each,
// whose weights are fetched and released together. Empty for a tree no
// family built.
std::vector<std::string> executionUnits(const ModuleTree& tree);

// A tensor that save_pretrained writes.
struct SavedTensor {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype = DType::F32;
};
// What a Hugging Face save of a model with this config holds, from the
// family's skeleton (the one statement of each family's tensor layout):
// every parameter except tied duplicates, and the persistent buffers, in
// definition order. Empty for a model_type no family knows.
std::vector<SavedTensor> savedTensors(const ModelConfig& config, DType dtype);

} // namespace stowage
