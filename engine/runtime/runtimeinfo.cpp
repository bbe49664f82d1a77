#include "stowage/runtimeinfo.h"

#include "stowage/families.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include <algorithm>
#include <thread>

namespace stowage {

bool cudaAvailable() { return at::hasCUDA(); }

int loadThreads(int requested)
{
    return requested > 0 ? requested : int(std::max(1u, std::thread::hardware_concurrency()));
}

std::string runtimeDescription(int threads)
{
    // What a load will use, not LibTorch's own count, which reads 1 until the
    // first load sets it (the worker's hello said "1 threads").
    return std::string("LibTorch ") + TORCH_VERSION + (cudaAvailable() ? ", CUDA" : ", CPU only") + ", " +
           std::to_string(loadThreads(threads)) + " threads";
}

std::vector<std::string> runnableModelTypes()
{
    // Every family has a runner: families/registry.cpp makes its table of
    // runners from families.def, and a line without one does not link.
    return knownModelTypes();
}

} // namespace stowage
