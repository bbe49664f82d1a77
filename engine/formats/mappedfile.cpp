#include "stowage/mappedfile.h"

#include "stowage/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stowage {

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
    if (m_size > 0) {
        void* p = ::mmap(nullptr, m_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            throw InputError(path, std::string("cannot map: ") + std::strerror(err));
        }
        m_data = static_cast<const uint8_t*>(p);
    }
    ::close(fd); // the mapping keeps the file alive
}

MappedFile::~MappedFile()
{
    if (m_data)
        ::munmap(const_cast<uint8_t*>(m_data), m_size);
}

} // namespace stowage
