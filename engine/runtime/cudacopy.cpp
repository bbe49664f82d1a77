#include "cudacopy.h"

#ifdef STOWAGE_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#endif

namespace stowage::cuda {

#ifdef STOWAGE_HAVE_CUDA

bool compiledIn() { return true; }

at::Tensor pinned(const at::Tensor& t) { return t.is_pinned() ? t : t.pin_memory(); }

namespace {
// One copy stream per device, made once: copies overlap the default stream's compute.
c10::cuda::CUDAStream copyStream(at::DeviceIndex d)
{
    static std::mutex mutex;
    static std::unordered_map<int, c10::cuda::CUDAStream> streams;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = streams.find(d);
    if (it == streams.end())
        it = streams.emplace(d, c10::cuda::getStreamFromPool(/*isHighPriority=*/true, d)).first;
    return it->second;
}
} // namespace

at::Tensor copyTo(const at::Tensor& src, at::Device device, at::ScalarType dtype, Event* done)
{
    if (!device.is_cuda()) {
        *done = nullptr;
        return src.to(device, dtype, false, true);
    }
    c10::cuda::CUDAStream stream = copyStream(device.index());
    at::Tensor out;
    {
        c10::cuda::CUDAStreamGuard guard(stream);
        // Pageable host sources (memory-mapped shards) go through a pinned buffer
        // from the caching host allocator, which keeps and reuses those buffers;
        // a tensor on another GPU is copied peer to peer as it is.
        at::Tensor from = (src.is_cpu() && !src.is_pinned()) ? src.pin_memory() : src;
        out = from.to(device, dtype, /*non_blocking=*/true, /*copy=*/true);
    }
    auto ev = std::make_shared<at::cuda::CUDAEvent>();
    ev->record(stream);
    *done = ev;
    return out;
}

void wait(const Event& done, at::Device device)
{
    if (!done || !device.is_cuda())
        return;
    static_cast<at::cuda::CUDAEvent*>(done.get())->block(c10::cuda::getCurrentCUDAStream(device.index()));
}

void usedOnCurrentStream(const at::Tensor& t)
{
    if (t.defined() && t.is_cuda())
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                      c10::cuda::getCurrentCUDAStream(t.device().index()));
}

uint64_t allocatedBytes(int device)
{
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    return uint64_t(stats.allocated_bytes[0].current);
}

uint64_t freeBytes(int device)
{
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    size_t freeB = 0, total = 0;
    if (cudaMemGetInfo(&freeB, &total) != cudaSuccess)
        return 0;
    // Blocks the caching allocator keeps but nothing uses are free to us too.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    const int64_t cached = stats.reserved_bytes[0].current - stats.allocated_bytes[0].current;
    return uint64_t(freeB) + uint64_t(std::max<int64_t>(0, cached));
}

#else

bool compiledIn() { return false; }
at::Tensor pinned(const at::Tensor& t) { return t; }
at::Tensor copyTo(const at::Tensor& src, at::Device device, at::ScalarType dtype, Event* done)
{
    *done = nullptr;
    return src.to(device, dtype, false, true);
}
void wait(const Event&, at::Device) {}
void usedOnCurrentStream(const at::Tensor&) {}
uint64_t allocatedBytes(int) { return 0; }
uint64_t freeBytes(int) { return 0; }

#endif

} // namespace stowage::cuda
