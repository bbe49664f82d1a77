#pragma once
// Devices a device map names, ordered as Accelerate orders them: GPUs by
// index, then cpu, then disk.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

struct Device {
    enum Kind : uint8_t { Gpu, Cpu, Disk };
    Kind kind = Cpu;
    int index = 0; // GPU index; 0 otherwise

    static Device gpu(int i) { return {Gpu, i}; }
    static Device cpu() { return {Cpu, 0}; }
    static Device disk() { return {Disk, 0}; }
    // "0", "1", "cpu", "disk" (also "cuda:1"); nullopt when not a device name.
    static std::optional<Device> parse(const std::string& s);
    // "0", "cpu", "disk": how the device-map JSON and the CLI spell it.
    std::string name() const;

    bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
    bool operator!=(const Device& o) const { return !(*this == o); }
    bool operator<(const Device& o) const { return kind != o.kind ? kind < o.kind : index < o.index; }
};

// Accelerate's convert_file_size_to_int: "10GB" = 10^9, "10GiB" = 2^30,
// "10Gb" = bits (10^9 / 8), plain integers are bytes. Throws InputError
// (naming `what`, e.g. "--max-memory 0") for anything else or a negative size.
uint64_t parseSize(const std::string& text, const std::string& what = "size");

// A per-device byte limit, in device order. Values are doubles because
// Accelerate's 90% rule makes them floats and its comparisons are exact.
struct DeviceBudget {
    Device device;
    double bytes = 0;
};
using Budgets = std::vector<DeviceBudget>;

// Sorts into device order; throws InputError on a device given twice.
Budgets normalizeBudgets(Budgets budgets);

// One max_memory entry: a device name ("0", "cpu", "disk") and a size
// (parseSize). Throws InputError naming `what` (the entry as the user wrote
// it) for an unknown device or a bad size. Every front end (the CLI's
// --max-memory DEV=SIZE, the worker's max_memory object, the window's
// command line) reads budgets through these two.
DeviceBudget parseBudget(const std::string& device, const std::string& size, const std::string& what);
// "DEV=SIZE" (0=20GiB, cpu=64GB); InputError naming `what` when there is no '='.
DeviceBudget parseBudgetSpec(const std::string& spec, const std::string& what);

} // namespace stowage
