#pragma once
// Small file helpers shared by the engine and the front ends.
#include <string>

namespace stowage {

// The whole file; throws InputError naming `path` when it cannot be read.
std::string readTextFile(const std::string& path);
// Writes PATH.partial and renames it over PATH, so a failed write (a full
// disk) never leaves a file that looks complete. Throws InputError naming PATH.
void writeFileAtomically(const std::string& path, const std::string& bytes);

} // namespace stowage
