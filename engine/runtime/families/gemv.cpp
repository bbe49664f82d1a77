#include "gemv.h"

#include "gemv_internal.h"
#include "gemv_rows.h"
#include "gemv_threads.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace stowage::arch {

namespace detail {

const CpuFeatures& cpu()
{
    static const CpuFeatures f = [] {
        CpuFeatures c;
#if STOWAGE_GEMV_X86
        __builtin_cpu_init();
        c.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        c.avx512 = c.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl");
        c.avx512bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
        c.amd = __builtin_cpu_is("amd");
#endif
        return c;
    }();
    return f;
}

bool cpuHas(GemvKernel k)
{
    switch (k) {
    case GemvKernel::None: return true;
    case GemvKernel::Avx2: return cpu().avx2;
    case GemvKernel::Avx512: return cpu().avx512;
    case GemvKernel::Avx512Bf16: return cpu().avx512bf16;
    }
    return false;
}

bool supportedDType(at::ScalarType dt) { return dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf; }

const rows::Kernels* isaOf(GemvKernel k)
{
#if STOWAGE_GEMV_X86
    if (!cpuHas(k))
        return nullptr;
    if (k == GemvKernel::Avx2)
        return &rows::kAvx2;
    if (k == GemvKernel::Avx512 || k == GemvKernel::Avx512Bf16)
        return &rows::kAvx512;
#endif
    (void)k;
    return nullptr;
}

} // namespace detail

using namespace detail;

namespace {

// Whether `k` multiplies W of `dtype` by x of `xdtype` as bf16 pairs
// (vdpbf16ps: x stays bf16); the other kernels take fp32 x.
bool pairsOfBf16(GemvKernel k, at::ScalarType dtype, at::ScalarType xdtype)
{
    return k == GemvKernel::Avx512Bf16 && dtype == at::kBFloat16 && xdtype == at::kBFloat16;
}

// The row kernel for W of `dtype` with an x of `xdtype` (fp32 or bf16), or
// nullptr for at::mv.
rows::Fn rowsFor(GemvKernel k, at::ScalarType dtype, at::ScalarType xdtype)
{
    const rows::Kernels* isa = isaOf(k);
    if (!isa)
        return nullptr;
    if (pairsOfBf16(k, dtype, xdtype))
        return isa->bf16Dp;
    return dtype == at::kFloat ? isa->f32 : dtype == at::kBFloat16 ? isa->bf16 : dtype == at::kHalf ? isa->f16 : nullptr;
}

GemvKernel fromEnv(at::ScalarType dtype)
{
    const auto ks = gemvKernels(dtype);
    const char* env = std::getenv("STOWAGE_GEMV");
    if (env && *env)
        for (GemvKernel k : ks)
            if (std::strcmp(env, gemvKernelName(k)) == 0)
                return k;
    return ks.front(); // unset, unknown, or not for this dtype or CPU: the default
}

std::atomic<int>& chosen(at::ScalarType dtype)
{
    static std::atomic<int> f32{int(fromEnv(at::kFloat))};
    static std::atomic<int> bf16{int(fromEnv(at::kBFloat16))};
    static std::atomic<int> f16{int(fromEnv(at::kHalf))};
    return dtype == at::kFloat ? f32 : dtype == at::kBFloat16 ? bf16 : f16;
}

int64_t aheadFromEnv()
{
    const char* env = std::getenv("STOWAGE_GEMV_AHEAD");
    if (env && *env) {
        char* end = nullptr;
        const long long v = std::strtoll(env, &end, 10);
        if (end && *end == 0)
            return std::clamp<int64_t>(v, 0, 65536);
    }
    return cpu().amd ? 0 : 8192;
}

std::atomic<int64_t>& ahead()
{
    static std::atomic<int64_t> bytes{aheadFromEnv()};
    return bytes;
}

} // namespace

namespace detail {

float element(const void* p, at::ScalarType t, int64_t i)
{
    return t == at::kFloat      ? static_cast<const float*>(p)[i]
           : t == at::kBFloat16 ? float(static_cast<const at::BFloat16*>(p)[i])
                                : float(static_cast<const at::Half*>(p)[i]);
}

void storeIn(void* out, at::ScalarType type, int64_t at, const float* y, int64_t n)
{
    if (type == at::kFloat) {
        std::copy(y, y + n, static_cast<float*>(out) + at);
    } else if (type == at::kBFloat16) {
        auto* o = static_cast<at::BFloat16*>(out) + at;
        for (int64_t i = 0; i < n; ++i)
            o[i] = at::BFloat16(y[i]);
    } else {
        auto* o = static_cast<at::Half*>(out) + at;
        for (int64_t i = 0; i < n; ++i)
            o[i] = at::Half(y[i]);
    }
}

} // namespace detail

namespace {

// T(float(add[i]) + float(T(y[i]))) for i in [at, at + n): LibTorch's
// h + y for y rounded to T (its add widens both, sums in fp32, rounds).
template <class T>
void addRounded(const void* add, void* out, int64_t at, const float* y, int64_t n)
{
    const T* a = static_cast<const T*>(add) + at;
    T* o = static_cast<T*>(out) + at;
    for (int64_t i = 0; i < n; ++i)
        o[i] = T(float(a[i]) + float(T(y[i])));
}

// out[at, at + n) = y[0, n) rounded to `type`, then widened (fp32 out).
void storeRoundedAsFloat(float* out, at::ScalarType type, int64_t at, const float* y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        out[at + i] = type == at::kBFloat16 ? float(at::BFloat16(y[i]))
                      : type == at::kHalf   ? float(at::Half(y[i]))
                                            : y[i];
}

} // namespace

const char* gemvKernelName(GemvKernel k)
{
    switch (k) {
    case GemvKernel::None: return "none";
    case GemvKernel::Avx2: return "avx2";
    case GemvKernel::Avx512: return "avx512";
    case GemvKernel::Avx512Bf16: return "avx512-bf16";
    }
    return "?";
}

std::vector<GemvKernel> gemvKernels(at::ScalarType dtype)
{
    // Best first, as measured (docs/PERFORMANCE.md): the widest this CPU
    // runs, but for fp16 on AMD, where AVX2 comes first. fp16 weights are
    // widened by vcvtph2ps, which on Zen 4 streamed fp16 rows of 1024 at
    // 0.89-0.91 of a plain read in its 512-bit form against 0.96-0.99 in its
    // 256-bit one (six runs, the small benchmark model's matrices), and rows
    // of 4096 at 0.93-0.95 against 0.95. On Intel's Xeon with AMX the 512-bit
    // form was the faster: the small fp16 model decoded at 105-108 tok/s
    // against 97-103 (three alternating pairs), 7B-layer fp16 the same.
    const bool avx2First = dtype == at::kHalf && cpu().amd;
    std::vector<GemvKernel> out;
    if (dtype == at::kBFloat16 && cpuHas(GemvKernel::Avx512Bf16))
        out.push_back(GemvKernel::Avx512Bf16);
    if (avx2First && cpuHas(GemvKernel::Avx2))
        out.push_back(GemvKernel::Avx2);
    if (supportedDType(dtype) && cpuHas(GemvKernel::Avx512))
        out.push_back(GemvKernel::Avx512);
    if (supportedDType(dtype) && !avx2First && cpuHas(GemvKernel::Avx2))
        out.push_back(GemvKernel::Avx2);
    out.push_back(GemvKernel::None);
    return out;
}

GemvKernel gemvKernelFor(at::ScalarType dtype)
{
    if (!supportedDType(dtype))
        return GemvKernel::None;
    return GemvKernel(chosen(dtype).load(std::memory_order_relaxed));
}

int64_t gemvReadAhead() { return ahead().load(std::memory_order_relaxed); }

void overrideGemvReadAhead(int64_t bytes) { ahead().store(std::clamp<int64_t>(bytes, 0, 65536)); }

void overrideGemvKernel(at::ScalarType dtype, GemvKernel kernel)
{
    const auto ks = gemvKernels(dtype);
    if (supportedDType(dtype) && std::find(ks.begin(), ks.end(), kernel) != ks.end())
        chosen(dtype).store(int(kernel));
}

std::vector<at::Tensor> gemvAllWith(GemvKernel kernel, const std::vector<at::Tensor>& ws, const at::Tensor& x2,
                                    const GemvAfter& after)
{
    if (!cpuHas(kernel))
        throw std::invalid_argument(std::string("this CPU cannot run the ") + gemvKernelName(kernel) + " kernel");
    const at::ScalarType xt = x2.scalar_type();
    if (ws.empty() || ws.size() > kGemvMatrices)
        throw std::invalid_argument("gemv: 1 to " + std::to_string(kGemvMatrices) + " matrices");
    const bool row = x2.dim() == 2; // [1, in] in, [1, out] out
    if ((x2.dim() != 1 && !(row && x2.size(0) == 1)) || !x2.is_cpu())
        throw std::invalid_argument("gemv: x [in] or [1, in], on the CPU");
    const at::Tensor x = row ? x2.view({x2.size(1)}) : x2;
    const at::ScalarType wt = ws[0].scalar_type();
    for (const at::Tensor& w : ws)
        if (w.dim() != 2 || w.size(1) != x.size(0) || !w.is_cpu() || w.scalar_type() != wt || !supportedDType(wt) ||
            (xt != wt && xt != at::kFloat))
            throw std::invalid_argument(
                "gemv: W [out, in] (fp32, bf16 or fp16, all alike) and x [in] (fp32 or W's dtype), on the CPU");
    const auto shaped = [&](int64_t n) { return row ? std::vector<int64_t>{1, n} : std::vector<int64_t>{n}; };
    if (!after.add.empty()) {
        if (after.add.size() != ws.size() || after.widen)
            throw std::invalid_argument("gemv: one tensor to add to each product, not with widen");
        for (size_t i = 0; i < ws.size(); ++i)
            if (after.add[i].sizes() != at::IntArrayRef(shaped(ws[i].size(0))) || after.add[i].scalar_type() != xt ||
                !after.add[i].is_contiguous() || !after.add[i].is_cpu())
                throw std::invalid_argument("gemv: what is added must have the product's shape and dtype");
    }
    // The kernels take fp32 x, but for the bf16 x bf16 products of vdpbf16ps.
    const rows::Fn f = rowsFor(kernel, wt, xt);
    const at::Tensor xin = pairsOfBf16(kernel, wt, xt) || xt == at::kFloat ? x.contiguous() : x.to(at::kFloat);
    std::vector<at::Tensor> ys;
    if (!f) {
        for (size_t i = 0; i < ws.size(); ++i) {
            const at::Tensor& w = ws[i];
            // In fp32 but for fp32 x fp32: LibTorch's own bf16 mv sums in
            // bf16 on CPUs without AVX-512 (rows of 1024 integers off by 8).
            at::Tensor y = (wt == xt && wt == at::kFloat ? at::mv(w, x) : at::mv(w.to(at::kFloat), xin).to(xt))
                               .view(shaped(w.size(0)));
            ys.push_back(!after.add.empty() ? after.add[i] + y : after.widen ? y.to(at::kFloat) : y);
        }
        return ys;
    }
    // y in x's dtype (fp32 for `widen`). For bf16/fp16, or with something to
    // add, the fp32 sums go to a reused buffer and the threads round (and
    // add) their own rows (a y.to() after the call cost 4.3 us of each of
    // the small bf16 model's 50 products a token).
    int64_t rowsInAll = 0;
    for (const at::Tensor& w : ws)
        rowsInAll += w.size(0);
    thread_local std::vector<float> sums;
    if (sums.size() < size_t(rowsInAll))
        sums.resize(size_t(rowsInAll));
    // Rows in chunks the threads take in turn from a shared counter, not one
    // fixed share each: on a busy machine a thread that loses its core holds
    // up the others for one chunk, not for its whole share. Guided sizes: a
    // chunk is a quarter of each thread's share of the rows still to hand
    // out (in all the job's matrices), at least 256 KiB (long runs for the
    // prefetchers: 64 KiB chunks streamed 20% slower than halves), so chunks
    // shrink towards the end and the threads finish within a small one of
    // each other. Fixed quarters of each matrix could leave a thread waiting
    // on a quarter of a 7B head; guided ones decoded the 7B-layer bf16 model
    // at 0.88-0.96 of the bound against 0.84-0.94 (Zen 4, alternating runs).
    // Matrices that share x (q, k and v; gate and up) are one job, chunks of
    // each in turn: the threads wait for each other once, not once a matrix.
    struct Chunk {
        const void* data;
        float* y;
        void* out;       // where the rows end up when not in y: in x's dtype, or fp32 for `widen`
        const void* add; // GemvAfter::add's, or nullptr
        int64_t r0, r1;
    };
    struct Work {
        rows::Fn f;
        const void* x;
        int64_t k, ahead;
        at::ScalarType type;
        bool widen;
        const Chunk* chunks;
        int64_t count;
        std::atomic<int64_t> next{0};
    } work;
    work.f = f;
    work.x = xin.data_ptr();
    work.k = x.size(0);
    work.ahead = gemvReadAhead();
    work.type = xt;
    work.widen = after.widen;
    const int threads = std::max(1, at::get_num_threads());
    const int64_t rowBytes = std::max<int64_t>(1, work.k * int64_t(ws[0].element_size()));
    const int64_t minRows = std::max<int64_t>(8, (int64_t(256) << 10) / rowBytes);
    thread_local std::vector<Chunk> chunks;
    chunks.clear();
    std::vector<at::Tensor> kept; // contiguous copies, alive for the job
    int64_t left = rowsInAll;
    float* sumsAt = sums.data();
    for (size_t m = 0; m < ws.size(); ++m) {
        const at::Tensor w = ws[m].contiguous();
        if (!w.is_same(ws[m]))
            kept.push_back(w);
        const int64_t n = w.size(0);
        ys.push_back(at::empty(shaped(n), at::TensorOptions().dtype(after.widen ? at::kFloat : xt)));
        const void* add = after.add.empty() ? nullptr : after.add[m].data_ptr();
        // fp32 sums straight into an fp32 y, unless something is added to them
        const bool direct = xt == at::kFloat && !add;
        float* y = direct ? ys.back().data_ptr<float>() : sumsAt;
        void* out = direct ? nullptr : ys.back().data_ptr();
        sumsAt += n;
        for (int64_t r0 = 0; r0 < n;) {
            int64_t size = std::max(minRows, left / (int64_t(threads) * 4));
            size = (size + 7) / 8 * 8; // whole blocks of eight rows (gemv_isa.h)
            const int64_t r1 = std::min(n, r0 + size);
            chunks.push_back({w.data_ptr(), y, out, add, r0, r1});
            left -= r1 - r0;
            r0 = r1;
        }
    }
    if (chunks.empty()) // no rows at all
        return ys;
    work.chunks = chunks.data();
    work.count = int64_t(chunks.size());
    Helpers::instance().run(int(std::min<int64_t>(threads, work.count)), [](void* ctx, int) {
        auto& s = *static_cast<Work*>(ctx);
        for (int64_t c = s.next.fetch_add(1, std::memory_order_relaxed); c < s.count;
             c = s.next.fetch_add(1, std::memory_order_relaxed)) {
            const Chunk& ch = s.chunks[c];
            s.f(ch.data, s.x, s.k, ch.r0, ch.r1, ch.y, s.ahead);
            const float* y = ch.y + ch.r0;
            const int64_t n = ch.r1 - ch.r0;
            if (ch.add && s.type == at::kFloat)
                addRounded<float>(ch.add, ch.out, ch.r0, y, n);
            else if (ch.add && s.type == at::kBFloat16)
                addRounded<at::BFloat16>(ch.add, ch.out, ch.r0, y, n);
            else if (ch.add)
                addRounded<at::Half>(ch.add, ch.out, ch.r0, y, n);
            else if (ch.out && s.widen)
                storeRoundedAsFloat(static_cast<float*>(ch.out), s.type, ch.r0, y, n);
            else if (ch.out)
                storeIn(ch.out, s.type, ch.r0, y, n);
        }
    }, &work, chunks.front().data, size_t(ws[0].size(0) * rowBytes));
    return ys;
}


namespace {
// The kernels of the elementwise loops: those of fp32's GEMV kernel's
// instruction set (STOWAGE_GEMV=avx2 or none moves them too; the tests run
// each), or nullptr.
const rows::Kernels* elementwise() { return isaOf(gemvKernelFor(at::kFloat)); }
} // namespace

rows::RotaryFn rotaryKernel()
{
    const rows::Kernels* isa = elementwise();
    return isa ? isa->rotary : nullptr;
}

rows::RmsNormFn rmsNormKernel()
{
    const rows::Kernels* isa = elementwise();
    return isa ? isa->rmsNorm : nullptr;
}

at::Tensor siluTimes(const at::Tensor& gate, const at::Tensor& up)
{
    const at::ScalarType t = gate.scalar_type();
    const rows::Kernels* isa = elementwise();
    if (!isa || (t != at::kFloat && t != at::kBFloat16) || up.scalar_type() != t || !gate.is_cpu() || !up.is_cpu() ||
        gate.dim() != 2 || gate.size(0) != 1 || gate.sizes() != up.sizes() || !gate.is_contiguous() ||
        !up.is_contiguous())
        return {};
    at::Tensor out = at::empty_like(gate);
    isa->siluMul(gate.data_ptr(), up.data_ptr(), out.data_ptr(), gate.numel(), t == at::kBFloat16);
    return out;
}

at::Tensor gemvWith(GemvKernel kernel, const at::Tensor& w, const at::Tensor& x)
{
    return gemvAllWith(kernel, {w}, x)[0];
}

std::vector<at::Tensor> gemvAll(const std::vector<at::Tensor>& ws, const at::Tensor& x, const GemvAfter& after)
{
    return gemvAllWith(gemvKernelFor(ws.empty() ? at::kFloat : ws[0].scalar_type()), ws, x, after);
}

namespace {
// The widest instruction set this CPU runs, or nullptr.
const rows::Kernels* widest() { return isaOf(cpu().avx512 ? GemvKernel::Avx512 : GemvKernel::Avx2); }

// The kernel that widens fp16 or bf16 to fp32 on this CPU, or nullptr.
rows::WidenFn widenFor(at::ScalarType type)
{
    const rows::Kernels* isa = widest();
    return !isa ? nullptr : type == at::kHalf ? isa->widenF16 : type == at::kBFloat16 ? isa->widenBf16 : nullptr;
}
} // namespace

void widenInto(const at::Tensor& src, at::Tensor& dst)
{
    const rows::WidenFn f = widenFor(src.scalar_type());
    if (!f || !src.is_contiguous() || !dst.is_contiguous() || dst.scalar_type() != at::kFloat ||
        src.numel() != dst.numel() || !src.is_cpu() || !dst.is_cpu()) {
        dst.copy_(src.view(dst.sizes()));
        return;
    }
    // Shared with the GEMV helper threads (prefill widens each block while
    // the other core had nothing to do: a fifth of fp16 prefill's time).
    struct Work {
        rows::WidenFn f;
        const char* src;
        float* dst;
        int64_t n, part;
    } work{f, static_cast<const char*>(src.data_ptr()), dst.data_ptr<float>(), src.numel(), 0};
    const int threads = int(std::min<int64_t>(std::max(1, at::get_num_threads()), std::max<int64_t>(1, work.n >> 16)));
    work.part = (work.n + threads - 1) / threads;
    Helpers::instance().run(threads, [](void* ctx, int worker) {
        auto& s = *static_cast<Work*>(ctx);
        const int64_t from = worker * s.part, to = std::min(s.n, from + s.part);
        if (from < to)
            s.f(s.src + from * 2, s.dst + from, to - from); // fp16 and bf16: two bytes each
    }, &work);
}

void widen(const void* src, at::ScalarType type, float* dst, int64_t n)
{
    if (const rows::WidenFn f = widenFor(type))
        f(src, dst, n);
    else
        for (int64_t i = 0; i < n; ++i)
            dst[i] = element(src, type, i);
}

void narrowToHalf(const float* src, void* dst, int64_t n)
{
    if (const rows::Kernels* isa = isaOf(GemvKernel::Avx2)) { // AVX2 here includes F16C (cpu())
        isa->narrowF16(src, dst, n);
        return;
    }
    auto* out = static_cast<at::Half*>(dst);
    for (int64_t i = 0; i < n; ++i)
        out[i] = at::Half(src[i]);
}

at::Tensor gemv(const at::Tensor& w, const at::Tensor& x) { return gemvWith(gemvKernelFor(w.scalar_type()), w, x); }

namespace detail {
rows::AccFn accFor(GemvKernel kernel, at::ScalarType dtype)
{
    const rows::Kernels* isa = isaOf(kernel);
    if (!isa)
        return nullptr;
    return dtype == at::kFloat ? isa->accF32 : dtype == at::kBFloat16 ? isa->accBf16 : dtype == at::kHalf ? isa->accF16
                                                                                                          : nullptr;
}
int accWidth(GemvKernel kernel) { return kernel == GemvKernel::Avx2 ? 8 : 16; }
} // namespace detail

at::Tensor gemvT(const at::Tensor& w, const at::Tensor& x)
{
    const at::ScalarType wt = w.scalar_type(), xt = x.scalar_type();
    const GemvKernel kernel = gemvKernelFor(wt);
    const rows::AccFn acc = accFor(kernel, wt);
    if (!acc || w.dim() != 2 || x.dim() != 1 || w.size(0) != x.size(0) || !w.is_cpu() || !x.is_cpu() ||
        !w.is_contiguous() || (xt != wt && xt != at::kFloat) || w.size(1) % accWidth(kernel) != 0 || w.size(1) == 0)
        return {};
    const int64_t in = w.size(0), out = w.size(1);
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    // Each thread sums a fixed share of the rows into its own y, added at the
    // end: the order of every sum depends on the thread count only, so the
    // same run gives the same tokens.
    const int threads = int(std::max<int64_t>(1, std::min<int64_t>(std::max(1, at::get_num_threads()),
                                                                     in * out * int64_t(w.element_size()) >> 18)));
    at::Tensor parts = at::zeros({threads, out}, at::kFloat);
    struct Work {
        rows::AccFn acc;
        const char* w;
        const float* x;
        float* y;
        int64_t in, out, share, rowBytes;
    } work{acc, static_cast<const char*>(w.data_ptr()), xf.data_ptr<float>(), parts.data_ptr<float>(), in, out,
           (in + threads - 1) / threads, out * int64_t(w.element_size())};
    Helpers::instance().run(threads, [](void* ctx, int worker) {
        auto& s = *static_cast<Work*>(ctx);
        const int64_t from = worker * s.share, to = std::min(s.in, from + s.share);
        if (from < to)
            s.acc(s.w + from * s.rowBytes, s.x + from, s.out, to - from, s.y + worker * s.out);
    }, &work);
    at::Tensor y = threads == 1 ? parts[0] : parts.sum(0);
    return xt == at::kFloat ? y : y.to(xt);
}


} // namespace stowage::arch
