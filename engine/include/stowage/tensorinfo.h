#pragma once
#include "stowage/dtype.h"

#include <cstdint>
#include <string>
#include <vector>

namespace stowage {

// One stored tensor: where its bytes are and what they mean.
struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    int shard = -1;      // index into Checkpoint::shards(), -1 when not downloaded
    uint64_t offset = 0; // absolute byte offset of the data inside the shard file
    uint64_t nbytes = 0;

    uint64_t numel() const
    {
        uint64_t n = 1;
        for (int64_t d : shape)
            n *= static_cast<uint64_t>(d);
        return n;
    }
};

// "[2, 3, 4]": a shape as error messages write it.
std::string shapeText(const std::vector<int64_t>& shape);

} // namespace stowage
