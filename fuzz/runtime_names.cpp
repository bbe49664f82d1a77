// The two LibTorch-runtime functions app/cli/workerprotocol.cpp calls
// (engine/runtime/model.cpp defines them beside code that needs LibTorch),
// for fuzz_worker, which builds without the runtime. Keep in step with
// model.cpp: tests/tst_worker checks the real names.
#include "stowage/runtime.h"

namespace stowage {

const char* policyName(ExecutionPolicy p)
{
    switch (p) {
    case ExecutionPolicy::AccelerateLike: return "accelerate-like";
    case ExecutionPolicy::Prefetch: return "prefetch";
    case ExecutionPolicy::ComputeWhereItLives: return "compute-where-it-lives";
    }
    return "?";
}

std::optional<ExecutionPolicy> policyFromName(const std::string& n)
{
    for (auto p : {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch, ExecutionPolicy::ComputeWhereItLives})
        if (n == policyName(p))
            return p;
    return std::nullopt;
}

} // namespace stowage
