#pragma once
// Sizes written for people, the one way every front end writes them.
#include <cstdint>
#include <string>

namespace stowage {

// 163825152 -> "156.24 MiB"; under 1 KiB, "512 B". JSON always carries bytes.
std::string humanBytes(uint64_t bytes);
// 81912576 -> "81,912,576"
std::string grouped(uint64_t n);

} // namespace stowage
