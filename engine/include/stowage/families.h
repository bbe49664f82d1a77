#pragma once
// The one registry of model families. A family (gpt2, llama, opt, ...) is
// registered once in engine/model/families/registry.cpp: its skeleton file
// builds the module tree transformers builds (with buffers, ties, no-split
// classes) and gives its attention shape; the runtime's runner file
// (engine/runtime/families/) is registered once under the same family name.
// Everything that needs to know families asks here.
#include "stowage/config.h"
#include "stowage/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

// Every config.json model_type a skeleton exists for, in registry order.
std::vector<std::string> knownModelTypes();
// The family a model_type belongs to ("mistral" -> "llama"); nullopt if unknown.
std::optional<std::string> familyOf(const std::string& modelType);
// Whether transformers' tokenizer for this model_type puts BOS first when
// tokenizer_config.json does not say (Llama and OPT tokenizers do).
bool addsBosByDefault(const std::string& modelType);

// What a KV cache and activations of one layer need.
struct AttentionShape {
    int64_t hidden = 0, kvHeads = 0, headDim = 0, inner = 0; // inner: the MLP's width
};
// nullopt for a model_type no family knows.
std::optional<AttentionShape> attentionShape(const ModelConfig& config);

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
