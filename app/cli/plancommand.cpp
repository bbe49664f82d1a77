// stowage-cli plan: the device map transformers would compute, with
// explanations, KV-cache-aware budgets and a speed estimate.
#include "args.h"
#include "commands.h"
#include "stowage/units.h"
#include "planoptions.h"

#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/gpuorder.h"
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
    return h ? hardwareFromSpec(*h) : measureThisMachine();
}

const ExecutionPolicy kPolicies[] = {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch,
                                     ExecutionPolicy::ComputeWhereItLives};

// plan --context-sweep: the plan's memory per device as the context grows.
nlohmann::ordered_json contextSweepJson(const ContextSweep& s)
{
    nlohmann::ordered_json j;
    j["batch"] = s.batch;
    j["max_context"] = s.maxContext;
    auto orNull = [](const std::optional<int64_t>& v) { return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(); };
    auto& ds = j["devices"] = nlohmann::ordered_json::array();
    for (const auto& d : s.devices)
        ds.push_back({{"device", d.device.name()},
                      {"budget", d.budget < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(d.budget)},
                      {"weights", d.weights},
                      {"runs_out_at", orNull(d.runsOutAt)},
                      {"runs_out_at_kv_in_ram", orNull(d.runsOutAtKvInRam)}});
    auto& ps = j["points"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < s.contexts.size(); ++i) {
        nlohmann::ordered_json bytes = nlohmann::ordered_json::object();
        for (size_t d = 0; d < s.devices.size(); ++d)
            bytes[s.devices[d].device.name()] = s.bytes[i][d];
        ps.push_back({{"context", s.contexts[i]}, {"bytes", bytes}});
    }
    j["summary"] = describeContextSweep(s);
    return j;
}

} // namespace

int planCommand(const std::vector<std::string>& argv)
{
    auto valued = planValuedOptions();
    valued.insert({"-o", "--report", "--device-map", "--hardware", "--context-sweep", "--gpu-order"});
    auto flags = planFlagOptions();
    flags.insert({"--json", "--explain"});
    Args a(argv, valued, flags);
    Checkpoint ck = Checkpoint::open(checkpointPath(a));
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a), parseReferenceOption(a));

    PlanOptions o = planOptionsFromArgs(a, ck, tree);
    if (const Quantization* q = tree.quantization()) // sized as the quantizer leaves it on the target, everywhere below
        tree.setQuantApplied(quantDecision(*q, o.quantTarget).applied);
    // Measured (or loaded) once, only when a report or an explanation needs it.
    std::optional<HardwareProfile> hw;
    auto hardware = [&]() -> const HardwareProfile& {
        if (!hw)
            hw = hardwareFor(a);
        return *hw;
    };
    if (a.value("--hardware"))
        hardware(); // a bad preset name or profile file is an input error even if unused
    Plan plan;
    std::vector<std::string> warnings;
    if (auto mapFile = a.value("--device-map")) {
        // Check the user's map instead of computing one.
        const DeviceMap map = loadDeviceMap(*mapFile, tree, &warnings);
        if (o.maxMemory) {
            // Budgets given: the map must fit the devices they name, as the window checks an imported map.
            const MapCheck fits = checkDeviceMapFits(tree, map, *o.maxMemory);
            if (!fits.errors.empty())
                throw InputError(*mapFile, fits.errors[0]);
            warnings.insert(warnings.end(), fits.warnings.begin(), fits.warnings.end());
        }
        plan = planFromDeviceMap(tree, map, "given in " + *mapFile);
    } else {
        const auto order = a.value("--gpu-order");
        plan = order ? planInGpuOrder(tree, o, parseGpuOrder(*order, "--gpu-order " + *order)) : planDeviceMap(tree, o);
    }
    if (!plan.refusal.empty())
        warnings.push_back(plan.refusal);
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
        r["reference"] = referenceName(o.reference);
        r["device_map"] = nlohmann::ordered_json::parse(mapJson);
        auto& es = r["entries"] = nlohmann::ordered_json::array();
        for (const auto& e : plan.entries)
            es.push_back({{"module", e.module}, {"device", e.device.name()}, {"bytes", e.bytes}, {"why", e.why}});
        auto& ds = r["devices"] = nlohmann::ordered_json::array();
        for (const auto& d : plan.devices)
            ds.push_back({{"device", d.device.name()}, {"budget", d.budget < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(d.budget)},
                          {"used", d.used}, {"reserved", d.reserved}});
        r["notes"] = plan.notes;
        if (!plan.quantization.empty())
            r["quantization"] = plan.quantization;
        if (!plan.refusal.empty())
            r["refused_by_transformers"] = plan.refusal;
        if (o.kv)
            r["kv_cache"] = {{"context", o.kv->context}, {"batch", o.kv->batch},
                             {"bytes_per_layer", o.kv->bytesPerLayer}, {"activation_bytes", o.kv->activationBytes}};
        if (o.kv && !o.kv->layerBytes.empty()) // layers that differ: each one's (bytes_per_layer is the largest)
            r["kv_cache"]["layer_bytes"] = o.kv->layerBytes;
        auto& costs = r["cost"] = nlohmann::ordered_json::array();
        try {
            for (auto pol : kPolicies)
                costs.push_back(
                    costJson(estimateDecode(plan, tree, hardware(), pol), hardware(), pol));
        } catch (const InputError& e) {
            // e.g. a map with GPUs and this machine has none: the plan still stands
            costs = nlohmann::ordered_json::array({{{"error", e.what()}}});
        }
        writeFile(*report, r.dump(2) + "\n");
    }
    if (auto sweep = a.value("--context-sweep")) {
        // The largest context (and batch) to sweep to, against the budgets the plan was made for.
        const KvSpec spec = parseKvSpec(*sweep, "--context-sweep");
        if (!ck.config())
            throw InputError(ck.weightsPath(), "a context sweep needs config.json beside the weights");
        const Budgets budgets = !plan.budgets.empty() ? plan.budgets : o.maxMemory ? *o.maxMemory : o.machineMemory;
        const ContextSweep s = sweepContext(*ck.config(), tree, plan.deviceMap, budgets, spec.batch, spec.context);
        std::cout << contextSweepJson(s).dump(2) << '\n';
        return 0;
    }
    if (a.flag("--json")) {
        std::cout << mapJson << '\n';
        return 0;
    }

    std::printf("device map (%s, %s, %s reference) for %s\n", strategyName(o.strategy), dtypeTorchName(*tree.dtype()),
                referenceName(o.reference), ck.weightsPath().c_str());
    if (!plan.quantization.empty())
        std::printf("quantization: %s\n", plan.quantization.c_str());
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
    if (!a.flag("--explain"))
        return 0;
    std::printf("reference: %s\n", o.reference == Reference::Transformers
                                       ? "transformers 5.6 from_pretrained(device_map=...) with Accelerate 1.13"
                                       : "Accelerate 1.13 get_balanced_memory + infer_auto_device_map with dtype");
    for (const auto& n : plan.notes)
        if (n != plan.quantization) // printed above
            std::printf("note: %s\n", n.c_str());
    // Predicted decode speed on the hardware (--hardware, else this machine).
    std::printf("predicted decode on %s%s:\n", hardware().name.c_str(), hardware().simulated ? " (preset)" : "");
    for (auto pol : kPolicies) {
        CostEstimate c;
        try {
            c = estimateDecode(plan, tree, hardware(), pol);
        } catch (const InputError& e) {
            std::printf("  no prediction: %s (try --hardware PRESET, see stowage-cli hardware --list)\n", e.problem().c_str());
            break;
        }
        std::printf("  %-24s %10.3f tokens/s ", policyName(pol), c.tokensPerSecond);
        for (const auto& d : c.devices)
            std::printf(" %s %.0f%% (%s)", d.device.name().c_str(), 100.0 * d.share, d.bottleneck.c_str());
        if (c.fixedSeconds > 0)
            std::printf("  + %.2f ms fixed per token", c.fixedSeconds * 1e3);
        std::printf("\n");
        if (pol == ExecutionPolicy::ComputeWhereItLives) // the last: once per plan
            for (const auto& assumed : c.assumptions)
                std::printf("  assumed: %s\n", assumed.c_str());
    }
    return 0;
}

int hardwareCommand(const std::vector<std::string>& argv, const std::function<int()>& measureFixedCosts)
{
    Args a(argv, {"-o"}, {"--json", "--list", "--no-fixed-costs"});
    if (a.flag("--list")) {
        for (const auto& n : hardwarePresetNames())
            std::printf("%s\n", n.c_str());
        return 0;
    }
    // The positional argument is a preset name here, not a checkpoint.
    if (a.positional().empty() && !a.flag("--no-fixed-costs") && measureFixedCosts && measureFixedCosts() != 0)
        std::fprintf(stderr, "stowage-cli: warning: fixed costs per token and layer not measured\n");
    HardwareProfile hw = a.positional().empty() ? measureThisMachine({}, !a.flag("--no-fixed-costs"))
                                                : hardwarePreset(a.positional()[0]);
    const std::string json = profileToJson(hw);
    if (auto out = a.value("-o"))
        writeFile(*out, json + "\n");
    if (a.flag("--json") || !a.value("-o")) {
        if (a.flag("--json")) {
            std::cout << json << '\n';
            return 0;
        }
        std::printf("%s%s\n", hw.name.c_str(), hw.simulated ? " (preset)" : "");
        for (size_t i = 0; i < hw.gpus.size(); ++i)
            std::printf("  GPU %zu  %-24s %8s  %7.0f GB/s  host->GPU %5.1f GB/s pinned, %5.1f pageable\n", i,
                        hw.gpus[i].name.c_str(), humanBytes(hw.gpus[i].memoryBytes).c_str(),
                        hw.gpus[i].memoryBandwidth / 1e9, hw.gpus[i].h2dPinned / 1e9, hw.gpus[i].h2dPageable / 1e9);
        std::printf("  RAM    %s at %.1f GB/s, disk %.1f GB/s, CPU %.0f GFLOP/s", humanBytes(hw.ramBytes).c_str(),
                    hw.ramBandwidth / 1e9, hw.diskReadBandwidth / 1e9, hw.cpuFlops / 1e9);
        if (hw.cpuCacheBytes > 0)
            std::printf(", caches %s", humanBytes(hw.cpuCacheBytes).c_str());
        std::printf("\n");
        for (const auto& [policy, c] : hw.fixedCosts) {
            std::printf("  fixed costs %-23s %6.0f us per token, %5.0f us per layer, %5.0f us more per layer on disk",
                        policy.c_str(), c.perToken * 1e6, c.perUnit * 1e6, c.perDiskUnit * 1e6);
            if (c.perUnitFromRam > c.perUnit)
                std::printf(", %.0f us per layer past the caches", c.perUnitFromRam * 1e6);
            if (c.perExpert > 0)
                std::printf(", %.0f us per routed expert", c.perExpert * 1e6);
            if (c.copyBandwidth > 0)
                std::printf("; disk weights copied at %.1f GB/s", c.copyBandwidth / 1e9);
            for (size_t i = 0; i < c.copyRates.size(); ++i)
                std::printf("%s%.1f GB/s for %s weights%s", i == 0 ? " (" : ", ", c.copyRates[i].second / 1e9,
                            humanBytes(uint64_t(c.copyRates[i].first)).c_str(), i + 1 == c.copyRates.size() ? ")" : "");
            std::printf("\n");
        }
        if (!hw.sources.empty())
            std::printf("  %s\n", hw.sources.c_str()); // which figures are measured, which assumed
    }
    return 0;
}

} // namespace stowage::cli
