#pragma once
// A minimal protobuf wire-format reader and, on top of it, the parts of
// SentencePiece's ModelProto (sentencepiece_model.proto) that encoding needs.
// Our own code, so that stowage_tokenizer does not link libsentencepiece and
// its embedded protobuf-lite (whose exported symbols clash with LibTorch's
// libprotobuf in one process).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace stowage::tok {

// A malformed message; what() says what and at which byte.
class ProtoError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Reads the fields of one message, in order. Everything is bounds-checked;
// failures throw ProtoError. Offsets in messages count from the start of the
// outermost buffer (`base` is where `data` starts in it).
class ProtoReader {
public:
    enum Wire : int { Varint = 0, Fixed64 = 1, Bytes = 2, StartGroup = 3, EndGroup = 4, Fixed32 = 5 };

    ProtoReader(std::string_view data, const char* message, size_t base = 0, int depth = 0)
        : m_data(data), m_message(message), m_base(base), m_depth(depth) {}

    // Reads the next tag; false at the end of the message.
    bool next();
    uint32_t field() const { return m_field; }
    Wire wire() const { return m_wire; }

    // The value of the current field, which must have the wire type the
    // getter reads (else: "field N (name) of Message has wire type ..."). The
    // name only goes into that message.
    uint64_t varint(const char* name);
    bool boolean(const char* name) { return varint(name) != 0; }
    int32_t int32(const char* name) { return static_cast<int32_t>(varint(name)); } // as protobuf: truncated
    float float32(const char* name);
    std::string_view bytes(const char* name);
    // A nested message: a reader over the bytes of the current field.
    ProtoReader message(const char* name, const char* type);
    // Skips the current field, whatever its wire type (groups included).
    void skip();

    [[noreturn]] void fail(const std::string& why) const;

private:
    uint64_t readVarint();
    std::string_view take(size_t n, const char* what);
    void expect(Wire w, const char* name) const;

    std::string_view m_data;
    const char* m_message;
    size_t m_base, m_pos = 0, m_tagPos = 0;
    int m_depth, m_groups = 0;
    uint32_t m_field = 0;
    Wire m_wire = Varint;
};

// sentencepiece_model.proto, the fields the processor uses, with proto2's
// defaults. Unknown fields (and unknown enum values, as protobuf does) are
// skipped.
struct SpModelProto {
    enum PieceType { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
    enum ModelType { Unigram = 1, Bpe = 2, Word = 3, Char = 4 };
    struct Piece {
        std::string piece;
        float score = 0.0f;
        int type = Normal;
    };
    std::vector<Piece> pieces; // ModelProto.pieces (1)

    // TrainerSpec (2)
    int modelType = Unigram;                         // 3
    bool treatWhitespaceAsSuffix = false;             // 24
    bool byteFallback = false;                        // 35
    std::string unkPiece = "<unk>", bosPiece = "<s>", // 45, 46
        eosPiece = "</s>", padPiece = "<pad>";        // 47, 48

    // NormalizerSpec (3)
    std::string normalizerName;       // 1
    std::string precompiledCharsmap;  // 2
    bool addDummyPrefix = true;       // 3
    bool removeExtraWhitespaces = true; // 4
    bool escapeWhitespaces = true;    // 5
};

// Parses a serialized ModelProto. Throws ProtoError.
SpModelProto parseSpModelProto(std::string_view bytes);

} // namespace stowage::tok
