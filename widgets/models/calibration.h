#pragma once
// What this machine's runs say about the cost model: per execution policy,
// the ratio of each measured decode speed to the speed predicted for the
// same plan, kept per machine (CPU key) in the settings. The factor is the
// geometric mean of the last kKeep ratios; the planning page multiplies its
// predictions by it and says so, and the user can reset it.
#include "stowage/costmodel.h"

#include <QHash>
#include <QObject>
#include <QString>
#include <QVector>

namespace stowage {

class Calibration : public QObject {
    Q_OBJECT
public:
    static constexpr int kKeep = 20;       // ratios kept per policy (the newest)
    static constexpr int kMinTokens = 4;    // decode tokens a run needs to count

    struct Factor {
        double factor = 1.0; // measured / predicted; 1 with no runs
        int runs = 0;
    };

    // `machine`: whose runs these are (thisCpuKey()). Reads what the
    // settings hold for it.
    explicit Calibration(const QString& machine, QObject* parent = nullptr);

    QString machine() const { return m_machine; }
    Factor factor(ExecutionPolicy policy) const;
    int totalRuns() const;
    // Adds a run; false (and nothing kept) when either speed is not a
    // positive finite number or the run decoded fewer than kMinTokens.
    bool record(ExecutionPolicy policy, double predicted, double measured, int decodeTokens);
    void reset();
    // "this machine runs prefetch at 0.92× the model's prediction, from 6 runs";
    // empty with no runs.
    QString describe(ExecutionPolicy policy) const;
    // A factor as the window writes it: "0.92", "0.047".
    static QString formatFactor(double factor);

signals:
    void changed();

private:
    void save() const;
    QString m_machine;
    QHash<int, QVector<double>> m_ratios; // by ExecutionPolicy
};

} // namespace stowage
