#pragma once
// Test support for planner tests, header only: budgets written as
// {"0", 10e9} pairs, and a map as one line ("model.embed_tokens:0, ...,
// lm_head:disk"; the root as '') to compare against a hand-derived one; and
// a distilgpt2-shaped tree planned before download.
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/planner.h"

#include <filesystem>
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

// distilgpt2's config.json and index in `dir` (written once, no shard), its
// tree in fp16: the skeleton is all the planner needs.
inline stowage::ModuleTree distilgpt2(const std::string& dir)
{
    std::filesystem::create_directories(dir);
    if (!std::filesystem::exists(dir + "/config.json")) {
        writeSharded(dir, gpt2Tensors({}, stowage::DType::F32), 1, false, false);
        writeJson(dir + "/config.json", gpt2Config({}, stowage::DType::F32));
    }
    return stowage::buildModuleTree(stowage::Checkpoint::open(dir), stowage::DType::F16);
}

} // namespace fixtures
