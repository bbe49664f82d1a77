// Plan options shared by `plan` and `run`.
#include "planoptions.h"

#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/fileio.h"
#include "stowage/kvcache.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace stowage::cli {
namespace {

Budgets parseMaxMemory(const Args& a)
{
    Budgets b;
    for (const auto& spec : a.values("--max-memory")) {
        auto eq = spec.find('=');
        if (eq == std::string::npos)
            throw InputError("--max-memory " + spec, "expected DEV=SIZE, e.g. 0=20GiB or cpu=64GB");
        std::string dev = spec.substr(0, eq);
        auto d = Device::parse(dev);
        if (!d)
            throw InputError("--max-memory " + spec,
                             "unknown device '" + dev + "' (use a GPU index such as 0, or cpu, or disk)");
        b.push_back({*d, double(parseSize(spec.substr(eq + 1), "--max-memory " + spec))});
    }
    return b;
}

std::optional<KvReserve> parseKv(const Args& a, const Checkpoint& ck, const ModuleTree& tree)
{
    auto v = a.value("--kv-cache");
    if (!v)
        return std::nullopt;
    int ctx = 0, batch = 1;
    char x = 0;
    std::istringstream in(*v);
    in >> ctx;
    if (in && !in.eof()) {
        in >> x >> batch;
        if (x != 'x')
            ctx = 0;
    }
    if (!in.eof() || ctx <= 0 || batch <= 0 || (in.fail() && !in.eof()))
        throw InputError("--kv-cache " + *v, "expected CONTEXT or CONTEXTxBATCH, e.g. 4096 or 8192x4");
    if (!ck.config())
        throw InputError(ck.weightsPath(), "--kv-cache needs config.json beside the weights");
    auto r = kvReserveFor(*ck.config(), tree, ctx, batch, *tree.dtype());
    if (!r)
        throw InputError(ck.config()->path(), "--kv-cache: model_type '" + ck.config()->modelType() +
                                                  "' is not a family whose attention shape Stowage knows");
    return r;
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

HardwareProfile loadHardware(const std::string& spec)
{
    const std::string ext = ".json";
    if (spec.size() > ext.size() && spec.compare(spec.size() - ext.size(), ext.size(), ext) == 0)
        return profileFromJson(readFile(spec), spec);
    return hardwarePreset(spec);
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

PlanOptions planOptionsFromArgs(const Args& a, const Checkpoint& ck, const ModuleTree& tree)
{
    PlanOptions o;
    if (auto s = a.value("--strategy")) {
        auto st = strategyFromName(*s);
        if (!st)
            throw InputError("--strategy " + *s, "expected auto, balanced, balanced_low_0 or sequential");
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

} // namespace stowage::cli
