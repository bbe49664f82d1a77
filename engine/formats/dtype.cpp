#include "stowage/dtype.h"

#include <algorithm>
#include <cctype>

namespace stowage {
namespace {
struct DTypeRow {
    DType type;
    const char* code;
    const char* torchName;
    int size;
    bool floating;
};
constexpr DTypeRow kRows[] = {
    {DType::BOOL, "BOOL", "bool", 1, false},
    {DType::U8, "U8", "uint8", 1, false},
    {DType::I8, "I8", "int8", 1, false},
    {DType::F8_E5M2, "F8_E5M2", "float8_e5m2", 1, true},
    {DType::F8_E4M3, "F8_E4M3", "float8_e4m3fn", 1, true},
    {DType::I16, "I16", "int16", 2, false},
    {DType::U16, "U16", "uint16", 2, false},
    {DType::F16, "F16", "float16", 2, true},
    {DType::BF16, "BF16", "bfloat16", 2, true},
    {DType::I32, "I32", "int32", 4, false},
    {DType::U32, "U32", "uint32", 4, false},
    {DType::F32, "F32", "float32", 4, true},
    {DType::F64, "F64", "float64", 8, true},
    {DType::I64, "I64", "int64", 8, false},
    {DType::U64, "U64", "uint64", 8, false},
};
const DTypeRow& row(DType t) { return kRows[static_cast<int>(t)]; }
} // namespace

int dtypeSize(DType t) { return row(t).size; }
bool dtypeIsFloating(DType t) { return row(t).floating; }
const char* dtypeCode(DType t) { return row(t).code; }
const char* dtypeTorchName(DType t) { return row(t).torchName; }

std::optional<DType> dtypeFromCode(const std::string& code)
{
    for (const auto& r : kRows)
        if (code == r.code)
            return r.type;
    return std::nullopt;
}

std::optional<DType> dtypeFromTorchName(const std::string& raw)
{
    std::string name = raw;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name.rfind("torch.", 0) == 0)
        name = name.substr(6);
    if (name == "fp16" || name == "half")
        return DType::F16;
    if (name == "bf16")
        return DType::BF16;
    if (name == "fp32" || name == "float")
        return DType::F32;
    if (name == "double")
        return DType::F64;
    if (name == "long")
        return DType::I64;
    if (name == "int")
        return DType::I32;
    for (const auto& r : kRows)
        if (name == r.torchName)
            return r.type;
    return std::nullopt;
}

uint64_t bytesUnderDType(DType own, uint64_t numel, std::optional<DType> target)
{
    int size = dtypeSize(own);
    if (target && dtypeIsFloating(own))
        size = std::min(size, dtypeSize(*target));
    return numel * static_cast<uint64_t>(size);
}

} // namespace stowage
