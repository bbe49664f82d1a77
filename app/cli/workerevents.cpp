// The worker's events (docs/worker-protocol.md): what it writes, one JSON
// object a line. Apart from the command parsing (workerprotocol.cpp), which
// needs no LibTorch and is fuzzed on its own (fuzz/fuzz_worker.cpp).
#include "workerprotocol.h"

#include <algorithm>
#include <unistd.h>

namespace stowage::cli {

using ojson = nlohmann::ordered_json;

ojson helloEvent()
{
    ojson policies = ojson::array();
    for (auto p : {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch, ExecutionPolicy::ComputeWhereItLives})
        policies.push_back(policyName(p));
    return ojson{{"event", "hello"},
                 {"protocol", kWorkerProtocolVersion},
                 {"runtime", runtimeDescription()},
                 {"cuda", cudaAvailable()},
                 {"families", runnableModelTypes()},
                 {"policies", policies},
                 {"pid", int64_t(getpid())}};
}

ojson sampleEvent(const MemorySample& s)
{
    ojson e{{"event", "sample"}, {"t", s.t}};
    e["resident"] = ojson::object();
    for (const auto& [d, b] : s.residentBytes)
        e["resident"][d] = b;
    if (!s.cudaAllocatedBytes.empty()) {
        e["cuda_allocated"] = ojson::object();
        for (const auto& [d, b] : s.cudaAllocatedBytes)
            e["cuda_allocated"][d] = b;
    }
    e["h2d_bytes"] = s.h2dBytes;
    e["disk_read_bytes"] = s.diskReadBytes;
    e["rss_bytes"] = s.rssBytes;
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
            ojson e{{"kind", traceKindName(t.kind)}, {"unit", t.unit}, {"device", t.device}, {"step", t.step},
                    {"t0", t.t0}, {"t1", t.t1}};
            if (!t.tensor.empty())
                e["tensor"] = t.tensor;
            if (t.bytes)
                e["bytes"] = t.bytes;
            batch.push_back(std::move(e));
        }
        ojson ev{{"event", "trace"}, {"events", std::move(batch)}};
        if (i == 0 && missed)
            ev["missed"] = missed;
        out.push_back(std::move(ev));
    }
    return out;
}

ojson loadedEvent(Session& s)
{
    ojson e{{"event", "loaded"}, {"model_type", s.model().modelType()}, {"load_s", s.loadSeconds()}};
    e["device_map"] = ojson::parse(deviceMapToJson(s.deviceMap()));
    ojson devices = ojson::array();
    for (const DevicePlacement& p : s.placement())
        devices.push_back({{"device", p.device},
                           {"planned_bytes", p.plannedBytes},
                           {"actual_bytes", p.actualBytes},
                           {"description", p.description}});
    e["devices"] = devices;
    ojson units = ojson::array();
    for (const auto& u : s.model().units())
        units.push_back({{"name", u}, {"device", s.model().unitDevice(u)}});
    e["units"] = units;
    e["vocab_size"] = s.model().vocabSize();
    e["tokenizer"] = s.tokenizer() != nullptr;
    return e;
}

ojson doneEvent(const GenerationResult& r, const std::string& text, Session& s)
{
    ojson e{{"event", "done"}, {"token_ids", r.tokens}, {"text", text}, {"stopped", r.stopped}};
    e["timings"] = {{"prefill_s", r.prefillSeconds},
                    {"decode_s", r.decodeSeconds},
                    {"decode_tokens_per_s", r.decodeTokensPerSecond()}};
    Telemetry& t = s.telemetry();
    e["peak_bytes"] = ojson::object();
    for (const auto& [d, b] : t.peak())
        e["peak_bytes"][d] = b;
    e["traffic"] = {{"host_to_device_bytes", t.h2dBytes()}, {"disk_read_bytes", t.diskReadBytes()}};
    return e;
}

} // namespace stowage::cli
