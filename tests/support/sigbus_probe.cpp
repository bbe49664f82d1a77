// For tst_faults: several threads read the lost tail of a mapped file at
// once, each taking SIGBUS, under the CLI's handler. The process must end
// with exactly one line naming the file (the handler's contract), whichever
// thread faults first.
//
//   sigbus_probe FILE THREADS   (FILE: a file of at least THREADS pages,
//                                truncated to nothing here once mapped)
#include "sigbus.h"
#include "stowage/mappedfile.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <vector>

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: sigbus_probe FILE THREADS\n");
        return 64;
    }
    const int threads = std::atoi(argv[2]);
    stowage::cli::installSigbusHandler("probe: ", "\n", 74);
    stowage::MappedFile file(argv[1]);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (threads < 1 || file.size() < uint64_t(threads) * uint64_t(page)) {
        std::fprintf(stderr, "sigbus_probe: %s: needs %d pages\n", argv[1], threads);
        return 64;
    }
    if (::truncate(argv[1], 0) != 0) {
        std::perror("truncate");
        return 65;
    }
    // Every thread spins at the gate, then reads its own lost page.
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::atomic<unsigned> sink{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) {
            }
            const volatile uint8_t* p = file.data() + size_t(t) * size_t(page);
            sink.fetch_add(*p);
        });
    while (ready.load() < threads) {
    }
    go.store(true, std::memory_order_release);
    for (auto& th : pool)
        th.join();
    std::fprintf(stderr, "sigbus_probe: no SIGBUS (sum %u)\n", sink.load());
    return 66;
}
