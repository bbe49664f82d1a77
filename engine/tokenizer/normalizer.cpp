// Normalizers of tokenizer.json: Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD,
// Lowercase, Strip, StripAccents, ByteLevel.
#include "internal.h"
#include "regex.h"
#include "unicode.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

namespace stowage::tok {

namespace {

using nlohmann::json;

class Sequence : public Normalizer {
public:
    std::vector<std::unique_ptr<Normalizer>> parts;
    void normalize(std::string& s) const override
    {
        for (const auto& p : parts)
            p->normalize(s);
    }
};

class Prepend : public Normalizer {
public:
    explicit Prepend(std::string p) : m_prepend(std::move(p)) {}
    void normalize(std::string& s) const override
    {
        if (!s.empty())
            s.insert(0, m_prepend);
    }

private:
    std::string m_prepend;
};

class Replace : public Normalizer {
public:
    Replace(Pattern p, std::string content) : m_pattern(std::move(p)), m_content(std::move(content)) {}
    void normalize(std::string& s) const override { s = m_pattern.replaceAll(s, m_content); }

private:
    Pattern m_pattern;
    std::string m_content;
};

class UnicodeForm : public Normalizer {
public:
    explicit UnicodeForm(uni::Form f) : m_form(f) {}
    void normalize(std::string& s) const override { s = uni::normalize(s, m_form); }

private:
    uni::Form m_form;
};

class Lowercase : public Normalizer {
public:
    void normalize(std::string& s) const override { s = uni::lowercase(s); }
};

class Strip : public Normalizer {
public:
    Strip(bool left, bool right) : m_left(left), m_right(right) {}
    void normalize(std::string& s) const override
    {
        size_t begin = 0, end = s.size();
        if (m_left) {
            while (begin < end) {
                size_t len;
                if (!uni::isWhitespace(uni::decodeAt(s, begin, len)))
                    break;
                begin += len;
            }
        }
        if (m_right) {
            while (end > begin) {
                size_t start = end - 1;
                while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
                    --start;
                size_t len;
                if (!uni::isWhitespace(uni::decodeAt(s, start, len)))
                    break;
                end = start;
            }
        }
        s = s.substr(begin, end - begin);
    }

private:
    bool m_left, m_right;
};

class StripAccents : public Normalizer {
public:
    void normalize(std::string& s) const override
    {
        std::string out;
        out.reserve(s.size());
        for (size_t i = 0; i < s.size();) {
            size_t len;
            int32_t cp = uni::decodeAt(s, i, len);
            if (!uni::isCombiningMark(cp))
                out.append(s, i, len);
            i += len;
        }
        s = std::move(out);
    }
};

class ByteLevelNormalizer : public Normalizer {
public:
    void normalize(std::string& s) const override
    {
        const auto& table = uni::byteToChar();
        std::string out;
        out.reserve(s.size() * 2);
        for (unsigned char b : s)
            out += table[b];
        s = std::move(out);
    }
};

std::string str(const json& j, const char* key, const std::string& file, const std::string& what)
{
    auto it = j.find(key);
    if (it == j.end() || !it->is_string())
        throw InputError(file, what + " has no string '" + key + "'");
    return it->get<std::string>();
}

} // namespace

// A {"String": s} or {"Regex": r} pattern object.
Pattern makePattern(const json& j, const std::string& file, const std::string& what)
{
    if (j.is_object() && j.contains("String") && j["String"].is_string())
        return Pattern::literal(j["String"].get<std::string>());
    if (j.is_object() && j.contains("Regex") && j["Regex"].is_string())
        return Pattern::regex(j["Regex"].get<std::string>(), file);
    throw InputError(file, what + " pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> makeNormalizer(const json& j, const std::string& file)
{
    if (j.is_null())
        return nullptr;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw InputError(file, "normalizer has no \"type\"");
    const std::string type = j["type"].get<std::string>();
    if (type == "Sequence") {
        auto seq = std::make_unique<Sequence>();
        const json& parts = j.value("normalizers", json::array());
        if (!parts.is_array())
            throw InputError(file, "Sequence normalizer: \"normalizers\" is not a list");
        for (const auto& p : parts)
            if (auto n = makeNormalizer(p, file))
                seq->parts.push_back(std::move(n));
        return seq;
    }
    if (type == "Prepend")
        return std::make_unique<Prepend>(str(j, "prepend", file, "Prepend normalizer"));
    if (type == "Replace")
        return std::make_unique<Replace>(makePattern(j.value("pattern", json()), file, "Replace normalizer"),
                                         str(j, "content", file, "Replace normalizer"));
    if (type == "NFC")
        return std::make_unique<UnicodeForm>(uni::Form::NFC);
    if (type == "NFD")
        return std::make_unique<UnicodeForm>(uni::Form::NFD);
    if (type == "NFKC")
        return std::make_unique<UnicodeForm>(uni::Form::NFKC);
    if (type == "NFKD")
        return std::make_unique<UnicodeForm>(uni::Form::NFKD);
    if (type == "Lowercase")
        return std::make_unique<Lowercase>();
    if (type == "Strip")
        return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
    if (type == "StripAccents")
        return std::make_unique<StripAccents>();
    if (type == "ByteLevel")
        return std::make_unique<ByteLevelNormalizer>();
    if (type == "Precompiled" || type == "BertNormalizer" || type == "Bert" || type == "Nmt")
        throw InputError(file, "normalizer '" + type + "' is not supported (Stowage supports Sequence, Prepend, "
                               "Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, ByteLevel)");
    throw InputError(file, "unknown normalizer type '" + type + "'");
}

} // namespace stowage::tok
