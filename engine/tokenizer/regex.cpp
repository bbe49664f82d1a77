#include "regex.h"

#include "stowage/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace stowage::tok {

struct Pattern::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

std::string translateOnigPattern(const std::string& p)
{
    // Oniguruma's Unicode \s and \w, measured against tokenizers itself (PCRE2's
    // differ: its \s lacks U+0085 and has U+180E, its \w is only \p{L}\p{N}_).
    static const std::string space = "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
                                     "\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
    static const std::string word = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
    std::string out;
    out.reserve(p.size() + 16);
    bool inClass = false;
    for (size_t i = 0; i < p.size();) {
        char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            char d = p[i + 1];
            if (d == 's' || d == 'S' || d == 'w' || d == 'W') {
                const std::string& set = (d == 's' || d == 'S') ? space : word;
                bool positive = d == 's' || d == 'w';
                if (inClass)
                    out += positive ? set : std::string{'\\', d};
                else
                    out += (positive ? "[" : "[^") + set + "]";
            } else {
                out += c;
                out += d;
            }
            i += 2;
            continue;
        }
        if (!inClass && c == '[') {
            inClass = true;
            out += c;
            ++i;
            if (i < p.size() && p[i] == '^')
                out += p[i++];
            if (i < p.size() && p[i] == ']')
                out += p[i++]; // a literal ']' first in the class
            continue;
        }
        if (inClass && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
            size_t end = p.find(":]", i + 2);
            if (end != std::string::npos) {
                out.append(p, i, end + 2 - i);
                i = end + 2;
                continue;
            }
        }
        if (inClass && c == ']')
            inClass = false;
        out += c;
        ++i;
    }
    return out;
}

Pattern Pattern::literal(std::string text)
{
    Pattern p;
    p.m_literal = std::move(text);
    return p;
}

Pattern Pattern::regex(const std::string& pattern, const std::string& file)
{
    std::string translated = translateOnigPattern(pattern);
    int err = 0;
    PCRE2_SIZE errOffset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &errOffset, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        throw InputError(file, "regex '" + pattern + "' does not compile: " + reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); // falls back to the interpreter when JIT is unavailable
    auto c = std::make_shared<Compiled>();
    c->code = code;
    Pattern p;
    p.m_re = std::move(c);
    return p;
}

std::vector<std::pair<size_t, size_t>> Pattern::findAll(std::string_view s) const
{
    std::vector<std::pair<size_t, size_t>> out;
    if (!m_re) {
        if (m_literal.empty())
            return out;
        for (size_t at = s.find(m_literal); at != std::string_view::npos; at = s.find(m_literal, at + m_literal.size()))
            out.emplace_back(at, at + m_literal.size());
        return out;
    }
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(m_re->code, nullptr), &pcre2_match_data_free);
    auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t lastEnd = 0;
    bool haveLast = false;
    size_t lastMatchEnd = 0;
    uint32_t jitOff = 0;
    while (lastEnd <= s.size()) {
        int rc = pcre2_match(m_re->code, subject, s.size(), lastEnd, PCRE2_NO_UTF_CHECK | jitOff, md.get(), nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !jitOff) {
            jitOff = PCRE2_NO_JIT;
            continue;
        }
        if (rc < 0)
            break; // no match (or a resource limit: treat the rest as unmatched)
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        size_t b = ov[0], e = ov[1];
        if (b == e && haveLast && lastMatchEnd == e) {
            // Step over one character so an empty match cannot repeat.
            size_t step = 1;
            while (lastEnd + step < s.size() && (static_cast<unsigned char>(s[lastEnd + step]) & 0xC0) == 0x80)
                ++step;
            lastEnd += step;
            continue;
        }
        lastEnd = e;
        haveLast = true;
        lastMatchEnd = e;
        out.emplace_back(b, e);
    }
    return out;
}

std::string Pattern::replaceAll(std::string_view s, std::string_view with) const
{
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : findAll(s)) {
        out.append(s.substr(prev, b - prev));
        out.append(with);
        prev = e;
    }
    out.append(s.substr(prev));
    return out;
}

} // namespace stowage::tok
