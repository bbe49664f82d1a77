#include "moduletreemodel.h"

#include "display.h"

#include <QBrush>
#include <QLocale>

namespace stowage {

ModuleTreeModel::ModuleTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

QString ModuleTreeModel::formatBytes(quint64 bytes) { return stowage::formatBytes(bytes); }

void ModuleTreeModel::setTree(std::shared_ptr<const ModuleTree> tree)
{
    if (m_tree && tree && tree != m_tree && tree->modules().size() == m_tree->modules().size() &&
        tree->root().name == m_tree->root().name && tree->modules().back().name == m_tree->modules().back().name) {
        m_tree = std::move(tree);
        emit dataChanged(indexOfModule(0, SizeColumn), indexOfModule(0, ParamsColumn));
        for (size_t i = 0; i < m_tree->modules().size(); ++i)
            if (const Module& m = m_tree->modules()[i]; !m.children.empty()) {
                const QModelIndex parent = indexOfModule(static_cast<int>(i), 0);
                emit dataChanged(index(0, SizeColumn, parent),
                                 index(static_cast<int>(m.children.size()) - 1, ParamsColumn, parent));
            }
        return;
    }
    beginResetModel();
    m_tree = std::move(tree);
    m_row.clear();
    m_devices = {};
    if (m_tree) {
        m_row.assign(m_tree->modules().size(), 0);
        for (const Module& m : m_tree->modules())
            for (size_t r = 0; r < m.children.size(); ++r)
                m_row[static_cast<size_t>(m.children[r])] = static_cast<int>(r);
        m_devices.code.assign(m_tree->modules().size(), NoDeviceCode);
        m_devices.entry.assign(m_tree->modules().size(), -1);
    }
    endResetModel();
}

void ModuleTreeModel::setDeviceMap(const DeviceMap& map)
{
    if (m_tree)
        setDevices(moduleDevices(*m_tree, map));
}

void ModuleTreeModel::setDevices(const ModuleDevices& devices)
{
    if (!m_tree || devices.code.size() != m_devices.code.size())
        return;
    const ModuleDevices old = std::exchange(m_devices, devices);
    static const QList<int> roles{Qt::DisplayRole, Qt::DecorationRole, Qt::ToolTipRole, DeviceCodeRole};
    for (size_t i = 0; i < old.code.size(); ++i)
        if (old.code[i] != m_devices.code[i]) {
            const QModelIndex idx = indexOfModule(static_cast<int>(i), DeviceColumn);
            emit dataChanged(idx, idx, roles);
        }
}

// The root module is the single top-level row; internalId holds the module index.
int ModuleTreeModel::moduleOf(const QModelIndex& index) const
{
    return index.isValid() ? static_cast<int>(index.internalId()) : -1;
}

QModelIndex ModuleTreeModel::indexOfModule(int module, int column) const
{
    if (!m_tree || module < 0 || module >= static_cast<int>(m_row.size()))
        return {};
    return createIndex(m_row[static_cast<size_t>(module)], column, quintptr(module));
}

QModelIndex ModuleTreeModel::indexOfModule(const QString& name, int column) const
{
    return m_tree ? indexOfModule(m_tree->find(name.toStdString()), column) : QModelIndex();
}

QModelIndex ModuleTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!m_tree || row < 0 || column < 0 || column >= ColumnCount)
        return {};
    if (!parent.isValid())
        return row == 0 ? createIndex(row, column, quintptr(0)) : QModelIndex();
    if (parent.column() != 0)
        return {};
    const auto& children = m_tree->modules()[static_cast<size_t>(moduleOf(parent))].children;
    if (row >= static_cast<int>(children.size()))
        return {};
    return createIndex(row, column, quintptr(children[static_cast<size_t>(row)]));
}

QModelIndex ModuleTreeModel::parent(const QModelIndex& child) const
{
    if (!m_tree || !child.isValid())
        return {};
    const int p = m_tree->modules()[static_cast<size_t>(moduleOf(child))].parent;
    return p < 0 ? QModelIndex() : indexOfModule(p, 0);
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

int ModuleTreeModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() && parent.column() != 0 ? 0 : ColumnCount;
}

QVariant ModuleTreeModel::data(const QModelIndex& index, int role) const
{
    if (!m_tree || !checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const int mi = moduleOf(index);
    const Module& m = m_tree->modules()[static_cast<size_t>(mi)];
    const int code = m_devices.code[static_cast<size_t>(mi)];
    const quint64 total = m_tree->root().bytes;
    switch (role) {
    case BytesRole: return QVariant::fromValue<quint64>(m.bytes);
    case ModuleIndexRole: return mi;
    case ModuleNameRole: return QString::fromStdString(m.name);
    case DeviceCodeRole: return code;
    case Qt::TextAlignmentRole:
        if (index.column() >= SizeColumn)
            return QVariant(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case Qt::DecorationRole:
        if (index.column() == DeviceColumn && code >= 0)
            return deviceColor(deviceFromCode(code));
        return {};
    case Qt::ToolTipRole:
        if (index.column() == DeviceColumn && code == MixedCode)
            return tr("Split: its parts are on different devices");
        return QString::fromStdString(m.name.empty() ? "(whole model)" : m.name);
    case Qt::DisplayRole: break;
    default: return {};
    }
    switch (index.column()) {
    case NameColumn:
        return m.name.empty() ? QStringLiteral("(model)") : QString::fromStdString(m.name.substr(m.name.rfind('.') + 1));
    case DeviceColumn:
        if (code == MixedCode)
            return tr("split");
        return code >= 0 ? deviceLabel(deviceFromCode(code)) : QString();
    case ClassColumn: return QString::fromStdString(m.className);
    case SizeColumn: return formatBytes(m.bytes);
    case ShareColumn:
        return total ? QStringLiteral("%1 %").arg(100.0 * double(m.bytes) / double(total), 0, 'f', 2) : QString();
    case ParamsColumn: return QLocale::system().toString(static_cast<qulonglong>(m.paramCount));
    }
    return {};
}

QVariant ModuleTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameColumn: return tr("Module");
    case DeviceColumn: return tr("Device");
    case ClassColumn: return tr("Class");
    case SizeColumn: return tr("Size");
    case ShareColumn: return tr("Share");
    case ParamsColumn: return tr("Parameters");
    }
    return {};
}

} // namespace stowage
