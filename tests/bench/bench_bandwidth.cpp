// Memory read bandwidth as LibTorch sees it, with every core: the best of
// several sums over a float tensor (1 GiB, or one the caller keeps).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

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

double readBandwidthBytesPerSecond()
{
    // the same threads the model will use
    at::set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
    return readBandwidthOf(at::ones({int64_t(1) << 28}, at::kFloat), 5); // 1 GiB
}
