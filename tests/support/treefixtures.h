#pragma once
// Test support for the module-tree suites (tst_moduletree,
// tst_moduletree_families), header only: a module's bytes by name, the tree
// built from a config.json alone, and a suite's scratch folders.
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/moduletree.h"

#include <QTemporaryDir>
#include <QtGlobal>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fixtures {

inline uint64_t bytesOf(const stowage::ModuleTree& t, const std::string& name)
{
    int i = t.find(name);
    if (i < 0)
        qFatal("no module %s", name.c_str());
    return t.modules()[size_t(i)].bytes;
}

// The tree for a config.json alone, written in the existing folder `dir`:
// weights holding no tensor of the model (enough of them for the layer count
// to be believable).
inline stowage::ModuleTree skeletonAt(const std::string& dir, const nlohmann::json& config, stowage::DType dt)
{
    writeJson(dir + "/config.json", config);
    std::vector<Tensor> ts;
    for (int i = 0; i < 16; ++i)
        ts.push_back({"unused." + std::to_string(i), stowage::DType::F32, {1}});
    writeSharded(dir, ts, 1, false);
    return stowage::buildModuleTree(stowage::Checkpoint::open(dir), dt);
}

// A suite's folders under one temporary directory, a test class's second
// base (after QObject).
class TreeScratch {
protected:
    QTemporaryDir m_tmp;
    std::string dir(const std::string& name)
    {
        std::string d = m_tmp.path().toStdString() + "/" + name;
        std::filesystem::create_directories(d);
        return d;
    }
    // The tree for a config.json alone (skeletonAt).
    stowage::ModuleTree skeletonOf(const std::string& name, const nlohmann::json& config,
                                   stowage::DType dt = stowage::DType::F32)
    {
        return skeletonAt(dir("skeleton-" + name), config, dt);
    }
};

} // namespace fixtures
