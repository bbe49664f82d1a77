// stowage-cli plan: the device map transformers would compute, with
// explanations, KV-cache-aware budgets and a speed estimate.
#include "args.h"
#include "commands.h"
#include "format.h"

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

Budgets machineBudgets()
{
    MachineMemory m = detectMachineMemory();
    Budgets b;
    for (size_t i = 0; i < m.gpuFreeBytes.size(); ++i)
        b.push_back({Device::gpu(int(i)), double(m.gpuFreeBytes[i])});
    b.push_back({Device::cpu(), double(m.ramAvailableBytes)});
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

std::string readFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw InputError(path, "cannot read");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void writeFile(const std::string& path, const std::string& text)
{
    const std::string tmp = path + ".partial";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out)
            throw InputError(path, "cannot write");
        out << text;
        if (!out.flush())
            throw InputError(path, "cannot write (disk full?)");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw InputError(path, "cannot write");
    }
}

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
    Args a(argv, {"--max-memory", "--strategy", "--dtype", "--no-split", "--kv-cache", "-o", "--report", "--device-map",
                  "--hardware"},
           {"--offload-buffers", "--json", "--explain"});
    Checkpoint ck = Checkpoint::open(checkpointPath(a));
    ModuleTree tree = buildModuleTree(ck, parseDTypeOption(a));

    PlanOptions o;
    if (auto s = a.value("--strategy")) {
        auto st = strategyFromName(*s);
        if (!st)
            throw InputError("--strategy " + *s, "expected auto, balanced, balanced_low_0 or sequential");
        o.strategy = *st;
    }
    Budgets given = parseMaxMemory(a);
    if (!given.empty())
        o.maxMemory = given;
    else
        o.machineMemory = machineBudgets();
    if (!a.values("--no-split").empty())
        o.noSplit = a.values("--no-split");
    o.offloadBuffers = a.flag("--offload-buffers");
    o.kv = parseKv(a, ck, tree);

    Plan plan;
    std::vector<std::string> warnings;
    if (auto mapFile = a.value("--device-map")) {
        // Check the user's map instead of computing one.
        plan.deviceMap = deviceMapFromJson(readFile(*mapFile), *mapFile);
        MapCheck check = validateDeviceMap(tree, plan.deviceMap);
        if (!check.errors.empty())
            throw InputError(*mapFile, check.errors[0]);
        warnings = check.warnings;
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
