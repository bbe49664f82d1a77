// Memory read bandwidth as LibTorch sees it, with every core: the best of
// several sums over a 1 GiB float tensor.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <thread>

#include <algorithm>
#include <chrono>

double readBandwidthBytesPerSecond()
{
    // the same threads the model will use
    at::set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
    at::Tensor big = at::ones({int64_t(1) << 28}, at::kFloat); // 1 GiB
    double best = 0;
    for (int i = 0; i < 5; ++i) {
        auto a = std::chrono::steady_clock::now();
        volatile float s = big.sum().item<float>();
        (void)s;
        double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
        best = std::max(best, double(big.nbytes()) / sec);
    }
    return best;
}
