#pragma once
// The vocabulary part of a GGUF export (tokenizer.ggml.*), read from the
// checkpoint's tokenizer files as convert_hf_to_gguf.py's get_vocab_base
// reads them: byte-level BPE ("gpt2") only.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stowage {
class Checkpoint;
namespace gguf {

struct Vocab {
    std::string pre;                 // tokenizer.ggml.pre
    std::vector<std::string> tokens; // by id
    std::vector<int32_t> types;      // 1 normal, 3 control, 4 user-defined, 5 unused
    std::vector<std::string> merges; // "a b"
    std::optional<int32_t> bos, eos;
    bool addBos = false;
    std::string chatTemplate;
};

// Throws InputError naming tokenizer.json (or the file at fault).
Vocab readVocab(const Checkpoint& ck);
// Pads with "[PAD<id>]" unused tokens up to the embedding's `rows`, as the
// converter does; InputError when the tokenizer has more ids than rows.
void padVocab(Vocab& v, int64_t rows, const Checkpoint& ck);

} // namespace gguf
} // namespace stowage
