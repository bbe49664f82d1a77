#pragma once
// The torch.save() parser. It takes the whole mapped file and returns the
// tensors with absolute offsets, so a tensor is a zero-copy view into the map.
// Malformed input throws InputError naming `path` and the rule it broke.
#include "stowage/tensorinfo.h"

#include <cstdint>
#include <string>
#include <vector>

namespace stowage {

// A zip-format torch.save() file (pytorch_model.bin), read by a restricted
// unpickler that understands only tensors and plain containers: any other
// global is refused, nothing from the file is ever executed.
std::vector<TensorInfo> parseTorchBin(const uint8_t* data, uint64_t size, const std::string& path);

} // namespace stowage
