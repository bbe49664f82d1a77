#pragma once
// Hardware profiles: what a machine's GPUs, RAM, disk and CPU can do, as
// measured on this machine (measureThisMachine) or from vendor datasheets
// (the presets), and what is free right now (detectMachineMemory). The cost
// model (costmodel.h) turns a profile and a placement into a speed.
#include "stowage/quantization.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace stowage {

struct GpuProfile {
    std::string name;            // "NVIDIA H100 80GB"
    uint64_t memoryBytes = 0;
    double memoryBandwidth = 0;  // bytes/s (HBM/GDDR)
    double h2dPinned = 0;        // host->device bytes/s, pinned memory
    double h2dPageable = 0;      // host->device bytes/s, pageable memory (what Accelerate's hooks use)
    double flops = 0;            // dense fp16/bf16 FLOP/s
    double computeCapability = 0; // CUDA compute capability (9.0 for an H100); 0: unknown
};

// What a decode step costs besides moving and multiplying its weights, in
// seconds: LibTorch's dispatch of each operator, the hooks around each
// execution unit, thread hand-offs, sampling. Tiny models are all fixed cost
// (the demo: ~1.5 ms per token against ~0.2 ms of weight reads).
struct FixedCosts {
    double perToken = 0;    // once per token (embedding, final norm, sampling)
    double perUnit = 0;     // per execution unit (a decoder layer) whose weights are resident
    double perDiskUnit = 0; // added per unit whose weights are fetched from disk
    // Per routed expert a token computes (top-k of each mixture-of-experts
    // layer): its matrix-vector products' hand-offs between threads, the
    // router's bookkeeping and a small matrix's slower read from RAM, beyond
    // its bytes at the profile's rate.
    double perExpert = 0;
    // accelerate-like only: bytes/s at which the runtime copies a disk
    // weight into a new CPU tensor (what glibc's allocator makes of a fresh
    // tensor per weight: reused memory for some, fresh pages for others),
    // timed on a generated model of 4 and 11 MiB weights; 0:
    // HardwareProfile::freshCopyBandwidth.
    double copyBandwidth = 0;
    // The same timed on models of other weight sizes, ascending: {weight
    // bytes, bytes/s}. Smaller weights may copy into reused memory, several
    // times faster, and pay LibTorch's cost per copy. A weight between two
    // sizes costs seconds per byte interpolated on its size's logarithm;
    // outside them, the nearest size's. Empty: copyBandwidth for every size.
    std::vector<std::pair<double, double>> copyRates = {};
    // perUnit where the model's weights are more than the CPU's caches hold
    // (HardwareProfile::cpuCacheBytes), so every matrix of a step streams
    // from RAM: each matrix-vector product starts cold (the AMD EPYC guest
    // of 2026-12-08: 0.13-0.18 ms a Llama layer beyond its bytes, against
    // 0.02 ms in cache). 0: not timed, perUnit.
    double perUnitFromRam = 0;
};

// Bytes/s at which accelerate-like copies a disk weight of `weightBytes`
// (FixedCosts::copyRates, else copyBandwidth); 0 when neither was timed.
double acceleratedCopyRate(const FixedCosts& costs, double weightBytes);

struct HardwareProfile {
    std::string name;                // "2x RTX 4090 + 64 GB"
    std::vector<GpuProfile> gpus;    // index = GPU index in the device map
    uint64_t ramBytes = 0;
    double ramBandwidth = 0;         // bytes/s
    double diskReadBandwidth = 0;    // bytes/s from the drive (page cache cold)
    double cpuFlops = 0;             // FLOP/s
    // bytes/s reading a file the page cache already holds (a copy out of the
    // cache, as read() or Accelerate's offload does); 0: half of ramBandwidth.
    double pageCacheReadBandwidth = 0;
    // bytes/s of the same copy into memory mapped fresh for it: a new tensor
    // per copy, as Accelerate's CPU offload makes one per weight per token.
    // Each new page costs a fault on first touch, which dominates in a VM
    // (0.3-1 GB/s here against 35 GB/s reused). 0: not measured, as
    // pageCacheReadBandwidth.
    double freshCopyBandwidth = 0;
    // Bytes/s of weights a matrix-vector product streams on all cores (CPU
    // decoding's inner loop) in fp32 and bf16; 0: not measured, as RAM read.
    double cpuGemvF32 = 0;
    double cpuGemvBf16 = 0;
    // The largest working set (a power of two from 4 MiB) that all cores
    // re-read at well above ramBandwidth: a model whose weights fit is read
    // from the CPU's caches every token, and its steps cost the fixed costs
    // timed on tiny models (FixedCosts::perUnit); a larger one pays
    // FixedCosts::perUnitFromRam. 0: not measured.
    uint64_t cpuCacheBytes = 0;
    // Fixed costs per execution policy ("accelerate-like", "prefetch",
    // "compute-where-it-lives"; costmodel.h's policyName), measured by
    // `stowage-cli hardware` (the runtime times tiny generated models) and
    // kept per machine (fixedCostsCachePath). Empty: not measured, and the
    // cost model counts bytes and FLOPs only, as a datasheet preset does.
    std::map<std::string, FixedCosts> fixedCosts;
    // For people: which figures were measured here and which are datasheet or
    // assumed values ("RAM read: measured; disk read: assumed NVMe datasheet").
    std::string sources;
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
// `diskSample`: a file on the drive the weights live on (a checkpoint shard);
// when given, up to 256 MiB of it are read past the page cache (O_DIRECT) to
// time the drive. Without one, or where the file system refuses O_DIRECT, the
// disk figure is a labelled assumption (see HardwareProfile::sources).
// `withFixedCosts`: attach the fixed costs kept for this CPU
// (loadFixedCosts), and with them the CPU rates they were fitted to
// (FittedRates): the two are one calibration. False: every rate as
// measured now, no fixed costs.
HardwareProfile measureThisMachine(const std::string& diskSample = {}, bool withFixedCosts = true);
// Sequential read of up to `maxBytes` of `path`: past the page cache
// (O_DIRECT, cold) or through it (warm: the file's pages are read into the
// cache first). Bytes/s; 0 when the file cannot be read that way.
double measureFileReadBandwidth(const std::string& path, bool cold, uint64_t maxBytes = 256ULL << 20);

// Where `stowage-cli hardware` keeps the fixed costs it measured for this
// machine: $STOWAGE_CACHE_DIR, else $XDG_CACHE_HOME/stowage, else
// ~/.cache/stowage, then "fixed-costs.json". measureThisMachine reads them
// from there when they were measured on this CPU (model name and core
// count), so `plan`, the window and `run --json` predict with them.
std::string fixedCostsCachePath();
// This machine's key in that file: "AMD EPYC, 2 cores".
std::string thisCpuKey();
// Writes `costs` for thisCpuKey() with `when` (an ISO date) to the cache;
// throws InputError naming the file when it cannot be written.
// The CPU rates fixed costs were fitted to: a step's fixed costs are what its
// measured time has beyond its bytes at these rates. This VM's RAM rate
// moves between two levels (35 and 55 GB/s) from one measurement to the
// next; fixed costs fitted at one level and paired with a profile measured
// at the other put a 440 MB Llama at 1.3-1.8x its speed (2026-12-08).
struct FittedRates {
    double ramBandwidth = 0, cpuGemvF32 = 0, cpuGemvBf16 = 0; // 0: not kept
    uint64_t cpuCacheBytes = 0;
};
FittedRates fittedRatesOf(const HardwareProfile& profile);
// Writes `costs` for thisCpuKey() with `when` (an ISO date) and the rates
// they were fitted to to the cache; throws InputError naming the file when
// it cannot be written.
void saveFixedCosts(const std::map<std::string, FixedCosts>& costs, const std::string& when,
                    const FittedRates& fittedTo = {});
// The fixed costs saved for thisCpuKey(), in `when` the date they were
// measured and in `fittedTo` the rates they were fitted to (zeros where the
// entry has none); empty when none were (or the file is unreadable: then
// they are measured again, never an error).
std::map<std::string, FixedCosts> loadFixedCosts(std::string* when = nullptr, FittedRates* fittedTo = nullptr);

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
// Just the RAM part of it: MemAvailable (or free + buffers + cache on kernels
// without it), read from /proc/meminfo each call.
uint64_t availableRamBytes();

// JSON round trip, so users can save and edit profiles.
std::string profileToJson(const HardwareProfile& profile);
// Throws InputError naming `path` on malformed input.
HardwareProfile profileFromJson(const std::string& text, const std::string& path);
// What a user names as hardware anywhere (the CLI's --hardware, the worker's
// "hardware"): a saved profile FILE.json, else a preset name ("rtx4090",
// "2xh100-80gb"). Throws InputError for an unreadable file or unknown preset.
HardwareProfile hardwareFromSpec(const std::string& spec);
// What a quantizer sees of such a machine (quantization.h): CUDA when it has
// a GPU, with GPU 0's compute capability (0 when unknown).
QuantTarget quantTargetOf(const HardwareProfile& profile);

} // namespace stowage
