#pragma once
// What this build's runtime can run on and with: LibTorch's version, CUDA,
// the threads a load uses, the families with a runner. Free of LibTorch
// types, like model.h, so the front ends can ask.
#include "stowage/hardware.h"

#include <map>
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

// This machine's fixed costs of a decode step per execution policy
// (HardwareProfile::fixedCosts): tiny Llama models written to `scratchDir`
// are decoded with every layer in RAM (2 and 10 layers) and on disk, and
// what `profile`'s bytes-only estimate does not explain is split into a cost
// per token, per unit and per unit fetched from disk; accelerate-like's rate
// of copying disk weights into new tensors (FixedCosts::copyBandwidth) is
// timed first, on two layers with 4 and 11 MiB weights. About 15 s.
std::map<std::string, FixedCosts> measureFixedCosts(const std::string& scratchDir, HardwareProfile profile);

} // namespace stowage
