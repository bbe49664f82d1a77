#include "stowage/placementlayout.h"

#include <algorithm>
#include <optional>

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
// A layer split by experts_in_ram (or a user's map) into its routed experts
// on one device and everything else on another: those two codes, else nullopt.
struct ExpertSplit {
    int dense = NoDeviceCode, experts = NoDeviceCode;
    std::vector<int> expertModules;
};
std::optional<ExpertSplit> expertSplit(const ModuleTree& tree, const ModuleDevices& devices, int i)
{
    const auto& mods = tree.modules();
    ExpertSplit out;
    bool dense = false, experts = false;
    const auto agree = [](int& code, bool& seen, int c) {
        if (seen && code != c)
            return false;
        code = c;
        seen = true;
        return true;
    };
    for (int j = i; j < mods[size_t(i)].end;) {
        const Module& m = mods[size_t(j)];
        const int code = devices.code[size_t(j)];
        if (isRoutedExperts(m)) {
            if (m.bytes > 0 && (code == MixedCode || !agree(out.experts, experts, code)))
                return std::nullopt;
            out.expertModules.push_back(j);
            j = m.end;
            continue;
        }
        if (directBytes(tree, m) > 0 && (code == MixedCode || !agree(out.dense, dense, code)))
            return std::nullopt; // its own tensors on a device of their own, or not known
        ++j;
    }
    if (!dense || !experts || out.dense == out.experts)
        return std::nullopt;
    return out;
}
} // namespace

PlacementLayout layoutPlacement(const ModuleTree& tree, const ModuleDevices& devices)
{
    PlacementLayout out;
    const auto& mods = tree.modules();
    auto add = [&](int module, bool direct, uint64_t bytes) -> PlacementBlock* {
        if (bytes == 0)
            return nullptr;
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
        return &out.blocks.back();
    };
    // Pre-order walk with an explicit stack (definition order).
    std::vector<int> stack{0};
    while (!stack.empty()) {
        const int i = stack.back();
        stack.pop_back();
        const Module& m = mods[static_cast<size_t>(i)];
        if (m.children.empty() || isNoSplit(tree, m)) {
            // A layer whose routed experts sit on another device than the
            // rest of it (experts_in_ram): two blocks, each in its device's
            // colour, the experts' after the rest.
            const auto split = devices.code.empty() || devices.code[size_t(i)] != MixedCode
                                   ? std::nullopt
                                   : expertSplit(tree, devices, i);
            if (!split) {
                add(i, false, m.bytes);
                continue;
            }
            if (PlacementBlock* dense = add(i, false, m.bytes - expertBytesIn(tree, i))) {
                dense->deviceCode = split->dense;
                dense->expertBytes = 0;
            }
            for (int e : split->expertModules)
                add(e, false, mods[size_t(e)].bytes);
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
    // The blocks inside the subtree (pre-order range); without any, the
    // block of an ancestor that contains the module (the deepest: a layer
    // split into its dense part and its experts has two).
    int ancestor = -1;
    for (size_t b = 0; b < blocks.size(); ++b) {
        const int bm = blocks[b].module;
        const Module& owner = tree.modules()[static_cast<size_t>(bm)];
        if (bm >= module && bm < m.end)
            out.push_back(static_cast<int>(b));
        else if (module > bm && module < owner.end && !blocks[b].direct &&
                 (ancestor < 0 || bm > blocks[size_t(ancestor)].module))
            ancestor = static_cast<int>(b);
    }
    if (out.empty() && ancestor >= 0)
        out.push_back(ancestor);
    return out;
}

} // namespace stowage
