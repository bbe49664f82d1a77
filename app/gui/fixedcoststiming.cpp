#include "fixedcoststiming.h"

#include "stowage/error.h"

#include <QProcess>

namespace stowage {

FixedCostTiming::FixedCostTiming(QString program, QObject* parent) : QObject(parent), m_program(std::move(program)) {}

FixedCostTiming::~FixedCostTiming() { stop(); }

void FixedCostTiming::start()
{
    if (m_process)
        return;
    m_process = new QProcess(this);
    connect(m_process, &QProcess::finished, this, &FixedCostTiming::done);
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart && m_process) {
            const QString why = tr("could not start %1: %2").arg(m_program, m_process->errorString());
            m_process->deleteLater();
            m_process = nullptr;
            emit failed(why);
        }
    });
    m_process->start(m_program, {QStringLiteral("hardware"), QStringLiteral("--json")});
}

void FixedCostTiming::stop()
{
    if (!m_process)
        return;
    QProcess* p = m_process;
    m_process = nullptr; // done() reports nothing for it
    p->disconnect(this);
    p->kill();
    p->waitForFinished(5000);
    p->deleteLater();
}

void FixedCostTiming::done()
{
    QProcess* p = m_process;
    if (!p)
        return;
    m_process = nullptr;
    p->deleteLater();
    const QString err = QString::fromLocal8Bit(p->readAllStandardError()).trimmed();
    if (p->exitStatus() != QProcess::NormalExit || p->exitCode() != 0) {
        emit failed(err.isEmpty() ? tr("%1 hardware stopped (exit %2)").arg(m_program).arg(p->exitCode())
                                  : err.split(QLatin1Char('\n')).last());
        return;
    }
    try {
        const HardwareProfile profile =
            profileFromJson(p->readAllStandardOutput().toStdString(), "stowage-cli hardware --json");
        if (profile.fixedCosts.empty())
            emit failed(err.isEmpty() ? tr("stowage-cli hardware measured no fixed costs") : err.split(QLatin1Char('\n')).last());
        else
            emit finished(profile);
    } catch (const InputError& e) {
        emit failed(QString::fromStdString(e.what()));
    }
}

} // namespace stowage
