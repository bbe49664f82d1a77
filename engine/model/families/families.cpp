// stowage/families.h: what the rest of the engine asks of the family
// registry, answered from its table (registry.cpp).
#include "registry.h"

#include "stowage/checkpoint.h"

#include <nlohmann/json.hpp>

namespace stowage {

std::vector<std::string> knownModelTypes()
{
    std::vector<std::string> out;
    for (const auto& f : arch::families())
        for (const auto& t : f.types)
            out.push_back(t.modelType);
    return out;
}

std::optional<Arch> archOf(const std::string& modelType)
{
    if (const auto* f = arch::familyFor(modelType))
        return f->arch;
    return std::nullopt;
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

bool addsBos(const Checkpoint& ck)
{
    if (auto text = ck.readSideFile("tokenizer_config.json")) {
        // An unreadable file falls back to the default, as transformers warns and goes on.
        const auto cfg = nlohmann::json::parse(*text, nullptr, false);
        if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
            return cfg["add_bos_token"].get<bool>();
    }
    // Llama-style and OPT tokenizers put BOS first, as transformers' encode does by default.
    return ck.config() && addsBosByDefault(ck.config()->modelType());
}

std::optional<AttentionShape> attentionShape(const ModelConfig& config)
{
    if (const auto* f = arch::familyFor(config.modelType()))
        return f->attention(config);
    return std::nullopt;
}

std::vector<std::string> executionUnits(const ModuleTree& tree)
{
    const auto* f = tree.knownArchitecture() ? arch::familyFor(tree.modelType()) : nullptr;
    return f ? arch::expandUnits(*f, tree) : std::vector<std::string>{};
}

std::vector<SavedTensor> savedTensors(const ModelConfig& config, DType dtype)
{
    std::vector<SavedTensor> out;
    const auto skel = arch::buildSkeleton(config, dtype, 0);
    if (!skel)
        return out;
    for (const Param& p : skel->tree.params()) {
        if (p.duplicate)
            continue;
        const DType dt = dtypeIsFloating(p.stored) ? dtype : p.stored;
        // A fused expert parameter is saved as the per-expert tensors
        // transformers 5.6 reads it from (its conversion reversed on save).
        auto fused = skel->storedParts.find(p.name);
        if (fused == skel->storedParts.end())
            out.push_back({p.name, p.shape, dt});
        else if (fused->second.size() == 1 && fused->second[0].index < 0)
            out.push_back({fused->second[0].name, p.shape, dt});
        else
            for (const StoredPart& part : fused->second)
                out.push_back({part.name, part.shape, dt});
    }
    for (const Buffer& b : skel->tree.buffers())
        if (b.persistent)
            out.push_back({b.name, b.shape, dtypeIsFloating(b.dtype) ? dtype : b.dtype});
    return out;
}

} // namespace stowage
