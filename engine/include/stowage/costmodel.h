#pragma once
// Predicted decode speed of a placement from a hardware profile: which
// device's weights cost how much time per generated token.
#include "stowage/device.h"
#include "stowage/hardware.h"
#include "stowage/planner.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

// How a placement runs. AccelerateLike: offloaded weights are copied to the
// execution device synchronously from pageable memory, before each module.
// Prefetch: copies from pinned memory overlap compute. ComputeWhereItLives:
// CPU-resident layers run on the CPU instead of being copied.
enum class ExecutionPolicy { AccelerateLike, Prefetch, ComputeWhereItLives };
// "accelerate-like", "prefetch", "compute-where-it-lives" (the CLI's and the
// worker's --policy, the GUI's menu).
const char* policyName(ExecutionPolicy p);
std::optional<ExecutionPolicy> policyFromName(const std::string& name);

struct DeviceShare {
    Device device;
    uint64_t weightBytes = 0; // weights resident there
    double seconds = 0;       // its part of one decode step
    double share = 0;         // seconds / total
    std::string bottleneck;   // "HBM read", "PCIe pageable copy", "PCIe pinned copy", "disk read", "page-cache read", "copy into fresh memory", "RAM read", "compute"
};

struct CostEstimate {
    double secondsPerToken = 0;
    double tokensPerSecond = 0;
    std::vector<DeviceShare> devices; // in device order, only devices holding weights
    // Hardware the estimate had to assume because the profile lacks it, for
    // people ("GPU 1: not in the profile; costed like GPU 0 (NVIDIA L4)").
    // Empty when the profile covers every device of the placement.
    std::vector<std::string> assumptions;
    // The part of secondsPerToken that is the profile's fixed costs (per
    // token, per execution unit, per unit fetched from disk); 0 when the
    // profile has none for the policy. Not in any device's seconds.
    double fixedSeconds = 0;
};

// How many execution units a decode step runs, and how many of them have
// their weights on disk: what the profile's fixed costs are counted by.
struct StepUnits {
    int total = 0;
    int onDisk = 0;
    int64_t experts = 0; // routed experts computed per token (top-k x mixture-of-experts layers)
    // The disk-resident weights by size: size -> bytes of weights that size.
    std::map<uint64_t, uint64_t> diskWeights;
};

// What a GPU index costs when the profile has no GPU at all: a modest PCIe 4.0
// card (500 GB/s memory, 24 GB/s pinned and 12 GB/s pageable copies, 50
// TFLOP/s), named as the assumption it is.
GpuProfile assumedGpu();

// Compute-where-it-lives: a RAM-resident layer runs on the CPU when reading
// it from RAM is quicker than copying it (pinned) to `gpu` and reading it
// there. Linear in bytes, so it decides per layer and per device alike; the
// cost model and the runtime's weight store both ask it.
bool ramLayerRunsOnCpu(const HardwareProfile& profile, const GpuProfile& gpu);

// `placement`: bytes of weights per device (as the planner reports them);
// `flopsPerToken`: about 2 x parameters. Devices the profile lacks (a GPU
// index beyond profile.gpus) are costed like the last GPU of the profile, or
// as assumedGpu() when it has none; CostEstimate::assumptions says so.
//
// Disk-resident weights: when the checkpoint's RAM and disk parts together fit
// in the profile's RAM, the page cache holds the disk part after the first
// token and it is read at pageCacheReadBandwidth (a copy), else from the drive
// at diskReadBandwidth. Computed on the CPU under Prefetch or
// ComputeWhereItLives they are not copied at all but read in place from the
// memory-mapped file (the runtime's weight store): then a warm page cache
// costs a RAM read, and a drive's read overlaps the compute (read-ahead).
//
// Weights copied to the execution GPU under Prefetch (and ComputeWhereItLives
// where the GPU wins) stream on their own: the runtime fetches the next
// offloaded layer while the resident ones compute (one layer ahead; more
// where the GPU has room), so the copies overlap the GPU's whole compute,
// not only that of the copied layers. `unitBytes`, the largest layer copied
// per token (a plan's DeviceTotal::reservedLayer), sizes the one copy that
// cannot overlap: a token then costs max(copies, GPU compute, resident
// compute + the copied part - one layer's copy beyond its compute). Where one
// layer is all that is copied, its next copy starts only once it has run:
// max(copy, resident compute) + its compute. 0: unknown, and copies overlap
// only the copied layers' compute (lower).
CostEstimate estimateDecode(const std::vector<std::pair<Device, uint64_t>>& placement, uint64_t flopsPerToken,
                            const HardwareProfile& profile, ExecutionPolicy policy = ExecutionPolicy::AccelerateLike,
                            uint64_t unitBytes = 0, StepUnits units = {});
// The same for a plan: its weights per device, and the largest layer it
// reserved room for as the unit that is copied.
CostEstimate estimateDecode(const Plan& plan, uint64_t flopsPerToken, const HardwareProfile& profile,
                            ExecutionPolicy policy, StepUnits units = {});
// What `plan`, the window and `run --json` show: the plan of `tree`, ~2 FLOPs
// per parameter, and the tree's execution units where the plan puts them.
CostEstimate estimateDecode(const Plan& plan, const ModuleTree& tree, const HardwareProfile& profile,
                            ExecutionPolicy policy);
// The execution units of `tree` (families.h) and how many of them `map`
// sends to disk (a unit counts as on disk when any of its weights is).
StepUnits stepUnits(const ModuleTree& tree, const DeviceMap& map);

} // namespace stowage
