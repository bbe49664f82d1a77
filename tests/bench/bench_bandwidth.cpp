// Memory read bandwidth with every core: the best of several passes over a
// float tensor (1 GiB, or one the caller keeps) of a plain read loop (one
// thread a core, 256-bit loads into independent sums; nothing of the
// engine's), or LibTorch's sum where the CPU has no AVX2. The sum was the
// measure until 2026-12-04; on that day's Intel Xeon it read 26 GB/s where
// the plain loop, and the engine's fp32 GEMV over a mapped checkpoint, read
// 30-31, so decode read "119% of the bound" (docs/PERFORMANCE.md). One
// method per pass: the faster of two per pass would pick the high one of
// two noisy samples, which decode, streaming all along, never gets.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <sys/mman.h>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t readSpan(const char* p, size_t bytes)
{
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < bytes; ++i)
        s += uint8_t(p[i]);
    return s;
}
// readSpan's loop with its address stepped as a pointer (base + offset
// loads, where readSpan's are base + index), for the streaming table: on the
// Intel Xeon with AMX of 2026-12-05 readSpan's form read 12-16% faster than
// this one over the same mapped bytes, and faster than any GEMV kernel form
// tried (docs/PERFORMANCE.md).
__attribute__((target("avx2"))) uint64_t readSpanStepped(const char* p, size_t bytes)
{
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    const char* end = p + (bytes & ~size_t(127));
    for (const char* q = p; q < end; q += 128) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 96)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
bool haveAvx2() { return __builtin_cpu_supports("avx2"); }
#else
uint64_t readSpan(const char*, size_t) { return 0; }
uint64_t readSpanStepped(const char*, size_t) { return 0; }
bool haveAvx2() { return false; }
#endif

// One pass of a plain loop (readSpan, or `stepped`: readSpanStepped) over
// [p, p + bytes), split between the cores; 0 where there is no AVX2.
double plainReadRate(const char* p, size_t bytes, bool stepped = false)
{
    const auto span = stepped ? readSpanStepped : readSpan;
    if (!haveAvx2())
        return 0;
    const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
    const size_t share = (bytes / size_t(threads)) & ~size_t(127);
    std::vector<uint64_t> sums(static_cast<size_t>(threads), 0);
    const auto a = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
        pool.emplace_back([&, t] {
            sums[size_t(t)] = span(p + size_t(t) * share, t + 1 == threads ? bytes - size_t(t) * share : share);
        });
    sums[0] = span(p, threads == 1 ? bytes : share);
    for (auto& th : pool)
        th.join();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    volatile uint64_t keep = 0;
    for (uint64_t s : sums)
        keep = keep + s;
    return double(bytes) / sec;
}

} // namespace

double readRate(const void* data, size_t bytes)
{
    if (const double rate = plainReadRate(static_cast<const char*>(data), bytes); rate > 0)
        return rate;
    // no AVX2: LibTorch's sum over the same bytes, as floats
    const at::Tensor t = at::from_blob(const_cast<void*>(data), {int64_t(bytes / 4)}, at::kFloat);
    const auto a = std::chrono::steady_clock::now();
    volatile float s = t.sum().item<float>();
    (void)s;
    return double(bytes) / std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

double steppedReadRate(const void* data, size_t bytes)
{
    return plainReadRate(static_cast<const char*>(data), bytes, true);
}

double readBandwidthOf(const at::Tensor& big, int passes)
{
    double best = 0;
    for (int i = 0; i < passes; ++i)
        best = std::max(best, readRate(big.data_ptr(), big.nbytes()));
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
