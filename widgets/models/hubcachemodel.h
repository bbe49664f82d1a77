#pragma once
// Table of the models in the Hub cache (stowage/hubcache.h scans it), for
// the open dialog.
#include "stowage/hubcache.h"

#include <QAbstractTableModel>
#include <QString>

#include <vector>

namespace stowage {

class HubCacheModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { ModelColumn, SizeColumn, WeightsColumn, FolderColumn, ColumnCount };
    enum Role { PathRole = Qt::UserRole + 1, DiskBytesRole, PlannableRole };

    explicit HubCacheModel(QObject* parent = nullptr);
    void setEntries(std::vector<HubCacheEntry> entries);
    const std::vector<HubCacheEntry>& entries() const { return m_entries; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<HubCacheEntry> m_entries;
};

// "weights downloaded", "3 of 4 shards", "index and config only", …
QString weightsLabel(const HubCacheEntry& e);

} // namespace stowage
