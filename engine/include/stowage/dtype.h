#pragma once
// Element types as safetensors names them, with the torch spelling used in
// config.json and on the command line.
#include <cstdint>
#include <optional>
#include <string>

namespace stowage {

enum class DType : uint8_t {
    BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64,
};

// Size of one element in bytes.
int dtypeSize(DType t);
bool dtypeIsFloating(DType t);
// "F16", "BF16", ... as in a safetensors header.
const char* dtypeCode(DType t);
// "float16", "bfloat16", ... as torch and config.json spell it.
const char* dtypeTorchName(DType t);
std::optional<DType> dtypeFromCode(const std::string& code);
// Accepts torch names with or without "torch." ("float16", "torch.bfloat16", "fp16", "half").
std::optional<DType> dtypeFromTorchName(const std::string& name);

// Bytes a tensor occupies once cast to `target` under Accelerate's rule:
// floating tensors count numel * min(size(target), size(own)); others keep their own size.
uint64_t bytesUnderDType(DType own, uint64_t numel, std::optional<DType> target);

} // namespace stowage
