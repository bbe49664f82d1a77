#pragma once
// Item model over a ModuleTree: name, device, class, size, share of the
// model, parameters. The device column carries the same colours as the
// budget bars and the placement map; a re-plan changes only the cells of
// modules that moved.
#include "stowage/moduledevices.h"
#include "stowage/moduletree.h"

#include <QAbstractItemModel>

#include <memory>

namespace stowage {

class ModuleTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { NameColumn, DeviceColumn, ClassColumn, SizeColumn, ShareColumn, ParamsColumn, ColumnCount };
    // Raw values for sorting and for other views.
    enum Role { BytesRole = Qt::UserRole + 1, ModuleIndexRole, ModuleNameRole, DeviceCodeRole };

    explicit ModuleTreeModel(QObject* parent = nullptr);

    // A tree with the same modules (the same model re-sized for another
    // dtype or reference) keeps the view's expansion and selection: only
    // the size cells change. Anything else resets the model.
    void setTree(std::shared_ptr<const ModuleTree> tree);
    const ModuleTree* tree() const { return m_tree.get(); }
    std::shared_ptr<const ModuleTree> sharedTree() const { return m_tree; }
    // Device of every module under `map`; emits dataChanged for changed rows only.
    void setDeviceMap(const DeviceMap& map);
    // Same, from codes computed elsewhere (moduleDevices() of the same tree).
    void setDevices(const ModuleDevices& devices);
    const ModuleDevices& devices() const { return m_devices; }

    // The index of module `module` (index into tree()->modules()).
    QModelIndex indexOfModule(int module, int column = NameColumn) const;
    QModelIndex indexOfModule(const QString& name, int column = NameColumn) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    static QString formatBytes(quint64 bytes);

private:
    int moduleOf(const QModelIndex& index) const;
    std::shared_ptr<const ModuleTree> m_tree;
    std::vector<int> m_row; // each module's row under its parent
    ModuleDevices m_devices;
};

} // namespace stowage
