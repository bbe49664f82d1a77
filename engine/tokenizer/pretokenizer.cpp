// Pre-tokenizers of tokenizer.json: ByteLevel, Split, Metaspace, Digits,
// Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit,
// BertPreTokenizer, Sequence. Splitting follows tokenizers'
// NormalizedString::split exactly, including empty pieces being dropped.
#include "internal.h"
#include "regex.h"
#include "unicode.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

#include <functional>

namespace stowage::tok {

namespace {

using nlohmann::json;

struct Span {
    size_t begin, end;
    bool match;
};

// Matches → spans covering the whole string (tokenizers' Pattern::find_matches).
std::vector<Span> cover(const std::vector<std::pair<size_t, size_t>>& matches, size_t size)
{
    std::vector<Span> spans;
    if (size == 0) {
        spans.push_back({0, 0, false});
        return spans;
    }
    size_t prev = 0;
    for (auto [b, e] : matches) {
        if (prev != b)
            spans.push_back({prev, b, false});
        spans.push_back({b, e, true});
        prev = e;
    }
    if (prev != size)
        spans.push_back({prev, size, false});
    return spans;
}

std::vector<Span> charSpans(const std::string& s, const std::function<bool(int32_t)>& pred)
{
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        int32_t cp = uni::decodeAt(s, i, len);
        if (pred(cp))
            matches.emplace_back(i, i + len);
        i += len;
    }
    return cover(matches, s.size());
}

// Applies the delimiter behaviour and appends the resulting non-empty pieces.
void emit(const Piece& piece, std::vector<Span> spans, SplitBehavior behavior, Pieces& out)
{
    std::vector<std::pair<Span, bool>> kept; // span, removed
    bool prevMatch = false;
    switch (behavior) {
    case SplitBehavior::Isolated:
        for (const auto& s : spans)
            kept.push_back({s, false});
        break;
    case SplitBehavior::Removed:
        for (const auto& s : spans)
            kept.push_back({s, s.match});
        break;
    case SplitBehavior::Contiguous:
        for (const auto& s : spans) {
            if (s.match == prevMatch && !kept.empty())
                kept.back().first.end = s.end;
            else
                kept.push_back({s, false});
            prevMatch = s.match;
        }
        break;
    case SplitBehavior::MergedWithPrevious:
        for (const auto& s : spans) {
            if (s.match && !prevMatch && !kept.empty())
                kept.back().first.end = s.end;
            else
                kept.push_back({s, false});
            prevMatch = s.match;
        }
        break;
    case SplitBehavior::MergedWithNext:
        for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
            if (it->match && !prevMatch && !kept.empty())
                kept.back().first.begin = it->begin;
            else
                kept.push_back({*it, false});
            prevMatch = it->match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
    }
    for (const auto& [s, removed] : kept) {
        if (removed || s.end <= s.begin)
            continue;
        out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.atOrigin && s.begin == 0, -1});
    }
}

// Runs `fn` on every piece that is not a token yet.
void splitEach(Pieces& pieces, const std::function<void(const Piece&, Pieces&)>& fn)
{
    Pieces out;
    out.reserve(pieces.size());
    for (auto& p : pieces) {
        if (p.id >= 0)
            out.push_back(std::move(p));
        else
            fn(p, out);
    }
    pieces = std::move(out);
}

class Split : public PreTokenizer {
public:
    Split(Pattern p, SplitBehavior b, bool invert) : m_pattern(std::move(p)), m_behavior(b), m_invert(invert) {}
    void preTokenize(Pieces& pieces) const override
    {
        splitEach(pieces, [&](const Piece& p, Pieces& out) {
            auto spans = cover(m_pattern.findAll(p.text), p.text.size());
            if (m_invert)
                for (auto& s : spans)
                    s.match = !s.match;
            emit(p, std::move(spans), m_behavior, out);
        });
    }

private:
    Pattern m_pattern;
    SplitBehavior m_behavior;
    bool m_invert;
};

class CharSplit : public PreTokenizer {
public:
    CharSplit(std::function<bool(int32_t)> pred, SplitBehavior b) : m_pred(std::move(pred)), m_behavior(b) {}
    void preTokenize(Pieces& pieces) const override
    {
        splitEach(pieces, [&](const Piece& p, Pieces& out) { emit(p, charSpans(p.text, m_pred), m_behavior, out); });
    }

private:
    std::function<bool(int32_t)> m_pred;
    SplitBehavior m_behavior;
};

const char kGpt2Regex[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel : public PreTokenizer {
public:
    ByteLevel(bool addPrefixSpace, bool useRegex) : m_addPrefixSpace(addPrefixSpace), m_useRegex(useRegex)
    {
        if (useRegex)
            m_regex = Pattern::regex(kGpt2Regex, "");
    }
    void preTokenize(Pieces& pieces) const override
    {
        splitEach(pieces, [&](const Piece& p, Pieces& out) {
            Piece q = p;
            if (m_addPrefixSpace && (q.text.empty() || q.text[0] != ' '))
                q.text.insert(0, 1, ' ');
            if (m_useRegex)
                emit(q, cover(m_regex.findAll(q.text), q.text.size()), SplitBehavior::Isolated, out);
            else if (!q.text.empty())
                out.push_back(std::move(q));
        });
        const auto& table = uni::byteToChar();
        for (auto& p : pieces) {
            if (p.id >= 0)
                continue;
            std::string mapped;
            mapped.reserve(p.text.size() * 2);
            for (unsigned char b : p.text)
                mapped += table[b];
            p.text = std::move(mapped);
        }
    }

private:
    bool m_addPrefixSpace, m_useRegex;
    Pattern m_regex;
};

enum class Prepend { First, Never, Always };

class Metaspace : public PreTokenizer {
public:
    Metaspace(std::string replacement, Prepend scheme, bool split)
        : m_rep(std::move(replacement)), m_scheme(scheme), m_split(split)
    {
        size_t len;
        m_repCp = uni::decodeAt(m_rep, 0, len);
    }
    void preTokenize(Pieces& pieces) const override
    {
        Pattern space = Pattern::literal(" ");
        splitEach(pieces, [&](const Piece& p, Pieces& out) {
            Piece q{space.replaceAll(p.text, m_rep), p.atOrigin, -1};
            bool starts = q.text.compare(0, m_rep.size(), m_rep) == 0;
            if (!starts && (m_scheme == Prepend::Always || (m_scheme == Prepend::First && q.atOrigin)))
                q.text.insert(0, m_rep);
            if (m_split)
                emit(q, charSpans(q.text, [&](int32_t c) { return c == m_repCp; }), SplitBehavior::MergedWithNext,
                     out);
            else if (!q.text.empty())
                out.push_back(std::move(q));
        });
    }

private:
    std::string m_rep;
    int32_t m_repCp = 0;
    Prepend m_scheme;
    bool m_split;
};

class Sequence : public PreTokenizer {
public:
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    void preTokenize(Pieces& pieces) const override
    {
        for (const auto& p : parts)
            p->preTokenize(pieces);
    }
};

SplitBehavior behaviorOf(const json& j, const std::string& file, const char* def)
{
    std::string b = j.value("behavior", std::string(def));
    if (b == "Removed")
        return SplitBehavior::Removed;
    if (b == "Isolated")
        return SplitBehavior::Isolated;
    if (b == "MergedWithPrevious")
        return SplitBehavior::MergedWithPrevious;
    if (b == "MergedWithNext")
        return SplitBehavior::MergedWithNext;
    if (b == "Contiguous")
        return SplitBehavior::Contiguous;
    throw InputError(file, "unknown split behavior '" + b + "'");
}

} // namespace

std::unique_ptr<PreTokenizer> makeByteLevelPreTokenizer(bool addPrefixSpace)
{
    return std::make_unique<ByteLevel>(addPrefixSpace, true);
}

std::unique_ptr<PreTokenizer> makePreTokenizer(const json& j, const std::string& file)
{
    if (j.is_null())
        return nullptr;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw InputError(file, "pre_tokenizer has no \"type\"");
    const std::string type = j["type"].get<std::string>();
    if (type == "Sequence") {
        auto seq = std::make_unique<Sequence>();
        const json& parts = j.value("pretokenizers", json::array());
        if (!parts.is_array())
            throw InputError(file, "Sequence pre_tokenizer: \"pretokenizers\" is not a list");
        for (const auto& p : parts)
            if (auto t = makePreTokenizer(p, file))
                seq->parts.push_back(std::move(t));
        return seq;
    }
    if (type == "ByteLevel")
        return std::make_unique<ByteLevel>(j.value("add_prefix_space", true), j.value("use_regex", true));
    if (type == "Split")
        return std::make_unique<Split>(makePattern(j.value("pattern", json()), file, "Split pre_tokenizer"),
                                       behaviorOf(j, file, "Isolated"), j.value("invert", false));
    if (type == "Metaspace") {
        std::string rep = j.value("replacement", std::string("\xE2\x96\x81"));
        if (rep.empty() || !uni::isValid(rep))
            throw InputError(file, "Metaspace replacement must be one character");
        std::string scheme = j.value("prepend_scheme", std::string("always"));
        Prepend p = scheme == "first" ? Prepend::First : scheme == "never" ? Prepend::Never : Prepend::Always;
        if (scheme != "first" && scheme != "never" && scheme != "always")
            throw InputError(file, "unknown Metaspace prepend_scheme '" + scheme + "'");
        if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean() && !j["add_prefix_space"].get<bool>())
            p = Prepend::Never;
        return std::make_unique<Metaspace>(rep, p, j.value("split", true));
    }
    if (type == "Digits")
        return std::make_unique<CharSplit>(uni::isNumeric, j.value("individual_digits", false)
                                                               ? SplitBehavior::Isolated
                                                               : SplitBehavior::Contiguous);
    if (type == "Whitespace")
        return std::make_unique<Split>(Pattern::regex(R"(\w+|[^\w\s]+)", file), SplitBehavior::Removed, true);
    if (type == "WhitespaceSplit")
        return std::make_unique<CharSplit>(uni::isWhitespace, SplitBehavior::Removed);
    if (type == "Punctuation")
        return std::make_unique<CharSplit>(uni::isPunctuation, behaviorOf(j, file, "Isolated"));
    if (type == "CharDelimiterSplit") {
        std::string d = j.value("delimiter", std::string());
        size_t len = 0;
        int32_t cp = d.empty() ? -2 : uni::decodeAt(d, 0, len);
        if (cp < 0 || len != d.size())
            throw InputError(file, "CharDelimiterSplit delimiter must be one character");
        return std::make_unique<CharSplit>([cp](int32_t c) { return c == cp; }, SplitBehavior::Removed);
    }
    if (type == "BertPreTokenizer") {
        auto seq = std::make_unique<Sequence>();
        seq->parts.push_back(std::make_unique<CharSplit>(uni::isWhitespace, SplitBehavior::Removed));
        seq->parts.push_back(std::make_unique<CharSplit>(uni::isPunctuation, SplitBehavior::Isolated));
        return seq;
    }
    if (type == "UnicodeScripts" || type == "FixedLength")
        throw InputError(file, "pre_tokenizer '" + type + "' is not supported");
    throw InputError(file, "unknown pre_tokenizer type '" + type + "'");
}

} // namespace stowage::tok
