#include "stowage/runtimeenv.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace stowage {
namespace {

bool isSet(const char* name)
{
    const char* v = std::getenv(name);
    return v && *v;
}

bool hasAvx512ForOpenBlas()
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

} // namespace

std::vector<std::string> runtimeEnvironment()
{
    std::vector<std::string> env;
    if (!isSet("OMP_WAIT_POLICY") && !isSet("GOMP_SPINCOUNT"))
        env.push_back("GOMP_SPINCOUNT=5000");
    if (!isSet("OPENBLAS_THREAD_TIMEOUT"))
        env.push_back("OPENBLAS_THREAD_TIMEOUT=4");
    if (!isSet("OPENBLAS_CORETYPE") && hasAvx512ForOpenBlas())
        env.push_back("OPENBLAS_CORETYPE=SkylakeX");
    return env;
}

bool prepareRuntimeEnvironment()
{
    const std::vector<std::string> env = runtimeEnvironment();
    for (const std::string& e : env) {
        const size_t eq = e.find('=');
        setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), /*overwrite=*/1);
    }
    return !env.empty();
}

bool pinAllocator()
{
    static bool pinned = false;
    static std::once_flag once;
    std::call_once(once, [] {
#if defined(__GLIBC__)
        const char* tunables = std::getenv("GLIBC_TUNABLES");
        if ((tunables && std::strstr(tunables, "glibc.malloc.")) || isSet("MALLOC_MMAP_THRESHOLD_") ||
            isSet("MALLOC_TRIM_THRESHOLD_"))
            return; // the user's choice
        pinned = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 512 << 20) == 1;
#endif
    });
    return pinned;
}

} // namespace stowage
