#pragma once
// UTF-8 and Unicode helpers (utf8proc underneath), with the character classes
// of Rust's char methods that tokenizers relies on.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace stowage::tok::uni {

// The code point at s[i] and its length in bytes; -1 (length 1) for a byte
// that does not start a valid sequence.
int32_t decodeAt(std::string_view s, size_t i, size_t& len);
void append(std::string& out, int32_t cp);
bool isValid(std::string_view s);
// As Rust's String::from_utf8_lossy: one U+FFFD per maximal invalid subpart.
std::string lossy(std::string_view bytes);
bool endsWithReplacementChar(std::string_view s);

bool isWhitespace(int32_t cp);  // char::is_whitespace (White_Space)
bool isNumeric(int32_t cp);     // char::is_numeric (Nd, Nl, No)
bool isWordChar(int32_t cp);    // Rust regex's \w: Alphabetic, marks, Nd, Pc, join controls
bool isPunctuation(int32_t cp); // ASCII punctuation or P*
bool isCombiningMark(int32_t cp);

std::string lowercase(std::string_view s); // char::to_lowercase per character
enum class Form { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, Form form);

// GPT-2's bytes_to_unicode(): each byte as the UTF-8 of its printable stand-in.
const std::array<std::string, 256>& byteToChar();
int charToByte(int32_t cp); // -1 when cp stands for no byte

} // namespace stowage::tok::uni
