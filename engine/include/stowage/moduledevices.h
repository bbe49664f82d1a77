#pragma once
// Which device each module of a tree lands on under a device map, for the
// whole tree at once in O(modules + parameters): the module tree's device
// column and the placement map both read it on every re-plan, so it must
// stay far below a frame even for a 405B-class skeleton.
#include "stowage/device.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include <vector>

namespace stowage {

// Stable code for a device (GPU index, or CpuCode / DiskCode) and back:
// one int per module, cheap to compare, to merge and to keep in a model role.
constexpr int CpuCode = 1 << 20;
constexpr int DiskCode = CpuCode + 1;
int deviceCode(const Device& d);
Device deviceFromCode(int code);

constexpr int NoDeviceCode = -1; // nothing of it is in the map (a module without tensors)
constexpr int MixedCode = -2;    // split across devices

struct ModuleDevices {
    std::vector<int> code;  // per module: deviceCode(), NoDeviceCode or MixedCode
    std::vector<int> entry; // per module: the map entry covering it (longest key), -1 when none
};

ModuleDevices moduleDevices(const ModuleTree& tree, const DeviceMap& map);

} // namespace stowage
