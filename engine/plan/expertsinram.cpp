// "experts_in_ram": a placement no Accelerate strategy gives for mixtures of
// experts. Everything a token always uses (embeddings, attention, norms,
// routers, shared experts, the head) goes to the GPUs first, in module order;
// the routed experts, of which a token reads only top-k, fill what GPU room
// is left by whole layers (each with its own layer's GPU) and then RAM, then
// the disk. llama.cpp users get the same with `-ot exps=CPU` /
// `--n-cpu-moe N`. The map has entries below the no-split layer, which
// from_pretrained accepts as a dict. Rules: docs/planner.md.
#include "plannerstate.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/planner.h"
#include "stowage/units.h"

#include <algorithm>
#include <functional>
#include <map>

namespace stowage {

namespace {

// The routed-expert modules: those holding fused expert parameters (Param::experts).
std::vector<bool> expertModules(const ModuleTree& tree)
{
    std::vector<bool> out(tree.modules().size(), false);
    for (size_t m = 0; m < tree.modules().size(); ++m)
        for (int p : tree.modules()[m].params)
            if (tree.params()[size_t(p)].experts > 0)
                out[m] = true;
    return out;
}

bool holdsExperts(const ModuleTree& tree, const std::vector<bool>& experts, int m)
{
    for (int i = m; i < tree.modules()[size_t(m)].end; ++i)
        if (experts[size_t(i)])
            return true;
    return false;
}

// Map entries for module `m` with its experts on `away` and the rest on
// `home`: whole subtrees where they hold no experts, their own tensors by
// name where they do.
void emit(const ModuleTree& tree, const std::vector<bool>& experts, int m, Device home, Device away, DeviceMap& map)
{
    const Module& mod = tree.modules()[size_t(m)];
    if (experts[size_t(m)]) {
        map.emplace_back(mod.name, away);
        return;
    }
    if (!holdsExperts(tree, experts, m) || home == away) {
        if (mod.bytes > 0 || mod.paramCount > 0)
            map.emplace_back(mod.name, home);
        return;
    }
    for (int p : mod.params)
        if (!tree.params()[size_t(p)].duplicate)
            map.emplace_back(tree.params()[size_t(p)].name, home);
    for (int b : mod.buffers)
        map.emplace_back(tree.buffers()[size_t(b)].name, home);
    for (int c : mod.children)
        emit(tree, experts, c, home, away, map);
}

} // namespace

Plan planExpertsInRam(const ModuleTree& tree, const Budgets& given, const std::optional<KvReserve>& kv)
{
    const std::vector<bool> experts = expertModules(tree);
    if (std::none_of(experts.begin(), experts.end(), [](bool e) { return e; }))
        throw InputError("experts_in_ram", "model_type '" + tree.modelType() +
                                               "' has no routed experts: use auto, balanced or sequential");
    // The devices in order: GPUs by index, then RAM, then the disk (unbudgeted).
    Budgets order;
    for (const DeviceBudget& b : given)
        if (b.device.kind == Device::Gpu)
            order.push_back(b);
    std::sort(order.begin(), order.end(), [](const DeviceBudget& a, const DeviceBudget& b) { return a.device < b.device; });
    for (const DeviceBudget& b : given)
        if (b.device.kind == Device::Cpu)
            order.push_back(b);
    order.push_back({Device::disk(), -1});
    std::vector<double> used(order.size(), 0);
    auto fits = [&](size_t d, double bytes) { return order[d].bytes < 0 || used[d] + bytes <= order[d].bytes; };

    // The units placed in turn: the root's children down to the no-split
    // layers (a layer is one unit of its dense part, its experts apart).
    const auto& mods = tree.modules();
    const auto isLayer = [&](int m) {
        const auto& ns = tree.noSplitClasses();
        return std::find(ns.begin(), ns.end(), mods[size_t(m)].className) != ns.end();
    };
    std::vector<int> units;
    std::function<void(int)> collect = [&](int m) {
        if (isLayer(m) || !holdsExperts(tree, experts, m)) {
            units.push_back(m);
            return;
        }
        for (int c : mods[size_t(m)].children)
            collect(c);
    };
    for (int c : mods[0].children)
        collect(c);
    // A layer's KV cache weighs on its dense part (attention computes there).
    const auto layers = kv && kv->bytesPerLayer > 0 ? detail::layerKv(tree, *kv)
                                                    : std::vector<std::pair<int, uint64_t>>{};
    std::vector<uint64_t> layerKv(mods.size(), 0);
    for (const auto& [m, bytes] : layers)
        layerKv[size_t(m)] = bytes;

    // Each unit's routed experts. A layer whose experts are not on its GPU
    // has the ones its router picks copied to the execution GPU (the first)
    // while it runs: top-k a token when decoding, but a prompt's tokens
    // together pick most of a layer's (qwen3_moe's 4 prompt tokens took 16 of
    // 32 in tests/bench/bench_moe.py). So that GPU keeps room for one whole
    // layer's experts.
    std::vector<uint64_t> expertBytes(mods.size(), 0); // per unit
    uint64_t routedRoom = 0;
    for (int u : units) {
        for (int i = u; i < mods[size_t(u)].end; ++i)
            if (experts[size_t(i)])
                expertBytes[size_t(u)] += mods[size_t(i)].bytes;
        routedRoom = std::max(routedRoom, expertBytes[size_t(u)]);
    }
    const bool anyGpu = order.front().device.kind == Device::Gpu; // the disk is always last
    if (anyGpu && order.front().bytes >= 0)
        order.front().bytes = std::max(0.0, order.front().bytes - double(routedRoom));

    // Pass 1: the dense parts, in module order, never going back a device.
    std::vector<size_t> home(mods.size(), 0);
    size_t cur = 0;
    for (int u : units) {
        const double dense = double(mods[size_t(u)].bytes - expertBytes[size_t(u)] + layerKv[size_t(u)]);
        while (!fits(cur, dense))
            ++cur;
        used[cur] += dense;
        home[size_t(u)] = cur;
    }
    // Pass 2: each layer's experts, whole: on its own GPU while there is
    // room, else in RAM, else on disk.
    size_t ramOrDisk = 0;
    while (order[ramOrDisk].device.kind == Device::Gpu)
        ++ramOrDisk;
    std::vector<size_t> away(mods.size(), 0);
    int onGpu = 0, withExperts = 0;
    for (int u : units) {
        if (expertBytes[size_t(u)] == 0)
            continue;
        ++withExperts;
        const double bytes = double(expertBytes[size_t(u)]);
        size_t d = home[size_t(u)];
        if (order[d].device.kind != Device::Gpu || !fits(d, bytes)) {
            d = std::max(d, ramOrDisk);
            while (!fits(d, bytes))
                ++d;
        } else
            ++onGpu;
        used[d] += bytes;
        away[size_t(u)] = d;
    }

    DeviceMap map;
    for (int u : units)
        emit(tree, experts, u, order[home[size_t(u)]].device, order[away[size_t(u)]].device, map);
    cleanDeviceMap(map);
    Plan plan = planFromDeviceMap(tree, map, "experts_in_ram: the dense part first on the GPUs, the routed experts after");
    for (PlanEntry& e : plan.entries) {
        const int m = tree.find(e.module);
        if (m >= 0 && experts[size_t(m)])
            e.why = e.device.kind == Device::Gpu
                        ? "routed experts kept on " + e.device.name() + " beside their layer: room was left after every dense part"
                        : "routed experts to " + e.device.name() + ": a token reads only the ones its router picks";
        else
            e.why = e.device.kind == Device::Gpu ? "used by every token: on the GPUs first"
                                                 : "used by every token, but the GPUs were full";
    }
    // Each cache where its layer computes (layerCacheDevices: a layer split
    // over a GPU and RAM computes on the execution GPU).
    std::map<Device, uint64_t> cacheAt;
    if (!layers.empty()) {
        const std::vector<Device> where = layerCacheDevices(tree, map, kv->layerClass);
        for (size_t l = 0; l < layers.size() && l < where.size(); ++l)
            cacheAt[where[l]] += layers[l].second;
    }
    for (DeviceTotal& t : plan.devices) {
        for (const DeviceBudget& b : given)
            if (b.device == t.device)
                t.budget = b.bytes;
        t.reservedKv = cacheAt.count(t.device) ? cacheAt[t.device] : 0;
        t.reservedLayer = anyGpu && t.device == order.front().device ? routedRoom : 0;
        t.reserved = t.reservedLayer + t.reservedKv;
    }
    plan.budgets = given;
    if (anyGpu && routedRoom > 0)
        plan.notes.push_back("kept " + grouped(routedRoom) + " bytes on " + order.front().device.name() +
                             " for one layer's routed experts, copied there from RAM or disk as the router picks "
                             "them (a prompt picks most of them)");
    plan.notes.push_back("experts_in_ram: " + std::to_string(onGpu) + " of " + std::to_string(withExperts) +
                         " layers keep their routed experts on a GPU; the rest are in RAM or on disk");
    return plan;
}

} // namespace stowage
