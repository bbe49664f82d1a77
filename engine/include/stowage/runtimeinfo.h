#pragma once
// What this build's runtime can run on and with: LibTorch's version, CUDA,
// the threads a load uses, the families with a runner. Free of LibTorch
// types, like model.h, so the front ends can ask.
#include <string>
#include <vector>

namespace stowage {

// The threads a load computes with for LoadOptions::threads = `requested`:
// that many, or one per CPU when 0.
int loadThreads(int requested);
// "LibTorch 1.13.1, CPU only, 2 threads": what this build can run on, with
// loadThreads(`threads`).
std::string runtimeDescription(int threads = 0);
// True when LibTorch was built with CUDA and sees at least one GPU.
bool cudaAvailable();
// The model_types run() can execute.
std::vector<std::string> runnableModelTypes();

} // namespace stowage
