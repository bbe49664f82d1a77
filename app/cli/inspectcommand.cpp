#include "args.h"
#include "commands.h"
#include "stowage/units.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/moduletree.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace stowage::cli {

int inspectCommand(const std::vector<std::string>& argv)
{
    Args a(argv, {"--dtype", "--reference"}, {"--json"});
    Checkpoint ck = Checkpoint::open(checkpointPath(a));
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a), parseReferenceOption(a));
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
        std::cout << j.dump(2) << '\n';
        return 0;
    }

    const uint64_t total = tree.root().bytes;
    std::printf("%s  %s  %s  (%s parameters, %s sizes)%s\n", ck.weightsPath().c_str(),
                tree.modelType().empty() ? "unknown model_type" : tree.modelType().c_str(),
                dtypeTorchName(*tree.dtype()), grouped(tree.root().paramCount).c_str(), referenceName(tree.reference()),
                ck.indexOnly() ? "  [index only: shapes from config.json]" : "");
    std::printf("total %s (%s bytes)\n\n", humanBytes(total).c_str(), grouped(total).c_str());
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
    if (!tree.missing().empty())
        std::printf("missing from the checkpoint (%zu, first %s): transformers would initialise them randomly\n",
                    tree.missing().size(), tree.missing()[0].c_str());
    if (!tree.unexpected().empty())
        std::printf("in the checkpoint but not in the model (%zu, first %s): ignored\n", tree.unexpected().size(),
                    tree.unexpected()[0].c_str());
    return 0;
}

} // namespace stowage::cli
