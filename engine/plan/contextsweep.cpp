// How a plan's memory grows with the context (kvcache.h ContextSweep).
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/moduledevices.h"
#include "stowage/units.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace stowage {

namespace {

// What the sweep needs of a map, worked out once: each device's weights, and
// the device each decoder layer's cache would live on.
struct MapLayers {
    std::map<Device, uint64_t> weights;
    std::vector<Device> layerDevice; // per layer module of the reserve's class, in tree order
};

MapLayers layersOf(const ModuleTree& tree, const DeviceMap& map, const std::string& layerClass)
{
    MapLayers out;
    out.weights = bytesPerDevice(tree, map);
    out.layerDevice = layerCacheDevices(tree, map, layerClass);
    return out;
}

KvReserve reserveAt(const ModelConfig& config, const ModuleTree& tree, int64_t context, int batch)
{
    const auto r = kvReserveFor(config, tree, int(std::min<int64_t>(context, 1LL << 30)), batch, *tree.dtype());
    if (!r)
        throw InputError(config.path(), "model_type '" + config.modelType() +
                                            "' is not a family whose attention shape Stowage knows");
    return *r;
}

uint64_t bytesAt(const ModelConfig& config, const ModuleTree& tree, const MapLayers& layers, const Device& device,
                 int64_t context, int batch, bool kvInRam)
{
    const auto held = layers.weights.find(device);
    uint64_t bytes = held == layers.weights.end() ? 0 : held->second;
    if (device.kind == Device::Disk)
        return bytes;
    const KvReserve r = reserveAt(config, tree, context, batch);
    uint64_t kv = 0;
    for (size_t i = 0; i < layers.layerDevice.size(); ++i) {
        const Device where = kvInRam ? Device::cpu() : layers.layerDevice[i];
        if (where == device)
            kv += i < r.layerBytes.size() ? r.layerBytes[i] : r.bytesPerLayer;
    }
    bytes += kv;
    return bytes > 0 ? bytes + r.activationBytes : 0; // a device that holds nothing computes nothing
}

// The first context in [1, maxContext] at which `device` holds more than
// `budget`; 0 when it does at context 1 with nothing but weights (they alone
// are over); nullopt when it never does.
std::optional<int64_t> crossing(const ModelConfig& config, const ModuleTree& tree, const MapLayers& layers,
                                const Device& device, double budget, int64_t maxContext, int batch, bool kvInRam)
{
    if (budget < 0)
        return std::nullopt;
    const auto held = layers.weights.find(device);
    if (held != layers.weights.end() && double(held->second) > budget)
        return 0;
    auto over = [&](int64_t c) { return double(bytesAt(config, tree, layers, device, c, batch, kvInRam)) > budget; };
    if (!over(maxContext))
        return std::nullopt;
    int64_t lo = 0, hi = maxContext; // over(lo) is false (or lo = 0), over(hi) is true
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (over(mid) ? hi : lo) = mid;
    }
    return hi;
}

} // namespace

std::vector<Device> layerCacheDevices(const ModuleTree& tree, const DeviceMap& map, const std::string& layerClass)
{
    // The execution device of offloaded layers: the map's lowest GPU (GPU 0
    // in every map the planner makes; transformers takes the first GPU the
    // map names, Stowage's runtime GPU 0).
    std::optional<Device> exec;
    for (const auto& [k, d] : map)
        if (d.kind == Device::Gpu && (!exec || d < *exec))
            exec = d;
    const ModuleDevices md = moduleDevices(tree, map);
    const auto& mods = tree.modules();
    std::vector<Device> out;
    for (size_t i = 0; i < mods.size(); ++i) {
        if (mods[i].className != layerClass)
            continue;
        // A layer split across devices, or one the map leaves out: where the
        // map sends the layer's name, else RAM.
        Device d = Device::cpu();
        if (md.code[i] >= 0)
            d = deviceFromCode(md.code[i]);
        else if (auto named = deviceFor(map, mods[i].name))
            d = *named;
        out.push_back(d.kind == Device::Gpu ? d : exec ? *exec : Device::cpu());
    }
    return out;
}

uint64_t deviceBytesAtContext(const ModelConfig& config, const ModuleTree& tree, const DeviceMap& map,
                              const Device& device, int64_t context, int batch, bool kvInRam)
{
    const KvReserve r = reserveAt(config, tree, 1, batch);
    return bytesAt(config, tree, layersOf(tree, map, r.layerClass), device, context, batch, kvInRam);
}

ContextSweep sweepContext(const ModelConfig& config, const ModuleTree& tree, const DeviceMap& map,
                          const Budgets& budgets, int batch, int64_t maxContext, int points)
{
    if (batch < 1 || maxContext < 1)
        throw InputError("context sweep", "the batch and the largest context must be at least 1");
    const KvReserve r = reserveAt(config, tree, 1, batch);
    const MapLayers layers = layersOf(tree, map, r.layerClass);
    ContextSweep s;
    s.batch = batch;
    s.maxContext = maxContext;
    std::vector<Device> devices;
    for (const auto& [d, b] : layers.weights)
        if (b > 0)
            devices.push_back(d);
    for (const DeviceBudget& b : budgets)
        if (std::find(devices.begin(), devices.end(), b.device) == devices.end() && b.device.kind != Device::Disk)
            devices.push_back(b.device);
    if (std::find(devices.begin(), devices.end(), Device::cpu()) == devices.end())
        devices.push_back(Device::cpu()); // where "KV in RAM" puts the cache
    std::sort(devices.begin(), devices.end());
    for (const Device& d : devices) {
        ContextSweep::DeviceRow row;
        row.device = d;
        const auto b = std::find_if(budgets.begin(), budgets.end(), [&](const DeviceBudget& x) { return x.device == d; });
        row.budget = b == budgets.end() || d.kind == Device::Disk ? -1 : b->bytes;
        const auto held = layers.weights.find(d);
        row.weights = held == layers.weights.end() ? 0 : held->second;
        row.runsOutAt = crossing(config, tree, layers, d, row.budget, maxContext, batch, false);
        row.runsOutAtKvInRam = crossing(config, tree, layers, d, row.budget, maxContext, batch, true);
        s.devices.push_back(row);
    }
    // Geometric steps from 1 to maxContext, rounded, without repeats.
    const int n = std::max(2, points);
    for (int i = 0; i < n; ++i) {
        const int64_t c = i == n - 1 ? maxContext
                                     : std::max<int64_t>(1, std::llround(std::pow(double(maxContext), double(i) / (n - 1))));
        if (s.contexts.empty() || c > s.contexts.back())
            s.contexts.push_back(c);
    }
    // and each crossing, so a line meets the budget where its dot is
    for (const ContextSweep::DeviceRow& d : s.devices)
        if (d.runsOutAt && *d.runsOutAt > 0)
            s.contexts.push_back(*d.runsOutAt);
    std::sort(s.contexts.begin(), s.contexts.end());
    s.contexts.erase(std::unique(s.contexts.begin(), s.contexts.end()), s.contexts.end());
    for (int64_t c : s.contexts) {
        std::vector<uint64_t> row;
        for (const ContextSweep::DeviceRow& d : s.devices)
            row.push_back(bytesAt(config, tree, layers, d.device, c, batch, false));
        s.bytes.push_back(row);
    }
    return s;
}

std::vector<std::string> describeContextSweep(const ContextSweep& s)
{
    std::vector<std::string> out;
    const std::string batch = " with batch " + std::to_string(s.batch);
    for (const ContextSweep::DeviceRow& d : s.devices) {
        if (d.budget < 0)
            continue;
        const std::string name = d.device.kind == Device::Gpu ? "GPU " + d.device.name() : "RAM";
        std::string line;
        if (d.runsOutAt && *d.runsOutAt == 0)
            line = name + " cannot hold its weights (" + humanBytes(d.weights) + " of " +
                   humanBytes(uint64_t(d.budget)) + ")";
        else if (!d.runsOutAt)
            line = name + " holds every context up to " + grouped(uint64_t(s.maxContext)) + batch;
        else
            line = name + " runs out at token " + grouped(uint64_t(*d.runsOutAt)) + batch;
        if (d.runsOutAtKvInRam != d.runsOutAt && !(d.runsOutAt && *d.runsOutAt == 0))
            line += "; " + (d.runsOutAtKvInRam ? grouped(uint64_t(*d.runsOutAtKvInRam))
                                                 : "beyond token " + grouped(uint64_t(s.maxContext))) +
                    " with the KV cache in RAM";
        out.push_back(line);
    }
    return out;
}

} // namespace stowage
