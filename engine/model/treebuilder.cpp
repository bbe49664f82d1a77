// Matching a checkpoint's tensors to a module tree: the registry skeleton for
// known families, a tree inferred from names otherwise.
#include "families/registry.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/moduletree.h"
#include "stowage/quantization.h"

#include <algorithm>
#include <map>

namespace stowage {
namespace {

bool isFloat8(DType d) { return d == DType::F8_E4M3 || d == DType::F8_E5M2; }

bool isNumber(const std::string& s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> splitName(const std::string& name)
{
    std::vector<std::string> parts;
    std::stringstream ss(name);
    std::string part;
    while (std::getline(ss, part, '.'))
        parts.push_back(part);
    return parts;
}

// A parameter stored under an older layout's prefix (Skeleton::storedPrefixes),
// as transformers' conversion mapping renames it on load.
const TensorInfo* findStoredUnderOldPrefix(const Checkpoint& ck,
                                           const std::vector<std::pair<std::string, std::string>>& prefixes,
                                           const std::string& name)
{
    for (const auto& [module, stored] : prefixes) {
        const std::string from = module + ".";
        if (name.rfind(from, 0) == 0)
            if (const TensorInfo* ti = ck.find(stored + "." + name.substr(from.size())))
                return ti;
    }
    return nullptr;
}

} // namespace

DType checkpointDType(const Checkpoint& ck)
{
    if (ck.config() && ck.config()->dtype())
        return *ck.config()->dtype();
    // transformers reads the first weights file (shard names sort, so the
    // first shard) and takes its first floating tensor that is not float8.
    int first = -1;
    for (size_t s = 0; s < ck.shards().size(); ++s)
        if (first < 0 || ck.shards()[s].path < ck.shards()[size_t(first)].path)
            first = int(s);
    std::vector<const TensorInfo*> inFile;
    for (const auto& t : ck.tensors())
        if (first >= 0 && t.shard == first)
            inFile.push_back(&t);
    std::stable_sort(inFile.begin(), inFile.end(),
                     [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (const TensorInfo* t : inFile)
        if (dtypeIsFloating(t->dtype) && t->dtype != DType::F8_E4M3 && t->dtype != DType::F8_E5M2)
            return t->dtype;
    // transformers would take the first tensor's integer dtype here and then
    // fail to build the model under it; planning carries on in float32.
    return DType::F32;
}

ModuleTree buildModuleTree(const Checkpoint& ck, std::optional<DType> dtype, Reference reference)
{
    const DType target = dtype ? *dtype : checkpointDType(ck);
    const auto& cfg = ck.config();
    std::optional<arch::Skeleton> skel;
    if (cfg)
        skel = arch::buildSkeleton(*cfg, target, ck.tensors().size());

    if (!skel) {
        if (ck.indexOnly()) {
            std::string known;
            for (const auto& k : knownModelTypes())
                known += (known.empty() ? "" : ", ") + k;
            throw InputError(cfg ? cfg->path() : ck.weightsPath(),
                             "model_type '" + (cfg ? cfg->modelType() : std::string()) +
                                 "' is not a known family (" + known +
                                 ") and no shard is downloaded: shard headers are needed to plan it");
        }
        // Unknown family: modules from dotted names in file order; the
        // numbered children of a module form a list, and they are the layers.
        ModuleTree t;
        t.setModelType(cfg ? cfg->modelType() : "", false);
        t.addModule(-1, "", cfg && !cfg->architectures().empty() ? cfg->architectures()[0] : "Model");
        bool anyLayer = false;
        for (size_t i = 0; i < ck.tensors().size(); ++i) {
            const TensorInfo& ti = ck.tensors()[i];
            auto parts = splitName(ti.name);
            int parent = 0;
            std::string name;
            for (size_t k = 0; k + 1 < parts.size(); ++k) {
                name += (k ? "." : "") + parts[k];
                int m = t.find(name);
                if (m < 0) {
                    bool numbered = isNumber(parts[k]);
                    anyLayer = anyLayer || numbered;
                    m = t.addModule(parent, parts[k], numbered ? "Layer" : "Module");
                    if (numbered)
                        t.m_modules[static_cast<size_t>(parent)].className = "ModuleList";
                }
                parent = m;
            }
            int p = t.addParam(parent, parts.back(), ti.shape, ti.dtype);
            t.m_params[static_cast<size_t>(p)].tensor = static_cast<int>(i);
        }
        // Files list "h.10" before "h.2"; a ModuleList holds them by number.
        for (auto& m : t.m_modules) {
            if (m.className != "ModuleList")
                continue;
            std::stable_sort(m.children.begin(), m.children.end(), [&](int a, int b) {
                auto num = [&](int i) {
                    const std::string& n = t.m_modules[static_cast<size_t>(i)].name;
                    std::string last = n.substr(n.rfind('.') + 1);
                    return isNumber(last) ? std::stoll(last) : -1LL;
                };
                return num(a) < num(b);
            });
        }
        if (anyLayer)
            t.setNoSplit({"Layer"});
        t.finish(target, reference);
        return t;
    }

    ModuleTree& t = skel->tree;
    const std::string prefix = skel->basePrefix + ".";
    // A quantized checkpoint: the quantizer's forms of the parameters it
    // replaces (sized once the planner knows the target), and the names its
    // tensors are stored under.
    const std::optional<Quantization> quant = quantizationOf(*cfg);
    if (quant)
        addQuantizedForms(t, *quant, skel->keepInFp32);
    std::vector<bool> used(ck.tensors().size(), false);
    const std::string& file = ck.weightsPath();
    // The checkpoint's tensor for a full name, also under the base-model name.
    const auto lookup = [&](const std::string& name) {
        const TensorInfo* ti = ck.find(name);
        if (!ti && name.rfind(prefix, 0) == 0)
            ti = ck.find(name.substr(prefix.size()));
        return ti;
    };
    // A stored tensor's shape against the one config.json implies.
    const auto checkShape = [&](const TensorInfo& ti, const std::vector<int64_t>& shape) {
        if (ti.shape != shape)
            throw InputError(ti.shard >= 0 ? ck.shards()[static_cast<size_t>(ti.shard)].path : file,
                             "tensor '" + ti.name + "' has shape " + shapeText(ti.shape) + " but config.json implies " +
                                 shapeText(shape));
    };
    for (size_t pi = 0; pi < t.params().size(); ++pi) {
        Param& p = t.m_params[pi];
        if (p.quantOnly)
            continue; // a scale: the quantizer's state of a stored weight (below)
        const TensorInfo* ti = lookup(p.name);
        if (!ti && quant) {
            // Stored in the quantizer's own form: MXFP4's `_blocks`, GPTQ's
            // `qweight`. Its dtype and shape are the quantizer's; the
            // parameter keeps the ones config.json implies.
            const std::string stored = quantStoredName(p.name, *quant);
            if (const TensorInfo* q = stored.empty() ? nullptr : lookup(stored)) {
                used[static_cast<size_t>(q - ck.tensors().data())] = true;
                p.tensor = static_cast<int>(q - ck.tensors().data());
                continue;
            }
        }
        if (!ti)
            ti = findStoredUnderOldPrefix(ck, skel->storedPrefixes, p.name);
        auto fused = skel->storedParts.find(p.name);
        const bool renamed = fused != skel->storedParts.end() && fused->second.size() == 1 && fused->second[0].index < 0;
        if (!ti && renamed)
            ti = lookup(fused->second[0].name); // stored under an older name, read 1:1
        else if (!ti && fused != skel->storedParts.end()) {
            // Stored per expert: found when every part is (5.6 converts on
            // load), each part's shape checked where shards are present.
            p.parts = fused->second;
            bool first = true;
            for (StoredPart& part : p.parts) {
                const TensorInfo* pt = lookup(part.name);
                if (!pt) {
                    t.m_missing.push_back(part.name);
                    continue;
                }
                const size_t idx = static_cast<size_t>(pt - ck.tensors().data());
                used[idx] = true;
                part.tensor = static_cast<int>(idx);
                if (ck.indexOnly())
                    continue;
                checkShape(*pt, part.shape);
                if (first && !(quant && isFloat8(pt->dtype)))
                    p.stored = pt->dtype;
                first = false;
            }
            continue;
        }
        if (!ti) {
            if (!p.duplicate)
                t.m_missing.push_back(p.name);
            continue;
        }
        size_t idx = static_cast<size_t>(ti - ck.tensors().data());
        used[idx] = true;
        p.tensor = static_cast<int>(idx);
        if (ck.indexOnly())
            continue; // shape and dtype stay as config.json implies
        if (quant && !dtypeIsFloating(ti->dtype) && dtypeIsFloating(p.stored))
            continue; // bitsandbytes' packed uint8 or int8 weight: the unquantized form keeps the load dtype
        checkShape(*ti, p.shape);
        if (!(quant && isFloat8(ti->dtype))) // an FP8 weight keeps its unquantized form's load dtype
            p.stored = ti->dtype;
    }
    // A persistent buffer the file stores (DeepSeek-V3's router correction
    // bias) is loaded into the buffer: expected, not a parameter.
    for (const Buffer& b : t.buffers())
        if (b.persistent)
            if (const TensorInfo* ti = lookup(b.name))
                used[static_cast<size_t>(ti - ck.tensors().data())] = true;
    // The quantizer's state (scales, absmax, zeros) of a stored weight.
    if (quant)
        for (size_t i = 0; i < used.size(); ++i) {
            if (used[i])
                continue;
            const std::string owner = quantStateOwner(ck.tensors()[i].name, *quant);
            if (const TensorInfo* o = owner.empty() ? nullptr : ck.find(owner))
                used[i] = used[static_cast<size_t>(o - ck.tensors().data())];
        }
    for (size_t i = 0; i < used.size(); ++i) {
        if (used[i])
            continue;
        const std::string& name = ck.tensors()[i].name;
        bool ignored = std::any_of(skel->ignoredSuffixes.begin(), skel->ignoredSuffixes.end(),
                                   [&](const std::string& s) { return endsWith(name, s); }) ||
                       std::any_of(skel->ignoredPrefixes.begin(), skel->ignoredPrefixes.end(),
                                   [&](const std::string& s) { return name.rfind(s, 0) == 0; });
        if (!ignored)
            t.m_unexpected.push_back(name);
    }
    t.finish(target, reference);
    // Sized dequantized until a plan names its target (planDeviceMap).
    return std::move(skel->tree);
}

} // namespace stowage
