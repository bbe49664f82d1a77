#include "stowage/telemetry.h"

#include "stowage/error.h"

#include <fstream>
#include <unistd.h>

namespace stowage {
const char* traceKindName(TraceKind kind)
{
    switch (kind) {
    case TraceKind::Fetch: return "fetch";
    case TraceKind::Prefetch: return "prefetch";
    case TraceKind::Map: return "map";
    case TraceKind::Wait: return "wait";
    case TraceKind::Compute: return "compute";
    case TraceKind::Release: return "release";
    }
    return "?";
}

template <class T> void Telemetry::Ring<T>::add(T x, size_t cap)
{
    if (items.size() < cap)
        items.push_back(std::move(x));
    else
        items[size_t(total % cap)] = std::move(x);
    ++total;
}

template <class T> std::vector<T> Telemetry::Ring<T>::all(size_t cap) const
{
    return since(0, cap).items;
}

template <class T> Since<T> Telemetry::Ring<T>::since(uint64_t cursor, size_t cap) const
{
    Since<T> out;
    out.next = total;
    const uint64_t oldest = total - items.size(); // the first item the ring still holds
    if (cursor > total)
        cursor = total; // a cursor from another run: nothing new
    if (cursor < oldest) {
        out.missed = oldest - cursor;
        cursor = oldest;
    }
    out.items.reserve(size_t(total - cursor));
    for (uint64_t i = cursor; i < total; ++i)
        out.items.push_back(items[size_t(items.size() < cap ? i : i % cap)]);
    return out;
}

uint64_t processRssBytes()
{
    std::ifstream in("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    in >> size >> resident;
    return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

Telemetry::Telemetry() : m_start(std::chrono::steady_clock::now()) {}

Telemetry::~Telemetry() { stopSampling(); }

double Telemetry::now() const
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
}

void Telemetry::setLimit(const std::string& device, uint64_t bytes)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_limit[device] = bytes;
}

std::optional<uint64_t> Telemetry::headroom(const std::string& device) const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto lim = m_limit.find(device);
    if (lim == m_limit.end())
        return std::nullopt;
    auto r = m_resident.find(device);
    const uint64_t used = r == m_resident.end() ? 0 : r->second;
    return used >= lim->second ? 0 : lim->second - used;
}

void Telemetry::allocate(const std::string& device, uint64_t bytes, const std::string& module)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    uint64_t next = m_resident[device] + bytes;
    auto lim = m_limit.find(device);
    if (lim != m_limit.end() && next > lim->second)
        throw InputError("device " + device, "out of memory while placing " + (module.empty() ? "(model)" : module) +
                                                 ": needs " + std::to_string(next) + " bytes, the budget is " +
                                                 std::to_string(lim->second));
    m_resident[device] = next;
    m_peak[device] = std::max(m_peak[device], next);
}

void Telemetry::release(const std::string& device, uint64_t bytes)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto& r = m_resident[device];
    r = bytes > r ? 0 : r - bytes;
}

void Telemetry::event(TraceEvent e)
{
    if (e.step < 0)
        e.step = m_step;
    std::lock_guard<std::mutex> lock(m_mutex);
    m_trace.add(std::move(e), kMaxEvents);
}

void Telemetry::setCudaProbe(std::function<std::map<std::string, uint64_t>()> probe)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_cudaProbe = std::move(probe);
}

std::map<std::string, uint64_t> Telemetry::resident() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_resident;
}

std::map<std::string, uint64_t> Telemetry::peak() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_peak;
}

std::vector<MemorySample> Telemetry::samples() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_samples.all(kMaxSamples);
}

std::vector<TraceEvent> Telemetry::trace() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_trace.all(kMaxEvents);
}

Since<MemorySample> Telemetry::samplesSince(uint64_t cursor) const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_samples.since(cursor, kMaxSamples);
}

Since<TraceEvent> Telemetry::traceSince(uint64_t cursor) const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_trace.since(cursor, kMaxEvents);
}

uint64_t Telemetry::sampleCount() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_samples.total;
}

uint64_t Telemetry::eventCount() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_trace.total;
}

void Telemetry::sample()
{
    MemorySample s;
    s.t = now();
    s.h2dBytes = m_h2d;
    s.diskReadBytes = m_disk;
    s.diskReadLastPass = m_diskPass;
    s.rssBytes = processRssBytes();
    std::function<std::map<std::string, uint64_t>()> probe;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        probe = m_cudaProbe;
    }
    if (probe)
        s.cudaAllocatedBytes = probe();
    std::lock_guard<std::mutex> lock(m_mutex);
    s.residentBytes = m_resident;
    m_samples.add(std::move(s), kMaxSamples);
}

void Telemetry::startSampling(double hz)
{
    if (m_sampler.joinable())
        return;
    m_stop = false;
    const auto period = std::chrono::duration<double>(1.0 / hz);
    m_sampler = std::thread([this, period] {
        // On a fixed schedule, so a slow sample does not lower the rate.
        auto next = std::chrono::steady_clock::now();
        while (!m_stop) {
            sample();
            next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
            const auto now = std::chrono::steady_clock::now();
            if (next < now)
                next = now;
            std::this_thread::sleep_until(next);
        }
    });
}

void Telemetry::stopSampling()
{
    m_stop = true;
    if (m_sampler.joinable())
        m_sampler.join();
}

} // namespace stowage
