#pragma once
// Test support for tst_tokenizer and tst_sentencepiece: the committed
// tokenizer data, the strings both encode, streaming through StreamDecoder and
// readable QCOMPARE failures for ids and byte strings.
#include "stowage/tokenizer.h"

#include <QString>
#include <QtTest>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace tokenizertest {

inline const std::string kScripts = STOWAGE_TEST_SCRIPTS;
inline const std::string kData = kScripts + "/../tokenizer_data";

bool validUtf8(const std::string& s);

std::string show(const std::string& s);
std::string show(const std::vector<int32_t>& v);

std::vector<int32_t> ids(const stowage::Tokenizer& t, std::initializer_list<const char*> tokens);

// The pushes, each checked to be valid UTF-8, then finish().
std::string streamed(const stowage::Tokenizer& t, const std::vector<int32_t>& ids, bool skipSpecial, std::string* bad);

// The InputError message of Tokenizer::fromFolder(folder), empty if it loads.
QString errorOf(const std::string& folder);

void writeText(const std::string& path, const std::string& text);

// Zipf-distributed made-up words, punctuation and line breaks: about `bytes` of English-like text.
std::string englishLikeText(size_t bytes);

// tests/tokenizer_data/hard_strings.json.
std::vector<std::string> hardStrings();

} // namespace tokenizertest

// Readable QCOMPARE failures.
namespace QTest {
template <> char* toString(const std::vector<int32_t>& v);
template <> char* toString(const std::optional<int32_t>& v);
template <> char* toString(const std::string& s);
} // namespace QTest
