// Device maps as JSON, in the form transformers keeps in model.hf_device_map
// and accepts as from_pretrained(device_map=...), and checks of a user's map.
#include "stowage/error.h"
#include "stowage/planner.h"
#include "stowage/units.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

namespace stowage {

namespace {
constexpr int64_t kGpuLimit = 4096; // GPU indices in a map are below this
} // namespace

std::string deviceMapToJson(const DeviceMap& map, int indent)
{
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [k, d] : map) {
        if (d.kind == Device::Gpu)
            j[k] = d.index;
        else
            j[k] = d.name();
    }
    return j.dump(indent);
}

DeviceMap deviceMapFromJson(const std::string& text, const std::string& path)
{
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(path, std::string("device map is not valid JSON: ") + e.what());
    }
    if (!j.is_object())
        throw InputError(path, "device map must be a JSON object of module name -> device");
    DeviceMap map;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const auto& v = it.value();
        std::optional<Device> d;
        if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < kGpuLimit)
            d = Device::gpu(int(v.get<int64_t>()));
        else if (v.is_string())
            d = Device::parse(v.get<std::string>());
        // "8888" parses as a GPU too, but its export (8888) would not import.
        if (!d || (d->kind == Device::Gpu && d->index >= kGpuLimit))
            throw InputError(path, "module '" + it.key() + "' has device " + v.dump() +
                                       ", expected a GPU index (0 to " + std::to_string(kGpuLimit - 1) +
                                       "), \"cpu\" or \"disk\"");
        map.emplace_back(it.key(), *d);
    }
    return map;
}

MapCheck validateDeviceMap(const ModuleTree& tree, const DeviceMap& map)
{
    MapCheck out;
    for (const auto& [k, d] : map) {
        if (!k.empty() && tree.find(k) < 0 && tree.findParam(k) < 0) {
            out.warnings.push_back("key '" + k + "' matches no module or parameter of the model");
            out.warningSubjects.push_back(k);
        }
    }
    for (const auto& p : tree.params()) {
        if (!deviceFor(map, p.name)) {
            out.errors.push_back("tensor '" + p.name + "' is not covered by the device map");
            out.errorSubjects.push_back(p.name);
            break; // the first one says enough
        }
    }
    for (const auto& g : tree.tiedGroups()) {
        std::optional<Device> first;
        for (const auto& name : g) {
            auto d = deviceFor(map, name);
            if (!d)
                continue;
            if (first && *d != *first) {
                out.errors.push_back("tied parameters " + g[0] + " and " + name + " are on different devices (" +
                                     first->name() + " and " + d->name() + "); they share one weight");
                out.errorSubjects.push_back(name);
                break;
            }
            first = d;
        }
    }
    return out;
}

namespace {
std::string label(const Device& d) { return d.kind == Device::Gpu ? "GPU " + d.name() : d.name(); }
} // namespace

MapCheck checkDeviceMapFits(const ModuleTree& tree, const DeviceMap& map, const Budgets& budgets)
{
    MapCheck out;
    std::string known;
    for (const DeviceBudget& b : budgets)
        known += (known.empty() ? "" : ", ") + label(b.device);
    for (const auto& entry : bytesPerDevice(tree, map)) {
        const Device device = entry.first; // a copy: C++17 lambdas cannot capture a structured binding
        const uint64_t bytes = entry.second;
        if (device.kind == Device::Disk || bytes == 0)
            continue;
        std::string firstKey;
        for (const auto& [k, d] : map)
            if (d == device) {
                firstKey = k;
                break;
            }
        const auto budget = std::find_if(budgets.begin(), budgets.end(), [&](const DeviceBudget& b) { return b.device == device; });
        if (budget == budgets.end()) {
            if (device.kind != Device::Gpu)
                continue; // no CPU budget given: unlimited
            out.errors.push_back("the map puts " + humanBytes(bytes) + " on " + label(device) +
                                 ", which is not one of the devices (" + (known.empty() ? "none" : known) + ")");
            out.errorSubjects.push_back(firstKey);
        } else if (double(bytes) > budget->bytes) {
            out.warnings.push_back("the map puts " + humanBytes(bytes) + " on " + label(device) + ", more than its budget of " +
                                   humanBytes(uint64_t(budget->bytes)));
            out.warningSubjects.push_back(firstKey);
        }
    }
    return out;
}

} // namespace stowage
