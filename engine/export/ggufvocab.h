#pragma once
// The vocabulary part of a GGUF export (tokenizer.ggml.*), read from the
// checkpoint's tokenizer.json: byte-level BPE as llama.cpp's "gpt2" model
// (convert_hf_to_gguf.py's get_vocab_base), and byte-fallback BPE with ▁ for
// spaces (Llama 2, Mistral, Mixtral) as its SentencePiece "llama" model.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {
class Checkpoint;
namespace gguf {

struct Vocab {
    std::string model = "gpt2";      // tokenizer.ggml.model: "gpt2" or "llama"
    std::string pre;                 // tokenizer.ggml.pre (gpt2 only)
    std::vector<std::string> tokens; // by id
    std::vector<int32_t> types;      // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
    std::vector<std::string> merges; // "a b" (gpt2)
    std::vector<float> scores;       // by id (llama): what llama.cpp merges by, highest first
    std::optional<int32_t> bos, eos, unk;
    bool addBos = false;
    bool addSpacePrefix = false;     // llama: a ▁ before the text
    std::string chatTemplate;
};

// Throws InputError naming tokenizer.json (or the file at fault).
Vocab readVocab(const Checkpoint& ck);
// Pads with "[PAD<id>]" unused tokens up to the embedding's `rows`, as the
// converter does; InputError when the tokenizer has more ids than rows.
void padVocab(Vocab& v, int64_t rows, const Checkpoint& ck);

} // namespace gguf
} // namespace stowage
