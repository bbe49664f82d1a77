// Added tokens (special or not), matched in the text before the model sees
// it, as tokenizers' AddedVocabulary: leftmost-longest matching, the
// single_word / lstrip / rstrip flags, and `normalized` tokens matched on the
// normalized text instead of the raw one.
#include "internal.h"
#include "unicode.h"

#include <array>

namespace stowage::tok {

struct AddedVocabulary::Trie {
    struct Node {
        std::unordered_map<unsigned char, int> next;
        int token = -1; // index into m_tokens
    };
    std::vector<Node> nodes{1};
    std::array<bool, 256> first{};

    void insert(const std::string& s, int token)
    {
        int at = 0;
        for (unsigned char c : s) {
            auto it = nodes[static_cast<size_t>(at)].next.find(c);
            if (it == nodes[static_cast<size_t>(at)].next.end()) {
                nodes.emplace_back();
                int id = static_cast<int>(nodes.size()) - 1;
                nodes[static_cast<size_t>(at)].next[c] = id;
                at = id;
            } else {
                at = it->second;
            }
        }
        if (nodes[static_cast<size_t>(at)].token < 0)
            nodes[static_cast<size_t>(at)].token = token;
        first[static_cast<unsigned char>(s[0])] = true;
    }

    // Leftmost, then longest, match at or after `from`: (begin, end, token).
    bool find(const std::string& s, size_t from, size_t& begin, size_t& end, int& token) const
    {
        for (size_t i = from; i < s.size(); ++i) {
            if (!first[static_cast<unsigned char>(s[i])])
                continue;
            int at = 0, best = -1;
            size_t bestEnd = 0;
            for (size_t k = i; k < s.size(); ++k) {
                const auto& nx = nodes[static_cast<size_t>(at)].next;
                auto it = nx.find(static_cast<unsigned char>(s[k]));
                if (it == nx.end())
                    break;
                at = it->second;
                if (nodes[static_cast<size_t>(at)].token >= 0) {
                    best = nodes[static_cast<size_t>(at)].token;
                    bestEnd = k + 1;
                }
            }
            if (best >= 0) {
                begin = i;
                end = bestEnd;
                token = best;
                return true;
            }
        }
        return false;
    }
};

namespace {

int32_t lastChar(const std::string& s, size_t end, size_t& start)
{
    start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
        --start;
    size_t len;
    return uni::decodeAt(s, start, len);
}

// Matches of `trie` in `s` become token pieces, the text between them plain pieces.
void findMatches(const std::string& s, bool atOrigin, const AddedVocabulary::Trie* trie,
                 const std::vector<AddedToken>& tokens, Pieces& out)
{
    if (!trie) {
        if (!s.empty())
            out.push_back({s, atOrigin, -1});
        return;
    }
    size_t startOffset = 0, searchFrom = 0, b = 0, e = 0;
    int t = -1;
    auto plain = [&](size_t from, size_t to) {
        if (from < to)
            out.push_back({s.substr(from, to - from), atOrigin && from == 0, -1});
    };
    while (trie->find(s, searchFrom, b, e, t)) {
        searchFrom = e;
        const AddedToken& tok = tokens[static_cast<size_t>(t)];
        size_t start = b, stop = e, len = 0, at = 0;
        if (tok.singleWord) {
            bool startSpace = start == 0 || !uni::isWordChar(lastChar(s, start, at));
            bool stopSpace = stop == s.size() || !uni::isWordChar(uni::decodeAt(s, stop, len));
            if (!startSpace || !stopSpace)
                continue;
        }
        if (tok.lstrip) {
            size_t newStart = start;
            while (newStart > 0 && uni::isWhitespace(lastChar(s, newStart, at)))
                newStart = at;
            start = std::max(newStart, startOffset);
        }
        if (tok.rstrip) {
            while (stop < s.size()) {
                int32_t cp = uni::decodeAt(s, stop, len);
                if (!uni::isWhitespace(cp))
                    break;
                stop += len;
            }
        }
        plain(startOffset, start);
        out.push_back({s.substr(start, stop - start), atOrigin && start == 0, tok.id});
        startOffset = stop;
    }
    plain(startOffset, s.size());
}

} // namespace

void AddedVocabulary::add(AddedToken token)
{
    if (token.content.empty())
        return;
    auto it = m_byId.find(token.id);
    if (it != m_byId.end()) {
        m_tokens[it->second] = std::move(token);
    } else {
        m_byId[token.id] = m_tokens.size();
        m_tokens.push_back(std::move(token));
    }
}

void AddedVocabulary::build(const Normalizer* normalizer)
{
    m_byContent.clear();
    m_special.clear();
    m_maxId = -1;
    auto raw = std::make_shared<Trie>(), norm = std::make_shared<Trie>();
    bool anyRaw = false, anyNorm = false;
    for (size_t i = 0; i < m_tokens.size(); ++i) {
        AddedToken& t = m_tokens[i];
        t.normalizedForm = t.content;
        if (t.normalized && normalizer)
            normalizer->normalize(t.normalizedForm);
        m_byContent[t.content] = t.id;
        if (t.special)
            m_special.insert(t.content);
        m_maxId = std::max(m_maxId, t.id);
        if (!t.normalized) {
            raw->insert(t.content, static_cast<int>(i));
            anyRaw = true;
        } else if (!t.normalizedForm.empty()) {
            norm->insert(t.normalizedForm, static_cast<int>(i));
            anyNorm = true;
        }
    }
    m_rawTrie = anyRaw ? raw : nullptr;
    m_normTrie = anyNorm ? norm : nullptr;
}

Pieces AddedVocabulary::splitRaw(const std::string& text) const
{
    Pieces out;
    findMatches(text, true, m_rawTrie.get(), m_tokens, out);
    return out;
}

void AddedVocabulary::splitNormalized(const Piece& piece, Pieces& out) const
{
    findMatches(piece.text, piece.atOrigin, m_normTrie.get(), m_tokens, out);
}

const AddedToken* AddedVocabulary::byId(int32_t id) const
{
    auto it = m_byId.find(id);
    return it == m_byId.end() ? nullptr : &m_tokens[it->second];
}

std::optional<int32_t> AddedVocabulary::idOf(const std::string& content) const
{
    auto it = m_byContent.find(content);
    if (it == m_byContent.end())
        return std::nullopt;
    return it->second;
}

} // namespace stowage::tok
