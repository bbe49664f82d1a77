// Planning with GPUs filled in a chosen order (gpuorder.h).
#include "stowage/gpuorder.h"

#include "stowage/error.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace stowage {

namespace {

Device renumbered(const Device& d, const std::map<int, int>& to)
{
    if (d.kind != Device::Gpu)
        return d;
    const auto it = to.find(d.index);
    return it == to.end() ? d : Device::gpu(it->second);
}

} // namespace

Plan planInGpuOrder(const ModuleTree& tree, const PlanOptions& options, const std::vector<int>& order)
{
    if (order.empty() || !options.maxMemory)
        return planDeviceMap(tree, options);
    std::vector<int> given;
    for (const DeviceBudget& b : *options.maxMemory)
        if (b.device.kind == Device::Gpu)
            given.push_back(b.device.index);
    std::vector<int> sortedOrder = order, sortedGiven = given;
    std::sort(sortedOrder.begin(), sortedOrder.end());
    std::sort(sortedGiven.begin(), sortedGiven.end());
    if (std::adjacent_find(sortedOrder.begin(), sortedOrder.end()) != sortedOrder.end())
        throw InputError("GPU order", "a GPU is named twice");
    if (sortedOrder != sortedGiven) {
        std::string list;
        for (int g : sortedGiven)
            list += (list.empty() ? "" : ", ") + std::to_string(g);
        throw InputError("GPU order", "it must name each GPU with a budget once (" + (list.empty() ? "none" : list) + ")");
    }
    // Planning index k is real GPU order[k]; sortedGiven[k] the k-th budget's.
    std::map<int, int> toPlanning, toReal;
    for (size_t k = 0; k < order.size(); ++k) {
        toPlanning[order[k]] = sortedGiven[k];
        toReal[sortedGiven[k]] = order[k];
    }
    if (std::all_of(toReal.begin(), toReal.end(), [](const auto& e) { return e.first == e.second; }))
        return planDeviceMap(tree, options);
    PlanOptions o = options;
    for (DeviceBudget& b : *o.maxMemory)
        b.device = renumbered(b.device, toPlanning);
    Plan p = planDeviceMap(tree, o);
    for (auto& [name, d] : p.deviceMap)
        d = renumbered(d, toReal);
    for (PlanEntry& e : p.entries)
        e.device = renumbered(e.device, toReal);
    for (DeviceTotal& t : p.devices)
        t.device = renumbered(t.device, toReal);
    for (DeviceBudget& b : p.budgets)
        b.device = renumbered(b.device, toReal);
    // Devices in index order again, as every plan lists them.
    std::stable_sort(p.devices.begin(), p.devices.end(),
                     [](const DeviceTotal& a, const DeviceTotal& b) { return a.device < b.device; });
    std::stable_sort(p.budgets.begin(), p.budgets.end(),
                     [](const DeviceBudget& a, const DeviceBudget& b) { return a.device < b.device; });
    std::string said;
    for (int g : order)
        said += (said.empty() ? "" : ", ") + std::to_string(g);
    p.notes.push_back("GPUs filled in the order " + said + " (the notes above number them in that order from 0)");
    return p;
}

std::vector<int> parseGpuOrder(const std::string& text, const std::string& what)
{
    std::vector<int> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        size_t used = 0;
        int v = -1;
        try {
            v = std::stoi(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (item.empty() || used != item.size() || v < 0)
            throw InputError(what, "expected GPU indices separated by commas, first filled first, e.g. 1,0");
        out.push_back(v);
    }
    if (out.empty())
        throw InputError(what, "expected GPU indices separated by commas, first filled first, e.g. 1,0");
    return out;
}

} // namespace stowage
