#pragma once
#include "stowage/checkpoint.h"
#include "stowage/config.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include <optional>
#include <string>
#include <vector>

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

// Where each decoder layer's KV cache lives under `map`, one entry per
// module of `layerClass` in tree order: where the layer computes. A layer on
// a GPU computes there. One in RAM or on disk computes on the execution
// device: the map's lowest GPU when it names one (transformers' hooks move
// its weights there, and so do Stowage's policies, but compute-where-it-lives
// with a RAM layer the CPU computes faster), else the CPU. The planner's KV
// reserve and the context sweep both count caches here.
std::vector<Device> layerCacheDevices(const ModuleTree& tree, const DeviceMap& map, const std::string& layerClass);

// How a plan's memory grows with the context (plan --context-sweep, the
// Plan page's context chart): per device, what the planner's KV reserve
// would count at each context for this map: the weights it holds, the KV
// cache of the decoder layers whose cache lives on it (layerCacheDevices),
// and on each GPU and the CPU that holds anything the largest activation
// (KvReserve::activationBytes).
struct ContextSweep {
    struct DeviceRow {
        Device device;
        double budget = -1;     // -1: none given (never runs out)
        uint64_t weights = 0;   // bytesPerDevice
        // The first context (1..maxContext) at which the device's bytes pass
        // its budget; 0 when the weights alone do; nullopt when it never
        // does up to maxContext. "KvInRam": the same with every layer's KV
        // cache kept in RAM instead (the GPU then holds weights and
        // activations; the CPU all the cache).
        std::optional<int64_t> runsOutAt, runsOutAtKvInRam;
    };
    int batch = 1;
    int64_t maxContext = 0;
    std::vector<DeviceRow> devices;           // the map's devices, then budgeted ones it leaves empty
    std::vector<int64_t> contexts;            // sampled contexts and each crossing, ascending, maxContext last
    std::vector<std::vector<uint64_t>> bytes; // [context][device], as `devices`
};
// Bytes a device holds at `context` under ContextSweep's accounting.
// `kvInRam`: every layer's cache counted on the CPU.
uint64_t deviceBytesAtContext(const ModelConfig& config, const ModuleTree& tree, const DeviceMap& map,
                              const Device& device, int64_t context, int batch, bool kvInRam);
// Samples `points` contexts from 1 to maxContext (geometrically, whole
// numbers, each distinct), finds each device's crossing exactly (the bytes
// only grow with the context) and samples it too. Throws InputError naming config.json
// for a family whose attention shape Stowage does not know.
ContextSweep sweepContext(const ModelConfig& config, const ModuleTree& tree, const DeviceMap& map,
                          const Budgets& budgets, int batch, int64_t maxContext, int points = 24);
// One sentence per budgeted device, as the window and the CLI say it:
// "GPU 0 runs out at token 11,400 with batch 1; 46,000 with the KV cache in
// RAM".
std::vector<std::string> describeContextSweep(const ContextSweep& sweep);

} // namespace stowage
