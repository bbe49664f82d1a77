// The main loop of Accelerate's infer_auto_device_map (1.3+): one device at a
// time, never going back; modules that do not fit are split into their
// direct parameters and children; the first GPU and the CPU keep room for
// the largest layer still to be placed.
#include "plannerstate.h"
#include "stowage/units.h"

#include "stowage/error.h"

#include <algorithm>

namespace stowage::detail {

Sizes::Sizes(const ModuleTree& tree, const PlanOptions& options) : m_tree(tree)
{
    const auto& mods = tree.modules();
    m_noSplit = options.noSplit ? *options.noSplit : tree.noSplitClasses();
    m_module.resize(mods.size());
    m_kv.assign(mods.size(), 0);
    m_direct.assign(mods.size(), 0);
    m_listed.assign(mods.size(), false);
    m_holds.assign(mods.size(), false);
    m_byParam.assign(mods.size(), false);
    for (size_t i = 0; i < mods.size(); ++i)
        m_module[i] = mods[i].bytes;
    m_param.reserve(tree.params().size());
    for (const auto& p : tree.params())
        m_param.push_back(tree.paramBytes(p));
    for (const auto& b : tree.buffers())
        m_buffer.push_back(tree.bufferBytes(b));
    // A module is a key of compute_module_sizes when a non-tied tensor lies below it.
    for (size_t i = mods.size(); i-- > 0;) {
        bool byParam = false, any = false;
        for (int b : mods[i].buffers)
            any = any || tree.exists(tree.buffers()[size_t(b)]);
        for (int p : mods[i].params)
            if (!tree.params()[size_t(p)].duplicate && tree.exists(tree.params()[size_t(p)])) {
                byParam = true;
                m_direct[i] += m_param[size_t(p)];
            }
        for (int b : mods[i].buffers)
            m_direct[i] += m_buffer[size_t(b)];
        m_holds[i] = byParam || any;
        for (int c : mods[i].children) {
            byParam = byParam || m_byParam[size_t(c)];
            any = any || m_listed[size_t(c)];
        }
        m_byParam[i] = byParam;
        m_listed[i] = any || byParam;
    }
    if (options.kv && options.kv->bytesPerLayer > 0)
        for (const auto& [layer, bytes] : layerKv(tree, *options.kv))
            for (int a = layer; a >= 0; a = mods[size_t(a)].parent) {
                m_module[size_t(a)] += bytes;
                m_kv[size_t(a)] += bytes;
            }
}

std::vector<std::pair<int, uint64_t>> layerKv(const ModuleTree& tree, const KvReserve& kv)
{
    std::vector<std::pair<int, uint64_t>> out;
    const auto& mods = tree.modules();
    for (size_t i = 0; i < mods.size(); ++i)
        if (mods[i].className == kv.layerClass)
            out.emplace_back(int(i), out.size() < kv.layerBytes.size() ? kv.layerBytes[out.size()] : kv.bytesPerLayer);
    return out;
}

bool Sizes::isNoSplit(int module) const
{
    const std::string& c = m_tree.modules()[size_t(module)].className;
    return std::find(m_noSplit.begin(), m_noSplit.end(), c) != m_noSplit.end();
}

Placer::Placer(const ModuleTree& tree, const Sizes& sizes, Budgets budgets)
    : m_tree(tree), m_sizes(sizes), m_budgets(std::move(budgets))
{
    if (m_budgets.empty() || m_budgets.back().device.kind != Device::Disk)
        m_budgets.push_back({Device::disk(), -1});
    m_paramModule.assign(tree.params().size(), 0);
    m_bufferModule.assign(tree.buffers().size(), 0);
    for (size_t m = 0; m < tree.modules().size(); ++m) {
        for (int p : tree.modules()[m].params)
            m_paramModule[size_t(p)] = int(m);
        for (int b : tree.modules()[m].buffers)
            m_bufferModule[size_t(b)] = int(m);
    }
    m_used.assign(m_budgets.size(), 0);
    m_reserved.assign(m_budgets.size(), 0);
    m_kvUsed.assign(m_budgets.size(), 0);
}

std::string Placer::nameOf(const Item& it) const
{
    if (!it.param)
        return m_tree.modules()[size_t(it.index)].name;
    return it.buffer ? m_tree.buffers()[size_t(it.index)].name : m_tree.params()[size_t(it.index)].name;
}

const std::string& Placer::classOf(const Item& it) const
{
    static const std::string param = "Parameter", buffer = "Tensor";
    return !it.param ? m_tree.modules()[size_t(it.index)].className : it.buffer ? buffer : param;
}

bool Placer::hasChildren(const Item& it) const
{
    return !it.param && !m_tree.modules()[size_t(it.index)].children.empty();
}

std::vector<Item> Placer::piecesOf(int module) const
{
    std::vector<Item> out;
    const Module& m = m_tree.modules()[size_t(module)];
    for (int p : m.params)
        out.push_back({true, p});
    for (int c : m.children)
        out.push_back({false, c});
    // Only the root's own buffers are queued (named_buffers(recurse=False) in
    // _init_infer_auto_device_map); a split module yields parameters and children.
    if (module == 0)
        for (int b : m.buffers)
            out.push_back({true, b, true});
    return out;
}

bool Placer::isDescendantOrSelf(const Item& x, const Item& of) const
{
    if (of.param)
        return x == of;
    const Module& m = m_tree.modules()[size_t(of.index)];
    int xm = !x.param ? x.index : x.buffer ? m_bufferModule[size_t(x.index)] : m_paramModule[size_t(x.index)];
    return xm >= of.index && xm < m.end;
}

// get_max_layer_size over the queue: depth-first, a "layer" is a module with
// no children, a no-split module or a bare parameter; ties are all kept.
void Placer::maxLayer(bool modulesOnly)
{
    m_maxLayer = 0;
    m_maxLayerItems.clear();
    std::vector<Item> todo; // used as a stack, so push in reverse
    for (auto it = m_queue.rbegin(); it != m_queue.rend(); ++it)
        if (!modulesOnly || !it->param)
            todo.push_back(*it);
    while (!todo.empty()) {
        Item it = todo.back();
        todo.pop_back();
        if (!hasChildren(it) || (!it.param && m_sizes.isNoSplit(it.index))) {
            uint64_t s = m_sizes.of(it);
            if (s > m_maxLayer) {
                m_maxLayer = s;
                m_maxLayerItems = {it};
            } else if (s == m_maxLayer) {
                m_maxLayerItems.push_back(it);
            }
            continue;
        }
        const auto& kids = m_tree.modules()[size_t(it.index)].children;
        for (auto c = kids.rbegin(); c != kids.rend(); ++c)
            todo.push_back({false, *c});
    }
}

void Placer::assign(const std::string& name, Device d, const std::string& why)
{
    auto it = m_mapIndex.find(name);
    if (it == m_mapIndex.end()) {
        m_mapIndex[name] = m_map.size();
        m_map.emplace_back(name, d);
    } else {
        m_map[it->second].second = d; // an existing key keeps its place
    }
    m_why[name] = why;
}

void Placer::run()
{
    const auto& tied = m_tree.tiedGroups();
    for (const Item& it : piecesOf(0))
        m_queue.push_back(it);
    maxLayer(false);
    size_t cur = 0;
    std::string skipNote; // why the planner left the previous device, for the next placement
    while (!m_queue.empty()) {
        Item item = m_queue.front();
        m_queue.pop_front();
        const std::string name = nameOf(item);
        m_maxLayerItems.erase(std::remove_if(m_maxLayerItems.begin(), m_maxLayerItems.end(),
                                             [&](const Item& x) { return isDescendantOrSelf(x, item); }),
                              m_maxLayerItems.end());
        if (m_maxLayerItems.empty())
            maxLayer(true);
        const uint64_t size = m_sizes.of(item);

        // Tied groups straddling this item (Accelerate tests by substring).
        auto inside = [&](const std::string& k) { return (k + ".").find(name + ".") != std::string::npos; };
        std::vector<std::string> tiedParams;
        for (const auto& g : tied) {
            bool any = std::any_of(g.begin(), g.end(), inside), all = std::all_of(g.begin(), g.end(), inside);
            if (any && !all)
                for (const auto& p : g)
                    if (!inside(p))
                        tiedParams.push_back(p);
        }
        // get_module_size_with_ties: the queued modules holding those params.
        int64_t withTies = int64_t(size);
        std::vector<std::pair<std::string, Item>> tiedMods;
        for (const auto& p : tiedParams) {
            for (const Item& q : m_queue) {
                std::string qn = nameOf(q);
                if (p.rfind(qn + ".", 0) == 0) {
                    int pi = m_tree.findParam(p);
                    withTies += int64_t(m_sizes.of(q)) - int64_t(pi >= 0 ? m_sizes.of({true, pi}) : 0);
                    tiedMods.emplace_back(qn, q);
                    break;
                }
            }
        }

        const DeviceBudget& dev = m_budgets[cur];
        const bool unlimited = dev.device.kind == Device::Disk;
        const bool main = dev.device.kind == Device::Cpu ||
                          (dev.device.kind == Device::Gpu && cur == 0); // GPUs sort first: index 0 is the first GPU
        double cap = dev.bytes;
        uint64_t reserved = 0;
        if (!unlimited && main) {
            cap -= double(m_maxLayer);
            reserved = m_maxLayer;
        }
        const double used = double(m_used[cur]);

        // (A) fits together with its tied modules
        if (unlimited || used + double(withTies) <= cap) {
            m_used[cur] += uint64_t(std::max<int64_t>(withTies, 0));
            m_kvUsed[cur] += item.param ? 0 : m_sizes.kvOf(item.index);
            m_reserved[cur] = std::max(m_reserved[cur], reserved);
            std::string why = unlimited ? "everything left goes to disk (no limit)"
                                        : "fits: " + grouped(m_used[cur]) + " of " + grouped(uint64_t(std::max(cap, 0.0))) +
                                              " bytes usable on " + dev.device.name() +
                                              (reserved ? " after keeping " + grouped(reserved) +
                                                              " for the largest layer still to place (" +
                                                              (m_maxLayerItems.empty() ? std::string("none")
                                                                                       : nameOf(m_maxLayerItems[0])) +
                                                              ")"
                                                        : std::string());
            if (!skipNote.empty())
                why += "; " + skipNote;
            skipNote.clear();
            if (!item.param && m_sizes.isNoSplit(item.index))
                why += "; " + classOf(item) + " is no-split";
            assign(name, dev.device, why);
            m_bytes[name] = size;
            for (const auto& [tn, tq] : tiedMods) {
                auto q = std::find(m_queue.begin(), m_queue.end(), tq);
                if (q != m_queue.end())
                    m_queue.erase(q);
                assign(tn, dev.device, "tied to " + name + " (shares its weight), so placed with it");
                m_bytes[tn] = m_sizes.of(tq);
            }
            continue;
        }
        // (B) alone it fits but not with its ties: split one tied module
        if (!tiedParams.empty() && used + double(size) <= cap) {
            bool split = false;
            for (const auto& [tn, tq] : tiedMods) {
                if (!hasChildren(tq) || (!tq.param && m_sizes.isNoSplit(tq.index)))
                    continue;
                auto pos = std::find(m_queue.begin(), m_queue.end(), tq);
                auto pieces = piecesOf(tq.index);
                pos = m_queue.erase(pos);
                m_queue.insert(pos, pieces.begin(), pieces.end());
                m_queue.push_front(item);
                maxLayer(true);
                split = true;
                break;
            }
            if (split)
                continue;
        }
        // (C) does not fit: split it if it can be split
        if (used + double(size) >= cap && hasChildren(item) && !m_sizes.isNoSplit(item.index)) {
            auto pieces = piecesOf(item.index);
            m_queue.insert(m_queue.begin(), pieces.begin(), pieces.end());
            maxLayer(true);
            continue;
        }
        // (E) move on to the next device and retry this item there
        skipNote = dev.device.name() + " was full at " + (name.empty() ? "(model)" : name) + ": it needs " +
                   grouped(uint64_t(withTies)) + " but " + grouped(uint64_t(std::max(0.0, cap - used))) + " of " +
                   grouped(uint64_t(dev.bytes)) + " were left" +
                   (reserved ? " after keeping " + grouped(reserved) + " for the largest remaining layer" : "");
        if (m_used[cur] == 0)
            m_notes.push_back("nothing fits on " + dev.device.name() + ": " + grouped(uint64_t(withTies) + reserved) +
                              " bytes required for " + (name.empty() ? "(model)" : name));
        m_reserved[cur] = std::max(m_reserved[cur], reserved);
        ++cur;
        m_queue.push_front(item);
    }
}

void Placer::explain(Plan& plan) const
{
    for (const auto& [key, d] : plan.deviceMap) {
        PlanEntry e{key, d, 0, {}};
        auto w = m_why.find(key);
        if (w != m_why.end()) {
            e.why = w->second;
            e.bytes = m_bytes.at(key);
        } else {
            // A merged entry: all its placed parts landed on one device.
            size_t parts = 0;
            std::string first;
            const std::string prefix = key.empty() ? "" : key + ".";
            for (const auto& [k, dev] : m_map)
                if (prefix.empty() || k.rfind(prefix, 0) == 0) {
                    ++parts;
                    e.bytes += m_bytes.at(k);
                    if (first.empty())
                        first = m_why.at(k);
                }
            e.why = "its " + std::to_string(parts) + " placed parts all landed on " + d.name() + " (first: " + first + ")";
        }
        plan.entries.push_back(std::move(e));
    }
    for (size_t i = 0; i < m_budgets.size(); ++i) {
        if (m_budgets[i].device.kind == Device::Disk && m_used[i] == 0)
            continue;
        plan.devices.push_back({m_budgets[i].device, m_budgets[i].bytes, m_used[i] - m_kvUsed[i],
                                m_reserved[i] + m_kvUsed[i], m_reserved[i], m_kvUsed[i]});
    }
    plan.notes.insert(plan.notes.end(), m_notes.begin(), m_notes.end());
}

} // namespace stowage::detail
