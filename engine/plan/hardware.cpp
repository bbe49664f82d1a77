// What this machine has: RAM from /proc/meminfo, RAM bandwidth and CPU FLOP/s
// from a quick self-test, GPUs from NVML loaded at run time (so the engine
// builds and runs without an NVIDIA driver).
#include "stowage/hardware.h"
#include "stowage/error.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <sched.h>

#include <algorithm>
#include <sys/mman.h>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <thread>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOWAGE_X86_SIMD 1
#endif

namespace stowage {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A /proc/meminfo line in bytes ("MemAvailable:  24104072 kB"); 0 when absent.
uint64_t meminfo(const char* key)
{
    std::ifstream in("/proc/meminfo");
    std::string line;
    const size_t n = std::strlen(key);
    while (std::getline(in, line))
        if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':')
            return std::strtoull(line.c_str() + n + 1, nullptr, 10) * 1024;
    return 0;
}

// CPUs this process may run on (a container's cpuset, taskset), not all the
// host has: the self-tests should load exactly what decoding could use.
unsigned usableCpus()
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return static_cast<unsigned>(CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

// Runs fn(thread index) on `threads` threads and waits for all of them.
template <typename Fn>
void parallel(unsigned threads, Fn fn)
{
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t)
        pool.emplace_back(fn, t);
    fn(0u);
    for (auto& th : pool)
        th.join();
}

#ifdef STOWAGE_X86_SIMD
// Matrix-vector products as decoding runs them (rows of W [rows, k] times x,
// four rows per pass over x), summed in fp32: the kernels the runtime uses,
// timed here on plain memory so the plan layer needs no LibTorch. k = 4096
// elements. Returns a sum so the work is not optimised away.
__attribute__((target("avx512f"))) float gemvF32Avx512(const float* w, const float* x, size_t rows)
{
    const size_t k = 4096;
    __m512 total = _mm512_setzero_ps();
    for (size_t r = 0; r + 4 <= rows; r += 4) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t j = 0; j < k; j += 16) {
            const __m512 xv = _mm512_loadu_ps(x + j);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + r * k + j), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + (r + 1) * k + j), xv, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + (r + 2) * k + j), xv, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + (r + 3) * k + j), xv, a3);
        }
        total = _mm512_add_ps(total, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
    alignas(64) float out[16];
    _mm512_store_ps(out, total);
    return out[0];
}
__attribute__((target("avx2,fma"))) float gemvF32Avx2(const float* w, const float* x, size_t rows)
{
    const size_t k = 4096;
    __m256 total = _mm256_setzero_ps();
    for (size_t r = 0; r + 4 <= rows; r += 4) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t j = 0; j < k; j += 8) {
            const __m256 xv = _mm256_loadu_ps(x + j);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + r * k + j), xv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + (r + 1) * k + j), xv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + (r + 2) * k + j), xv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + (r + 3) * k + j), xv, a3);
        }
        total = _mm256_add_ps(total, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    }
    alignas(32) float out[8];
    _mm256_store_ps(out, total);
    return out[0];
}
// bf16 rows of 8192 elements (the same 16 KiB) with vdpbf16ps.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float gemvBf16Avx512(const uint16_t* w, const uint16_t* x,
                                                                             size_t rows)
{
    const size_t k = 8192;
    __m512 total = _mm512_setzero_ps();
    for (size_t r = 0; r + 4 <= rows; r += 4) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t j = 0; j < k; j += 32) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + j);
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(w + r * k + j), xv);
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(w + (r + 1) * k + j), xv);
            a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_loadu_si512(w + (r + 2) * k + j), xv);
            a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_loadu_si512(w + (r + 3) * k + j), xv);
        }
        total = _mm512_add_ps(total, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
    alignas(64) float out[16];
    _mm512_store_ps(out, total);
    return out[0];
}
#endif

struct RamRates {
    double read = 0, gemvF32 = 0, gemvBf16 = 0; // bytes/s; 0: not measured
    uint64_t cacheBytes = 0;                    // HardwareProfile::cpuCacheBytes
};

// RAM read bandwidth: all usable cores sum a 256 MiB buffer, best of 3. All
// cores, because one core cannot saturate a multi-channel memory controller
// and CPU decoding is multithreaded. 256 MiB is well past any cache. Then the
// same buffer as a weight matrix, read by matrix-vector products in fp32 and
// (where the CPU has AVX512-BF16, as the runtime's kernel) bf16: what CPU
// decoding streams per dtype, which can fall short of the plain read.
// The RAM rates are the median of their passes, not the best. On this
// project's VMs the same read ran at two levels, 22-24 and 27-30 GB/s, from
// one pass to the next and one process to the next (where the host placed
// the buffer's pages); the best of three said 29-30 about every other time,
// while a 440 MB model decoded at 26 GB/s whatever it said, so predictions
// swung between 0.9x and 1.25x from one `plan` to the next.
constexpr int kRatePasses = 5;

double median(std::vector<double> v)
{
    if (v.empty())
        return 0;
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

RamRates measureRamRates()
{
    uint64_t size = 256ULL << 20;
    if (const uint64_t avail = meminfo("MemAvailable"); avail > 0)
        size = std::min(size, std::max<uint64_t>(16ULL << 20, avail / 8)); // don't push a small machine into swap
    const size_t words = size / sizeof(uint64_t);
    // Uninitialised (each thread first-touches its own slice) and on normal
    // pages, not madvise'd huge pages: a checkpoint cached before Stowage
    // mapped it sits on 4 KiB pages, and huge pages (fewer TLB misses) read
    // up to 2x faster here. Weights read from the drive through the mapping
    // get 2 MiB pages (mappedfile.cpp); the lower figure keeps predictions
    // from promising that better case.
    std::unique_ptr<uint64_t[]> memory(new (std::nothrow) uint64_t[words]);
    if (!memory)
        return {}; // the caller falls back to a default
    uint64_t* buffer = memory.get();
    const unsigned threads = std::min<unsigned>(usableCpus(), 64);
    const size_t slice = words / threads;
    auto range = [&](unsigned t) {
        return std::pair<size_t, size_t>(t * slice, t + 1 == threads ? words : (t + 1) * slice);
    };
    parallel(threads, [&](unsigned t) {
        auto [b, e] = range(t);
        for (size_t i = b; i < e; ++i)
            buffer[i] = 0x3F803F803F803F80ULL ^ (i & 0xFF); // ~1.0 as fp32 and as bf16: no denormals
    });
    std::atomic<uint64_t> sink{0};
    // Bytes/s of all threads summing the buffer's first `count` words,
    // `rounds` times over (0 when the clock saw no time pass).
    const auto readRate = [&](size_t count, int rounds) {
        const size_t share = count / threads;
        const auto t0 = Clock::now();
        parallel(threads, [&](unsigned t) {
            const size_t b = t * share, e = t + 1 == threads ? count : (t + 1) * share;
            // Four accumulators so the adds are not one dependency chain.
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int r = 0; r < rounds; ++r) {
                size_t i = b;
                for (; i + 4 <= e; i += 4) {
                    s0 += buffer[i];
                    s1 += buffer[i + 1];
                    s2 += buffer[i + 2];
                    s3 += buffer[i + 3];
                }
                for (; i < e; ++i)
                    s0 += buffer[i];
            }
            sink += s0 + s1 + s2 + s3; // keeps the loop from being optimised away
        });
        const double s = secondsSince(t0);
        return s > 0 ? static_cast<double>(count * sizeof(uint64_t)) * rounds / s : 0.0;
    };
    std::vector<double> reads;
    for (int pass = 0; pass < kRatePasses; ++pass)
        if (const double r = readRate(words, 1); r > 0)
            reads.push_back(r);
    RamRates out;
    out.read = median(reads);
    // The CPU's caches as decode meets them: the largest working set, from
    // 4 MiB up in steps of two, that all cores re-read at 1.45x the whole
    // buffer's rate or better (this AMD EPYC guest: 81-99 GB/s up to 32 MiB,
    // 47-60 from 64 MiB, 52 for the 256 MiB read, 2026-12-08). Measured
    // rather than asked: the guest reported the host's 508 MiB of L3. Each
    // set's passes alternate with passes over the whole buffer and the two
    // are compared pass by pass: this VM's RAM rate moves between levels for
    // seconds at a time, and against one earlier figure the answer ranged
    // from none to 128 MiB in six runs. Interleaved, five passes a set, the
    // medians here were 1.51-1.79 up to 32 MiB and 1.22-1.36 at 64 in runs
    // on a quiet machine (a busy second can still shrink the answer).
    for (uint64_t set = 4ULL << 20; out.read > 0 && set * 2 <= size; set *= 2) {
        std::vector<double> ratios;
        for (int pass = 0; pass < 5; ++pass) {
            const double cached = readRate(set / sizeof(uint64_t), int(std::max<uint64_t>(2, size / set))),
                         whole = readRate(words, 1);
            if (whole > 0)
                ratios.push_back(cached / whole);
        }
        if (median(ratios) >= 1.45)
            out.cacheBytes = set; // the largest such: a stall on a small set does not hide the larger
    }
#ifdef STOWAGE_X86_SIMD
    // 16 KiB rows, split across the threads in whole groups of four.
    const size_t rowBytes = 16384, rows = (words * sizeof(uint64_t)) / rowBytes / 4 * 4;
    const size_t perThread = rows / threads / 4 * 4;
    const bool avx512 = __builtin_cpu_supports("avx512f");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool bf16 = avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
    std::vector<float> x(4096, 1.0f);
    std::vector<uint16_t> xb(8192, 0x3F80);
    std::atomic<float> fsink{0};
    auto time = [&](auto&& one) {
        std::vector<double> rates;
        for (int pass = 0; pass < kRatePasses; ++pass) {
            const auto t0 = Clock::now();
            parallel(threads, [&](unsigned t) { fsink = fsink + one(reinterpret_cast<const uint8_t*>(buffer) + t * perThread * rowBytes); });
            const double s = secondsSince(t0);
            if (s > 0)
                rates.push_back(static_cast<double>(perThread * threads * rowBytes) / s);
        }
        return median(rates);
    };
    if (perThread >= 4 && (avx512 || avx2))
        out.gemvF32 = time([&](const uint8_t* w) {
            return avx512 ? gemvF32Avx512(reinterpret_cast<const float*>(w), x.data(), perThread)
                          : gemvF32Avx2(reinterpret_cast<const float*>(w), x.data(), perThread);
        });
    if (perThread >= 4 && bf16)
        out.gemvBf16 = time([&](const uint8_t* w) {
            return gemvBf16Avx512(reinterpret_cast<const uint16_t*>(w), xb.data(), perThread);
        });
#endif
    return out;
}

// A copy into newly allocated memory, all cores: what reading weights the
// page cache holds into new tensors costs (Accelerate's offload path, or the
// runtime converting a weight): read + write + the destination's allocation.
// 128 MiB as 16 weights of 8 MiB, each freed after its copy so the allocator
// reuses the memory (the first pass, which maps it, is not timed). Memory the
// allocator hands back to the kernel and maps again costs page faults on top
// (`freshPages`: each piece mapped for its copy and unmapped after; in this
// project's Firecracker guests that path copied at 0.15-1 GB/s).
double copyRate(bool freshPages)
{
    // Fresh pages are mapped here directly (mmap), so their pieces need not
    // pass glibc's mmap threshold: 4 x 8 MiB, every pass maps them anew. A
    // larger sample only took longer (768 MiB cost 1.2 s of
    // measureThisMachine at this VM's 0.7 GB/s, for the same rate).
    const size_t piece = 8ULL << 20, pieces = freshPages ? 4 : 16, size = piece * pieces;
    const int passes = freshPages ? 3 : 4, firstTimed = freshPages ? 0 : 1;
    std::unique_ptr<uint8_t[]> src(new (std::nothrow) uint8_t[size]);
    if (!src)
        return 0;
    const unsigned threads = std::min<unsigned>(usableCpus(), 64);
    const size_t slice = piece / threads;
    auto range = [&](unsigned t) {
        return std::pair<size_t, size_t>(t * slice, t + 1 == threads ? piece : (t + 1) * slice);
    };
    std::memset(src.get(), 1, size);
    double best = 0;
    std::atomic<unsigned> sink{0};
    for (int pass = 0; pass < passes; ++pass) {
        const auto t0 = Clock::now();
        for (size_t i = 0; i < pieces; ++i) {
            uint8_t* dst = nullptr;
            std::unique_ptr<uint8_t[]> heap;
            if (freshPages) {
                void* m = mmap(nullptr, piece, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                dst = m == MAP_FAILED ? nullptr : static_cast<uint8_t*>(m);
            } else {
                heap.reset(new (std::nothrow) uint8_t[piece]);
                dst = heap.get();
            }
            if (!dst)
                return 0;
            parallel(threads, [&](unsigned t) {
                auto [b, e] = range(t);
                std::memcpy(dst + b, src.get() + i * piece + b, e - b);
            });
            sink += dst[piece / 2];
            if (freshPages)
                munmap(dst, piece);
        }
        const double sec = secondsSince(t0);
        if (sec > 0 && pass >= firstTimed)
            best = std::max(best, static_cast<double>(size) / sec);
    }
    return best;
}

double measureCopyBandwidth() { return copyRate(false); }

// The same copy into memory mapped for it and given back after, as a new
// tensor per copy gets it (large tensors pass glibc's mmap threshold, so
// malloc maps them fresh): every page faults on first touch.
double measureFreshCopyBandwidth() { return copyRate(true); }

// FLOP/s of one thread spinning multiply-adds on registers for ~`seconds`.
// Eight independent accumulators cover the FMA latency (4 cycles, 2 ports).
// Each kernel variant is compiled for its instruction set and picked at run
// time, so a baseline x86-64 build still measures what AVX2/AVX-512 BLAS gets.
#ifdef STOWAGE_X86_SIMD
#define STOWAGE_FMA_KERNEL(NAME, TARGET, VEC, SET1, FMA, ADD, STORE, LANES)                                  \
    __attribute__((target(TARGET))) double NAME(double seconds)                                              \
    {                                                                                                        \
        VEC a0 = SET1(1.0f), a1 = SET1(1.1f), a2 = SET1(1.2f), a3 = SET1(1.3f);                              \
        VEC a4 = SET1(1.4f), a5 = SET1(1.5f), a6 = SET1(1.6f), a7 = SET1(1.7f);                              \
        const VEC m = SET1(0.999999f), c = SET1(1e-6f); /* converges to 1: no overflow, no denormals */     \
        const int kInner = 4096;                                                                             \
        uint64_t iterations = 0;                                                                             \
        const auto t0 = Clock::now();                                                                        \
        double elapsed = 0;                                                                                  \
        do {                                                                                                 \
            for (int i = 0; i < kInner; ++i) {                                                               \
                a0 = FMA(a0, m, c); a1 = FMA(a1, m, c); a2 = FMA(a2, m, c); a3 = FMA(a3, m, c);              \
                a4 = FMA(a4, m, c); a5 = FMA(a5, m, c); a6 = FMA(a6, m, c); a7 = FMA(a7, m, c);              \
            }                                                                                                \
            iterations += kInner;                                                                            \
            elapsed = secondsSince(t0);                                                                      \
        } while (elapsed < seconds);                                                                         \
        alignas(64) float out[LANES];                                                                        \
        STORE(out, ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))));                       \
        volatile float keep = out[0];                                                                        \
        (void)keep;                                                                                          \
        return static_cast<double>(iterations) * 8 * LANES * 2 / elapsed;                                   \
    }

// SSE has no FMA: a separate multiply and add, still 2 FLOPs per lane.
#define STOWAGE_SSE_FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
STOWAGE_FMA_KERNEL(flopsSse, "sse2", __m128, _mm_set1_ps, STOWAGE_SSE_FMA, _mm_add_ps, _mm_store_ps, 4)
STOWAGE_FMA_KERNEL(flopsAvx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_store_ps, 8)
STOWAGE_FMA_KERNEL(flopsAvx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_store_ps,
                   16)
#undef STOWAGE_SSE_FMA
#undef STOWAGE_FMA_KERNEL
#endif

double flopsOneThread(double seconds)
{
#ifdef STOWAGE_X86_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return flopsAvx512(seconds);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return flopsAvx2(seconds);
    return flopsSse(seconds);
#else
    // Portable fallback: the compiler may vectorise it; either way a floor.
    float a[16];
    for (int i = 0; i < 16; ++i)
        a[i] = 1.0f + 0.1f * static_cast<float>(i);
    uint64_t iterations = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
        for (int k = 0; k < 4096; ++k)
            for (float& x : a)
                x = x * 0.999999f + 1e-6f;
        iterations += 4096;
        elapsed = secondsSince(t0);
    } while (elapsed < seconds);
    volatile float keep = a[0];
    (void)keep;
    return static_cast<double>(iterations) * 16 * 2 / elapsed;
#endif
}

// All usable cores at once, so SMT siblings sharing FMA units count once.
double measureCpuFlops()
{
    const unsigned threads = std::min<unsigned>(usableCpus(), 256);
    std::vector<double> perThread(threads, 0);
    parallel(threads, [&](unsigned t) { perThread[t] = flopsOneThread(0.02); });
    double sum = 0;
    for (double f : perThread)
        sum += f;
    return sum;
}

// ---- NVML, loaded at run time ------------------------------------------------
// The few declarations we use, from NVML's documented C API (nvml.h is not
// installed here, and linking it would tie the build to a driver).
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
struct NvmlMemory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};
using NvmlVoidFn = int (*)();
using NvmlCountFn = int (*)(unsigned int*);
using NvmlHandleFn = int (*)(unsigned int, NvmlDevice*);
using NvmlNameFn = int (*)(NvmlDevice, char*, unsigned int);
using NvmlMemoryFn = int (*)(NvmlDevice, NvmlMemory*);

struct NvmlGpu {
    std::string name;
    uint64_t totalBytes = 0;
    uint64_t freeBytes = 0;
};

// dlsym returns an object pointer; copying its bits is the portable way to
// turn it into a function pointer without a -Wpedantic cast warning.
template <typename Fn>
Fn symbol(void* lib, const char* name)
{
    void* p = dlsym(lib, name);
    Fn fn = nullptr;
    static_assert(sizeof(fn) == sizeof(p), "function and object pointers differ in size");
    std::memcpy(&fn, &p, sizeof(p));
    return fn;
}

// CUDA numbers only the GPUs CUDA_VISIBLE_DEVICES lists, in its order, and
// stops at the first entry that is not a device. Entries given as UUIDs or
// MIG names are not mapped here: then every NVML device is reported.
std::vector<unsigned> cudaOrder(unsigned count)
{
    std::vector<unsigned> all(count);
    for (unsigned i = 0; i < count; ++i)
        all[i] = i;
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    if (!env)
        return all;
    std::vector<unsigned> out;
    std::stringstream list(env);
    std::string item;
    while (std::getline(list, item, ',')) {
        item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }),
                   item.end());
        if (!item.empty() && std::isalpha(static_cast<unsigned char>(item[0])))
            return all;
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 0 || v >= static_cast<long>(count) ||
            std::find(out.begin(), out.end(), static_cast<unsigned>(v)) != out.end())
            break;
        out.push_back(static_cast<unsigned>(v));
    }
    return out;
}

// GPUs in CUDA index order; empty when there is no driver (dlopen fails).
std::vector<NvmlGpu> queryNvml()
{
    std::vector<NvmlGpu> out;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return out;
    auto init = symbol<NvmlVoidFn>(lib, "nvmlInit_v2");
    auto shutdown = symbol<NvmlVoidFn>(lib, "nvmlShutdown");
    auto getCount = symbol<NvmlCountFn>(lib, "nvmlDeviceGetCount_v2");
    auto getHandle = symbol<NvmlHandleFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
    auto getName = symbol<NvmlNameFn>(lib, "nvmlDeviceGetName");
    auto getMemory = symbol<NvmlMemoryFn>(lib, "nvmlDeviceGetMemoryInfo");
    unsigned count = 0;
    if (init && shutdown && getCount && getHandle && getName && getMemory && init() == 0) {
        if (getCount(&count) == 0) {
            for (unsigned index : cudaOrder(count)) {
                NvmlDevice dev = nullptr;
                NvmlMemory mem{};
                char name[96] = {};
                if (getHandle(index, &dev) != 0 || getMemory(dev, &mem) != 0)
                    continue;
                if (getName(dev, name, sizeof(name)) != 0)
                    std::strcpy(name, "NVIDIA GPU");
                out.push_back({name, mem.total, mem.free});
            }
        }
        shutdown();
    }
    dlclose(lib);
    return out;
}

// Lower-case alphanumeric words: "NVIDIA A100-SXM4-80GB" -> nvidia a100 sxm4 80gb.
std::vector<std::string> words(const std::string& s)
{
    std::vector<std::string> out(1);
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isalnum(c))
            out.back().push_back(static_cast<char>(std::tolower(c)));
        else if (!out.back().empty())
            out.emplace_back();
    }
    if (out.back().empty())
        out.pop_back();
    return out;
}

// Datasheet bandwidths for a GPU NVML names. A preset matches when its model
// ("a100" of "a100-40gb", "rtx4090") is a word of the name, or two adjacent
// words ("RTX 4090"); whole words, so "L40S" is not an "L4". Among matches the
// preset memory closest to the card's picks the variant (A100 40 vs 80 GB).
GpuProfile gpuFromNvml(const NvmlGpu& nv)
{
    const auto w = words(nv.name);
    std::vector<std::string> candidates = w;
    for (size_t i = 0; i + 1 < w.size(); ++i)
        candidates.push_back(w[i] + w[i + 1]);
    std::optional<GpuProfile> best;
    for (const auto& key : hardwarePresetNames()) {
        if (key == "this-machine")
            continue;
        const std::string model = key.substr(0, key.find('-'));
        if (std::find(candidates.begin(), candidates.end(), model) == candidates.end())
            continue;
        GpuProfile g = hardwarePreset(key).gpus.front();
        auto distance = [&](const GpuProfile& p) {
            return std::abs(static_cast<double>(p.memoryBytes) - static_cast<double>(nv.totalBytes));
        };
        if (!best || distance(g) < distance(*best))
            best = g;
    }
    GpuProfile g;
    if (best) {
        g = *best;
    } else {
        // Unknown card: a modest PCIe 4 GPU, so plans are not oversold.
        g.memoryBandwidth = 500e9;
        g.h2dPinned = 24e9;
        g.h2dPageable = 12e9;
        g.flops = 50e12;
    }
    g.name = nv.name;
    g.memoryBytes = nv.totalBytes;
    return g;
}

} // namespace

// A sanitizer or an unoptimised build: timing loops here measure the
// instrumentation, not the machine.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__OPTIMIZE__)
constexpr bool kInstrumentedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kInstrumentedBuild = true;
#else
constexpr bool kInstrumentedBuild = false;
#endif
#else
constexpr bool kInstrumentedBuild = false;
#endif

double measureFileReadBandwidth(const std::string& path, bool cold, uint64_t maxBytes)
{
    const size_t block = 4ULL << 20;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (cold ? O_DIRECT : 0));
    if (fd < 0)
        return 0;
    void* raw = nullptr;
    if (posix_memalign(&raw, 4096, block) != 0) {
        ::close(fd);
        return 0;
    }
    std::unique_ptr<void, decltype(&std::free)> buffer(raw, &std::free);
    auto pass = [&]() -> double {
        uint64_t total = 0;
        const auto t0 = Clock::now();
        while (total < maxBytes) {
            const ssize_t n = ::pread(fd, buffer.get(), block, static_cast<off_t>(total));
            if (n <= 0)
                break;
            total += static_cast<uint64_t>(n);
        }
        const double sec = secondsSince(t0);
        return total >= (1ULL << 20) && sec > 0 ? static_cast<double>(total) / sec : 0;
    };
    double rate = 0;
    if (cold) {
        rate = pass(); // O_DIRECT: every pass reads the drive
    } else {
        pass(); // fills the page cache
        rate = std::max(pass(), pass());
    }
    ::close(fd);
    return rate;
}

HardwareProfile measureThisMachine(const std::string& diskSample, bool withFixedCosts)
{
    HardwareProfile p;
    p.simulated = false;
    p.ramBytes = meminfo("MemTotal");
    // Typical figures (dual-channel DDR4, two modern cores) stand in where
    // nothing can be measured honestly.
    p.ramBandwidth = 20e9;
    p.cpuFlops = 100e9;
    std::string measured, assumed;
    auto note = [](std::string& list, const std::string& what) { list += (list.empty() ? "" : ", ") + what; };
    // What a step costs besides its bytes, timed by the runtime (it needs
    // LibTorch, so `stowage-cli hardware` measures it once per machine).
    // They are what decode took beyond its bytes at the CPU rates measured
    // beside them, so those rates go with them (FittedRates), and are not
    // read again here.
    std::string when;
    FittedRates fitted;
    if (!kInstrumentedBuild && withFixedCosts)
        p.fixedCosts = loadFixedCosts(&when, &fitted);
    const bool keptRates = !p.fixedCosts.empty() && fitted.ramBandwidth > 0;
    if (!kInstrumentedBuild) {
        // 0: could not allocate the buffer
        const RamRates rates = keptRates ? RamRates{fitted.ramBandwidth, fitted.cpuGemvF32, fitted.cpuGemvBf16,
                                                    fitted.cpuCacheBytes}
                                         : measureRamRates();
        // The plain loop's rate, or the decode kernels' over the same buffer
        // where they read it faster: its scalar adds can be the limit (12.9
        // GB/s against 20.3 for the fp32 GEMV on a 2-core AVX-512 Xeon, whose
        // decode then streamed 20.6 GB/s: predictions were 1.5x slow).
        const double ram = std::max({rates.read, rates.gemvF32, rates.gemvBf16});
        if (rates.read > 0)
            p.ramBandwidth = ram;
        p.cpuGemvF32 = rates.gemvF32;
        p.cpuGemvBf16 = rates.gemvBf16;
        p.cpuCacheBytes = rates.cacheBytes;
        p.cpuFlops = measureCpuFlops();
        p.measured = ram > 0;
        p.pageCacheReadBandwidth = measureCopyBandwidth();
        p.freshCopyBandwidth = measureFreshCopyBandwidth();
        note(p.measured ? measured : assumed, "RAM read");
        note(measured, "CPU FLOP/s");
        note(p.pageCacheReadBandwidth > 0 ? measured : assumed, "page-cache read (as a RAM copy)");
        if (p.freshCopyBandwidth > 0)
            note(measured, "copy into fresh memory");
        if (p.cpuGemvF32 > 0)
            note(measured, "GEMV fp32");
        if (p.cpuGemvBf16 > 0)
            note(measured, "GEMV bf16");
        if (p.cpuCacheBytes > 0)
            note(measured, "CPU cache size (a set re-read above RAM's rate)");
    } else {
        note(assumed, "RAM read, CPU FLOP/s, page-cache read (instrumented build)");
    }
    // A mid-range NVMe drive's sequential read is the default (SATA SSDs are
    // slower; edit the profile) unless a file on the drive can be timed past
    // the page cache.
    p.diskReadBandwidth = 2e9;
    const double disk = diskSample.empty() || kInstrumentedBuild ? 0 : measureFileReadBandwidth(diskSample, true);
    if (disk > 0) {
        p.diskReadBandwidth = disk;
        note(measured, "disk read (O_DIRECT)");
    } else {
        note(assumed, "disk read 2 GB/s (NVMe datasheet)");
    }
    p.sources = "measured here: " + (measured.empty() ? std::string("nothing") : measured) +
                (assumed.empty() ? std::string() : "; assumed: " + assumed);
    if (withFixedCosts)
        p.sources += p.fixedCosts.empty()
                         ? "; fixed costs per token and per layer: not measured yet (`stowage-cli hardware` measures them)"
                         : "; fixed costs per token and per layer: measured by `stowage-cli hardware` on " + when;
    if (keptRates)
        p.sources += " (RAM read, GEMV and caches as measured then, the rates they were fitted to)";
    for (const NvmlGpu& nv : queryNvml())
        p.gpus.push_back(gpuFromNvml(nv));
    if (!p.gpus.empty())
        p.sources += "; GPUs: memory from the driver, bandwidths and FLOP/s from the datasheet for their names";

    std::string gpuPart;
    for (size_t i = 0; i < p.gpus.size();) {
        size_t j = i;
        while (j < p.gpus.size() && p.gpus[j].name == p.gpus[i].name)
            ++j;
        gpuPart += (j - i > 1 ? std::to_string(j - i) + "x " : std::string()) + p.gpus[i].name + " + ";
        i = j;
    }
    p.name = "this machine: " + gpuPart + std::to_string((p.ramBytes + 500'000'000) / 1'000'000'000) + " GB RAM";
    if (kInstrumentedBuild)
        p.name += " (instrumented build: RAM and CPU figures are typical defaults, not measured)";
    else if (!p.measured)
        p.name += " (RAM bandwidth not measured: typical default)";
    return p;
}

MachineMemory detectMachineMemory()
{
    MachineMemory m;
    for (const NvmlGpu& nv : queryNvml()) {
        m.gpuFreeBytes.push_back(nv.freeBytes);
        m.gpuTotalBytes.push_back(nv.totalBytes);
        m.gpuNames.push_back(nv.name);
    }
    m.ramTotalBytes = meminfo("MemTotal");
    m.ramAvailableBytes = availableRamBytes();
    return m;
}

uint64_t availableRamBytes()
{
    const uint64_t avail = meminfo("MemAvailable");
    if (avail == 0) // kernels before 3.14 lack MemAvailable
        return meminfo("MemFree") + meminfo("Buffers") + meminfo("Cached");
    return avail;
}

} // namespace stowage
