// SentencePiece 0.1.97's normalizer.cc, ported: the same prefix rules (a
// user-defined symbol, else the longest charsmap rule, else one character, a
// malformed byte becoming U+FFFD) and the same whitespace handling.
#include "spnormalizer.h"

#include "stowage/error.h"

namespace stowage::tok::spm {

namespace {

// string_util::IsValidDecodeUTF8 (DecodeUTF8): the length of the valid
// character at the start of s, or 0.
size_t validCharLen(std::string_view s)
{
    auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    auto trail = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
    auto ok = [](uint32_t cp) { return cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF); };
    if (b(0) < 0x80)
        return 1;
    if (s.size() >= 2 && (b(0) & 0xE0) == 0xC0 && trail(1))
        return ((b(0) & 0x1Fu) << 6 | (b(1) & 0x3Fu)) >= 0x80 ? 2 : 0;
    if (s.size() >= 3 && (b(0) & 0xF0) == 0xE0 && trail(1) && trail(2)) {
        uint32_t cp = (b(0) & 0x0Fu) << 12 | (b(1) & 0x3Fu) << 6 | (b(2) & 0x3Fu);
        return cp >= 0x800 && ok(cp) ? 3 : 0;
    }
    if (s.size() >= 4 && (b(0) & 0xF8) == 0xF0 && trail(1) && trail(2) && trail(3)) {
        uint32_t cp = (b(0) & 0x07u) << 18 | (b(1) & 0x3Fu) << 12 | (b(2) & 0x3Fu) << 6 | (b(3) & 0x3Fu);
        return cp >= 0x10000 && ok(cp) ? 4 : 0;
    }
    return 0;
}

} // namespace

size_t oneCharLen(std::string_view s, size_t i)
{
    static const unsigned char kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return std::min<size_t>(kLen[static_cast<unsigned char>(s[i]) >> 4], s.size() - i);
}

Normalizer::Normalizer(const SpModelProto& proto, const SortedVocab& userDefined, const std::string& file)
    : m_userDefined(userDefined), m_addDummyPrefix(proto.addDummyPrefix), m_removeExtra(proto.removeExtraWhitespaces),
      m_escape(proto.escapeWhitespaces), m_suffix(proto.treatWhitespaceAsSuffix)
{
    // precompiled_charsmap: <uint32 LE trie size><Darts double array><NUL-terminated replacements>.
    const std::string& blob = proto.precompiledCharsmap;
    if (blob.empty())
        return; // no rules: "identity"
    uint32_t size = 0;
    for (size_t i = 0; i < 4 && i < blob.size(); ++i)
        size |= static_cast<uint32_t>(static_cast<unsigned char>(blob[i])) << (8 * i);
    if (blob.size() <= 4 || size > blob.size() - 4)
        throw InputError(file, "not a SentencePiece model: the precompiled_charsmap of normalizer '" +
                                   proto.normalizerName + "' is broken (" + std::to_string(blob.size()) +
                                   " bytes, trie of " + std::to_string(size) + ")");
    m_units.resize(size / 4);
    for (size_t u = 0; u < m_units.size(); ++u)
        for (size_t k = 0; k < 4; ++k)
            m_units[u] |= static_cast<uint32_t>(static_cast<unsigned char>(blob[4 + 4 * u + k])) << (8 * k);
    m_replacements = blob.substr(4 + size);
}

// Darts::DoubleArray::commonPrefixSearch, keeping the longest match: its
// length (0: none) and replacement. Links out of range end the search (the
// library would read past the array).
size_t Normalizer::longestRule(std::string_view key, std::string_view& replacement) const
{
    if (m_units.empty())
        return 0;
    auto offset = [](uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
    size_t best = 0, pos = offset(m_units[0]);
    for (size_t i = 0; i < key.size(); ++i) {
        const auto c = static_cast<unsigned char>(key[i]);
        pos ^= c;
        if (pos >= m_units.size() || (m_units[pos] & ((1u << 31) | 0xFF)) != c)
            break;
        const uint32_t unit = m_units[pos];
        pos ^= offset(unit);
        if ((unit >> 8) & 1) { // has a leaf: a rule ends here
            if (pos >= m_units.size())
                break;
            const size_t value = m_units[pos] & 0x7FFFFFFFu;
            if (value < m_replacements.size()) {
                best = i + 1;
                replacement = std::string_view(m_replacements).substr(value);
                replacement = replacement.substr(0, replacement.find('\0'));
            }
        }
    }
    return best;
}

// Normalizer::NormalizePrefix: the normalized form of the start of input and
// how many bytes of it that consumes.
std::pair<std::string_view, size_t> Normalizer::normalizePrefix(std::string_view input) const
{
    bool found = false;
    size_t len = m_userDefined.empty() ? 0 : m_userDefined.prefixMatch(input, found);
    if (found)
        return {input.substr(0, len), len};
    std::string_view replacement;
    if ((len = longestRule(input, replacement)) > 0)
        return {replacement, len};
    if ((len = validCharLen(input)) == 0)
        return {"\xEF\xBF\xBD", 1}; // U+FFFD for one malformed byte
    return {input.substr(0, len), len};
}

std::string Normalizer::normalize(std::string_view input) const
{
    std::string out;
    if (m_removeExtra) { // leading whitespace
        while (!input.empty()) {
            auto [sp, n] = normalizePrefix(input);
            if (sp != " ")
                break;
            input.remove_prefix(n);
        }
    }
    if (input.empty())
        return out;
    out.reserve(input.size() * 3);
    const std::string_view space = m_escape ? kSpaceSymbol : " ";
    if (!m_suffix && m_addDummyPrefix)
        out += space;
    bool prevSpace = m_removeExtra;
    while (!input.empty()) {
        auto [sp, n] = normalizePrefix(input);
        while (prevSpace && !sp.empty() && sp.front() == ' ')
            sp.remove_prefix(1);
        if (!sp.empty()) {
            for (char c : sp) {
                if (m_escape && c == ' ')
                    out += kSpaceSymbol;
                else
                    out += c;
            }
            prevSpace = sp.back() == ' ';
        }
        input.remove_prefix(n);
        if (!m_removeExtra)
            prevSpace = false;
    }
    if (m_removeExtra) { // trailing whitespace
        while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
            out.resize(out.size() - space.size());
    }
    if (m_suffix && m_addDummyPrefix)
        out += space;
    return out;
}

} // namespace stowage::tok::spm
