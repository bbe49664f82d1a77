// The runtime's side of the family registry: each family's runner, found by
// its Arch. Made from the same list as the model's table
// (stowage/families.def), so there is no second list to keep in step.
#include "runner.h"

#include "stowage/families.h"

namespace stowage {
namespace arch {

namespace {
using MakeRunner = std::unique_ptr<Runner> (*)(const ModelConfig&, WeightStore&);
// Indexed by Arch: one entry per line of families.def, in its order.
const MakeRunner kRunners[] = {
#define STOWAGE_FAMILY(id) id::makeRunner,
#include "stowage/families.def"
#undef STOWAGE_FAMILY
};
} // namespace

std::unique_ptr<Runner> makeRunner(const ModelConfig& c, WeightStore& s)
{
    const auto arch = archOf(c.modelType());
    return arch ? kRunners[size_t(*arch)](c, s) : nullptr;
}

} // namespace arch
} // namespace stowage
