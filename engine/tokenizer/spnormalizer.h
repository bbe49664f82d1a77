#pragma once
// SentencePiece's normalizer (normalizer.cc) and the helpers its models share,
// for sentencepiece.cpp: the precompiled_charsmap rules (nmt_nfkc etc.),
// user-defined symbols kept whole, whitespace as ▁, the dummy prefix and
// remove_extra_whitespaces.
#include "protoreader.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stowage::tok::spm {

inline constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81"; // U+2581

// string_util::OneCharLen: the length s[i]'s lead byte announces, clipped to s.
size_t oneCharLen(std::string_view s, size_t i);

// Strings -> ids, sorted, for the prefix searches SentencePiece does with
// Darts tries: the user-defined symbols and the unigram vocabulary.
class SortedVocab {
public:
    void add(std::string_view s, int32_t id) { m_v.emplace_back(s, id); }
    void build() { std::sort(m_v.begin(), m_v.end()); } // string_view orders bytes unsigned
    bool empty() const { return m_v.empty(); }
    // f(length, id) for each entry that is a prefix of text, shortest first.
    template<class F> void prefixes(std::string_view text, F&& f) const
    {
        // [lo, hi): the entries whose first n bytes are text's.
        size_t lo = 0, hi = m_v.size();
        for (size_t n = 0; n < text.size() && lo < hi; ++n) {
            if (m_v[lo].first.size() == n) // reported already; the others are longer
                ++lo;
            const char c = text[n];
            auto less = [n](const Entry& e, char ch) { return std::char_traits<char>::lt(e.first[n], ch); };
            auto greater = [n](char ch, const Entry& e) { return std::char_traits<char>::lt(ch, e.first[n]); };
            lo = static_cast<size_t>(std::lower_bound(m_v.begin() + lo, m_v.begin() + hi, c, less) - m_v.begin());
            hi = static_cast<size_t>(std::upper_bound(m_v.begin() + lo, m_v.begin() + hi, c, greater) - m_v.begin());
            if (lo < hi && m_v[lo].first.size() == n + 1)
                f(n + 1, m_v[lo].second);
        }
    }
    // PrefixMatcher::PrefixMatch: the length of the longest entry at the
    // start of text (found), else of one character.
    size_t prefixMatch(std::string_view text, bool& found) const
    {
        size_t len = 0;
        prefixes(text, [&](size_t n, int32_t) { len = n; });
        found = len > 0;
        return found ? len : oneCharLen(text, 0);
    }

private:
    using Entry = std::pair<std::string_view, int32_t>;
    std::vector<Entry> m_v;
};

class Normalizer {
public:
    // `userDefined` must outlive the normalizer. Throws InputError naming
    // `file` for a broken precompiled_charsmap.
    Normalizer(const SpModelProto& proto, const SortedVocab& userDefined, const std::string& file);
    // Normalizer::Normalize, without the alignment to the input.
    std::string normalize(std::string_view input) const;

private:
    std::pair<std::string_view, size_t> normalizePrefix(std::string_view input) const;
    size_t longestRule(std::string_view key, std::string_view& replacement) const;

    const SortedVocab& m_userDefined;
    std::vector<uint32_t> m_units; // the Darts double array of the charsmap
    std::string m_replacements;    // its NUL-terminated replacements
    bool m_addDummyPrefix, m_removeExtra, m_escape, m_suffix;
};

} // namespace stowage::tok::spm
