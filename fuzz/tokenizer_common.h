#pragma once
// What the tokenizer targets do with a tokenizer that loaded: encode a text,
// decode the ids back (whole, skipping specials, and streamed), and look up
// ids and tokens, checking the promises tokenizer.h makes.
#include "stowage/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fuzz {

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
inline bool validUtf8(const std::string& s)
{
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t k = 1; k <= n; ++k) {
            if (i + k >= s.size())
                return false;
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        static const uint32_t minimum[] = {0, 0x80, 0x800, 0x10000};
        if (cp < minimum[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

inline void check(bool ok, const char* what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz check failed: %s\n", what);
        std::abort();
    }
}

// `extraIds` come from the input too: decoding ids the model does not have
// must skip them, not read past a table.
constexpr size_t kMaxStreamed = 256;

inline void exercise(const stowage::Tokenizer& tok, const std::string& text, const std::vector<int32_t>& extraIds)
{
    std::vector<int32_t> ids = tok.encode(text);
    const int32_t vocab = tok.vocabSize();
    for (int32_t id : ids)
        check(id >= 0 && id < vocab, "encode gave an id outside 0..vocabSize()");
    for (int32_t id : extraIds)
        ids.push_back(id);
    for (bool skip : {false, true}) {
        const std::string out = tok.decode(ids, skip);
        check(validUtf8(out), "decode gave invalid UTF-8");
        // Streaming decodes the ids held back so far at every push, as
        // tokenizers' DecodeStream does: quadratic while no character
        // completes (a run of invalid bytes). A generated stream grows one
        // id per forward pass; here a long input would only time out.
        stowage::StreamDecoder stream(tok, skip);
        std::string streamed;
        for (size_t i = 0; i < ids.size() && i < kMaxStreamed; ++i)
            streamed += stream.push(ids[i]);
        streamed += stream.finish();
        check(validUtf8(streamed), "StreamDecoder gave invalid UTF-8");
    }
    for (int32_t id : ids) {
        if (auto t = tok.idToToken(id))
            (void)tok.tokenId(*t);
        (void)tok.isSpecial(id);
    }
    (void)tok.bosId();
    (void)tok.eosIds();
}

// Ids to decode besides the encoded ones: the input's last bytes read as
// little-endian int32s (some negative, some huge).
inline std::vector<int32_t> idsFrom(const std::string& bytes)
{
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 4 <= bytes.size() && ids.size() < 64; i += 4) {
        uint32_t v = uint32_t(uint8_t(bytes[i])) | uint32_t(uint8_t(bytes[i + 1])) << 8 |
                     uint32_t(uint8_t(bytes[i + 2])) << 16 | uint32_t(uint8_t(bytes[i + 3])) << 24;
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

} // namespace fuzz
