#pragma once
// Dequantizing the two quantized forms a CPU runs (issue 35): fine-grained
// FP8 (DeepSeek-V3, Qwen3 "-FP8": float8_e4m3fn weights times a float32
// `weight_scale_inv` per block) and MXFP4 (gpt-oss: 4-bit e2m1 values in
// `_blocks`, a power-of-two e8m0 exponent per 32 in `_scales`). The values
// are transformers 5.6's own dequantization (docs/planner.md, "Running
// quantized weights"); the weight store calls these per execution unit as
// it fetches, never for the whole model at once.
#include <ATen/ATen.h>

#include <cstdint>

namespace stowage::dequant {

// The value of a float8_e4m3fn byte: sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0 subnormal; 0x7f / 0xff NaN (no infinities).
float e4m3(uint8_t byte);
// The value of an e2m1 nibble (FP4_VALUES of integrations/mxfp4.py).
float e2m1(uint8_t nibble);

// Fp8Dequantize.convert: q [..., rows, cols] (bytes, kByte), scaleInv
// [..., ceil(rows/b0), ceil(cols/b1)] (any float dtype): each weight
// float32(q) * float32(scale of its block), rounded to `out`. Blocks that
// run past the edge are cut short (5.6 refuses such shapes; the arithmetic
// is the same).
at::Tensor fp8(const at::Tensor& q, const at::Tensor& scaleInv, int64_t b0, int64_t b1, at::ScalarType out);

// convert_moe_packed_tensors for one expert: blocks [R, G, 16] (kByte, the
// low nibble the even element), scales [R, G] (kByte, 2^(s - 127)):
// [R, G*32] values, returned transposed as the model holds them ([G*32, R],
// contiguous) in `out`. Every value is a power of two times an e2m1 value,
// exact in bf16 and wider.
at::Tensor mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType out);

// The same arithmetic written with LibTorch operations, for tensors on a
// GPU (the CPU versions above are loops over the bytes). Equal to them
// value for value; tst_quantization checks both.
at::Tensor fp8Ops(const at::Tensor& q, const at::Tensor& scaleInv, int64_t b0, int64_t b1, at::ScalarType out);
at::Tensor mxfp4Ops(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType out);

} // namespace stowage::dequant
