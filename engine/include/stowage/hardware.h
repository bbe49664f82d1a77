#pragma once
// Hardware profiles: what a machine's GPUs, RAM, disk and CPU can do, as
// measured on this machine (measureThisMachine) or from vendor datasheets
// (the presets), and what is free right now (detectMachineMemory). The cost
// model (costmodel.h) turns a profile and a placement into a speed.
#include <cstdint>
#include <string>
#include <vector>

namespace stowage {

struct GpuProfile {
    std::string name;            // "NVIDIA H100 80GB"
    uint64_t memoryBytes = 0;
    double memoryBandwidth = 0;  // bytes/s (HBM/GDDR)
    double h2dPinned = 0;        // host->device bytes/s, pinned memory
    double h2dPageable = 0;      // host->device bytes/s, pageable memory (what Accelerate's hooks use)
    double flops = 0;            // dense fp16/bf16 FLOP/s
};

struct HardwareProfile {
    std::string name;                // "2x RTX 4090 + 64 GB"
    std::vector<GpuProfile> gpus;    // index = GPU index in the device map
    uint64_t ramBytes = 0;
    double ramBandwidth = 0;         // bytes/s
    double diskReadBandwidth = 0;    // bytes/s
    double cpuFlops = 0;             // FLOP/s
    bool simulated = false;          // true for presets: not this machine
    // measureThisMachine only: true when RAM bandwidth and CPU FLOP/s were
    // timed here. A sanitizer or unoptimised build times its own
    // instrumentation (ASan read RAM at 1.6 GB/s), so there the figures are
    // typical defaults and `name` says so. Not part of the JSON form.
    bool measured = false;
};

// Named presets: "rtx3090", "rtx4090", "l4", "a100-40gb", "a100-80gb",
// "h100-80gb", "h200", "t4" (one GPU each, with a typical host), plus
// "this-machine" measured by a quick self-test (a fraction of a second; in an
// instrumented build, labelled defaults instead: see HardwareProfile::measured).
std::vector<std::string> hardwarePresetNames();
// Throws InputError for an unknown name. "NAME" or "NxNAME" (e.g. "2xrtx4090").
HardwareProfile hardwarePreset(const std::string& name);
HardwareProfile measureThisMachine();

// What is free right now, for planning when the user gives no budgets: GPU
// free memory by CUDA index (NVML; empty without a driver) and RAM as
// /proc/meminfo's MemAvailable (what psutil.virtual_memory().available
// reports on Linux). Fast: no bandwidth test.
struct MachineMemory {
    std::vector<uint64_t> gpuFreeBytes;
    std::vector<uint64_t> gpuTotalBytes;  // parallel to gpuFreeBytes
    std::vector<std::string> gpuNames;    // as NVML names them ("NVIDIA H200")
    uint64_t ramAvailableBytes = 0;
    uint64_t ramTotalBytes = 0;
};
MachineMemory detectMachineMemory();

// JSON round trip, so users can save and edit profiles.
std::string profileToJson(const HardwareProfile& profile);
// Throws InputError naming `path` on malformed input.
HardwareProfile profileFromJson(const std::string& text, const std::string& path);

} // namespace stowage
