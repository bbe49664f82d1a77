#include "stowage/kvcache.h"

namespace stowage {

std::optional<KvReserve> kvReserveFor(const ModelConfig& c, const ModuleTree& tree, int context, int batch, DType dtype)
{
    int64_t kvHeads = 0, headDim = 0, hidden = 0, inner = 0;
    const std::string& t = c.modelType();
    if (t == "gpt2") {
        hidden = c.positive("n_embd", 768);
        kvHeads = c.positive("n_head", 12);
        headDim = hidden / kvHeads;
        inner = c.has("n_inner") ? c.integer("n_inner") : 4 * hidden;
    } else if (t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3") {
        hidden = c.positive("hidden_size");
        int64_t heads = c.positive("num_attention_heads");
        kvHeads = c.positive("num_key_value_heads", heads);
        headDim = c.has("head_dim") ? c.positive("head_dim") : hidden / heads;
        inner = c.integer("intermediate_size");
    } else if (t == "opt") {
        hidden = c.positive("hidden_size");
        kvHeads = c.positive("num_attention_heads");
        headDim = hidden / kvHeads;
        inner = c.integer("ffn_dim");
    } else {
        return std::nullopt;
    }
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
