#pragma once
// This machine's fixed costs of a decode step (per token, per layer, per
// layer read from disk; docs/cli.md `hardware`) timed in the background when
// the window finds none measured for this CPU: `stowage-cli hardware --json`,
// about 15 s, once per CPU (it keeps them in the cache folder). Until they
// are in, the Plan page's predictions count bytes only, which put the demo
// at 5-10x what it runs.
#include "stowage/hardware.h"

#include <QObject>
#include <QString>

class QProcess;

namespace stowage {

class FixedCostTiming : public QObject {
    Q_OBJECT
public:
    // `program`: the stowage-cli to run.
    explicit FixedCostTiming(QString program, QObject* parent = nullptr);
    ~FixedCostTiming() override;

    void start();
    // Kills a timing under way; it then reports nothing, and nothing is kept.
    void stop();
    bool running() const { return m_process != nullptr; }

signals:
    // This machine as `stowage-cli hardware` measured it, fixed costs included.
    void finished(const stowage::HardwareProfile& profile);
    void failed(const QString& why);

private:
    void done();

    QString m_program;
    QProcess* m_process = nullptr;
};

} // namespace stowage
