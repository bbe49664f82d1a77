#include "stowage/kvcache.h"

#include "stowage/families.h"

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
    const uint64_t vocab = uint64_t(c.integer("vocab_size", 0));
    KvReserve r;
    r.context = context;
    r.batch = batch;
    r.layerClass = tree.noSplitClasses()[0];
    // keys and values for every position of every sequence
    r.bytesPerLayer = 2ull * uint64_t(batch) * uint64_t(context) * uint64_t(kvHeads) * uint64_t(headDim) * el;
    // the widest hidden state of a prefill, plus float32 logits of the last position
    r.activationBytes = uint64_t(batch) * uint64_t(context) * uint64_t(std::max(inner, 3 * hidden)) * el +
                        uint64_t(batch) * vocab * 4;
    return r;
}

} // namespace stowage
