#pragma once
// Matrix-vector products for decoding on the CPU: y = W x for a Linear
// weight W stored [out, in], one token at a time. Decoding one token reads
// every weight once, so this loop is the whole speed of CPU decode; it runs
// at memory bandwidth only when the kernel streams W with wide loads on
// every core. For fp32, OpenBLAS's sgemv (at::mv) does. LibTorch 1.13's bf16
// mv does not (19-23% of the bandwidth bound here and on an AVX-512 Xeon; it
// also rounds each product to bf16), so bf16 has the engine's own kernels,
// picked at run time by what the CPU supports, with at::mv as the portable
// fallback. Each is tested against double-precision sums (tst_gemv) and runs
// in the family tests on whatever CPU runs them.
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace stowage::arch {

enum class GemvKernel {
    None,       // at::mv (OpenBLAS sgemv for fp32, LibTorch's own loop for bf16)
    Avx2,       // bf16 widened to fp32 on load, FMA
    Avx512Bf16, // bf16 pairs multiplied and summed in fp32 by vdpbf16ps
};

const char* gemvKernelName(GemvKernel k);
// Kernels this CPU can run for `dtype` (kFloat or kBFloat16), best first;
// None is always last.
std::vector<GemvKernel> gemvKernels(at::ScalarType dtype);
// The kernel gemv() uses for `dtype` on this CPU: the first of gemvKernels()
// (each measured faster than at::mv, docs/PERFORMANCE.md), unless
// STOWAGE_GEMV names another this CPU runs ("none", "avx2", "avx512-bf16").
GemvKernel gemvKernelFor(at::ScalarType dtype);
// Benchmarks: make gemv() use `kernel` for `dtype` from now on (None: at::mv),
// to compare kernels in one process. Ignored when this CPU cannot run it.
void overrideGemvKernel(at::ScalarType dtype, GemvKernel kernel);

// y [out] = W [out, in] x [in], in x's dtype. bf16: fp32 sums rounded once at
// the end; threads from LibTorch's pool. fp32: at::mv.
at::Tensor gemv(const at::Tensor& w, const at::Tensor& x);
// The same with a given kernel (tests and benchmarks); throws when this CPU
// cannot run it.
at::Tensor gemvWith(GemvKernel kernel, const at::Tensor& w, const at::Tensor& x);

} // namespace stowage::arch
