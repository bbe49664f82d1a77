#pragma once
// Table model over a planned device map: one row per entry, in the order
// transformers stores it, with the planner's one-sentence explanation.
#include "stowage/planner.h"

#include <QAbstractTableModel>

namespace stowage {

class DeviceMapModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { ModuleColumn, DeviceColumn, SizeColumn, WhyColumn, ColumnCount };
    // Raw values for sorting and for other views.
    enum Role { BytesRole = Qt::UserRole + 1, DeviceNameRole };

    explicit DeviceMapModel(QObject* parent = nullptr);

    void setPlan(Plan plan);
    void clear();
    const Plan& plan() const { return m_plan; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    // "0: 1.2 MiB / 8 GiB · cpu: …": used over budget for every device.
    static QString totalsLine(const Plan& plan);
    // "GPU 0", "CPU", "Disk".
    static QString deviceLabel(const Device& d);

private:
    Plan m_plan;
};

} // namespace stowage
