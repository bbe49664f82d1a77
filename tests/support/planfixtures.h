#pragma once
// Test support for planner tests, header only: budgets written as
// {"0", 10e9} pairs, and a map as one line ("model.embed_tokens:0, ...,
// lm_head:disk"; the root as '') to compare against a hand-derived one.
#include "stowage/planner.h"

#include <string>
#include <utility>
#include <vector>

namespace fixtures {

inline stowage::Budgets budgets(std::vector<std::pair<std::string, double>> spec)
{
    stowage::Budgets b;
    for (auto& [d, v] : spec)
        b.push_back({*stowage::Device::parse(d), v});
    return b;
}

inline std::string mapText(const stowage::DeviceMap& m)
{
    std::string s;
    for (const auto& [k, d] : m)
        s += (s.empty() ? "" : ", ") + (k.empty() ? std::string("''") : k) + ":" + d.name();
    return s;
}

} // namespace fixtures
