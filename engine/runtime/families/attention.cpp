// Decoding's attention on the CPU (gemv.h attendOne) and its softmax,
// run on the GEMV's helper threads.
#include "gemv.h"
#include "gemv_internal.h"
#include "gemv_rows.h"
#include "gemv_threads.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace stowage::arch {

using namespace detail;

float softmaxWeights(GemvKernel kernel, float* p, int64_t n, float scale, int round)
{
    const rows::Kernels* isa = isaOf(kernel);
    const rows::SoftmaxFn f = isa ? isa->softmax : nullptr;
    if (!f)
        throw std::invalid_argument(std::string("no softmax with the ") + gemvKernelName(kernel) + " kernel here");
    return f(p, n, scale, round);
}

#if STOWAGE_GEMV_X86
namespace {
// A hint that the line at p will be read soon, into L2; never faults. An
// asm statement: GCC 12 at -O2 deleted _mm_prefetch calls under conditions
// (gemv_isa.h).
inline void prefetchToL2(const char* p) { asm volatile("prefetcht1 %0" : : "m"(*p)); }
} // namespace
#endif

at::Tensor attendOne(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale)
{
#if STOWAGE_GEMV_X86
    // q's dtype (the activations'), and the cache's: the same, or fp16 keys
    // and values with fp32 activations (LayerCache::storeAs).
    const at::ScalarType dt = q.scalar_type(), kvt = k.scalar_type();
    if (!supportedDType(dt) || (kvt != dt && !(dt == at::kFloat && kvt == at::kHalf)) || v.scalar_type() != kvt ||
        !q.is_cpu() || !k.is_cpu() || !v.is_cpu() || q.dim() != 4 || k.dim() != 4 || q.size(0) != 1 ||
        q.size(2) != 1 || k.sizes() != v.sizes())
        return {};
    const int64_t heads = q.size(1), dim = q.size(3), kvHeads = k.size(1), positions = k.size(2);
    GemvKernel kernel = gemvKernelFor(kvt);
    if (kernel == GemvKernel::Avx512Bf16)
        kernel = GemvKernel::Avx512; // q stays fp32 here
    if (kernel == GemvKernel::None || dim % accWidth(kernel) != 0 || k.size(0) != 1 || k.size(3) != dim ||
        kvHeads < 1 || heads % kvHeads != 0 || positions < 1 || k.stride(3) != 1 || k.stride(2) != dim ||
        v.stride(3) != 1 || v.stride(2) != dim)
        return {};
    struct Work {
        rows::ScoresFn scores;
        int kind; // the cache's dtype for `scores`: 0 fp32, 1 bf16, 2 fp16
        rows::AccFn acc;
        rows::SoftmaxFn softmax;
        const char *k, *v;
        int64_t kHead, vHead, group, dim, positions, heads, headBytes;
        const void* q;
        void* out;
        float* scratch; // per thread: scores, q's head in fp32, its output
        at::ScalarType dt;
        double scale;
        int round; // softmax weights rounded to: 0 fp32, 1 bf16, 2 fp16
        int threads;
    } work;
    const int64_t es = int64_t(at::elementSize(kvt));
    const at::Tensor qc = q.contiguous();
    at::Tensor out = at::empty({1, heads, 1, dim}, q.options());
    const int threads = int(std::min<int64_t>(std::max(1, at::get_num_threads()), heads));
    // Not LibTorch tensors: its conversion of q, a zeroed output and a scores
    // buffer (and the output's conversion after) cost 12 us of each layer's
    // 55-65 in the small bf16 model's decode.
    thread_local std::vector<float> scratch;
    const size_t perThread = size_t(positions + 2 * dim);
    if (scratch.size() < perThread * size_t(threads))
        scratch.resize(perThread * size_t(threads));
    const rows::Kernels& isa = *isaOf(kernel); // a kernel of this CPU's, not None
    work.scores = isa.scores;
    work.kind = kvt == at::kFloat ? 0 : kvt == at::kBFloat16 ? 1 : 2;
    work.acc = accFor(kernel, kvt);
    work.softmax = isa.softmax;
    work.k = static_cast<const char*>(k.data_ptr());
    work.v = static_cast<const char*>(v.data_ptr());
    work.kHead = k.stride(1) * es;
    work.vHead = v.stride(1) * es;
    work.group = heads / kvHeads;
    work.dim = dim;
    work.positions = positions;
    work.heads = heads;
    work.headBytes = std::min<int64_t>(positions * dim * es, int64_t(64) << 10);
    work.q = qc.data_ptr();
    work.out = out.data_ptr();
    work.scratch = scratch.data();
    work.dt = dt;
    work.scale = scale;
    work.round = dt == at::kBFloat16 ? 1 : dt == at::kHalf ? 2 : 0;
    work.threads = threads;
    // Heads in a fixed interleave (thread w takes w, w + threads, ...), so
    // each thread knows its next head and asks for its keys and values while
    // it reads this one's: in decode every head's are a fresh stream from
    // memory, and the threads read them at 7 GB/s a core without the hint.
    Helpers::instance().run(threads, [](void* ctx, int worker) {
        auto& s = *static_cast<Work*>(ctx);
        float* p = s.scratch + worker * (s.positions + 2 * s.dim);
        float* qh = p + s.positions;
        float* o = qh + s.dim;
        for (int64_t h = worker; h < s.heads; h += s.threads) {
            const int64_t kv = h / s.group; // repeat_kv: head h reads kv head h / group
            const int64_t nextKv = (h + s.threads) / s.group;
            if (h + s.threads < s.heads && nextKv != kv)
                for (int64_t b = 0; b < s.headBytes; b += 64) {
                    prefetchToL2(s.k + nextKv * s.kHead + b);
                    prefetchToL2(s.v + nextKv * s.vHead + b);
                }
            for (int64_t d = 0; d < s.dim; ++d)
                qh[d] = element(s.q, s.dt, h * s.dim + d);
            s.scores(s.k + kv * s.kHead, s.kind, qh, s.dim, s.positions, p);
            // Softmax in fp32; for bf16/fp16 the unnormalised weights are
            // rounded to the dtype before they meet V and the sum divides
            // at the end, as PyTorch's CPU attention kernel does.
            const double sum = s.softmax(p, s.positions, float(s.scale), s.round);
            std::fill(o, o + s.dim, 0.0f);
            s.acc(s.v + kv * s.vHead, p, s.dim, s.positions, o);
            const float inv = float(1.0 / sum);
            for (int64_t d = 0; d < s.dim; ++d)
                o[d] *= inv;
            storeIn(s.out, s.dt, h * s.dim, o, s.dim);
        }
    }, &work);
    return out;
#else
    (void)q, (void)k, (void)v, (void)scale;
    return {};
#endif
}

} // namespace stowage::arch
