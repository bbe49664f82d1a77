#pragma once
#include "stowage/checkpoint.h"
#include "stowage/config.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include <optional>
#include <string>

namespace stowage {

// The KV cache and activation room a generation of `context` tokens at
// `batch` needs, for the known families; nullopt when config.json lacks what
// it takes (an unknown family).
std::optional<KvReserve> kvReserveFor(const ModelConfig& config, const ModuleTree& tree, int context, int batch,
                                      DType dtype);

// How much context the KV reserve is for: "CONTEXT" or "CONTEXTxBATCH"
// ("4096", "8192x4"), as the CLI's --kv-cache and the worker's kv_cache take it.
struct KvSpec {
    int context = 0;
    int batch = 1;
};
// Throws InputError naming `what` for anything but a positive CONTEXT[xBATCH].
KvSpec parseKvSpec(const std::string& text, const std::string& what);
// kvReserveFor with the checkpoint's config and the tree's dtype; throws
// InputError (naming config.json or the weights) when the checkpoint has no
// config.json or its family's attention shape is unknown.
KvReserve kvReserveForCheckpoint(const Checkpoint& checkpoint, const ModuleTree& tree, KvSpec spec);

} // namespace stowage
