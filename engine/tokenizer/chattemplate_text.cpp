// Chat templates: the text helpers. Strings by UTF-8 code point (Python's str
// indexes code points) and Python's formatting of values: str(), repr() and
// json.dumps, which the renderer and its `tojson` filter print as.
#include "chattemplate_internal.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace stowage::jinja {

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

namespace {

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

} // namespace

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

namespace {

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

} // namespace

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

} // namespace stowage::jinja
