// model.safetensors.index.json (Checkpoint::openIndex in
// engine/formats/checkpoint.cpp): the input is the index, beside the demo's
// config.json, in a folder holding no shards — planning before download, so
// the tensor names come from the index and the shapes from the registry.
// A shard name that happens to exist (config.json itself) is opened as a
// weights file. What opens is built into a tree and planned.
#include "checkpoint_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::Scratch::get().write("config.json", fuzz::readSource("resources/demo/config.json"));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const auto& scratch = fuzz::Scratch::get();
    scratch.write("model.safetensors.index.json", std::string(reinterpret_cast<const char*>(data), size));
    try {
        const stowage::Checkpoint ck = stowage::Checkpoint::open(scratch.path("model.safetensors.index.json"));
        fuzz::planCheckpoint(ck);
    } catch (const stowage::InputError&) {
    }
    return 0;
}
