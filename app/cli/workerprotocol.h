#pragma once
// The worker's JSON-lines protocol (docs/worker-protocol.md): reading and
// checking commands, and writing events. Kept apart from the worker's
// threads so each rule is one small function.
#include "stowage/planner.h"
#include "stowage/runtime.h"
#include "stowage/session.h"
#include "stowage/telemetry.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace stowage::cli {

constexpr int kWorkerProtocolVersion = 1;
constexpr size_t kMaxLineBytes = 16u << 20; // a command line longer than this is skipped with an error

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
    int kvContext = 0, kvBatch = 1;
    LoadOptions load;
};
LoadCommand parseLoad(const nlohmann::json& cmd);

struct GenerateCommand {
    std::optional<std::string> prompt;
    std::optional<std::vector<int32_t>> promptIds;
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

nlohmann::ordered_json helloEvent();
nlohmann::ordered_json sampleEvent(const MemorySample& s);
// Trace events in batches of at most 1024 per "trace" event.
std::vector<nlohmann::ordered_json> traceEvents(const std::vector<TraceEvent>& events, uint64_t missed);
nlohmann::ordered_json loadedEvent(Session& session);
nlohmann::ordered_json doneEvent(const GenerationResult& r, const std::string& text, Session& session);

} // namespace stowage::cli
