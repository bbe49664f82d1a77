#include "hubcachemodel.h"

#include "display.h"

#include <QColor>

namespace stowage {

HubCacheModel::HubCacheModel(QObject* parent) : QAbstractTableModel(parent) {}

void HubCacheModel::setEntries(const QVector<HubCacheEntry>& entries)
{
    beginResetModel();
    m_entries = entries;
    endResetModel();
}

int HubCacheModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : m_entries.size(); }

int HubCacheModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant HubCacheModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const HubCacheEntry& e = m_entries[index.row()];
    // A plan needs config.json plus the index (or the weights themselves).
    const bool plannable = e.weights == HubCacheEntry::Weights::All || e.weights == HubCacheEntry::Weights::Partial ||
                           e.weights == HubCacheEntry::Weights::IndexOnly;
    switch (role) {
    case PathRole: return e.folder;
    case DiskBytesRole: return QVariant::fromValue<quint64>(e.diskBytes);
    case PlannableRole: return plannable;
    case Qt::ToolTipRole: return e.snapshot.isEmpty() ? e.folder : e.snapshot;
    case Qt::TextAlignmentRole:
        return index.column() == SizeColumn ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
    case Qt::ForegroundRole:
        return plannable ? QVariant() : QVariant(QColor(0x90, 0x90, 0x90));
    case Qt::DisplayRole: break;
    default: return {};
    }
    switch (index.column()) {
    case ModelColumn: return e.repoId;
    case SizeColumn: return formatBytes(e.diskBytes);
    case WeightsColumn: return weightsLabel(e);
    case FolderColumn: return e.folder;
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

} // namespace stowage
