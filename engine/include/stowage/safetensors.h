#pragma once
// The safetensors parser. It takes the whole mapped file and returns the
// tensors with absolute offsets, so a tensor is a zero-copy view into the map.
// Malformed input throws InputError naming `path` and the rule it broke.
#include "stowage/tensorinfo.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stowage {

struct SafetensorsHeader {
    std::vector<TensorInfo> tensors; // in data-offset order
    std::map<std::string, std::string> metadata;
};

// Validates exactly what the reference safetensors implementation checks.
SafetensorsHeader parseSafetensors(const uint8_t* data, uint64_t size, const std::string& path);

} // namespace stowage
