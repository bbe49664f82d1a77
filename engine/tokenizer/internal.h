#pragma once
// The stages of a tokenizer, as Hugging Face tokenizers has them: added tokens
// are split out of the raw text, each remaining segment is normalized, split
// by the pre-tokenizer into words, and each word goes through the model. The
// decoder turns tokens back into text.
#include "stowage/tokenizer.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace stowage::tok {

// A piece of text on its way through the pipeline. `id` >= 0 means the piece
// already is a token (an added token) and later stages leave it alone.
// `atOrigin` says it starts at byte 0 of the original input (Metaspace's
// prepend_scheme "first" needs it).
struct Piece {
    std::string text;
    bool atOrigin = false;
    int32_t id = -1;
};
using Pieces = std::vector<Piece>;

class Normalizer {
public:
    virtual ~Normalizer() = default;
    virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    // Splits (and may rewrite) the pieces that have no id yet.
    virtual void preTokenize(Pieces& pieces) const = 0;
};

class Model {
public:
    virtual ~Model() = default;
    virtual void tokenize(const std::string& word, std::vector<int32_t>& out) const = 0;
    virtual std::optional<int32_t> tokenToId(const std::string& token) const = 0;
    virtual const std::string* idToToken(int32_t id) const = 0;
    virtual int32_t size() const = 0; // one past the largest id
};

class Decoder {
public:
    virtual ~Decoder() = default;
    // tokenizers' decode_chain: tokens in, tokens out; the caller joins them.
    virtual void decodeChain(std::vector<std::string>& tokens) const = 0;
};

// How a split pattern's matches become pieces (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool singleWord = false, lstrip = false, rstrip = false, normalized = true, special = false;
    std::string normalizedForm; // content after the normalizer, for normalized tokens
};

class AddedVocabulary {
public:
    void add(AddedToken token);
    // Call once all tokens are added: normalizes the normalized ones and builds the matchers.
    void build(const Normalizer* normalizer);
    // Splits out tokens matched on the raw text (normalized = false).
    Pieces splitRaw(const std::string& text) const;
    // Splits out tokens matched on normalized text (normalized = true).
    void splitNormalized(const Piece& piece, Pieces& out) const;

    const AddedToken* byId(int32_t id) const;
    std::optional<int32_t> idOf(const std::string& content) const;
    bool isSpecialContent(const std::string& token) const { return m_special.count(token) != 0; }
    int32_t maxId() const { return m_maxId; }
    bool empty() const { return m_tokens.empty(); }

    struct Trie;

private:
    std::vector<AddedToken> m_tokens;
    std::unordered_map<int32_t, size_t> m_byId;
    std::unordered_map<std::string, int32_t> m_byContent;
    std::unordered_set<std::string> m_special;
    std::shared_ptr<Trie> m_rawTrie, m_normTrie;
    int32_t m_maxId = -1;
};

class Pattern;
// Factories from tokenizer.json sections; throw InputError naming `file`.
// makePattern reads a {"String": s} or {"Regex": r} pattern object.
Pattern makePattern(const nlohmann::json& j, const std::string& file, const std::string& what);
std::unique_ptr<Normalizer> makeNormalizer(const nlohmann::json& j, const std::string& file);
std::unique_ptr<PreTokenizer> makePreTokenizer(const nlohmann::json& j, const std::string& file);
std::unique_ptr<Decoder> makeDecoder(const nlohmann::json& j, const std::string& file);
std::unique_ptr<Model> makeBpeModel(const nlohmann::json& j, const std::string& file);

// The pieces of the GPT-2 byte-level setup, for vocab.json + merges.txt.
std::unique_ptr<PreTokenizer> makeByteLevelPreTokenizer(bool addPrefixSpace);
std::unique_ptr<Decoder> makeByteLevelDecoder();
std::unique_ptr<Decoder> makeLlamaDecoder(); // Replace ▁, ByteFallback, Fuse, Strip 1 leading space

struct BpeOptions {
    std::optional<std::string> unkToken, continuingSubwordPrefix, endOfWordSuffix;
    bool fuseUnk = false, byteFallback = false, ignoreMerges = false;
};
std::unique_ptr<Model> makeBpe(std::unordered_map<std::string, int32_t> vocab,
                               const std::vector<std::pair<std::string, std::string>>& merges,
                               const BpeOptions& opts, const std::string& file);

} // namespace stowage::tok

namespace stowage {

struct Tokenizer::Impl {
    std::unique_ptr<tok::Normalizer> normalizer;
    std::unique_ptr<tok::PreTokenizer> preTokenizer;
    std::unique_ptr<tok::Model> model;
    std::unique_ptr<tok::Decoder> decoder;
    tok::AddedVocabulary added;
    std::optional<int32_t> bos;
    std::vector<int32_t> eos;
    std::string source; // the file it was loaded from
};

namespace tok {
// SentencePiece tokenizer.model given as its bytes: sets the model, the
// decoder, the control and unknown pieces as special tokens, and BOS/EOS.
void loadSentencePiece(const std::string& bytes, const std::string& file, Tokenizer::Impl& impl);

// Loaders (jsonload.cpp). `read(name)` returns a side file's bytes or nothing.
struct FileSource {
    std::string folder;
    std::optional<std::string> (*read)(const void* ctx, const std::string& name) = nullptr;
    const void* ctx = nullptr;
    std::string path(const std::string& name) const;
    std::optional<std::string> get(const std::string& name) const { return read(ctx, name); }
};
std::unique_ptr<Tokenizer::Impl> loadTokenizerJson(const std::string& text, const std::string& path);
std::unique_ptr<Tokenizer::Impl> loadFromSource(const FileSource& src);
} // namespace tok

} // namespace stowage
