// The hardware to buy (shop.h): plan and predict every setup of the presets.
#include "stowage/shop.h"

#include "stowage/error.h"
#include "stowage/units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace stowage {

namespace {

// Dated figures, labelled by what they are. NVIDIA publishes launch prices
// for its GeForce cards only; the data-centre cards' are the prices reported
// for single units when they shipped in volume, not list prices.
struct PriceRow {
    const char* preset;
    double usd;
    const char* source;
};
constexpr PriceRow kGpuPrices[] = {
    {"rtx3090", 1499, "NVIDIA launch MSRP, September 2020"},
    {"rtx4090", 1599, "NVIDIA launch MSRP, October 2022"},
    {"t4", 2000, "reported single-unit price, 2019"},
    {"l4", 2500, "reported single-unit price, 2023"},
    {"a100-40gb", 10000, "reported single-unit price, 2020"},
    {"a100-80gb", 15000, "reported single-unit price, 2021"},
    {"h100-80gb", 30000, "reported single-unit price (PCIe), 2023"},
    {"h200", 32000, "reported single-unit price, 2024"},
};

std::string dollars(double usd) { return "$" + grouped(uint64_t(std::llround(usd))); }

std::string whereText(const Plan& plan)
{
    bool gpu = false, cpu = false, disk = false;
    for (const auto& [name, d] : plan.deviceMap) {
        gpu = gpu || d.kind == Device::Gpu;
        cpu = cpu || d.kind == Device::Cpu;
        disk = disk || d.kind == Device::Disk;
    }
    std::string s;
    for (const auto& [on, word] : {std::pair{gpu, "GPUs"}, std::pair{cpu, "RAM"}, std::pair{disk, "disk"}})
        if (on)
            s += (s.empty() ? "" : " + ") + std::string(word);
    return s;
}

std::string speed(double tps)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, tps >= 100 ? "%.0f" : tps >= 10 ? "%.1f" : "%.2f", tps);
    return buf;
}

} // namespace

std::optional<ListPrice> gpuListPrice(const std::string& preset)
{
    for (const PriceRow& r : kGpuPrices)
        if (preset == r.preset)
            return ListPrice{r.usd, r.source};
    return std::nullopt;
}

ListPrice ramPricePerGiB() { return {4.0, "reported DDR5 RDIMM price per GiB, 2024"}; }

ShopResult shopFor(const ModuleTree& tree, const std::optional<KvReserve>& kv, const ShopRequest& r)
{
    if (!(r.minTokensPerSecond > 0) || !std::isfinite(r.minTokensPerSecond))
        throw InputError("shop", "the target decode speed must be a positive number of tokens per second");
    if (r.maxGpus < 1 || r.maxGpus > 64)
        throw InputError("shop", "the number of GPUs to try must be 1 to 64");
    std::vector<int> rams = r.ramGiB;
    std::sort(rams.begin(), rams.end());
    rams.erase(std::unique(rams.begin(), rams.end()), rams.end());
    if (rams.empty() || rams.front() <= 0)
        throw InputError("shop", "RAM sizes must be positive numbers of GiB");

    std::map<std::string, double> overrides(r.priceOverrides.begin(), r.priceOverrides.end());
    std::vector<std::string> gpus = r.gpus;
    if (gpus.empty())
        for (const PriceRow& row : kGpuPrices)
            gpus.emplace_back(row.preset);
    ShopResult out;
    const ListPrice ram = ramPricePerGiB();

    // One setup: plan it as the planner would for that machine, predict it.
    const auto trySetup = [&](const std::string& gpu, int count, int ramGiB, const ListPrice* gpuPrice) {
        HardwareProfile profile = hardwarePreset(count > 0 ? std::to_string(count) + "x" + gpu : "rtx4090");
        if (count == 0)
            profile.gpus.clear();
        profile.ramBytes = uint64_t(ramGiB) << 30;
        ShopSetup s;
        s.gpu = gpu;
        s.gpuCount = count;
        s.ramGiB = ramGiB;
        s.hardware = count > 0 ? std::to_string(count) + "x" + gpu : "cpu";
        s.priceUsd = (gpuPrice ? count * gpuPrice->usd : 0) + ramGiB * ram.usd;
        s.priceNote = (gpuPrice ? std::to_string(count) + " x " + dollars(gpuPrice->usd) + " (" + gpuPrice->source +
                                      ") + "
                                : std::string()) +
                      std::to_string(ramGiB) + " GiB x $4.00 (" + ram.source + ")";
        Budgets budgets;
        for (int i = 0; i < count; ++i) {
            const uint64_t mem = profile.gpus[size_t(i)].memoryBytes;
            budgets.push_back({Device::gpu(i), double(mem > r.gpuReserveBytes ? mem - r.gpuReserveBytes : 0)});
        }
        const uint64_t ramBytes = profile.ramBytes;
        budgets.push_back({Device::cpu(), double(ramBytes > r.ramReserveBytes ? ramBytes - r.ramReserveBytes : 0)});
        PlanOptions po;
        po.strategy = r.strategy;
        po.maxMemory = budgets;
        po.kv = kv;
        po.quantTarget = quantTargetOf(profile);
        ++out.tried;
        // A quantized checkpoint is sized as its quantizer leaves it on this setup.
        std::optional<ModuleTree> resized;
        if (const Quantization* q = tree.quantization()) {
            resized = tree;
            resized->setQuantApplied(quantDecision(*q, po.quantTarget).applied);
        }
        const ModuleTree& t = resized ? *resized : tree;
        try {
            s.plan = planDeviceMap(t, po);
        } catch (const InputError& e) {
            s.why = e.what();
            return s;
        }
        s.estimate = estimateDecode(s.plan, t, profile, r.policy);
        s.allOnGpus = std::all_of(s.plan.deviceMap.begin(), s.plan.deviceMap.end(),
                                  [](const auto& e) { return e.second.kind == Device::Gpu; });
        s.where = whereText(s.plan);
        s.meets = s.plan.refusal.empty() && s.estimate.tokensPerSecond >= r.minTokensPerSecond;
        if (!s.plan.refusal.empty())
            s.why = s.plan.refusal;
        else
            s.why = speed(s.estimate.tokensPerSecond) + " tok/s predicted" +
                    (s.meets ? "" : ", below " + speed(r.minTokensPerSecond)) + "; weights on " + s.where;
        return s;
    };

    // Per GPU model the fewest GPUs, then the least RAM, that meet the
    // target (more of either only costs more); otherwise its fastest setup.
    const auto bestOf = [&](const std::string& gpu, int maxCount, const ListPrice* price) {
        std::optional<ShopSetup> fastest;
        for (int count = maxCount == 0 ? 0 : 1; count <= maxCount; ++count)
            for (int ramGiB : rams) {
                ShopSetup s = trySetup(gpu, count, ramGiB, price);
                if (s.meets)
                    return s;
                if (!s.why.empty() && s.plan.deviceMap.empty())
                    continue; // not planned
                // faster by more than rounding: equal speeds keep the cheaper setup
                if (!fastest || s.estimate.tokensPerSecond > fastest->estimate.tokensPerSecond * (1 + 1e-9))
                    fastest = std::move(s);
            }
        return fastest ? *fastest : ShopSetup{};
    };

    std::vector<ShopSetup> all;
    all.push_back(bestOf("", 0, nullptr)); // the CPU alone
    for (const std::string& gpu : gpus) {
        std::optional<ListPrice> price = gpuListPrice(gpu);
        if (auto o = overrides.find(gpu); o != overrides.end())
            price = ListPrice{o->second, "your figure"};
        if (!price) {
            hardwarePreset(gpu); // an unknown name throws here, naming the presets
            out.notes.push_back(gpu + ": no price known; give one to include it");
            continue;
        }
        all.push_back(bestOf(gpu, r.maxGpus, &*price));
    }
    all.erase(std::remove_if(all.begin(), all.end(), [](const ShopSetup& s) { return s.hardware.empty(); }),
              all.end());
    std::stable_sort(all.begin(), all.end(), [](const ShopSetup& a, const ShopSetup& b) {
        if (a.meets != b.meets)
            return a.meets;
        if (a.meets)
            return a.priceUsd < b.priceUsd;
        return a.estimate.tokensPerSecond > b.estimate.tokensPerSecond;
    });
    out.setups = std::move(all);
    out.notes.push_back("Prices cover the GPUs and the RAM only, not the machine around them; " +
                        humanBytes(r.gpuReserveBytes) + " of each GPU and " + humanBytes(r.ramReserveBytes) +
                        " of the RAM are kept for everything else.");
    out.notes.push_back("Speeds are the cost model's for the presets' datasheet figures and a typical host "
                        "(50 GB/s RAM, 3 GB/s NVMe), policy " +
                        std::string(policyName(r.policy)) + ".");
    return out;
}

} // namespace stowage
