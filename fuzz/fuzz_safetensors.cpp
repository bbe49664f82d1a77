// The safetensors header parser (engine/formats/safetensors.cpp) on a whole
// file's bytes, as Checkpoint hands it a mapped shard. What it accepts must
// describe only bytes inside the file: every tensor's range lies in the data
// area, its size is shape x dtype, and the ranges tile the data area.
#include "common.h"

#include "stowage/safetensors.h"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    try {
        const stowage::SafetensorsHeader h = stowage::parseSafetensors(data, size, "fuzz.safetensors");
        uint64_t at = 0;
        for (const auto& t : h.tensors) {
            if (at == 0)
                at = t.offset; // 8 + the header length
            if (t.offset != at || t.nbytes > size || t.offset > size - t.nbytes ||
                t.nbytes != t.numel() * stowage::dtypeSize(t.dtype))
                std::abort();
            at += t.nbytes;
        }
        if (!h.tensors.empty() && at != size)
            std::abort();
    } catch (const stowage::InputError&) {
    }
    return 0;
}
