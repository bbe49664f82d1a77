#include "moduletreemodel.h"

#include <QLocale>

namespace stowage {

ModuleTreeModel::ModuleTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void ModuleTreeModel::setTree(std::shared_ptr<const ModuleTree> tree)
{
    beginResetModel();
    m_tree = std::move(tree);
    endResetModel();
}

// The root module is the single top-level row; internalId holds the module index.
int ModuleTreeModel::moduleOf(const QModelIndex& index) const
{
    return index.isValid() ? static_cast<int>(index.internalId()) : -1;
}

QModelIndex ModuleTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!m_tree || row < 0 || column < 0 || column >= ColumnCount)
        return {};
    if (!parent.isValid())
        return row == 0 ? createIndex(row, column, quintptr(0)) : QModelIndex();
    const auto& children = m_tree->modules()[static_cast<size_t>(moduleOf(parent))].children;
    if (row >= static_cast<int>(children.size()))
        return {};
    return createIndex(row, column, quintptr(children[static_cast<size_t>(row)]));
}

QModelIndex ModuleTreeModel::parent(const QModelIndex& child) const
{
    if (!m_tree || !child.isValid())
        return {};
    int p = m_tree->modules()[static_cast<size_t>(moduleOf(child))].parent;
    if (p < 0)
        return {};
    int gp = m_tree->modules()[static_cast<size_t>(p)].parent;
    int row = 0;
    if (gp >= 0) {
        const auto& siblings = m_tree->modules()[static_cast<size_t>(gp)].children;
        row = static_cast<int>(std::find(siblings.begin(), siblings.end(), p) - siblings.begin());
    }
    return createIndex(row, 0, quintptr(p));
}

int ModuleTreeModel::rowCount(const QModelIndex& parent) const
{
    if (!m_tree)
        return 0;
    if (!parent.isValid())
        return 1;
    if (parent.column() != 0)
        return 0;
    return static_cast<int>(m_tree->modules()[static_cast<size_t>(moduleOf(parent))].children.size());
}

int ModuleTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QString ModuleTreeModel::formatBytes(quint64 bytes)
{
    return QLocale::system().formattedDataSize(static_cast<qint64>(bytes), 2, QLocale::DataSizeIecFormat);
}

QVariant ModuleTreeModel::data(const QModelIndex& index, int role) const
{
    if (!m_tree || !index.isValid())
        return {};
    const Module& m = m_tree->modules()[static_cast<size_t>(moduleOf(index))];
    const quint64 total = m_tree->root().bytes;
    if (role == BytesRole)
        return QVariant::fromValue<quint64>(m.bytes);
    if (role == ModuleIndexRole)
        return moduleOf(index);
    if (role == Qt::TextAlignmentRole && index.column() >= SizeColumn)
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole)
        return QString::fromStdString(m.name.empty() ? "(whole model)" : m.name);
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case NameColumn:
        return m.name.empty() ? QStringLiteral("(model)") : QString::fromStdString(m.name.substr(m.name.rfind('.') + 1));
    case ClassColumn:
        return QString::fromStdString(m.className);
    case SizeColumn:
        return formatBytes(m.bytes);
    case ShareColumn:
        return total ? QStringLiteral("%1 %").arg(100.0 * double(m.bytes) / double(total), 0, 'f', 2) : QString();
    case ParamsColumn:
        return QLocale::system().toString(static_cast<qulonglong>(m.paramCount));
    }
    return {};
}

QVariant ModuleTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameColumn: return tr("Module");
    case ClassColumn: return tr("Class");
    case SizeColumn: return tr("Size");
    case ShareColumn: return tr("Share");
    case ParamsColumn: return tr("Parameters");
    }
    return {};
}

} // namespace stowage
