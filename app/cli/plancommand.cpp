// stowage-cli plan: the device map transformers would compute, with
// explanations, KV-cache-aware budgets and a speed estimate.
#include "args.h"
#include "commands.h"
#include "format.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/planner.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace stowage::cli {
namespace {

HardwareProfile hardwareFor(const Args& a)
{
    auto h = a.value("--hardware");
    if (!h)
        return measureThisMachine();
    if (h->size() > 5 && h->substr(h->size() - 5) == ".json")
        return profileFromJson(readFile(*h), *h);
    return hardwarePreset(*h);
}

nlohmann::ordered_json costJson(const CostEstimate& c, const HardwareProfile& hw, ExecutionPolicy policy)
{
    nlohmann::ordered_json j;
    j["hardware"] = hw.name;
    j["policy"] = policy == ExecutionPolicy::AccelerateLike ? "accelerate-like"
                  : policy == ExecutionPolicy::Prefetch   ? "prefetch"
                                                          : "compute-where-it-lives";
    j["seconds_per_token"] = c.secondsPerToken;
    j["tokens_per_second"] = c.tokensPerSecond;
    auto& ds = j["devices"] = nlohmann::ordered_json::array();
    for (const auto& d : c.devices)
        ds.push_back({{"device", d.device.name()}, {"weight_bytes", d.weightBytes}, {"seconds", d.seconds},
                      {"share", d.share}, {"bottleneck", d.bottleneck}});
    return j;
}

} // namespace

int planCommand(const std::vector<std::string>& argv)
{
    auto valued = planValuedOptions();
    valued.insert({"-o", "--report", "--device-map", "--hardware"});
    auto flags = planFlagOptions();
    flags.insert({"--json", "--explain"});
    Args a(argv, valued, flags);
    Checkpoint ck = Checkpoint::open(checkpointPath(a));
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a));

    PlanOptions o = planOptionsFromArgs(a, ck, tree);
    Plan plan;
    std::vector<std::string> warnings;
    if (auto mapFile = a.value("--device-map")) {
        // Check the user's map instead of computing one.
        plan.deviceMap = loadDeviceMap(*mapFile, tree, &warnings);
        std::map<Device, uint64_t> used;
        for (const auto& p : tree.params())
            used[*deviceFor(plan.deviceMap, p.name)] += tree.paramBytes(p);
        for (const auto& [k, d] : plan.deviceMap)
            plan.entries.push_back({k, d, 0, "given in " + *mapFile});
        for (const auto& [d, u] : used)
            plan.devices.push_back({d, -1, u, 0});
    } else {
        plan = planDeviceMap(tree, o);
    }
    for (const auto& w : warnings)
        std::fprintf(stderr, "stowage-cli: warning: %s\n", w.c_str());

    const std::string mapJson = deviceMapToJson(plan.deviceMap);
    if (auto out = a.value("-o"))
        writeFile(*out, mapJson + "\n");
    if (auto report = a.value("--report")) {
        nlohmann::ordered_json r;
        r["checkpoint"] = ck.weightsPath();
        r["dtype"] = dtypeTorchName(*tree.dtype());
        r["strategy"] = strategyName(o.strategy);
        r["device_map"] = nlohmann::ordered_json::parse(mapJson);
        auto& es = r["entries"] = nlohmann::ordered_json::array();
        for (const auto& e : plan.entries)
            es.push_back({{"module", e.module}, {"device", e.device.name()}, {"bytes", e.bytes}, {"why", e.why}});
        auto& ds = r["devices"] = nlohmann::ordered_json::array();
        for (const auto& d : plan.devices)
            ds.push_back({{"device", d.device.name()}, {"budget", d.budget < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(d.budget)},
                          {"used", d.used}, {"reserved", d.reserved}});
        r["notes"] = plan.notes;
        if (o.kv)
            r["kv_cache"] = {{"context", o.kv->context}, {"batch", o.kv->batch},
                             {"bytes_per_layer", o.kv->bytesPerLayer}, {"activation_bytes", o.kv->activationBytes}};
        HardwareProfile hw = hardwareFor(a);
        std::vector<std::pair<Device, uint64_t>> placement;
        for (const auto& d : plan.devices)
            placement.emplace_back(d.device, d.used);
        auto& costs = r["cost"] = nlohmann::ordered_json::array();
        for (auto pol : {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch, ExecutionPolicy::ComputeWhereItLives})
            costs.push_back(costJson(estimateDecode(placement, 2 * tree.root().paramCount, hw, pol), hw, pol));
        writeFile(*report, r.dump(2) + "\n");
    }
    if (a.flag("--json")) {
        std::cout << mapJson << '\n';
        return 0;
    }

    std::printf("device map (%s, %s) for %s\n", strategyName(o.strategy), dtypeTorchName(*tree.dtype()),
                ck.weightsPath().c_str());
    for (const auto& e : plan.entries) {
        std::printf("  %-48s %-5s %12s\n", e.module.empty() ? "(whole model)" : e.module.c_str(), e.device.name().c_str(),
                    e.bytes ? humanBytes(e.bytes).c_str() : "");
        if (a.flag("--explain"))
            std::printf("      %s\n", e.why.c_str());
    }
    std::printf("devices:\n");
    for (const auto& d : plan.devices)
        std::printf("  %-5s budget %12s  weights %12s  kept free %12s\n", d.device.name().c_str(),
                    d.budget < 0 ? "unlimited" : humanBytes(uint64_t(d.budget)).c_str(), humanBytes(d.used).c_str(),
                    humanBytes(d.reserved).c_str());
    if (a.flag("--explain"))
        for (const auto& n : plan.notes)
            std::printf("note: %s\n", n.c_str());
    return 0;
}

} // namespace stowage::cli
