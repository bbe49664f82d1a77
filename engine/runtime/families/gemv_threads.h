#pragma once
// The threads that run the GEMV and attention jobs beside the caller
// (gemv.cpp, attention.cpp). Not a public header.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace stowage::arch::detail {

// Which matrix followed which, learnt from the calls: a decode step
// multiplies the same matrices in the same order every token. Direct
// mapped by address, so it stays small however many buffers come and go.
class Successors {
public:
    struct Next {
        const void* data = nullptr;
        size_t bytes = 0;
    };
    // Records `data` as the successor of the previous call's matrix and
    // returns the one that followed `data` last time.
    Next follow(const void* data, size_t bytes)
    {
        if (m_last)
            m_slots[slot(m_last)] = {m_last, {data, bytes}};
        m_last = data;
        const Slot& s = m_slots[slot(data)];
        return s.key == data ? s.next : Next{};
    }

private:
    struct Slot {
        const void* key = nullptr;
        Next next;
    };
    static size_t slot(const void* p) { return (reinterpret_cast<uintptr_t>(p) >> 6) % kSlots; }
    static constexpr size_t kSlots = 1021;
    Slot m_slots[kSlots];
    const void* m_last = nullptr;
};

// The threads that stream W beside the caller. Not at::parallel_for: that is
// a header template, parallel only where the including file is compiled
// with OpenMP and LibTorch's own macros, and serial here (measured: one call,
// 0-2, for two "threads"), so the kernels ran on one core. After a job each
// helper spins for a short window before it sleeps: the next matrix of a
// decode step follows within microseconds, and waking a sleeping thread costs
// more than that in a VM. A second caller while a job runs (another model in
// the same process) does its rows alone rather than wait.
class Helpers {
public:
    using Job = void (*)(void* ctx, int worker);

    static Helpers& instance();

    // Runs job(ctx, w) for w = 0 .. threads-1, w = 0 on the calling thread.
    // `streamed` (with its size) names the matrix the job reads: a helper
    // that has finished its part reads ahead into the matrix that followed
    // this one last time (readAhead).
    void run(int threads, Job job, void* ctx, const void* streamed = nullptr, size_t bytes = 0);

    ~Helpers();

private:
    Helpers() = default;
    void grow(int helpers);
    void loop(int index, uint64_t seen);
    // Software prefetches over the first bytes of the next matrix until the
    // next job starts. They never fault, so a matrix freed since (an
    // offloaded layer's step buffer) costs nothing but the hint.
    void readAhead(const Successors::Next& next, uint64_t seen);

    // At most this much of the next matrix is read ahead: a quarter of a
    // 32 MiB L3, so it is still there when the next job reaches it.
    static constexpr size_t kReadAhead = size_t(8) << 20;

    std::mutex m_busy;  // one job at a time
    std::mutex m_mutex; // sleeping and waking
    std::condition_variable m_wake;
    std::vector<std::thread> m_threads;
    std::atomic<uint64_t> m_generation{0};
    std::atomic<int> m_finished{0};
    Job m_job = nullptr;
    void* m_ctx = nullptr;
    int m_wanted = 0;
    bool m_stop = false;
    Successors m_successors; // under m_busy
    Successors::Next m_ahead; // for the current job
};

} // namespace stowage::arch::detail
