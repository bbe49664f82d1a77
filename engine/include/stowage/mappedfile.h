#pragma once
// A read-only memory mapping of a whole file. Tensors are views into it.
//
// A mapped file that shrinks while mapped (truncated, or rewritten in place)
// turns a read of its lost tail into SIGBUS. Two defences: checkSize(), a
// cheap fstat that callers run before they read (the session does, before
// each load, generation and step), and a table of every live mapping that a
// SIGBUS handler can search without locks or allocation (findMappedFile), so
// a process can die with the file's name instead of "Bus error".
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

    // The size the mapped file has now: fstat of the descriptor kept open
    // (the very file that is mapped, even when its path has been replaced or
    // removed since). Where the process ran short of descriptors, stat of the
    // path while it still names the same file; the mapped size otherwise.
    uint64_t currentSize() const;
    // Throws InputError "<path>: shrank from N to M bytes while in use;
    // reopen the checkpoint" when the file is now shorter than the mapping
    // (reading the lost part would raise SIGBUS). A file that grew is fine.
    void checkSize() const;

private:
    std::string m_path;
    const uint8_t* m_data = nullptr;
    uint64_t m_size = 0;
    int m_fd = -1;          // kept open for currentSize(); -1 when it had to be closed
    uint64_t m_dev = 0, m_ino = 0;
    int m_slot = -1;        // in the table of live mappings
};

// What a fault address lies in. Async-signal-safe (no locks, no allocation):
// for an address inside a live MappedFile, copies its path (the tail when it
// is longer than `capacity` - 1), NUL-terminated, and fills `offset` (from the
// start of the file), `mappedSize` and `currentSize` (fstat now, or
// UINT64_MAX when unknown); returns false for any other address.
struct MappedFault {
    uint64_t offset = 0;
    uint64_t mappedSize = 0;
    uint64_t currentSize = UINT64_MAX;
};
bool findMappedFile(const void* address, char* path, size_t capacity, MappedFault* fault);

// Live mappings in the table (for tests: every MappedFile gone means 0).
size_t mappedFileCount();

} // namespace stowage
