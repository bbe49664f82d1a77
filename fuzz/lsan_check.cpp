// Leaks on purpose: the lsan_is_on ctest expects LeakSanitizer's report, so
// a change that turns leak checking off in the asan build (ASAN_OPTIONS,
// a platform without LSan) fails the suite instead of passing silently.
#include <cstdlib>

int main()
{
    void* volatile leaked = std::malloc(77);
    leaked = nullptr;
    return 0;
}
