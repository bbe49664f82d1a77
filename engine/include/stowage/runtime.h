#pragma once
// The LibTorch-backed part of the engine. This header stays free of LibTorch
// types so Qt code can include it.
#include <string>

namespace stowage {

// "LibTorch 1.13.1, CPU only, 2 threads": what this build can run on.
std::string runtimeDescription();
// True when LibTorch was built with CUDA and sees at least one GPU.
bool cudaAvailable();

} // namespace stowage
