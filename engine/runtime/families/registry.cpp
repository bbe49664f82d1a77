// The runtime's side of the family registry (stowage/families.h): one runner
// per family, registered here once under the family's name.
#include "runner.h"

#include "stowage/families.h"
#include "stowage/runtime.h"

#include <cstring>

namespace stowage {
namespace arch {

std::unique_ptr<Runner> makeGpt2(const ModelConfig& c, WeightStore& s);
std::unique_ptr<Runner> makeLlamaFamily(const ModelConfig& c, WeightStore& s);
std::unique_ptr<Runner> makeOpt(const ModelConfig& c, WeightStore& s);

namespace {
struct RunnerEntry {
    const char* family;
    std::unique_ptr<Runner> (*make)(const ModelConfig&, WeightStore&);
};
const RunnerEntry kRunners[] = {
    {"gpt2", makeGpt2},
    {"llama", makeLlamaFamily},
    {"opt", makeOpt},
};

const RunnerEntry* runnerFor(const std::string& modelType)
{
    const auto family = familyOf(modelType);
    if (!family)
        return nullptr;
    for (const auto& r : kRunners)
        if (*family == r.family)
            return &r;
    return nullptr;
}
} // namespace

std::unique_ptr<Runner> makeRunner(const ModelConfig& c, WeightStore& s)
{
    const RunnerEntry* r = runnerFor(c.modelType());
    return r ? r->make(c, s) : nullptr;
}

} // namespace arch

std::vector<std::string> runnableModelTypes()
{
    std::vector<std::string> out;
    for (const auto& t : knownModelTypes())
        if (arch::runnerFor(t))
            out.push_back(t);
    return out;
}

} // namespace stowage
