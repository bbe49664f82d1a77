#pragma once
#include <functional>
#include <string>
#include <vector>

namespace stowage::cli {

// Each returns the process exit code; input errors are thrown as InputError.
int inspectCommand(const std::vector<std::string>& args);
int planCommand(const std::vector<std::string>& args);
int tokenizeCommand(const std::vector<std::string>& args);
int shopCommand(const std::vector<std::string>& args);
int deployCommand(const std::vector<std::string>& args);
int ggufCommand(const std::vector<std::string>& args);
// `measureFixedCosts` runs the runtime plugin's timing of fixed costs (this
// machine only, not for a preset); a failure there leaves them unmeasured.
int hardwareCommand(const std::vector<std::string>& args, const std::function<int()>& measureFixedCosts = {});

} // namespace stowage::cli
