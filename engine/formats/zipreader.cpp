// Zip parsing for torch.save() archives (PKWARE APPNOTE 6.3). Only what the
// PyTorch stream writer produces is accepted: one disk, stored entries, no
// encryption. Every offset comes from the file, so each one is checked
// against the mapping before it is dereferenced, with overflow-safe sums.
#include "zipreader.h"

#include "stowage/error.h"

#include <array>

namespace stowage {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint64_t kZip64EocdSize = 56;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kLocalSize = 30;

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) { return static_cast<uint32_t>(rd16(p)) | (static_cast<uint32_t>(rd16(p + 2)) << 16); }
uint64_t rd64(const uint8_t* p) { return static_cast<uint64_t>(rd32(p)) | (static_cast<uint64_t>(rd32(p + 4)) << 32); }

constexpr std::array<uint32_t, 256> makeCrcTable()
{
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
    }
    return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = makeCrcTable();

// Names go into one-line error messages, so control bytes must not.
std::string printableName(const std::string& s)
{
    std::string out;
    for (unsigned char c : s)
        out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
    return out;
}

} // namespace

ZipReader::ZipReader(const uint8_t* data, uint64_t size, const std::string& path)
    : m_data(data), m_size(size), m_path(path)
{
    auto inRange = [&](uint64_t off, uint64_t len) { return off <= m_size && len <= m_size - off; };

    // The EOCD sits at the very end, followed only by its comment (< 64 KiB).
    // Requiring the comment to end exactly at EOF rejects a signature that
    // merely happens to occur inside the comment or the last entry.
    uint64_t eocd = UINT64_MAX;
    if (m_size >= kEocdSize) {
        uint64_t lowest = m_size > kEocdSize + 0xFFFF ? m_size - kEocdSize - 0xFFFF : 0;
        for (uint64_t pos = m_size - kEocdSize + 1; pos-- > lowest;) {
            if (rd32(m_data + pos) == kEocdSig && pos + kEocdSize + rd16(m_data + pos + 20) == m_size) {
                eocd = pos;
                break;
            }
        }
    }
    if (eocd == UINT64_MAX) {
        if (m_size >= 4 && rd32(m_data) == kLocalSig)
            throw InputError(path, "truncated zip archive: the end of central directory record is missing "
                                   "(the file may be incompletely downloaded)");
        throw InputError(path, "not a zip archive (no end of central directory record), so not a torch.save file");
    }

    const uint8_t* e = m_data + eocd;
    uint64_t diskNo = rd16(e + 4), cdDisk = rd16(e + 6);
    uint64_t entriesHere = rd16(e + 8), entries = rd16(e + 10);
    uint64_t cdSize = rd32(e + 12), cdOffset = rd32(e + 16);
    uint64_t cdLimit = eocd; // the central directory must end before the record that describes it

    // Archives past 4 GiB (or 65535 entries) keep the real values in a zip64
    // record, found through the locator just before the EOCD.
    if (eocd >= kZip64LocatorSize && rd32(m_data + eocd - kZip64LocatorSize) == kZip64LocatorSig) {
        const uint8_t* loc = m_data + eocd - kZip64LocatorSize;
        uint64_t z = rd64(loc + 8);
        if (rd32(loc + 4) != 0 || rd32(loc + 16) > 1)
            throw InputError(path, "multi-disk zip archives are not supported");
        if (!inRange(z, kZip64EocdSize) || z > eocd - kZip64LocatorSize || rd32(m_data + z) != kZip64EocdSig)
            throw InputError(path, "corrupt zip archive: the zip64 end of central directory record is missing");
        const uint8_t* r = m_data + z;
        diskNo = rd32(r + 16);
        cdDisk = rd32(r + 20);
        entriesHere = rd64(r + 24);
        entries = rd64(r + 32);
        cdSize = rd64(r + 40);
        cdOffset = rd64(r + 48);
        cdLimit = z;
    }
    if (diskNo != 0 || cdDisk != 0 || entriesHere != entries)
        throw InputError(path, "multi-disk zip archives are not supported");
    if (cdOffset > cdLimit || cdSize > cdLimit - cdOffset)
        throw InputError(path, "corrupt zip archive: the central directory lies outside the file "
                               "(the file may be truncated)");
    readCentralDirectory(cdOffset, cdSize, entries);
}

void ZipReader::readCentralDirectory(uint64_t cdOffset, uint64_t cdSize, uint64_t count)
{
    // Each record takes at least 46 bytes; checking first keeps a forged
    // count from reserving memory the directory cannot fill.
    if (count > cdSize / kCentralSize)
        throw InputError(m_path, "corrupt zip archive: " + std::to_string(count) +
                                     " entries cannot fit in the central directory");
    m_entries.reserve(static_cast<size_t>(count));
    uint64_t pos = cdOffset;
    const uint64_t end = cdOffset + cdSize;
    for (uint64_t i = 0; i < count; ++i) {
        if (end - pos < kCentralSize || rd32(m_data + pos) != kCentralSig)
            throw InputError(m_path, "corrupt zip archive: central directory entry " + std::to_string(i) + " is malformed");
        const uint8_t* c = m_data + pos;
        uint16_t flags = rd16(c + 8), method = rd16(c + 10);
        uint64_t crc = rd32(c + 16), compSize = rd32(c + 20), size = rd32(c + 24);
        uint64_t nameLen = rd16(c + 28), extraLen = rd16(c + 30), commentLen = rd16(c + 32);
        uint64_t diskStart = rd16(c + 34), headerOffset = rd32(c + 42);
        uint64_t recordLen = kCentralSize + nameLen + extraLen + commentLen;
        if (recordLen > end - pos)
            throw InputError(m_path, "corrupt zip archive: central directory entry " + std::to_string(i) +
                                         " runs past the directory");
        std::string name(reinterpret_cast<const char*>(c + kCentralSize), static_cast<size_t>(nameLen));

        // Saturated 32-bit fields are replaced, in this fixed order, by
        // 64-bit values in the zip64 extra field (id 0x0001).
        const uint8_t* x = c + kCentralSize + nameLen;
        for (uint64_t xp = 0; xp + 4 <= extraLen;) {
            uint16_t id = rd16(x + xp), len = rd16(x + xp + 2);
            if (len > extraLen - xp - 4)
                throw InputError(m_path, "corrupt zip archive: extra field of '" + printableName(name) + "' is malformed");
            if (id == 0x0001) {
                const uint8_t* v = x + xp + 4;
                uint64_t left = len;
                auto take64 = [&](uint64_t& field) {
                    if (left < 8)
                        throw InputError(m_path, "corrupt zip archive: zip64 field of '" + printableName(name) + "' is short");
                    field = rd64(v);
                    v += 8;
                    left -= 8;
                };
                if (size == 0xFFFFFFFF)
                    take64(size);
                if (compSize == 0xFFFFFFFF)
                    take64(compSize);
                if (headerOffset == 0xFFFFFFFF)
                    take64(headerOffset);
                if (diskStart == 0xFFFF && left >= 4)
                    diskStart = rd32(v);
            }
            xp += 4 + len;
        }
        if (flags & 0x0041)
            throw InputError(m_path, "zip entry '" + printableName(name) + "' is encrypted");
        if (method != 0)
            throw InputError(m_path, "zip entry '" + printableName(name) + "' is compressed (method " + std::to_string(method) +
                                         "); torch.save writes stored entries only, so this file was repacked");
        if (compSize != size)
            throw InputError(m_path, "corrupt zip archive: stored entry '" + printableName(name) + "' has two different sizes");
        if (diskStart != 0)
            throw InputError(m_path, "multi-disk zip archives are not supported");

        ZipEntry entry;
        entry.name = name;
        entry.size = size;
        entry.crc32 = static_cast<uint32_t>(crc);
        entry.offset = localDataOffset(headerOffset, name);
        if (entry.size > m_size - entry.offset)
            throw InputError(m_path, "truncated zip archive: '" + printableName(name) + "' runs past the end of the file");
        // Two entries of one name would let two readers see different weights.
        if (!m_byName.emplace(name, m_entries.size()).second)
            throw InputError(m_path, "zip archive holds '" + printableName(name) + "' twice");
        m_entries.push_back(std::move(entry));
        pos += recordLen;
    }
}

// The data starts after the local header, whose extra field (torch pads it so
// tensors are 64-byte aligned) may differ from the central one.
uint64_t ZipReader::localDataOffset(uint64_t headerOffset, const std::string& name) const
{
    if (headerOffset > m_size || m_size - headerOffset < kLocalSize || rd32(m_data + headerOffset) != kLocalSig)
        throw InputError(m_path, "corrupt zip archive: local header of '" + printableName(name) + "' is missing");
    const uint8_t* l = m_data + headerOffset;
    uint64_t nameLen = rd16(l + 26), extraLen = rd16(l + 28);
    if (rd16(l + 8) != 0)
        throw InputError(m_path, "zip entry '" + printableName(name) + "' is compressed; torch.save writes stored entries only");
    uint64_t dataOffset = headerOffset + kLocalSize + nameLen + extraLen; // < 2^64: headerOffset <= size
    if (dataOffset > m_size || nameLen != name.size() ||
        name.compare(0, name.size(), reinterpret_cast<const char*>(l + kLocalSize), static_cast<size_t>(nameLen)) != 0)
        throw InputError(m_path, "corrupt zip archive: local header of '" + printableName(name) +
                                     "' does not match the central directory");
    return dataOffset;
}

const ZipEntry* ZipReader::find(const std::string& name) const
{
    auto it = m_byName.find(name);
    return it == m_byName.end() ? nullptr : &m_entries[it->second];
}

void ZipReader::verifyCrc(const ZipEntry& entry) const
{
    if (entry.offset > m_size || entry.size > m_size - entry.offset)
        throw InputError(m_path, "truncated zip archive: '" + printableName(entry.name) + "' runs past the end of the file");
    uint32_t c = 0xFFFFFFFFu;
    const uint8_t* p = m_data + entry.offset;
    for (uint64_t i = 0; i < entry.size; ++i)
        c = kCrcTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    if ((c ^ 0xFFFFFFFFu) != entry.crc32)
        throw InputError(m_path, "corrupt zip archive: checksum mismatch in '" + printableName(entry.name) + "'");
}

} // namespace stowage
