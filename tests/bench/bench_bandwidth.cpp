// Memory read bandwidth as LibTorch sees it, with every core: the best of
// several sums over a float tensor (1 GiB, or one the caller keeps).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <sys/mman.h>
#include <thread>

#include <algorithm>
#include <chrono>

double readBandwidthOf(const at::Tensor& big, int passes)
{
    double best = 0;
    for (int i = 0; i < passes; ++i) {
        auto a = std::chrono::steady_clock::now();
        volatile float s = big.sum().item<float>();
        (void)s;
        double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
        best = std::max(best, double(big.nbytes()) / sec);
    }
    return best;
}

at::Tensor onHugePages(int64_t floats)
{
    at::Tensor t = at::empty({floats}, at::kFloat);
    // Before the first touch, so the kernel backs it with 2 MiB pages where it
    // can (THP "madvise" or "always"): the machine's best read rate, which
    // weights reach when their file is read through a MADV_HUGEPAGE mapping.
    const uintptr_t huge = uintptr_t(2) << 20, begin = reinterpret_cast<uintptr_t>(t.data_ptr());
    const uintptr_t from = (begin + huge - 1) & ~(huge - 1), to = (begin + uintptr_t(t.nbytes())) & ~(huge - 1);
    if (to > from)
        ::madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
    t.fill_(1.0f);
    return t;
}

double readBandwidthBytesPerSecond()
{
    // the same threads the model will use
    at::set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
    return readBandwidthOf(onHugePages(int64_t(1) << 28), 5); // 1 GiB
}
