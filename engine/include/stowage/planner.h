#pragma once
// Device maps exactly as transformers 5.6's from_pretrained(device_map=STRATEGY,
// max_memory=..., dtype=...) computes them with Accelerate 1.13 installed, or
// (Reference::Accelerate) as Accelerate's own get_balanced_memory +
// infer_auto_device_map compute them, with an explanation per entry.
#include "stowage/device.h"
#include "stowage/moduletree.h"
#include "stowage/quantization.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

// The four device_map strings transformers takes, and Stowage's own
// ExpertsInRam ("experts_in_ram", expertsinram.cpp): for mixtures of
// experts, what every token uses on the GPUs, the routed experts in RAM.
enum class Strategy { Auto, Balanced, BalancedLow0, Sequential, ExpertsInRam };
std::optional<Strategy> strategyFromName(const std::string& name);
const char* strategyName(Strategy s);

// Beyond Accelerate, off unless asked for: room for the KV cache of the
// layers a device holds, and for the largest activation on every device.
struct KvReserve {
    // The largest layer's cache: 2 x batch x context x kv_heads x head_dim x
    // dtype bytes for a uniform family (every layer's then).
    uint64_t bytesPerLayer = 0;
    uint64_t activationBytes = 0; // largest activation, reserved on each GPU and the CPU
    std::string layerClass;       // which modules are "layers" (the no-split class)
    int context = 0, batch = 1;
    // Each layer's where they differ (sliding windows, MLA's compressed
    // cache): the i-th module of layerClass in definition order gets
    // layerBytes[i]; empty, or a module past its end, bytesPerLayer.
    std::vector<uint64_t> layerBytes{};
};

struct PlanOptions {
    Strategy strategy = Strategy::Auto;
    Reference reference = Reference::Transformers;
    // The user's max_memory; nullopt means "detect the machine" (machineMemory
    // below). A partial one is taken as given: devices it omits do not exist.
    std::optional<Budgets> maxMemory;
    // What get_max_memory()'s probes report when maxMemory is nullopt: per GPU
    // its free memory (transformers adds what torch's caching allocator has
    // reserved but not allocated: 0 in a process that allocated nothing), and
    // the available RAM. The planner applies the reference's cuts (90% of the
    // RAM for transformers; 90% of a single GPU unless sequential) and never
    // probes hardware itself.
    Budgets machineMemory;
    std::optional<std::vector<std::string>> noSplit; // overrides the model's no-split classes
    bool offloadBuffers = false;
    std::optional<KvReserve> kv;
    // The machine the plan is for, as a quantized checkpoint's quantizer
    // sees it (quantization.h): whether MXFP4 and FP8 stay quantized or are
    // dequantized at load. Default: no CUDA GPU.
    QuantTarget quantTarget;
};

using DeviceMap = std::vector<std::pair<std::string, Device>>;

struct PlanEntry {
    std::string module;
    Device device;
    uint64_t bytes = 0;
    std::string why; // one sentence
};

struct DeviceTotal {
    Device device;
    double budget = -1;     // after balancing; -1 = unlimited (disk)
    uint64_t used = 0;      // weights placed there
    uint64_t reserved = 0;  // room kept for the largest layer (main devices) and KV cache
    uint64_t reservedLayer = 0; // the largest-layer part of `reserved`
    uint64_t reservedKv = 0;    // the KV-cache part of `reserved` (with --kv-cache)
};

struct Plan {
    Reference reference = Reference::Transformers;
    DeviceMap deviceMap;            // cleaned, in transformers' order
    std::vector<PlanEntry> entries; // same order as deviceMap
    std::vector<DeviceTotal> devices;
    Budgets budgets;                // what infer_auto_device_map was given
    std::vector<std::string> notes; // warnings and what was reserved
    // A quantized checkpoint: how its weights were sized, in one sentence
    // ("MXFP4 experts will be dequantized to bf16 on this machine (…): 12.8 GB
    // instead of 3.2 GB"); empty otherwise. Also the first of `notes`.
    std::string quantization;
    // Why transformers 5.6 would refuse to load this map (bitsandbytes with
    // a module in RAM or on disk; FP8 with one on disk); empty when it loads.
    std::string refusal;
};

// Throws InputError for impossible options (unknown device, ...).
Plan planDeviceMap(const ModuleTree& tree, const PlanOptions& options);
// Strategy::ExpertsInRam on budgets already cut for the activation room;
// throws InputError for a model without routed experts.
Plan planExpertsInRam(const ModuleTree& tree, const Budgets& budgets, const std::optional<KvReserve>& kv);

// Accelerate's clean_device_map: entries whose children all landed on one
// device merge into their parent, which moves to the end.
void cleanDeviceMap(DeviceMap& map);

// Device-map JSON as transformers stores it in model.hf_device_map.
std::string deviceMapToJson(const DeviceMap& map, int indent = 2);
// Throws InputError naming `path` for malformed JSON or unknown devices.
DeviceMap deviceMapFromJson(const std::string& text, const std::string& path);

struct MapCheck {
    std::vector<std::string> errors;   // first uncovered tensor, ties split, ...
    std::vector<std::string> warnings; // keys that match no module
    // The module, tensor or map key each message is about, parallel to
    // errors and warnings, so a window can list problems by module.
    std::vector<std::string> errorSubjects, warningSubjects;
};
// Validates a user-supplied map against the tree.
MapCheck validateDeviceMap(const ModuleTree& tree, const DeviceMap& map);
// Checks a user's map against the devices it will be given: a GPU that
// `budgets` does not list is an error (there is no such device), and a GPU
// or the CPU that gets more bytes (bytesPerDevice) than its budget is a
// warning. The disk is not checked (it is unlimited, as for the planner).
// Each subject is the first map key that sends weights to that device.
MapCheck checkDeviceMapFits(const ModuleTree& tree, const DeviceMap& map, const Budgets& budgets);
// Whether `name` is `module` or lies under it ("" is the whole model); the
// prefix rule device-map keys and execution units share.
bool isUnder(const std::string& name, const std::string& module);
// The device of a tensor/module name: longest matching key ("" = all), or nullopt.
std::optional<Device> deviceFor(const DeviceMap& map, const std::string& name);

// Bytes the map sends to each device: every parameter (tied ones once, sized
// under the tree's dtype and reference) and, with `buffers`, every buffer, on
// the device deviceFor gives it; names the map does not cover count nowhere.
// Devices that get nothing are absent.
std::map<Device, uint64_t> bytesPerDevice(const ModuleTree& tree, const DeviceMap& map, bool buffers = true);
// A plan that is a given map rather than a computed one (plan --device-map,
// the window's Import): its entries in the map's order, each with the bytes
// of the module or parameter it names (0 for a key that names neither) and
// `why`; per device the bytes bytesPerDevice counts, with no budget (-1).
// Budgets and notes are left empty; nothing is validated here.
Plan planFromDeviceMap(const ModuleTree& tree, const DeviceMap& map, const std::string& why);

} // namespace stowage
