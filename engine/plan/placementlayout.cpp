#include "stowage/placementlayout.h"

#include <algorithm>

namespace stowage {

namespace {
bool isNoSplit(const ModuleTree& tree, const Module& m)
{
    const auto& ns = tree.noSplitClasses();
    return std::find(ns.begin(), ns.end(), m.className) != ns.end();
}

uint64_t directBytes(const ModuleTree& tree, const Module& m)
{
    uint64_t b = 0;
    for (int p : m.params)
        b += tree.paramBytes(tree.params()[static_cast<size_t>(p)]);
    for (int bf : m.buffers)
        b += tree.bufferBytes(tree.buffers()[static_cast<size_t>(bf)]);
    return b;
}
bool isRoutedExperts(const Module& m)
{
    const size_t dot = m.name.rfind('.');
    return (dot == std::string::npos ? m.name : m.name.substr(dot + 1)) == "experts";
}

// Bytes of the routed experts in module i's subtree (pre-order: skip inside an experts module).
uint64_t expertBytesIn(const ModuleTree& tree, int i)
{
    const auto& mods = tree.modules();
    uint64_t b = 0;
    for (int j = i; j < mods[static_cast<size_t>(i)].end;) {
        const Module& m = mods[static_cast<size_t>(j)];
        if (isRoutedExperts(m)) {
            b += m.bytes;
            j = m.end;
        } else {
            ++j;
        }
    }
    return b;
}
} // namespace

PlacementLayout layoutPlacement(const ModuleTree& tree, const ModuleDevices& devices)
{
    PlacementLayout out;
    const auto& mods = tree.modules();
    auto add = [&](int module, bool direct, uint64_t bytes) {
        if (bytes == 0)
            return;
        PlacementBlock b;
        b.module = module;
        b.direct = direct;
        b.bytes = bytes;
        b.offset = out.totalBytes;
        b.deviceCode = devices.code.empty() ? NoDeviceCode : devices.code[static_cast<size_t>(module)];
        b.entry = devices.entry.empty() ? -1 : devices.entry[static_cast<size_t>(module)];
        const Module& m = mods[static_cast<size_t>(module)];
        b.expertBytes = direct ? (isRoutedExperts(m) ? bytes : 0) : expertBytesIn(tree, module);
        if (direct && b.deviceCode == MixedCode)
            b.deviceCode = NoDeviceCode; // its children split, its own tensors are not known here
        out.totalBytes += bytes;
        out.blocks.push_back(b);
    };
    // Pre-order walk with an explicit stack (definition order).
    std::vector<int> stack{0};
    while (!stack.empty()) {
        const int i = stack.back();
        stack.pop_back();
        const Module& m = mods[static_cast<size_t>(i)];
        if (m.children.empty() || isNoSplit(tree, m)) {
            add(i, false, m.bytes);
            continue;
        }
        add(i, true, directBytes(tree, m));
        for (auto it = m.children.rbegin(); it != m.children.rend(); ++it)
            stack.push_back(*it);
    }
    for (size_t b = 0; b < out.blocks.size(); ++b) {
        const PlacementBlock& blk = out.blocks[b];
        if (out.runs.empty() || out.runs.back().deviceCode != blk.deviceCode)
            out.runs.push_back({static_cast<int>(b), static_cast<int>(b), blk.deviceCode, 0});
        out.runs.back().last = static_cast<int>(b);
        out.runs.back().bytes += blk.bytes;
    }
    return out;
}

int PlacementLayout::blockAt(uint64_t bytes) const
{
    if (blocks.empty() || bytes >= totalBytes)
        return -1;
    auto it = std::upper_bound(blocks.begin(), blocks.end(), bytes,
                               [](uint64_t v, const PlacementBlock& b) { return v < b.offset; });
    return static_cast<int>(it - blocks.begin()) - 1;
}

std::vector<int> PlacementLayout::blocksOf(const ModuleTree& tree, int module) const
{
    std::vector<int> out;
    if (module < 0 || module >= static_cast<int>(tree.modules().size()))
        return out;
    const Module& m = tree.modules()[static_cast<size_t>(module)];
    for (size_t b = 0; b < blocks.size(); ++b) {
        const int bm = blocks[b].module;
        // Inside the subtree (pre-order range), or an ancestor block that contains the module.
        const Module& owner = tree.modules()[static_cast<size_t>(bm)];
        if ((bm >= module && bm < m.end) || (module > bm && module < owner.end && !blocks[b].direct))
            out.push_back(static_cast<int>(b));
    }
    return out;
}

} // namespace stowage
