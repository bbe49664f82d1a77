#include "stowage/mappedfile.h"

#include "stowage/error.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stowage {
namespace {

// Every live mapping, for a SIGBUS handler to search: fixed slots of plain
// atomics and a copy of the path, so reading it needs neither a lock nor the
// heap. `begin` is 0 for a free slot and 1 while one is being filled.
struct Slot {
    std::atomic<uintptr_t> begin{0};
    std::atomic<uintptr_t> end{0};
    std::atomic<int> fd{-1};
    std::atomic<bool> wholePath{false}; // false: `path` is the tail of a longer one
    char path[224] = {};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free,
              "the mapping table is read from a signal handler");
constexpr size_t kSlots = 4096; // beyond this many live mappings a fault names no file
Slot g_slots[kSlots];
std::atomic<size_t> g_highWater{0}; // slots at or past this index were never used
std::atomic<size_t> g_live{0};

void copyTail(char* out, size_t capacity, const char* path, size_t length)
{
    if (capacity == 0)
        return;
    // The tail of a long path: its file name is what says most.
    const size_t keep = length < capacity - 1 ? length : capacity - 1;
    std::memcpy(out, path + (length - keep), keep);
    out[keep] = '\0';
}

int registerMapping(const uint8_t* data, uint64_t size, const std::string& path, int fd)
{
    for (size_t i = 0; i < kSlots; ++i) {
        uintptr_t expected = 0;
        if (!g_slots[i].begin.compare_exchange_strong(expected, 1, std::memory_order_acq_rel))
            continue;
        Slot& s = g_slots[i];
        copyTail(s.path, sizeof s.path, path.c_str(), path.size());
        s.wholePath.store(path.size() < sizeof s.path, std::memory_order_relaxed);
        s.fd.store(fd, std::memory_order_relaxed);
        s.end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_relaxed);
        s.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
        size_t high = g_highWater.load(std::memory_order_relaxed);
        while (high < i + 1 && !g_highWater.compare_exchange_weak(high, i + 1, std::memory_order_relaxed)) {
        }
        g_live.fetch_add(1, std::memory_order_relaxed);
        return int(i);
    }
    return -1;
}

void unregisterMapping(int slot)
{
    if (slot < 0)
        return;
    Slot& s = g_slots[size_t(slot)];
    s.begin.store(1, std::memory_order_release); // no longer matches any address
    s.fd.store(-1, std::memory_order_relaxed);
    s.end.store(0, std::memory_order_relaxed);
    s.begin.store(0, std::memory_order_release);
    g_live.fetch_sub(1, std::memory_order_relaxed);
}

// Keep the descriptor while the process has plenty: an offload folder maps
// one file per tensor, and thousands of kept descriptors would starve the
// rest of the process under the usual soft limit of 1024.
bool mayKeepDescriptor(int fd)
{
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return false;
    return rl.rlim_cur == RLIM_INFINITY || uint64_t(fd) < uint64_t(rl.rlim_cur) / 2;
}

} // namespace

MappedFile::MappedFile(const std::string& path) : m_path(path)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw InputError(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw InputError(path, "not a regular file");
    }
    m_size = static_cast<uint64_t>(st.st_size);
    m_dev = uint64_t(st.st_dev);
    m_ino = uint64_t(st.st_ino);
    if (m_size > 0) {
        void* p = ::mmap(nullptr, m_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            throw InputError(path, std::string("cannot map: ") + std::strerror(err));
        }
        m_data = static_cast<const uint8_t*>(p);
        // Pages read from the drive from now on come into the page cache
        // 2 MiB at a time and are mapped that way (Linux 6.x on file systems
        // with large folios: ext4, XFS). Decode reads every weight each
        // token: on 4 KiB pages it ran 15-20% slower here (docs/PERFORMANCE.md).
        // Pages cached before keep their size; where the kernel cannot, this
        // does nothing.
        ::madvise(p, m_size, MADV_HUGEPAGE);
    }
    if (mayKeepDescriptor(fd)) {
        m_fd = fd;
    } else {
        ::close(fd); // the mapping keeps the file alive
    }
    if (m_data)
        m_slot = registerMapping(m_data, m_size, m_path, m_fd);
}

MappedFile::~MappedFile()
{
    unregisterMapping(m_slot);
    if (m_data)
        ::munmap(const_cast<uint8_t*>(m_data), m_size);
    if (m_fd >= 0)
        ::close(m_fd);
}

uint64_t MappedFile::currentSize() const
{
    struct stat st {};
    if (m_fd >= 0) {
        if (::fstat(m_fd, &st) == 0)
            return uint64_t(st.st_size);
        return m_size;
    }
    // Without the descriptor: the path, while it still names the mapped file.
    // A path removed or replaced (a new download renamed over it) leaves the
    // mapped file as it was.
    if (::stat(m_path.c_str(), &st) == 0 && uint64_t(st.st_dev) == m_dev && uint64_t(st.st_ino) == m_ino)
        return uint64_t(st.st_size);
    return m_size;
}

void MappedFile::checkSize() const
{
    const uint64_t now = currentSize();
    if (now < m_size)
        throw InputError(m_path, "shrank from " + std::to_string(m_size) + " to " + std::to_string(now) +
                                     " bytes while in use; reopen the checkpoint");
}

bool findMappedFile(const void* address, char* path, size_t capacity, MappedFault* fault)
{
    const auto a = reinterpret_cast<uintptr_t>(address);
    const size_t high = g_highWater.load(std::memory_order_acquire);
    for (size_t i = 0; i < high && i < kSlots; ++i) {
        const Slot& s = g_slots[i];
        const uintptr_t b = s.begin.load(std::memory_order_acquire);
        if (b <= 1)
            continue;
        const uintptr_t e = s.end.load(std::memory_order_relaxed);
        if (a < b || a >= e)
            continue;
        copyTail(path, capacity, s.path, ::strnlen(s.path, sizeof s.path));
        if (fault) {
            fault->offset = a - b;
            fault->mappedSize = e - b;
            fault->currentSize = UINT64_MAX;
            struct stat st {};
            const int fd = s.fd.load(std::memory_order_relaxed);
            if ((fd >= 0 && ::fstat(fd, &st) == 0) ||
                (fd < 0 && s.wholePath.load(std::memory_order_relaxed) && ::stat(s.path, &st) == 0))
                fault->currentSize = uint64_t(st.st_size);
        }
        return true;
    }
    return false;
}

size_t mappedFileCount() { return g_live.load(std::memory_order_relaxed); }

} // namespace stowage
