// Plan options shared by `plan` and `run`.
#include "planoptions.h"

#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/fileio.h"
#include "stowage/hardware.h"
#include "stowage/kvcache.h"


namespace stowage::cli {
namespace {

Budgets parseMaxMemory(const Args& a)
{
    Budgets b;
    for (const auto& spec : a.values("--max-memory"))
        b.push_back(parseBudgetSpec(spec, "--max-memory " + spec));
    return b;
}

std::optional<KvReserve> parseKv(const Args& a, const Checkpoint& ck, const ModuleTree& tree)
{
    auto v = a.value("--kv-cache");
    if (!v)
        return std::nullopt;
    return kvReserveForCheckpoint(ck, tree, parseKvSpec(*v, "--kv-cache " + *v));
}

} // namespace

Budgets machineBudgets()
{
    MachineMemory m = detectMachineMemory();
    Budgets b;
    for (size_t i = 0; i < m.gpuFreeBytes.size(); ++i)
        b.push_back({Device::gpu(int(i)), double(m.gpuFreeBytes[i])});
    b.push_back({Device::cpu(), double(m.ramAvailableBytes)});
    return b;
}

std::string readFile(const std::string& path) { return readTextFile(path); }

void writeFile(const std::string& path, const std::string& text) { writeFileAtomically(path, text); }

void writeOutput(const Args& args, const std::string& text)
{
    if (auto out = args.value("-o"))
        writeFile(*out, text);
    else
        std::fputs(text.c_str(), stdout);
}

std::set<std::string> planValuedOptions()
{
    return {"--max-memory", "--strategy", "--dtype", "--reference", "--no-split", "--kv-cache"};
}

Reference parseReferenceOption(const Args& a)
{
    auto v = a.value("--reference");
    if (!v)
        return Reference::Transformers;
    auto r = referenceFromName(*v);
    if (!r)
        throw InputError("--reference " + *v, "expected transformers or accelerate");
    return *r;
}
std::set<std::string> planFlagOptions() { return {"--offload-buffers"}; }

QuantTarget quantTargetFromArgs(const Args& a)
{
    // The machine a quantizer sees: --hardware's GPU 0, else this one's.
    QuantTarget t;
    if (auto h = a.value("--hardware"))
        t = quantTargetOf(hardwareFromSpec(*h));
    else if (!detectMachineMemory().gpuFreeBytes.empty())
        t.cuda = true; // capability unknown: assumed recent
    return t;
}

PlanOptions planOptionsFromArgs(const Args& a, const Checkpoint& ck, const ModuleTree& tree)
{
    PlanOptions o;
    if (auto s = a.value("--strategy")) {
        auto st = strategyFromName(*s);
        if (!st)
            throw InputError("--strategy " + *s, "expected auto, balanced, balanced_low_0, sequential or experts_in_ram");
        o.strategy = *st;
    }
    o.reference = parseReferenceOption(a);
    Budgets given = parseMaxMemory(a);
    if (!given.empty())
        o.maxMemory = given;
    else
        o.machineMemory = machineBudgets();
    if (!a.values("--no-split").empty())
        o.noSplit = a.values("--no-split");
    o.offloadBuffers = a.flag("--offload-buffers");
    o.kv = parseKv(a, ck, tree);
    if (tree.quantization())
        o.quantTarget = quantTargetFromArgs(a);
    return o;
}

DeviceMap loadDeviceMap(const std::string& path, const ModuleTree& tree, std::vector<std::string>* warnings)
{
    DeviceMap map = deviceMapFromJson(readFile(path), path);
    MapCheck check = validateDeviceMap(tree, map);
    if (!check.errors.empty())
        throw InputError(path, check.errors[0]);
    if (warnings)
        *warnings = check.warnings;
    return map;
}

nlohmann::ordered_json costJson(const CostEstimate& c, const HardwareProfile& hw, ExecutionPolicy policy)
{
    nlohmann::ordered_json j;
    j["hardware"] = hw.name;
    j["policy"] = policyName(policy);
    j["seconds_per_token"] = c.secondsPerToken;
    j["tokens_per_second"] = c.tokensPerSecond;
    j["fixed_seconds"] = c.fixedSeconds; // per token, besides the devices' bytes
    auto& ds = j["devices"] = nlohmann::ordered_json::array();
    for (const auto& d : c.devices)
        ds.push_back({{"device", d.device.name()}, {"weight_bytes", d.weightBytes}, {"seconds", d.seconds},
                      {"share", d.share}, {"bottleneck", d.bottleneck}});
    if (!c.assumptions.empty())
        j["assumed"] = c.assumptions; // devices the profile lacks, and what stood in for them
    return j;
}

} // namespace stowage::cli
