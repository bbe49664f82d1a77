#pragma once
// A read-only memory mapping of a whole file. Tensors are views into it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace stowage {

class MappedFile {
public:
    // Throws InputError naming `path` when the file cannot be opened or mapped.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return m_path; }
    const uint8_t* data() const { return m_data; }
    uint64_t size() const { return m_size; }

private:
    std::string m_path;
    const uint8_t* m_data = nullptr;
    uint64_t m_size = 0;
};

} // namespace stowage
