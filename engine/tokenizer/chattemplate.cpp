// Chat templates: a lexer, a parser into an AST and an evaluator over JSON
// values for the subset of Jinja2 that chat templates use, with jinja2's
// whitespace rules (trim_blocks, lstrip_blocks, "-" and "+" markers, one
// trailing newline dropped) and Python's semantics for the values (truth,
// `+`, comparisons, str(), slicing by code point, string methods). What is not
// implemented is refused by name when the template is parsed (an unknown tag,
// filter or test) or when it is rendered (a method, an operand type).
#include "stowage/chattemplate.h"

#include "stowage/error.h"
#include "stowage/fileio.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_map>
#include <vector>

namespace stowage {

namespace {

using J = nlohmann::ordered_json;

// Bounds: a template is code from a download; it must not hang or eat memory.
constexpr size_t kMaxOutput = size_t(16) << 20;
constexpr uint64_t kMaxSteps = 2'000'000;
constexpr int kMaxNesting = 100;  // parser: nested expressions and blocks
constexpr int kMaxCallDepth = 32; // macro calls within calls
constexpr int64_t kMaxRange = 1'000'000;

// ---------------------------------------------------------------- UTF-8

std::vector<std::string> codePoints(const std::string& s)
{
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (i + n > s.size())
            n = 1;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

int32_t codeOf(const std::string& ch)
{
    utf8proc_int32_t cp = -1;
    utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(ch.data()), utf8proc_ssize_t(ch.size()), &cp);
    return cp;
}

std::string encodeCp(int32_t cp)
{
    if (!utf8proc_codepoint_valid(cp))
        cp = 0xfffd; // a lone surrogate from a \u escape: not UTF-8
    utf8proc_uint8_t buf[4];
    auto n = utf8proc_encode_char(cp, buf);
    return std::string(reinterpret_cast<char*>(buf), size_t(n));
}

// Python's str.isspace().
bool pySpace(int32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string mapCase(const std::string& s, bool upper)
{
    std::string out;
    for (const auto& ch : codePoints(s)) {
        int32_t c = codeOf(ch);
        out += c < 0 ? ch : encodeCp(upper ? utf8proc_toupper(c) : utf8proc_tolower(c));
    }
    return out;
}

// ---------------------------------------------------------------- Python formatting

std::string pyFloat(double d)
{
    if (std::isnan(d))
        return "nan";
    if (std::isinf(d))
        return d < 0 ? "-inf" : "inf";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string s(buf, r.ptr);
    std::string sign;
    if (s[0] == '-') {
        sign = "-";
        s.erase(0, 1);
    }
    size_t e = s.find('e');
    int exp = std::stoi(s.substr(e + 1));
    std::string digits = s.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp >= 0) {
            std::string ip = digits.substr(0, std::min(digits.size(), size_t(exp + 1)));
            ip.append(size_t(exp + 1) - ip.size(), '0');
            std::string fp = digits.size() > size_t(exp + 1) ? digits.substr(size_t(exp + 1)) : "0";
            out = ip + "." + fp;
        } else {
            out = "0." + std::string(size_t(-exp - 1), '0') + digits;
        }
        return sign + out;
    }
    std::string m = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    std::string es = std::to_string(std::abs(exp));
    if (es.size() < 2)
        es = "0" + es;
    return sign + m + "e" + (exp < 0 ? "-" : "+") + es;
}

std::string pyStrRepr(const std::string& s)
{
    bool hasSingle = s.find('\'') != std::string::npos, hasDouble = s.find('"') != std::string::npos;
    char q = hasSingle && !hasDouble ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == static_cast<unsigned char>(q))
            out += std::string("\\") + char(q);
        else if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (c < 0x20 || c == 0x7f) {
            char b[8];
            std::snprintf(b, sizeof b, "\\x%02x", c);
            out += b;
        } else
            out += char(c);
    }
    return out + q;
}

std::string pyRepr(const J& v);

std::string pyStr(const J& v)
{
    switch (v.type()) {
    case J::value_t::null:
        return "None";
    case J::value_t::boolean:
        return v.get<bool>() ? "True" : "False";
    case J::value_t::number_integer:
        return std::to_string(v.get<int64_t>());
    case J::value_t::number_unsigned:
        return std::to_string(v.get<uint64_t>());
    case J::value_t::number_float:
        return pyFloat(v.get<double>());
    case J::value_t::string:
        return v.get<std::string>();
    default:
        return pyRepr(v);
    }
}

std::string pyRepr(const J& v)
{
    if (v.is_string())
        return pyStrRepr(v.get<std::string>());
    if (v.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i)
            out += (i ? ", " : "") + pyRepr(v[i]);
        return out + "]";
    }
    if (v.is_object()) {
        std::string out = "{";
        bool first = true;
        for (auto it = v.begin(); it != v.end(); ++it) {
            out += (first ? "" : ", ") + pyStrRepr(it.key()) + ": " + pyRepr(it.value());
            first = false;
        }
        return out + "}";
    }
    return pyStr(v);
}

std::string jsonString(const std::string& s, bool ensureAscii)
{
    std::string out = "\"";
    auto cps = codePoints(s);
    for (const auto& ch : cps) {
        unsigned char c = static_cast<unsigned char>(ch[0]);
        if (ch.size() == 1) {
            switch (c) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
            }
            if (c < 0x20 || (ensureAscii && c >= 0x7f)) {
                char b[8];
                std::snprintf(b, sizeof b, "\\u%04x", c);
                out += b;
                continue;
            }
            out += ch;
        } else if (ensureAscii) {
            int32_t cp = codeOf(ch);
            char b[16];
            if (cp < 0)
                cp = 0xfffd;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else
                std::snprintf(b, sizeof b, "\\u%04x", cp);
            out += b;
        } else
            out += ch;
    }
    return out + "\"";
}

struct DumpOptions {
    std::optional<std::string> indent;
    std::string itemSep = ", ", keySep = ": ";
    bool sortKeys = false, ensureAscii = false;
};

// Python's json.dumps.
void pyDump(const J& v, const DumpOptions& o, int level, std::string& out)
{
    auto newline = [&](int l) {
        out += "\n";
        for (int i = 0; i < l; ++i)
            out += *o.indent;
    };
    if (v.is_array()) {
        if (v.empty()) {
            out += "[]";
            return;
        }
        out += "[";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i)
                out += o.itemSep;
            if (o.indent)
                newline(level + 1);
            pyDump(v[i], o, level + 1, out);
        }
        if (o.indent)
            newline(level);
        out += "]";
    } else if (v.is_object()) {
        if (v.empty()) {
            out += "{}";
            return;
        }
        std::vector<std::string> keys;
        for (auto it = v.begin(); it != v.end(); ++it)
            keys.push_back(it.key());
        if (o.sortKeys)
            std::sort(keys.begin(), keys.end());
        out += "{";
        for (size_t i = 0; i < keys.size(); ++i) {
            if (i)
                out += o.itemSep;
            if (o.indent)
                newline(level + 1);
            out += jsonString(keys[i], o.ensureAscii) + o.keySep;
            pyDump(v.at(keys[i]), o, level + 1, out);
        }
        if (o.indent)
            newline(level);
        out += "}";
    } else if (v.is_string())
        out += jsonString(v.get<std::string>(), o.ensureAscii);
    else if (v.is_null())
        out += "null";
    else if (v.is_boolean())
        out += v.get<bool>() ? "true" : "false";
    else if (v.is_number_float()) {
        double d = v.get<double>();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : pyFloat(d);
    } else
        out += pyStr(v);
}

// ---------------------------------------------------------------- lexer

enum class T { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, End };

struct Tok {
    T type;
    std::string s;
    int line = 1;
    int64_t i = 0;
    double f = 0;
};

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

// ---------------------------------------------------------------- AST

struct Expr;
using EP = std::unique_ptr<Expr>;
struct Expr {
    enum K { Lit, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not, Bin, And, Or, Cond, Cmp,
             Concat, Block } k;
    int line = 0;
    J lit;
    std::string name;
    std::vector<EP> args;
    std::vector<std::pair<std::string, EP>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;
};

struct Stmt;
using SP = std::unique_ptr<Stmt>;
using Body = std::vector<SP>;
struct Stmt {
    enum K { Text, Out, If, For, Set, SetBlock, Macro, Break, Continue, FilterBlock } k;
    int line = 0;
    std::string text;                          // Text; Macro: its name
    EP expr;                                   // Out, For (iterable), Set (value), Set/FilterBlock (filters)
    EP cond;                                   // For: the "if" filter
    std::vector<std::pair<EP, Body>> branches; // If (the else branch has no condition)
    std::vector<std::string> targets;          // For, Set, SetBlock; Macro: its parameters
    std::string attr;                          // Set: ns.attr
    std::vector<EP> defaults;                  // Macro: one per parameter (null: none)
    Body body, elseBody;
};

const std::vector<std::string> kFilters = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper", "wordcount"};
const std::vector<std::string> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float", "ge",
    "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas",
    "sequence", "string", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};

bool known(const std::vector<std::string>& list, const std::string& name)
{
    return std::find(list.begin(), list.end(), name) != list.end();
}

// ---------------------------------------------------------------- parser

class Parser {
public:
    Parser(std::vector<Tok> toks, const std::string& path) : m_t(std::move(toks)), m_path(path) {}

    Body parseTemplate()
    {
        std::string end;
        Body b = parseBody({}, end);
        return b;
    }

private:
    [[noreturn]] void fail(const std::string& what, int line = -1) const
    {
        throw InputError(m_path, "line " + std::to_string(line < 0 ? cur().line : line) + ": " + what);
    }
    const Tok& cur() const { return m_t[m_p]; }
    const Tok& peek(size_t ahead = 1) const { return m_t[std::min(m_p + ahead, m_t.size() - 1)]; }
    bool isOp(const char* op) const { return cur().type == T::Op && cur().s == op; }
    bool isName(const char* n) const { return cur().type == T::Name && cur().s == n; }
    Tok next()
    {
        Tok t = m_t[m_p];
        if (m_p + 1 < m_t.size())
            ++m_p;
        return t;
    }
    void expectOp(const char* op)
    {
        if (!isOp(op))
            fail(std::string("expected '") + op + "', found " + describe(cur()));
        next();
    }
    std::string expectName()
    {
        if (cur().type != T::Name)
            fail("expected a name, found " + describe(cur()));
        return next().s;
    }
    void expectBlockEnd()
    {
        if (cur().type != T::BlockEnd)
            fail("expected the end of the tag, found " + describe(cur()));
        next();
    }
    static std::string describe(const Tok& t)
    {
        switch (t.type) {
        case T::Name: return "'" + t.s + "'";
        case T::Op: return "'" + t.s + "'";
        case T::Str: return "a string";
        case T::Int:
        case T::Float: return "a number";
        case T::VarEnd: return "'}}'";
        case T::BlockEnd: return "'%}'";
        case T::End: return "the end of the template";
        default: return "text";
        }
    }

    struct Depth {
        Parser& p;
        explicit Depth(Parser& parser) : p(parser)
        {
            if (++p.m_depth > kMaxNesting)
                p.fail("nested too deep (more than " + std::to_string(kMaxNesting) + " levels)");
        }
        ~Depth() { --p.m_depth; }
    };

    // Statements until one of `ends` (a block tag name); its name goes to `end`.
    Body parseBody(const std::vector<std::string>& ends, std::string& end)
    {
        Depth d(*this);
        Body body;
        while (true) {
            const Tok& t = cur();
            if (t.type == T::End) {
                if (!ends.empty())
                    fail("the template ends inside a block: expected {% " + ends.back() + " %}");
                return body;
            }
            if (t.type == T::Data) {
                auto s = std::make_unique<Stmt>();
                s->k = Stmt::Text;
                s->line = t.line;
                s->text = t.s;
                body.push_back(std::move(s));
                next();
            } else if (t.type == T::VarBegin) {
                next();
                auto s = std::make_unique<Stmt>();
                s->k = Stmt::Out;
                s->line = t.line;
                s->expr = parseTuple(true);
                if (cur().type != T::VarEnd)
                    fail("expected '}}', found " + describe(cur()));
                next();
                body.push_back(std::move(s));
            } else if (t.type == T::BlockBegin) {
                next();
                if (cur().type != T::Name)
                    fail("expected a tag name after '{%', found " + describe(cur()));
                std::string name = cur().s;
                if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
                    next();
                    end = name;
                    return body;
                }
                body.push_back(parseStatement());
            } else {
                fail("unexpected " + describe(t));
            }
        }
    }

    SP parseStatement()
    {
        const int line = cur().line;
        const std::string name = next().s;
        auto s = std::make_unique<Stmt>();
        s->line = line;
        std::string end;
        if (name == "if") {
            s->k = Stmt::If;
            EP c = parseTuple(true);
            expectBlockEnd();
            while (true) {
                Body b = parseBody({"elif", "else", "endif"}, end);
                s->branches.emplace_back(std::move(c), std::move(b));
                if (end == "elif") {
                    c = parseTuple(true);
                    expectBlockEnd();
                } else if (end == "else") {
                    expectBlockEnd();
                    Body eb = parseBody({"endif"}, end);
                    s->branches.emplace_back(nullptr, std::move(eb));
                    expectBlockEnd();
                    break;
                } else {
                    expectBlockEnd();
                    break;
                }
            }
        } else if (name == "for") {
            s->k = Stmt::For;
            s->targets = parseTargets();
            if (!isName("in"))
                fail("expected 'in' in the for tag, found " + describe(cur()));
            next();
            s->expr = parseTuple(false);
            if (isName("if")) {
                next();
                s->cond = parseExpression(true);
            }
            if (isName("recursive"))
                fail("recursive for loops are not supported");
            expectBlockEnd();
            ++m_loops;
            s->body = parseBody({"else", "endfor"}, end);
            --m_loops;
            expectBlockEnd();
            if (end == "else") {
                s->elseBody = parseBody({"endfor"}, end);
                expectBlockEnd();
            }
        } else if (name == "set") {
            std::string first = expectName();
            if (isOp(".")) {
                next();
                s->attr = expectName();
                s->targets = {first};
                expectOp("=");
                s->k = Stmt::Set;
                s->expr = parseTuple(true);
                expectBlockEnd();
            } else {
                s->targets = {first};
                while (isOp(",")) {
                    next();
                    s->targets.push_back(expectName());
                }
                if (isOp("=")) {
                    next();
                    s->k = Stmt::Set;
                    s->expr = parseTuple(true);
                    expectBlockEnd();
                } else {
                    if (s->targets.size() != 1)
                        fail("a {% set %} block assigns one name");
                    s->k = Stmt::SetBlock;
                    s->expr = parseBlockFilters(false);
                    expectBlockEnd();
                    s->body = parseBody({"endset"}, end);
                    expectBlockEnd();
                }
            }
        } else if (name == "macro") {
            s->k = Stmt::Macro;
            s->text = expectName();
            const int loops = m_loops;
            m_loops = 0; // a loop around the macro is not the macro's
            expectOp("(");
            while (!isOp(")")) {
                s->targets.push_back(expectName());
                if (isOp("=")) {
                    next();
                    s->defaults.push_back(parseExpression(true));
                } else
                    s->defaults.push_back(nullptr);
                if (!isOp(")"))
                    expectOp(",");
            }
            next();
            expectBlockEnd();
            s->body = parseBody({"endmacro"}, end);
            m_loops = loops;
            if (cur().type == T::Name && cur().s == s->text)
                next();
            expectBlockEnd();
        } else if (name == "break" || name == "continue") {
            if (m_loops == 0)
                fail("{% " + name + " %} outside a for loop");
            s->k = name == "break" ? Stmt::Break : Stmt::Continue;
            expectBlockEnd();
        } else if (name == "filter") {
            s->k = Stmt::FilterBlock;
            s->expr = parseBlockFilters(true);
            expectBlockEnd();
            s->body = parseBody({"endfilter"}, end);
            expectBlockEnd();
        } else if (name == "generation") {
            // transformers' AssistantTracker: the body renders as it is.
            s->k = Stmt::If;
            auto always = std::make_unique<Expr>();
            always->k = Expr::Lit;
            always->lit = true;
            expectBlockEnd();
            Body b = parseBody({"endgeneration"}, end);
            expectBlockEnd();
            s->branches.emplace_back(std::move(always), std::move(b));
        } else {
            fail("the tag {% " + name + " %} is not supported");
        }
        return s;
    }

    // For `for` targets: a name, or names separated by commas (parentheses allowed).
    std::vector<std::string> parseTargets()
    {
        std::vector<std::string> out;
        bool paren = isOp("(");
        if (paren)
            next();
        out.push_back(expectName());
        while (isOp(",")) {
            next();
            out.push_back(expectName());
        }
        if (paren)
            expectOp(")");
        return out;
    }

    // `{% filter name | other %}` (leadingName) or `{% set x | name %}`: a
    // chain of filters over the block's rendered text.
    EP parseBlockFilters(bool leadingName)
    {
        auto e = std::make_unique<Expr>();
        e->k = Expr::Block;
        e->line = cur().line;
        if (leadingName)
            e = parseFilter(std::move(e));
        while (isOp("|")) {
            next();
            e = parseFilter(std::move(e));
        }
        return e;
    }

    EP make(Expr::K k, int line)
    {
        auto e = std::make_unique<Expr>();
        e->k = k;
        e->line = line;
        return e;
    }

    EP parseTuple(bool condexpr)
    {
        const int line = cur().line;
        EP first = parseExpression(condexpr);
        if (!isOp(","))
            return first;
        EP t = make(Expr::Tuple, line);
        t->args.push_back(std::move(first));
        while (isOp(",")) {
            next();
            if (cur().type == T::VarEnd || cur().type == T::BlockEnd || isOp(")"))
                break;
            t->args.push_back(parseExpression(condexpr));
        }
        return t;
    }

    EP parseExpression(bool condexpr)
    {
        Depth d(*this);
        EP e = parseOr();
        if (!condexpr)
            return e;
        while (isName("if")) {
            const int line = next().line;
            EP c = parseOr();
            EP other;
            if (isName("else")) {
                next();
                other = parseExpression(true);
            }
            EP ce = make(Expr::Cond, line);
            ce->args.push_back(std::move(e));
            ce->args.push_back(std::move(c));
            ce->args.push_back(std::move(other));
            e = std::move(ce);
        }
        return e;
    }

    EP binary(Expr::K k, EP l, EP r, int line, const std::string& op = {})
    {
        EP e = make(k, line);
        e->name = op;
        e->args.push_back(std::move(l));
        e->args.push_back(std::move(r));
        return e;
    }

    EP parseOr()
    {
        EP l = parseAnd();
        while (isName("or")) {
            int line = next().line;
            l = binary(Expr::Or, std::move(l), parseAnd(), line);
        }
        return l;
    }

    EP parseAnd()
    {
        EP l = parseNot();
        while (isName("and")) {
            int line = next().line;
            l = binary(Expr::And, std::move(l), parseNot(), line);
        }
        return l;
    }

    EP parseNot()
    {
        if (isName("not")) {
            Depth d(*this);
            EP e = make(Expr::Not, next().line);
            e->args.push_back(parseNot());
            return e;
        }
        return parseCompare();
    }

    EP parseCompare()
    {
        const int line = cur().line;
        EP first = parseMath1();
        EP cmp;
        while (true) {
            std::string op;
            if (cur().type == T::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == "<=" ||
                                        cur().s == ">" || cur().s == ">=")) {
                op = next().s;
            } else if (isName("in")) {
                next();
                op = "in";
            } else if (isName("not") && peek().type == T::Name && peek().s == "in") {
                next();
                next();
                op = "not in";
            } else
                break;
            if (!cmp) {
                cmp = make(Expr::Cmp, line);
                cmp->args.push_back(std::move(first));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parseMath1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }

    EP parseMath1()
    {
        EP l = parseConcat();
        while (isOp("+") || isOp("-")) {
            Tok t = next();
            l = binary(Expr::Bin, std::move(l), parseConcat(), t.line, t.s);
        }
        return l;
    }

    EP parseConcat()
    {
        const int line = cur().line;
        EP first = parseMath2();
        if (!isOp("~"))
            return first;
        EP c = make(Expr::Concat, line);
        c->args.push_back(std::move(first));
        while (isOp("~")) {
            next();
            c->args.push_back(parseMath2());
        }
        return c;
    }

    EP parseMath2()
    {
        EP l = parsePow();
        while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
            Tok t = next();
            l = binary(Expr::Bin, std::move(l), parsePow(), t.line, t.s);
        }
        return l;
    }

    EP parsePow()
    {
        EP l = parseUnary(true);
        while (isOp("**")) {
            Tok t = next();
            l = binary(Expr::Bin, std::move(l), parseUnary(true), t.line, t.s);
        }
        return l;
    }

    EP parseUnary(bool withFilter)
    {
        Depth d(*this);
        EP node;
        if (isOp("-") || isOp("+")) {
            Tok t = next();
            node = make(t.s == "-" ? Expr::Neg : Expr::Pos, t.line);
            node->args.push_back(parseUnary(false));
        } else
            node = parsePrimary();
        node = parsePostfix(std::move(node));
        if (withFilter)
            node = parseFilterExpr(std::move(node));
        return node;
    }

    EP parsePrimary()
    {
        const Tok& t = cur();
        const int line = t.line;
        if (t.type == T::Name) {
            std::string n = next().s;
            EP e = make(Expr::Lit, line);
            if (n == "true" || n == "True")
                e->lit = true;
            else if (n == "false" || n == "False")
                e->lit = false;
            else if (n == "none" || n == "None")
                e->lit = nullptr;
            else {
                e->k = Expr::Name;
                e->name = n;
            }
            return e;
        }
        if (t.type == T::Str) {
            std::string s = next().s;
            while (cur().type == T::Str)
                s += next().s; // adjacent literals are one string
            EP e = make(Expr::Lit, line);
            e->lit = s;
            return e;
        }
        if (t.type == T::Int || t.type == T::Float) {
            Tok n = next();
            EP e = make(Expr::Lit, line);
            if (n.type == T::Int)
                e->lit = n.i;
            else
                e->lit = n.f;
            return e;
        }
        if (isOp("(")) {
            next();
            if (isOp(")")) {
                next();
                return make(Expr::Tuple, line);
            }
            EP e = parseTuple(true);
            expectOp(")");
            return e;
        }
        if (isOp("[")) {
            next();
            EP e = make(Expr::List, line);
            while (!isOp("]")) {
                e->args.push_back(parseExpression(true));
                if (!isOp("]"))
                    expectOp(",");
            }
            next();
            return e;
        }
        if (isOp("{")) {
            next();
            EP e = make(Expr::Dict, line);
            while (!isOp("}")) {
                e->args.push_back(parseExpression(true));
                expectOp(":");
                e->args.push_back(parseExpression(true));
                if (!isOp("}"))
                    expectOp(",");
            }
            next();
            return e;
        }
        fail("unexpected " + describe(t) + " in an expression");
    }

    EP parsePostfix(EP node)
    {
        while (true) {
            if (isOp(".")) {
                const int line = next().line;
                if (cur().type == T::Name) {
                    EP e = make(Expr::Attr, line);
                    e->name = next().s;
                    e->args.push_back(std::move(node));
                    node = std::move(e);
                } else if (cur().type == T::Int) {
                    EP e = make(Expr::Item, line);
                    e->args.push_back(std::move(node));
                    EP idx = make(Expr::Lit, line);
                    idx->lit = next().i;
                    e->args.push_back(std::move(idx));
                    node = std::move(e);
                } else
                    fail("expected a name after '.', found " + describe(cur()));
            } else if (isOp("[")) {
                const int line = next().line;
                node = parseSubscript(std::move(node), line);
            } else if (isOp("(")) {
                node = parseCall(std::move(node));
            } else
                return node;
        }
    }

    EP parseSubscript(EP node, int line)
    {
        EP parts[3];
        bool slice = false;
        for (int i = 0; i < 3; ++i) {
            if (!isOp(":") && !isOp("]"))
                parts[i] = parseExpression(true);
            if (isOp(":") && i < 2) {
                slice = true;
                next();
                continue;
            }
            break;
        }
        expectOp("]");
        if (!slice) {
            if (!parts[0])
                fail("an empty subscript []", line);
            EP e = make(Expr::Item, line);
            e->args.push_back(std::move(node));
            e->args.push_back(std::move(parts[0]));
            return e;
        }
        EP e = make(Expr::Slice, line);
        e->args.push_back(std::move(node));
        for (auto& p : parts)
            e->args.push_back(std::move(p));
        return e;
    }

    void parseCallArgs(Expr& e)
    {
        expectOp("(");
        while (!isOp(")")) {
            if (isOp("*") || isOp("**"))
                fail("*args and **kwargs in calls are not supported");
            if (cur().type == T::Name && peek().type == T::Op && peek().s == "=") {
                std::string k = next().s;
                next();
                e.kwargs.emplace_back(k, parseExpression(true));
            } else {
                if (!e.kwargs.empty())
                    fail("a positional argument after a keyword argument");
                e.args.push_back(parseExpression(true));
            }
            if (!isOp(")"))
                expectOp(",");
        }
        next();
    }

    EP parseCall(EP node)
    {
        EP e = make(Expr::Call, cur().line);
        e->args.push_back(std::move(node));
        parseCallArgs(*e);
        return e;
    }

    EP parseFilter(EP node)
    {
        const int line = cur().line;
        std::string name = expectName();
        if (!known(kFilters, name))
            fail("the filter '" + name + "' is not supported", line);
        EP e = make(Expr::Filter, line);
        e->name = name;
        e->args.push_back(std::move(node));
        if (isOp("("))
            parseCallArgs(*e);
        return e;
    }

    EP parseFilterExpr(EP node)
    {
        while (true) {
            if (isOp("|")) {
                next();
                node = parseFilter(std::move(node));
            } else if (isName("is")) {
                const int line = next().line;
                EP e = make(Expr::Test, line);
                if (isName("not")) {
                    next();
                    e->negated = true;
                }
                if (cur().type == T::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == "<=" ||
                                            cur().s == ">" || cur().s == ">="))
                    e->name = next().s;
                else
                    e->name = expectName();
                if (!known(kTests, e->name))
                    fail("the test '" + e->name + "' is not supported", line);
                e->args.push_back(std::move(node));
                if (isOp("(")) {
                    parseCallArgs(*e);
                } else if ((cur().type == T::Name || cur().type == T::Str || cur().type == T::Int ||
                            cur().type == T::Float || isOp("[") || isOp("{")) &&
                           !isName("else") && !isName("or") && !isName("and")) {
                    if (isName("is"))
                        fail("'is' cannot follow a test");
                    EP arg = parsePrimary();
                    e->args.push_back(parsePostfix(std::move(arg)));
                }
                node = std::move(e);
            } else if (isOp("(")) {
                node = parseCall(std::move(node));
            } else
                return node;
        }
    }

    std::vector<Tok> m_t;
    size_t m_p = 0;
    std::string m_path;
    int m_depth = 0;
    int m_loops = 0; // for bodies being parsed: where break and continue may stand
};

// ---------------------------------------------------------------- values

struct Namespace;
struct Callable;
struct LoopState;

struct Value {
    enum Kind : uint8_t { Undef, Data, Ns, Fn, Loop } kind = Undef;
    J j;
    std::shared_ptr<Namespace> ns;
    std::shared_ptr<const LoopState> loop;
    std::shared_ptr<const Callable> fn;
    std::string name; // Undef: the name that was not found

    static Value data(J v)
    {
        Value r;
        r.kind = Data;
        r.j = std::move(v);
        return r;
    }
    static Value undefined(std::string n)
    {
        Value r;
        r.name = std::move(n);
        return r;
    }
    bool isStr() const { return kind == Data && j.is_string(); }
    bool isNum() const { return kind == Data && j.is_number(); }
    bool isInt() const { return kind == Data && (j.is_number_integer() || j.is_boolean()); }
};

struct Namespace {
    std::map<std::string, Value> attrs;
};

// `loop` inside a for: its attributes are computed when read.
struct LoopState {
    std::shared_ptr<const std::vector<Value>> items;
    int64_t index = 0;
};

struct Callable {
    enum K { Builtin, Method, Macro } k;
    std::string name;
    J self; // Method: the string, dict or list it is bound to
    const Stmt* macro = nullptr;
};

} // namespace

struct ChatTemplate::Impl {
    std::string path;
    Body body;
};

namespace {

enum class Flow { Normal, Break, Continue };

class Renderer {
public:
    Renderer(const ChatTemplate::Impl& t, const J& context) : m_t(t)
    {
        m_scopes.emplace_back();
        for (auto it = context.begin(); it != context.end(); ++it)
            m_scopes[0][it.key()] = Value::data(it.value());
    }

    std::string run()
    {
        std::string out;
        exec(m_t.body, out);
        return out;
    }

private:
    using Scope = std::unordered_map<std::string, Value>;

    [[noreturn]] void fail(int line, const std::string& what) const
    {
        throw InputError(m_t.path, "line " + std::to_string(line) + ": " + what);
    }

    void step(int line)
    {
        if (++m_steps > kMaxSteps)
            fail(line, "rendering takes more than " + std::to_string(kMaxSteps) + " steps (a loop that does not end?)");
    }

    void emit(std::string& out, const std::string& s, int line)
    {
        if (out.size() + s.size() > kMaxOutput)
            fail(line, "the rendered text passes " + std::to_string(kMaxOutput >> 20) + " MiB");
        out += s;
    }

    // ---- conversions

    std::string str(const Value& v) const
    {
        switch (v.kind) {
        case Value::Undef: return "";
        case Value::Data: return pyStr(v.j);
        case Value::Ns: return "<Namespace>";
        case Value::Fn: return "<function " + v.fn->name + ">";
        case Value::Loop: return "<LoopContext " + std::to_string(v.loop->index + 1) + "/" +
                                 std::to_string(v.loop->items->size()) + ">";
        }
        return "";
    }

    J toJson(const Value& v, int line) const
    {
        if (v.kind == Value::Data)
            return v.j;
        if (v.kind == Value::Undef)
            fail(line, "'" + v.name + "' is undefined");
        fail(line, "a namespace or function cannot be stored in a list or dict");
    }

    static bool truthy(const Value& v)
    {
        switch (v.kind) {
        case Value::Undef: return false;
        case Value::Ns:
        case Value::Fn:
        case Value::Loop: return true;
        case Value::Data: break;
        }
        const J& j = v.j;
        switch (j.type()) {
        case J::value_t::null: return false;
        case J::value_t::boolean: return j.get<bool>();
        case J::value_t::number_integer: return j.get<int64_t>() != 0;
        case J::value_t::number_unsigned: return j.get<uint64_t>() != 0;
        case J::value_t::number_float: return j.get<double>() != 0;
        case J::value_t::string: return !j.get_ref<const std::string&>().empty();
        case J::value_t::array:
        case J::value_t::object: return !j.empty();
        default: return true;
        }
    }

    static std::string typeName(const Value& v)
    {
        switch (v.kind) {
        case Value::Undef: return "undefined";
        case Value::Ns: return "namespace";
        case Value::Fn: return "function";
        case Value::Loop: return "loop";
        case Value::Data: break;
        }
        switch (v.j.type()) {
        case J::value_t::null: return "NoneType";
        case J::value_t::boolean: return "bool";
        case J::value_t::number_integer:
        case J::value_t::number_unsigned: return "int";
        case J::value_t::number_float: return "float";
        case J::value_t::string: return "str";
        case J::value_t::array: return "list";
        case J::value_t::object: return "dict";
        default: return "value";
        }
    }

    static double num(const J& j)
    {
        if (j.is_boolean())
            return j.get<bool>() ? 1 : 0;
        return j.get<double>();
    }
    static int64_t inum(const J& j)
    {
        if (j.is_boolean())
            return j.get<bool>() ? 1 : 0;
        if (j.is_number_unsigned())
            return int64_t(j.get<uint64_t>());
        return j.get<int64_t>();
    }
    static bool numeric(const J& j) { return j.is_number() || j.is_boolean(); }
    static bool integral(const J& j) { return j.is_number_integer() || j.is_boolean(); }

    static bool equal(const Value& a, const Value& b)
    {
        if (a.kind != b.kind)
            return false;
        if (a.kind == Value::Undef)
            return true;
        if (a.kind == Value::Ns)
            return a.ns == b.ns;
        if (a.kind == Value::Fn)
            return a.fn == b.fn;
        return jeq(a.j, b.j);
    }
    static bool jeq(const J& a, const J& b)
    {
        if (numeric(a) && numeric(b))
            return integral(a) && integral(b) ? inum(a) == inum(b) : num(a) == num(b);
        if (a.type() != b.type())
            return false;
        if (a.is_array()) {
            if (a.size() != b.size())
                return false;
            for (size_t i = 0; i < a.size(); ++i)
                if (!jeq(a[i], b[i]))
                    return false;
            return true;
        }
        if (a.is_object()) {
            if (a.size() != b.size())
                return false;
            for (auto it = a.begin(); it != a.end(); ++it) {
                auto f = b.find(it.key());
                if (f == b.end() || !jeq(it.value(), *f))
                    return false;
            }
            return true;
        }
        return a == b;
    }

    // <0, 0, >0 as Python orders them; fails for types Python cannot order.
    int order(const Value& a, const Value& b, int line) const
    {
        if (a.kind == Value::Data && b.kind == Value::Data) {
            const J &x = a.j, &y = b.j;
            if (numeric(x) && numeric(y)) {
                if (integral(x) && integral(y))
                    return inum(x) < inum(y) ? -1 : inum(x) > inum(y);
                double p = num(x), q = num(y);
                return p < q ? -1 : p > q;
            }
            if (x.is_string() && y.is_string())
                return x.get_ref<const std::string&>().compare(y.get_ref<const std::string&>());
            if (x.is_array() && y.is_array()) {
                for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
                    if (jeq(x[i], y[i]))
                        continue;
                    return order(Value::data(x[i]), Value::data(y[i]), line);
                }
                return x.size() < y.size() ? -1 : x.size() > y.size();
            }
        }
        fail(line, "'<' is not supported between " + typeName(a) + " and " + typeName(b));
    }

    bool contains(const Value& hay, const Value& needle, int line) const
    {
        if (hay.kind == Value::Undef)
            return false;
        if (hay.kind != Value::Data)
            fail(line, "'in' needs a string, list or dict on its right, not " + typeName(hay));
        if (hay.j.is_string()) {
            if (!needle.isStr())
                fail(line, "'in <string>' needs a string on its left, not " + typeName(needle));
            return hay.j.get_ref<const std::string&>().find(needle.j.get_ref<const std::string&>()) !=
                   std::string::npos;
        }
        if (hay.j.is_array()) {
            for (const auto& e : hay.j)
                if (equal(Value::data(e), needle))
                    return true;
            return false;
        }
        if (hay.j.is_object())
            return needle.isStr() && hay.j.contains(needle.j.get<std::string>());
        fail(line, "'in' needs a string, list or dict on its right, not " + typeName(hay));
    }

    std::vector<Value> iterate(const Value& v, int line) const
    {
        std::vector<Value> out;
        if (v.kind == Value::Undef)
            return out;
        if (v.kind != Value::Data)
            fail(line, "a " + typeName(v) + " cannot be iterated");
        if (v.j.is_array()) {
            for (const auto& e : v.j)
                out.push_back(Value::data(e));
        } else if (v.j.is_object()) {
            for (auto it = v.j.begin(); it != v.j.end(); ++it)
                out.push_back(Value::data(it.key()));
        } else if (v.j.is_string()) {
            for (auto& c : codePoints(v.j.get<std::string>()))
                out.push_back(Value::data(c));
        } else
            fail(line, "a " + typeName(v) + " cannot be iterated");
        return out;
    }

    J listOf(const std::vector<Value>& items, int line) const
    {
        J a = J::array();
        for (const auto& i : items)
            a.push_back(toJson(i, line));
        return a;
    }

    int64_t length(const Value& v, int line) const
    {
        if (v.kind == Value::Undef)
            return 0;
        if (v.kind == Value::Data) {
            if (v.j.is_string())
                return int64_t(codePoints(v.j.get<std::string>()).size());
            if (v.j.is_array() || v.j.is_object())
                return int64_t(v.j.size());
        }
        fail(line, "a " + typeName(v) + " has no length");
    }

    // ---- lookups

    Value lookup(const std::string& name) const
    {
        for (auto it = m_scopes.rbegin(); it != m_scopes.rend(); ++it) {
            auto f = it->find(name);
            if (f != it->end())
                return f->second;
        }
        static const char* builtins[] = {"namespace", "range", "raise_exception", "strftime_now", "dict"};
        for (const char* b : builtins)
            if (name == b) {
                Value v;
                v.kind = Value::Fn;
                v.fn = std::make_shared<Callable>(Callable{Callable::Builtin, name, {}, nullptr});
                return v;
            }
        return Value::undefined(name);
    }

    static bool isStringMethod(const std::string& n)
    {
        static const char* m[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
                                  "lower", "upper", "replace", "title", "capitalize", "find", "rfind", "count",
                                  "join", "splitlines", "isdigit", "isspace", "isalpha", "isalnum", "islower",
                                  "isupper"};
        return std::any_of(std::begin(m), std::end(m), [&](const char* x) { return n == x; });
    }
    static bool isDictMethod(const std::string& n)
    {
        return n == "items" || n == "keys" || n == "values" || n == "get";
    }

    Value bound(const J& self, const std::string& name) const
    {
        Value v;
        v.kind = Value::Fn;
        v.fn = std::make_shared<Callable>(Callable{Callable::Method, name, self, nullptr});
        return v;
    }

    Value getAttr(const Value& obj, const std::string& name, int line) const
    {
        if (obj.kind == Value::Undef)
            fail(line, "'" + obj.name + "' is undefined (reading its attribute '" + name + "')");
        if (obj.kind == Value::Ns) {
            auto f = obj.ns->attrs.find(name);
            return f == obj.ns->attrs.end() ? Value::undefined(name) : f->second;
        }
        if (obj.kind == Value::Fn)
            return Value::undefined(name);
        if (obj.kind == Value::Loop) {
            const auto& items = *obj.loop->items;
            const int64_t i = obj.loop->index, n = int64_t(items.size());
            if (name == "index0")
                return Value::data(i);
            if (name == "index")
                return Value::data(i + 1);
            if (name == "revindex")
                return Value::data(n - i);
            if (name == "revindex0")
                return Value::data(n - i - 1);
            if (name == "first")
                return Value::data(i == 0);
            if (name == "last")
                return Value::data(i == n - 1);
            if (name == "length")
                return Value::data(n);
            if (name == "depth")
                return Value::data(1);
            if (name == "depth0")
                return Value::data(0);
            if (name == "previtem" && i > 0)
                return items[size_t(i - 1)];
            if (name == "nextitem" && i + 1 < n)
                return items[size_t(i + 1)];
            return Value::undefined("loop." + name);
        }
        const J& j = obj.j;
        if (j.is_object()) {
            if (isDictMethod(name))
                return bound(j, name);
            auto f = j.find(name);
            return f == j.end() ? Value::undefined(name) : Value::data(*f);
        }
        if (j.is_string() && isStringMethod(name))
            return bound(j, name);
        return Value::undefined(name);
    }

    static int64_t normIndex(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

    Value getItem(const Value& obj, const Value& key, int line) const
    {
        if (obj.kind == Value::Undef)
            fail(line, "'" + obj.name + "' is undefined (reading an item of it)");
        if (obj.kind == Value::Ns || obj.kind == Value::Fn) {
            if (key.isStr())
                return getAttr(obj, key.j.get<std::string>(), line);
            return Value::undefined("item");
        }
        const J& j = obj.j;
        if (j.is_object()) {
            if (key.isStr()) {
                auto f = j.find(key.j.get<std::string>());
                if (f != j.end())
                    return Value::data(*f);
                return getAttr(obj, key.j.get<std::string>(), line);
            }
            return Value::undefined("item");
        }
        if ((j.is_array() || j.is_string()) && key.isInt()) {
            if (j.is_array()) {
                int64_t i = normIndex(inum(key.j), int64_t(j.size()));
                if (i < 0 || i >= int64_t(j.size()))
                    return Value::undefined("item");
                return Value::data(j[size_t(i)]);
            }
            auto cps = codePoints(j.get<std::string>());
            int64_t i = normIndex(inum(key.j), int64_t(cps.size()));
            if (i < 0 || i >= int64_t(cps.size()))
                return Value::undefined("item");
            return Value::data(cps[size_t(i)]);
        }
        if (key.isStr())
            return getAttr(obj, key.j.get<std::string>(), line);
        return Value::undefined("item");
    }

    // Python's slice indices for a sequence of n.
    std::vector<int64_t> sliceIndices(int64_t n, const Value* a, const Value* b, const Value* c, int line) const
    {
        auto opt = [&](const Value* v) -> std::optional<int64_t> {
            if (!v || (v->kind == Value::Data && v->j.is_null()))
                return std::nullopt;
            if (!v->isInt())
                fail(line, "slice indices must be integers or none");
            return inum(v->j);
        };
        int64_t st = opt(c).value_or(1);
        if (st == 0)
            fail(line, "slice step cannot be zero");
        auto clamp = [&](std::optional<int64_t> x, int64_t def) {
            if (!x)
                return def;
            int64_t i = *x < 0 ? *x + n : *x;
            if (st > 0)
                return std::clamp<int64_t>(i, 0, n);
            return std::clamp<int64_t>(i, -1, n - 1);
        };
        int64_t lo = clamp(opt(a), st > 0 ? 0 : n - 1), hi = clamp(opt(b), st > 0 ? n : -1);
        std::vector<int64_t> out;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
            out.push_back(i);
        return out;
    }

    // ---- expressions

    Value eval(const Expr& e)
    {
        step(e.line);
        switch (e.k) {
        case Expr::Lit: return Value::data(e.lit);
        case Expr::Name: return lookup(e.name);
        case Expr::Block: return m_block;
        case Expr::List:
        case Expr::Tuple: {
            J a = J::array();
            for (const auto& x : e.args)
                a.push_back(toJson(eval(*x), x->line));
            return Value::data(std::move(a));
        }
        case Expr::Dict: {
            J o = J::object();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value k = eval(*e.args[i]);
                if (!k.isStr())
                    fail(e.line, "dict keys must be strings here, not " + typeName(k));
                o[k.j.get<std::string>()] = toJson(eval(*e.args[i + 1]), e.line);
            }
            return Value::data(std::move(o));
        }
        case Expr::Attr: return getAttr(eval(*e.args[0]), e.name, e.line);
        case Expr::Item: {
            Value o = eval(*e.args[0]);
            return getItem(o, eval(*e.args[1]), e.line);
        }
        case Expr::Slice: {
            Value o = eval(*e.args[0]);
            Value parts[3];
            const Value* p[3] = {nullptr, nullptr, nullptr};
            for (int i = 0; i < 3; ++i)
                if (e.args[size_t(i) + 1]) {
                    parts[i] = eval(*e.args[size_t(i) + 1]);
                    p[i] = &parts[i];
                }
            if (o.kind == Value::Data && o.j.is_array()) {
                J out = J::array();
                for (int64_t i : sliceIndices(int64_t(o.j.size()), p[0], p[1], p[2], e.line))
                    out.push_back(o.j[size_t(i)]);
                return Value::data(std::move(out));
            }
            if (o.isStr()) {
                auto cps = codePoints(o.j.get<std::string>());
                std::string out;
                for (int64_t i : sliceIndices(int64_t(cps.size()), p[0], p[1], p[2], e.line))
                    out += cps[size_t(i)];
                return Value::data(out);
            }
            if (o.kind == Value::Undef)
                fail(e.line, "'" + o.name + "' is undefined (slicing it)");
            fail(e.line, "a " + typeName(o) + " cannot be sliced");
        }
        case Expr::Call: return call(e);
        case Expr::Filter: return filter(e);
        case Expr::Test: {
            bool r = test(e);
            return Value::data(e.negated ? !r : r);
        }
        case Expr::Neg:
        case Expr::Pos: {
            Value v = eval(*e.args[0]);
            if (!(v.kind == Value::Data && numeric(v.j)))
                fail(e.line, "bad operand type for unary " + std::string(e.k == Expr::Neg ? "-" : "+") + ": " +
                                 typeName(v));
            if (e.k == Expr::Pos)
                return v;
            if (integral(v.j)) {
                if (inum(v.j) == std::numeric_limits<int64_t>::min())
                    fail(e.line, "integer overflow in unary '-'");
                return Value::data(-inum(v.j));
            }
            return Value::data(-num(v.j));
        }
        case Expr::Not: return Value::data(!truthy(eval(*e.args[0])));
        case Expr::And: {
            Value l = eval(*e.args[0]);
            return truthy(l) ? eval(*e.args[1]) : l;
        }
        case Expr::Or: {
            Value l = eval(*e.args[0]);
            return truthy(l) ? l : eval(*e.args[1]);
        }
        case Expr::Cond: {
            if (truthy(eval(*e.args[1])))
                return eval(*e.args[0]);
            if (e.args[2])
                return eval(*e.args[2]);
            return Value::undefined("the else branch");
        }
        case Expr::Concat: {
            std::string s;
            for (const auto& x : e.args)
                s += str(eval(*x));
            return Value::data(s);
        }
        case Expr::Cmp: {
            Value l = eval(*e.args[0]);
            for (size_t i = 0; i < e.ops.size(); ++i) {
                Value r = eval(*e.args[i + 1]);
                const std::string& op = e.ops[i];
                bool ok;
                if (op == "==")
                    ok = equal(l, r);
                else if (op == "!=")
                    ok = !equal(l, r);
                else if (op == "in")
                    ok = contains(r, l, e.line);
                else if (op == "not in")
                    ok = !contains(r, l, e.line);
                else {
                    int c = order(l, r, e.line);
                    ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
                }
                if (!ok)
                    return Value::data(false);
                l = std::move(r);
            }
            return Value::data(true);
        }
        case Expr::Bin: return binop(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line);
        }
        fail(e.line, "unknown expression");
    }

    Value binop(const std::string& op, const Value& a, const Value& b, int line) const
    {
        auto bad = [&]() -> Value {
            if (a.kind == Value::Undef)
                fail(line, "'" + a.name + "' is undefined (an operand of '" + op + "')");
            if (b.kind == Value::Undef)
                fail(line, "'" + b.name + "' is undefined (an operand of '" + op + "')");
            fail(line, "unsupported operand types for " + op + ": " + typeName(a) + " and " + typeName(b));
        };
        if (a.kind != Value::Data || b.kind != Value::Data)
            return bad();
        const J &x = a.j, &y = b.j;
        if (numeric(x) && numeric(y)) {
            bool ints = integral(x) && integral(y);
            if (ints && (op == "+" || op == "-" || op == "*")) {
                int64_t r = 0;
                bool over = op == "+" ? __builtin_add_overflow(inum(x), inum(y), &r)
                            : op == "-" ? __builtin_sub_overflow(inum(x), inum(y), &r)
                                        : __builtin_mul_overflow(inum(x), inum(y), &r);
                if (over)
                    fail(line, "integer overflow in '" + op + "' (Python's integers have no limit; these have 64 bits)");
                return Value::data(r);
            }
            if (op == "+")
                return Value::data(num(x) + num(y));
            if (op == "-")
                return Value::data(num(x) - num(y));
            if (op == "*")
                return Value::data(num(x) * num(y));
            if (op == "/") {
                if (num(y) == 0)
                    fail(line, "division by zero");
                return Value::data(num(x) / num(y));
            }
            if (op == "//" || op == "%") {
                if (num(y) == 0)
                    fail(line, "division by zero");
                if (ints) {
                    int64_t p = inum(x), q = inum(y);
                    if (p == std::numeric_limits<int64_t>::min() && q == -1)
                        fail(line, "integer overflow in '" + op + "'");
                    int64_t d = p / q, m = p % q;
                    if (m != 0 && ((m < 0) != (q < 0))) {
                        --d;
                        m += q;
                    }
                    return Value::data(op == "//" ? d : m);
                }
                double p = num(x), q = num(y), d = std::floor(p / q);
                return Value::data(op == "//" ? d : p - d * q);
            }
            if (op == "**") {
                if (ints && inum(y) >= 0) {
                    int64_t r = 1, base = inum(x);
                    for (int64_t i = 0; i < inum(y) && r != 0 && !(r == 1 && (base == 1 || base == 0) && i > 0); ++i)
                        if (__builtin_mul_overflow(r, base, &r))
                            fail(line, "integer overflow in '**'");
                    return Value::data(r);
                }
                return Value::data(std::pow(num(x), num(y)));
            }
        }
        if (op == "+" && x.is_string() && y.is_string())
            return Value::data(x.get<std::string>() + y.get<std::string>());
        if (op == "+" && x.is_array() && y.is_array()) {
            J r = x;
            for (const auto& v : y)
                r.push_back(v);
            return Value::data(std::move(r));
        }
        if (op == "*" && (((x.is_string() || x.is_array()) && integral(y)) || ((y.is_string() || y.is_array()) && integral(x)))) {
            const J& seq = x.is_string() || x.is_array() ? x : y;
            int64_t times = inum(x.is_string() || x.is_array() ? y : x);
            const uint64_t unit = seq.is_string() ? seq.get_ref<const std::string&>().size() : seq.size();
            if (times <= 0 || unit == 0)
                return Value::data(seq.is_string() ? J("") : J::array());
            if (uint64_t(times) > kMaxOutput / unit)
                fail(line, "a repeated string or list passes the output limit");
            if (seq.is_string()) {
                std::string r;
                for (int64_t i = 0; i < times; ++i)
                    r += seq.get<std::string>();
                return Value::data(r);
            }
            J r = J::array();
            for (int64_t i = 0; i < times; ++i)
                for (const auto& v : seq)
                    r.push_back(v);
            return Value::data(std::move(r));
        }
        return bad();
    }

    struct Args {
        std::vector<Value> pos;
        std::vector<std::pair<std::string, Value>> kw;
        const Value* get(size_t i, const char* name) const
        {
            for (const auto& [k, v] : kw)
                if (k == name)
                    return &v;
            return i < pos.size() ? &pos[i] : nullptr;
        }
    };

    Args evalArgs(const Expr& e, size_t from)
    {
        Args a;
        for (size_t i = from; i < e.args.size(); ++i)
            a.pos.push_back(eval(*e.args[i]));
        for (const auto& [k, v] : e.kwargs)
            a.kw.emplace_back(k, eval(*v));
        return a;
    }

    std::string strArg(const Args& a, size_t i, const char* name, int line, const char* what) const
    {
        const Value* v = a.get(i, name);
        if (!v || !v->isStr())
            fail(line, std::string(what) + " needs a string argument '" + name + "'");
        return v->j.get<std::string>();
    }

    Value call(const Expr& e)
    {
        const Expr& callee = *e.args[0];
        Value fn;
        if (callee.k == Expr::Attr) {
            Value obj = eval(*callee.args[0]);
            fn = getAttr(obj, callee.name, callee.line);
            if (fn.kind == Value::Undef && obj.kind == Value::Data)
                fail(e.line, "the method " + typeName(obj) + "." + callee.name + "() is not supported");
        } else
            fn = eval(callee);
        if (fn.kind != Value::Fn) {
            if (fn.kind == Value::Undef)
                fail(e.line, "'" + fn.name + "' is undefined (called as a function)");
            fail(e.line, "a " + typeName(fn) + " is not callable");
        }
        Args a = evalArgs(e, 1);
        const Callable& c = *fn.fn;
        if (c.k == Callable::Method)
            return method(c.self, c.name, a, e.line);
        if (c.k == Callable::Macro)
            return callMacro(*c.macro, a, e.line);
        return builtin(c.name, a, e.line);
    }

    Value builtin(const std::string& name, const Args& a, int line)
    {
        if (name == "raise_exception") {
            std::string msg = a.pos.empty() ? "" : str(a.pos[0]);
            fail(line, "the template raised an exception: " + msg);
        }
        if (name == "strftime_now") {
            std::string fmt = strArg(a, 0, "format", line, "strftime_now");
            std::time_t now = std::time(nullptr);
            std::tm tm{};
            localtime_r(&now, &tm);
            char buf[512];
            size_t n = fmt.size() < 200 ? std::strftime(buf, sizeof buf, fmt.c_str(), &tm) : 0;
            return Value::data(std::string(buf, n));
        }
        if (name == "namespace" || name == "dict") {
            Value v;
            std::map<std::string, Value> attrs;
            for (const auto& p : a.pos) {
                if (p.kind == Value::Data && p.j.is_object()) {
                    for (auto it = p.j.begin(); it != p.j.end(); ++it)
                        attrs[it.key()] = Value::data(it.value());
                } else
                    fail(line, name + "() takes a dict or keyword arguments");
            }
            for (const auto& [k, val] : a.kw)
                attrs[k] = val;
            if (name == "dict") {
                J o = J::object();
                for (const auto& [k, val] : attrs)
                    o[k] = toJson(val, line);
                return Value::data(std::move(o));
            }
            v.kind = Value::Ns;
            v.ns = std::make_shared<Namespace>();
            v.ns->attrs = std::move(attrs);
            return v;
        }
        if (name == "range") {
            int64_t lo = 0, hi = 0, st = 1;
            for (const auto& p : a.pos)
                if (!p.isInt())
                    fail(line, "range() takes integers");
            if (a.pos.size() == 1)
                hi = inum(a.pos[0].j);
            else if (a.pos.size() >= 2) {
                lo = inum(a.pos[0].j);
                hi = inum(a.pos[1].j);
                if (a.pos.size() >= 3)
                    st = inum(a.pos[2].j);
            } else
                fail(line, "range() takes 1 to 3 integers");
            if (st == 0)
                fail(line, "range() step must not be zero");
            J out = J::array();
            for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
                if (out.size() >= size_t(kMaxRange))
                    fail(line, "range() is longer than " + std::to_string(kMaxRange));
                out.push_back(i);
            }
            return Value::data(std::move(out));
        }
        fail(line, "the function " + name + "() is not supported");
    }

    std::string strip(const std::string& s, const Value* chars, bool left, bool right, int line) const
    {
        auto cps = codePoints(s);
        std::vector<std::string> set;
        bool ws = !chars || (chars->kind == Value::Data && chars->j.is_null());
        if (!ws) {
            if (!chars->isStr())
                fail(line, "strip() takes a string of characters");
            set = codePoints(chars->j.get<std::string>());
        }
        auto drop = [&](const std::string& c) {
            return ws ? pySpace(codeOf(c)) : std::find(set.begin(), set.end(), c) != set.end();
        };
        size_t b = 0, e = cps.size();
        if (left)
            while (b < e && drop(cps[b]))
                ++b;
        if (right)
            while (e > b && drop(cps[e - 1]))
                --e;
        std::string out;
        for (size_t i = b; i < e; ++i)
            out += cps[i];
        return out;
    }

    J split(const std::string& s, const Value* sep, const Value* maxArg, bool fromRight, int line) const
    {
        int64_t maxsplit = -1;
        if (maxArg) {
            if (!maxArg->isInt())
                fail(line, "split() maxsplit must be an integer");
            maxsplit = inum(maxArg->j);
        }
        J out = J::array();
        if (!sep || (sep->kind == Value::Data && sep->j.is_null())) {
            // Runs of whitespace, no empty strings.
            auto cps = codePoints(s);
            std::vector<std::string> words;
            std::string w;
            bool in = false;
            int64_t splits = 0;
            if (fromRight) {
                // rsplit with whitespace: rarely used; split fully then merge from the left.
                for (const auto& c : cps) {
                    if (pySpace(codeOf(c))) {
                        if (in)
                            words.push_back(w), w.clear(), in = false;
                    } else
                        w += c, in = true;
                }
                if (in)
                    words.push_back(w);
                if (maxsplit >= 0 && int64_t(words.size()) > maxsplit + 1) {
                    fail(line, "rsplit() with a maxsplit and no separator is not supported");
                }
                for (auto& x : words)
                    out.push_back(x);
                return out;
            }
            size_t i = 0;
            for (; i < cps.size(); ++i) {
                bool sp = pySpace(codeOf(cps[i]));
                if (sp) {
                    if (in) {
                        out.push_back(w);
                        w.clear();
                        in = false;
                        ++splits;
                    }
                } else {
                    if (!in && maxsplit >= 0 && splits >= maxsplit) {
                        std::string rest;
                        for (size_t j = i; j < cps.size(); ++j)
                            rest += cps[j];
                        // Python keeps the remainder with its trailing whitespace stripped.
                        out.push_back(strip(rest, nullptr, false, true, line));
                        return out;
                    }
                    w += cps[i];
                    in = true;
                }
            }
            if (in)
                out.push_back(w);
            return out;
        }
        if (!sep->isStr())
            fail(line, "split() separator must be a string");
        const std::string d = sep->j.get<std::string>();
        if (d.empty())
            fail(line, "split() separator is empty");
        std::vector<std::string> parts;
        if (!fromRight) {
            size_t p = 0;
            int64_t n = 0;
            while (true) {
                size_t f = (maxsplit >= 0 && n >= maxsplit) ? std::string::npos : s.find(d, p);
                if (f == std::string::npos) {
                    parts.push_back(s.substr(p));
                    break;
                }
                parts.push_back(s.substr(p, f - p));
                p = f + d.size();
                ++n;
            }
        } else {
            size_t end = s.size();
            int64_t n = 0;
            while (true) {
                size_t f = (maxsplit >= 0 && n >= maxsplit) || end < d.size() ? std::string::npos
                                                                                : s.rfind(d, end - d.size());
                if (f == std::string::npos) {
                    parts.insert(parts.begin(), s.substr(0, end));
                    break;
                }
                parts.insert(parts.begin(), s.substr(f + d.size(), end - f - d.size()));
                end = f;
                ++n;
            }
        }
        for (auto& x : parts)
            out.push_back(x);
        return out;
    }

    Value method(const J& self, const std::string& name, const Args& a, int line)
    {
        if (self.is_object()) {
            if (name == "items") {
                J out = J::array();
                for (auto it = self.begin(); it != self.end(); ++it)
                    out.push_back(J::array({it.key(), it.value()}));
                return Value::data(std::move(out));
            }
            if (name == "keys" || name == "values") {
                J out = J::array();
                for (auto it = self.begin(); it != self.end(); ++it)
                    out.push_back(name == "keys" ? J(it.key()) : it.value());
                return Value::data(std::move(out));
            }
            if (name == "get") {
                if (a.pos.empty() || !a.pos[0].isStr())
                    return a.pos.size() > 1 ? a.pos[1] : Value::data(nullptr);
                auto f = self.find(a.pos[0].j.get<std::string>());
                if (f != self.end())
                    return Value::data(*f);
                return a.pos.size() > 1 ? a.pos[1] : Value::data(nullptr);
            }
        }
        if (!self.is_string())
            fail(line, "the method " + name + "() is not supported");
        const std::string s = self.get<std::string>();
        if (name == "startswith" || name == "endswith") {
            const Value* arg = a.get(0, "prefix");
            std::vector<std::string> options;
            if (arg && arg->isStr())
                options.push_back(arg->j.get<std::string>());
            else if (arg && arg->kind == Value::Data && arg->j.is_array()) {
                for (const auto& o : arg->j) {
                    if (!o.is_string())
                        fail(line, name + "() takes strings");
                    options.push_back(o.get<std::string>());
                }
            } else
                fail(line, name + "() takes a string or a tuple of strings");
            for (const auto& o : options) {
                if (o.size() <= s.size() &&
                    (name == "startswith" ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0))
                    return Value::data(true);
            }
            return Value::data(false);
        }
        if (name == "split" || name == "rsplit")
            return Value::data(split(s, a.get(0, "sep"), a.get(1, "maxsplit"), name == "rsplit", line));
        if (name == "strip" || name == "lstrip" || name == "rstrip")
            return Value::data(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip", line));
        if (name == "lower" || name == "upper")
            return Value::data(mapCase(s, name == "upper"));
        if (name == "capitalize") {
            auto cps = codePoints(s);
            std::string out = cps.empty() ? "" : mapCase(cps[0], true);
            for (size_t i = 1; i < cps.size(); ++i)
                out += mapCase(cps[i], false);
            return Value::data(out);
        }
        if (name == "title")
            return Value::data(title(s));
        if (name == "replace") {
            std::string from = strArg(a, 0, "old", line, "replace()"), to = strArg(a, 1, "new", line, "replace()");
            const Value* cnt = a.get(2, "count");
            return Value::data(replace(s, from, to, cnt && cnt->isInt() ? inum(cnt->j) : -1));
        }
        if (name == "find" || name == "rfind" || name == "count") {
            std::string sub = strArg(a, 0, "sub", line, (name + "()").c_str());
            if (name == "count") {
                if (sub.empty())
                    return Value::data(int64_t(codePoints(s).size()) + 1);
                int64_t n = 0;
                for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size()))
                    ++n;
                return Value::data(n);
            }
            size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
            if (p == std::string::npos)
                return Value::data(int64_t(-1));
            return Value::data(int64_t(codePoints(s.substr(0, p)).size()));
        }
        if (name == "join") {
            if (a.pos.empty())
                fail(line, "join() takes a list");
            std::string out;
            bool first = true;
            for (const auto& v : iterate(a.pos[0], line)) {
                if (!v.isStr())
                    fail(line, "join() takes strings, not " + typeName(v));
                out += (first ? "" : s) + v.j.get<std::string>();
                first = false;
            }
            return Value::data(out);
        }
        if (name == "splitlines") {
            J out = J::array();
            std::string cur;
            for (size_t i = 0; i < s.size(); ++i) {
                if (s[i] == '\n' || s[i] == '\r') {
                    out.push_back(cur);
                    cur.clear();
                    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')
                        ++i;
                } else
                    cur += s[i];
            }
            if (!cur.empty())
                out.push_back(cur);
            return Value::data(std::move(out));
        }
        if (name.rfind("is", 0) == 0) {
            auto cps = codePoints(s);
            if (cps.empty())
                return Value::data(false);
            bool ok = true, cased = false;
            for (const auto& c : cps) {
                int32_t cp = codeOf(c);
                auto cat = utf8proc_category(cp);
                bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
                bool digit = cat == UTF8PROC_CATEGORY_ND;
                if (name == "isdigit")
                    ok = ok && digit;
                else if (name == "isspace")
                    ok = ok && pySpace(cp);
                else if (name == "isalpha")
                    ok = ok && letter;
                else if (name == "isalnum")
                    ok = ok && (letter || digit);
                else if (name == "islower" || name == "isupper") {
                    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL) {
                        cased = true;
                        ok = ok && (name == "islower" ? cat == UTF8PROC_CATEGORY_LL : cat == UTF8PROC_CATEGORY_LU);
                    }
                }
            }
            if (name == "islower" || name == "isupper")
                ok = ok && cased;
            return Value::data(ok);
        }
        fail(line, "the method str." + name + "() is not supported");
    }

    static std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count)
    {
        if (from.empty()) {
            // Python inserts `to` between every character (and at both ends).
            auto cps = codePoints(s);
            std::string out;
            int64_t n = 0;
            for (size_t i = 0; i <= cps.size(); ++i) {
                if (count < 0 || n < count) {
                    out += to;
                    ++n;
                }
                if (i < cps.size())
                    out += cps[i];
            }
            return out;
        }
        std::string out;
        size_t p = 0;
        int64_t n = 0;
        while (count < 0 || n < count) {
            size_t f = s.find(from, p);
            if (f == std::string::npos)
                break;
            out += s.substr(p, f - p) + to;
            p = f + from.size();
            ++n;
        }
        return out + s.substr(p);
    }

    static std::string title(const std::string& s)
    {
        std::string out;
        bool prevCased = false;
        for (const auto& c : codePoints(s)) {
            int32_t cp = codeOf(c);
            auto cat = utf8proc_category(cp);
            bool cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
            out += cased ? mapCase(c, !prevCased) : c;
            prevCased = cased;
        }
        return out;
    }

    Value callMacro(const Stmt& m, const Args& a, int line)
    {
        if (m_callDepth >= kMaxCallDepth)
            fail(line, "macro calls nested deeper than " + std::to_string(kMaxCallDepth));
        if (a.pos.size() > m.targets.size())
            fail(line, "the macro " + m.text + " takes at most " + std::to_string(m.targets.size()) + " arguments");
        std::vector<Scope> saved = std::move(m_scopes);
        m_scopes.clear();
        m_scopes.push_back(std::move(saved[0])); // the globals; the caller's locals stay out of sight
        m_scopes.emplace_back();
        for (size_t i = 0; i < m.targets.size(); ++i) {
            const Value* v = a.get(i, m.targets[i].c_str());
            if (v)
                m_scopes.back()[m.targets[i]] = *v;
            else if (m.defaults[i])
                m_scopes.back()[m.targets[i]] = eval(*m.defaults[i]);
            else
                m_scopes.back()[m.targets[i]] = Value::undefined(m.targets[i]);
        }
        for (const auto& [k, v] : a.kw)
            if (std::find(m.targets.begin(), m.targets.end(), k) == m.targets.end())
                fail(line, "the macro " + m.text + " has no parameter '" + k + "'");
        std::string out;
        ++m_callDepth;
        try {
            exec(m.body, out);
        } catch (...) {
            --m_callDepth;
            saved[0] = std::move(m_scopes[0]);
            m_scopes = std::move(saved);
            throw;
        }
        --m_callDepth;
        saved[0] = std::move(m_scopes[0]);
        m_scopes = std::move(saved);
        return Value::data(out);
    }

    // ---- filters

    Value filter(const Expr& e)
    {
        Value in = eval(*e.args[0]);
        Args a = evalArgs(e, 1);
        return applyFilter(e.name, in, a, e.line);
    }

    int64_t toInt(double d, int line) const
    {
        if (!(std::fabs(d) < 9.2e18))
            fail(line, "the number " + pyFloat(d) + " does not fit an integer");
        return int64_t(d);
    }

    Value attrPath(const Value& v, const std::string& path, int line) const
    {
        Value cur = v;
        size_t p = 0;
        while (true) {
            size_t d = path.find('.', p);
            std::string part = path.substr(p, d == std::string::npos ? std::string::npos : d - p);
            int64_t index = 0;
            auto r = std::from_chars(part.data(), part.data() + part.size(), index);
            bool digits = !part.empty() && r.ec == std::errc() && r.ptr == part.data() + part.size();
            if (cur.kind == Value::Undef)
                return cur;
            cur = digits ? getItem(cur, Value::data(index), line) : getItem(cur, Value::data(part), line);
            if (d == std::string::npos)
                return cur;
            p = d + 1;
        }
    }

    Value applyFilter(const std::string& f, const Value& in, const Args& a, int line)
    {
        if (f == "safe")
            return in;
        if (f == "default" || f == "d") {
            const Value* b = a.get(1, "boolean");
            bool boolean = b && truthy(*b);
            if (in.kind == Value::Undef || (boolean && !truthy(in))) {
                const Value* d = a.get(0, "default_value");
                return d ? *d : Value::data("");
            }
            return in;
        }
        if (f == "length" || f == "count")
            return Value::data(length(in, line));
        if (f == "string")
            return Value::data(str(in));
        if (f == "trim") {
            return Value::data(strip(str(in), a.get(0, "chars"), true, true, line));
        }
        if (f == "lower" || f == "upper")
            return Value::data(mapCase(str(in), f == "upper"));
        if (f == "capitalize")
            return method(J(str(in)), "capitalize", {}, line);
        if (f == "title")
            return Value::data(title(str(in)));
        if (f == "replace") {
            std::string s = str(in);
            const Value *o = a.get(0, "old"), *n = a.get(1, "new"), *c = a.get(2, "count");
            if (!o || !n)
                fail(line, "replace needs the old and new strings");
            return Value::data(replace(s, str(*o), str(*n), c && c->isInt() ? inum(c->j) : -1));
        }
        if (f == "e" || f == "escape") {
            std::string out;
            for (char c : str(in)) {
                switch (c) {
                case '&': out += "&amp;"; break;
                case '<': out += "&lt;"; break;
                case '>': out += "&gt;"; break;
                case '"': out += "&#34;"; break;
                case '\'': out += "&#39;"; break;
                default: out += c;
                }
            }
            return Value::data(out);
        }
        if (f == "tojson") {
            DumpOptions o;
            if (const Value* ind = a.get(0, "indent"); ind && !(ind->kind == Value::Data && ind->j.is_null())) {
                if (ind->isInt())
                    o.indent = std::string(size_t(std::clamp<int64_t>(inum(ind->j), 0, 64)), ' ');
                else if (ind->isStr())
                    o.indent = ind->j.get<std::string>();
                else
                    fail(line, "tojson's indent must be an integer or a string");
                o.itemSep = ",";
            }
            if (const Value* sep = a.get(99, "separators"); sep && sep->kind == Value::Data && sep->j.is_array() &&
                                                              sep->j.size() == 2 && sep->j[0].is_string() &&
                                                              sep->j[1].is_string()) {
                o.itemSep = sep->j[0].get<std::string>();
                o.keySep = sep->j[1].get<std::string>();
            }
            if (const Value* sk = a.get(99, "sort_keys"))
                o.sortKeys = truthy(*sk);
            if (const Value* ea = a.get(99, "ensure_ascii"))
                o.ensureAscii = truthy(*ea);
            if (in.kind != Value::Data)
                fail(line, "a " + typeName(in) + " is not JSON serializable");
            std::string out;
            pyDump(in.j, o, 0, out);
            return Value::data(out);
        }
        if (f == "first" || f == "last") {
            auto items = iterate(in, line);
            if (items.empty())
                return Value::undefined("first item");
            return f == "first" ? items.front() : items.back();
        }
        if (f == "list")
            return Value::data(listOf(iterate(in, line), line));
        if (f == "items") {
            if (in.kind == Value::Undef)
                return Value::data(J::array());
            if (!(in.kind == Value::Data && in.j.is_object()))
                fail(line, "items needs a dict, not " + typeName(in));
            return method(in.j, "items", {}, line);
        }
        if (f == "reverse") {
            if (in.isStr()) {
                auto cps = codePoints(in.j.get<std::string>());
                std::string out;
                for (auto it = cps.rbegin(); it != cps.rend(); ++it)
                    out += *it;
                return Value::data(out);
            }
            auto items = iterate(in, line);
            std::reverse(items.begin(), items.end());
            return Value::data(listOf(items, line));
        }
        if (f == "join") {
            const Value* sep = a.get(0, "d");
            const Value* at = a.get(1, "attribute");
            std::string s = sep ? str(*sep) : "", out;
            bool first = true;
            for (const auto& v : iterate(in, line)) {
                out += (first ? "" : s) + str(at ? attrPath(v, str(*at), line) : v);
                first = false;
            }
            return Value::data(out);
        }
        if (f == "int") {
            const Value* d = a.get(0, "default");
            if (in.kind == Value::Data && numeric(in.j))
                return integral(in.j) ? Value::data(inum(in.j)) : Value::data(toInt(num(in.j), line));
            if (in.isStr()) {
                std::string s = strip(in.j.get<std::string>(), nullptr, true, true, line);
                int64_t v = 0;
                auto r = std::from_chars(s.data(), s.data() + s.size(), v);
                if (r.ec == std::errc() && r.ptr == s.data() + s.size())
                    return Value::data(v);
                char* end = nullptr;
                double dv = std::strtod(s.c_str(), &end);
                if (!s.empty() && end == s.c_str() + s.size())
                    return Value::data(toInt(dv, line));
            }
            return d ? *d : Value::data(int64_t(0));
        }
        if (f == "float") {
            if (in.kind == Value::Data && numeric(in.j))
                return Value::data(num(in.j));
            if (in.isStr()) {
                std::string s = strip(in.j.get<std::string>(), nullptr, true, true, line);
                char* end = nullptr;
                double dv = std::strtod(s.c_str(), &end);
                if (!s.empty() && end == s.c_str() + s.size())
                    return Value::data(dv);
            }
            const Value* d = a.get(0, "default");
            return d ? *d : Value::data(0.0);
        }
        if (f == "abs") {
            if (!(in.kind == Value::Data && numeric(in.j)))
                fail(line, "abs needs a number");
            if (integral(in.j) && inum(in.j) == std::numeric_limits<int64_t>::min())
                fail(line, "integer overflow in abs");
            return integral(in.j) ? Value::data(std::abs(inum(in.j))) : Value::data(std::fabs(num(in.j)));
        }
        if (f == "round") {
            if (!(in.kind == Value::Data && numeric(in.j)))
                fail(line, "round needs a number");
            const Value* p = a.get(0, "precision");
            int64_t prec = p && p->isInt() ? inum(p->j) : 0;
            std::string m = a.get(1, "method") ? str(*a.get(1, "method")) : "common";
            double scale = std::pow(10.0, double(prec)), v = num(in.j) * scale;
            v = m == "floor" ? std::floor(v) : m == "ceil" ? std::ceil(v) : std::round(v);
            return Value::data(v / scale);
        }
        if (f == "indent") {
            const Value* w = a.get(0, "width");
            std::string pad = w ? (w->isStr() ? w->j.get<std::string>() : std::string(size_t(std::clamp<int64_t>(w->isInt() ? inum(w->j) : 4, 0, 256)), ' '))
                                : std::string(4, ' ');
            bool first = a.get(1, "first") && truthy(*a.get(1, "first"));
            bool blank = a.get(2, "blank") && truthy(*a.get(2, "blank"));
            std::string s = str(in), out;
            size_t p = 0;
            bool firstLine = true;
            while (true) {
                size_t nl = s.find('\n', p);
                std::string ln = s.substr(p, nl == std::string::npos ? std::string::npos : nl - p);
                bool add = firstLine ? first : (blank || !ln.empty());
                if (!firstLine)
                    out += "\n";
                out += (add && !(firstLine && ln.empty() && !blank && false) ? pad : "") + ln;
                firstLine = false;
                if (nl == std::string::npos)
                    break;
                p = nl + 1;
            }
            return Value::data(out);
        }
        if (f == "wordcount") {
            J words = split(str(in), nullptr, nullptr, false, line);
            return Value::data(int64_t(words.size()));
        }
        if (f == "attr") {
            if (a.pos.empty())
                fail(line, "attr needs a name");
            return getAttr(in, str(a.pos[0]), line);
        }
        if (f == "unique") {
            std::vector<Value> out;
            for (const auto& v : iterate(in, line))
                if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equal(o, v); }))
                    out.push_back(v);
            return Value::data(listOf(out, line));
        }
        if (f == "sort" || f == "min" || f == "max" || f == "dictsort") {
            std::vector<Value> items;
            if (f == "dictsort") {
                if (!(in.kind == Value::Data && in.j.is_object()))
                    fail(line, "dictsort needs a dict");
                for (auto it = in.j.begin(); it != in.j.end(); ++it)
                    items.push_back(Value::data(J::array({it.key(), it.value()})));
            } else
                items = iterate(in, line);
            const Value* at = f == "sort" ? a.get(2, "attribute") : a.get(1, "attribute");
            auto key = [&](const Value& v) {
                if (f == "dictsort")
                    return Value::data(v.j[0]);
                return at ? attrPath(v, str(*at), line) : v;
            };
            std::stable_sort(items.begin(), items.end(),
                             [&](const Value& x, const Value& y) { return order(key(x), key(y), line) < 0; });
            if (f == "min" || f == "max") {
                if (items.empty())
                    return Value::undefined(f);
                return f == "min" ? items.front() : items.back();
            }
            if (f == "sort" && a.get(0, "reverse") && truthy(*a.get(0, "reverse")))
                std::reverse(items.begin(), items.end());
            return Value::data(listOf(items, line));
        }
        if (f == "sum") {
            const Value* at = a.get(0, "attribute");
            Value total = a.get(1, "start") ? *a.get(1, "start") : Value::data(int64_t(0));
            for (const auto& v : iterate(in, line))
                total = binop("+", total, at ? attrPath(v, str(*at), line) : v, line);
            return total;
        }
        if (f == "map") {
            std::vector<Value> out;
            const Value* at = a.get(99, "attribute");
            for (const auto& v : iterate(in, line)) {
                if (at) {
                    Value r = attrPath(v, str(*at), line);
                    if (r.kind == Value::Undef && a.get(99, "default"))
                        r = *a.get(99, "default");
                    out.push_back(r);
                } else {
                    if (a.pos.empty() || !a.pos[0].isStr())
                        fail(line, "map needs a filter name or attribute=");
                    std::string fname = a.pos[0].j.get<std::string>();
                    if (!known(kFilters, fname))
                        fail(line, "the filter '" + fname + "' is not supported");
                    Args rest;
                    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
                    out.push_back(applyFilter(fname, v, rest, line));
                }
            }
            return Value::data(listOf(out, line));
        }
        if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
            bool attr = f == "selectattr" || f == "rejectattr";
            bool keep = f == "select" || f == "selectattr";
            size_t ti = attr ? 1 : 0;
            if (attr && (a.pos.empty()))
                fail(line, f + " needs an attribute name");
            std::vector<Value> out;
            for (const auto& v : iterate(in, line)) {
                Value probe = attr ? attrPath(v, str(a.pos[0]), line) : v;
                bool r;
                if (a.pos.size() > ti) {
                    std::string tname = str(a.pos[ti]);
                    if (!known(kTests, tname))
                        fail(line, "the test '" + tname + "' is not supported");
                    std::vector<Value> targs(a.pos.begin() + long(ti) + 1, a.pos.end());
                    r = runTest(tname, probe, targs, line);
                } else
                    r = truthy(probe);
                if (r == keep)
                    out.push_back(v);
            }
            return Value::data(listOf(out, line));
        }
        fail(line, "the filter '" + f + "' is not supported");
    }

    bool test(const Expr& e)
    {
        Value in = eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t i = 1; i < e.args.size(); ++i)
            args.push_back(eval(*e.args[i]));
        if (!e.kwargs.empty())
            fail(e.line, "tests take no keyword arguments here");
        return runTest(e.name, in, args, e.line);
    }

    bool runTest(const std::string& t, const Value& v, const std::vector<Value>& args, int line) const
    {
        const bool data = v.kind == Value::Data;
        const J& j = v.j;
        auto arg = [&](size_t i) -> const Value& {
            if (i >= args.size())
                fail(line, "the test '" + t + "' needs an argument");
            return args[i];
        };
        if (t == "defined")
            return v.kind != Value::Undef;
        if (t == "undefined")
            return v.kind == Value::Undef;
        if (t == "none")
            return data && j.is_null();
        if (t == "boolean")
            return data && j.is_boolean();
        if (t == "true" || t == "false")
            return data && j.is_boolean() && j.get<bool>() == (t == "true");
        if (t == "string")
            return data && j.is_string();
        if (t == "number")
            return data && (j.is_number() || j.is_boolean());
        if (t == "integer")
            return data && j.is_number_integer();
        if (t == "float")
            return data && j.is_number_float();
        if (t == "mapping")
            return data && j.is_object();
        if (t == "iterable")
            return v.kind == Value::Undef || (data && (j.is_string() || j.is_array() || j.is_object()));
        if (t == "sequence")
            return v.kind == Value::Undef || (data && (j.is_string() || j.is_array() || j.is_object()));
        if (t == "callable")
            return v.kind == Value::Fn;
        if (t == "escaped")
            return false;
        if (t == "lower" || t == "upper") {
            std::string s = str(v);
            return s == mapCase(s, t == "upper") && s != mapCase(s, t != "upper");
        }
        if (t == "odd" || t == "even" || t == "divisibleby") {
            if (!v.isInt())
                fail(line, "the test '" + t + "' needs an integer");
            int64_t n = inum(j);
            if (t == "divisibleby") {
                const Value& d = arg(0);
                if (!d.isInt() || inum(d.j) == 0)
                    fail(line, "divisibleby needs a non-zero integer");
                return n % inum(d.j) == 0;
            }
            return (n % 2 != 0) == (t == "odd");
        }
        if (t == "eq" || t == "equalto" || t == "==")
            return equal(v, arg(0));
        if (t == "ne" || t == "!=")
            return !equal(v, arg(0));
        if (t == "sameas") {
            const Value& o = arg(0);
            if (data && o.kind == Value::Data && (j.is_null() || j.is_boolean()))
                return j == o.j;
            return equal(v, o) && (!data || j.is_null() || j.is_boolean());
        }
        if (t == "in")
            return contains(arg(0), v, line);
        int c = order(v, arg(0), line);
        if (t == "lt" || t == "<")
            return c < 0;
        if (t == "le" || t == "<=")
            return c <= 0;
        if (t == "gt" || t == ">")
            return c > 0;
        if (t == "ge" || t == ">=")
            return c >= 0;
        fail(line, "the test '" + t + "' is not supported");
    }

    // ---- statements

    void assign(const std::string& name, Value v) { m_scopes.back()[name] = std::move(v); }

    void unpack(const std::vector<std::string>& targets, const Value& v, int line)
    {
        if (targets.size() == 1) {
            assign(targets[0], v);
            return;
        }
        auto items = iterate(v, line);
        if (items.size() != targets.size())
            fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                           std::to_string(targets.size()) + " names");
        for (size_t i = 0; i < targets.size(); ++i)
            assign(targets[i], items[i]);
    }

    Flow exec(const Body& body, std::string& out)
    {
        for (const auto& s : body) {
            Flow f = exec(*s, out);
            if (f != Flow::Normal)
                return f;
        }
        return Flow::Normal;
    }

    Flow exec(const Stmt& s, std::string& out)
    {
        step(s.line);
        switch (s.k) {
        case Stmt::Text: emit(out, s.text, s.line); return Flow::Normal;
        case Stmt::Out: emit(out, str(eval(*s.expr)), s.line); return Flow::Normal;
        case Stmt::If:
            for (const auto& [c, b] : s.branches)
                if (!c || truthy(eval(*c)))
                    return exec(b, out);
            return Flow::Normal;
        case Stmt::Break: return Flow::Break;
        case Stmt::Continue: return Flow::Continue;
        case Stmt::Set: {
            Value v = eval(*s.expr);
            if (!s.attr.empty()) {
                Value ns = lookup(s.targets[0]);
                if (ns.kind != Value::Ns)
                    fail(s.line, "cannot set an attribute of '" + s.targets[0] + "': it is not a namespace()");
                ns.ns->attrs[s.attr] = std::move(v);
            } else
                unpack(s.targets, v, s.line);
            return Flow::Normal;
        }
        case Stmt::SetBlock:
        case Stmt::FilterBlock: {
            std::string inner;
            exec(s.body, inner);
            Value saved = m_block;
            m_block = Value::data(inner);
            Value v = eval(*s.expr);
            m_block = saved;
            if (s.k == Stmt::SetBlock)
                assign(s.targets[0], v);
            else
                emit(out, str(v), s.line);
            return Flow::Normal;
        }
        case Stmt::Macro: {
            Value v;
            v.kind = Value::Fn;
            v.fn = std::make_shared<Callable>(Callable{Callable::Macro, s.text, {}, &s});
            assign(s.text, v);
            return Flow::Normal;
        }
        case Stmt::For: {
            Value seq = eval(*s.expr);
            std::vector<Value> items = iterate(seq, s.line);
            if (s.cond) {
                std::vector<Value> kept;
                for (const auto& it : items) {
                    m_scopes.emplace_back();
                    unpack(s.targets, it, s.line);
                    bool keep = truthy(eval(*s.cond));
                    m_scopes.pop_back();
                    if (keep)
                        kept.push_back(it);
                }
                items = std::move(kept);
            }
            if (items.empty())
                return exec(s.elseBody, out);
            const int64_t n = int64_t(items.size());
            auto state = std::make_shared<LoopState>();
            auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
            state->items = shared;
            m_scopes.emplace_back();
            for (int64_t i = 0; i < n; ++i) {
                step(s.line);
                m_scopes.back().clear();
                state->index = i;
                Value lv;
                lv.kind = Value::Loop;
                lv.loop = state;
                assign("loop", std::move(lv));
                unpack(s.targets, (*shared)[size_t(i)], s.line);
                Flow f;
                try {
                    f = exec(s.body, out);
                } catch (...) {
                    m_scopes.pop_back();
                    throw;
                }
                if (f == Flow::Break)
                    break;
            }
            m_scopes.pop_back();
            return Flow::Normal;
        }
        }
        return Flow::Normal;
    }

    const ChatTemplate::Impl& m_t;
    std::vector<Scope> m_scopes;
    Value m_block;
    uint64_t m_steps = 0;
    int m_callDepth = 0;
};

J readJsonFile(const std::string& path)
{
    std::string text = readTextFile(path);
    try {
        return J::parse(text);
    } catch (const J::exception& e) {
        std::string what = e.what();
        auto colon = what.find("]: ");
        throw InputError(path, "not valid JSON (" + (colon == std::string::npos ? what : what.substr(colon + 3)) + ")");
    }
}

// A special token's text: a string, or an AddedToken object's content.
std::optional<std::string> tokenText(const J& v)
{
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return std::nullopt;
}

void addSpecialTokens(const J& cfg, J& out)
{
    if (!cfg.is_object())
        return;
    for (auto it = cfg.begin(); it != cfg.end(); ++it) {
        const std::string& k = it.key();
        if (k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0 && !out.contains(k))
            if (auto t = tokenText(it.value()))
                out[k] = *t;
    }
    auto extra = cfg.find("extra_special_tokens");
    if (extra != cfg.end() && extra->is_object())
        for (auto it = extra->begin(); it != extra->end(); ++it)
            if (!out.contains(it.key()))
                if (auto t = tokenText(it.value()))
                    out[it.key()] = *t;
}

} // namespace

ChatTemplate::ChatTemplate(const std::string& source, const std::string& path)
{
    auto impl = std::make_shared<Impl>();
    impl->path = path;
    Parser p(Lexer(source, path).run(), path);
    impl->body = p.parseTemplate();
    m_impl = std::move(impl);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;

std::optional<ChatTemplate> ChatTemplate::fromFolder(const std::string& folder)
{
    namespace fs = std::filesystem;
    const std::string cfgPath = (fs::path(folder) / "tokenizer_config.json").string();
    const std::string jinjaPath = (fs::path(folder) / "chat_template.jinja").string();
    std::error_code ec;
    J cfg = fs::is_regular_file(cfgPath, ec) ? readJsonFile(cfgPath) : J::object();
    std::optional<ChatTemplate> t;
    if (fs::is_regular_file(jinjaPath, ec)) {
        t.emplace(readTextFile(jinjaPath), jinjaPath);
    } else if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
        const J& ct = cfg["chat_template"];
        if (ct.is_string()) {
            t.emplace(ct.get<std::string>(), cfgPath + " (chat_template)");
        } else if (ct.is_array()) {
            for (const auto& e : ct) {
                if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
                    !e["template"].is_string())
                    throw InputError(cfgPath, "chat_template: a list entry is not {\"name\": ..., \"template\": ...}");
                if (e["name"] == "default")
                    t.emplace(e["template"].get<std::string>(), cfgPath + " (chat_template \"default\")");
            }
            if (!t)
                throw InputError(cfgPath, "chat_template lists several templates and none is named \"default\"");
        } else
            throw InputError(cfgPath, "chat_template is neither a string nor a list of {name, template}");
    }
    if (!t)
        return std::nullopt;
    J tokens = J::object();
    addSpecialTokens(cfg, tokens);
    const std::string mapPath = (fs::path(folder) / "special_tokens_map.json").string();
    if (fs::is_regular_file(mapPath, ec))
        addSpecialTokens(readJsonFile(mapPath), tokens);
    t->m_specialTokens = std::move(tokens);
    return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const
{
    J ctx = m_specialTokens;
    if (!context.is_null() && !context.is_object())
        throw InputError(m_impl->path, "the template's variables are not a JSON object");
    if (context.is_object())
        for (auto it = context.begin(); it != context.end(); ++it)
            ctx[it.key()] = it.value();
    return Renderer(*m_impl, ctx).run();
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool addGenerationPrompt) const
{
    J ctx = J::object();
    ctx["messages"] = messages;
    ctx["tools"] = nullptr;
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = addGenerationPrompt;
    return render(ctx);
}

std::string ChatTemplate::applyToPrompt(const std::string& userText) const
{
    J messages = J::array();
    messages.push_back(J{{"role", "user"}, {"content", userText}});
    return apply(messages, true);
}

const std::string& ChatTemplate::path() const { return m_impl->path; }
const nlohmann::ordered_json& ChatTemplate::specialTokens() const { return m_specialTokens; }

} // namespace stowage
