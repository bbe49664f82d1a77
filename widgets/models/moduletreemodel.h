#pragma once
// Item model over a ModuleTree: name, device, class, size, share of the
// model, parameters. The device column carries the same colours as the
// budget bars and the placement map; a re-plan changes only the cells of
// modules that moved. A parameter transformers 5.6 fuses from several stored
// tensors (MoE experts, Param::parts) gets a row of its own after its
// module's children, named as 5.6 names it, with one row per expert under it
// that names the checkpoint's tensors and their bytes.
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
    // A fused parameter's rows: one per expert (StoredPart::index), in order.
    struct Expert {
        int64_t index = 0;
        std::vector<int> parts; // into Param::parts
        uint64_t numel = 0;
    };
    struct Fused {
        int param = -1;
        int module = -1;
        int row = 0; // under its module, after the module's children
        std::vector<Expert> experts;
    };
    enum class Kind { Module, Fused, Expert };
    struct RowRef {
        Kind kind = Kind::Module;
        int module = -1; // the module, or the fused parameter's module
        int fused = -1;  // into m_fused
        int expert = -1; // into Fused::experts
    };
    RowRef refOf(const QModelIndex& index) const;
    int moduleOf(const QModelIndex& index) const;
    int extraRows(int module) const;
    QVariant fusedData(const RowRef& r, int column, int role) const;
    void buildFused();
    std::shared_ptr<const ModuleTree> m_tree;
    std::vector<int> m_row; // each module's row under its parent
    std::vector<Fused> m_fused;
    std::vector<std::vector<int>> m_fusedOf; // per module: its fused parameters, into m_fused
    ModuleDevices m_devices;
};

} // namespace stowage
