#pragma once
// What the runtime did, for graphs, the timeline and run --json: bytes per
// device over time, copy and disk traffic, and an event trace per forward.
#include "stowage/device.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace stowage {

struct MemorySample {
    double t = 0; // seconds since the model started loading
    std::map<std::string, uint64_t> residentBytes; // per device name
    uint64_t h2dBytes = 0, diskReadBytes = 0;      // cumulative
    uint64_t rssBytes = 0;
};

struct TraceEvent {
    double t0 = 0, t1 = 0;
    std::string module;
    std::string kind; // "fetch", "compute", "release", "prefetch"
    std::string device;
    uint64_t bytes = 0;
};

class Telemetry {
public:
    Telemetry();
    ~Telemetry();
    Telemetry(const Telemetry&) = delete;
    Telemetry& operator=(const Telemetry&) = delete;

    double now() const;
    // Accounting: throws InputError when a device would go over its limit.
    void allocate(const std::string& device, uint64_t bytes, const std::string& module);
    void release(const std::string& device, uint64_t bytes);
    void setLimit(const std::string& device, uint64_t bytes);
    void addH2D(uint64_t bytes) { m_h2d += bytes; }
    void addDiskRead(uint64_t bytes) { m_disk += bytes; }
    void event(TraceEvent e);

    std::map<std::string, uint64_t> resident() const;
    std::map<std::string, uint64_t> peak() const;
    uint64_t h2dBytes() const { return m_h2d; }
    uint64_t diskReadBytes() const { return m_disk; }
    std::vector<MemorySample> samples() const; // ring buffer, oldest first
    std::vector<TraceEvent> trace() const;     // last events, oldest first

    // Starts/stops a sampler thread at `hz` (at least 10 Hz is what the graphs want).
    void startSampling(double hz = 20);
    void stopSampling();
    void sample();

private:
    std::chrono::steady_clock::time_point m_start;
    mutable std::mutex m_mutex;
    std::map<std::string, uint64_t> m_resident, m_peak, m_limit;
    std::atomic<uint64_t> m_h2d{0}, m_disk{0};
    std::vector<MemorySample> m_samples;
    size_t m_sampleHead = 0;
    std::vector<TraceEvent> m_trace;
    size_t m_traceHead = 0;
    std::thread m_sampler;
    std::atomic<bool> m_stop{false};
};

// Resident set size of this process, from /proc/self/statm.
uint64_t processRssBytes();

} // namespace stowage
