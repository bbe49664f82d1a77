#pragma once
// Predicted decode speed of the current placement, one row per execution
// policy, with each device's share of a decode step (for the share bars).
#include "stowage/costmodel.h"

#include <QAbstractTableModel>
#include <QVector>

namespace stowage {

struct Prediction {
    ExecutionPolicy policy = ExecutionPolicy::AccelerateLike;
    CostEstimate estimate;
    QString error; // why there is no estimate (a hand-made profile with a zero rate)
    // What this machine's runs say of the model (Calibration): the speed
    // shown is the model's times `factor`, learned from `calibrationRuns`.
    double factor = 1.0;
    int calibrationRuns = 0;
    double tokensPerSecond() const { return estimate.tokensPerSecond * factor; }
};

class PredictionModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { PolicyColumn, SpeedColumn, SharesColumn, ColumnCount };
    enum Role {
        TokensPerSecondRole = Qt::UserRole + 1, // double
        SharesRole, // QVariantList of QVariantMap {code: deviceCode, share: 0..1, bottleneck: QString}
    };

    explicit PredictionModel(QObject* parent = nullptr);

    // Same policies as before: cells change in place; otherwise a reset.
    void setPredictions(const QVector<Prediction>& rows);
    const QVector<Prediction>& predictions() const { return m_rows; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    // "12.3 tok/s", "0.042 tok/s", "1,234 tok/s".
    static QString formatSpeed(double tokensPerSecond);

private:
    QVector<Prediction> m_rows;
};

} // namespace stowage
