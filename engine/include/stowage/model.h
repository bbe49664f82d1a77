#pragma once
// The LibTorch-backed model: load a checkpoint by a device map, keep
// offloaded weights in an offload store, run forward passes through hooks
// (generation over it: generate.h). This header stays free of LibTorch types
// so Qt code (and the LibTorch-free CLI) can include it.
#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"
#include "stowage/telemetry.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

// Return false to cancel; `fraction` is 0..1.
using ProgressFn = std::function<bool(double fraction, const std::string& what)>;

struct LoadOptions {
    DeviceMap deviceMap{{"", Device::cpu()}};
    std::optional<DType> dtype;   // weights' dtype; default: the checkpoint's (fp16 on the CPU: fp16 weights, fp32 activations)
    std::string offloadFolder;    // needed when disk tensors cannot be read from the original files
    bool simulateGpus = false;    // GPUs in the map become budgeted pools of CPU memory
    Budgets gpuBudgets;           // limits enforced on (simulated) GPUs
    double simulatedPcieBytesPerSecond = 0; // throttle copies to simulated GPUs (0 = as fast as memcpy)
    // With ComputeWhereItLives, a RAM-resident unit runs on the CPU when this
    // profile says reading it from RAM beats copying it over PCIe and reading
    // it from GPU memory; without a profile, always (true of every preset).
    std::optional<HardwareProfile> profile;
    // AccelerateLike: synchronous pageable copies before each unit, no prefetch
    // (the baseline). Prefetch: the next unit's offloaded weights are fetched
    // while the current one computes (pinned memory and a side stream on CUDA).
    // ComputeWhereItLives: also runs units whose weights all live in RAM on the
    // CPU instead of copying them to the GPU.
    ExecutionPolicy policy = ExecutionPolicy::Prefetch;
    int threads = 0;              // 0: every core this process may use
    // Where the model records what it does; given by a caller that wants to
    // watch the load itself (a session does). Default: the model's own.
    std::shared_ptr<Telemetry> telemetry;
};

// A model with its weights dispatched; forward passes keep a KV cache.
class Model {
public:
    // Throws InputError (bad map, unknown family, unwritable offload folder),
    // Cancelled when progress returns false (everything loaded is released).
    static std::unique_ptr<Model> load(const Checkpoint& checkpoint, const ModuleTree& tree, const LoadOptions& options,
                                       const ProgressFn& progress = {});
    ~Model();

    // Runs `ids` after what the cache holds; returns float32 logits, one row of
    // vocabSize() per position when allPositions, else only the last position's.
    std::vector<float> forward(const std::vector<int32_t>& ids, bool allPositions = false);
    // Empties the KV cache. `expectedPositions`: how many positions the next
    // run will hold at most (prompt + new tokens), so CPU caches are sized
    // once instead of growing; 0 when unknown.
    void resetCache(int expectedPositions = 0);
    // Ends a run of forward passes: offloaded weights fetched ahead for a next
    // pass are released (a GPU with room may hold many), the KV cache stays.
    // Prefetching starts again with the next pass.
    void idle();
    // Waits for weights being fetched ahead and starts fetching no more until
    // the next pass; what is fetched stays for it (benchmarks: a quiet
    // moment between passes that lends the prefetcher no time).
    void settle();
    int vocabSize() const;
    int cachedTokens() const;
    const std::string& modelType() const;
    // A stop request for forward passes under way: when *flag turns true the
    // pass throws Stopped at the next execution unit (or copy slice), its KV
    // cache entries are dropped and every fetched copy released. *flag must
    // outlive the model.
    void setInterrupt(const std::atomic<bool>* flag);
    // Teaching: pause this long before each execution unit computes.
    void setUnitDelay(double seconds);
    // The execution units in the order a forward pass runs them.
    std::vector<std::string> units() const;
    // The device each unit computes on ("0", "cpu").
    std::string unitDevice(const std::string& unit) const;
    // Devices in use, each with "simulated" said where it applies.
    std::vector<std::string> deviceDescriptions() const;
    Telemetry& telemetry();

    struct Impl;

private:
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

} // namespace stowage
