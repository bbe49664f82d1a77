#pragma once
// Quantized checkpoints as transformers 5.6 sizes them: config.json's
// `quantization_config`, which modules the quantizer replaces and what their
// tensors weigh on the meta device the planner sizes, and whether the
// quantizer is applied at all on the machine a plan is for (MXFP4 and
// fine-grained FP8 dequantize to the load dtype without a capable GPU). The
// rules, with line references, are in docs/planner.md ("Quantized
// checkpoints").
#include "stowage/config.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

class ModuleTree;

struct Quantization {
    enum class Kind { Mxfp4, Fp8, Bnb4, Bnb8, Gptq, Unmodelled };
    Kind kind = Kind::Unmodelled;
    std::string method; // quant_method as written ("mxfp4", "fp8", "bitsandbytes", "gptq", "awq", ...)
    bool dequantize = false; // the config's own `dequantize` (MXFP4, FP8)
    // modules_to_not_convert (llm_int8_skip_modules for bitsandbytes);
    // nullopt when null or absent: then the default skips (lm_head and the
    // tied embeddings) apply.
    std::optional<std::vector<std::string>> skip;
    // FP8: weight_block_size (nullopt: per-tensor scales), static activations.
    std::optional<std::pair<int64_t, int64_t>> block = std::make_pair(int64_t(128), int64_t(128));
    bool staticActivation = false;
    // GPTQ: bits, group_size (-1: one group per row), the block prefix and
    // modules_in_block_to_quantize.
    int bits = 4;
    int64_t groupSize = 128;
    std::string blockPrefix;
    std::vector<std::string> inBlock;
    // bitsandbytes: llm_int8_enable_fp32_cpu_offload.
    bool fp32CpuOffload = false;
    // What people call it: "MXFP4", "FP8 (block 128x128)", "bitsandbytes 4-bit", "GPTQ 4-bit".
    std::string label() const;
};

// config.json's quantization_config (a multimodal config's own, else its
// text config's); nullopt when there is none or transformers would ignore it
// (quant_method "bitsandbytes" with neither load_in_4bit nor load_in_8bit).
// Throws InputError naming config.json for a malformed one.
std::optional<Quantization> quantizationOf(const ModelConfig& config);

// The accelerator transformers sees on the machine a plan is for
// (torch.accelerator.current_accelerator(), and for CUDA its compute
// capability): none on a CPU-only machine.
struct QuantTarget {
    bool cuda = false;
    double computeCapability = 0; // 8.9 for an RTX 4090, 9.0 for an H100
};

// Whether the quantizer runs as a quantizer on `target`, or the weights are
// dequantized to the load dtype at load; `why` says which rule decided.
struct QuantDecision {
    bool applied = true;
    std::string why;
};
QuantDecision quantDecision(const Quantization& q, const QuantTarget& target);

// Whether Stowage's runtime runs checkpoints quantized this way: MXFP4 and
// block-wise FP8 with dynamic activations, dequantized per execution unit
// as their weights are fetched (never the whole model at once). The others
// are planned and inspected only.
bool quantizationRuns(const Quantization& q);

// Gives the tree's parameters the form the quantizer's module replacement
// gives them (Param::quantBytes, quantOnly, quantDropped; GPTQ's buffers),
// and records `q` (ModuleTree::quantization). `keepFp32`: the model class's
// _keep_in_fp32_modules. Sizes follow ModuleTree::quantApplied().
void addQuantizedForms(ModuleTree& tree, const Quantization& q, const std::vector<std::string>& keepFp32);

// transformers' should_convert_module: false when any pattern matches the
// module name as re.match(p + "\\."), re.match(p) or name.endswith(p).
bool quantizerSkips(const std::string& module, const std::vector<std::string>& patterns);

// The name a quantized checkpoint stores a parameter under when it is not
// the parameter's own (MXFP4 `gate_up_proj_blocks`, GPTQ `q_proj.qweight`);
// empty when it is stored under its own name.
std::string quantStoredName(const std::string& param, const Quantization& q);

// Whether a stored tensor is quantizer state that belongs to a weight (an
// FP8 `weight_scale_inv`, MXFP4 `_scales`, bitsandbytes `absmax`, GPTQ
// `qzeros`, ...): the name of the tensor or parameter it belongs to, else
// empty.
std::string quantStateOwner(const std::string& tensorName, const Quantization& q);

} // namespace stowage
