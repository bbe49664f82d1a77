#pragma once
// The CUDA specifics of moving weights: pinned host memory, copies on a side
// stream that the compute stream waits for, and memory figures. Compiled
// against CUDA only when LibTorch has it (STOWAGE_HAVE_CUDA); otherwise these
// are plain synchronous copies, so the rest of the runtime has one code path.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

namespace stowage::cuda {

bool compiledIn();
// Page-locked copy of a CPU tensor (unchanged without CUDA).
at::Tensor pinned(const at::Tensor& t);
// A completion marker for an asynchronous copy.
using Event = std::shared_ptr<void>;
// Copies `src` to `device` as `dtype`. On CUDA the copy runs on a side stream
// and `*done` is set; the compute stream must wait(done) before using it.
at::Tensor copyTo(const at::Tensor& src, at::Device device, at::ScalarType dtype, Event* done);
void wait(const Event& done, at::Device device);
// Tells the caching allocator that the current (compute) stream uses `t`, so
// its block is not handed out again before that stream's work on it is done.
void usedOnCurrentStream(const at::Tensor& t);
// Bytes the caching allocator holds, and what is free: the driver's free
// memory plus the allocator's reserved-but-unused blocks, as transformers
// counts a GPU's room (0 without CUDA).
uint64_t allocatedBytes(int device);
uint64_t freeBytes(int device);

} // namespace stowage::cuda
