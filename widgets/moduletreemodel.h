#pragma once
// Item model over a ModuleTree: name, class, size, share of the model, parameters.
#include "stowage/moduletree.h"

#include <QAbstractItemModel>

#include <memory>

namespace stowage {

class ModuleTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { NameColumn, ClassColumn, SizeColumn, ShareColumn, ParamsColumn, ColumnCount };
    // Raw numbers for sorting and for other views.
    enum Role { BytesRole = Qt::UserRole + 1, ModuleIndexRole };

    explicit ModuleTreeModel(QObject* parent = nullptr);

    void setTree(std::shared_ptr<const ModuleTree> tree);
    const ModuleTree* tree() const { return m_tree.get(); }

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
};

} // namespace stowage
