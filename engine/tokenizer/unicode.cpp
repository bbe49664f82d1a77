#include "unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace stowage::tok::uni {

namespace {

// Length a lead byte announces, and the range its second byte must be in.
bool leadInfo(uint8_t b, size_t& need, uint8_t& lo, uint8_t& hi)
{
    lo = 0x80;
    hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else {
        return false;
    }
    return true;
}

// Bytes of the longest valid prefix of a sequence starting at s[i] (0 when s[i] is no lead byte).
size_t validRun(std::string_view s, size_t i, size_t& need)
{
    auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
        need = 1;
        return 1;
    }
    uint8_t lo, hi;
    if (!leadInfo(b, need, lo, hi))
        return 0;
    size_t n = 1;
    while (n < need && i + n < s.size()) {
        auto c = static_cast<uint8_t>(s[i + n]);
        if (c < (n == 1 ? lo : 0x80) || c > (n == 1 ? hi : 0xBF))
            break;
        ++n;
    }
    return n;
}

const char kReplacement[] = "\xEF\xBF\xBD";

} // namespace

int32_t decodeAt(std::string_view s, size_t i, size_t& len)
{
    size_t need = 0;
    size_t n = validRun(s, i, need);
    if (n == 0 || n < need) {
        len = 1;
        return -1;
    }
    len = n;
    auto b = static_cast<uint8_t>(s[i]);
    if (n == 1)
        return b;
    int32_t cp = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; ++k)
        cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    return cp;
}

void append(std::string& out, int32_t cp)
{
    uint8_t buf[4];
    auto n = utf8proc_encode_char(cp, buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool isValid(std::string_view s)
{
    for (size_t i = 0; i < s.size();) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t need = 0;
        size_t n = validRun(s, i, need);
        if (n == 0 || n < need)
            return false;
        i += n;
    }
    return true;
}

std::string lossy(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t need = 0;
        size_t n = validRun(s, i, need);
        if (n != 0 && n == need) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += kReplacement;
            i += n == 0 ? 1 : n;
        }
    }
    return out;
}

bool endsWithReplacementChar(std::string_view s)
{
    return s.size() >= 3 && s.substr(s.size() - 3) == kReplacement;
}

bool isWhitespace(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

bool isNumeric(int32_t c)
{
    if (c < 0x80)
        return c >= '0' && c <= '9';
    auto cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool isWordChar(int32_t c)
{
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    // Join controls and the symbols that are Alphabetic (circled and squared letters).
    if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
        (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
        return true;
    auto cat = utf8proc_category(c);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_ME) || cat == UTF8PROC_CATEGORY_ND ||
           cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_PC;
}

bool isPunctuation(int32_t c)
{
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
               (c >= 0x7B && c <= 0x7E);
    auto cat = utf8proc_category(c);
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool isCombiningMark(int32_t c)
{
    auto cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

std::string lowercase(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t len;
        int32_t cp = decodeAt(s, i, len);
        if (cp < 0x80 && cp >= 0) {
            out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
        } else if (cp == 0x130) {
            out += "i\xCC\x87"; // the one unconditional multi-character lowercase mapping
        } else if (cp < 0) {
            out += kReplacement;
        } else {
            append(out, utf8proc_tolower(cp));
        }
        i += len;
    }
    return out;
}

std::string normalize(std::string_view s, Form form)
{
    if (s.empty())
        return {};
    int opts = UTF8PROC_STABLE;
    switch (form) {
    case Form::NFC: opts |= UTF8PROC_COMPOSE; break;
    case Form::NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case Form::NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Form::NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* dst = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                          &dst, static_cast<utf8proc_option_t>(opts));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(dst, &std::free);
    if (n < 0)
        throw std::runtime_error(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
    return std::string(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
}

namespace {
struct ByteTables {
    std::array<std::string, 256> toChar;
    std::array<int, 68> shifted{}; // byte of stand-in 256 + i
    ByteTables()
    {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            if (!printable)
                shifted[static_cast<size_t>(n)] = b;
            append(toChar[static_cast<size_t>(b)], printable ? b : 256 + n++);
        }
    }
};
const ByteTables& tables()
{
    static const ByteTables t;
    return t;
}
} // namespace

const std::array<std::string, 256>& byteToChar() { return tables().toChar; }

int charToByte(int32_t cp)
{
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return cp;
    if (cp < 256 || cp >= 256 + 68)
        return -1;
    return tables().shifted[static_cast<size_t>(cp - 256)];
}

} // namespace stowage::tok::uni
