// The worker's events (docs/worker-protocol.md): every object it writes, one
// a line, spelt with the words of workerwire.h. Apart from the command
// parsing (workercommands.cpp), which needs no LibTorch and is fuzzed on its
// own (fuzz/fuzz_worker.cpp).
#include "workerprotocol.h"

#include "stowage/runtimeinfo.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <unistd.h>

namespace stowage::cli {

using ojson = nlohmann::ordered_json;
namespace f = wire::f;

namespace {

ojson event(const char* kind)
{
    return ojson { { wire::kEvent, kind } };
}

// The first line of a message (LibTorch appends its C++ backtrace).
std::string firstLine(const char* text)
{
    const char* nl = std::strchr(text, '\n');
    return nl ? std::string(text, size_t(nl - text)) : std::string(text);
}

// A failed allocation inside a request: the process may not have more
// memory (RAM, ulimit -v, a cgroup's limit). LibTorch reports its own as
// c10::Error "…can't allocate memory…".
bool outOfMemory(const std::exception& e)
{
    return dynamic_cast<const std::bad_alloc*>(&e) != nullptr || std::strstr(e.what(), "can't allocate memory")
        || std::strstr(e.what(), "Cannot allocate memory");
}

} // namespace

ojson helloEvent()
{
    ojson policies = ojson::array();
    for (auto p : { ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch, ExecutionPolicy::ComputeWhereItLives })
        policies.push_back(policyName(p));
    ojson e = event(wire::ev::Hello);
    e[f::Protocol] = wire::kVersion;
    e[f::Runtime] = runtimeDescription();
    e[f::Cuda] = cudaAvailable();
    e[f::Families] = runnableModelTypes();
    e[f::Policies] = policies;
    e[f::Pid] = int64_t(getpid());
    return e;
}

ojson progressEvent(double fraction, const std::string& what)
{
    ojson e = event(wire::ev::Progress);
    e[f::Fraction] = fraction;
    e[f::What] = what;
    return e;
}

ojson warningEvent(const std::string& message)
{
    ojson e = event(wire::ev::Warning);
    e[f::Message] = message;
    return e;
}

ojson tokenEvent(const TokenPiece& p)
{
    ojson e = event(wire::ev::Token);
    e[f::Token] = p.id;
    e[f::Text] = p.text;
    e[f::Index] = p.index;
    e[f::T] = p.t;
    return e;
}

ojson errorEvent(const char* kind, const std::string& message)
{
    ojson e = event(wire::ev::Error);
    e[f::Kind] = kind;
    e[f::Message] = message;
    return e;
}

ojson failureEvent(const std::exception& e, const std::string& job)
{
    if (outOfMemory(e)) {
        const char* doing = job == wire::cmd::Load ? "loading" : job == wire::cmd::Generate ? "generating" : "stepping";
        return errorEvent(wire::err::Memory,
            std::string("out of memory while ") + doing + ": the worker could not allocate more (" + firstLine(e.what())
                + "); what this request had allocated is released");
    }
    return errorEvent(wire::err::Internal, e.what());
}

ojson cancelledEvent(const std::string& job)
{
    ojson e = event(wire::ev::Cancelled);
    e[f::What] = job;
    return e;
}

ojson unloadedEvent(bool wasLoaded, uint64_t rssBytes)
{
    ojson e = event(wire::ev::Unloaded);
    e[f::WasLoaded] = wasLoaded;
    e[f::RssBytes] = rssBytes;
    return e;
}

ojson sampleEvent(const MemorySample& s, uint64_t missed)
{
    ojson e = event(wire::ev::Sample);
    e[f::T] = s.t;
    e[f::Resident] = ojson::object();
    for (const auto& [d, b] : s.residentBytes)
        e[f::Resident][d] = b;
    if (!s.cudaAllocatedBytes.empty()) {
        e[f::CudaAllocated] = ojson::object();
        for (const auto& [d, b] : s.cudaAllocatedBytes)
            e[f::CudaAllocated][d] = b;
    }
    e[f::H2dBytes] = s.h2dBytes;
    e[f::DiskReadBytes] = s.diskReadBytes;
    e[f::DiskPassBytes] = s.diskReadLastPass;
    e[f::RssBytes] = s.rssBytes;
    if (missed)
        e[f::Missed] = missed;
    return e;
}

std::vector<ojson> traceEvents(const std::vector<TraceEvent>& events, uint64_t missed)
{
    std::vector<ojson> out;
    constexpr size_t kBatch = 1024;
    for (size_t i = 0; i < events.size(); i += kBatch) {
        ojson batch = ojson::array();
        for (size_t k = i; k < std::min(events.size(), i + kBatch); ++k) {
            const TraceEvent& t = events[k];
            ojson e { { f::Kind, traceKindName(t.kind) }, { f::Unit, t.unit }, { f::Device, t.device },
                { f::StepIndex, t.step }, { f::T0, t.t0 }, { f::T1, t.t1 } };
            if (!t.tensor.empty())
                e[f::Tensor] = t.tensor;
            if (t.bytes)
                e[f::Bytes] = t.bytes;
            batch.push_back(std::move(e));
        }
        ojson ev = event(wire::ev::Trace);
        ev[f::Events] = std::move(batch);
        if (i == 0 && missed)
            ev[f::Missed] = missed;
        out.push_back(std::move(ev));
    }
    return out;
}

ojson loadedEvent(Session& s)
{
    ojson e = event(wire::ev::Loaded);
    e[f::ModelType] = s.model().modelType();
    e[f::LoadS] = s.loadSeconds();
    e[f::DeviceMap] = ojson::parse(deviceMapToJson(s.deviceMap()));
    ojson devices = ojson::array();
    for (const DevicePlacement& p : s.placement())
        devices.push_back({ { f::Device, p.device }, { f::PlannedBytes, p.plannedBytes },
            { f::ActualBytes, p.actualBytes }, { f::Description, p.description } });
    e[f::Devices] = devices;
    ojson units = ojson::array();
    for (const auto& u : s.model().units())
        units.push_back({ { f::Name, u }, { f::Device, s.model().unitDevice(u) } });
    e[f::Units] = units;
    e[f::VocabSize] = s.model().vocabSize();
    e[f::Tokenizer] = s.tokenizer() != nullptr;
    return e;
}

ojson doneEvent(const GenerationResult& r, const std::string& text, Session& s)
{
    ojson e = event(wire::ev::Done);
    e[f::TokenIds] = r.tokens;
    e[f::Text] = text;
    e[f::Stopped] = r.stopped;
    e[f::Timings] = { { f::PrefillS, r.prefillSeconds }, { f::DecodeS, r.decodeSeconds },
        { f::DecodeTokensPerS, r.decodeTokensPerSecond() } };
    Telemetry& t = s.telemetry();
    e[f::PeakBytes] = ojson::object();
    for (const auto& [d, b] : t.peak())
        e[f::PeakBytes][d] = b;
    e[f::Traffic] = { { f::HostToDeviceBytes, t.h2dBytes() }, { f::DiskReadBytes, t.diskReadBytes() } };
    return e;
}

} // namespace stowage::cli
