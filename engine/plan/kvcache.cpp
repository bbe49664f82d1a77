#include "stowage/kvcache.h"

#include "stowage/error.h"
#include "stowage/families.h"

#include <algorithm>
#include <cstdio>

namespace stowage {

std::optional<KvReserve> kvReserveFor(const ModelConfig& c, const ModuleTree& tree, int context, int batch, DType dtype)
{
    const auto shape = attentionShape(c); // the family registry knows each family's attention
    if (!shape)
        return std::nullopt;
    const int64_t kvHeads = shape->kvHeads, headDim = shape->headDim, hidden = shape->hidden, inner = shape->inner;
    if (tree.noSplitClasses().empty())
        return std::nullopt;
    const uint64_t el = uint64_t(dtypeSize(dtype));
    const uint64_t vocab = uint64_t(c.textConfig().integer("vocab_size", 0)); // text_config's in Gemma 3
    KvReserve r;
    r.context = context;
    r.batch = batch;
    r.layerClass = tree.noSplitClasses()[0];
    // keys and values for every position of every sequence
    r.bytesPerLayer = 2ull * uint64_t(batch) * uint64_t(context) * uint64_t(kvHeads) * uint64_t(headDim) * el;
    if (!shape->cache.empty()) {
        // A family whose layers differ: each keeps its own values a position,
        // a sliding one no more positions than its window.
        r.bytesPerLayer = 0;
        for (const LayerCacheShape& l : shape->cache) {
            const uint64_t positions = l.window > 0 ? std::min<uint64_t>(uint64_t(context), uint64_t(l.window))
                                                    : uint64_t(context);
            r.layerBytes.push_back(uint64_t(batch) * positions * uint64_t(l.elementsPerPosition) * el);
            r.bytesPerLayer = std::max(r.bytesPerLayer, r.layerBytes.back());
        }
    }
    // the widest hidden state of a prefill, plus float32 logits of the last position
    r.activationBytes = uint64_t(batch) * uint64_t(context) * uint64_t(std::max(inner, 3 * hidden)) * el +
                        uint64_t(batch) * vocab * 4;
    return r;
}

KvSpec parseKvSpec(const std::string& text, const std::string& what)
{
    KvSpec k;
    char x = 0, extra = 0;
    const int n = std::sscanf(text.c_str(), "%d%c%d%c", &k.context, &x, &k.batch, &extra);
    const bool digitsFirst = !text.empty() && text[0] >= '0' && text[0] <= '9';
    if (!digitsFirst || !(n == 1 || (n == 3 && x == 'x')) || k.context <= 0 || k.batch <= 0 ||
        text.find_first_of(" \t+") != std::string::npos)
        throw InputError(what, "expected CONTEXT or CONTEXTxBATCH, e.g. 4096 or 8192x4");
    if (n == 1)
        k.batch = 1;
    return k;
}

KvReserve kvReserveForCheckpoint(const Checkpoint& ck, const ModuleTree& tree, KvSpec spec)
{
    if (!ck.config())
        throw InputError(ck.weightsPath(), "a KV-cache reserve needs config.json beside the weights");
    auto r = kvReserveFor(*ck.config(), tree, spec.context, spec.batch, *tree.dtype());
    if (!r)
        throw InputError(ck.config()->path(), "model_type '" + ck.config()->modelType() +
                                                  "' is not a family whose attention shape Stowage knows");
    return *r;
}

} // namespace stowage
