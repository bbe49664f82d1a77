#pragma once
// Internal: the JSON form of HardwareProfile::fixedCosts, shared by the
// profile files (hardwarepresets.cpp) and the per-machine cache
// (fixedcosts.cpp).
#include "stowage/hardware.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace stowage::detail {

// {"prefetch": {"perToken": 0.0011, "perUnit": 0.00009, "perDiskUnit": 0.00002, "perExpert": 0.00002}, ...}
nlohmann::json fixedCostsToJson(const std::map<std::string, FixedCosts>& costs);
// Throws InputError(path, "<where>fixedCosts...: problem") for a malformed
// value: an unknown policy, a negative or non-numeric figure.
std::map<std::string, FixedCosts> fixedCostsFromJson(const nlohmann::json& j, const std::string& path,
                                                     const std::string& where);

} // namespace stowage::detail
