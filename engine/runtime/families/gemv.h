#pragma once
// Matrix-vector products for decoding on the CPU: y = W x for a Linear
// weight W stored [out, in], one token at a time. Decoding one token reads
// every weight once, so this loop is the whole speed of CPU decode; it runs
// at memory bandwidth only when the kernel streams W with wide loads on
// every core. The engine has its own kernels for fp32, bf16 and fp16 weights
// (AVX2, AVX-512, AVX512-BF16), picked at run time by what the CPU supports,
// with at::mv as the portable fallback; each is tested against
// double-precision sums (tst_gemv) and runs in the family tests on whatever
// CPU runs them. Why own kernels (docs/PERFORMANCE.md): LibTorch 1.13's bf16
// mv streams at a quarter of the bandwidth and rounds each product to bf16,
// it has no fp16 mv on the CPU at all, and OpenBLAS's sgemv, fast alone,
// runs its own thread pool beside LibTorch's: on two cores the two pools
// take turns yielding to each other in every decode step.
#include "gemv_rows.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace stowage::arch {

enum class GemvKernel {
    None,       // at::mv (fp16 and bf16-with-fp32-x widened to fp32 first)
    Avx2,       // weights widened to fp32 on load, FMA (AVX2 + FMA + F16C)
    Avx512,     // the same, 16 lanes (AVX-512 F/BW/VL)
    Avx512Bf16, // bf16 x bf16 pairs multiplied and summed in fp32 by vdpbf16ps
};

const char* gemvKernelName(GemvKernel k);
// Kernels this CPU can run for weights of `dtype` (kFloat, kBFloat16, kHalf),
// best first; None is always last.
std::vector<GemvKernel> gemvKernels(at::ScalarType dtype);
// The kernel gemv() uses for `dtype` on this CPU: the first of gemvKernels(),
// unless STOWAGE_GEMV names another this CPU runs ("none", "avx2", "avx512",
// "avx512-bf16"; one that does not apply to a dtype leaves its default).
GemvKernel gemvKernelFor(at::ScalarType dtype);
// Benchmarks: make gemv() use `kernel` for `dtype` from now on (None: at::mv),
// to compare kernels in one process. Ignored when this CPU cannot run it.
void overrideGemvKernel(at::ScalarType dtype, GemvKernel kernel);

// How far ahead of its loads, in bytes, a one-row kernel asks for W's lines
// to be brought into L2 (gemv_rows.h); 0: no such hints. 8192, but 0 on AMD,
// where a hint a line (then into L1) slowed Zen 4's streaming by a quarter
// and this form is unmeasured; STOWAGE_GEMV_AHEAD=<bytes> (0 to 65536) sets it.
int64_t gemvReadAhead();
// Benchmarks: use `bytes` from now on (clamped to 0 .. 65536), to compare in
// one process. Only between products, never while one runs.
void overrideGemvReadAhead(int64_t bytes);

// y [out] = W [out, in] x [in]. W is fp32, bf16 or fp16; x is fp32 or W's
// dtype, and y comes back in x's dtype: fp32 sums, rounded once at the end.
// Rows split between the caller and the kernels' own helper threads, as
// many in all as at::get_num_threads().
at::Tensor gemv(const at::Tensor& w, const at::Tensor& x);
// The same with a given kernel (tests and benchmarks); throws when this CPU
// cannot run it. Avx512Bf16 with an fp32 x runs the Avx512 kernel (its
// products need bf16 on both sides).
at::Tensor gemvWith(GemvKernel kernel, const at::Tensor& w, const at::Tensor& x);
// y_i = W_i x for up to kGemvMatrices matrices of one dtype that share x (a
// layer's q, k and v; gate and up), as one job: the threads meet once at
// the end instead of once a matrix. The same sums as gemv() of each. x may
// also be one row [1, in] (a linear layer's input), and then each y is
// [1, out]: no LibTorch operation around the job.
constexpr size_t kGemvMatrices = 4;
// What the job does to each y_i beyond W_i x, as the threads store their
// rows: LibTorch operations that would each cost a call (3-8 us a layer in
// the small bf16 model's decode step, caches cold from the weights' stream).
struct GemvAfter {
    // y_i := add[i] + y_i, where given: a residual stream's h + linear(x),
    // with y_i rounded to x's dtype first and the sum rounded after, as
    // LibTorch's two operations do. add[i] is y_i's shape and dtype,
    // contiguous.
    std::vector<at::Tensor> add;
    // y in fp32 holding the values rounded to x's dtype: linear(x).float()
    // (the logits).
    bool widen = false;
};
std::vector<at::Tensor> gemvAll(const std::vector<at::Tensor>& ws, const at::Tensor& x, const GemvAfter& after = {});
std::vector<at::Tensor> gemvAllWith(GemvKernel kernel, const std::vector<at::Tensor>& ws, const at::Tensor& x,
                                    const GemvAfter& after = {});

// y [out] = W^T x for W stored [in, out] (GPT-2's Conv1D), W fp32, bf16 or
// fp16 and x fp32 or W's dtype; y in x's dtype, fp32 sums. W is streamed
// once in order, each thread summing its share of the rows. Undefined where
// there is no kernel (no AVX2, out not a multiple of the vector width):
// the caller falls back to LibTorch.
at::Tensor gemvT(const at::Tensor& w, const at::Tensor& x);

// Attention of one new position over the cache on the CPU: q [1, H, 1, D],
// k and v [1, KV, S, D] with each head's positions one after another (the
// KV cache's layout), in q's dtype or fp16 with an fp32 q (an fp16
// checkpoint's cache, runner.h); scores, softmax and sums in fp32, the heads
// dealt to the GEMV threads in a fixed interleave (each hints its next
// head's keys and values ahead). Undefined when it does not apply (another
// device or layout, D not a multiple of the vector width, no AVX2): the
// caller falls back to LibTorch, whose per-operation cost was most of a
// small model's attention (bf16: 300 us a layer at 100 positions, against
// a few here).
at::Tensor attendOne(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

// attendOne's softmax weights for one head, in place, with `kernel` (Avx2,
// Avx512 or Avx512Bf16, which runs Avx512's): p[i] := exp(p[i] * scale -
// top), top the largest p[i] * scale, then rounded to bf16 (round 1) or fp16
// (round 2), or kept in fp32 (0). Returns the sum before rounding. exp is a
// polynomial a vector at a time, within a few ulp of expf (tst_gemv); where
// e^x is under 2^-126 it gives about 2^-126. Throws when this CPU cannot run
// the kernel, or for None.
float softmaxWeights(GemvKernel kernel, float* p, int64_t n, float scale, int round);

// silu(gate) * up for one row on the CPU, [1, n] fp32 or bf16 alike,
// contiguous, as one loop a vector at a time (the exp of softmaxWeights),
// with LibTorch's roundings of its two operations for bf16. Undefined where
// it does not apply (another shape, dtype or device; fp32's GEMV kernel
// None): the caller runs at::silu(gate) * up.
at::Tensor siluTimes(const at::Tensor& gate, const at::Tensor& up);

// Decoding's rotary and RMSNorm loops (runner.h) a vector at a time, in the
// instruction set of fp32's GEMV kernel (gemvKernelFor(kFloat); so are
// siluTimes' and attendOne's), or nullptr where that is None: the caller's
// scalar loops run. One position's rotary and a 1024-wide norm took 9 and
// 6 us in the small bf16 model's decode step, one element at a time.
rows::RotaryFn rotaryKernel();
rows::RmsNormFn rmsNormKernel();

// dst (fp32, contiguous) = src (fp16 or bf16, contiguous, as many
// elements) widened: the engine's kernel where the CPU has one, else copy_.
void widenInto(const at::Tensor& src, at::Tensor& dst);
// The same for n elements of fp16, bf16 or fp32 at `src`, on this thread.
void widen(const void* src, at::ScalarType type, float* dst, int64_t n);
// dst[0, n) = src rounded to fp16 as Tensor::to does: F16C where the CPU has
// it (c10::Half's conversion in software took 5 ns an element: an fp16
// model's keys and values 10 us a layer in decode), else c10::Half.
void narrowToHalf(const float* src, void* dst, int64_t n);

} // namespace stowage::arch
