// Decode-speed estimate of a placement.
//
// The model is a roofline with no fitted constants: decoding one token reads
// every weight once and does ~2 FLOPs per parameter, so at batch size 1 each
// device's time is max(bytes / bandwidth, flops / FLOP/s), and the bandwidth
// that matters is whichever link those bytes cross on their way to the
// device that multiplies them. To that it adds what a step costs besides its
// bytes (operator dispatch, hooks, hand-offs: HardwareProfile::fixedCosts),
// per token and per execution unit, as the runtime measured them on this
// machine: without them a small model was predicted 10x too fast.
#include "stowage/costmodel.h"

#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/moduledevices.h"
#include "stowage/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace stowage {

const char* policyName(ExecutionPolicy p)
{
    switch (p) {
    case ExecutionPolicy::AccelerateLike: return "accelerate-like";
    case ExecutionPolicy::Prefetch: return "prefetch";
    case ExecutionPolicy::ComputeWhereItLives: return "compute-where-it-lives";
    }
    return "?";
}

std::optional<ExecutionPolicy> policyFromName(const std::string& n)
{
    for (auto p : {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch, ExecutionPolicy::ComputeWhereItLives})
        if (n == policyName(p))
            return p;
    return std::nullopt;
}

namespace {


// One part of a device's step time and what limits it.
struct Cost {
    double seconds = 0;
    std::string bottleneck;
};
// Work that overlaps (a copy hidden behind compute): the slowest part wins.
Cost overlap(std::initializer_list<Cost> parts)
{
    Cost out;
    for (const Cost& c : parts)
        if (c.seconds > out.seconds || out.bottleneck.empty())
            out = c;
    return out;
}
// Work that runs one after the other: times add, the largest names it.
Cost then(const Cost& a, const Cost& b)
{
    return {a.seconds + b.seconds, a.seconds >= b.seconds ? a.bottleneck : b.bottleneck};
}

// A hand-made profile with a zero rate would give inf; say which rate instead.
double rate(double value, const std::string& what, const HardwareProfile& p)
{
    if (!(value > 0) || !std::isfinite(value))
        throw InputError(p.name, what + " must be a positive number of per-second units to estimate decode speed");
    return value;
}

} // namespace

namespace {
CostEstimate estimateImpl(const std::vector<std::pair<Device, uint64_t>>& placement,
                          const std::vector<std::pair<Device, uint64_t>>& onDemand, uint64_t flopsPerToken,
                          const HardwareProfile& profile, ExecutionPolicy policy, uint64_t unitBytes, StepUnits units);
} // namespace

GpuProfile assumedGpu()
{
    GpuProfile g;
    g.name = "assumed PCIe 4.0 GPU (500 GB/s memory, 24 GB/s pinned copies)";
    g.memoryBytes = 24ULL << 30;
    g.memoryBandwidth = 500e9;
    g.h2dPinned = 24e9;
    g.h2dPageable = 12e9;
    g.flops = 50e12;
    return g;
}

double acceleratedCopyRate(const FixedCosts& c, double weightBytes)
{
    const auto& r = c.copyRates;
    if (r.empty())
        return c.copyBandwidth;
    if (weightBytes <= r.front().first)
        return r.front().second;
    for (size_t i = 1; i < r.size(); ++i)
        if (weightBytes <= r[i].first) { // seconds per byte, on the size's logarithm
            const double t = std::log(weightBytes / r[i - 1].first) / std::log(r[i].first / r[i - 1].first);
            return 1.0 / ((1.0 - t) / r[i - 1].second + t / r[i].second);
        }
    return r.back().second;
}

namespace {
// Bytes/s of accelerate-like's copy of disk weights into new CPU tensors:
// the rate timed for each weight's size where the step's disk weights are
// known (StepUnits::diskWeights), else for the largest timed size, else the
// profile's copy into fresh pages.
double copyRateOf(const HardwareProfile& profile, ExecutionPolicy policy, const StepUnits& units)
{
    const auto it = profile.fixedCosts.find(policyName(policy));
    if (it == profile.fixedCosts.end() || it->second.copyBandwidth <= 0)
        return profile.freshCopyBandwidth;
    // glibc maps an allocation above its largest dynamic mmap threshold
    // (32 MiB on 64-bit, mallopt(3)) afresh every time and unmaps it when
    // freed: a 7B model's weights (32-86 MiB) are copied into fresh pages
    // each token, whatever the smaller timed sizes met.
    constexpr double kAlwaysMapped = 32.0 * 1024 * 1024;
    double bytes = 0, seconds = 0;
    for (const auto& [size, total] : units.diskWeights) {
        bytes += double(total);
        seconds += double(total) / (double(size) > kAlwaysMapped && profile.freshCopyBandwidth > 0
                                        ? profile.freshCopyBandwidth
                                        : acceleratedCopyRate(it->second, double(size)));
    }
    return seconds > 0 ? bytes / seconds : it->second.copyBandwidth;
}
} // namespace

bool ramLayerRunsOnCpu(const HardwareProfile& profile, const GpuProfile& gpu)
{
    return 1.0 / profile.ramBandwidth < 1.0 / gpu.h2dPinned + 1.0 / gpu.memoryBandwidth;
}

CostEstimate estimateDecode(const std::vector<std::pair<Device, uint64_t>>& placement, uint64_t flopsPerToken,
                            const HardwareProfile& profile, ExecutionPolicy policy, uint64_t unitBytes,
                            StepUnits units)
{
    return estimateImpl(placement, {}, flopsPerToken, profile, policy, unitBytes, units);
}

namespace {

// `onDemand`: bytes per device read only once a router has picked them (the
// routed experts of a mixture of experts off the execution GPU): neither
// prefetched nor overlapped, each copied (or, under compute-where-it-lives,
// read in RAM) when its layer asks, then computed.
CostEstimate estimateImpl(const std::vector<std::pair<Device, uint64_t>>& placement,
                          const std::vector<std::pair<Device, uint64_t>>& onDemand, uint64_t flopsPerToken,
                          const HardwareProfile& profile, ExecutionPolicy policy, uint64_t unitBytes, StepUnits units)
{
    // Device order, duplicates merged, empty devices dropped: the planner may
    // report a device with no weights, and it costs nothing.
    std::map<Device, uint64_t> bytesOn, demandOn;
    uint64_t total = 0;
    for (const auto& [device, bytes] : placement) {
        if (bytes == 0)
            continue;
        bytesOn[device] += bytes;
        total += bytes;
    }
    for (const auto& [device, bytes] : onDemand) {
        if (bytes == 0)
            continue;
        demandOn[device] += bytes;
        bytesOn.emplace(device, 0); // a device for its share
        total += bytes;
    }
    CostEstimate est;
    if (total == 0)
        return est;

    const GpuProfile fallback = assumedGpu();
    auto gpuProfile = [&](int index) -> const GpuProfile& {
        const std::string said = "GPU " + std::to_string(index) + ": ";
        auto assume = [&](const std::string& text) {
            if (std::find(est.assumptions.begin(), est.assumptions.end(), said + text) == est.assumptions.end())
                est.assumptions.push_back(said + text);
        };
        if (profile.gpus.empty()) {
            assume("the profile '" + profile.name + "' has no GPU; costed as an " + fallback.name);
            return fallback;
        }
        const size_t i = std::min(static_cast<size_t>(std::max(index, 0)), profile.gpus.size() - 1);
        if (static_cast<size_t>(std::max(index, 0)) != i)
            assume("not in the profile '" + profile.name + "'; costed like GPU " + std::to_string(i) + " (" +
                   profile.gpus[i].name + ")");
        return profile.gpus[i];
    };
    // Like Accelerate, the first GPU of the map is the execution device: the
    // one offloaded layers are copied to and run on.
    std::optional<int> execGpu;
    if (bytesOn.begin()->first.kind == Device::Gpu)
        execGpu = bytesOn.begin()->first.index;

    // What the copies to the execution GPU add up to (prefetch): the copies
    // themselves (with the reads before them), and the GPU compute of the
    // copied bytes; and the compute of GPU-resident weights they may overlap.
    struct {
        double copy = 0, compute = 0, bytes = 0, resident = 0;
    } streamed;
    auto gpuCompute = [&](const GpuProfile& g, double bytes, double flops) {
        return overlap({{bytes / rate(g.memoryBandwidth, "GPU memory bandwidth", profile), "HBM read"},
                        {flops / rate(g.flops, "GPU FLOP/s", profile), "compute"}});
    };
    // The CPU streams weights at the RAM read rate, or at the rate its
    // matrix-vector products were measured at for the weights' dtype when
    // that is lower (bytes per parameter: flopsPerToken is 2 per parameter).
    const double bytesPerParam = flopsPerToken > 0 ? 2.0 * double(total) / double(flopsPerToken) : 0;
    const double gemv = bytesPerParam > 3 ? profile.cpuGemvF32 : bytesPerParam > 1.5 ? profile.cpuGemvBf16 : 0;
    auto cpuCompute = [&](double bytes, double flops) {
        const double ram = rate(profile.ramBandwidth, "RAM bandwidth", profile);
        return overlap({{bytes / (gemv > 0 ? std::min(ram, gemv) : ram), "RAM read"},
                        {flops / rate(profile.cpuFlops, "CPU FLOP/s", profile), "compute"}});
    };
    // Weights that sit in RAM at the start of a step.
    auto ramResident = [&](double bytes, double flops) -> Cost {
        if (!execGpu)
            return cpuCompute(bytes, flops);
        const GpuProfile& g = gpuProfile(*execGpu);
        if (policy == ExecutionPolicy::ComputeWhereItLives && ramLayerRunsOnCpu(profile, g))
            return cpuCompute(bytes, flops);
        if (policy == ExecutionPolicy::AccelerateLike) // copy, then compute: nothing overlaps
            return then({bytes / rate(g.h2dPageable, "pageable host-to-device bandwidth", profile), "PCIe pageable copy"},
                        gpuCompute(g, bytes, flops));
        // Prefetch: the next layer's copy runs while this one computes.
        const Cost copy{bytes / rate(g.h2dPinned, "pinned host-to-device bandwidth", profile), "PCIe pinned copy"};
        const Cost compute = gpuCompute(g, bytes, flops);
        streamed.copy += copy.seconds;
        streamed.compute += compute.seconds;
        streamed.bytes += bytes;
        return overlap({copy, compute});
    };

    // Weights on disk (header comment): from the page cache when the RAM and
    // disk parts fit in RAM together, else from the drive each token.
    uint64_t hostBytes = 0;
    for (const auto& [device, bytes] : bytesOn)
        if (device.kind != Device::Gpu)
            hostBytes += bytes + (demandOn.count(device) ? demandOn.at(device) : 0);
    const bool warm = profile.ramBytes > 0 && double(hostBytes) <= 0.8 * double(profile.ramBytes);
    auto diskResident = [&](double bytes, double flops) -> Cost {
        const Cost drive{bytes / rate(profile.diskReadBandwidth, "disk read bandwidth", profile), "disk read"};
        const double cacheRate = profile.pageCacheReadBandwidth > 0 ? profile.pageCacheReadBandwidth
                                                                    : rate(profile.ramBandwidth, "RAM bandwidth", profile) / 2;
        const Cost cached{bytes / cacheRate, "page-cache read"};
        // In place from the mapping, on the CPU: without a GPU to compute on,
        // or under compute-where-it-lives when the CPU reads faster than the
        // link copies (the runtime's WeightStore::setOrder).
        const bool inPlace = !execGpu || (policy == ExecutionPolicy::ComputeWhereItLives &&
                                          ramLayerRunsOnCpu(profile, gpuProfile(*execGpu)));
        if (inPlace && policy != ExecutionPolicy::AccelerateLike)
            return warm ? cpuCompute(bytes, flops) : overlap({drive, cpuCompute(bytes, flops)});
        // A new CPU tensor per weight per token: the rate the runtime was
        // timed copying at (FixedCosts::copyBandwidth), else a copy into
        // fresh pages throughout (the profile's, the slowest case).
        const double fresh = copyRateOf(profile, policy, units);
        if (!execGpu && warm && fresh > 0)
            return then({bytes / std::min(cacheRate, fresh), "copy into fresh memory"}, cpuCompute(bytes, flops));
        const Cost read = warm ? cached : drive;
        const double copiedBefore = streamed.copy;
        const Cost c = then(read, ramResident(bytes, flops)); // copied out, then as RAM-resident
        if (streamed.copy > copiedBefore) // on to the GPU: the prefetcher reads, then copies
            streamed.copy += read.seconds;
        return c;
    };

    // Routed experts off the execution GPU, once the router has picked them
    // (the runtime's WeightStore::expert): nothing overlaps them.
    auto demanded = [&](const Device& device, double bytes, double flops) -> Cost {
        if (!execGpu)
            return device.kind == Device::Disk ? diskResident(bytes, flops) : cpuCompute(bytes, flops);
        const GpuProfile& g = gpuProfile(*execGpu);
        if (device.kind == Device::Cpu && policy == ExecutionPolicy::ComputeWhereItLives && ramLayerRunsOnCpu(profile, g))
            return cpuCompute(bytes, flops); // multiplied in RAM where they live
        const bool pageable = policy == ExecutionPolicy::AccelerateLike;
        Cost run = then({bytes / rate(pageable ? g.h2dPageable : g.h2dPinned, "host-to-device bandwidth", profile),
                         pageable ? "PCIe pageable copy" : "PCIe pinned copy"},
                        gpuCompute(g, bytes, flops));
        if (device.kind == Device::Disk) {
            const double cacheRate = profile.pageCacheReadBandwidth > 0
                                         ? profile.pageCacheReadBandwidth
                                         : rate(profile.ramBandwidth, "RAM bandwidth", profile) / 2;
            run = then(warm ? Cost{bytes / cacheRate, "page-cache read"}
                            : Cost{bytes / rate(profile.diskReadBandwidth, "disk read bandwidth", profile), "disk read"},
                       run);
        }
        return run;
    };

    for (const auto& [device, bytes] : bytesOn) {
        const double b = static_cast<double>(bytes);
        // Compute splits like the bytes: FLOPs per weight are about uniform.
        const double flops = static_cast<double>(flopsPerToken) * b / static_cast<double>(total);
        Cost c; // nothing but routed experts here when bytes is 0
        if (bytes > 0) {
            switch (device.kind) {
            case Device::Gpu:
                // GPUs of a split map run one after another (pipeline without
                // overlap at batch 1), so their times add; the hidden state that
                // hops between them is kilobytes, microseconds, left out.
                c = gpuCompute(gpuProfile(device.index), b, flops);
                if (execGpu && device.index == *execGpu)
                    streamed.resident += c.seconds;
                break;
            case Device::Cpu:
                c = ramResident(b, flops);
                break;
            case Device::Disk:
                c = diskResident(b, flops);
                break;
            }
        }
        if (auto d = demandOn.find(device); d != demandOn.end()) {
            const double db = static_cast<double>(d->second);
            c = then(c, demanded(device, db, static_cast<double>(flopsPerToken) * db / static_cast<double>(total)));
        }
        DeviceShare share;
        share.device = device;
        share.weightBytes = bytes + (demandOn.count(device) ? demandOn.at(device) : 0);
        share.seconds = c.seconds;
        share.bottleneck = c.bottleneck;
        est.devices.push_back(share);
        est.secondsPerToken += c.seconds;
    }
    const double summed = est.secondsPerToken;
    if (unitBytes > 0 && streamed.copy > 0) {
        // The copies run beside the execution GPU's compute (header comment).
        const double unit = std::min(1.0, double(unitBytes) / streamed.bytes);
        const double serial = streamed.resident + std::max(streamed.copy, streamed.compute);
        // One unit copied: the copy for the next token waits until it has
        // run (the same weights), so its compute overlaps no copy (the
        // simulated half-GPU map in docs/PERFORMANCE.md: one 810 MB layer).
        const double pipelined =
            unit >= 1.0 ? std::max(streamed.copy, streamed.resident) + streamed.compute
                        : std::max({streamed.copy, streamed.resident + streamed.compute,
                                    serial - unit * std::max(0.0, streamed.copy - streamed.compute)});
        est.secondsPerToken -= serial - pipelined;
    }
    // What a step costs besides its bytes (HardwareProfile::fixedCosts).
    if (auto it = profile.fixedCosts.find(policyName(policy)); it != profile.fixedCosts.end()) {
        const FixedCosts& f = it->second;
        // Weights past the CPU's caches: every unit's products start cold.
        const bool fromRam = profile.cpuCacheBytes > 0 && double(total) > double(profile.cpuCacheBytes);
        const double perUnit = fromRam ? std::max(f.perUnit, f.perUnitFromRam) : f.perUnit;
        est.fixedSeconds = f.perToken + perUnit * std::max(units.total, 0) + f.perDiskUnit * std::max(units.onDisk, 0) +
                           f.perExpert * double(std::max<int64_t>(units.experts, 0));
        est.secondsPerToken += est.fixedSeconds;
    }
    for (auto& d : est.devices)
        d.share = summed > 0 ? d.seconds / summed : 0;
    est.tokensPerSecond = est.secondsPerToken > 0 ? 1.0 / est.secondsPerToken : 0;
    return est;
}

} // namespace

CostEstimate estimateDecode(const Plan& plan, uint64_t flopsPerToken, const HardwareProfile& profile,
                            ExecutionPolicy policy, StepUnits units)
{
    std::vector<std::pair<Device, uint64_t>> placement;
    uint64_t unit = 0;
    for (const DeviceTotal& d : plan.devices) {
        placement.emplace_back(d.device, d.used);
        unit = std::max(unit, d.reservedLayer);
    }
    return estimateDecode(placement, flopsPerToken, profile, policy, unit, units);
}

StepUnits stepUnits(const ModuleTree& tree, const DeviceMap& map)
{
    StepUnits u;
    const ModuleDevices where = moduleDevices(tree, map);
    for (const std::string& name : executionUnits(tree)) {
        ++u.total;
        const int m = tree.find(name);
        if (m < 0)
            continue;
        // A unit split across devices (MixedCode) counts as on disk when any
        // module under it is: its step waits for that fetch.
        const int code = where.code[size_t(m)];
        bool disk = code == DiskCode;
        if (code == MixedCode)
            for (int i = m + 1; i < tree.modules()[size_t(m)].end && !disk; ++i)
                disk = where.code[size_t(i)] == DiskCode;
        u.onDisk += disk ? 1 : 0;
        // Its weights on disk by size: accelerate-like copies each, at a rate of its size.
        for (int i = m; disk && i < tree.modules()[size_t(m)].end; ++i)
            if (where.code[size_t(i)] == DiskCode)
                for (int pi : tree.modules()[size_t(i)].params) {
                    const Param& p = tree.params()[size_t(pi)];
                    if (!p.duplicate && tree.exists(p))
                        u.diskWeights[tree.paramBytes(p)] += tree.paramBytes(p);
                }
        // A mixture-of-experts layer computes the router's top-k experts.
        bool routed = false;
        for (int i = m; i < tree.modules()[size_t(m)].end && !routed; ++i)
            for (int pi : tree.modules()[size_t(i)].params)
                routed = routed || tree.params()[size_t(pi)].experts > 0;
        if (routed)
            u.experts += std::max<int64_t>(0, tree.expertsPerToken());
    }
    return u;
}

CostEstimate estimateDecode(const Plan& plan, const ModuleTree& tree, const HardwareProfile& profile,
                            ExecutionPolicy policy)
{
    const int64_t k = tree.expertsPerToken();
    const bool moe = k > 0 && std::any_of(tree.params().begin(), tree.params().end(),
                                          [](const Param& p) { return p.experts > 0; });
    if (!moe)
        return estimateDecode(plan, 2 * tree.root().paramCount, profile, policy, stepUnits(tree, plan.deviceMap));
    // A mixture of experts: a token reads k of each fused expert parameter's
    // E slices (the router's top-k), so each device costs its active bytes
    // and the FLOPs are twice the active parameters, not the total.
    // Routed experts the map keeps off the GPU a layer computes on (a map
    // with a GPU): fetched or read only once the router has picked them.
    const bool anyGpu = std::any_of(plan.deviceMap.begin(), plan.deviceMap.end(),
                                    [](const auto& e) { return e.second.kind == Device::Gpu; });
    std::map<Device, double> active, demanded;
    double activeParams = 0, all = 0;
    const ModuleDevices md = moduleDevices(tree, plan.deviceMap);
    const auto& mods = tree.modules();
    for (size_t m = 0; m < mods.size(); ++m) {
        const auto deviceOf = [&](const std::string& name) {
            if (md.code[m] >= 0)
                return deviceFromCode(md.code[m]);
            const auto d = deviceFor(plan.deviceMap, name);
            return d ? *d : Device::cpu();
        };
        for (int pi : mods[m].params) {
            const Param& p = tree.params()[size_t(pi)];
            if (p.duplicate)
                continue;
            const double share = p.experts > 0 ? std::min(1.0, double(k) / double(p.experts)) : 1.0;
            const double bytes = double(tree.paramBytes(p));
            const Device d = deviceOf(p.name);
            (p.experts > 0 && anyGpu && d.kind != Device::Gpu ? demanded : active)[d] += bytes * share;
            activeParams += double(p.numel()) * share;
            all += bytes;
        }
        for (int bi : mods[m].buffers) {
            const double bytes = double(tree.bufferBytes(tree.buffers()[size_t(bi)]));
            active[deviceOf(tree.buffers()[size_t(bi)].name)] += bytes;
            all += bytes;
        }
    }
    std::vector<std::pair<Device, uint64_t>> placement, onDemand;
    uint64_t unit = 0;
    for (const DeviceTotal& d : plan.devices) {
        placement.emplace_back(d.device, uint64_t(active[d.device]));
        onDemand.emplace_back(d.device, uint64_t(demanded[d.device]));
        unit = std::max(unit, d.reservedLayer);
    }
    double activeBytes = 0;
    for (const auto& [d, b] : active)
        activeBytes += b;
    for (const auto& [d, b] : demanded)
        activeBytes += b;
    const uint64_t activeUnit = all > 0 ? uint64_t(double(unit) * activeBytes / all) : unit;
    return estimateImpl(placement, onDemand, uint64_t(2 * activeParams), profile, policy, activeUnit,
                        stepUnits(tree, plan.deviceMap));
}

} // namespace stowage
