#pragma once
// Test support for the cost-model suites (tst_costmodel, tst_fixedcosts),
// header only: a placement, exact comparison of computed seconds, the text of
// an input error, and a profile with one field replaced.
#include "inputerror.h"
#include "stowage/device.h"
#include "stowage/error.h"

#include <QString>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fixtures {

using Placement = std::vector<std::pair<stowage::Device, uint64_t>>;

// Relative comparison: the figures are ~1e-3 s, too small for qFuzzyCompare's
// absolute fallback to mean anything, and the formulas are exact.
inline bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

// A valid profile with one field replaced, for the error tests.
inline std::string profileWith(const std::string& field, const std::string& value)
{
    std::string json = R"({"name": "box", "ramBytes": 1000, "ramBandwidth": 5e10, "diskReadBandwidth": 3e9,
                           "cpuFlops": 1e12, "gpus": [{"name": "g", "memoryBytes": 24000000000,
                           "memoryBandwidth": 1e12, "h2dPinned": 2.4e10, "h2dPageable": 1.2e10, "flops": 1e14}]})";
    const std::string key = "\"" + field + "\": ";
    const size_t at = json.find(key);
    if (at == std::string::npos)
        return json;
    const size_t begin = at + key.size();
    // "gpus" is last and holds commas: replace up to the closing brace.
    const size_t end = field == "gpus" ? json.size() - 1 : json.find_first_of(",}", begin);
    return json.substr(0, begin) + value + json.substr(end);
}

inline constexpr uint64_t kGB = 1'000'000'000ULL;

} // namespace fixtures
