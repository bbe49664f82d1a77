// Chat templates: the lexer. jinja2's whitespace rules (trim_blocks,
// lstrip_blocks, "-" and "+" markers, one trailing newline dropped) are
// applied here, so the parser sees the text as it will be printed.
#include "chattemplate_internal.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

namespace stowage::jinja {

namespace {

class Lexer {
public:
    Lexer(const std::string& source, const std::string& path) : m_path(path)
    {
        // jinja2: \r\n and \r read as \n, and one trailing newline dropped (keep_trailing_newline=False).
        m_src.reserve(source.size());
        for (size_t i = 0; i < source.size(); ++i) {
            if (source[i] == '\r') {
                m_src += '\n';
                if (i + 1 < source.size() && source[i + 1] == '\n')
                    ++i;
            } else
                m_src += source[i];
        }
        if (!m_src.empty() && m_src.back() == '\n')
            m_src.pop_back();
    }

    std::vector<Tok> run()
    {
        const std::string& s = m_src;
        const size_t n = s.size();
        size_t pos = 0;
        while (pos < n) {
            size_t k = pos;
            while (true) {
                k = s.find('{', k);
                if (k == std::string::npos || k + 1 >= n) {
                    k = n;
                    break;
                }
                char c = s[k + 1];
                if (c == '{' || c == '%' || c == '#')
                    break;
                ++k;
            }
            std::string data = s.substr(pos, k - pos);
            if (k == n) {
                emitData(data);
                break;
            }
            const char kind = s[k + 1];
            const char mod = k + 2 < n ? s[k + 2] : 0;
            const bool minus = mod == '-';
            const bool plus = mod == '+' && kind != '{';
            if (minus) {
                size_t e = data.size();
                while (e > 0 && std::isspace(static_cast<unsigned char>(data[e - 1])))
                    --e;
                data.erase(e);
            } else if (kind != '{' && !plus) {
                // lstrip_blocks: spaces and tabs before a block or comment tag at the start of a line.
                size_t nl = data.rfind('\n');
                size_t lpos = nl == std::string::npos ? 0 : nl + 1;
                bool lineStart = nl != std::string::npos || pos == 0 || s[pos - 1] == '\n';
                if (lineStart && data.find_first_not_of(" \t", lpos) == std::string::npos)
                    data.erase(lpos);
            }
            emitData(data);
            m_line += int(std::count(s.begin() + long(pos), s.begin() + long(k), '\n'));
            size_t p = k + 2 + ((minus || plus) ? 1 : 0);
            if (kind == '#') {
                size_t e = s.find("#}", p);
                if (e == std::string::npos)
                    fail("a comment {# is not closed");
                bool endMinus = e > p && s[e - 1] == '-';
                bool endPlus = e > p && s[e - 1] == '+';
                m_line += int(std::count(s.begin() + long(p), s.begin() + long(e), '\n'));
                pos = e + 2;
                pos = afterTag(pos, endMinus, !endPlus);
                continue;
            }
            if (kind == '%' && isRaw(p)) {
                pos = raw(p);
                continue;
            }
            m_toks.push_back({kind == '{' ? T::VarBegin : T::BlockBegin, "", m_line});
            pos = tag(p, kind == '%');
        }
        m_toks.push_back({T::End, "", m_line});
        return std::move(m_toks);
    }

private:
    [[noreturn]] void fail(const std::string& what) const
    {
        throw InputError(m_path, "line " + std::to_string(m_line) + ": " + what);
    }

    void emitData(const std::string& d)
    {
        if (!d.empty())
            m_toks.push_back({T::Data, d, m_line});
    }

    // After a tag's end: "-" eats all whitespace, trim_blocks one newline.
    size_t afterTag(size_t pos, bool minus, bool trim)
    {
        const std::string& s = m_src;
        if (minus) {
            while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) {
                if (s[pos] == '\n')
                    ++m_line;
                ++pos;
            }
        } else if (trim && pos < s.size() && s[pos] == '\n') {
            ++m_line;
            ++pos;
        }
        return pos;
    }

    static bool isNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

    bool isRaw(size_t p) const
    {
        const std::string& s = m_src;
        while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p])))
            ++p;
        return s.compare(p, 3, "raw") == 0 && (p + 3 >= s.size() || !isNameChar(s[p + 3]));
    }

    size_t raw(size_t p)
    {
        const std::string& s = m_src;
        size_t close = s.find("%}", p);
        if (close == std::string::npos)
            fail("a {% raw %} tag is not closed");
        bool minusEnd = s[close - 1] == '-';
        size_t pos = afterTag(close + 2, minusEnd, true);
        for (size_t q = pos; (q = s.find("{%", q)) != std::string::npos; ++q) {
            size_t r = q + 2;
            bool minus = r < s.size() && s[r] == '-';
            if (r < s.size() && (s[r] == '-' || s[r] == '+'))
                ++r;
            while (r < s.size() && std::isspace(static_cast<unsigned char>(s[r])))
                ++r;
            if (s.compare(r, 6, "endraw") != 0)
                continue;
            r += 6;
            while (r < s.size() && std::isspace(static_cast<unsigned char>(s[r])))
                ++r;
            bool endMinus = r < s.size() && s[r] == '-';
            bool endPlus = r < s.size() && s[r] == '+';
            if (endMinus || endPlus)
                ++r;
            if (s.compare(r, 2, "%}") != 0)
                continue;
            std::string body = s.substr(pos, q - pos);
            if (minus) {
                while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back())))
                    body.pop_back();
            }
            emitData(body);
            m_line += int(std::count(s.begin() + long(pos), s.begin() + long(r), '\n'));
            return afterTag(r + 2, endMinus, !endPlus);
        }
        fail("a {% raw %} block has no {% endraw %}");
    }

    size_t tag(size_t p, bool block)
    {
        const std::string& s = m_src;
        const size_t n = s.size();
        std::vector<char> balance;
        while (true) {
            while (p < n && std::isspace(static_cast<unsigned char>(s[p]))) {
                if (s[p] == '\n')
                    ++m_line;
                ++p;
            }
            if (p >= n)
                fail(block ? "a {% tag is not closed" : "a {{ tag is not closed");
            if (balance.empty()) {
                const char* close = block ? "%}" : "}}";
                bool minus = s[p] == '-' && s.compare(p + 1, 2, close) == 0;
                bool plus = block && s[p] == '+' && s.compare(p + 1, 2, close) == 0;
                if (minus || plus || s.compare(p, 2, close) == 0) {
                    m_toks.push_back({block ? T::BlockEnd : T::VarEnd, "", m_line});
                    return afterTag(p + 2 + ((minus || plus) ? 1 : 0), minus, block && !plus);
                }
            }
            char c = s[p];
            if (c == '\'' || c == '"') {
                p = string(p);
                continue;
            }
            if (std::isdigit(static_cast<unsigned char>(c))) {
                p = number(p);
                continue;
            }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t e = p;
                while (e < n && isNameChar(s[e]))
                    ++e;
                m_toks.push_back({T::Name, s.substr(p, e - p), m_line});
                p = e;
                continue;
            }
            static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
            std::string op;
            for (const char* t : two)
                if (s.compare(p, 2, t) == 0)
                    op = t;
            if (op.empty()) {
                if (std::string("+-*/%~<>=.,:|()[]{}").find(c) == std::string::npos) {
                    if (c == '!' )
                        fail("'!' is not an operator (write 'not')");
                    fail(std::string("unexpected character '") + c + "'");
                }
                op = std::string(1, c);
            }
            if (op == "(" || op == "[" || op == "{") {
                balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
                if (balance.size() > size_t(kMaxNesting))
                    fail("brackets nested too deep");
            } else if (op == ")" || op == "]" || op == "}") {
                if (balance.empty() || balance.back() != op[0])
                    fail("unexpected '" + op + "'");
                balance.pop_back();
            }
            m_toks.push_back({T::Op, op, m_line});
            p += op.size();
        }
    }

    size_t string(size_t p)
    {
        const std::string& s = m_src;
        char q = s[p++];
        std::string out;
        while (true) {
            if (p >= s.size())
                fail("a string literal is not closed");
            char c = s[p++];
            if (c == q)
                break;
            if (c == '\n')
                ++m_line;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (p >= s.size())
                fail("a string literal is not closed");
            char e = s[p++];
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'v': out += '\v'; break;
            case 'a': out += '\a'; break;
            case '0': out += '\0'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\n': ++m_line; break;
            case 'x':
            case 'u':
            case 'U': {
                size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                if (p + len > s.size())
                    fail("a \\" + std::string(1, e) + " escape is cut short");
                int32_t cp = 0;
                for (size_t i = 0; i < len; ++i) {
                    char h = s[p + i];
                    if (!std::isxdigit(static_cast<unsigned char>(h)))
                        fail("a \\" + std::string(1, e) + " escape has a non-hex digit");
                    cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
                    if (cp > 0x10ffff)
                        fail("a \\U escape is past U+10FFFF");
                }
                p += len;
                out += encodeCp(cp);
                break;
            }
            default:
                out += '\\';
                out += e;
            }
        }
        m_toks.push_back({T::Str, out, m_line});
        return p;
    }

    size_t number(size_t p)
    {
        const std::string& s = m_src;
        size_t e = p;
        auto digits = [&] {
            while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '_'))
                ++e;
        };
        digits();
        bool isFloat = false;
        if (e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
            ++e;
            digits();
            isFloat = true;
        }
        if (e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
            size_t f = e + 1;
            if (f < s.size() && (s[f] == '+' || s[f] == '-'))
                ++f;
            if (f < s.size() && std::isdigit(static_cast<unsigned char>(s[f]))) {
                e = f;
                digits();
                isFloat = true;
            }
        }
        std::string text = s.substr(p, e - p);
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        Tok t{isFloat ? T::Float : T::Int, text, m_line};
        if (isFloat) {
            t.f = std::strtod(text.c_str(), nullptr);
        } else {
            auto r = std::from_chars(text.data(), text.data() + text.size(), t.i);
            if (r.ec != std::errc())
                fail("the integer " + text + " is too large");
        }
        m_toks.push_back(t);
        return e;
    }

    std::string m_src, m_path;
    std::vector<Tok> m_toks;
    int m_line = 1;
};

} // namespace

std::vector<Tok> lex(const std::string& source, const std::string& path)
{
    return Lexer(source, path).run();
}

} // namespace stowage::jinja
