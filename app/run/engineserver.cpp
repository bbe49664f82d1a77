#include "engineserver.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTcpServer>
#include <QTimer>

namespace stowage {
namespace {

constexpr int kLogLimit = 64 * 1024;

QUrl endpoint(quint16 port, const char* path)
{
    return QUrl(QStringLiteral("http://127.0.0.1:%1%2").arg(port).arg(QLatin1String(path)));
}

} // namespace

EngineServer::EngineServer(QObject* parent) : QObject(parent), m_net(new QNetworkAccessManager(this))
{
    m_health = new QTimer(this);
    m_health->setInterval(200);
    connect(m_health, &QTimer::timeout, this, &EngineServer::pollHealth);
    m_memory = new QTimer(this);
    m_memory->setInterval(500);
    connect(m_memory, &QTimer::timeout, this, &EngineServer::sampleMemory);
}

EngineServer::~EngineServer()
{
    if (m_process && m_process->state() != QProcess::NotRunning) {
        m_process->disconnect(this);
        m_process->kill();
        m_process->waitForFinished(3000);
    }
}

QString EngineServer::findLlamaServer()
{
    const QString env = qEnvironmentVariable("STOWAGE_LLAMA_SERVER");
    if (!env.isEmpty())
        return QFileInfo(env).isExecutable() ? env : QString();
    const QString onPath = QStandardPaths::findExecutable(QStringLiteral("llama-server"));
    if (!onPath.isEmpty())
        return onPath;
#ifdef STOWAGE_SOURCE_DIR
    const QString built = QStringLiteral(STOWAGE_SOURCE_DIR "/build/engines/llama.cpp/bin/llama-server");
    if (QFileInfo(built).isExecutable())
        return built;
#endif
    return {};
}

QStringList EngineServer::llamaServerArguments(const QString& command, const QString& gguf)
{
    for (const QString& line : command.split(QLatin1Char('\n'))) {
        const QString trimmed = line.trimmed();
        if (!trimmed.startsWith(QLatin1String("llama-server ")))
            continue;
        QStringList args = trimmed.split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts);
        args.removeFirst();
        for (QString& a : args)
            if (a == QLatin1String("MODEL.gguf"))
                a = gguf;
        // --rpc names other hosts' workers, which are not this machine's to start.
        const int rpc = int(args.indexOf(QStringLiteral("--rpc")));
        if (rpc >= 0)
            args.erase(args.begin() + rpc, args.begin() + std::min<int>(rpc + 2, int(args.size())));
        return args;
    }
    return {};
}

void EngineServer::start(const QString& program, const QStringList& arguments, int startTimeoutMs)
{
    stop(0);
    {
        QTcpServer probe; // a free loopback port, released for the server to take
        if (!probe.listen(QHostAddress::LocalHost, 0)) {
            emit failed(QStringLiteral("no free port on 127.0.0.1: %1").arg(probe.errorString()));
            return;
        }
        m_port = probe.serverPort();
    }
    m_program = QFileInfo(program).fileName();
    m_log.clear();
    m_partialLine.clear();
    m_reported = {};
    m_ready = false;
    m_stopping = false;
    m_startTimeoutMs = startTimeoutMs;
    m_process = new QProcess(this);
    m_process->setProcessChannelMode(QProcess::MergedChannels);
    connect(m_process, &QProcess::readyRead, this, &EngineServer::readOutput);
    connect(m_process, &QProcess::finished, this, &EngineServer::processEnded);
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart) {
            const QString why = m_process->errorString();
            m_process->deleteLater();
            m_process = nullptr;
            m_health->stop();
            m_memory->stop();
            emit failed(QStringLiteral("%1 could not be started: %2").arg(m_program, why));
        }
    });
    m_process->start(program, arguments + QStringList{QStringLiteral("--host"), QStringLiteral("127.0.0.1"),
                                                      QStringLiteral("--port"), QString::number(m_port)});
    m_since.start();
    m_health->start();
    m_memory->start();
}

void EngineServer::pollHealth()
{
    if (!m_process || m_ready)
        return;
    if (m_since.elapsed() > m_startTimeoutMs) {
        m_health->stop();
        emit failed(QStringLiteral("%1 did not answer on port %2 within %3 s:\n%4")
                        .arg(m_program)
                        .arg(m_port)
                        .arg(m_startTimeoutMs / 1000)
                        .arg(logTail(8)));
        stop();
        return;
    }
    QNetworkReply* r = m_net->get(QNetworkRequest(endpoint(m_port, "/health")));
    connect(r, &QNetworkReply::finished, this, [this, r] {
        r->deleteLater();
        // 503 while the model loads; 200 once it can serve.
        if (m_ready || !m_process || r->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt() != 200)
            return;
        m_ready = true;
        m_health->stop();
        emit ready();
    });
}

void EngineServer::complete(const QString& prompt, int maxTokens, double temperature)
{
    if (!m_ready || m_reply) {
        emit completionFailed(m_ready ? QStringLiteral("a completion is already streaming")
                                      : QStringLiteral("the server is not ready"));
        return;
    }
    QJsonObject body{{QStringLiteral("prompt"), prompt},
                     {QStringLiteral("max_tokens"), maxTokens},
                     {QStringLiteral("temperature"), temperature},
                     {QStringLiteral("stream"), true}};
    if (temperature == 0.0)
        body.insert(QStringLiteral("top_k"), 1); // llama.cpp's own key: greedy whatever its sampler chain
    QNetworkRequest req(endpoint(m_port, "/v1/completions"));
    req.setHeader(QNetworkRequest::ContentTypeHeader, QStringLiteral("application/json"));
    m_sse.clear();
    m_pieces = 0;
    m_since.start();
    m_reply = m_net->post(req, QJsonDocument(body).toJson(QJsonDocument::Compact));
    connect(m_reply, &QNetworkReply::readyRead, this, &EngineServer::readStream);
    QNetworkReply* r = m_reply;
    connect(r, &QNetworkReply::finished, this, [this, r] {
        readStream();
        r->deleteLater();
        if (m_reply == r)
            m_reply = nullptr;
        if (r->error() == QNetworkReply::OperationCanceledError)
            emit completionFailed(QStringLiteral("stopped"));
        else if (r->error() != QNetworkReply::NoError)
            emit completionFailed(QStringLiteral("%1: %2 %3")
                                      .arg(m_program, r->errorString(), QString::fromUtf8(r->readAll()).left(300)));
        else
            emit completed(m_pieces, double(m_since.nsecsElapsed()) / 1e9);
    });
}

void EngineServer::readStream()
{
    if (!m_reply)
        return;
    m_sse += m_reply->readAll();
    // Server-sent events: "data: {json}" lines, a blank line after each event.
    for (int nl; (nl = int(m_sse.indexOf('\n'))) >= 0;) {
        const QByteArray line = m_sse.left(nl).trimmed();
        m_sse.remove(0, nl + 1);
        if (!line.startsWith("data:"))
            continue;
        const QByteArray data = line.mid(5).trimmed();
        if (data == "[DONE]")
            continue;
        const QJsonObject ev = QJsonDocument::fromJson(data).object();
        const QJsonArray choices = ev.value(QStringLiteral("choices")).toArray();
        const QString piece = choices.isEmpty() ? QString() : choices.first().toObject().value(QStringLiteral("text")).toString();
        if (!piece.isEmpty()) {
            ++m_pieces;
            emit text(piece);
        }
    }
}

void EngineServer::cancelCompletion()
{
    if (m_reply)
        m_reply->abort();
}

void EngineServer::stop(int graceMs)
{
    m_health->stop();
    cancelCompletion();
    if (!m_process)
        return;
    m_stopping = true;
    if (m_process->state() == QProcess::NotRunning)
        return;
    m_process->terminate();
    if (graceMs <= 0) {
        m_process->waitForFinished(3000);
        if (m_process && m_process->state() != QProcess::NotRunning)
            m_process->kill();
        return;
    }
    QPointer<QProcess> p = m_process;
    QTimer::singleShot(graceMs, this, [p] {
        if (p && p->state() != QProcess::NotRunning)
            p->kill();
    });
}

qint64 EngineServer::processId() const
{
    return m_process ? m_process->processId() : 0;
}

void EngineServer::readOutput()
{
    if (!m_process)
        return;
    const QByteArray bytes = m_process->readAll();
    m_log += QString::fromUtf8(bytes);
    m_partialLine += bytes;
    for (int nl; (nl = int(m_partialLine.indexOf('\n'))) >= 0;) {
        parseLine(QString::fromUtf8(m_partialLine.left(nl)));
        m_partialLine.remove(0, nl + 1);
    }
    if (m_partialLine.size() > kLogLimit)
        m_partialLine.clear(); // no line is that long; what follows the next newline is read again
    if (m_log.size() > kLogLimit)
        m_log.remove(0, m_log.size() - kLogLimit);
}

void EngineServer::parseLine(const QString& line)
{
    // "load_tensors:   CPU_Mapped model buffer size =     6.23 MiB",
    // "llama_kv_cache:        CPU KV buffer size =     0.38 MiB",
    // "sched_reserve:        CPU compute buffer size =     1.79 MiB" (llama.cpp 0.7.0).
    static const QRegularExpression re(QStringLiteral(" (model|KV|compute) buffer size = +([0-9.]+) MiB"));
    const auto m = re.match(line);
    if (!m.hasMatch())
        return;
    const double bytes = m.captured(2).toDouble() * 1024.0 * 1024.0;
    const QString what = m.captured(1);
    (what == QLatin1String("model") ? m_reported.weights : what == QLatin1String("KV") ? m_reported.kvCache
                                                                                      : m_reported.compute) += bytes;
}

QString EngineServer::logTail(int lines) const
{
    QStringList all = m_log.trimmed().split(QLatin1Char('\n'));
    return all.mid(std::max<int>(0, int(all.size()) - lines)).join(QLatin1Char('\n'));
}

void EngineServer::sampleMemory()
{
    const qint64 pid = processId();
    if (pid <= 0)
        return;
    QFile status(QStringLiteral("/proc/%1/status").arg(pid));
    if (!status.open(QIODevice::ReadOnly))
        return;
    // "VmRSS:   123456 kB" (procfs(5)); the wrapper's exec keeps the pid.
    for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith("VmRSS:")) {
            emit memorySampled(line.mid(6).trimmed().split(' ').value(0).toLongLong() * 1024);
            return;
        }
}

void EngineServer::processEnded(int exitCode, QProcess::ExitStatus status)
{
    readOutput();
    m_health->stop();
    m_memory->stop();
    cancelCompletion();
    const bool wasReady = m_ready;
    m_ready = false;
    QString description;
    if (m_stopping)
        description = QStringLiteral("%1 stopped").arg(m_program);
    else if (status == QProcess::CrashExit)
        description = QStringLiteral("%1 crashed:\n%2").arg(m_program, logTail(8));
    else
        description = QStringLiteral("%1 exited with code %2:\n%3").arg(m_program).arg(exitCode).arg(logTail(8));
    m_process->deleteLater();
    m_process = nullptr;
    if (!wasReady && !m_stopping)
        emit failed(description); // it never served: a failed start, not an end
    else
        emit ended(description);
}

} // namespace stowage
