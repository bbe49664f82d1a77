// transformers 5.6's _get_device_map (its own get_max_memory,
// get_balanced_memory and infer_auto_device_map) and, as the second
// reference, Accelerate 1.13's load_checkpoint_and_dispatch path; the rules
// are in docs/planner.md.
#include "stowage/planner.h"

#include "balance.h"
#include "plannerstate.h"
#include "stowage/units.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/moduledevices.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

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
    if (n == "experts_in_ram")
        return Strategy::ExpertsInRam;
    return std::nullopt;
}

const char* strategyName(Strategy s)
{
    switch (s) {
    case Strategy::Auto: return "auto";
    case Strategy::Balanced: return "balanced";
    case Strategy::BalancedLow0: return "balanced_low_0";
    case Strategy::Sequential: return "sequential";
    case Strategy::ExpertsInRam: return "experts_in_ram";
    }
    return "?";
}

namespace {

// Where a plan's KV caches live: per device, the caches it holds, and the
// part of them belonging to layers whose weights the placer put elsewhere
// (it counted those beside the weights).
struct KvPlacement {
    std::map<Device, uint64_t> at, away;
};

KvPlacement kvPlacement(const ModuleTree& tree, const DeviceMap& raw, const KvReserve& kv)
{
    KvPlacement out;
    const std::vector<Device> cacheAt = layerCacheDevices(tree, raw, kv.layerClass);
    const ModuleDevices md = moduleDevices(tree, raw);
    const auto layers = detail::layerKv(tree, kv);
    for (size_t l = 0; l < layers.size() && l < cacheAt.size(); ++l) {
        const auto [m, bytes] = layers[l];
        const Device& d = cacheAt[l];
        out.at[d] += bytes;
        if (md.code[size_t(m)] < 0 || deviceFromCode(md.code[size_t(m)]) != d)
            out.away[d] += bytes;
    }
    return out;
}

// "MXFP4 experts will be dequantized to bf16 on this machine (why): 12.8 GB
// instead of 3.2 GB", or that they stay quantized, with both sizes.
std::string quantizationSentence(const ModuleTree& tree, const Quantization& q, const QuantDecision& d)
{
    if (q.kind == Quantization::Kind::Unmodelled)
        return "quant_method '" + q.method + "' is not modelled yet: sized as the unquantized model";
    if (tree.reference() != Reference::Transformers)
        return q.label() + " checkpoint sized unquantized: Accelerate builds the model from config.json alone";
    ModuleTree other = tree;
    other.setQuantApplied(!tree.quantApplied());
    const uint64_t here = tree.root().bytes, there = other.root().bytes;
    const std::string dtype = tree.dtype() ? dtypeTorchName(*tree.dtype()) : "its own dtype";
    if (!d.applied)
        return q.label() + " weights will be dequantized to " + dtype + " (" + d.why + "): " + humanBytes(here) +
               " instead of " + humanBytes(there);
    return q.label() + " weights stay quantized (" + d.why + "): " + humanBytes(here) + " instead of " +
           humanBytes(there) + " in " + dtype;
}

// Why from_pretrained would refuse the map after planning it (the
// quantizer's second validate_environment).
std::string quantRefusal(const Quantization& q, const ModuleTree& tree, const DeviceMap& map)
{
    // Before any map: 5.6's FP8Experts reads getattr(config,
    // "num_local_experts", config.num_experts), and DeepseekV3Config has
    // neither (it says n_routed_experts), so from_pretrained stops with an
    // AttributeError wherever FP8 stays quantized (tests/reference/hf56).
    if (q.kind == Quantization::Kind::Fp8 && tree.modelType() == "deepseek_v3")
        return "transformers 5.6 cannot load this checkpoint quantized: its FP8Experts reads config.num_experts "
               "(integrations/finegrained_fp8.py:599) and from_pretrained stops with \"AttributeError: "
               "'DeepseekV3Config' object has no attribute 'num_experts'\"; on a GPU below compute capability "
               "8.9, or with dequantize: true, it loads dequantized to bfloat16";
    bool cpu = false, disk = false;
    std::set<Device> all;
    for (const auto& [k, d] : map) {
        cpu = cpu || d.kind == Device::Cpu;
        disk = disk || d.kind == Device::Disk;
        all.insert(d);
    }
    if ((q.kind == Quantization::Kind::Bnb4 || q.kind == Quantization::Kind::Bnb8) && !q.fp32CpuOffload &&
        (cpu || disk) && !(all.size() == 1 && cpu))
        return "transformers 5.6 refuses this map: bitsandbytes needs every module on a GPU unless "
               "llm_int8_enable_fp32_cpu_offload is set (quantizer_bnb_4bit.py:56-81)";
    if (q.kind == Quantization::Kind::Fp8 && disk)
        return "transformers 5.6 refuses this map: its FP8 check rejects any module on disk, even for a "
               "pre-quantized checkpoint (quantizer_finegrained_fp8.py:66-77)";
    return {};
}

} // namespace

Plan planDeviceMap(const ModuleTree& given, const PlanOptions& options)
{
    // Sizes follow the reference; a tree built for the other one is resized
    // on a copy (the CLI and the GUI build it for the right one already).
    // A quantized checkpoint is sized as its quantizer leaves it on the
    // plan's target: quantized, or dequantized to the load dtype.
    std::optional<ModuleTree> resized;
    const Quantization* quant = given.quantization();
    const QuantDecision decision = quant ? quantDecision(*quant, options.quantTarget) : QuantDecision{};
    if (given.reference() != options.reference || (quant && given.quantApplied() != decision.applied)) {
        resized = given;
        resized->setSizing(given.dtype(), options.reference);
        if (quant)
            resized->setQuantApplied(decision.applied);
    }
    const ModuleTree& tree = resized ? *resized : given;
    detail::Sizes sizes(tree, options);
    Plan plan;
    plan.reference = options.reference;
    if (quant) {
        plan.quantization = quantizationSentence(tree, *quant, decision);
        plan.notes.push_back(plan.quantization);
    }
    Budgets mm = options.maxMemory ? normalizeBudgets(*options.maxMemory) : normalizeBudgets(options.machineMemory);
    if (!options.maxMemory && options.reference == Reference::Transformers)
        // transformers' get_max_memory keeps 10% of the RAM free when nobody gave budgets.
        for (auto& b : mm)
            if (b.device.kind == Device::Cpu) {
                b.bytes = b.bytes * 0.9;
                plan.notes.push_back("no budget given: planning with 90% of the available RAM");
            }
    if (options.strategy != Strategy::Sequential && options.strategy != Strategy::ExpertsInRam)
        mm = detail::balancedMemory(tree, sizes, mm, !options.maxMemory, options.strategy == Strategy::BalancedLow0,
                                    &plan.notes);
    if (quant && tree.quantApplied() &&
        (quant->kind == Quantization::Kind::Bnb4 || quant->kind == Quantization::Kind::Bnb8)) {
        // adjust_max_memory (quantizer_bnb_4bit.py:97-100): 90% of every
        // budget, after balancing.
        for (auto& b : mm)
            if (b.bytes >= 0)
                b.bytes *= 0.9;
        plan.notes.push_back("bitsandbytes keeps 10% of every budget free (adjust_max_memory)");
    }
    plan.budgets = mm;
    if (options.kv)
        for (auto& b : mm)
            if (b.device.kind != Device::Disk && options.kv->activationBytes > 0) {
                b.bytes = std::max(0.0, b.bytes - double(options.kv->activationBytes));
                plan.notes.push_back("kept " + grouped(options.kv->activationBytes) + " bytes on " +
                                     b.device.name() + " for the largest activation");
            }
    // Whether 5.6 would refuse the map it planned, said last.
    const auto judge = [&](Plan& p) {
        if (quant && tree.quantApplied())
            p.refusal = quantRefusal(*quant, tree, p.deviceMap);
        if (!p.refusal.empty())
            p.notes.push_back(p.refusal);
        return p;
    };
    if (options.strategy == Strategy::ExpertsInRam) {
        Plan own = planExpertsInRam(tree, mm, options.kv);
        own.reference = plan.reference;
        own.budgets = plan.budgets;
        own.quantization = plan.quantization;
        own.notes.insert(own.notes.begin(), plan.notes.begin(), plan.notes.end());
        return judge(own);
    }
    // A layer's KV cache lives where the layer computes (layerCacheDevices):
    // on its GPU; an offloaded layer's on the execution device (GPU 0 when
    // the map uses a GPU, else RAM), not beside its weights.
    const auto finish = [&](const detail::Placer& placer, const std::map<Device, uint64_t>& cacheAt,
                            const std::map<Device, uint64_t>& kept) {
        plan.deviceMap = placer.rawMap();
        cleanDeviceMap(plan.deviceMap);
        placer.explain(plan);
        for (DeviceTotal& t : plan.devices) {
            const auto it = cacheAt.find(t.device);
            t.reservedKv = it == cacheAt.end() ? 0 : it->second;
            t.reserved = t.reservedLayer + t.reservedKv;
            // The budget as given (the room kept for caches is in reservedKv).
            for (const DeviceBudget& x : mm)
                if (x.device == t.device)
                    t.budget = x.bytes;
        }
        for (const auto& [d, bytes] : kept)
            if (bytes > 0)
                plan.notes.push_back("kept " + grouped(bytes) + " bytes on " + d.name() +
                                     " for the KV caches of the layers that compute there (a layer's cache lives "
                                     "where it computes)");
        return judge(plan);
    };
    size_t gpus = 0;
    for (const DeviceBudget& b : mm)
        gpus += b.device.kind == Device::Gpu;
    uint64_t kvTotal = 0;
    if (options.kv)
        for (const auto& [layer, bytes] : detail::layerKv(tree, *options.kv))
            kvTotal += bytes;
    if (kvTotal > 0 && gpus <= 1) {
        // One execution device holds every layer's cache: GPU 0 when the map
        // uses it, else RAM. Keep that room there and place the layers by
        // their weights alone; if GPU 0 then holds nothing, it is not the
        // execution device: plan without it, the caches in RAM.
        PlanOptions bareOptions = options;
        bareOptions.kv.reset();
        const detail::Sizes bare(tree, bareOptions);
        const auto attempt = [&](const Device& holder, bool withoutGpu) {
            Budgets b = mm;
            for (auto& x : b) {
                if (x.device == holder)
                    x.bytes = std::max(0.0, x.bytes - double(kvTotal));
                if (withoutGpu && x.device.kind == Device::Gpu)
                    x.bytes = 0;
            }
            auto placer = std::make_unique<detail::Placer>(tree, bare, b);
            placer->run();
            return placer;
        };
        if (gpus == 1) {
            const Device gpu = std::find_if(mm.begin(), mm.end(), [](const DeviceBudget& x) {
                                   return x.device.kind == Device::Gpu;
                               })->device;
            auto onGpu = attempt(gpu, false);
            const bool used = std::any_of(onGpu->rawMap().begin(), onGpu->rawMap().end(),
                                          [](const auto& e) { return e.second.kind == Device::Gpu; });
            if (used)
                return finish(*onGpu, {{gpu, kvTotal}}, {{gpu, kvTotal}});
            plan.notes.push_back(gpu.name() + " cannot hold the KV caches beside any weights: planned without it");
        }
        auto inRam = attempt(Device::cpu(), gpus == 1);
        return finish(*inRam, {{Device::cpu(), kvTotal}}, {{Device::cpu(), kvTotal}});
    }
    // Several GPUs: a layer on GPU k caches there, and the placer counts
    // each layer's cache beside its weights; the caches of the layers placed
    // in RAM or on disk need room on GPU 0 (or RAM) too. Plan, keep that
    // room, and plan again until it holds them; it only grows, so this ends
    // within a pass per layer.
    std::map<Device, uint64_t> away; // per device: room for caches of layers placed elsewhere
    for (size_t pass = 0;; ++pass) {
        Budgets b = mm;
        for (auto& x : b)
            if (auto it = away.find(x.device); it != away.end())
                x.bytes = std::max(0.0, x.bytes - double(it->second));
        detail::Placer placer(tree, sizes, b);
        placer.run();
        const KvPlacement kv = options.kv ? kvPlacement(tree, placer.rawMap(), *options.kv) : KvPlacement{};
        bool holds = true;
        for (const auto& [d, bytes] : kv.away)
            if (bytes > away[d]) {
                away[d] = bytes;
                holds = false;
            }
        if (!holds && pass <= tree.modules().size())
            continue;
        return finish(placer, kv.at, kv.away);
    }
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
