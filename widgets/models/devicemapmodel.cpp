#include "devicemapmodel.h"

#include "display.h"

#include <QStringList>

namespace stowage {

DeviceMapModel::DeviceMapModel(QObject* parent) : QAbstractTableModel(parent) {}

void DeviceMapModel::setPlan(Plan plan)
{
    beginResetModel();
    m_plan = std::move(plan);
    m_problems.clear();
    endResetModel();
}

void DeviceMapModel::clear() { setPlan(Plan{}); }

void DeviceMapModel::setProblems(const QHash<QString, QString>& problems)
{
    m_problems = problems;
    if (rowCount() > 0)
        emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

int DeviceMapModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_plan.entries.size());
}

int DeviceMapModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString DeviceMapModel::deviceLabel(const Device& d) { return stowage::deviceLabel(d); }

QVariant DeviceMapModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const PlanEntry& e = m_plan.entries[static_cast<size_t>(index.row())];
    const auto problem = m_problems.constFind(QString::fromStdString(e.module));
    const bool bad = problem != m_problems.constEnd();
    switch (role) {
    case ProblemRole:
        return bad ? *problem : QString();
    case Qt::DecorationRole:
        if (index.column() == DeviceColumn)
            return deviceColor(e.device);
        return {};
    case Qt::ForegroundRole:
        if (bad && index.column() == WhyColumn)
            return QColor(0xd0, 0x30, 0x30);
        return {};
    case BytesRole:
        return QVariant::fromValue<quint64>(e.bytes);
    case DeviceNameRole:
        return QString::fromStdString(e.device.name());
    case Qt::TextAlignmentRole:
        if (index.column() == SizeColumn)
            return QVariant(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case Qt::ToolTipRole:
        return bad ? *problem : QString::fromStdString(e.why);
    case Qt::DisplayRole:
        break;
    default:
        return {};
    }
    switch (index.column()) {
    case ModuleColumn:
        return e.module.empty() ? tr("(whole model)") : QString::fromStdString(e.module);
    case DeviceColumn:
        return deviceLabel(e.device);
    case SizeColumn:
        return formatBytes(e.bytes);
    case WhyColumn:
        return bad ? *problem : QString::fromStdString(e.why);
    }
    return {};
}

QVariant DeviceMapModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case ModuleColumn: return tr("Module");
    case DeviceColumn: return tr("Device");
    case SizeColumn: return tr("Size");
    case WhyColumn: return tr("Why");
    }
    return {};
}

QString DeviceMapModel::totalsLine(const Plan& plan)
{
    QStringList parts;
    for (const DeviceTotal& t : plan.devices) {
        // Devices that hold nothing and have no limit (disk, usually) are noise.
        if (t.used == 0 && t.budget < 0)
            continue;
        const QString budget =
            t.budget < 0 ? tr("unlimited") : formatBytes(static_cast<quint64>(t.budget));
        parts << tr("%1: %2 / %3").arg(deviceLabel(t.device), formatBytes(t.used), budget);
    }
    return parts.join(QStringLiteral("  ·  "));
}

} // namespace stowage
