#pragma once
#include <string>
#include <vector>

namespace stowage::cli {

// Each returns the process exit code; input errors are thrown as InputError.
int inspectCommand(const std::vector<std::string>& args);
int planCommand(const std::vector<std::string>& args);
int tokenizeCommand(const std::vector<std::string>& args);
int hardwareCommand(const std::vector<std::string>& args);

} // namespace stowage::cli
