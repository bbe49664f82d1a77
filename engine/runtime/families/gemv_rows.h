#pragma once
// The decode kernels of gemv.cpp and attention.cpp, one table per
// instruction set (gemv_avx2.cpp, gemv_avx512.cpp, each compiled with its -m
// flags from gemv_isa.h's templates; read only after a run-time CPU check).
// No LibTorch types here.
#include <cstdint>

namespace stowage::arch::rows {

// Element types of W as stored (bits only; the kernels widen them).
struct Bf16 {
    uint16_t bits;
};
struct F16 {
    uint16_t bits;
};

// Rows [r0, r1) of y = W x for W [n, k] row-major, in fp32 sums. x is fp32
// for every kernel but the dot-product one, whose x is bf16.
// `ahead` > 0: as it reads each cache line of W, the kernel asks for the line
// `ahead` bytes further on to be brought into L2 (prefetcht1), so that more
// reads are in flight than the hardware prefetchers keep (gemv.cpp).
using Fn = void (*)(const void* w, const void* x, int64_t k, int64_t r0, int64_t r1, float* y, int64_t ahead);

// y[0, k) += sum over r < n of p[r] W[r, :] (W [n, k] row-major, k a
// multiple of the vector width: 8 for AVX2, 16 for AVX-512).
using AccFn = void (*)(const void* w, const float* p, int64_t k, int64_t n, float* y);

// Attention's scores for one head: out[r] = q . K[r] for n rows of K
// (dim elements each, one after another; dim a multiple of the vector
// width), K fp32, bf16 or fp16 (kind 0, 1, 2), q fp32; fp32 sums.
using ScoresFn = void (*)(const void* k, int kind, const float* q, int64_t dim, int64_t n, float* out);

// Attention's softmax weights for one head, in place: p[i] := exp(p[i] *
// scale - top), top the largest p[i] * scale, then rounded to bf16 (round
// 1) or fp16 (round 2) where asked (0: kept in fp32). Returns the sum of the
// weights before rounding. exp is a polynomial of the vector width (within
// 2 ulp of expf), not libm's one element at a time.
using SoftmaxFn = float (*)(float* p, int64_t n, float scale, int round);

// out[i] = silu(a[i]) * b[i] = a[i] / (1 + e^-a[i]) * b[i] for n elements of
// fp32 (bf16 false) or bf16, a bf16 result rounded after the silu and after
// the product as LibTorch's two operations round it.
using SiluMulFn = void (*)(const void* a, const void* b, void* out, int64_t n, bool bf16);

// Rotary for one position (runner.h rotary): out[h] = q[h] * cos +
// rotate_half(q[h]) * sin for `heads` heads of `dim` (q's heads `headStride`
// elements apart, out's contiguous), all fp32 or all bf16; bf16 rounded
// after each product and the sum, as LibTorch's operations round them.
using RotaryFn = void (*)(const void* q, int64_t headStride, int64_t heads, int64_t dim, const void* cos,
                          const void* sin, void* out, bool bf16);

// RMSNorm of `rows` rows of n (runner.h rmsNorm): x fp32 with w fp32 or
// fp16, or x and w bf16 (kinds 0, 1, 2). Squares summed in fp32; x times
// the scale rounded to x's dtype, then times w, rounded again.
using RmsNormFn = void (*)(const void* x, const void* w, int64_t rows, int64_t n, float eps, void* out, int kind);

// n elements of fp16 or bf16 widened to fp32 (prefill's blocks, common.cpp).
using WidenFn = void (*)(const void* src, float* dst, int64_t n);
// n fp32 rounded to fp16 (to nearest, ties to even) by F16C's vcvtps2ph.
using NarrowFn = void (*)(const float* src, void* dst, int64_t n);

// One instruction set's kernels. AVX2 + FMA + F16C: weights widened to fp32
// on load. AVX-512 (F/BW/VL): the same, 16 lanes, masked tails, and the
// AVX512-BF16 dot-product kernel (bf16 pairs of W and of x multiplied and
// summed in fp32 by vdpbf16ps). Plain function addresses, constant
// initialised: nothing of an instruction set runs until one is called.
struct Kernels {
    Fn f32, bf16, f16;
    Fn bf16Dp; // AVX-512's only
    AccFn accF32, accBf16, accF16;
    ScoresFn scores;
    SoftmaxFn softmax;
    SiluMulFn siluMul;
    RotaryFn rotary;
    RmsNormFn rmsNorm;
    WidenFn widenF16, widenBf16;
    NarrowFn narrowF16; // AVX2's only (F16C; the AVX-512 table's CPUs have AVX2 too)
};
extern const Kernels kAvx2;
extern const Kernels kAvx512;

} // namespace stowage::arch::rows
