// stowage-cli worker: the run session behind a JSON-lines protocol on
// stdin/stdout (docs/worker-protocol.md), so the window never links LibTorch
// and survives when the kernel kills the process running a model.
//
// Threads: the main thread reads commands; one job thread at a time loads or
// generates; a pump thread streams the telemetry (samples, trace) at 20 Hz.
// Every event goes through emit(), one whole line under a mutex.
#include "args.h"
#include "planoptions.h"
#include "sigbus.h"
#include "workerprotocol.h"

#include "stowage/costmodel.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/session.h"
#include "stowage/tokenizer.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <unistd.h>

namespace stowage::cli {
namespace {

// An exception no thread caught. Out of memory (a ulimit -v, a cgroup's
// limit, or RAM overcommitted) gets its own status, so the window can say
// so; anything else is reported and aborts as before.
[[noreturn]] void onTerminate()
{
    static const char oom[] = "stowage-cli worker: out of memory (an allocation failed outside any request: "
                              "std::bad_alloc); the worker stopped\n";
    try {
        if (std::exception_ptr e = std::current_exception())
            std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
        writeStderr(oom, sizeof oom - 1);
        ::_exit(wire::kExitOutOfMemory);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "stowage-cli worker: terminated by an uncaught exception: %s\n", e.what());
    } catch (...) {
    }
    std::abort();
}

void installFaultHandlers()
{
    std::set_terminate(onTerminate);
    // A read of a mapped file that shrank: its own status, which the client
    // turns into words.
    installSigbusHandler("stowage-cli worker: ", "; the worker stopped; reopen the checkpoint\n",
                         wire::kExitMappedFileShrank);
    // A file size limit (ulimit -f) then fails a write with EFBIG, reported
    // as a full disk is, instead of killing the worker.
    std::signal(SIGXFSZ, SIG_IGN);
}

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

class Worker {
public:
    Worker() = default;
    ~Worker() { shutdown(); }
    int serve();

private:
    void emit(ojson event, const json& request = nullptr);
    void error(const std::string& kind, const std::string& message, const json& request);
    void handle(const std::string& line);
    // Runs `job` on the job thread; what it returns (or the error it throws)
    // is the job's last event, written once the worker is idle again.
    void startJob(const json& request, std::function<ojson()> job);
    void joinJob();
    void shutdown();

    void load(const json& cmd, const json& request);
    void generate(const json& cmd, const json& request, bool oneStep);
    void unload(const json& request);

    // Telemetry pump: whatever is new since the last call, as events.
    void pumpLoop();
    void flushTelemetry();

    std::mutex m_outMutex;
    bool m_outBroken = false;

    // The job thread and what it is doing.
    enum Job { Idle, Loading, Generating, Stepping };
    static const char* jobName(int job)
    {
        return job == Loading ? wire::cmd::Load : job == Generating ? wire::cmd::Generate : wire::cmd::Step;
    }
    std::thread m_job;
    std::atomic<bool> m_busy{false};
    std::atomic<int> m_jobKind{Idle};
    std::atomic<bool> m_cancelLoad{false};
    json m_jobRequest;

    std::mutex m_sessionMutex; // guards m_session and m_telemetry pointers (not their use by the job)
    std::unique_ptr<Session> m_session;
    std::shared_ptr<Telemetry> m_telemetry; // the current load's, from its start
    std::mutex m_pumpMutex;
    uint64_t m_sampleCursor = 0, m_eventCursor = 0;

    std::thread m_pump;
    std::mutex m_pumpWake;
    std::condition_variable m_pumpCv;
    std::atomic<bool> m_quit{false};
};

void Worker::emit(ojson event, const json& request)
{
    std::string line;
    try {
        if (!request.is_null())
            event[wire::kRequest] = request;
        line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        line.push_back('\n');
    } catch (const std::bad_alloc&) {
        // Out of memory while writing it: samples and trace can go; an
        // answer is replaced by one that needs no memory.
        const auto kind = event.find(wire::kEvent);
        if (kind != event.end() && kind->is_string() && (*kind == wire::ev::Sample || *kind == wire::ev::Trace))
            return;
        static const char fallback[] =
            "{\"event\":\"error\",\"kind\":\"memory\",\"message\":\"out of memory while writing an event\"}\n";
        std::lock_guard<std::mutex> lock(m_outMutex);
        if (!m_outBroken && (std::fwrite(fallback, 1, sizeof fallback - 1, stdout) != sizeof fallback - 1 ||
                             std::fflush(stdout) != 0))
            m_outBroken = true;
        return;
    }
    std::lock_guard<std::mutex> lock(m_outMutex);
    if (m_outBroken)
        return;
    if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size() || std::fflush(stdout) != 0)
        m_outBroken = true; // the client went away; the read loop ends at EOF
}

void Worker::error(const std::string& kind, const std::string& message, const json& request)
{
    emit(errorEvent(kind.c_str(), message), request);
}

void Worker::joinJob()
{
    if (m_job.joinable())
        m_job.join();
}

void Worker::startJob(const json& request, std::function<ojson()> job)
{
    joinJob(); // the previous one has finished (m_busy was false)
    m_busy = true;
    m_jobRequest = request;
    m_job = std::thread([this, request, job = std::move(job)] {
        ojson last;
        try {
            last = job();
        } catch (const InputError& e) {
            last = errorEvent(wire::err::Input, e.what());
        } catch (const Cancelled&) {
            last = cancelledEvent(jobName(m_jobKind));
        } catch (const std::exception& e) {
            last = failureEvent(e, jobName(m_jobKind));
        }
        try {
            flushTelemetry(); // the job's samples and trace arrive before its last event
        } catch (const std::bad_alloc&) {
        }
        m_jobKind = Idle;
        m_busy = false;
        // Idle before the last event goes out: a client may send the next
        // command the moment it reads `loaded` or `done`, and must not be
        // told the worker is busy.
        emit(std::move(last), request);
    });
}

void Worker::flushTelemetry()
{
    std::shared_ptr<Telemetry> t;
    {
        std::lock_guard<std::mutex> lock(m_sessionMutex);
        t = m_telemetry;
    }
    if (!t)
        return;
    std::lock_guard<std::mutex> lock(m_pumpMutex);
    auto samples = t->samplesSince(m_sampleCursor);
    m_sampleCursor = samples.next;
    for (size_t i = 0; i < samples.items.size(); ++i)
        emit(sampleEvent(samples.items[i], i == 0 ? samples.missed : 0));
    auto trace = t->traceSince(m_eventCursor);
    m_eventCursor = trace.next;
    for (const ojson& e : traceEvents(trace.items, trace.missed))
        emit(e);
}

void Worker::pumpLoop()
{
    std::unique_lock<std::mutex> lock(m_pumpWake);
    while (!m_quit) {
        m_pumpCv.wait_for(lock, std::chrono::milliseconds(50));
        if (m_quit)
            break;
        lock.unlock();
        try {
            flushTelemetry();
        } catch (const std::bad_alloc&) {
            // Short of memory (a load is taking it all): these samples are
            // lost, the next ones say how many were missed.
        }
        lock.lock();
    }
}

void Worker::load(const json& cmd, const json& request)
{
    LoadCommand lc = parseLoad(cmd); // throws InputError before anything changes
    if (m_session)
        unload(nullptr); // a new load replaces the model
    m_cancelLoad = false;
    m_jobKind = Loading;
    startJob(request, [this, lc, request] {
        SessionOptions so;
        so.path = lc.path.empty() ? demoCheckpointPath() : lc.path;
        so.dtype = lc.dtype;
        // The checkpoint is opened and its tree built once, here; the session
        // loads from both and checks a given map against that tree.
        Checkpoint ck = Checkpoint::open(so.path);
        auto tree = std::make_shared<const ModuleTree>(buildModuleTree(ck, so.dtype, lc.plan.reference));
        so.tree = tree;
        so.plan = lc.plan;
        if (!lc.plan.maxMemory)
            so.plan.machineMemory = machineBudgets();
        if (lc.kv)
            so.plan.kv = kvReserveForCheckpoint(ck, *tree, *lc.kv);
        so.deviceMap = lc.deviceMap;
        so.onWarning = [&](const std::string& w) { emit(warningEvent(w), request); };
        so.load = lc.load;
        auto telemetry = std::make_shared<Telemetry>();
        so.load.telemetry = telemetry;
        {
            std::lock_guard<std::mutex> lock(m_sessionMutex);
            m_telemetry = telemetry;
        }
        {
            std::lock_guard<std::mutex> lock(m_pumpMutex);
            m_sampleCursor = m_eventCursor = 0;
        }
        double lastSent = -1;
        auto session = Session::open(std::move(ck), so, [&](double fraction, const std::string& what) {
            if (fraction - lastSent >= 0.001 || fraction >= 1.0) { // at most 1000 steps
                lastSent = fraction;
                emit(progressEvent(fraction, what), request);
            }
            return !m_cancelLoad.load();
        });
        ojson loaded = loadedEvent(*session);
        {
            std::lock_guard<std::mutex> lock(m_sessionMutex);
            m_session = std::move(session);
        }
        return loaded;
    });
}

void Worker::generate(const json& cmd, const json& request, bool oneStep)
{
    if (!m_session)
        throw InputError("", std::string(oneStep ? "step" : "generate") + " needs a loaded model: send load first");
    GenerateCommand gc = parseGenerate(cmd, oneStep);
    Session& s = *m_session;
    // Prompt and sampling are checked here, so a bad one is answered at once.
    std::optional<std::vector<int32_t>> prompt;
    if (gc.promptIds)
        prompt = *gc.promptIds;
    else if (gc.prompt)
        prompt = gc.chat ? s.encodeChatPrompt(*gc.prompt) : s.encodePrompt(*gc.prompt);
    else if (!oneStep)
        prompt = s.encodePrompt("");
    if (prompt)
        for (int32_t id : *prompt)
            if (id < 0 || id >= s.model().vocabSize())
                throw InputError("prompt token ids", "token id " + std::to_string(id) +
                                                         " is outside the vocabulary (0.." +
                                                         std::to_string(s.model().vocabSize() - 1) + ")");
    SamplingOptions so = applySampling(s.samplingDefaults(), gc);
    m_jobKind = oneStep ? Stepping : Generating;
    startJob(request, [this, &s, prompt, so, gc, oneStep, request] {
        std::string text;
        auto onToken = [&](const TokenPiece& p) {
            text += p.text;
            if (p.id >= 0)
                emit(tokenEvent(p), request);
        };
        GenerationResult r = oneStep ? s.step(prompt, so, gc.unitDelayMs / 1000.0, onToken)
                                     : s.generate(*prompt, so, onToken);
        return doneEvent(r, text, s); // after the step's trace (startJob flushes it first)
    });
}

void Worker::unload(const json& request)
{
    std::unique_ptr<Session> gone;
    {
        std::lock_guard<std::mutex> lock(m_sessionMutex);
        gone = std::move(m_session);
    }
    flushTelemetry();
    {
        std::lock_guard<std::mutex> lock(m_sessionMutex);
        m_telemetry.reset();
    }
    const bool had = gone != nullptr;
    gone.reset(); // releases every byte, then trims the heap
    emit(unloadedEvent(had, processRssBytes()), request);
}

void Worker::handle(const std::string& line)
{
    json request = nullptr;
    try {
        json cmd = parseCommandLine(line); // throws InputError for malformed lines
        if (cmd.contains(wire::kRequest))
            request = cmd[wire::kRequest];
        const std::string name = cmd[wire::kCmd].get<std::string>();
        if (name == wire::cmd::Stop) {
            checkFields(cmd, {});
            // m_session only changes on this thread or inside a load job.
            if (m_jobKind == Loading)
                m_cancelLoad = true;
            else if (m_busy && m_session)
                m_session->requestStop();
            return;
        }
        if (name == wire::cmd::Quit) {
            checkFields(cmd, {});
            m_quit = true;
            return;
        }
        if (m_busy)
            throw InputError("", std::string("busy with ") + jobName(m_jobKind) +
                                     ": wait for its last event, or send stop");
        joinJob();
        if (name == wire::cmd::Load)
            load(cmd, request);
        else if (name == wire::cmd::Generate)
            generate(cmd, request, false);
        else if (name == wire::cmd::Step)
            generate(cmd, request, true);
        else if (name == wire::cmd::Unload) {
            checkFields(cmd, {});
            unload(request);
        } else
            throw InputError("", "unknown command '" + name + "' (expected load, generate, step, stop, unload or quit)");
    } catch (const InputError& e) {
        error(wire::err::Input, e.what(), request);
    } catch (const json::exception& e) {
        error(wire::err::Input, std::string("bad command: ") + e.what(), request);
    } catch (const std::exception& e) {
        error(wire::err::Internal, e.what(), request);
    }
}

void Worker::shutdown()
{
    if (m_busy && m_session)
        m_session->requestStop();
    m_cancelLoad = true;
    joinJob();
    {
        std::lock_guard<std::mutex> lock(m_pumpWake);
        m_quit = true;
    }
    m_pumpCv.notify_all();
    if (m_pump.joinable())
        m_pump.join();
    m_session.reset();
}

int Worker::serve()
{
    std::signal(SIGPIPE, SIG_IGN); // a vanished client shows as a failed write, not a signal
    installFaultHandlers();
    emit(helloEvent());
    m_pump = std::thread([this] { pumpLoop(); });
    LineReader reader(STDIN_FILENO, wire::kMaxCommandBytes);
    std::string line;
    while (!m_quit) {
        const auto got = reader.next(line);
        if (got == LineReader::End)
            break;
        if (got == LineReader::TooLong) {
            error(wire::err::Input,
                  "a command line longer than " + std::to_string(wire::kMaxCommandBytes) + " bytes was skipped",
                  nullptr);
            continue;
        }
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue; // blank lines are allowed
        handle(line);
    }
    shutdown();
    return 0;
}

} // namespace
} // namespace stowage::cli

extern "C" int stowage_cli_worker(int argc, char** argv)
{
    if (argc > 0) {
        std::fprintf(stderr, "stowage-cli: worker takes no arguments (it reads commands on stdin; see "
                             "docs/worker-protocol.md)\n");
        (void)argv;
        return 2;
    }
    return stowage::cli::runGuarded([] {
        stowage::cli::Worker worker;
        return worker.serve();
    });
}
