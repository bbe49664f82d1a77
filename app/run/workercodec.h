#pragma once
// The window's half of the worker protocol (docs/worker-protocol.md), beside
// WorkerClient: requests are encoded into command objects here, and event
// objects are decoded here into the plain values of rundata.h, so nothing
// above app/run sees JSON (as hotspot's PerfParser hands Data::* to its
// models). Field names, event kinds and exit codes are those of
// app/protocol/workerwire.h, which the worker compiles too.
#include "rundata.h"

#include "stowage/device.h"
#include "stowage/hardware.h"
#include "stowage/planner.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>
#include <variant>

namespace stowage {

// What `load` gets: the map on screen and how to run it.
struct LoadRequest {
    QString path;
    QString dtype;  // "float32", …; empty = the checkpoint's
    DeviceMap deviceMap; // as from_pretrained(device_map=…) takes it
    Budgets maxMemory;   // GPU budgets, enforced on simulated GPUs
    bool simulateGpus = false;
    // The machine the plan's prediction describes; it travels inside the
    // command, so the run's simulated GPUs are the prediction's.
    std::optional<HardwareProfile> hardware;
    bool throttle = false; // copies to simulated GPUs at that profile's PCIe speed
    QString offloadFolder;
    QString policy = QStringLiteral("accelerate-like");
};

struct GenerateRequest {
    QString prompt;
    QVector<int> promptIds; // used instead of `prompt` when not empty
    bool chat = false;      // `prompt` through the checkpoint's chat template (not with promptIds)
    int maxNewTokens = 32;
    bool greedy = true;
    double temperature = 1.0;
    int topK = 50;
    double topP = 1.0;
    qint64 seed = 0;
    bool ignoreEos = false;
};

QJsonObject encodeLoad(const LoadRequest& request);
// `step`: one token, each unit pausing `unitDelayMs` before it computes.
QJsonObject encodeGenerate(const GenerateRequest& request, bool step, int unitDelayMs = 0);
QJsonObject encodeStop();
QJsonObject encodeUnload();
QJsonObject encodeQuit();

// The events without a value type of their own in rundata.h.
namespace worker {
struct Hello {
    int protocol = 0;
    QString runtime;
    bool cuda = false;
    QStringList families, policies;
    qint64 pid = 0;
};
struct Progress {
    int permille = 0; // 0..1000
    QString what;
};
struct Warning {
    QString message;
};
struct Trace {
    QVector<TraceSpan> spans;
    quint64 missed = 0;
};
struct Cancelled {
    QString what; // "load", "generate" or "step"
};
struct Unloaded {
    bool wasLoaded = false;
    quint64 rssBytes = 0;
};
struct Error {
    QString kind; // "input", "memory" or "internal"
    QString message;
};
} // namespace worker

// One event, in the order of wire::ev::All.
using WorkerEvent = std::variant<worker::Hello, worker::Progress, worker::Warning, LoadedInfo, TokenMark, RunSample,
                                 worker::Trace, DoneInfo, worker::Cancelled, worker::Unloaded, worker::Error>;

struct DecodedEvent {
    std::optional<int> request; // the command it answers, when it answers one
    WorkerEvent event;
};

// nullopt for an event kind this window does not know (a newer worker's),
// which is ignored. A token without `t` (an older worker) gets t = -1.
std::optional<DecodedEvent> decodeEvent(const QJsonObject& event);

} // namespace stowage
