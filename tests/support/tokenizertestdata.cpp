#include "tokenizertestdata.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <stdexcept>

using namespace stowage;
using nlohmann::json;

namespace tokenizertest {

bool validUtf8(const std::string& s)
{
    for (size_t i = 0; i < s.size();) {
        auto b = static_cast<unsigned char>(s[i]);
        size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (n == 0 || (n == 2 && b < 0xC2) || i + n > s.size())
            return false;
        uint32_t cp = n == 1 ? b : b & (0x7F >> n);
        for (size_t k = 1; k < n; ++k) {
            auto c = static_cast<unsigned char>(s[i + k]);
            if ((c & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (c & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n;
    }
    return true;
}

std::string show(const std::string& s) { return json(s).dump(-1, ' ', true, json::error_handler_t::replace); }
std::string show(const std::vector<int32_t>& v) { return json(v).dump(); }

std::vector<int32_t> ids(const Tokenizer& t, std::initializer_list<const char*> tokens)
{
    std::vector<int32_t> out;
    for (const char* s : tokens) {
        auto id = t.tokenId(s);
        if (!id)
            throw std::runtime_error(std::string("no token ") + s);
        out.push_back(*id);
    }
    return out;
}

std::string streamed(const Tokenizer& t, const std::vector<int32_t>& ids, bool skipSpecial, std::string* bad)
{
    StreamDecoder d(t, skipSpecial);
    std::string all;
    for (int32_t id : ids) {
        std::string piece = d.push(id);
        if (!validUtf8(piece) && bad)
            *bad = "push(" + std::to_string(id) + ") gave invalid UTF-8 " + show(piece);
        all += piece;
    }
    std::string rest = d.finish();
    if (!validUtf8(rest) && bad)
        *bad = "finish() gave invalid UTF-8";
    return all + rest;
}

QString errorOf(const std::string& folder)
{
    try {
        Tokenizer::fromFolder(folder);
    } catch (const InputError& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

void writeText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string englishLikeText(size_t bytes)
{
    static const char* syllables[] = {"the", "an", "ing", "tion", "er", "re", "in", "on", "at", "en", "nd", "ti",
                                      "es", "or", "te", "of", "ed", "is", "it", "al", "ar", "st", "to", "nt",
                                      "ng", "se", "ha", "as", "ou", "io", "le", "ve", "co", "me", "de", "hi"};
    std::mt19937 rng(42);
    std::vector<std::string> words;
    for (int i = 0; i < 30000; ++i) {
        std::string w;
        int n = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < n; ++k)
            w += syllables[rng() % (sizeof syllables / sizeof *syllables)];
        words.push_back(w);
    }
    std::vector<double> weights;
    for (size_t i = 0; i < words.size(); ++i)
        weights.push_back(1.0 / static_cast<double>(i + 1));
    std::discrete_distribution<size_t> zipf(weights.begin(), weights.end());
    std::string text;
    bool capital = true;
    while (text.size() < bytes) {
        std::string w = words[zipf(rng)];
        if (capital)
            w[0] = static_cast<char>(w[0] - 32);
        capital = false;
        text += w;
        unsigned r = rng() % 100;
        if (r < 6) {
            text += ". ";
            capital = true;
        } else if (r < 9) {
            text += ", ";
        } else if (r < 10) {
            text += ".\n\n";
            capital = true;
        } else if (r < 11) {
            text += " " + std::to_string(rng() % 10000) + " ";
        } else {
            text += " ";
        }
    }
    return text;
}

std::vector<std::string> hardStrings()
{
    std::ifstream in(kData + "/hard_strings.json");
    return json::parse(in).get<std::vector<std::string>>();
}

} // namespace tokenizertest

namespace QTest {
template <> char* toString(const std::vector<int32_t>& v) { return qstrdup(tokenizertest::show(v).c_str()); }
template <> char* toString(const std::optional<int32_t>& v) { return qstrdup(v ? std::to_string(*v).c_str() : "none"); }
template <> char* toString(const std::string& s) { return qstrdup(tokenizertest::show(s).c_str()); }
} // namespace QTest
