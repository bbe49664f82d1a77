#pragma once
// Owns the worker process for the window (WorkerClient) and turns its
// events, decoded by workercodec.h, into typed, queued signals carrying plain
// values (rundata.h); the views never see worker output. Every command is a numbered job (its
// `request`); events of an older job are dropped. Stop and Cancel are a
// `stop` message; a worker that has not answered within the grace period is
// terminated, then killed. A worker that ends — crash, the kernel's OOM
// killer, SIGKILL by hand, or stopped by us — is reported once, with
// whether the user asked for it; the next dispatch starts a new one.
#include "rundata.h"
#include "workercodec.h"

#include <QElapsedTimer>
#include <QJsonObject>
#include <QObject>
#include <QProcess>
#include <QTimer>

namespace stowage {

class WorkerClient;

class RunController : public QObject {
    Q_OBJECT
public:
    enum class State { NoWorker, Starting, Idle, Loading, Loaded, Generating, Stepping, Unloading };
    Q_ENUM(State)

    explicit RunController(QString program = {}, QObject* parent = nullptr);
    ~RunController() override;

    State state() const { return m_state; }
    bool modelLoaded() const { return m_loaded; }
    // The execution policy of the model being loaded or loaded ("" when none).
    QString policy() const { return m_policy; }
    WorkerClient* client() const { return m_client; }
    // The tail of the worker's stderr, for messages.
    QString stderrLog() const;
    qint64 workerPid() const;
    QString runtimeDescription() const { return m_runtime; }
    // Seconds to wait for an answer to stop before terminating the worker.
    void setStopGraceMs(int ms) { m_stopGraceMs = ms; }

    void dispatch(const LoadRequest& request);
    void generate(const GenerateRequest& request);
    // One token, each unit pausing `unitDelayMs` before it computes.
    void step(const GenerateRequest& request, int unitDelayMs);
    void stop();   // ends a generation or step, cancels a load
    void unload();
    void shutdown();
    // The worker's clock now, estimated from the last sample (for token markers).
    double workerTime() const;

signals:
    void stateChanged(State state);
    void workerStarted(const QString& runtime);
    void progress(int permille, const QString& what);
    void loaded(const LoadedInfo& info);
    void sampleAvailable(const RunSample& sample);
    void traceAvailable(const QVector<TraceSpan>& spans);
    void tokenAvailable(const TokenMark& token);
    void done(const DoneInfo& info);
    void cancelled();
    void unloaded();
    void warning(const QString& message);
    void failed(const QString& message); // the worker's `error` event
    // The worker process is gone. `byUser`: Stop/Cancel had to end it.
    void workerEnded(const QString& description, bool byUser);

private:
    void ensureWorker();
    void send(QJsonObject command, State next);
    void setState(State s);
    void handleEvent(const QJsonObject& e);
    void handle(const worker::Hello& e);
    void handle(const worker::Progress& e);
    void handle(const worker::Warning& e);
    void handle(const LoadedInfo& e);
    void handle(TokenMark e);
    void handle(const RunSample& e);
    void handle(const worker::Trace& e);
    void handle(const DoneInfo& e);
    void handle(const worker::Cancelled& e);
    void handle(const worker::Unloaded& e);
    void handle(const worker::Error& e);
    void handleEnded(int exitCode, QProcess::ExitStatus status, const QString& description);

    QString m_program;
    WorkerClient* m_client = nullptr;
    State m_state = State::NoWorker;
    bool m_loaded = false;
    QString m_policy; // of the last load command, while it loads or is loaded
    bool m_helloSeen = false;
    QList<std::pair<QJsonObject, State>> m_pending; // commands written once the worker says hello
    int m_job = 0;
    QString m_runtime;
    QTimer m_stopGuard;
    int m_stopGraceMs = 5000;
    QElapsedTimer m_clock;
    double m_lastSampleT = 0;
    qint64 m_lastSampleAt = -1;
};

} // namespace stowage
