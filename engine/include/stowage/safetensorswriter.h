#pragma once
// Writes a .safetensors file (used by the offload store, the demo checkpoint
// and the test fixtures). Tensors are written in the order given.
#include "stowage/dtype.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stowage {

struct TensorBlob {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes; // little-endian, row-major
};

// Throws InputError naming `path` if it cannot be written completely.
void writeSafetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The bytes of a header for `tensors` (8-byte length + JSON, space-padded to 8).
std::vector<uint8_t> safetensorsHeader(const std::vector<TensorBlob>& tensors,
                                       const std::map<std::string, std::string>& metadata);

} // namespace stowage
