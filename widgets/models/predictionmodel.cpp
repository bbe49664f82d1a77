#include "predictionmodel.h"

#include "calibration.h"
#include "display.h"

#include <QCoreApplication>
#include <QLocale>
#include <QStringList>

namespace stowage {

PredictionModel::PredictionModel(QObject* parent) : QAbstractTableModel(parent) {}

void PredictionModel::setPredictions(const QVector<Prediction>& rows)
{
    bool samePolicies = rows.size() == m_rows.size();
    for (int i = 0; samePolicies && i < rows.size(); ++i)
        samePolicies = rows[i].policy == m_rows[i].policy;
    if (!samePolicies) {
        beginResetModel();
        m_rows = rows;
        endResetModel();
        return;
    }
    m_rows = rows;
    if (!m_rows.isEmpty())
        emit dataChanged(index(0, SpeedColumn), index(m_rows.size() - 1, SharesColumn));
}

int PredictionModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : m_rows.size(); }

int PredictionModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString PredictionModel::formatSpeed(double t)
{
    if (!(t > 0))
        return QStringLiteral("—");
    const int decimals = t >= 100 ? 0 : t >= 10 ? 1 : t >= 1 ? 2 : 3;
    return QCoreApplication::translate("stowage", "%1 tok/s").arg(QLocale(QLocale::English).toString(t, 'f', decimals));
}

QVariant PredictionModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const Prediction& p = m_rows[index.row()];
    switch (role) {
    case TokensPerSecondRole: return p.tokensPerSecond();
    case SharesRole: {
        QVariantList list;
        for (const DeviceShare& d : p.estimate.devices)
            list.push_back(QVariantMap{{QStringLiteral("code"), deviceCode(d.device)},
                                       {QStringLiteral("share"), d.share},
                                       {QStringLiteral("bottleneck"), QString::fromStdString(d.bottleneck)}});
        return list;
    }
    case Qt::TextAlignmentRole:
        return index.column() == SpeedColumn ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
    case Qt::ToolTipRole: {
        if (!p.error.isEmpty())
            return p.error;
        QStringList lines{policyDescription(p.policy)};
        if (p.calibrationRuns > 0)
            lines << tr("The cost model predicts %1; this machine's %2 measured %3× that on average, so %4 is shown.")
                         .arg(formatSpeed(p.estimate.tokensPerSecond),
                              countOf(p.calibrationRuns, tr("run"), tr("runs")),
                              Calibration::formatFactor(p.factor),
                              formatSpeed(p.tokensPerSecond()));
        for (const DeviceShare& d : p.estimate.devices)
            lines << tr("%1: %2 of weights, %3 ms per token (%4 %), limited by %5")
                         .arg(deviceLabel(d.device), formatBytes(d.weightBytes))
                         .arg(d.seconds * 1e3, 0, 'f', 2)
                         .arg(d.share * 100, 0, 'f', 0)
                         .arg(QString::fromStdString(d.bottleneck));
        return lines.join(QLatin1Char('\n'));
    }
    case Qt::DisplayRole: break;
    default: return {};
    }
    switch (index.column()) {
    case PolicyColumn: return policyLabel(p.policy);
    case SpeedColumn:
        if (!p.error.isEmpty())
            return tr("no estimate");
        return p.calibrationRuns > 0 ? tr("%1 (calibrated)").arg(formatSpeed(p.tokensPerSecond()))
                                     : formatSpeed(p.estimate.tokensPerSecond);
    case SharesColumn: {
        QStringList parts;
        for (const DeviceShare& d : p.estimate.devices)
            parts << QStringLiteral("%1 %2 %").arg(deviceLabel(d.device)).arg(d.share * 100, 0, 'f', 0);
        return p.error.isEmpty() ? parts.join(QStringLiteral(" · ")) : p.error;
    }
    }
    return {};
}

QVariant PredictionModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case PolicyColumn: return tr("Execution");
    case SpeedColumn: return tr("Decode");
    case SharesColumn: return tr("Time per token by device");
    }
    return {};
}

} // namespace stowage
