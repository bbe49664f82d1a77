#pragma once
// Test support for the mixture-of-experts families: the tensors a Hub
// checkpoint of Mixtral or Qwen3-MoE holds (experts stored one by one, as
// the pre-5 transformers models saved them) and its config.json, written
// here from the Hub layout, not from the skeleton they test.
#include "fixtures.h"

namespace fixtures {

struct MoeShape {
    std::string type = "mixtral"; // or "qwen3_moe"
    int64_t vocab = 100, hidden = 16, intermediate = 24, moeIntermediate = 12, layers = 2, heads = 4, kvHeads = 2;
    int64_t headDim = 0; // 0: hidden / heads, and no head_dim in config.json
    int64_t experts = 4, topK = 2;
    std::vector<int64_t> mlpOnly; // qwen3_moe: dense layers
    bool tied = false;
};
// Mixtral: model.layers.N.block_sparse_moe.gate.weight and
// .experts.E.w1/w2/w3.weight; Qwen3-MoE: model.layers.N.mlp.gate.weight and
// .mlp.experts.E.gate_proj/up_proj/down_proj.weight (dense layers
// mlp.gate_proj/up_proj/down_proj). Names sorted, as safetensors files list them.
std::vector<Tensor> moeTensors(const MoeShape& s, stowage::DType dt);
nlohmann::json moeConfig(const MoeShape& s, stowage::DType dt);
// Mixtral-8x7B's shape: hidden 4096, 32 layers, 32 heads, 8 KV heads of
// 128, 8 experts of width 14336 (top-2), vocabulary 32,000; written into
// `dir` as an index and config.json only (planned before download).
void writeMixtral8x7bIndex(const std::string& dir, stowage::DType dt);

} // namespace fixtures
