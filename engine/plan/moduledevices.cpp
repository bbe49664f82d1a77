#include "stowage/moduledevices.h"

#include <string_view>
#include <unordered_map>

namespace stowage {

int deviceCode(const Device& d)
{
    switch (d.kind) {
    case Device::Gpu: return d.index;
    case Device::Cpu: return CpuCode;
    case Device::Disk: return DiskCode;
    }
    return -1;
}

Device deviceFromCode(int code)
{
    if (code == CpuCode)
        return Device::cpu();
    if (code == DiskCode)
        return Device::disk();
    return Device::gpu(code);
}

namespace {
int merge(int a, int b)
{
    if (a == NoDeviceCode)
        return b;
    if (b == NoDeviceCode || a == b)
        return a;
    return MixedCode;
}
} // namespace

ModuleDevices moduleDevices(const ModuleTree& tree, const DeviceMap& map)
{
    std::unordered_map<std::string_view, int> keys;
    keys.reserve(map.size() * 2);
    for (size_t i = 0; i < map.size(); ++i)
        keys.emplace(map[i].first, static_cast<int>(i));

    const auto& mods = tree.modules();
    ModuleDevices out;
    out.code.assign(mods.size(), NoDeviceCode);
    out.entry.assign(mods.size(), -1);
    // Pre-order: a module is covered by its own key or by its parent's cover.
    for (size_t i = 0; i < mods.size(); ++i) {
        const Module& m = mods[i];
        if (auto it = keys.find(m.name); it != keys.end())
            out.entry[i] = it->second;
        else if (m.parent >= 0)
            out.entry[i] = out.entry[static_cast<size_t>(m.parent)];
        if (out.entry[i] >= 0)
            out.code[i] = deviceCode(map[static_cast<size_t>(out.entry[i])].second);
    }
    // Modules no key covers are split: their direct tensors may be keys of
    // their own, their children have been resolved above. Reverse pre-order
    // visits children before parents.
    for (size_t i = mods.size(); i-- > 0;) {
        const Module& m = mods[i];
        if (out.entry[i] >= 0)
            continue;
        int c = NoDeviceCode;
        for (int p : m.params) {
            const Param& param = tree.params()[static_cast<size_t>(p)];
            if (auto it = keys.find(param.name); it != keys.end())
                c = merge(c, deviceCode(map[static_cast<size_t>(it->second)].second));
        }
        for (int b : m.buffers)
            if (auto it = keys.find(tree.buffers()[static_cast<size_t>(b)].name); it != keys.end())
                c = merge(c, deviceCode(map[static_cast<size_t>(it->second)].second));
        for (int ch : m.children)
            c = merge(c, out.code[static_cast<size_t>(ch)]);
        out.code[i] = c;
    }
    return out;
}

} // namespace stowage
