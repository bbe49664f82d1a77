#include "registry.h"

#include "stowage/error.h"

namespace stowage {

std::vector<std::string> knownModelTypes()
{
    std::vector<std::string> out;
    for (const auto& f : arch::families())
        for (const auto& t : f.types)
            out.push_back(t.modelType);
    return out;
}

std::optional<std::string> familyOf(const std::string& modelType)
{
    if (const auto* f = arch::familyFor(modelType))
        return std::string(f->name);
    return std::nullopt;
}

bool addsBosByDefault(const std::string& modelType)
{
    if (const auto* f = arch::familyFor(modelType))
        for (const auto& t : f->types)
            if (modelType == t.modelType)
                return t.addsBos;
    return false;
}

std::optional<AttentionShape> attentionShape(const ModelConfig& config)
{
    if (const auto* f = arch::familyFor(config.modelType()))
        return f->attention(config);
    return std::nullopt;
}

std::vector<SavedTensor> savedTensors(const ModelConfig& config, DType dtype)
{
    std::vector<SavedTensor> out;
    const auto skel = arch::buildSkeleton(config, dtype, 0);
    if (!skel)
        return out;
    for (const Param& p : skel->tree.params())
        if (!p.duplicate)
            out.push_back({p.name, p.shape, dtypeIsFloating(p.stored) ? dtype : p.stored});
    for (const Buffer& b : skel->tree.buffers())
        if (b.persistent)
            out.push_back({b.name, b.shape, dtypeIsFloating(b.dtype) ? dtype : b.dtype});
    return out;
}

} // namespace stowage

namespace stowage::arch {

// The registry: one entry per family. Adding a family is a skeleton file
// here, a runner file in engine/runtime/families/, and one line in each
// registry.
const std::vector<Family>& families()
{
    static const std::vector<Family> all{
        {"gpt2", {{"gpt2", false}}, "n_layer", 12, buildGpt2, gpt2Attention},
        {"llama", {{"llama", true}, {"mistral", true}, {"qwen2", false}, {"qwen3", false}}, "num_hidden_layers", 32,
         buildLlamaFamily, llamaAttention},
        {"opt", {{"opt", true}}, "num_hidden_layers", 12, buildOpt, optAttention},
    };
    return all;
}

const Family* familyFor(const std::string& modelType)
{
    for (const Family& f : families())
        for (const auto& t : f.types)
            if (modelType == t.modelType)
                return &f;
    return nullptr;
}

std::optional<Skeleton> buildSkeleton(const ModelConfig& config, DType dt, size_t storedTensors)
{
    const Family* f = familyFor(config.modelType());
    if (!f)
        return std::nullopt;
    // Every layer holds several tensors; a config claiming more layers than
    // the weights hold tensors does not describe these weights.
    const int64_t layers = config.integer(f->layersKey, f->defaultLayers);
    if (storedTensors > 0 && layers > 0 && uint64_t(layers) > storedTensors)
        throw InputError(config.path(), std::string(f->layersKey) + " is " + std::to_string(layers) +
                                            ", but the weights hold only " + std::to_string(storedTensors) +
                                            " tensors, fewer than one per layer: this config.json does not "
                                            "describe these weights");
    return f->build(config, dt);
}

std::string activationClass(const std::string& name)
{
    if (name == "gelu_new")
        return "NewGELUActivation";
    if (name == "gelu")
        return "GELUActivation";
    if (name == "gelu_fast")
        return "FastGELUActivation";
    if (name == "gelu_pytorch_tanh")
        return "PytorchGELUTanh";
    if (name == "quick_gelu")
        return "QuickGELUActivation";
    if (name == "relu")
        return "ReLU";
    if (name == "silu" || name == "swish")
        return "SiLU";
    if (name == "tanh")
        return "Tanh";
    if (name == "sigmoid")
        return "Sigmoid";
    return "Activation";
}

int linear(ModuleTree& t, int parent, const std::string& name, int64_t in, int64_t out, bool bias, DType dt)
{
    int m = t.addModule(parent, name, "Linear");
    t.addParam(m, "weight", {out, in}, dt);
    if (bias)
        t.addParam(m, "bias", {out}, dt);
    return m;
}

int norm(ModuleTree& t, int parent, const std::string& name, const std::string& cls, int64_t dim, bool bias, DType dt)
{
    int m = t.addModule(parent, name, cls);
    t.addParam(m, "weight", {dim}, dt);
    if (bias)
        t.addParam(m, "bias", {dim}, dt);
    return m;
}

} // namespace stowage::arch
