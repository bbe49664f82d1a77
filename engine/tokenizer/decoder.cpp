// Decoders of tokenizer.json: ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
// Replace, BPEDecoder, WordPiece, Sequence. Each is tokenizers' decode_chain.
#include "internal.h"
#include "regex.h"
#include "unicode.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

namespace stowage::tok {

namespace {

using nlohmann::json;
using Tokens = std::vector<std::string>;

const char kReplacementChar[] = "\xEF\xBF\xBD";

class ByteLevelDecoder : public Decoder {
public:
    void decodeChain(Tokens& tokens) const override
    {
        std::string bytes;
        for (const auto& t : tokens) {
            // A token whose characters are not all byte stand-ins is taken as it is.
            std::string mine;
            bool all = true;
            for (size_t i = 0; i < t.size() && all;) {
                size_t len;
                int b = uni::charToByte(uni::decodeAt(t, i, len));
                all = b >= 0;
                mine.push_back(static_cast<char>(b));
                i += len;
            }
            bytes += all ? mine : t;
        }
        tokens.assign(1, uni::lossy(bytes));
    }
};

class MetaspaceDecoder : public Decoder {
public:
    MetaspaceDecoder(std::string rep, bool prepend) : m_rep(std::move(rep)), m_prepend(prepend) {}
    void decodeChain(Tokens& tokens) const override
    {
        for (size_t i = 0; i < tokens.size(); ++i) {
            std::string out;
            const std::string& t = tokens[i];
            for (size_t at = 0; at < t.size();) {
                if (t.compare(at, m_rep.size(), m_rep) == 0) {
                    if (!(i == 0 && m_prepend))
                        out.push_back(' ');
                    at += m_rep.size();
                } else {
                    out.push_back(t[at++]);
                }
            }
            tokens[i] = std::move(out);
        }
    }

private:
    std::string m_rep;
    bool m_prepend;
};

class ByteFallbackDecoder : public Decoder {
public:
    void decodeChain(Tokens& tokens) const override
    {
        Tokens out;
        std::string bytes;
        auto flush = [&] {
            if (bytes.empty())
                return;
            if (uni::isValid(bytes))
                out.push_back(bytes);
            else
                for (size_t k = 0; k < bytes.size(); ++k)
                    out.emplace_back(kReplacementChar);
            bytes.clear();
        };
        for (auto& t : tokens) {
            int byte = -1;
            if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
                auto hex = [](char c) {
                    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                };
                int hi = hex(t[3]), lo = hex(t[4]);
                if (hi >= 0 && lo >= 0)
                    byte = hi * 16 + lo;
            }
            if (byte >= 0) {
                bytes.push_back(static_cast<char>(byte));
            } else {
                flush();
                out.push_back(std::move(t));
            }
        }
        flush();
        tokens = std::move(out);
    }
};

class Fuse : public Decoder {
public:
    void decodeChain(Tokens& tokens) const override
    {
        std::string all;
        for (const auto& t : tokens)
            all += t;
        tokens.assign(1, std::move(all));
    }
};

class StripDecoder : public Decoder {
public:
    StripDecoder(std::string content, size_t start, size_t stop)
        : m_content(std::move(content)), m_start(start), m_stop(stop) {}
    void decodeChain(Tokens& tokens) const override
    {
        for (auto& t : tokens) {
            std::vector<size_t> starts; // byte offset of each character
            for (size_t i = 0; i < t.size();) {
                starts.push_back(i);
                size_t len;
                uni::decodeAt(t, i, len);
                i += len;
            }
            auto charIs = [&](size_t k) {
                size_t end = k + 1 < starts.size() ? starts[k + 1] : t.size();
                return t.compare(starts[k], end - starts[k], m_content) == 0;
            };
            size_t startCut = 0;
            for (size_t k = 0; k < m_start && k < starts.size() && charIs(k); ++k)
                startCut = k + 1;
            size_t stopCut = starts.size();
            for (size_t k = 0; k < m_stop && k < starts.size(); ++k) {
                size_t idx = starts.size() - k - 1;
                if (!charIs(idx))
                    break;
                stopCut = idx;
            }
            if (stopCut <= startCut) {
                t.clear();
                continue;
            }
            size_t b = startCut < starts.size() ? starts[startCut] : t.size();
            size_t e = stopCut < starts.size() ? starts[stopCut] : t.size();
            t = t.substr(b, e - b);
        }
    }

private:
    std::string m_content;
    size_t m_start, m_stop;
};

class ReplaceDecoder : public Decoder {
public:
    ReplaceDecoder(Pattern p, std::string content) : m_pattern(std::move(p)), m_content(std::move(content)) {}
    void decodeChain(Tokens& tokens) const override
    {
        for (auto& t : tokens)
            t = m_pattern.replaceAll(t, m_content);
    }

private:
    Pattern m_pattern;
    std::string m_content;
};

class BpeDecoder : public Decoder {
public:
    explicit BpeDecoder(std::string suffix) : m_suffix(Pattern::literal(std::move(suffix))) {}
    void decodeChain(Tokens& tokens) const override
    {
        for (size_t i = 0; i < tokens.size(); ++i)
            tokens[i] = m_suffix.replaceAll(tokens[i], i + 1 == tokens.size() ? "" : " ");
    }

private:
    Pattern m_suffix;
};

class WordPieceDecoder : public Decoder {
public:
    WordPieceDecoder(std::string prefix, bool cleanup) : m_prefix(std::move(prefix)), m_cleanup(cleanup) {}
    void decodeChain(Tokens& tokens) const override
    {
        for (size_t i = 0; i < tokens.size(); ++i) {
            std::string& t = tokens[i];
            if (i != 0) {
                if (t.compare(0, m_prefix.size(), m_prefix) == 0)
                    t.erase(0, m_prefix.size());
                else
                    t.insert(0, 1, ' ');
            }
            if (m_cleanup)
                t = cleanup(t);
        }
    }

private:
    static std::string cleanup(const std::string& s)
    {
        static const std::pair<const char*, const char*> rules[] = {
            {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
            {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
        std::string out = s;
        for (const auto& [from, to] : rules)
            out = Pattern::literal(from).replaceAll(out, to);
        return out;
    }
    std::string m_prefix;
    bool m_cleanup;
};

class Sequence : public Decoder {
public:
    std::vector<std::unique_ptr<Decoder>> parts;
    void decodeChain(Tokens& tokens) const override
    {
        for (const auto& p : parts)
            p->decodeChain(tokens);
    }
};

} // namespace

std::unique_ptr<Decoder> makeByteLevelDecoder() { return std::make_unique<ByteLevelDecoder>(); }

std::unique_ptr<Decoder> makeLlamaDecoder()
{
    auto seq = std::make_unique<Sequence>();
    seq->parts.push_back(std::make_unique<ReplaceDecoder>(Pattern::literal("\xE2\x96\x81"), " "));
    seq->parts.push_back(std::make_unique<ByteFallbackDecoder>());
    seq->parts.push_back(std::make_unique<Fuse>());
    seq->parts.push_back(std::make_unique<StripDecoder>(" ", 1, 0));
    return seq;
}

std::unique_ptr<Decoder> makeDecoder(const json& j, const std::string& file)
{
    if (j.is_null())
        return nullptr;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw InputError(file, "decoder has no \"type\"");
    const std::string type = j["type"].get<std::string>();
    if (type == "Sequence") {
        auto seq = std::make_unique<Sequence>();
        const json& parts = j.value("decoders", json::array());
        if (!parts.is_array())
            throw InputError(file, "Sequence decoder: \"decoders\" is not a list");
        for (const auto& p : parts)
            if (auto d = makeDecoder(p, file))
                seq->parts.push_back(std::move(d));
        return seq;
    }
    if (type == "ByteLevel")
        return std::make_unique<ByteLevelDecoder>();
    if (type == "Metaspace") {
        std::string scheme = j.value("prepend_scheme", std::string("always"));
        bool prepend = scheme != "never";
        if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean() && !j["add_prefix_space"].get<bool>())
            prepend = false;
        return std::make_unique<MetaspaceDecoder>(j.value("replacement", std::string("\xE2\x96\x81")), prepend);
    }
    if (type == "ByteFallback")
        return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse")
        return std::make_unique<Fuse>();
    if (type == "Strip") {
        std::string content = j.value("content", std::string(" "));
        return std::make_unique<StripDecoder>(content, j.value("start", size_t(0)), j.value("stop", size_t(0)));
    }
    if (type == "Replace") {
        if (!j.contains("content") || !j["content"].is_string())
            throw InputError(file, "Replace decoder has no string 'content'");
        return std::make_unique<ReplaceDecoder>(makePattern(j.value("pattern", json()), file, "Replace decoder"),
                                                j["content"].get<std::string>());
    }
    if (type == "BPEDecoder")
        return std::make_unique<BpeDecoder>(j.value("suffix", std::string("</w>")));
    if (type == "WordPiece")
        return std::make_unique<WordPieceDecoder>(j.value("prefix", std::string("##")), j.value("cleanup", true));
    if (type == "CTC")
        throw InputError(file, "decoder 'CTC' is not supported");
    throw InputError(file, "unknown decoder type '" + type + "'");
}

} // namespace stowage::tok
