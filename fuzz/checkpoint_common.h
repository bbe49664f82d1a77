#pragma once
// What the config and index targets do with a checkpoint folder that opened:
// what `stowage-cli plan` does before any weights are downloaded — build the
// module tree, plan it into small budgets (GPU, CPU, disk) under both
// references, and size a KV-cache reserve.
#include "common.h"

#include "stowage/checkpoint.h"
#include "stowage/kvcache.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include <fstream>
#include <sstream>

namespace fuzz {

inline std::string readSource(const std::string& relative)
{
    std::ifstream in(std::string(STOWAGE_SOURCE_DIR) + "/" + relative, std::ios::binary);
    if (!in)
        std::abort();
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void planCheckpoint(const stowage::Checkpoint& ck)
{
    using namespace stowage;
    for (Reference ref : {Reference::Transformers, Reference::Accelerate}) {
        ModuleTree tree = buildModuleTree(ck, std::nullopt, ref);
        PlanOptions o;
        o.reference = ref;
        o.maxMemory = Budgets{{Device::gpu(0), 2e6}, {Device::cpu(), 4e6}, {Device::disk(), 1e12}};
        Plan plan = planDeviceMap(tree, o);
        const MapCheck check = validateDeviceMap(tree, plan.deviceMap);
        (void)check;
        (void)deviceMapFromJson(deviceMapToJson(plan.deviceMap), "round trip");
        if (ck.config() && tree.dtype()) {
            if (auto kv = kvReserveFor(*ck.config(), tree, 64, 2, *tree.dtype())) {
                o.kv = kv;
                (void)planDeviceMap(tree, o);
            }
        }
        tree.setDType(DType::F16);
    }
}

} // namespace fuzz
