#pragma once
// The worker's JSON-lines protocol (docs/worker-protocol.md): reading and
// checking commands, and writing events. Kept apart from the worker's
// threads so each rule is one small function.
#include "workerwire.h"

#include "stowage/generate.h"
#include "stowage/kvcache.h"
#include "stowage/model.h"
#include "stowage/planner.h"
#include "stowage/session.h"
#include "stowage/telemetry.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace stowage::cli {

// Lines from a file descriptor, without the newline. A line over the limit
// is dropped up to its newline and reported once as TooLong.
class LineReader {
public:
    enum Result { Line, TooLong, End };
    LineReader(int fd, size_t maxBytes) : m_fd(fd), m_max(maxBytes) {}
    Result next(std::string& line);

private:
    int m_fd;
    size_t m_max;
    std::string m_buffer;
    size_t m_scanned = 0;
    bool m_eof = false;
};

// A command object with a string "cmd"; throws InputError saying what is wrong.
nlohmann::json parseCommandLine(const std::string& line);
// Throws InputError naming the first field of `cmd` that is neither "cmd",
// "request" nor in `allowed`.
void checkFields(const nlohmann::json& cmd, const std::vector<std::string>& allowed);

struct LoadCommand {
    std::string path; // empty: the demo
    std::optional<DType> dtype;
    std::optional<DeviceMap> deviceMap;
    PlanOptions plan; // maxMemory unset: the machine's free memory
    std::optional<KvSpec> kv;
    LoadOptions load;
};
LoadCommand parseLoad(const nlohmann::json& cmd);

struct GenerateCommand {
    std::optional<std::string> prompt;
    std::optional<std::vector<int32_t>> promptIds;
    bool chat = false; // prompt through the checkpoint's chat template (one user message)
    std::optional<int> maxNewTokens;
    std::optional<bool> greedy;
    std::optional<float> temperature, topP;
    std::optional<int> topK;
    std::optional<uint64_t> seed;
    bool ignoreEos = false;
    double unitDelayMs = 250; // step only
};
GenerateCommand parseGenerate(const nlohmann::json& cmd, bool step);
// The session's defaults (generation_config.json) with the command's fields
// over them; giving a sampling field without "greedy" means sampling.
SamplingOptions applySampling(SamplingOptions defaults, const GenerateCommand& g);

// Every event the worker writes is built by one of these (workerevents.cpp),
// with the words of workerwire.h.
nlohmann::ordered_json helloEvent();
nlohmann::ordered_json progressEvent(double fraction, const std::string& what);
nlohmann::ordered_json warningEvent(const std::string& message);
// `t`: the token's time on the telemetry clock samples and trace share.
nlohmann::ordered_json tokenEvent(const TokenPiece& piece);
nlohmann::ordered_json errorEvent(const char* kind, const std::string& message);
// The last event of a job that threw something other than InputError or
// Cancelled: out of memory gets its own kind. `job`: "load", "generate" or "step".
nlohmann::ordered_json failureEvent(const std::exception& e, const std::string& job);
nlohmann::ordered_json cancelledEvent(const std::string& job);
nlohmann::ordered_json unloadedEvent(bool wasLoaded, uint64_t rssBytes);
nlohmann::ordered_json sampleEvent(const MemorySample& s, uint64_t missed = 0);
// Trace events in batches of at most 1024 per "trace" event.
std::vector<nlohmann::ordered_json> traceEvents(const std::vector<TraceEvent>& events, uint64_t missed);
nlohmann::ordered_json loadedEvent(Session& session);
nlohmann::ordered_json doneEvent(const GenerationResult& r, const std::string& text, Session& session);

} // namespace stowage::cli
