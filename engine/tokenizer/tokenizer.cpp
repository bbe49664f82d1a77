// The public Tokenizer: the encode pipeline (added tokens, normalizer,
// pre-tokenizer, model), decode, and the streaming decoder.
#include "internal.h"
#include "unicode.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/fileio.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace stowage {

namespace {

std::optional<std::string> readFromFolder(const void* ctx, const std::string& name)
{
    namespace fs = std::filesystem;
    fs::path p = fs::path(*static_cast<const std::string*>(ctx)) / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
        return std::nullopt;
    return readTextFile(p.string());
}

std::optional<std::string> readFromCheckpoint(const void* ctx, const std::string& name)
{
    return static_cast<const Checkpoint*>(ctx)->readSideFile(name);
}

// Bytes `a` and `b` share, backed off to a character boundary of `a`.
size_t commonPrefix(const std::string& a, const std::string& b)
{
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n])
        ++n;
    if (n == b.size())
        return n;
    while (n > 0 && (static_cast<unsigned char>(a[n]) & 0xC0) == 0x80)
        --n;
    return n;
}

} // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const Checkpoint& ck)
{
    tok::FileSource src;
    src.folder = ck.folder();
    src.read = &readFromCheckpoint;
    src.ctx = &ck;
    return std::unique_ptr<Tokenizer>(new Tokenizer(tok::loadFromSource(src)));
}

std::unique_ptr<Tokenizer> Tokenizer::fromFolder(const std::string& folder)
{
    std::error_code ec;
    if (!std::filesystem::is_directory(folder, ec))
        throw InputError(folder, "not a folder");
    tok::FileSource src;
    src.folder = folder;
    src.read = &readFromFolder;
    src.ctx = &folder;
    return std::unique_ptr<Tokenizer>(new Tokenizer(tok::loadFromSource(src)));
}

std::unique_ptr<Tokenizer> Tokenizer::fromTokenizerJson(const std::string& jsonText, const std::string& path)
{
    return std::unique_ptr<Tokenizer>(new Tokenizer(tok::loadTokenizerJson(jsonText, path)));
}

std::vector<int32_t> Tokenizer::encode(const std::string& input) const
{
    const Impl& m = *m_impl;
    const std::string text = tok::uni::isValid(input) ? input : tok::uni::lossy(input);
    tok::Pieces pieces;
    for (auto& p : m.added.splitRaw(text)) {
        if (p.id >= 0) {
            pieces.push_back(std::move(p));
            continue;
        }
        if (m.normalizer)
            m.normalizer->normalize(p.text);
        m.added.splitNormalized(p, pieces);
    }
    if (m.preTokenizer)
        m.preTokenizer->preTokenize(pieces);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    for (const auto& p : pieces) {
        if (p.id >= 0)
            ids.push_back(p.id);
        else
            m.model->tokenize(p.text, ids);
    }
    return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skipSpecial) const
{
    const Impl& m = *m_impl;
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
        const std::string* t = nullptr;
        if (const auto* a = m.added.byId(id))
            t = &a->normalizedForm;
        else
            t = m.model->idToToken(id);
        if (!t || (skipSpecial && m.added.isSpecialContent(*t)))
            continue;
        tokens.push_back(*t);
    }
    std::string out;
    if (m.decoder) {
        m.decoder->decodeChain(tokens);
        for (const auto& t : tokens)
            out += t;
    } else {
        for (size_t i = 0; i < tokens.size(); ++i)
            out += (i ? " " : "") + tokens[i];
    }
    return tok::uni::isValid(out) ? out : tok::uni::lossy(out);
}

int32_t Tokenizer::vocabSize() const { return std::max(m_impl->model->size(), m_impl->added.maxId() + 1); }

std::optional<int32_t> Tokenizer::tokenId(const std::string& token) const
{
    if (auto id = m_impl->added.idOf(token))
        return id;
    return m_impl->model->tokenToId(token);
}

std::optional<std::string> Tokenizer::idToToken(int32_t id) const
{
    if (const auto* a = m_impl->added.byId(id))
        return a->content;
    if (const auto* t = m_impl->model->idToToken(id))
        return *t;
    return std::nullopt;
}

bool Tokenizer::isSpecial(int32_t id) const
{
    const auto* a = m_impl->added.byId(id);
    return a && a->special;
}

std::optional<int32_t> Tokenizer::bosId() const { return m_impl->bos; }
std::vector<int32_t> Tokenizer::eosIds() const { return m_impl->eos; }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skipSpecial)
    : m_tok(tokenizer), m_skipSpecial(skipSpecial) {}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skipSpecial, const std::vector<int32_t>& shown)
    : m_tok(tokenizer), m_skipSpecial(skipSpecial)
{
    for (int32_t id : shown)
        push(id);
}

// tokenizers' step_decode_stream: decode a window of recent ids and hand out
// what grew past the previous decode, once it does not end in U+FFFD.
std::string StreamDecoder::push(int32_t id)
{
    if (m_prefix.empty() && !m_ids.empty()) {
        std::string p = m_tok.decode(m_ids, m_skipSpecial);
        if (!tok::uni::endsWithReplacementChar(p)) {
            m_prefix = std::move(p);
            m_prefixIndex = m_ids.size();
        }
    }
    m_ids.push_back(id);
    std::string s = m_tok.decode(m_ids, m_skipSpecial);
    if (s.size() <= m_prefix.size() || tok::uni::endsWithReplacementChar(s))
        return {};
    // Normally s extends the previous decode. Where a decoder rewrites earlier
    // text (tokenizers reports an error then), hand out from where they part.
    std::string fresh = s.substr(commonPrefix(s, m_prefix));
    size_t newPrefixIndex = m_ids.size() - m_prefixIndex;
    m_ids.erase(m_ids.begin(), m_ids.begin() + static_cast<std::ptrdiff_t>(m_prefixIndex));
    m_prefix = m_tok.decode(m_ids, m_skipSpecial);
    m_prefixIndex = newPrefixIndex;
    return fresh;
}

std::string StreamDecoder::finish()
{
    std::string s = m_tok.decode(m_ids, m_skipSpecial);
    std::string rest = s.size() > m_prefix.size() ? s.substr(commonPrefix(s, m_prefix)) : std::string();
    m_ids.clear();
    m_prefix.clear();
    m_prefixIndex = 0;
    return rest;
}

} // namespace stowage
