#pragma once
// A worker process (`stowage-cli worker`) driven through the window's own
// client, with every event it said and waits for a given one; and what the
// kernel says about a process's memory. For the suites that run the real
// worker (tst_faults, tst_endurance); needs stowage_runclient.
#include "workerclient.h"

#include <QElapsedTimer>
#include <QFile>
#include <QJsonObject>
#include <QStringList>
#include <QTest>

#include <vector>

namespace fixtures {

class WorkerHarness : public QObject {
public:
    explicit WorkerHarness(const QString& program) : client(program)
    {
        connect(&client, &stowage::WorkerClient::eventReceived, this, [this](const QJsonObject& e) { events.push_back(e); });
        connect(&client, &stowage::WorkerClient::ended, this,
                [this](int code, QProcess::ExitStatus status, const QString& d) {
                    endedCode = code;
                    endedStatus = status;
                    endedDescription = d;
                    ended = true;
                });
    }
    // The index of the first event named one of `names` at or after `from`,
    // waiting up to `ms` (a hang guard); -1 if none came or the worker ended.
    int waitForAny(const QStringList& names, int from = 0, int ms = 60000)
    {
        QElapsedTimer t;
        t.start();
        while (true) {
            for (int i = from; i < int(events.size()); ++i)
                if (names.contains(events[size_t(i)].value("event").toString()))
                    return i;
            if (ended || t.elapsed() > ms)
                return -1;
            QTest::qWait(5);
        }
    }
    int waitFor(const QString& name, int from = 0, int ms = 60000) { return waitForAny({name}, from, ms); }
    int start()
    {
        client.start();
        return waitFor("hello");
    }
    // Sends `command` and waits for the first of `names` it causes.
    int request(const QJsonObject& command, const QStringList& names, int ms = 60000)
    {
        const int from = int(events.size());
        client.send(command);
        return waitForAny(names, from, ms);
    }
    const QJsonObject& at(int i) const { return events[size_t(i)]; }
    QString name(int i) const { return i < 0 ? QStringLiteral("(none)") : at(i).value("event").toString(); }
    QString message(int i) const { return i < 0 ? QString() : at(i).value("message").toString(); }

    stowage::WorkerClient client;
    std::vector<QJsonObject> events;
    bool ended = false;
    int endedCode = 0;
    QProcess::ExitStatus endedStatus = QProcess::NormalExit;
    QString endedDescription;
};

// A field of /proc/PID/status in bytes ("RssAnon", "VmRSS", "VmSize"); -1 when unreadable.
inline qint64 procStatusBytes(qint64 pid, const QByteArray& field)
{
    QFile f(QStringLiteral("/proc/%1/status").arg(pid));
    if (!f.open(QIODevice::ReadOnly))
        return -1;
    for (const QByteArray& line : f.readAll().split('\n'))
        if (line.startsWith(field + ':'))
            return line.mid(field.size() + 1).trimmed().split(' ').value(0).toLongLong() * 1024;
    return -1;
}

// Anonymous resident memory: the heap and LibTorch's buffers, not the mapped checkpoint.
inline qint64 rssAnon(qint64 pid) { return procStatusBytes(pid, "RssAnon"); }

// True while the process exists and is not a zombie waiting to be reaped.
inline bool processRunning(qint64 pid)
{
    QFile f(QStringLiteral("/proc/%1/stat").arg(pid));
    if (!f.open(QIODevice::ReadOnly))
        return false;
    const QByteArray stat = f.readAll();
    const qsizetype close = stat.lastIndexOf(')');
    return close > 0 && stat.size() > close + 2 && stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

} // namespace fixtures
