#pragma once
// The hardware to buy: for a model (or its config and index before download)
// at a context and batch, every setup of the GPU presets (1 to N of one
// model) and RAM sizes is planned as the planner plans it and predicted by
// the cost model, and the setups that reach a target decode speed are listed
// cheapest first, one per GPU model (the fewest GPUs and the least RAM that
// meet it). Prices are dated list or reported figures, labelled as such;
// only the GPUs and the RAM are priced, not the machine around them.
#include "stowage/costmodel.h"
#include "stowage/hardware.h"
#include "stowage/planner.h"

#include <optional>
#include <string>
#include <vector>

namespace stowage {

// A price and where it comes from ("NVIDIA launch MSRP, October 2022").
struct ListPrice {
    double usd = 0;
    std::string source;
};
// The price of one GPU of a preset (hardwarePresetNames()); nullopt for one
// without a figure.
std::optional<ListPrice> gpuListPrice(const std::string& preset);
// The price of one GiB of RAM.
ListPrice ramPricePerGiB();

struct ShopRequest {
    double minTokensPerSecond = 1;
    // Presets to try (empty: every preset with a price), up to maxGpus of
    // each, and the RAM sizes (GiB) beside them; 0 GPUs (CPU only) is tried too.
    std::vector<std::string> gpus;
    int maxGpus = 8;
    std::vector<int> ramGiB = {32, 64, 128, 256, 512};
    // Kept back from each GPU (CUDA context, the display) and from the RAM
    // (the system and other programs) before planning.
    uint64_t gpuReserveBytes = uint64_t(1) << 30;
    uint64_t ramReserveBytes = uint64_t(8) << 30;
    ExecutionPolicy policy = ExecutionPolicy::Prefetch;
    Strategy strategy = Strategy::Auto;
    // Prices the user knows better ("rtx4090" -> 1799): replace the table's.
    std::vector<std::pair<std::string, double>> priceOverrides;
};

struct ShopSetup {
    std::string gpu;     // preset name; empty for CPU only
    int gpuCount = 0;
    int ramGiB = 0;
    std::string hardware; // the profile's spec ("2xrtx4090"), "cpu" for none
    double priceUsd = 0;
    std::string priceNote; // "2 x $1,599 (NVIDIA launch MSRP, October 2022) + 64 GiB x $4.00 (...)"
    Plan plan;
    CostEstimate estimate;
    bool meets = false;
    bool allOnGpus = false;  // nothing in RAM or on disk
    std::string where;       // where the weights are: "GPUs", "GPUs + RAM", "RAM + disk"
    std::string why;         // one sentence: what it reaches, or why not
};

struct ShopResult {
    // Meeting setups cheapest first (one per GPU model), then, when none of
    // a GPU model meets, its fastest setup, fastest first.
    std::vector<ShopSetup> setups;
    int tried = 0;
    std::vector<std::string> notes; // what was assumed
};

// `kv`: the KV cache at the context and batch asked for (kvcache.h's
// kvReserveForCheckpoint), reserved on every setup as the planner reserves
// it. Throws InputError for an unknown preset or an impossible request.
ShopResult shopFor(const ModuleTree& tree, const std::optional<KvReserve>& kv, const ShopRequest& request);

} // namespace stowage
