#include "registry.h"

namespace stowage::arch {

std::vector<std::string> knownModelTypes() { return {"gpt2", "llama", "mistral", "qwen2", "qwen3", "opt"}; }

std::optional<Skeleton> buildSkeleton(const ModelConfig& config, DType dt)
{
    const std::string& t = config.modelType();
    if (t == "gpt2")
        return buildGpt2(config, dt);
    if (t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3")
        return buildLlamaFamily(config, dt);
    if (t == "opt")
        return buildOpt(config, dt);
    return std::nullopt;
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
