#pragma once
// Internals of the planner: sizes as compute_module_sizes reports them, and
// the placement loop of infer_auto_device_map.
#include "stowage/planner.h"
#include "stowage/units.h"

#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace stowage::detail {

// A queue item: a module, or a bare tensor after its module was split (a
// parameter, or one of the root's own buffers). `param` is true for both
// tensor kinds; `buffer` tells which list `index` points into.
struct Item {
    bool param = false;
    int index = 0;
    bool buffer = false;
    bool operator==(const Item& o) const { return param == o.param && index == o.index && buffer == o.buffer; }
};

// compute_module_sizes: bytes per module/parameter/buffer under the tree's
// reference, tied duplicates 0, plus the optional KV-cache reserve added to
// each layer and its ancestors.
class Sizes {
public:
    Sizes(const ModuleTree& tree, const PlanOptions& options);
    uint64_t of(const Item& it) const
    {
        return !it.param ? m_module[size_t(it.index)] : it.buffer ? m_buffer[size_t(it.index)] : m_param[size_t(it.index)];
    }
    uint64_t module(int i) const { return m_module[size_t(i)]; }
    // Bytes of the tensors a module holds itself (not its children's).
    uint64_t direct(int i) const { return m_direct[size_t(i)]; }
    // Whether it holds a non-tied tensor itself: transformers' leaves.
    bool holdsTensor(int i) const { return m_holds[size_t(i)]; }
    // Whether a non-tied parameter lies below it (else only buffers, if listed):
    // compute_module_sizes lists parameters' modules before buffers'.
    bool listedByParam(int i) const { return m_byParam[size_t(i)]; }
    uint64_t kvOf(int module) const { return m_kv[size_t(module)]; }
    // Whether compute_module_sizes has a key for it (some non-tied tensor below).
    bool listed(int module) const { return m_listed[size_t(module)]; }
    const std::vector<std::string>& noSplit() const { return m_noSplit; }
    bool isNoSplit(int module) const;

private:
    const ModuleTree& m_tree;
    std::vector<uint64_t> m_module, m_param, m_buffer, m_kv, m_direct;
    std::vector<bool> m_listed, m_holds, m_byParam;
    std::vector<std::string> m_noSplit;
};

// Each module of kv.layerClass in tree order, with its KV-cache bytes
// (KvReserve::layerBytes, bytesPerLayer past its end): what Sizes adds to a
// layer, and what the planner keeps where the layer's cache lives.
std::vector<std::pair<int, uint64_t>> layerKv(const ModuleTree& tree, const KvReserve& kv);

class Placer {
public:
    Placer(const ModuleTree& tree, const Sizes& sizes, Budgets budgets);
    void run();
    const DeviceMap& rawMap() const { return m_map; }
    // Fills plan.entries / plan.devices / notes for the cleaned map.
    void explain(Plan& plan) const;

private:
    std::string nameOf(const Item& it) const;
    const std::string& classOf(const Item& it) const;
    // direct params, then children (and the root's own buffers last)
    std::vector<Item> piecesOf(int module) const;
    bool hasChildren(const Item& it) const;
    void maxLayer(bool modulesOnly);
    bool isDescendantOrSelf(const Item& x, const Item& of) const;
    void assign(const std::string& name, Device d, const std::string& why);

    const ModuleTree& m_tree;
    const Sizes& m_sizes;
    Budgets m_budgets;             // disk appended
    std::vector<int> m_paramModule;  // param -> owning module
    std::vector<int> m_bufferModule; // buffer -> owning module
    std::deque<Item> m_queue;
    uint64_t m_maxLayer = 0;
    std::vector<Item> m_maxLayerItems;
    std::vector<uint64_t> m_used;     // per budget index
    std::vector<uint64_t> m_reserved; // per budget index: room kept when it was left
    std::vector<uint64_t> m_kvUsed;
    DeviceMap m_map;
    std::unordered_map<std::string, size_t> m_mapIndex;
    std::unordered_map<std::string, std::string> m_why;
    std::unordered_map<std::string, uint64_t> m_bytes;
    std::vector<std::string> m_notes;
};

} // namespace stowage::detail
