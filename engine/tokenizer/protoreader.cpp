// The protobuf wire format (https://protobuf.dev/programming-guides/encoding/)
// and SentencePiece's ModelProto read with it. Field numbers are those of
// sentencepiece_model.proto (SentencePiece 0.1.97 and later).
#include "protoreader.h"

#include <cstring>

namespace stowage::tok {

namespace {

constexpr int kMaxDepth = 100; // protobuf's default recursion limit

const char* wireName(int w)
{
    switch (w) {
    case ProtoReader::Varint: return "0 (varint)";
    case ProtoReader::Fixed64: return "1 (64-bit)";
    case ProtoReader::Bytes: return "2 (length-delimited)";
    case ProtoReader::StartGroup: return "3 (start group)";
    case ProtoReader::EndGroup: return "4 (end group)";
    case ProtoReader::Fixed32: return "5 (32-bit)";
    default: return "?";
    }
}

} // namespace

void ProtoReader::fail(const std::string& why) const
{
    throw ProtoError(why + " (" + m_message + ", byte " + std::to_string(m_base + m_tagPos) + ")");
}

uint64_t ProtoReader::readVarint()
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (m_pos >= m_data.size())
            fail("truncated varint");
        auto b = static_cast<unsigned char>(m_data[m_pos++]);
        if (shift == 63 && (b & 0x7E) != 0)
            fail("varint does not fit in 64 bits");
        v |= static_cast<uint64_t>(b & 0x7F) << shift;
        if (!(b & 0x80))
            return v;
    }
    fail("varint longer than 10 bytes");
}

std::string_view ProtoReader::take(size_t n, const char* what)
{
    if (n > m_data.size() - m_pos)
        fail(std::string(what) + " of " + std::to_string(n) + " bytes runs past the end (" +
             std::to_string(m_data.size() - m_pos) + " left)");
    auto v = m_data.substr(m_pos, n);
    m_pos += n;
    return v;
}

bool ProtoReader::next()
{
    m_tagPos = m_pos;
    if (m_pos >= m_data.size())
        return false;
    uint64_t tag = readVarint();
    m_field = static_cast<uint32_t>(tag >> 3);
    int wire = static_cast<int>(tag & 7);
    if (tag >> 3 > 0x1FFFFFFF)
        fail("field number " + std::to_string(tag >> 3) + " out of range");
    if (m_field == 0)
        fail("field number 0");
    if (wire > Fixed32)
        fail("invalid wire type " + std::to_string(wire) + " of field " + std::to_string(m_field));
    m_wire = static_cast<Wire>(wire);
    if (m_wire == EndGroup && m_groups == 0)
        fail("end-group tag of field " + std::to_string(m_field) + " without a start-group tag");
    return true;
}

void ProtoReader::expect(Wire w, const char* name) const
{
    if (m_wire != w)
        fail("field " + std::to_string(m_field) + " (" + name + ") has wire type " + wireName(m_wire) +
             ", expected " + wireName(w));
}

uint64_t ProtoReader::varint(const char* name)
{
    expect(Varint, name);
    return readVarint();
}

float ProtoReader::float32(const char* name)
{
    expect(Fixed32, name);
    auto b = take(4, "32-bit value");
    uint32_t u = 0;
    for (int i = 3; i >= 0; --i)
        u = (u << 8) | static_cast<unsigned char>(b[static_cast<size_t>(i)]);
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

std::string_view ProtoReader::bytes(const char* name)
{
    expect(Bytes, name);
    uint64_t n = readVarint();
    if (n > m_data.size() - m_pos)
        fail(std::string("field ") + std::to_string(m_field) + " (" + name + ") of " + std::to_string(n) +
             " bytes runs past the end (" + std::to_string(m_data.size() - m_pos) + " left)");
    return take(static_cast<size_t>(n), "value");
}

ProtoReader ProtoReader::message(const char* name, const char* type)
{
    if (m_depth + 1 >= kMaxDepth)
        fail("messages nested too deeply");
    auto b = bytes(name);
    return ProtoReader(b, type, m_base + m_pos - b.size(), m_depth + 1);
}

void ProtoReader::skip()
{
    switch (m_wire) {
    case Varint: readVarint(); break;
    case Fixed64: take(8, "64-bit value"); break;
    case Fixed32: take(4, "32-bit value"); break;
    case Bytes: bytes("unknown"); break;
    case EndGroup: fail("unexpected end-group tag");
    case StartGroup: {
        if (m_depth + m_groups + 1 >= kMaxDepth)
            fail("groups nested too deeply");
        const uint32_t group = m_field;
        const size_t start = m_tagPos;
        ++m_groups;
        for (;;) {
            if (!next()) {
                m_tagPos = start;
                fail("group of field " + std::to_string(group) + " not closed");
            }
            if (m_wire == EndGroup) {
                if (m_field != group)
                    fail("end-group tag of field " + std::to_string(m_field) + " closes the group of field " +
                         std::to_string(group));
                break;
            }
            skip();
        }
        --m_groups;
        break;
    }
    }
}

namespace {

void parsePiece(ProtoReader r, SpModelProto::Piece& p)
{
    while (r.next()) {
        switch (r.field()) {
        case 1: p.piece = std::string(r.bytes("piece")); break;
        case 2: p.score = r.float32("score"); break;
        case 3: {
            uint64_t t = r.varint("type");
            if (t >= SpModelProto::Normal && t <= SpModelProto::Byte) // else unknown: proto2 keeps the old value
                p.type = static_cast<int>(t);
            break;
        }
        default: r.skip();
        }
    }
}

void parseTrainerSpec(ProtoReader r, SpModelProto& m)
{
    while (r.next()) {
        switch (r.field()) {
        case 3: {
            uint64_t t = r.varint("model_type");
            if (t >= SpModelProto::Unigram && t <= SpModelProto::Char)
                m.modelType = static_cast<int>(t);
            break;
        }
        case 24: m.treatWhitespaceAsSuffix = r.boolean("treat_whitespace_as_suffix"); break;
        case 35: m.byteFallback = r.boolean("byte_fallback"); break;
        case 45: m.unkPiece = std::string(r.bytes("unk_piece")); break;
        case 46: m.bosPiece = std::string(r.bytes("bos_piece")); break;
        case 47: m.eosPiece = std::string(r.bytes("eos_piece")); break;
        case 48: m.padPiece = std::string(r.bytes("pad_piece")); break;
        default: r.skip();
        }
    }
}

void parseNormalizerSpec(ProtoReader r, SpModelProto& m)
{
    while (r.next()) {
        switch (r.field()) {
        case 1: m.normalizerName = std::string(r.bytes("name")); break;
        case 2: m.precompiledCharsmap = std::string(r.bytes("precompiled_charsmap")); break;
        case 3: m.addDummyPrefix = r.boolean("add_dummy_prefix"); break;
        case 4: m.removeExtraWhitespaces = r.boolean("remove_extra_whitespaces"); break;
        case 5: m.escapeWhitespaces = r.boolean("escape_whitespaces"); break;
        default: r.skip();
        }
    }
}

} // namespace

SpModelProto parseSpModelProto(std::string_view bytes)
{
    SpModelProto m;
    ProtoReader r(bytes, "ModelProto");
    // A message field given twice is merged, as protobuf does: the later
    // values of the fields it sets win.
    while (r.next()) {
        switch (r.field()) {
        case 1: parsePiece(r.message("pieces", "SentencePiece"), m.pieces.emplace_back()); break;
        case 2: parseTrainerSpec(r.message("trainer_spec", "TrainerSpec"), m); break;
        case 3: parseNormalizerSpec(r.message("normalizer_spec", "NormalizerSpec"), m); break;
        default: r.skip();
        }
    }
    // As ModelInterface's unk_piece() etc.: an empty name means the default.
    if (m.unkPiece.empty())
        m.unkPiece = "<unk>";
    if (m.bosPiece.empty())
        m.bosPiece = "<s>";
    if (m.eosPiece.empty())
        m.eosPiece = "</s>";
    if (m.padPiece.empty())
        m.padPiece = "<pad>";
    return m;
}

} // namespace stowage::tok
