#include "stowage/safetensorswriter.h"

#include "stowage/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace stowage {

std::vector<uint8_t> safetensorsHeader(const std::vector<TensorBlob>& tensors,
                                       const std::map<std::string, std::string>& metadata)
{
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata.empty())
        h["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        h[t.name] = {{"dtype", dtypeCode(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = h.dump();
    while ((8 + text.size()) % 8 != 0)
        text.push_back(' '); // the reference pads so data starts aligned
    std::vector<uint8_t> out(8 + text.size());
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i)
        out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
    std::memcpy(out.data() + 8, text.data(), text.size());
    return out;
}

void writeSafetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                      const std::map<std::string, std::string>& metadata)
{
    for (const auto& t : tensors) {
        uint64_t numel = 1;
        for (int64_t d : t.shape)
            numel *= static_cast<uint64_t>(d);
        if (numel * static_cast<uint64_t>(dtypeSize(t.dtype)) != t.bytes.size())
            throw std::invalid_argument("writeSafetensors: tensor '" + t.name + "' bytes do not match its shape");
    }
    // Write to a temporary name and rename, so a failed write never leaves a
    // file that looks complete.
    const std::string tmp = path + ".partial";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f)
        throw InputError(path, std::string("cannot write: ") + std::strerror(errno));
    auto header = safetensorsHeader(tensors, metadata);
    bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
    for (const auto& t : tensors)
        ok = ok && (t.bytes.empty() || std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size());
    int err = errno;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) {
        std::remove(tmp.c_str());
        throw InputError(path, std::string("cannot write: ") + std::strerror(err ? err : EIO));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::remove(tmp.c_str());
        throw InputError(path, "cannot write: " + ec.message());
    }
}

} // namespace stowage
