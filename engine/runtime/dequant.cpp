#include "dequant.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace stowage::dequant {

namespace {

std::array<float, 256> e4m3Table()
{
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) {
        const int sign = b >> 7, exponent = (b >> 3) & 15, mantissa = b & 7;
        float v;
        if (exponent == 15 && mantissa == 7)
            v = std::numeric_limits<float>::quiet_NaN();
        else if (exponent == 0)
            v = std::ldexp(float(mantissa) / 8.0f, -6);
        else
            v = std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
        t[size_t(b)] = sign ? -v : v;
    }
    return t;
}

const std::array<float, 256>& table()
{
    static const std::array<float, 256> t = e4m3Table();
    return t;
}

constexpr std::array<float, 16> kE2m1 = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void need(bool ok, const std::string& what)
{
    if (!ok)
        throw std::invalid_argument("dequantize: " + what);
}

template <typename T>
void fp8Loop(const uint8_t* q, const float* s, T* y, int64_t mats, int64_t rows, int64_t cols, int64_t b0, int64_t b1)
{
    const int64_t sr = (rows + b0 - 1) / b0, sc = (cols + b1 - 1) / b1;
    const auto& lut = table();
    at::parallel_for(0, mats * rows, 64, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const int64_t m = r / rows, row = r % rows;
            const float* scales = s + (m * sr + row / b0) * sc;
            const uint8_t* in = q + r * cols;
            T* out = y + r * cols;
            for (int64_t c = 0; c < cols; ++c)
                out[c] = T(lut[in[c]] * scales[c / b1]);
        }
    });
}

// out[c][r] = e2m1(nibble) * 2^(scale - 127) for the R x (G*32) values of
// one expert, stored transposed.
template <typename T>
void mxfp4Loop(const uint8_t* blocks, const uint8_t* scales, T* y, int64_t R, int64_t G)
{
    const int64_t C = G * 32;
    at::parallel_for(0, C, 32, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
            const int64_t g = c / 32, k = c % 32, byte = k / 2;
            const bool high = k % 2;
            T* out = y + c * R;
            for (int64_t r = 0; r < R; ++r) {
                const uint8_t b = blocks[(r * G + g) * 16 + byte];
                const float v = kE2m1[size_t(high ? b >> 4 : b & 15)];
                out[r] = T(std::ldexp(v, int(scales[r * G + g]) - 127));
            }
        }
    });
}

template <typename F>
void byDType(at::ScalarType out, F&& f)
{
    switch (out) {
    case at::kFloat: f(float()); break;
    case at::kBFloat16: f(c10::BFloat16()); break;
    case at::kHalf: f(c10::Half()); break;
    default: throw std::invalid_argument(std::string("dequantize: no ") + c10::toString(out) + " output");
    }
}

void checkFp8(const at::Tensor& q, const at::Tensor& scaleInv, int64_t b0, int64_t b1)
{
    need(q.scalar_type() == at::kByte && q.dim() >= 2, "FP8 weights must be bytes, two dimensions or more");
    need(b0 > 0 && b1 > 0, "FP8 block sizes must be positive");
    const int64_t rows = q.size(-2), cols = q.size(-1);
    const int64_t mats = q.numel() / std::max<int64_t>(1, rows * cols);
    need(scaleInv.numel() == mats * ((rows + b0 - 1) / b0) * ((cols + b1 - 1) / b1),
         "weight_scale_inv has " + std::to_string(scaleInv.numel()) + " scales, not one per " + std::to_string(b0) +
             "x" + std::to_string(b1) + " block of a " + std::to_string(rows) + "x" + std::to_string(cols) +
             " weight");
}

void checkMxfp4(const at::Tensor& blocks, const at::Tensor& scales)
{
    need(blocks.scalar_type() == at::kByte && blocks.dim() == 3 && blocks.size(2) == 16,
         "MXFP4 blocks must be bytes [rows, groups, 16]");
    need(scales.scalar_type() == at::kByte && scales.dim() == 2 && scales.size(0) == blocks.size(0) &&
             scales.size(1) == blocks.size(1),
         "MXFP4 scales must be bytes [rows, groups] beside their blocks");
}

} // namespace

float e4m3(uint8_t byte) { return table()[byte]; }
float e2m1(uint8_t nibble) { return kE2m1[nibble & 15u]; }

at::Tensor fp8(const at::Tensor& q, const at::Tensor& scaleInv, int64_t b0, int64_t b1, at::ScalarType out)
{
    checkFp8(q, scaleInv, b0, b1);
    if (!q.device().is_cpu())
        return fp8Ops(q, scaleInv, b0, b1, out);
    const at::Tensor qc = q.contiguous();
    const at::Tensor sc = scaleInv.to(at::kFloat).contiguous();
    at::Tensor y = at::empty(q.sizes(), at::TensorOptions().dtype(out));
    const int64_t rows = q.size(-2), cols = q.size(-1);
    byDType(out, [&](auto zero) {
        using T = decltype(zero);
        fp8Loop(qc.data_ptr<uint8_t>(), sc.data_ptr<float>(), static_cast<T*>(y.data_ptr()), q.numel() / (rows * cols),
                rows, cols, b0, b1);
    });
    return y;
}

at::Tensor mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType out)
{
    checkMxfp4(blocks, scales);
    if (!blocks.device().is_cpu())
        return mxfp4Ops(blocks, scales, out);
    const at::Tensor bc = blocks.contiguous(), sc = scales.contiguous();
    const int64_t R = blocks.size(0), G = blocks.size(1);
    at::Tensor y = at::empty({G * 32, R}, at::TensorOptions().dtype(out));
    byDType(out, [&](auto zero) {
        using T = decltype(zero);
        mxfp4Loop(bc.data_ptr<uint8_t>(), sc.data_ptr<uint8_t>(), static_cast<T*>(y.data_ptr()), R, G);
    });
    return y;
}

at::Tensor fp8Ops(const at::Tensor& q, const at::Tensor& scaleInv, int64_t b0, int64_t b1, at::ScalarType out)
{
    checkFp8(q, scaleInv, b0, b1);
    const auto& t = table();
    const at::Tensor lut = at::from_blob(const_cast<float*>(t.data()), {256}, at::kFloat).to(q.device());
    const int64_t rows = q.size(-2), cols = q.size(-1);
    const int64_t sr = (rows + b0 - 1) / b0, sc = (cols + b1 - 1) / b1;
    at::Tensor values = lut.index_select(0, q.reshape(-1).to(at::kLong)).view({-1, rows, cols});
    at::Tensor s = scaleInv.to(q.device(), at::kFloat).reshape({-1, sr, sc});
    s = s.repeat_interleave(b0, 1).repeat_interleave(b1, 2).slice(1, 0, rows).slice(2, 0, cols);
    return (values * s).to(out).view(q.sizes());
}

at::Tensor mxfp4Ops(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType out)
{
    checkMxfp4(blocks, scales);
    const at::Tensor lut = at::from_blob(const_cast<float*>(kE2m1.data()), {16}, at::kFloat).to(blocks.device());
    const int64_t R = blocks.size(0), G = blocks.size(1);
    const at::Tensor b = blocks.to(at::kLong);
    const at::Tensor lo = lut.index_select(0, b.bitwise_and(15).reshape(-1)).view({R, G, 16});
    const at::Tensor hi = lut.index_select(0, b.__rshift__(4).reshape(-1)).view({R, G, 16});
    const at::Tensor values = at::stack({lo, hi}, -1).view({R, G, 32});
    const at::Tensor power = at::pow(2.0, scales.to(at::kFloat) - 127.0).unsqueeze(-1);
    return (values * power).view({R, G * 32}).t().contiguous().to(out);
}

} // namespace stowage::dequant
