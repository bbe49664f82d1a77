#pragma once
// The placement map's data: the model's layers in definition order, each
// with its bytes, its device and the map entry (so the planner's reason)
// that put it there. A value type computed in O(modules) per plan; the
// view only scales and paints it, and hit-tests by binary search.
#include "stowage/moduledevices.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include <cstdint>
#include <vector>

namespace stowage {

struct PlacementBlock {
    int module = -1;               // index into tree.modules()
    bool direct = false;           // only the module's own tensors, not its children
    uint64_t bytes = 0;
    uint64_t offset = 0;           // bytes of all blocks before this one
    int deviceCode = NoDeviceCode; // deviceCode(), or MixedCode
    int entry = -1;                // plan entry covering it, -1 when split
    uint64_t expertBytes = 0;      // of `bytes`, the routed experts' (modules named "experts": MoE layers)
};

// A run of consecutive blocks on one device: the brackets under the strip.
struct PlacementRun {
    int first = 0, last = 0; // block indices, inclusive
    int deviceCode = NoDeviceCode;
    uint64_t bytes = 0;
};

struct PlacementLayout {
    std::vector<PlacementBlock> blocks;
    std::vector<PlacementRun> runs;
    uint64_t totalBytes = 0;
    // The block holding byte offset `bytes` (binary search); -1 outside.
    int blockAt(uint64_t bytes) const;
    // Blocks of module `module` or of its subtree, or the block containing it.
    std::vector<int> blocksOf(const ModuleTree& tree, int module) const;
};

// Blocks are the leaves of the tree seen as layers: modules of a no-split
// class (decoder blocks) and modules without children, plus a block for the
// direct tensors of a module that also has children. Blocks without bytes
// are left out. A block's expertBytes are those of the routed experts
// inside it: the subtrees of modules whose own name is "experts" (Mixtral's
// block_sparse_moe.experts, Qwen3-MoE's mlp.experts; shared experts are named
// otherwise and count as dense).
PlacementLayout layoutPlacement(const ModuleTree& tree, const ModuleDevices& devices);

} // namespace stowage
