#include "stowage/fileio.h"

#include "stowage/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace stowage {

std::string readTextFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw InputError(path, std::string("cannot read: ") + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void writeFileAtomically(const std::string& path, const std::string& bytes)
{
    const std::string tmp = path + ".partial";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f)
        throw InputError(path, std::string("cannot write: ") + std::strerror(errno));
    bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    int err = errno;
    ok = std::fflush(f) == 0 && ok;
    ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        if (ok)
            err = errno;
        std::remove(tmp.c_str());
        throw InputError(path, std::string("cannot write: ") + std::strerror(err ? err : EIO));
    }
}

} // namespace stowage
