#pragma once
// Conversions between the engine's plain types and LibTorch's.
#include "stowage/dtype.h"
#include "stowage/error.h"

#include <ATen/ATen.h>

namespace stowage {

inline at::ScalarType toTorch(DType d)
{
    switch (d) {
    case DType::BOOL: return at::kBool;
    case DType::U8: return at::kByte;
    case DType::I8: return at::kChar;
    case DType::I16: return at::kShort;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I32: return at::kInt;
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::I64: return at::kLong;
    default: break;
    }
    throw InputError("", std::string("dtype ") + dtypeTorchName(d) + " cannot be computed with by this LibTorch");
}

} // namespace stowage
