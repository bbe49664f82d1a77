#pragma once
// A serving engine installed on this machine (llama.cpp's llama-server),
// started as a separate process on loopback with the Deploy tab's launch
// arguments, and streamed from through its OpenAI-compatible endpoint
// (POST /v1/completions with "stream": true, server-sent events). The
// window owns one; it never blocks: start-up, tokens, memory and the end
// arrive as signals. Qt Core and Network only, no LibTorch.
#include <QElapsedTimer>
#include <QNetworkReply>
#include <QObject>
#include <QPointer>
#include <QProcess>
#include <QString>
#include <QStringList>

class QNetworkAccessManager;
class QTimer;

namespace stowage {

class EngineServer : public QObject {
    Q_OBJECT
public:
    explicit EngineServer(QObject* parent = nullptr);
    ~EngineServer() override;

    // llama-server: $STOWAGE_LLAMA_SERVER, else on PATH, else the copy
    // tools/engines/install-llama-cpp.sh puts in the build tree; empty when none.
    static QString findLlamaServer();
    // The Deploy tab's llama.cpp launch for this machine as arguments: the
    // command's first line that runs llama-server, MODEL.gguf replaced by
    // `gguf`, comment lines (other hosts) dropped. Empty when `command` has
    // no llama-server line.
    static QStringList llamaServerArguments(const QString& command, const QString& gguf);

    // Starts `program` with `arguments` plus --host 127.0.0.1 --port (a free
    // port); ready() once GET /health answers 200, failed() when the process
    // ends first or `startTimeoutMs` passes.
    void start(const QString& program, const QStringList& arguments, int startTimeoutMs = 120000);
    // One streamed completion: text() for each piece, completed() at the end.
    // Greedy when `temperature` is 0.
    void complete(const QString& prompt, int maxTokens, double temperature = 0.0);
    void cancelCompletion();
    // SIGTERM, then SIGKILL after `graceMs`.
    void stop(int graceMs = 3000);

    bool isReady() const { return m_ready; }
    bool isGenerating() const { return m_reply != nullptr; }
    quint16 port() const { return m_port; }
    qint64 processId() const;
    QString log() const { return m_log; } // the last 64 KiB of its output

    // What llama-server says it allocated (at --log-verbosity 4): the sums
    // over devices of its "model buffer size", "KV buffer size" and
    // "compute buffer size" lines, in bytes (it prints MiB to 2 decimals).
    struct Reported {
        double weights = 0, kvCache = 0, compute = 0;
        bool known() const { return weights > 0; }
    };
    Reported reported() const { return m_reported; }

signals:
    void ready();
    void failed(const QString& message);
    // The process is gone after it served or was stopped (one that ends
    // before it answered /health is reported by failed() instead).
    void ended(const QString& description);
    void text(const QString& piece);
    // `pieces`: streamed events that carried text; `seconds` from the request.
    void completed(int pieces, double seconds);
    void completionFailed(const QString& message);
    // The server process's resident memory (VmRSS), sampled twice a second.
    void memorySampled(qint64 residentBytes);

private:
    void pollHealth();
    void readOutput();
    void parseLine(const QString& line);
    void readStream();
    void sampleMemory();
    void processEnded(int exitCode, QProcess::ExitStatus status);
    QString logTail(int lines) const;

    QProcess* m_process = nullptr;
    QNetworkAccessManager* m_net = nullptr;
    QTimer* m_health = nullptr;
    QTimer* m_memory = nullptr;
    QPointer<QNetworkReply> m_reply;
    QByteArray m_sse;
    QByteArray m_partialLine;
    Reported m_reported;
    QString m_log;
    QString m_program;
    quint16 m_port = 0;
    bool m_ready = false;
    bool m_stopping = false;
    int m_pieces = 0;
    int m_startTimeoutMs = 0;
    QElapsedTimer m_since;
};

} // namespace stowage
