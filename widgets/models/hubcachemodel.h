#pragma once
// Table of the models in the Hub cache (hubcache.h), for the open dialog.
#include "hubcache.h"

#include <QAbstractTableModel>

namespace stowage {

class HubCacheModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { ModelColumn, SizeColumn, WeightsColumn, FolderColumn, ColumnCount };
    enum Role { PathRole = Qt::UserRole + 1, DiskBytesRole, PlannableRole };

    explicit HubCacheModel(QObject* parent = nullptr);
    void setEntries(const QVector<HubCacheEntry>& entries);
    const QVector<HubCacheEntry>& entries() const { return m_entries; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    QVector<HubCacheEntry> m_entries;
};

} // namespace stowage
