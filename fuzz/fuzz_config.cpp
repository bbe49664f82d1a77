// config.json (engine/formats/config.cpp and the family registry that reads
// it, engine/model/families): the input is config.json, beside the demo's
// model.safetensors.index.json with no shards — a checkpoint opened before
// download, so shapes come from config.json alone. Opened, built into a
// module tree, planned and given a KV-cache reserve (checkpoint_common.h).
#include "checkpoint_common.h"

#include "stowage/config.h"

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::Scratch::get().write("model.safetensors.index.json",
                               fuzz::readSource("resources/demo/model.safetensors.index.json"));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const stowage::ModelConfig c = stowage::ModelConfig::parse(text, "config.json");
        for (const char* key : {"num_hidden_layers", "hidden_size", "vocab_size", "n_layer"}) {
            try {
                (void)c.integer(key, 1);
                (void)c.positive(key, 1);
            } catch (const stowage::InputError&) {
            }
        }
        (void)c.number("rms_norm_eps", 1e-6);
        (void)c.boolOr("tie_word_embeddings", true);
        (void)c.stringOr("hidden_act", "gelu");
    } catch (const stowage::InputError&) {
    }
    const auto& scratch = fuzz::Scratch::get();
    scratch.write("config.json", text);
    try {
        const stowage::Checkpoint ck = stowage::Checkpoint::open(scratch.dir());
        fuzz::planCheckpoint(ck);
    } catch (const stowage::InputError&) {
    }
    return 0;
}
