#include "gemv_threads.h"

#include <algorithm>
#include <chrono>

#if STOWAGE_GEMV_X86
#include <immintrin.h>
#endif

namespace stowage::arch::detail {

namespace {
inline void cpuRelax()
{
#if STOWAGE_GEMV_X86
    _mm_pause();
#endif
}
} // namespace

Helpers& Helpers::instance()
{
    static Helpers h;
    return h;
}

void Helpers::run(int threads, Job job, void* ctx, const void* streamed, size_t bytes)
{
    std::unique_lock<std::mutex> busy(m_busy, std::try_to_lock);
    if (!busy.owns_lock() || threads <= 1) {
        for (int w = 0; w < std::max(1, threads); ++w)
            job(ctx, w);
        return;
    }
    grow(threads - 1);
    m_job = job;
    m_ctx = ctx;
    m_wanted = threads - 1;
    if (streamed)
        m_ahead = m_successors.follow(streamed, bytes);
    m_finished.store(0, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_generation.fetch_add(1, std::memory_order_release);
    }
    m_wake.notify_all();
    job(ctx, 0);
    while (m_finished.load(std::memory_order_acquire) < m_wanted)
        cpuRelax();
}

Helpers::~Helpers()
{
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_stop = true;
        m_generation.fetch_add(1);
    }
    m_wake.notify_all();
    for (auto& t : m_threads)
        t.join();
}

void Helpers::grow(int helpers)
{
    while (int(m_threads.size()) < helpers) {
        const int index = int(m_threads.size()) + 1;
        // The generation before this job's: a thread that starts late
        // still sees the job as new.
        const uint64_t before = m_generation.load(std::memory_order_acquire);
        m_threads.emplace_back([this, index, before] { loop(index, before); });
    }
}

void Helpers::loop(int index, uint64_t seen)
{
    for (;;) {
        const auto spinUntil = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
        uint64_t g = m_generation.load(std::memory_order_acquire);
        for (int i = 0; g == seen; ++i) {
            cpuRelax();
            // Give the core to any other runnable thread now and then (the
            // prefetcher's copies): a pure spin held them off for 200 us.
            if ((i & 63) == 63)
                std::this_thread::yield();
            if ((i & 255) == 255 && std::chrono::steady_clock::now() > spinUntil) {
                std::unique_lock<std::mutex> lock(m_mutex);
                m_wake.wait(lock, [&] { return m_generation.load(std::memory_order_acquire) != seen; });
            }
            g = m_generation.load(std::memory_order_acquire);
        }
        seen = g;
        if (m_stop)
            return;
        if (index <= m_wanted) {
            const Successors::Next ahead = index == 1 ? m_ahead : Successors::Next{};
            m_job(m_ctx, index);
            m_finished.fetch_add(1, std::memory_order_release);
            readAhead(ahead, seen);
        }
    }
}

void Helpers::readAhead(const Successors::Next& next, uint64_t seen)
{
#if STOWAGE_GEMV_X86
    const char* p = static_cast<const char*>(next.data);
    const size_t bytes = std::min(next.bytes, kReadAhead);
    for (size_t at = 0; p && at < bytes; at += 64 * 64) {
        if (m_generation.load(std::memory_order_relaxed) != seen)
            return;
        for (size_t line = at; line < std::min(bytes, at + 64 * 64); line += 64)
            _mm_prefetch(p + line, _MM_HINT_T1);
    }
#else
    (void)next, (void)seen;
#endif
}

} // namespace stowage::arch::detail
