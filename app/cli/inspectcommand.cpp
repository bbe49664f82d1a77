#include "args.h"
#include "commands.h"
#include "stowage/units.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/moduletree.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace stowage::cli {
namespace {

// A stored expert tensor's name as a pattern over the experts:
// "model.layers.0.block_sparse_moe.experts.*.w1.weight" (the last ".E." is
// the expert's number).
std::string expertPattern(const StoredPart& part)
{
    const std::string idx = "." + std::to_string(part.index) + ".";
    const size_t at = part.name.rfind(idx);
    return at == std::string::npos ? part.name : part.name.substr(0, at) + ".*." + part.name.substr(at + idx.size());
}

// Parameters whose checkpoint names differ from transformers 5.6's: fused
// experts (the per-expert patterns they are read from, in order) and
// tensors stored under an older name. A name that only lacks the base-model
// prefix is not listed.
nlohmann::ordered_json storedNames(const Checkpoint& ck, const ModuleTree& tree)
{
    auto out = nlohmann::ordered_json::array();
    for (const Param& p : tree.params()) {
        if (!p.parts.empty()) {
            std::vector<std::string> patterns;
            int64_t experts = 0;
            for (const StoredPart& part : p.parts) {
                const std::string pat = expertPattern(part);
                if (std::find(patterns.begin(), patterns.end(), pat) == patterns.end())
                    patterns.push_back(pat);
                experts = std::max(experts, part.index + 1);
            }
            out.push_back({{"param", p.name}, {"stored", patterns}, {"experts", experts}});
            continue;
        }
        if (p.tensor < 0)
            continue;
        const std::string& stored = ck.tensors()[size_t(p.tensor)].name;
        const bool prefixOnly = p.name.size() > stored.size() &&
                                p.name.compare(p.name.size() - stored.size(), stored.size(), stored) == 0;
        if (stored != p.name && !prefixOnly)
            out.push_back({{"param", p.name}, {"stored", {stored}}});
    }
    return out;
}

} // namespace

int inspectCommand(const std::vector<std::string>& argv)
{
    Args a(argv, {"--dtype", "--reference", "--hardware"}, {"--json"});
    Checkpoint ck = Checkpoint::open(checkpointPath(a));
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a), parseReferenceOption(a));
    // A quantized checkpoint: sized as its quantizer leaves it on the
    // machine (--hardware, else this one), with the other size beside it.
    std::optional<QuantDecision> quant;
    uint64_t otherBytes = 0;
    if (const Quantization* q = tree.quantization()) {
        quant = quantDecision(*q, quantTargetFromArgs(a));
        ModuleTree other = tree;
        other.setQuantApplied(!quant->applied);
        tree.setQuantApplied(quant->applied);
        otherBytes = other.root().bytes;
    }
    for (const auto& w : ck.warnings())
        std::fprintf(stderr, "stowage-cli: warning: %s\n", w.c_str());

    if (a.flag("--json")) {
        nlohmann::ordered_json j;
        j["model_type"] = tree.modelType();
        j["dtype"] = dtypeTorchName(*tree.dtype());
        j["total_bytes"] = tree.root().bytes;
        auto& mods = j["modules"] = nlohmann::ordered_json::array();
        for (const auto& m : tree.modules())
            mods.push_back({{"name", m.name}, {"class", m.className}, {"bytes", m.bytes}, {"params", m.paramCount}});
        j["tied"] = tree.tiedGroups();
        j["no_split"] = tree.noSplitClasses();
        // After the contract's keys (DESIGN.md): which rules sized it, and the buffers counted.
        j["reference"] = referenceName(tree.reference());
        auto& bufs = j["buffers"] = nlohmann::ordered_json::array();
        for (const auto& b : tree.buffers())
            bufs.push_back({{"name", b.name}, {"dtype", dtypeTorchName(b.dtype)}, {"bytes", tree.bufferBytes(b)},
                            {"persistent", b.persistent}});
        j["index_only"] = ck.indexOnly();
        j["missing"] = tree.missing();
        j["unexpected"] = tree.unexpected();
        // Parameters read from a tensor of another name: a base-model save, or an
        // older layout transformers renames on load (Gemma 3's Hub files).
        auto& storedAs = j["stored_as"] = nlohmann::ordered_json::object();
        for (const auto& p : tree.params())
            if (p.tensor >= 0 && ck.tensors()[size_t(p.tensor)].name != p.name)
                storedAs[p.name] = ck.tensors()[size_t(p.tensor)].name;
        // Parameters made of several stored tensors (fused MoE experts).
        j["stored_names"] = storedNames(ck, tree);
        if (quant) {
            const bool applied = tree.quantApplied();
            j["quantization"] = {{"method", tree.quantization()->method},
                                 {"label", tree.quantization()->label()},
                                 {"applied", applied},
                                 {"why", quant->why},
                                 {"quantized_bytes", applied ? tree.root().bytes : otherBytes},
                                 {"dequantized_bytes", applied ? otherBytes : tree.root().bytes}};
        }
        std::cout << j.dump(2) << '\n';
        return 0;
    }

    const uint64_t total = tree.root().bytes;
    std::printf("%s  %s  %s  (%s parameters, %s sizes)%s\n", ck.weightsPath().c_str(),
                tree.modelType().empty() ? "unknown model_type" : tree.modelType().c_str(),
                dtypeTorchName(*tree.dtype()), grouped(tree.root().paramCount).c_str(), referenceName(tree.reference()),
                ck.indexOnly() ? "  [index only: shapes from config.json]" : "");
    std::printf("total %s (%s bytes)\n", humanBytes(total).c_str(), grouped(total).c_str());
    if (quant)
        std::printf("%s %s (%s): %s %s\n", tree.quantization()->label().c_str(),
                    tree.quantApplied() ? "stays quantized" : "is dequantized at load", quant->why.c_str(),
                    humanBytes(otherBytes).c_str(), tree.quantApplied() ? "if dequantized" : "quantized");
    std::printf("\n");
    std::printf("%-56s %-28s %12s %7s\n", "module", "class", "size", "share");
    for (const auto& m : tree.modules()) {
        std::string label = std::string(static_cast<size_t>(m.depth) * 2, ' ') +
                            (m.name.empty() ? "(model)" : m.name.substr(m.name.rfind('.') + 1));
        double share = total ? 100.0 * static_cast<double>(m.bytes) / static_cast<double>(total) : 0.0;
        std::printf("%-56s %-28s %12s %6.2f%%\n", label.c_str(), m.className.c_str(), humanBytes(m.bytes).c_str(), share);
    }
    if (!tree.tiedGroups().empty()) {
        std::printf("\ntied:");
        for (const auto& g : tree.tiedGroups()) {
            std::printf(" [");
            for (size_t i = 0; i < g.size(); ++i)
                std::printf("%s%s", i ? " = " : "", g[i].c_str());
            std::printf("]");
        }
        std::printf("\n");
    }
    std::printf("no-split classes:");
    for (const auto& c : tree.noSplitClasses())
        std::printf(" %s", c.c_str());
    std::printf("\n");
    const auto renamed = storedNames(ck, tree);
    if (!renamed.empty()) {
        const auto& first = renamed[0];
        std::string from;
        for (const auto& n : first["stored"])
            from += (from.empty() ? "" : " + ") + n.get<std::string>();
        std::printf("stored under other names (%zu, first %s <- %s)\n", renamed.size(),
                    first["param"].get<std::string>().c_str(), from.c_str());
    }
    if (!tree.missing().empty())
        std::printf("missing from the checkpoint (%zu, first %s): transformers would initialise them randomly\n",
                    tree.missing().size(), tree.missing()[0].c_str());
    if (!tree.unexpected().empty())
        std::printf("in the checkpoint but not in the model (%zu, first %s): ignored\n", tree.unexpected().size(),
                    tree.unexpected()[0].c_str());
    return 0;
}

} // namespace stowage::cli
