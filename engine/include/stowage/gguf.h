#pragma once
// A checkpoint written as GGUF (version 3), the one file llama.cpp's
// llama-server reads: the hand-off to llama.cpp needs it, and Run starts
// llama-server on it. Written as llama.cpp's convert_hf_to_gguf.py writes
// these families (Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE): the
// same tensor names, Llama's q/k rows permuted for llama.cpp's interleaved
// rotary, a mixture of experts' per-expert matrices stacked into one 3-D
// tensor each, 1-D weights as F32, 2-D weights in their stored type (F32,
// F16 or BF16), the vocabulary padded to the embedding's rows. No Qt, no
// LibTorch.
#include <cstdint>
#include <functional>
#include <string>

namespace stowage {

class Checkpoint;

struct GgufExport {
    std::string architecture;  // general.architecture: "llama", "qwen2", "qwen3", "qwen3moe"
    std::string tokenizerPre;  // tokenizer.ggml.pre ("gpt-2", "llama-bpe", "qwen2"); "llama" for SentencePiece
    uint64_t tensors = 0;
    uint64_t bytes = 0;        // of the whole file
};

// Why `ck` cannot be written as GGUF, naming the file and the problem;
// empty when it can. Reads only config.json, the tensor list and
// tokenizer.json (fast: the window asks before it offers the export).
std::string ggufExportProblem(const Checkpoint& ck);

// Writes OUT.partial and renames it to `outPath` when complete. `progress`
// (bytes written, bytes in all) returning false stops with Cancelled and
// removes the partial file. Throws InputError (the problem above, or a
// write that failed) naming the file.
GgufExport exportGguf(const Checkpoint& ck, const std::string& outPath,
                      const std::function<bool(uint64_t, uint64_t)>& progress = {});

} // namespace stowage
