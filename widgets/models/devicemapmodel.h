#pragma once
// Table model over a planned (or imported) device map: one row per entry,
// in the order transformers stores it, with the planner's one-sentence
// explanation, or for an imported map the problem found with that entry.
#include "stowage/planner.h"

#include <QAbstractTableModel>
#include <QHash>

namespace stowage {

class DeviceMapModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { ModuleColumn, DeviceColumn, SizeColumn, WhyColumn, ColumnCount };
    // Raw values for sorting and for other views.
    enum Role { BytesRole = Qt::UserRole + 1, DeviceNameRole, ProblemRole };

    explicit DeviceMapModel(QObject* parent = nullptr);

    void setPlan(Plan plan);
    void clear();
    // Problems with entries of an imported map, by key; shown in the Why
    // column in red. Cleared by setPlan.
    void setProblems(const QHash<QString, QString>& problems);
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
    QHash<QString, QString> m_problems;
};

} // namespace stowage
