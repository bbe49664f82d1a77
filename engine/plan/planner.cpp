// transformers 5.6's _get_device_map (its own get_max_memory,
// get_balanced_memory and infer_auto_device_map) and, as the second
// reference, Accelerate 1.13's load_checkpoint_and_dispatch path; the rules
// are in docs/planner.md.
#include "stowage/planner.h"

#include "balance.h"
#include "plannerstate.h"
#include "stowage/units.h"
#include "stowage/error.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace stowage {

std::optional<Strategy> strategyFromName(const std::string& n)
{
    if (n == "auto")
        return Strategy::Auto;
    if (n == "balanced")
        return Strategy::Balanced;
    if (n == "balanced_low_0")
        return Strategy::BalancedLow0;
    if (n == "sequential")
        return Strategy::Sequential;
    return std::nullopt;
}

const char* strategyName(Strategy s)
{
    switch (s) {
    case Strategy::Auto: return "auto";
    case Strategy::Balanced: return "balanced";
    case Strategy::BalancedLow0: return "balanced_low_0";
    case Strategy::Sequential: return "sequential";
    }
    return "?";
}

Plan planDeviceMap(const ModuleTree& given, const PlanOptions& options)
{
    // Sizes follow the reference; a tree built for the other one is resized
    // on a copy (the CLI and the GUI build it for the right one already).
    std::optional<ModuleTree> resized;
    if (given.reference() != options.reference) {
        resized = given;
        resized->setSizing(given.dtype(), options.reference);
    }
    const ModuleTree& tree = resized ? *resized : given;
    detail::Sizes sizes(tree, options);
    Plan plan;
    plan.reference = options.reference;
    Budgets mm = options.maxMemory ? normalizeBudgets(*options.maxMemory) : normalizeBudgets(options.machineMemory);
    if (!options.maxMemory && options.reference == Reference::Transformers)
        // transformers' get_max_memory keeps 10% of the RAM free when nobody gave budgets.
        for (auto& b : mm)
            if (b.device.kind == Device::Cpu) {
                b.bytes = b.bytes * 0.9;
                plan.notes.push_back("no budget given: planning with 90% of the available RAM");
            }
    if (options.strategy != Strategy::Sequential)
        mm = detail::balancedMemory(tree, sizes, mm, !options.maxMemory, options.strategy == Strategy::BalancedLow0,
                                    &plan.notes);
    plan.budgets = mm;
    if (options.kv)
        for (auto& b : mm)
            if (b.device.kind != Device::Disk && options.kv->activationBytes > 0) {
                b.bytes = std::max(0.0, b.bytes - double(options.kv->activationBytes));
                plan.notes.push_back("kept " + grouped(options.kv->activationBytes) + " bytes on " +
                                     b.device.name() + " for the largest activation");
            }
    detail::Placer placer(tree, sizes, mm);
    placer.run();
    plan.deviceMap = placer.rawMap();
    cleanDeviceMap(plan.deviceMap);
    placer.explain(plan);
    return plan;
}

void cleanDeviceMap(DeviceMap& map)
{
    // Recursive merge as Accelerate's clean_device_map; children are visited in
    // first-appearance order (Python visits a set, which only matters when two
    // siblings merge at once).
    std::function<void(const std::string&)> clean = [&](const std::string& module) {
        const std::string prefix = module.empty() ? "" : module + ".";
        auto under = [&](const std::string& k) { return prefix.empty() || k.rfind(prefix, 0) == 0; };
        std::vector<Device> vals;
        for (const auto& [k, d] : map)
            if (under(k))
                vals.push_back(d);
        bool same = vals.size() > 1 && std::all_of(vals.begin(), vals.end(), [&](const Device& d) { return d == vals[0]; });
        if (same) {
            Device d = vals[0];
            map.erase(std::remove_if(map.begin(), map.end(), [&](const auto& e) { return under(e.first); }), map.end());
            map.emplace_back(module, d);
        }
        const size_t depth = module.empty() ? 1 : size_t(std::count(module.begin(), module.end(), '.')) + 2;
        std::vector<std::string> kids;
        for (const auto& [k, d] : map) {
            if (!under(k) || k.size() <= module.size())
                continue;
            // the first `depth` dotted parts of k
            size_t pos = std::string::npos, from = 0;
            for (size_t i = 0; i < depth; ++i) {
                pos = k.find('.', from);
                if (pos == std::string::npos)
                    break;
                from = pos + 1;
            }
            std::string child = pos == std::string::npos ? k : k.substr(0, pos);
            // A key starting with '.' would make the root its own child: skip it
            // (Accelerate recurses until RecursionError there).
            if (child.size() > module.size() && std::find(kids.begin(), kids.end(), child) == kids.end())
                kids.push_back(child);
        }
        for (const auto& c : kids)
            clean(c);
    };
    clean("");
}

bool isUnder(const std::string& name, const std::string& module)
{
    return module.empty() || name == module || name.rfind(module + ".", 0) == 0;
}

std::optional<Device> deviceFor(const DeviceMap& map, const std::string& name)
{
    std::optional<Device> best;
    size_t bestLen = 0;
    for (const auto& [k, d] : map) {
        if (isUnder(name, k) && (!best || k.size() >= bestLen)) {
            best = d;
            bestLen = k.size();
        }
    }
    return best;
}

std::map<Device, uint64_t> bytesPerDevice(const ModuleTree& tree, const DeviceMap& map, bool buffers)
{
    std::map<Device, uint64_t> used;
    for (const auto& p : tree.params())
        if (auto d = deviceFor(map, p.name))
            used[*d] += tree.paramBytes(p);
    if (buffers)
        for (const auto& b : tree.buffers())
            if (auto d = deviceFor(map, b.name))
                used[*d] += tree.bufferBytes(b);
    return used;
}

Plan planFromDeviceMap(const ModuleTree& tree, const DeviceMap& map, const std::string& why)
{
    Plan plan;
    plan.reference = tree.reference();
    plan.deviceMap = map;
    for (const auto& [key, dev] : map) {
        uint64_t bytes = 0;
        if (const int m = tree.find(key); m >= 0)
            bytes = tree.modules()[static_cast<size_t>(m)].bytes;
        else if (const int p = tree.findParam(key); p >= 0)
            bytes = tree.paramBytes(tree.params()[static_cast<size_t>(p)]);
        plan.entries.push_back({key, dev, bytes, why});
    }
    for (const auto& [d, u] : bytesPerDevice(tree, map))
        plan.devices.push_back({d, -1, u, 0});
    return plan;
}

} // namespace stowage
