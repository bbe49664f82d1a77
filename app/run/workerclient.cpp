#include "workerclient.h"

#include "workerwire.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QJsonDocument>
#include <QPointer>
#include <QRegularExpression>
#include <QTimer>

#include <cstring>

#include <csignal>

namespace stowage {
namespace {
constexpr qsizetype kMaxLine = 64 << 20;   // an event line longer than this is a broken worker
constexpr qsizetype kMaxStderr = 64 << 10; // the tail of stderr kept for messages
} // namespace

WorkerClient::WorkerClient(QString program, QObject* parent)
    : QObject(parent), m_program(program.isEmpty() ? defaultProgram() : std::move(program))
{
}

WorkerClient::~WorkerClient()
{
    if (m_process) {
        m_process->disconnect(this);
        if (m_process->state() != QProcess::NotRunning) {
            m_process->kill(); // no event loop to wait in: kill, and reap it
            m_process->waitForFinished(5000);
        }
    }
}

QString WorkerClient::defaultProgram()
{
    const QByteArray env = qgetenv("STOWAGE_CLI");
    if (!env.isEmpty())
        return QString::fromLocal8Bit(env);
    const QDir here(QCoreApplication::applicationDirPath());
    // Installed side by side; in a build tree the window is one folder down (app/gui).
    if (!QFileInfo::exists(here.filePath("stowage-cli")) && QFileInfo::exists(here.filePath("../stowage-cli")))
        return QDir::cleanPath(here.filePath("../stowage-cli"));
    return here.filePath("stowage-cli");
}

void WorkerClient::start()
{
    if (m_process) {
        // The old process, if still there, no longer reports to us.
        m_process->disconnect(this);
        if (m_process->state() != QProcess::NotRunning)
            m_process->kill();
        m_process->deleteLater();
    }
    m_buffer.clear();
    m_stderr.clear();
    m_userStopped = false;
    m_lastActivity = tr("starting");
    m_process = new QProcess(this);
    m_process->setProgram(m_program);
    m_process->setArguments({"worker"});
    connect(m_process, &QProcess::readyReadStandardOutput, this, &WorkerClient::readStdout);
    connect(m_process, &QProcess::readyReadStandardError, this, &WorkerClient::readStderr);
    connect(m_process, &QProcess::finished, this, &WorkerClient::finished);
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart)
            emit ended(-1, QProcess::CrashExit,
                       tr("the worker could not be started (%1): %2").arg(m_program, m_process->errorString()));
    });
    m_process->start();
}

bool WorkerClient::isRunning() const { return m_process && m_process->state() != QProcess::NotRunning; }

qint64 WorkerClient::processId() const { return m_process ? m_process->processId() : 0; }

void WorkerClient::send(const QJsonObject& command)
{
    if (!isRunning())
        return;
    const QString cmd = command.value(wire::kCmd).toString();
    if (cmd == wire::cmd::Load)
        m_lastActivity = tr("loading");
    else if (cmd == wire::cmd::Generate)
        m_lastActivity = tr("generating");
    else if (cmd == wire::cmd::Step)
        m_lastActivity = tr("stepping one token");
    else if (cmd == wire::cmd::Unload)
        m_lastActivity = tr("unloading");
    QByteArray line = QJsonDocument(command).toJson(QJsonDocument::Compact);
    line.append('\n');
    m_process->write(line);
}

void WorkerClient::stop() { send(QJsonObject{{wire::kCmd, wire::cmd::Stop}}); }

void WorkerClient::shutdown(int graceMs)
{
    if (!isRunning())
        return;
    m_userStopped = true;
    send(QJsonObject{{wire::kCmd, wire::cmd::Quit}});
    m_process->closeWriteChannel();
    QPointer<QProcess> p = m_process;
    QTimer::singleShot(graceMs, this, [p] {
        if (p && p->state() != QProcess::NotRunning)
            p->terminate();
    });
    QTimer::singleShot(2 * graceMs, this, [p] {
        if (p && p->state() != QProcess::NotRunning)
            p->kill();
    });
}

void WorkerClient::terminate(int graceMs)
{
    if (!isRunning())
        return;
    m_userStopped = true;
    m_process->terminate();
    QPointer<QProcess> p = m_process;
    QTimer::singleShot(graceMs, this, [p] {
        if (p && p->state() != QProcess::NotRunning)
            p->kill();
    });
}

void WorkerClient::readStdout()
{
    m_buffer.append(m_process->readAllStandardOutput());
    qsizetype start = 0;
    while (true) {
        const qsizetype nl = m_buffer.indexOf('\n', start);
        if (nl < 0)
            break;
        handleLine(m_buffer.mid(start, nl - start));
        start = nl + 1;
        if (!m_process)
            return;
    }
    m_buffer.remove(0, start);
    if (m_buffer.size() > kMaxLine) {
        emit protocolError(tr("the worker wrote %1 bytes without a line end").arg(m_buffer.size()));
        m_buffer.clear();
        m_process->kill();
    }
}

void WorkerClient::handleLine(const QByteArray& line)
{
    if (line.trimmed().isEmpty())
        return;
    QJsonParseError err{};
    const QJsonDocument doc = QJsonDocument::fromJson(line, &err);
    if (err.error != QJsonParseError::NoError || !doc.isObject() || !doc.object().value(wire::kEvent).isString()) {
        emit protocolError(tr("the worker wrote a line that is not an event: %1").arg(QString::fromUtf8(line.left(200))));
        return;
    }
    const QJsonObject e = doc.object();
    const QString kind = e.value(wire::kEvent).toString();
    if (kind == wire::ev::Token)
        m_lastActivity = tr("generating (token %1)").arg(e.value(wire::f::Index).toInt() + 1);
    else if (kind == wire::ev::Progress)
        m_lastActivity = tr("loading (%1%)").arg(qRound(e.value(wire::f::Fraction).toDouble() * 100));
    else if (kind == wire::ev::Loaded || kind == wire::ev::Done || kind == wire::ev::Unloaded ||
             kind == wire::ev::Cancelled || kind == wire::ev::Error)
        m_lastActivity = tr("idle");
    emit eventReceived(e);
}

void WorkerClient::readStderr()
{
    m_stderr += QString::fromLocal8Bit(m_process->readAllStandardError());
    if (m_stderr.size() > kMaxStderr)
        m_stderr = m_stderr.right(kMaxStderr);
}

QString WorkerClient::describeEnd(int exitCode, QProcess::ExitStatus status, bool userStopped, const QString& activity,
                                  const QString& stderrTail)
{
    QString what;
    if (status == QProcess::NormalExit && exitCode == wire::kExitMappedFileShrank) {
        // "stowage-cli worker: <file>: shrank from N to M bytes while in use (SIGBUS …)"
        static const QRegularExpression line(QStringLiteral("stowage-cli worker: (.+): (shrank [^\\n(]*?) while in use"));
        QRegularExpressionMatch m;
        for (auto it = line.globalMatch(stderrTail); it.hasNext();)
            m = it.next();
        const QString file = m.hasMatch() ? tr("%1 %2").arg(m.captured(1), m.captured(2))
                                          : tr("a memory-mapped checkpoint file shrank");
        what = tr("the worker stopped (status %1): %2 on disk").arg(exitCode).arg(file);
        what += activity.isEmpty() || userStopped ? tr(" while in use") : tr(" while %1").arg(activity);
        return what + tr("; reopen the checkpoint");
    }
    if (status == QProcess::NormalExit && exitCode == wire::kExitOutOfMemory) {
        what = tr("the worker ran out of memory (status %1: an allocation failed; a memory limit such as ulimit -v "
                  "or a cgroup's, or RAM itself, is too small for this plan)")
                   .arg(exitCode);
    } else if (status == QProcess::NormalExit) {
        what = exitCode == 0 ? tr("the worker exited") : tr("the worker exited with status %1").arg(exitCode);
    } else if (exitCode == SIGKILL) {
        what = tr("the worker was killed by signal 9 (SIGKILL: killed by hand, or by the kernel when memory ran out)");
    } else if (exitCode > 0 && exitCode < 64) {
        what = tr("the worker was killed by signal %1 (%2)").arg(exitCode).arg(QString::fromLocal8Bit(strsignal(exitCode)));
    } else {
        what = tr("the worker crashed");
    }
    if (userStopped)
        return what + tr(" after it was asked to stop");
    return activity.isEmpty() ? what : what + tr(" while %1").arg(activity);
}

void WorkerClient::finished(int exitCode, QProcess::ExitStatus status)
{
    readStdout(); // the last complete lines
    readStderr(); // the last words, which may name the file a SIGBUS came from
    const QString description = describeEnd(exitCode, status, m_userStopped, m_lastActivity, m_stderr);
    emit ended(exitCode, status, description);
}

} // namespace stowage
