#pragma once
// The window's side of the worker process (`stowage-cli worker`,
// docs/worker-protocol.md): starts it with QProcess, writes commands, reads
// only complete stdout lines and turns them into signals, keeps a bounded
// stderr log, and reports a worker that exited, crashed or was killed
// (SIGKILL, the kernel's OOM killer) as ended(), never as a hang.
#include <QJsonObject>
#include <QObject>
#include <QProcess>
#include <QString>

namespace stowage {

class WorkerClient : public QObject {
    Q_OBJECT
public:
    // `program`: the stowage-cli to run; empty means $STOWAGE_CLI, else the
    // stowage-cli beside this executable.
    explicit WorkerClient(QString program = {}, QObject* parent = nullptr);
    ~WorkerClient() override;

    static QString defaultProgram();
    void start();
    bool isRunning() const;
    qint64 processId() const;
    // One command line; a "request" field, when present, comes back on the events it causes.
    void send(const QJsonObject& command);
    void stop();
    // Asks the worker to quit, then terminates it after `graceMs`, then kills it.
    void shutdown(int graceMs = 2000);
    // A worker that does not answer a stop: SIGTERM now, SIGKILL after
    // `graceMs`. Reported by ended() as stopped by the user, not as a crash.
    void terminate(int graceMs = 2000);
    bool userStopped() const { return m_userStopped; }

    QString lastActivity() const { return m_lastActivity; }
    QString stderrLog() const { return m_stderr; }
    // One sentence for an ended worker (the exit statuses of workerwire.h in words): "the worker was killed by signal 9
    // (SIGKILL: killed by hand, or by the kernel when memory ran out) while
    // generating"; `stderrTail` gives the file a mapped-file fault names.
    static QString describeEnd(int exitCode, QProcess::ExitStatus status, bool userStopped, const QString& activity,
                               const QString& stderrTail = {});

signals:
    void eventReceived(const QJsonObject& event); // every event, in order
    // The worker process is gone; `description` says why, in words.
    void ended(int exitCode, QProcess::ExitStatus status, const QString& description);
    // stdout held something that is not an event line (the worker is killed).
    void protocolError(const QString& message);

private:
    void readStdout();
    void readStderr();
    void handleLine(const QByteArray& line);
    void finished(int exitCode, QProcess::ExitStatus status);

    QString m_program;
    QProcess* m_process = nullptr;
    QByteArray m_buffer;
    QString m_stderr;
    QString m_lastActivity;
    bool m_userStopped = false;
};

} // namespace stowage
