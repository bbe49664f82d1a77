#include "stowage/moduletree.h"
#include "stowage/quantization.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

namespace stowage {

namespace {

uint64_t product(const std::vector<int64_t>& shape)
{
    uint64_t n = 1;
    for (int64_t d : shape)
        n *= static_cast<uint64_t>(d);
    return n;
}

} // namespace

const char* referenceName(Reference r)
{
    return r == Reference::Accelerate ? "accelerate" : "transformers";
}

std::optional<Reference> referenceFromName(const std::string& name)
{
    if (name == "transformers")
        return Reference::Transformers;
    if (name == "accelerate")
        return Reference::Accelerate;
    return std::nullopt;
}

uint64_t Param::numel() const { return product(shape); }

bool Param::found() const
{
    if (parts.empty())
        return tensor >= 0;
    for (const StoredPart& part : parts)
        if (part.tensor < 0)
            return false;
    return true;
}

uint64_t Buffer::numel() const { return product(shape); }

ModuleTree::ModuleTree()
{
    Module root;
    root.className = "Module";
    m_modules.push_back(root);
    m_moduleIndex[""] = 0;
}

int ModuleTree::find(const std::string& moduleName) const
{
    auto it = m_moduleIndex.find(moduleName);
    return it == m_moduleIndex.end() ? -1 : it->second;
}

int ModuleTree::findParam(const std::string& paramName) const
{
    auto it = m_paramIndex.find(paramName);
    return it == m_paramIndex.end() ? -1 : it->second;
}

int ModuleTree::addModule(int parent, const std::string& localName, const std::string& className)
{
    if (parent < 0) { // naming the root
        m_modules[0].className = className;
        return 0;
    }
    Module m;
    const std::string& pn = m_modules[static_cast<size_t>(parent)].name;
    m.name = pn.empty() ? localName : pn + "." + localName;
    m.className = className;
    m.parent = parent;
    m.depth = m_modules[static_cast<size_t>(parent)].depth + 1;
    int idx = static_cast<int>(m_modules.size());
    m_modules[static_cast<size_t>(parent)].children.push_back(idx);
    m_moduleIndex[m.name] = idx;
    m_modules.push_back(std::move(m));
    return idx;
}

void ModuleTree::markExperts(const std::string& param)
{
    const int i = findParam(param);
    if (i < 0)
        throw std::logic_error("markExperts: no parameter '" + param + "'");
    Param& p = m_params[static_cast<size_t>(i)];
    p.experts = p.shape.empty() ? 0 : p.shape[0];
}

int ModuleTree::addParam(int module, const std::string& localName, std::vector<int64_t> shape, DType dtype)
{
    Param p;
    const std::string& mn = m_modules[static_cast<size_t>(module)].name;
    p.name = mn.empty() ? localName : mn + "." + localName;
    p.shape = std::move(shape);
    p.stored = dtype;
    int idx = static_cast<int>(m_params.size());
    m_modules[static_cast<size_t>(module)].params.push_back(idx);
    m_paramIndex[p.name] = idx;
    m_params.push_back(std::move(p));
    return idx;
}

int ModuleTree::addBuffer(int module, const std::string& localName, std::vector<int64_t> shape, DType dtype,
                          bool persistent)
{
    Buffer b;
    const std::string& mn = m_modules[static_cast<size_t>(module)].name;
    b.name = mn.empty() ? localName : mn + "." + localName;
    b.shape = std::move(shape);
    b.dtype = dtype;
    b.persistent = persistent;
    int idx = static_cast<int>(m_buffers.size());
    m_modules[static_cast<size_t>(module)].buffers.push_back(idx);
    m_buffers.push_back(std::move(b));
    return idx;
}

void ModuleTree::tie(const std::string& duplicate, const std::string& original)
{
    int d = findParam(duplicate);
    if (d < 0 || findParam(original) < 0)
        return;
    m_params[static_cast<size_t>(d)].duplicate = true;
    m_params[static_cast<size_t>(d)].tiedTo = original;
    std::vector<std::string> group{duplicate, original};
    std::sort(group.begin(), group.end());
    m_tied.push_back(group);
}

uint64_t ModuleTree::paramBytes(const Param& p) const
{
    if (p.duplicate)
        return 0;
    if (quantApplied()) {
        if (p.quantDropped)
            return 0;
        if (p.quantBytes > 0)
            return p.quantBytes;
    } else if (p.quantOnly)
        return 0;
    if (m_reference == Reference::Accelerate) {
        // Accelerate is handed a model built from config.json on the meta
        // device (init_empty_weights + from_config), whose floating parameters
        // are torch's default float32 whatever the checkpoint stores; with
        // dtype each counts numel x min(dtype, 4). A bf16 checkpoint planned
        // in float32 is sized at 4 bytes, as Accelerate 1.13 sizes it.
        const DType own = dtypeIsFloating(p.stored) ? DType::F32 : p.stored;
        return bytesUnderDType(own, p.numel(), m_dtype);
    }
    // transformers builds the meta model under the target dtype, so every
    // floating parameter has the target's element size; no cap.
    DType own = (m_dtype && dtypeIsFloating(p.stored)) ? *m_dtype : p.stored;
    return p.numel() * static_cast<uint64_t>(dtypeSize(own));
}

uint64_t ModuleTree::bufferBytes(const Buffer& b) const
{
    if (b.quantOnly && !quantApplied())
        return 0;
    if (m_reference == Reference::Accelerate)
        return bytesUnderDType(b.dtype, b.numel(), m_dtype);
    // element_size() of the buffer as created: an explicit float32 stays float32
    return b.numel() * static_cast<uint64_t>(dtypeSize(b.dtype));
}

void ModuleTree::finish(std::optional<DType> dtype, Reference reference)
{
    // Re-linearise in pre-order so that modules()[i..end) is i's subtree and
    // params() is named_parameters() order, whatever order building used.
    std::vector<int> order;
    order.reserve(m_modules.size());
    std::function<void(int)> visit = [&](int i) {
        order.push_back(i);
        for (int c : m_modules[static_cast<size_t>(i)].children)
            visit(c);
    };
    visit(0);
    std::vector<int> newIndex(m_modules.size(), -1);
    for (size_t k = 0; k < order.size(); ++k)
        newIndex[static_cast<size_t>(order[k])] = static_cast<int>(k);
    std::vector<Module> modules;
    std::vector<Param> params;
    std::vector<Buffer> buffers;
    modules.reserve(order.size());
    for (int old : order) {
        Module m = m_modules[static_cast<size_t>(old)];
        if (m.parent >= 0)
            m.parent = newIndex[static_cast<size_t>(m.parent)];
        for (int& c : m.children)
            c = newIndex[static_cast<size_t>(c)];
        std::vector<int> ps;
        for (int p : m.params) {
            ps.push_back(static_cast<int>(params.size()));
            params.push_back(m_params[static_cast<size_t>(p)]);
        }
        m.params = ps;
        std::vector<int> bs;
        for (int b : m.buffers) {
            bs.push_back(static_cast<int>(buffers.size()));
            buffers.push_back(m_buffers[static_cast<size_t>(b)]);
        }
        m.buffers = bs;
        modules.push_back(std::move(m));
    }
    m_modules = std::move(modules);
    m_params = std::move(params);
    m_buffers = std::move(buffers);
    m_moduleIndex.clear();
    m_paramIndex.clear();
    for (size_t i = 0; i < m_modules.size(); ++i)
        m_moduleIndex[m_modules[i].name] = static_cast<int>(i);
    for (size_t i = 0; i < m_params.size(); ++i)
        m_paramIndex[m_params[i].name] = static_cast<int>(i);
    setSizing(dtype, reference);
}

void ModuleTree::setQuantization(const Quantization& q)
{
    m_quant = std::make_shared<const Quantization>(q);
}

void ModuleTree::setQuantApplied(bool applied)
{
    m_quantApplied = applied;
    setSizing(m_dtype, m_reference);
}

void ModuleTree::setSizing(std::optional<DType> dtype, Reference reference)
{
    m_dtype = dtype;
    m_reference = reference;
    for (auto& m : m_modules) {
        m.bytes = 0;
        m.paramCount = 0;
    }
    // Pre-order: walking backwards, each module is complete before its parent.
    for (size_t i = m_modules.size(); i-- > 0;) {
        Module& m = m_modules[i];
        for (int p : m.params) {
            const Param& prm = m_params[static_cast<size_t>(p)];
            m.bytes += paramBytes(prm);
            if (!prm.duplicate && !prm.quantOnly)
                m.paramCount += prm.numel();
        }
        for (int b : m.buffers)
            m.bytes += bufferBytes(m_buffers[static_cast<size_t>(b)]);
        int end = static_cast<int>(i) + 1;
        for (int c : m.children) {
            m.bytes += m_modules[static_cast<size_t>(c)].bytes;
            m.paramCount += m_modules[static_cast<size_t>(c)].paramCount;
            end = std::max(end, m_modules[static_cast<size_t>(c)].end);
        }
        m.end = end;
    }
}

} // namespace stowage
