#include "stowage/offloadfolder.h"

#include "stowage/error.h"
#include "stowage/fileio.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace stowage {
namespace {

// numpy's names, which Accelerate writes (bfloat16 is its own special case).
const char* numpyName(DType d)
{
    switch (d) {
    case DType::BF16: return "bfloat16";
    case DType::BOOL: return "bool";
    default: return dtypeTorchName(d);
    }
}

uint64_t numelOf(const std::vector<int64_t>& shape)
{
    uint64_t n = 1;
    for (auto d : shape)
        n *= uint64_t(d);
    return n;
}

} // namespace

OffloadFolder::OffloadFolder(std::string folder) : m_folder(std::move(folder)) {}

std::string OffloadFolder::datPath(const std::string& name) const { return (fs::path(m_folder) / (name + ".dat")).string(); }

bool OffloadFolder::openExisting()
{
    const fs::path index = fs::path(m_folder) / "index.json";
    std::error_code ec;
    if (!fs::exists(index, ec))
        return false;
    nlohmann::json j = nlohmann::json::parse(readTextFile(index.string()), nullptr, false);
    if (!j.is_object())
        return false;
    std::map<std::string, OffloadEntry> entries;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const auto& v = it.value();
        if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v["dtype"].is_string() || !v["shape"].is_array())
            return false;
        auto d = dtypeFromTorchName(v["dtype"].get<std::string>());
        if (!d)
            return false;
        OffloadEntry e{*d, {}};
        for (const auto& x : v["shape"])
            if (x.is_number_unsigned())
                e.shape.push_back(x.get<int64_t>());
            else
                return false;
        uint64_t expect = numelOf(e.shape) * uint64_t(dtypeSize(e.dtype));
        if (fs::file_size(datPath(it.key()), ec) != expect || ec)
            return false;
        entries[it.key()] = e;
    }
    m_entries = std::move(entries);
    return true;
}

bool OffloadFolder::has(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const
{
    auto it = m_entries.find(name);
    return it != m_entries.end() && it->second.dtype == dtype && it->second.shape == shape;
}

void OffloadFolder::write(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data,
                         uint64_t bytes)
{
    // Tensor names become file names: never let one leave the folder.
    if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos || name[0] == '.')
        throw InputError(m_folder, "tensor name '" + name + "' cannot be an offload file name");
    std::error_code ec;
    fs::create_directories(m_folder, ec);
    if (ec)
        throw InputError(m_folder, "cannot create the offload folder: " + ec.message());
    // Anything already indexed under this name is stale from here on.
    m_entries.erase(name);
    m_maps.erase(name);
    const std::string path = datPath(name);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f)
        throw InputError(path, std::string("cannot write the offload file: ") + std::strerror(errno));
    bool ok = bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes;
    int err = errno;
    ok = std::fflush(f) == 0 && ok;
    err = ok ? 0 : (errno ? errno : err);
    ok = std::fclose(f) == 0 && ok;
    if (!ok) {
        std::remove(path.c_str());
        throw InputError(path, std::string("cannot write the offload file: ") + std::strerror(err ? err : ENOSPC));
    }
    m_entries[name] = {dtype, shape};
}

void OffloadFolder::commit()
{
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [name, e] : m_entries)
        j[name] = {{"dtype", numpyName(e.dtype)}, {"shape", e.shape}};
    // index.json last, atomically: only a complete folder has one
    writeFileAtomically((fs::path(m_folder) / "index.json").string(), j.dump(2));
}

const uint8_t* OffloadFolder::data(const std::string& name)
{
    auto it = m_maps.find(name);
    if (it == m_maps.end())
        it = m_maps.emplace(name, std::make_shared<MappedFile>(datPath(name))).first;
    return it->second->data();
}

} // namespace stowage
