#pragma once
// The meta-device skeleton of a model: every module with its class, its
// children in definition order, its parameters and buffers, as transformers
// builds it; sizes follow one of two references (docs/planner.md).
#include "stowage/dtype.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace stowage {

class Checkpoint;
struct Quantization;

// Whose sizing and budget rules a tree and a plan follow.
//  Transformers: transformers 5.6 from_pretrained(device_map=...) with
//    Accelerate 1.13 (its own compute_module_sizes / get_balanced_memory).
//  Accelerate: get_balanced_memory + infer_auto_device_map called directly
//    with dtype, as load_checkpoint_and_dispatch(device_map=STRATEGY) does.
enum class Reference { Transformers, Accelerate };
const char* referenceName(Reference r);
std::optional<Reference> referenceFromName(const std::string& name);

// One stored tensor of a parameter transformers 5.6 fuses on load from
// several (conversion_mapping.py: MergeModulelist stacks the experts along
// dim 0, Concatenate joins each expert's gate and up along dim 1). The part
// fills param[index, offset : offset + shape[0], ...].
struct StoredPart {
    std::string name;           // the checkpoint's name, with the base prefix ("model.layers.0.mlp.experts.3.up_proj.weight")
    std::vector<int64_t> shape; // as config.json implies it
    int64_t index = 0;          // along the parameter's dim 0 (the expert); -1: the whole parameter, renamed
    int64_t offset = 0;         // along its dim 1
    int tensor = -1;            // index into Checkpoint::tensors(), -1 when the checkpoint lacks it
};

struct Param {
    std::string name;      // full dotted name, e.g. "transformer.h.0.attn.c_attn.weight"
    std::vector<int64_t> shape;
    DType stored = DType::F32; // dtype in the checkpoint (or config dtype when not downloaded)
    int tensor = -1;       // index into Checkpoint::tensors(), -1 when the checkpoint lacks it
    // A tied parameter that named_parameters() would not list again: it shares
    // storage with `tiedTo`, weighs nothing here and is placed with it.
    bool duplicate = false;
    std::string tiedTo;
    // Non-empty: a fused parameter (MoE experts) the checkpoint stores as
    // these tensors, in order; `tensor` is then -1 and the weight store
    // keeps one slot per part.
    std::vector<StoredPart> parts;
    // > 0: a fused MoE parameter whose dim 0 indexes this many experts. Where
    // the checkpoint holds it whole (read 1:1), the weight store still keeps
    // one slot per expert, a slice of the stored tensor's bytes.
    int64_t experts = 0;
    // A quantized checkpoint (quantization.h): what the parameter weighs
    // when the quantizer is applied (0: as unquantized; MXFP4's uint8
    // blocks, an FP8 weight's one byte each, bitsandbytes' half byte),
    // `quantOnly`: it exists only then (FP8's weight_scale_inv), and
    // `quantDropped`: it is replaced then (a GPTQ layer's weight by buffers).
    uint64_t quantBytes = 0;
    bool quantOnly = false;
    bool quantDropped = false;
    // Whether the checkpoint holds it: its tensor, or every part.
    bool found() const;
    uint64_t numel() const;
};

// A registered buffer (rotary inv_freq, ...). Never in the checkpoint when
// non-persistent; it keeps the dtype the model creates it in (float32 for
// tensors built with an explicit .float()), whatever dtype the model loads in.
struct Buffer {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype = DType::F32;
    bool persistent = false;
    bool quantOnly = false; // a quantizer's buffer (GPTQ's qweight): counted only when it is applied
    uint64_t numel() const;
};

struct Module {
    std::string name;      // full dotted name, "" for the root
    std::string className; // e.g. "GPT2Block"
    int parent = -1;
    int depth = 0;
    std::vector<int> children; // definition order
    std::vector<int> params;   // direct parameters, registration order
    std::vector<int> buffers;  // direct buffers, registration order
    int end = 0;               // one past the last module of this subtree (pre-order)
    uint64_t bytes = 0;        // subtree bytes (parameters and buffers) under the tree's dtype and reference, tied params once
    uint64_t paramCount = 0;   // subtree numel, tied params once
};

class ModuleTree {
public:
    // Modules in pre-order (definition order); modules()[0] is the root.
    const std::vector<Module>& modules() const { return m_modules; }
    // Parameters in named_parameters() order (pre-order, direct ones first).
    const std::vector<Param>& params() const { return m_params; }
    // Buffers in named_buffers() order (pre-order, direct ones first).
    const std::vector<Buffer>& buffers() const { return m_buffers; }
    const Module& root() const { return m_modules[0]; }
    int find(const std::string& moduleName) const;
    int findParam(const std::string& paramName) const;

    const std::string& modelType() const { return m_modelType; }
    bool knownArchitecture() const { return m_known; }
    // Groups of parameter names sharing storage, each sorted, as Accelerate's find_tied_parameters.
    const std::vector<std::vector<std::string>>& tiedGroups() const { return m_tied; }
    const std::vector<std::string>& noSplitClasses() const { return m_noSplit; }
    // The dtype sizes were computed under (nullopt: each tensor's own).
    std::optional<DType> dtype() const { return m_dtype; }
    Reference reference() const { return m_reference; }
    // Bytes of one parameter under the tree's dtype and reference (0 for a tied duplicate).
    uint64_t paramBytes(const Param& p) const;
    // Bytes of one buffer: its own element size (transformers), or
    // min(dtype, own) for a floating one (Accelerate with dtype).
    uint64_t bufferBytes(const Buffer& b) const;
    // A quantized checkpoint's quantization_config (nullptr: none), and
    // whether sizes follow the quantizer's replaced modules (applied) or the
    // unquantized model in the load dtype (dequantized at load, and what the
    // Accelerate reference, built from the config alone, always sizes).
    const Quantization* quantization() const { return m_quant.get(); }
    bool quantApplied() const { return m_quant && m_quantApplied && m_reference == Reference::Transformers; }
    void setQuantApplied(bool applied);
    // Whether the meta model has this tensor under the current sizing: a
    // quantizer's own tensors only when it is applied, the ones it replaces
    // only when it is not.
    bool exists(const Param& p) const { return quantApplied() ? !p.quantDropped : !p.quantOnly; }
    bool exists(const Buffer& b) const { return !b.quantOnly || quantApplied(); }
    void setQuantization(const Quantization& q);
    // Recomputes every module's bytes for another dtype (same reference).
    void setDType(std::optional<DType> dtype) { setSizing(dtype, m_reference); }
    void setSizing(std::optional<DType> dtype, Reference reference);

    // Checkpoint tensors the tree has no place for (old GPT-2 attention masks
    // are dropped silently, as transformers does), and tree parameters the
    // checkpoint lacks (transformers would initialise them randomly).
    const std::vector<std::string>& unexpected() const { return m_unexpected; }
    const std::vector<std::string>& missing() const { return m_missing; }

    // --- building (used by the architecture registry and the name-based builder)
    ModuleTree();
    int addModule(int parent, const std::string& localName, const std::string& className);
    int addParam(int module, const std::string& localName, std::vector<int64_t> shape, DType dtype);
    int addBuffer(int module, const std::string& localName, std::vector<int64_t> shape, DType dtype, bool persistent);
    void tie(const std::string& duplicate, const std::string& original);
    Param& param(int index) { return m_params[size_t(index)]; }
    Buffer& buffer(int index) { return m_buffers[size_t(index)]; }
    // Marks a parameter fused over experts along dim 0 (Param::experts).
    void markExperts(const std::string& param);
    void setNoSplit(std::vector<std::string> classes) { m_noSplit = std::move(classes); }
    // A mixture of experts: how many experts the router picks a token
    // (num_experts_per_tok), 0 for a dense model. A token reads that many of
    // each fused expert parameter's Param::experts slices (the cost model).
    int64_t expertsPerToken() const { return m_expertsPerToken; }
    void setExpertsPerToken(int64_t k) { m_expertsPerToken = k; }
    void setModelType(std::string t, bool known)
    {
        m_modelType = std::move(t);
        m_known = known;
    }
    // Fixes pre-order, subtree ends and sizes; call after building.
    void finish(std::optional<DType> dtype, Reference reference = Reference::Transformers);

private:
    friend ModuleTree buildModuleTree(const Checkpoint&, std::optional<DType>, Reference);
    std::vector<Module> m_modules;
    std::vector<Param> m_params;
    std::vector<Buffer> m_buffers;
    std::unordered_map<std::string, int> m_moduleIndex;
    std::unordered_map<std::string, int> m_paramIndex;
    std::vector<std::vector<std::string>> m_tied;
    std::vector<std::string> m_noSplit;
    std::vector<std::string> m_unexpected;
    std::vector<std::string> m_missing;
    std::string m_modelType;
    bool m_known = false;
    std::optional<DType> m_dtype;
    Reference m_reference = Reference::Transformers;
    std::shared_ptr<const Quantization> m_quant;
    bool m_quantApplied = false;
    int64_t m_expertsPerToken = 0;
};

// The tree for a checkpoint: from the architecture registry when model_type is
// known (shapes checked against the files, or taken from config.json in
// index-only mode), else from the tensor names. `dtype` nullopt means the
// checkpoint's own dtype (checkpointDType, as transformers' dtype="auto").
ModuleTree buildModuleTree(const Checkpoint& checkpoint, std::optional<DType> dtype,
                           Reference reference = Reference::Transformers);

// The dtype transformers 5.6 loads a checkpoint in when none is asked for
// (dtype="auto"): config.json's `dtype`, then `torch_dtype`; else the first
// floating (not float8) tensor of the first weights file; else float32.
DType checkpointDType(const Checkpoint& checkpoint);

} // namespace stowage
