// stowage-cli deploy: the model on a serving engine over nodes x GPUs (stowage/deploy.h).
#include "args.h"
#include "commands.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/deploy.h"
#include "stowage/device.h"
#include "stowage/error.h"
#include "stowage/units.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace stowage::cli {
int deployCommand(const std::vector<std::string>& argv)
{
    Args a(argv, {"--gpu", "--nodes", "--gpus-per-node", "--engine", "--context", "--sequences", "--memory-fraction",
                  "--model-id", "--dtype", "--host-ram", "-o"},
           {"--expert-parallel", "--json"});
    const auto gpu = a.value("--gpu");
    if (!gpu)
        throw InputError("deploy", "--gpu PRESET is required (rtx4090, a100-80gb, h100-80gb, h200, ...)");
    const std::string path = checkpointPath(a);
    Checkpoint ck = Checkpoint::open(path);
    if (!ck.config())
        throw InputError(ck.weightsPath(), "deploy planning needs config.json beside the weights or index");
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a));
    DeployCluster cluster = clusterFromPreset(*gpu, wholeNumberOption(a, "--nodes", 1, 1, 1024),
                                              wholeNumberOption(a, "--gpus-per-node", 8, 1, 64));
    if (auto ram = a.value("--host-ram")) // where llama.cpp's --n-cpu-moe keeps experts
        cluster.hostMemoryBytes = parseSize(*ram, "--host-ram");
    DeployRequest r;
    if (auto e = a.value("--engine")) {
        const auto engine = servingEngineFromName(*e);
        if (!engine)
            throw InputError("--engine", "unknown engine '" + *e + "' (vllm, sglang, tgi, llama.cpp, transformers)");
        r.engine = *engine;
    }
    r.contextTokens = wholeNumberOption(a, "--context", 4096, 1, 1 << 24);
    r.sequences = wholeNumberOption(a, "--sequences", 1, 1, 1 << 16);
    if (auto f = a.value("--memory-fraction")) {
        const auto v = parseNumber(*f);
        if (!v || !(*v > 0 && *v <= 1))
            throw InputError("--memory-fraction", "expected a fraction above 0 and at most 1, got '" + *f + "'");
        r.memoryFraction = *v;
    }
    r.expertParallel = a.flag("--expert-parallel");
    const std::string modelId = a.value("--model-id").value_or(ck.folder());
    const DeployPlan plan = planDeployment(tree, *ck.config(), cluster, r, modelId);

    std::string text;
    if (a.flag("--json")) {
        nlohmann::ordered_json j;
        j["engine"] = servingEngineName(r.engine);
        j["nodes"] = cluster.nodes;
        j["gpus_per_node"] = cluster.gpusPerNode;
        j["gpu"] = cluster.gpu.name;
        j["context"] = r.contextTokens;
        j["sequences"] = r.sequences;
        auto& list = j["choices"] = nlohmann::ordered_json::array();
        for (const DeployChoice& c : plan.choices)
            list.push_back({{"tp", c.tp},
                            {"pp", c.pp},
                            {"ep", c.ep},
                            {"fits", c.fits},
                            {"why", c.why},
                            {"weights_per_gpu", c.weightsPerGpu},
                            {"kv_per_gpu", c.kvPerGpu},
                            {"overhead_per_gpu", c.overheadPerGpu},
                            {"usable_per_gpu", c.usablePerGpu},
                            {"layers_per_stage", c.layersPerStage},
                            {"cpu_moe_layers", c.cpuMoeLayers},
                            {"host_bytes", c.hostBytes},
                            {"tokens_per_second", c.tokensPerSecond},
                            {"command", c.command}});
        j["notes"] = plan.notes;
        text = j.dump(2) + "\n";
    } else {
        char line[512];
        std::snprintf(line, sizeof line, "%s on %d x %d %s, %d tokens x %d sequences:\n", servingEngineName(r.engine),
                      cluster.nodes, cluster.gpusPerNode, cluster.gpu.name.c_str(), r.contextTokens, r.sequences);
        text += line;
        for (const DeployChoice& c : plan.choices) {
            const std::string extra = c.ep > 1            ? " EP " + std::to_string(c.ep)
                                      : c.cpuMoeLayers > 0 ? " + experts of " + std::to_string(c.cpuMoeLayers) +
                                                                 " layers (" + humanBytes(c.hostBytes) + ") in RAM"
                                                           : std::string();
            std::snprintf(line, sizeof line, "  %-4s TP %-2d PP %-2d%s  weights %11s  KV %11s  %9s  %s\n",
                          c.fits ? "fits" : "", c.tp, c.pp, extra.c_str(),
                          humanBytes(c.weightsPerGpu).c_str(), humanBytes(c.kvPerGpu).c_str(),
                          c.fits ? (std::to_string(int(std::lround(c.tokensPerSecond))) + " tok/s").c_str() : "",
                          c.why.c_str());
            text += line;
        }
        const auto best = std::find_if(plan.choices.begin(), plan.choices.end(), [](const DeployChoice& c) { return c.fits; });
        text += best != plan.choices.end() ? "\nthe fastest that fits:\n" + best->command + "\n"
                                           : "\nno choice fits: more GPUs, larger ones, or a shorter context\n";
        for (const std::string& n : plan.notes)
            text += "note: " + n + "\n";
    }
    writeOutput(a, text);
    return 0;
}

} // namespace stowage::cli
