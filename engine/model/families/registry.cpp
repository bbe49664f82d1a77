// The family registry's table (registry.h), built from families.def, and the
// helpers the skeleton files share.
#include "registry.h"

#include "stowage/error.h"

#include <stdexcept>
#include <utility>

namespace stowage::arch {

// The registry: one row per line of families.def, each from its family's
// skeleton file, in that order, so that families()[size_t(arch)] is arch's.
const std::vector<Family>& families()
{
    static const std::vector<Family> all = [] {
        std::vector<Family> out;
        const auto add = [&out](Family f, Arch arch, const char* name) {
            f.arch = arch;
            f.name = name;
            out.push_back(std::move(f));
        };
#define STOWAGE_FAMILY(id) add(id::family(), Arch::id, #id);
#include "stowage/families.def"
#undef STOWAGE_FAMILY
        return out;
    }();
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
    // A composite model (Gemma 3) keeps its layer count in text_config.
    const ModelConfig text = config.textConfig();
    const int64_t layers = text.integer(f->layersKey, f->defaultLayers);
    if (storedTensors > 0 && layers > 0 && uint64_t(layers) > storedTensors)
        throw InputError(config.path(), std::string(f->layersKey) + " is " + std::to_string(layers) +
                                            ", but the weights hold only " + std::to_string(storedTensors) +
                                            " tensors, fewer than one per layer: this config.json does not "
                                            "describe these weights");
    return f->build(config, dt);
}

std::vector<std::string> expandUnits(const Family& family, const ModuleTree& tree)
{
    std::vector<std::string> out;
    for (std::string unit : family.units) {
        const bool optional = !unit.empty() && unit.back() == '?';
        if (optional)
            unit.pop_back();
        const bool children = unit.size() > 2 && unit.compare(unit.size() - 2, 2, ".*") == 0;
        if (children)
            unit.resize(unit.size() - 2);
        const int m = tree.find(unit);
        if (m < 0) {
            if (optional)
                continue;
            throw std::logic_error(std::string(family.name) + "'s execution unit " + unit +
                                   " is not a module of its skeleton");
        }
        if (!children) {
            out.push_back(unit);
            continue;
        }
        for (int c : tree.modules()[size_t(m)].children)
            out.push_back(tree.modules()[size_t(c)].name);
    }
    return out;
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
        return "GELUTanh"; // transformers 5.6 ACT2CLS (PytorchGELUTanh before 4.5x)
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

void renameStored(Skeleton& s, const std::string& param, const std::string& storedName, std::vector<int64_t> shape)
{
    s.storedParts[param] = {StoredPart{storedName, std::move(shape), -1, 0, -1}};
}

void fuseExperts(Skeleton& s, const std::string& param, int64_t experts,
                 const std::vector<std::pair<std::string, std::vector<int64_t>>>& pieces)
{
    s.tree.markExperts(param); // held fused, it is still read an expert at a time
    auto& parts = s.storedParts[param];
    for (int64_t e = 0; e < experts; ++e) {
        int64_t offset = 0;
        for (const auto& [pattern, shape] : pieces) {
            std::string name = pattern;
            const size_t at = name.find("{e}");
            if (at != std::string::npos)
                name.replace(at, 3, std::to_string(e));
            parts.push_back({name, shape, e, offset, -1});
            offset += shape.empty() ? 0 : shape[0];
        }
    }
}

int64_t slidingWindowOf(const ModelConfig& c, int64_t def)
{
    const auto it = c.raw().find("sliding_window");
    if (it == c.raw().end())
        return def;
    return it->is_null() ? 0 : c.positive("sliding_window");
}

std::optional<std::vector<bool>> listedSlidingLayers(const ModelConfig& c, int64_t layers)
{
    const auto types = c.raw().find("layer_types");
    if (types == c.raw().end() || !types->is_array() || int64_t(types->size()) != layers)
        return std::nullopt;
    std::vector<bool> out;
    for (const auto& t : *types)
        out.push_back(t == "sliding_attention");
    return out;
}

std::vector<LayerCacheShape> slidingCache(int64_t layers, int64_t perPosition, int64_t window,
                                          const std::function<bool(int64_t)>& slides)
{
    std::vector<LayerCacheShape> rows;
    bool any = false;
    for (int64_t i = 0; window > 0 && i < layers; ++i) {
        const bool s = slides(i);
        any = any || s;
        rows.push_back({perPosition, s ? window : 0});
    }
    return any ? rows : std::vector<LayerCacheShape>{};
}

int rotaryEmbedding(ModuleTree& t, int parent, const std::string& cls, int64_t rotaryDim)
{
    const int m = t.addModule(parent, "rotary_emb", cls);
    const int64_t freqs = (rotaryDim + 1) / 2;
    t.addBuffer(m, "inv_freq", {freqs}, DType::F32, false);
    t.addBuffer(m, "original_inv_freq", {freqs}, DType::F32, false);
    return m;
}

} // namespace stowage::arch
