#include "gemv.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOWAGE_GEMV_X86 1
#endif

namespace stowage::arch {

namespace {

// Every kernel computes rows [r0, r1) of y (fp32 sums) for bf16 W [N, K] row-major.
using RowsBf16 = void (*)(const uint16_t* w, const uint16_t* x, int64_t k, int64_t r0, int64_t r1, float* y);

#ifdef STOWAGE_GEMV_X86
// GCC 12's own intrinsics (_mm512_cvtepu16_epi32, _mm512_slli_epi32, ...)
// start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags once
// inlined: a false positive in the compiler's headers, not in this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// ---- AVX2 -------------------------------------------------------------------
#define STOWAGE_AVX2 __attribute__((target("avx2,fma")))

STOWAGE_AVX2 inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
STOWAGE_AVX2 inline __m256 widen8(const uint16_t* p)
{
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float bf16ToFloat(uint16_t h)
{
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// R rows at once share each load of x.
template <int R>
STOWAGE_AVX2 void rowsBf16Avx2R(const uint16_t* w, const uint16_t* x, int64_t k, int64_t r, float* y)
{
    __m256 acc[R];
    for (int i = 0; i < R; ++i)
        acc[i] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) {
        const __m256 xv = widen8(x + j);
        for (int i = 0; i < R; ++i)
            acc[i] = _mm256_fmadd_ps(widen8(w + (r + i) * k + j), xv, acc[i]);
    }
    for (int i = 0; i < R; ++i) {
        float s = hsum256(acc[i]);
        for (int64_t t = j; t < k; ++t)
            s += bf16ToFloat(w[(r + i) * k + t]) * bf16ToFloat(x[t]);
        y[r + i] = s;
    }
}
STOWAGE_AVX2 void rowsBf16Avx2(const uint16_t* w, const uint16_t* x, int64_t k, int64_t r0, int64_t r1, float* y)
{
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4)
        rowsBf16Avx2R<4>(w, x, k, r, y);
    for (; r < r1; ++r)
        rowsBf16Avx2R<1>(w, x, k, r, y);
}
#undef STOWAGE_AVX2

// ---- AVX512-BF16: 32 bf16 pairs per instruction, products and sums in fp32.
#define STOWAGE_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
template <int R>
STOWAGE_AVX512BF16 void rowsBf16DpR(const uint16_t* w, const uint16_t* x, int64_t k, int64_t r, float* y)
{
    __m512 acc[R];
    for (int i = 0; i < R; ++i)
        acc[i] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + j);
        for (int i = 0; i < R; ++i)
            acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_loadu_si512(w + (r + i) * k + j), xv);
    }
    if (j < k) {
        const __mmask32 m = __mmask32((uint64_t(1) << (k - j)) - 1);
        const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + j);
        for (int i = 0; i < R; ++i)
            acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_maskz_loadu_epi16(m, w + (r + i) * k + j), xv);
    }
    for (int i = 0; i < R; ++i)
        y[r + i] = _mm512_reduce_add_ps(acc[i]);
}
STOWAGE_AVX512BF16 void rowsBf16Dp(const uint16_t* w, const uint16_t* x, int64_t k, int64_t r0, int64_t r1, float* y)
{
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4)
        rowsBf16DpR<4>(w, x, k, r, y);
    for (; r < r1; ++r)
        rowsBf16DpR<1>(w, x, k, r, y);
}
#undef STOWAGE_AVX512BF16
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool cpuHas(GemvKernel k)
{
    __builtin_cpu_init();
    switch (k) {
    case GemvKernel::None: return true;
    case GemvKernel::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemvKernel::Avx512Bf16:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    }
    return false;
}
#else
bool cpuHas(GemvKernel k) { return k == GemvKernel::None; }
#endif

RowsBf16 bf16Rows(GemvKernel k)
{
#ifdef STOWAGE_GEMV_X86
    switch (k) {
    case GemvKernel::Avx2: return rowsBf16Avx2;
    case GemvKernel::Avx512Bf16: return rowsBf16Dp;
    case GemvKernel::None: break;
    }
#endif
    (void)k;
    return nullptr;
}

GemvKernel fromEnv(at::ScalarType dtype)
{
    const char* env = std::getenv("STOWAGE_GEMV");
    if (!env || !*env)
        return gemvKernels(dtype).front();
    for (GemvKernel k : {GemvKernel::None, GemvKernel::Avx2, GemvKernel::Avx512Bf16})
        if (std::strcmp(env, gemvKernelName(k)) == 0 && cpuHas(k))
            return k;
    return gemvKernels(dtype).front(); // unknown or unsupported here: the default
}

} // namespace

const char* gemvKernelName(GemvKernel k)
{
    switch (k) {
    case GemvKernel::None: return "none";
    case GemvKernel::Avx2: return "avx2";
    case GemvKernel::Avx512Bf16: return "avx512-bf16";
    }
    return "?";
}

std::vector<GemvKernel> gemvKernels(at::ScalarType dtype)
{
    // fp32: OpenBLAS sgemv (at::mv) streams at the read bandwidth already;
    // own AVX2/AVX-512 fp32 kernels measured no faster (docs/PERFORMANCE.md).
    std::vector<GemvKernel> out;
    if (dtype == at::kBFloat16 && cpuHas(GemvKernel::Avx512Bf16))
        out.push_back(GemvKernel::Avx512Bf16);
    if (dtype == at::kBFloat16 && cpuHas(GemvKernel::Avx2))
        out.push_back(GemvKernel::Avx2);
    out.push_back(GemvKernel::None);
    return out;
}

namespace {
std::atomic<int>& chosen(at::ScalarType dtype)
{
    static std::atomic<int> f32{int(fromEnv(at::kFloat))};
    static std::atomic<int> bf16{int(fromEnv(at::kBFloat16))};
    return dtype == at::kFloat ? f32 : bf16;
}
} // namespace

GemvKernel gemvKernelFor(at::ScalarType dtype)
{
    if (dtype != at::kFloat && dtype != at::kBFloat16)
        return GemvKernel::None;
    return GemvKernel(chosen(dtype).load(std::memory_order_relaxed));
}

void overrideGemvKernel(at::ScalarType dtype, GemvKernel kernel)
{
    const auto ks = gemvKernels(dtype);
    if ((dtype == at::kFloat || dtype == at::kBFloat16) && std::find(ks.begin(), ks.end(), kernel) != ks.end())
        chosen(dtype).store(int(kernel));
}

at::Tensor gemvWith(GemvKernel kernel, const at::Tensor& w, const at::Tensor& x)
{
    if (!cpuHas(kernel))
        throw std::invalid_argument(std::string("this CPU cannot run the ") + gemvKernelName(kernel) + " kernel");
    if (kernel == GemvKernel::None || w.scalar_type() != at::kBFloat16)
        return at::mv(w, x);
    if (w.dim() != 2 || x.dim() != 1 || x.scalar_type() != at::kBFloat16 || w.size(1) != x.size(0) || !w.is_cpu() ||
        !x.is_cpu())
        throw std::invalid_argument("gemv: W [out, in] and x [in], both bf16 on the CPU");
    const at::Tensor wc = w.contiguous(), xc = x.contiguous();
    const int64_t n = wc.size(0), k = wc.size(1);
    at::Tensor y = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
    float* yp = y.data_ptr<float>();
    // Rows in chunks of ~64 KiB of W that the threads take in turn from a
    // shared counter, not one fixed share each: on a busy machine a thread
    // that loses its core holds up the others for one chunk, not for its
    // whole share (measured: 2.4 GB/s for LibTorch's static split with two
    // threads on two loaded cores, against 9.3 GB/s for one thread).
    const int64_t rowBytes = k * int64_t(sizeof(uint16_t));
    const int64_t chunk = std::max<int64_t>(4, ((int64_t(64) << 10) / std::max<int64_t>(1, rowBytes) + 3) / 4 * 4);
    const int64_t chunks = (n + chunk - 1) / chunk;
    const RowsBf16 f = bf16Rows(kernel);
    const auto* wp = reinterpret_cast<const uint16_t*>(wc.data_ptr<at::BFloat16>());
    const auto* xp = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
    std::atomic<int64_t> next{0};
    auto work = [&] {
        for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
             c = next.fetch_add(1, std::memory_order_relaxed))
            f(wp, xp, k, c * chunk, std::min(n, (c + 1) * chunk), yp);
    };
    const int64_t threads = std::min<int64_t>(at::get_num_threads(), chunks);
    if (threads <= 1)
        work();
    else
        at::parallel_for(0, threads, 1, [&](int64_t, int64_t) { work(); });
    return y.to(at::kBFloat16);
}

at::Tensor gemv(const at::Tensor& w, const at::Tensor& x) { return gemvWith(gemvKernelFor(w.scalar_type()), w, x); }

} // namespace stowage::arch
