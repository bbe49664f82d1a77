#pragma once
#include <cstdint>
#include <string>

namespace stowage::cli {

// "163.83 MB (156.24 MiB)"-style sizes for people; JSON always has bytes.
std::string humanBytes(uint64_t bytes);
// 81912576 -> "81,912,576"
std::string grouped(uint64_t n);

} // namespace stowage::cli
