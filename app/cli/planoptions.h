#pragma once
// Options shared by `plan` and `run`: budgets, strategy, reference, no-split, KV cache.
#include "args.h"

#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/planner.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

namespace stowage::cli {

std::set<std::string> planValuedOptions();
std::set<std::string> planFlagOptions();
// --reference transformers|accelerate (default transformers); `inspect` takes it too.
Reference parseReferenceOption(const Args& args);
// What get_max_memory reports on this machine: each GPU's free memory and the available RAM.
Budgets machineBudgets();
// Without --max-memory, the budgets are what this machine has free (as Accelerate's get_max_memory).
// What a quantized checkpoint's quantizer sees (quantization.h): GPU 0 of
// --hardware, else this machine.
QuantTarget quantTargetFromArgs(const Args& a);
PlanOptions planOptionsFromArgs(const Args& args, const Checkpoint& ck, const ModuleTree& tree);
// A user's device-map JSON, validated against the tree (the first error is thrown as InputError).
DeviceMap loadDeviceMap(const std::string& path, const ModuleTree& tree, std::vector<std::string>* warnings);

// A decode prediction as `plan --report` and `run --json` write it.
nlohmann::ordered_json costJson(const CostEstimate& c, const HardwareProfile& hw, ExecutionPolicy policy);

std::string readFile(const std::string& path);
// Written to PATH.partial then renamed, so a failed write leaves no half file.
void writeFile(const std::string& path, const std::string& text);
// A command's output: to -o FILE when given (writeFile), else to stdout.
void writeOutput(const Args& args, const std::string& text);

} // namespace stowage::cli
