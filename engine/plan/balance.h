#pragma once
#include "plannerstate.h"

namespace stowage::detail {

// get_balanced_memory: caps every GPU but the last near total / n_gpus plus
// a buffer; with lowZero GPU 0 takes only what the others cannot. With one
// GPU and no user budget, 90% of its memory.
Budgets balancedMemory(const ModuleTree& tree, const Sizes& sizes, Budgets mm, bool userNotSet, bool lowZero,
                       std::vector<std::string>* notes);

} // namespace stowage::detail
