#include "stowage/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

namespace stowage {

bool cudaAvailable() { return at::hasCUDA(); }

std::string runtimeDescription()
{
    return std::string("LibTorch ") + TORCH_VERSION + (cudaAvailable() ? ", CUDA" : ", CPU only") + ", " +
           std::to_string(at::get_num_threads()) + " threads";
}

} // namespace stowage
