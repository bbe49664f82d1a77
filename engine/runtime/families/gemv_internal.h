#pragma once
// What gemv.cpp shares with attention.cpp: the CPU's features, and the
// small pieces both kinds of job use. Not a public header.
#include "gemv.h"
#include "gemv_rows.h"

#include <ATen/ATen.h>

#include <cstdint>

namespace stowage::arch::detail {

// What this CPU runs, asked once: gemvWith() checks it on every call.
struct CpuFeatures {
    bool avx2 = false, avx512 = false, avx512bf16 = false;
    bool amd = false; // AMD's Zen 4 runs 512-bit conversions at half rate (gemvKernels)
};
const CpuFeatures& cpu();
bool cpuHas(GemvKernel k);
bool supportedDType(at::ScalarType dt); // fp32, bf16, fp16
// The kernel table of `k`'s instruction set (Avx512Bf16: AVX-512's, which
// holds the dot-product kernel too), or nullptr for None, a kernel this CPU
// cannot run, or a build without the x86 kernels.
const rows::Kernels* isaOf(GemvKernel k);

// Element i of a contiguous fp32, bf16 or fp16 buffer, widened.
float element(const void* p, at::ScalarType t, int64_t i);
// out[at, at + n) of `type` (fp32, bf16 or fp16) = y[0, n), rounded as
// Tensor::to does (to nearest, ties to even).
void storeIn(void* out, at::ScalarType type, int64_t at, const float* y, int64_t n);

// The accumulate-rows kernel for W of `dtype` under `kernel`, or nullptr,
// and the vector width its k must be a multiple of.
rows::AccFn accFor(GemvKernel kernel, at::ScalarType dtype);
int accWidth(GemvKernel kernel);

} // namespace stowage::arch::detail
