#pragma once
// A read-only view of the uncompressed zip archive that torch.save() writes.
// It never copies entry data: each entry is an absolute range of the mapping,
// so tensors read from it stay zero-copy views of the file.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace stowage {

struct ZipEntry {
    std::string name;
    uint64_t offset = 0; // absolute offset of the entry's bytes in the file
    uint64_t size = 0;
    uint32_t crc32 = 0;
};

class ZipReader {
public:
    // Parses the end-of-central-directory record (zip64 too), the central
    // directory and every local header. Throws InputError naming `path` for
    // anything malformed, compressed, encrypted or outside [data, data+size).
    ZipReader(const uint8_t* data, uint64_t size, const std::string& path);

    // Entries in central-directory order.
    const std::vector<ZipEntry>& entries() const { return m_entries; }
    // nullptr when the archive has no entry of that name.
    const ZipEntry* find(const std::string& name) const;
    // Recomputes the CRC-32 of an entry and throws InputError on mismatch;
    // meant for the small entries (data.pkl), not for gigabytes of weights.
    void verifyCrc(const ZipEntry& entry) const;

private:
    void readCentralDirectory(uint64_t cdOffset, uint64_t cdSize, uint64_t count);
    uint64_t localDataOffset(uint64_t headerOffset, const std::string& name) const;

    const uint8_t* m_data;
    uint64_t m_size;
    std::string m_path;
    std::vector<ZipEntry> m_entries;
    std::unordered_map<std::string, size_t> m_byName;
};

} // namespace stowage
