#include "stowage/runtime.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include <algorithm>
#include <thread>

namespace stowage {

bool cudaAvailable() { return at::hasCUDA(); }

std::string runtimeDescription(int threads)
{
    // Unless given, the threads a load uses by default (Model::load): not
    // LibTorch's own count, which reads 1 until the first load sets it (the
    // worker's hello said "1 threads").
    if (threads <= 0)
        threads = int(std::max(1u, std::thread::hardware_concurrency()));
    return std::string("LibTorch ") + TORCH_VERSION + (cudaAvailable() ? ", CUDA" : ", CPU only") + ", " +
           std::to_string(threads) + " threads";
}

} // namespace stowage
