#pragma once
// Accelerate's offload folder: index.json maps each tensor name to
// {"dtype", "shape"}, and <name>.dat holds its raw little-endian bytes
// (bfloat16 as int16 bits, 0-d tensors as one element). Folders written here
// load in Accelerate and the other way round.
#include "stowage/dtype.h"
#include "stowage/mappedfile.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace stowage {

struct OffloadEntry {
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
};

class OffloadFolder {
public:
    explicit OffloadFolder(std::string folder);
    const std::string& folder() const { return m_folder; }

    // Reads index.json when present and every .dat it names has the right
    // size; otherwise the folder is treated as empty (and will be rewritten).
    bool openExisting();
    bool has(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;

    // Writes <name>.dat now; index.json only in commit(), so a folder whose
    // writing failed never looks complete. Throws InputError naming the file.
    void write(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data, uint64_t bytes);
    void commit();

    // A mapping of <name>.dat (kept open by this object).
    const uint8_t* data(const std::string& name);
    const std::map<std::string, OffloadEntry>& entries() const { return m_entries; }

private:
    std::string datPath(const std::string& name) const;
    std::string m_folder;
    std::map<std::string, OffloadEntry> m_entries;
    std::map<std::string, std::shared_ptr<MappedFile>> m_maps;
};

} // namespace stowage
