#pragma once
// Text <-> token ids, matching Hugging Face tokenizers (the Rust library behind
// transformers' "fast" tokenizers) for the families Stowage runs: GPT-2 and
// OPT (byte-level BPE), Llama 2 / Mistral (byte-fallback BPE with ▁ for
// spaces), Llama 3 and Qwen2/3 (regex split + byte-level BPE). No Qt, no
// LibTorch. Safe to use from several threads at once (const methods only).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stowage {

class Checkpoint;

class Tokenizer {
public:
    // tokenizer.json when present, else vocab.json + merges.txt (GPT-2
    // byte-level BPE), else tokenizer.model (SentencePiece). tokenizer_config.json,
    // special_tokens_map.json, generation_config.json and config.json, when
    // present, give the BOS/EOS tokens. Throws InputError naming the file.
    static std::unique_ptr<Tokenizer> load(const Checkpoint& ck);
    static std::unique_ptr<Tokenizer> fromFolder(const std::string& folder);
    // A tokenizer.json given as text; `path` names it in errors. No BOS/EOS
    // information beyond what the file itself says (none).
    static std::unique_ptr<Tokenizer> fromTokenizerJson(const std::string& jsonText, const std::string& path);

    virtual ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // As tokenizer.encode(text, add_special_tokens=False): no BOS/EOS or
    // template is added, but special and added tokens written in the text are
    // matched and give their ids. Invalid UTF-8 bytes are read as U+FFFD.
    std::vector<int32_t> encode(const std::string& text) const;
    // As tokenizers' Tokenizer.decode (no clean_up_tokenization_spaces).
    // Unknown ids are skipped. Always valid UTF-8.
    std::string decode(const std::vector<int32_t>& ids, bool skipSpecial = false) const;

    // One past the largest id of the model or of an added token (the
    // embedding rows a model needs at least).
    int32_t vocabSize() const;
    std::optional<int32_t> tokenId(const std::string& token) const;
    std::optional<std::string> idToToken(int32_t id) const;
    // True for added tokens marked special (what decode(..., true) drops).
    bool isSpecial(int32_t id) const;

    // From tokenizer_config.json / special_tokens_map.json, then
    // generation_config.json / config.json when they are known.
    std::optional<int32_t> bosId() const;
    std::vector<int32_t> eosIds() const;

    struct Impl; // engine/tokenizer/internal.h

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

// Streaming decode: feed ids one by one, get back only complete UTF-8 text
// (never half a character: byte-fallback <0xXX> tokens and byte-level BPE
// bytes wait for the rest of their character). Same algorithm as tokenizers'
// DecodeStream; the pieces concatenated equal decode(all ids) for the usual
// decoders (where a decoder rewrites earlier text, tokenizers fails; this
// hands out the text from where the two decodes part). finish() returns what
// is still held back, even an incomplete character as U+FFFD, and starts afresh.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool skipSpecial = false);
    // Continuing a text whose ids `shown` were pushed already (by a decoder
    // since gone): as that decoder stood, so push() hands out what follows,
    // and an unfinished character at their end with the ids that complete it.
    StreamDecoder(const Tokenizer& tokenizer, bool skipSpecial, const std::vector<int32_t>& shown);
    std::string push(int32_t id);
    std::string finish();

private:
    const Tokenizer& m_tok;
    bool m_skipSpecial;
    std::vector<int32_t> m_ids;
    std::string m_prefix;
    size_t m_prefixIndex = 0;
};

} // namespace stowage
