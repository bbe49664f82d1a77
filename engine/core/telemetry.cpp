#include "stowage/telemetry.h"

#include "stowage/error.h"

#include <fstream>
#include <unistd.h>

namespace stowage {
namespace {
constexpr size_t kMaxSamples = 4096;
constexpr size_t kMaxEvents = 16384;

template <class T> std::vector<T> unroll(const std::vector<T>& ring, size_t head, size_t cap)
{
    if (ring.size() < cap)
        return ring;
    std::vector<T> out(ring.begin() + long(head), ring.end());
    out.insert(out.end(), ring.begin(), ring.begin() + long(head));
    return out;
}
} // namespace

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
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_trace.size() < kMaxEvents) {
        m_trace.push_back(std::move(e));
    } else {
        m_trace[m_traceHead] = std::move(e);
        m_traceHead = (m_traceHead + 1) % kMaxEvents;
    }
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
    return unroll(m_samples, m_sampleHead, kMaxSamples);
}

std::vector<TraceEvent> Telemetry::trace() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return unroll(m_trace, m_traceHead, kMaxEvents);
}

void Telemetry::sample()
{
    MemorySample s;
    s.t = now();
    s.h2dBytes = m_h2d;
    s.diskReadBytes = m_disk;
    s.rssBytes = processRssBytes();
    std::lock_guard<std::mutex> lock(m_mutex);
    s.residentBytes = m_resident;
    if (m_samples.size() < kMaxSamples) {
        m_samples.push_back(std::move(s));
    } else {
        m_samples[m_sampleHead] = std::move(s);
        m_sampleHead = (m_sampleHead + 1) % kMaxSamples;
    }
}

void Telemetry::startSampling(double hz)
{
    if (m_sampler.joinable())
        return;
    m_stop = false;
    const auto period = std::chrono::duration<double>(1.0 / hz);
    m_sampler = std::thread([this, period] {
        while (!m_stop) {
            sample();
            std::this_thread::sleep_for(period);
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
