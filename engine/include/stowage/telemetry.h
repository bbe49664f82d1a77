#pragma once
// What the runtime did, for graphs, the timeline, the worker's events and
// run --json: bytes per device over time, copy and disk traffic, and a typed
// event trace per execution unit and step. Readers take what is new with a
// cursor ("everything after item N"); the bounded buffers count what a slow
// reader missed instead of dropping it silently.
#include "stowage/device.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace stowage {

struct MemorySample {
    double t = 0; // seconds since the telemetry started (the start of loading)
    // Bytes per device name ("0", "cpu", "disk") as the runtime accounts them:
    // weights and fetched copies it placed there (simulated GPUs included).
    std::map<std::string, uint64_t> residentBytes;
    // Real CUDA allocations per GPU, where LibTorch has CUDA (else empty).
    std::map<std::string, uint64_t> cudaAllocatedBytes;
    uint64_t h2dBytes = 0, diskReadBytes = 0; // cumulative since the start
    // Bytes the last complete forward pass read from disk-placed weights (in
    // place from the mapping, or to copy them): what "disk" holds per token.
    // 0 until a pass completes.
    uint64_t diskReadLastPass = 0;
    uint64_t rssBytes = 0; // resident set of this process
};

// fetch: an offloaded weight copied to the unit's device before it runs;
// prefetch: the same, done ahead by the prefetcher while another unit runs;
// map: a disk weight read in place from the mapping (no copy);
// wait: the unit waited for a prefetch under way; compute: the unit's
// forward; release: its fetched copies dropped afterwards.
enum class TraceKind { Fetch, Prefetch, Map, Wait, Compute, Release };
const char* traceKindName(TraceKind kind);

struct TraceEvent {
    double t0 = 0, t1 = 0;  // seconds, on the samples' clock
    TraceKind kind = TraceKind::Compute;
    std::string unit;       // execution unit ("model.layers.3"; "" for the whole model)
    std::string tensor;     // the weight moved (fetch, prefetch, map); empty otherwise
    std::string device;     // where it happened ("0", "cpu")
    uint64_t bytes = 0;
    int64_t step = -1;      // token index: 0 for the prompt's pass, n for the n-th new token
};

// Items after `cursor` (the count of items ever added that the reader has
// seen), the cursor to pass next time, and how many the reader missed
// because the ring had overwritten them.
template <class T> struct Since {
    std::vector<T> items;
    uint64_t next = 0;
    uint64_t missed = 0;
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
    // The limit less what is placed there now; nothing when there is no limit.
    std::optional<uint64_t> headroom(const std::string& device) const;
    void addH2D(uint64_t bytes) { m_h2d += bytes; }
    void addDiskRead(uint64_t bytes) { m_disk += bytes; }
    // What one complete forward pass read from disk (Model::forward sets it).
    void setLastPassDiskRead(uint64_t bytes) { m_diskPass = bytes; }
    uint64_t lastPassDiskRead() const { return m_diskPass; }
    // The step that events recorded from now on belong to.
    void setStep(int64_t step) { m_step = step; }
    int64_t step() const { return m_step; }
    // Records `e`, stamping it with the current step when e.step is -1.
    void event(TraceEvent e);
    // Where real GPU allocations come from (set by a CUDA runtime).
    void setCudaProbe(std::function<std::map<std::string, uint64_t>()> probe);

    std::map<std::string, uint64_t> resident() const;
    std::map<std::string, uint64_t> peak() const;
    uint64_t h2dBytes() const { return m_h2d; }
    uint64_t diskReadBytes() const { return m_disk; }
    // The newest samples and events, oldest first (what the ring holds).
    std::vector<MemorySample> samples() const;
    std::vector<TraceEvent> trace() const;
    Since<MemorySample> samplesSince(uint64_t cursor) const;
    Since<TraceEvent> traceSince(uint64_t cursor) const;
    uint64_t sampleCount() const;
    uint64_t eventCount() const;

    // Starts/stops a sampler thread at `hz` (at least 10 Hz is what the graphs want).
    void startSampling(double hz = 20);
    void stopSampling();
    void sample();

    static constexpr size_t kMaxSamples = 4096; // ~3.4 min at 20 Hz
    static constexpr size_t kMaxEvents = 65536;

private:
    template <class T> struct Ring {
        std::vector<T> items;
        uint64_t total = 0; // ever added; items[total % cap] is the next slot once full
        void add(T x, size_t cap);
        std::vector<T> all(size_t cap) const;
        Since<T> since(uint64_t cursor, size_t cap) const;
    };

    std::chrono::steady_clock::time_point m_start;
    mutable std::mutex m_mutex;
    std::map<std::string, uint64_t> m_resident, m_peak, m_limit;
    std::atomic<uint64_t> m_h2d{0}, m_disk{0}, m_diskPass{0};
    std::atomic<int64_t> m_step{-1};
    Ring<MemorySample> m_samples;
    Ring<TraceEvent> m_trace;
    std::function<std::map<std::string, uint64_t>()> m_cudaProbe;
    std::thread m_sampler;
    std::atomic<bool> m_stop{false};
};

// Resident set size of this process, from /proc/self/statm.
uint64_t processRssBytes();

} // namespace stowage
