#include "hubcachemodel.h"

#include "display.h"

#include <QColor>
#include <QCoreApplication>

namespace stowage {

HubCacheModel::HubCacheModel(QObject* parent) : QAbstractTableModel(parent) {}

void HubCacheModel::setEntries(std::vector<HubCacheEntry> entries)
{
    beginResetModel();
    m_entries = std::move(entries);
    endResetModel();
}

int HubCacheModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_entries.size());
}

int HubCacheModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant HubCacheModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const HubCacheEntry& e = m_entries[static_cast<size_t>(index.row())];
    // A plan needs config.json plus the index (or the weights themselves).
    const bool plannable = e.weights == HubCacheEntry::Weights::All || e.weights == HubCacheEntry::Weights::Partial ||
                           e.weights == HubCacheEntry::Weights::IndexOnly;
    switch (role) {
    case PathRole: return QString::fromStdString(e.folder);
    case DiskBytesRole: return QVariant::fromValue<quint64>(e.diskBytes);
    case PlannableRole: return plannable;
    case Qt::ToolTipRole: {
        QString tip = QString::fromStdString(e.snapshot.empty() ? e.folder : e.snapshot);
        if (e.linkedBytes)
            tip += tr("\n%1 of it in blobs linked from elsewhere").arg(formatBytes(e.linkedBytes));
        if (!e.problem.empty())
            tip += QStringLiteral("\n") + QString::fromStdString(e.problem);
        return tip;
    }
    case Qt::TextAlignmentRole:
        return index.column() == SizeColumn ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
    case Qt::ForegroundRole:
        return plannable ? QVariant() : QVariant(QColor(0x90, 0x90, 0x90));
    case Qt::DisplayRole: break;
    default: return {};
    }
    switch (index.column()) {
    case ModelColumn: return QString::fromStdString(e.repoId);
    case SizeColumn: return formatBytes(e.diskBytes);
    case WeightsColumn: return weightsLabel(e);
    case FolderColumn: return QString::fromStdString(e.folder);
    }
    return {};
}

QVariant HubCacheModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case ModelColumn: return tr("Model");
    case SizeColumn: return tr("On disk");
    case WeightsColumn: return tr("Weights");
    case FolderColumn: return tr("Folder");
    }
    return {};
}

namespace {
QString weightsKind(const HubCacheEntry& e)
{
    switch (e.weights) {
    case HubCacheEntry::Weights::All: return QCoreApplication::translate("stowage", "weights downloaded");
    case HubCacheEntry::Weights::Partial:
        return QCoreApplication::translate("stowage", "%1 of %2 shards").arg(e.shardsPresent).arg(e.shardsTotal);
    case HubCacheEntry::Weights::IndexOnly: return QCoreApplication::translate("stowage", "index and config only");
    case HubCacheEntry::Weights::ConfigOnly: return QCoreApplication::translate("stowage", "config only");
    case HubCacheEntry::Weights::None: return QCoreApplication::translate("stowage", "no snapshot");
    }
    return {};
}
} // namespace

QString weightsLabel(const HubCacheEntry& e)
{
    // A weights file that leads outside the entry does not count (opening refuses it): say so.
    if (!e.snapshot.empty() && !e.problem.empty())
        return weightsKind(e) + QCoreApplication::translate("stowage", "; a weights file leads outside the cache");
    return weightsKind(e);
}

} // namespace stowage
