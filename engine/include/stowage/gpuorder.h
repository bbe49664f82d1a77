#pragma once
// Which GPU fills first. Accelerate and transformers fill GPUs in index
// order; a user with a 3090 at index 1 beside a 3060 at index 0 wants the
// 3090 filled first and the 3060 last (or not at all: leave it out of the
// budgets). planInGpuOrder plans as if the GPUs were numbered in the given
// order and gives every device of the result its real index back, so the
// map names real GPUs: its first GPU (the one holding the first modules) is
// the execution device, as transformers takes the map's first GPU.
#include "stowage/planner.h"

#include <vector>

namespace stowage {

// `order`: GPU indices, first filled first; each GPU of the budgets once.
// An empty order, or one in index order, plans as planDeviceMap does.
// Throws InputError for an order that names a GPU twice or misses one the
// budgets give.
Plan planInGpuOrder(const ModuleTree& tree, const PlanOptions& options, const std::vector<int>& order);

// "1,0,2" -> {1, 0, 2}; InputError naming `what` for anything else.
std::vector<int> parseGpuOrder(const std::string& text, const std::string& what);

} // namespace stowage
