#pragma once
#include "stowage/config.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include <optional>

namespace stowage {

// The KV cache and activation room a generation of `context` tokens at
// `batch` needs, for the known families; nullopt when config.json lacks what
// it takes (an unknown family).
std::optional<KvReserve> kvReserveFor(const ModelConfig& config, const ModuleTree& tree, int context, int batch,
                                      DType dtype);

} // namespace stowage
