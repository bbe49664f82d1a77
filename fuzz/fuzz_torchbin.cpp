// The restricted pytorch_model.bin reader (engine/formats/torchbin.cpp,
// zipreader.cpp, unpickler.cpp). Two kinds of input:
//  - starting with "PK": a whole torch.save() file, zip and all;
//  - anything else: the pickle alone (data.pkl). The target wraps it in the
//    archive torch.save() writes — with a correct CRC, which random changes
//    to a whole file would break, hiding the unpickler from the fuzzer —
//    beside storages archive/data/0..7 of 4, 8, ... 512 bytes.
// Tensors it returns must lie inside the file.
#include "common.h"

#include "stowage/torchbin.h"

#include <array>

namespace {

uint32_t crc32(const std::string& s)
{
    static const auto table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : s)
        c = table[(c ^ b) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

void put16(std::string& out, uint32_t v)
{
    out += char(v & 0xFF);
    out += char((v >> 8) & 0xFF);
}
void put32(std::string& out, uint32_t v)
{
    put16(out, v & 0xFFFF);
    put16(out, v >> 16);
}

// A stored (uncompressed) zip of `entries`, as PyTorch's writer lays it out.
std::string storedZip(const std::vector<std::pair<std::string, std::string>>& entries)
{
    std::string out, central;
    for (const auto& [name, bytes] : entries) {
        const uint32_t offset = uint32_t(out.size()), crc = crc32(bytes), size = uint32_t(bytes.size());
        put32(out, 0x04034b50);
        put16(out, 20), put16(out, 0), put16(out, 0), put16(out, 0), put16(out, 0);
        put32(out, crc), put32(out, size), put32(out, size);
        put16(out, uint32_t(name.size())), put16(out, 0);
        out += name;
        out += bytes;
        put32(central, 0x02014b50);
        put16(central, 20), put16(central, 20), put16(central, 0), put16(central, 0), put16(central, 0),
            put16(central, 0);
        put32(central, crc), put32(central, size), put32(central, size);
        put16(central, uint32_t(name.size())), put16(central, 0), put16(central, 0), put16(central, 0),
            put16(central, 0);
        put32(central, 0), put32(central, offset);
        central += name;
    }
    const uint32_t cdOffset = uint32_t(out.size()), cdSize = uint32_t(central.size());
    out += central;
    put32(out, 0x06054b50);
    put16(out, 0), put16(out, 0), put16(out, uint32_t(entries.size())), put16(out, uint32_t(entries.size()));
    put32(out, cdSize), put32(out, cdOffset), put16(out, 0);
    return out;
}

void parse(const uint8_t* data, size_t size)
{
    try {
        for (const auto& t : stowage::parseTorchBin(data, size, "pytorch_model.bin"))
            if (t.nbytes > size || t.offset > size - t.nbytes || t.nbytes != t.numel() * stowage::dtypeSize(t.dtype))
                std::abort();
    } catch (const stowage::InputError&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
        parse(data, size);
        return 0;
    }
    std::vector<std::pair<std::string, std::string>> entries{
        {"archive/data.pkl", std::string(reinterpret_cast<const char*>(data), size)}, {"archive/byteorder", "little"}};
    for (int i = 0; i < 8; ++i)
        entries.push_back({"archive/data/" + std::to_string(i), std::string(size_t(4) << i, char(0x3c + i))});
    entries.push_back({"archive/version", "3\n"});
    const std::string zip = storedZip(entries);
    parse(reinterpret_cast<const uint8_t*>(zip.data()), zip.size());
    return 0;
}
