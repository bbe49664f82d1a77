// The worker's protocol lines (app/worker/workercommands.cpp): the bytes a
// client writes to `stowage-cli worker`, read by its LineReader and each line
// parsed and checked as Worker::handle does (app/worker/workercommand.cpp) up to
// where it would start a job: load, generate and step get their fields
// checked and their options built, but no model is loaded. The reply the
// worker would write (an error event echoing "request") is serialised too.
//
// The LineReader is read twice: with a 64-byte limit (lines over it are
// skipped whole) and with the worker's real one, where the lines joined by
// newlines must give back the input.
#include "common.h"

#include "workerprotocol.h"

#include "stowage/error.h"

#include <sys/mman.h>
#include <unistd.h>

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using namespace stowage::cli;

int input = -1;

void handle(const std::string& line)
{
    json request = nullptr;
    std::string kind, message;
    try {
        json cmd = parseCommandLine(line);
        if (cmd.contains("request"))
            request = cmd["request"];
        const std::string name = cmd["cmd"].get<std::string>();
        if (name == "stop" || name == "quit" || name == "unload") {
            checkFields(cmd, {});
        } else if (name == "load") {
            const LoadCommand lc = parseLoad(cmd);
            if ((lc.kv && (lc.kv->context < 1 || lc.kv->batch < 1)) || lc.load.threads < 0)
                std::abort();
        } else if (name == "generate" || name == "step") {
            const GenerateCommand g = parseGenerate(cmd, name == "step");
            stowage::SamplingOptions defaults;
            defaults.stopIds = {2};
            const stowage::SamplingOptions s = applySampling(defaults, g);
            if (s.maxNewTokens < 1 || s.topK < 0 || !(s.temperature > 0) || !(s.topP > 0 && s.topP <= 1))
                std::abort();
        } else {
            throw stowage::InputError("", "unknown command '" + name + "'");
        }
        return;
    } catch (const stowage::InputError& e) {
        kind = "input", message = e.what();
    } catch (const json::exception& e) {
        kind = "input", message = std::string("bad command: ") + e.what(); // Worker::handle's answer too
    }
    namespace f = stowage::wire::f;
    ojson event{{stowage::wire::kEvent, stowage::wire::ev::Error}, {f::Kind, kind}, {f::Message, message}};
    if (!request.is_null())
        event[stowage::wire::kRequest] = request;
    (void)event.dump(-1, ' ', false, json::error_handler_t::replace);
}

void rewind(const uint8_t* data, size_t size)
{
    if (ftruncate(input, 0) != 0 || pwrite(input, data, size, 0) != ssize_t(size) || lseek(input, 0, SEEK_SET) != 0)
        std::abort();
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    input = memfd_create("worker-stdin", 0);
    if (input < 0)
        std::abort();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    rewind(data, size);
    {
        LineReader small(input, 64);
        std::string line;
        for (LineReader::Result r; (r = small.next(line)) != LineReader::End;)
            if (r == LineReader::Line && (line.size() > 64 || line.find('\n') != std::string::npos))
                std::abort();
    }
    rewind(data, size);
    LineReader reader(input, stowage::wire::kMaxCommandBytes);
    std::string line, joined;
    bool first = true;
    for (LineReader::Result r; (r = reader.next(line)) != LineReader::End;) {
        if (r != LineReader::Line)
            std::abort(); // no input is 16 MiB long
        joined += (first ? "" : "\n") + line;
        first = false;
        if (line.find_first_not_of(" \t\r") != std::string::npos)
            handle(line);
    }
    std::string all(reinterpret_cast<const char*>(data), size);
    if (!all.empty() && all.back() == '\n')
        all.pop_back();
    if (joined != all)
        std::abort();
    return 0;
}
