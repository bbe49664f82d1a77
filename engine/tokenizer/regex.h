#pragma once
// Split/Replace patterns: a literal string or a regex written for Oniguruma
// (what tokenizers compiles them with), run with PCRE2 in UTF + UCP mode. \s,
// \S, \w and \W are rewritten to Oniguruma's Unicode meaning (\s includes
// U+0085; \w is Alphabetic, marks, decimal digits, connector punctuation).
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stowage::tok {

class Pattern {
public:
    // Throws InputError naming `file` when the regex does not compile.
    static Pattern literal(std::string text);
    static Pattern regex(const std::string& pattern, const std::string& file);

    // Non-overlapping matches, left to right, as onig's find_iter (an empty
    // match right after the previous match is skipped).
    std::vector<std::pair<size_t, size_t>> findAll(std::string_view s) const;
    // Every match replaced by `with`.
    std::string replaceAll(std::string_view s, std::string_view with) const;

    struct Compiled;

private:
    std::string m_literal;
    std::shared_ptr<const Compiled> m_re;
};

// The pattern in PCRE2 syntax (exposed for tests).
std::string translateOnigPattern(const std::string& pattern);

} // namespace stowage::tok
