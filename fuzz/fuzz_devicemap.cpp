// Device-map JSON as the planner imports it (engine/plan/devicemapjson.cpp:
// deviceMapFromJson, validateDeviceMap; `plan --device-map`, the window's
// Import and the worker's load all go this way). A map that parses is checked
// against two trees — the demo Llama and a GPT-2 with a tied head — sized per
// device as the window's import does, cleaned, and must survive a round trip
// through deviceMapToJson unchanged.
#include "checkpoint_common.h"

#include <memory>

namespace {

std::vector<std::unique_ptr<stowage::ModuleTree>> trees;

// A GPT-2 folder with only config.json and an index: its head is tied to wte.
std::string writeGpt2(const fuzz::Scratch& scratch)
{
    const std::string dir = scratch.path("gpt2");
    std::filesystem::create_directories(dir);
    scratch.write("gpt2/config.json", R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "vocab_size": 96, "n_positions": 32, "n_embd": 16, "n_layer": 2, "n_head": 2, "torch_dtype": "float16"})");
    std::string map;
    auto add = [&](const std::string& name) {
        map += (map.empty() ? "" : ",") + std::string("\"transformer.") + name + "\": \"model.safetensors\"";
    };
    add("wte.weight");
    add("wpe.weight");
    for (int i = 0; i < 2; ++i)
        for (const char* m : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"})
            for (const char* p : {"weight", "bias"})
                add("h." + std::to_string(i) + "." + m + "." + p);
    add("ln_f.weight");
    add("ln_f.bias");
    scratch.write("gpt2/model.safetensors.index.json", "{\"weight_map\": {" + map + "}}");
    return dir;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    const auto& scratch = fuzz::Scratch::get();
    for (const std::string& dir : {std::string(STOWAGE_SOURCE_DIR) + "/resources/demo", writeGpt2(scratch)}) {
        const stowage::Checkpoint ck = stowage::Checkpoint::open(dir);
        trees.push_back(std::make_unique<stowage::ModuleTree>(stowage::buildModuleTree(ck, std::nullopt)));
    }
    if (trees[1]->tiedGroups().empty())
        std::abort(); // the GPT-2 tree is here for its tied head
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using namespace stowage;
    DeviceMap map;
    try {
        map = deviceMapFromJson(std::string(reinterpret_cast<const char*>(data), size), "device_map.json");
    } catch (const InputError&) {
        return 0;
    }
    for (const auto& tree : trees) {
        const MapCheck check = validateDeviceMap(*tree, map);
        if (check.errors.size() != check.errorSubjects.size() || check.warnings.size() != check.warningSubjects.size())
            std::abort();
        // Sized as the window's import and plan --device-map size it: no more
        // bytes placed than the whole model holds.
        const Plan plan = planFromDeviceMap(*tree, map, "fuzz");
        uint64_t placed = 0;
        for (const DeviceTotal& d : plan.devices)
            placed += d.used;
        if (plan.entries.size() != map.size() || placed > tree->root().bytes)
            std::abort();
    }
    if (deviceMapFromJson(deviceMapToJson(map), "round trip") != map ||
        deviceMapFromJson(deviceMapToJson(map, -1), "round trip") != map)
        std::abort();
    DeviceMap cleaned = map;
    cleanDeviceMap(cleaned);
    return 0;
}
