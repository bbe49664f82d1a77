#include "moduletreemodel.h"

#include "display.h"

#include <QBrush>
#include <QStringList>
#include <QLocale>

#include <algorithm>
#include <utility>

namespace stowage {

ModuleTreeModel::ModuleTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

QString ModuleTreeModel::formatBytes(quint64 bytes) { return stowage::formatBytes(bytes); }

namespace {
// internalId: a module's index; a fused parameter's row and an expert's row carry a kind in the top bits.
static_assert(sizeof(quintptr) >= 8, "row ids need 64 bits");
constexpr quintptr kFusedTag = quintptr(1) << 62, kExpertTag = quintptr(2) << 62, kTagMask = quintptr(3) << 62;
constexpr int kExpertBits = 24;
quintptr fusedId(int fused) { return kFusedTag | quintptr(fused); }
quintptr expertId(int fused, int expert) { return kExpertTag | (quintptr(fused) << kExpertBits) | quintptr(expert); }

uint64_t numelOf(const std::vector<int64_t>& shape)
{
    uint64_t n = 1;
    for (int64_t d : shape)
        n *= static_cast<uint64_t>(d);
    return n;
}
} // namespace

void ModuleTreeModel::buildFused()
{
    m_fused.clear();
    m_fusedOf.assign(m_tree ? m_tree->modules().size() : 0, {});
    if (!m_tree)
        return;
    const auto& mods = m_tree->modules();
    for (size_t mi = 0; mi < mods.size(); ++mi) {
        for (int pi : mods[mi].params) {
            const Param& p = m_tree->params()[static_cast<size_t>(pi)];
            if (p.parts.empty())
                continue;
            Fused f;
            f.param = pi;
            f.module = static_cast<int>(mi);
            f.row = static_cast<int>(mods[mi].children.size() + m_fusedOf[mi].size());
            for (size_t k = 0; k < p.parts.size(); ++k) {
                const StoredPart& part = p.parts[k];
                if (f.experts.empty() || f.experts.back().index != part.index)
                    f.experts.push_back({part.index, {}, 0});
                f.experts.back().parts.push_back(static_cast<int>(k));
                f.experts.back().numel += numelOf(part.shape);
            }
            m_fusedOf[mi].push_back(static_cast<int>(m_fused.size()));
            m_fused.push_back(std::move(f));
        }
    }
}

int ModuleTreeModel::extraRows(int module) const
{
    return module >= 0 && module < static_cast<int>(m_fusedOf.size())
               ? static_cast<int>(m_fusedOf[static_cast<size_t>(module)].size())
               : 0;
}

void ModuleTreeModel::setTree(std::shared_ptr<const ModuleTree> tree)
{
    if (m_tree && tree && tree != m_tree && tree->modules().size() == m_tree->modules().size() &&
        tree->root().name == m_tree->root().name && tree->modules().back().name == m_tree->modules().back().name) {
        // The same model re-sized: the same rows, fused parameters included.
        const auto before = std::exchange(m_fused, {});
        auto keep = std::exchange(m_tree, tree);
        buildFused();
        bool same = before.size() == m_fused.size();
        for (size_t i = 0; same && i < before.size(); ++i)
            same = before[i].param == m_fused[i].param && before[i].experts.size() == m_fused[i].experts.size();
        if (same) {
            emit dataChanged(indexOfModule(0, SizeColumn), indexOfModule(0, ParamsColumn));
            for (size_t i = 0; i < m_tree->modules().size(); ++i)
                if (const int rows = rowCount(indexOfModule(static_cast<int>(i), 0)); rows > 0) {
                    const QModelIndex parent = indexOfModule(static_cast<int>(i), 0);
                    emit dataChanged(index(0, SizeColumn, parent), index(rows - 1, ParamsColumn, parent));
                }
            for (size_t f = 0; f < m_fused.size(); ++f) {
                const QModelIndex parent = createIndex(m_fused[f].row, 0, fusedId(static_cast<int>(f)));
                emit dataChanged(index(0, SizeColumn, parent),
                                 index(static_cast<int>(m_fused[f].experts.size()) - 1, ParamsColumn, parent));
            }
            return;
        }
        m_tree = std::move(keep);
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
    buildFused();
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
            // Its fused parameters and their experts sit where it sits.
            for (int f : m_fusedOf[i]) {
                const QModelIndex row = createIndex(m_fused[static_cast<size_t>(f)].row, DeviceColumn, fusedId(f));
                emit dataChanged(row, row, roles);
                const QModelIndex parent = createIndex(m_fused[static_cast<size_t>(f)].row, 0, fusedId(f));
                const int n = static_cast<int>(m_fused[static_cast<size_t>(f)].experts.size());
                emit dataChanged(index(0, DeviceColumn, parent), index(n - 1, DeviceColumn, parent), roles);
            }
        }
}

// The root module is the single top-level row; internalId holds the module
// index, or a tagged fused parameter or expert (see kFusedTag).
ModuleTreeModel::RowRef ModuleTreeModel::refOf(const QModelIndex& index) const
{
    RowRef r;
    if (!index.isValid())
        return r;
    const quintptr id = index.internalId();
    switch (id & kTagMask) {
    case kFusedTag:
        r.kind = Kind::Fused;
        r.fused = static_cast<int>(id & ~kTagMask);
        break;
    case kExpertTag:
        r.kind = Kind::Expert;
        r.fused = static_cast<int>((id & ~kTagMask) >> kExpertBits);
        r.expert = static_cast<int>(id & ((quintptr(1) << kExpertBits) - 1));
        break;
    default: r.module = static_cast<int>(id); return r;
    }
    r.module = m_fused[static_cast<size_t>(r.fused)].module;
    return r;
}

int ModuleTreeModel::moduleOf(const QModelIndex& index) const { return refOf(index).module; }

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
    const RowRef p = refOf(parent);
    if (p.kind == Kind::Expert)
        return {};
    if (p.kind == Kind::Fused)
        return row < static_cast<int>(m_fused[static_cast<size_t>(p.fused)].experts.size())
                   ? createIndex(row, column, expertId(p.fused, row))
                   : QModelIndex();
    const auto& children = m_tree->modules()[static_cast<size_t>(p.module)].children;
    if (row < static_cast<int>(children.size()))
        return createIndex(row, column, quintptr(children[static_cast<size_t>(row)]));
    const size_t k = static_cast<size_t>(row) - children.size();
    const auto& fused = m_fusedOf[static_cast<size_t>(p.module)];
    return k < fused.size() ? createIndex(row, column, fusedId(fused[k])) : QModelIndex();
}

QModelIndex ModuleTreeModel::parent(const QModelIndex& child) const
{
    if (!m_tree || !child.isValid())
        return {};
    const RowRef r = refOf(child);
    if (r.kind == Kind::Fused)
        return indexOfModule(r.module, 0);
    if (r.kind == Kind::Expert)
        return createIndex(m_fused[static_cast<size_t>(r.fused)].row, 0, fusedId(r.fused));
    const int p = m_tree->modules()[static_cast<size_t>(r.module)].parent;
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
    const RowRef r = refOf(parent);
    if (r.kind == Kind::Expert)
        return 0;
    if (r.kind == Kind::Fused)
        return static_cast<int>(m_fused[static_cast<size_t>(r.fused)].experts.size());
    return static_cast<int>(m_tree->modules()[static_cast<size_t>(r.module)].children.size()) + extraRows(r.module);
}

int ModuleTreeModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() && parent.column() != 0 ? 0 : ColumnCount;
}

QVariant ModuleTreeModel::data(const QModelIndex& index, int role) const
{
    if (!m_tree || !checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const RowRef ref = refOf(index);
    if (ref.kind != Kind::Module)
        return fusedData(ref, index.column(), role);
    const int mi = ref.module;
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

// The short form of a stored name under its expert ("experts.3.w1.weight" ->
// "w1.weight"); the row says which expert, the tooltip the full name.
static QString storedTail(const std::string& name)
{
    const size_t at = name.rfind("experts.");
    if (at == std::string::npos)
        return QString::fromStdString(name);
    const size_t dot = name.find('.', at + 8);
    return QString::fromStdString(dot == std::string::npos ? name.substr(at) : name.substr(dot + 1));
}

static QString shapeText(const std::vector<int64_t>& shape)
{
    QStringList dims;
    for (int64_t d : shape)
        dims << QString::number(d);
    return QStringLiteral("[%1]").arg(dims.join(QStringLiteral(", ")));
}

QVariant ModuleTreeModel::fusedData(const RowRef& r, int column, int role) const
{
    const Fused& f = m_fused[static_cast<size_t>(r.fused)];
    const Param& p = m_tree->params()[static_cast<size_t>(f.param)];
    const Expert* e = r.kind == Kind::Expert ? &f.experts[static_cast<size_t>(r.expert)] : nullptr;
    const uint64_t numel = e ? e->numel : p.numel();
    const uint64_t all = p.numel();
    // Parts of one parameter share its dtype: bytes split as elements do.
    const quint64 bytes = all ? quint64(m_tree->paramBytes(p) / all * numel) : 0;
    const int code = m_devices.code[static_cast<size_t>(r.module)];
    const quint64 total = m_tree->root().bytes;
    const QString fullName = QString::fromStdString(p.name);
    switch (role) {
    case BytesRole: return QVariant::fromValue<quint64>(bytes);
    case ModuleIndexRole: return r.module;
    case ModuleNameRole: return fullName;
    case DeviceCodeRole: return code;
    case Qt::TextAlignmentRole:
        if (column >= SizeColumn)
            return QVariant(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case Qt::DecorationRole:
        if (column == DeviceColumn && code >= 0)
            return deviceColor(deviceFromCode(code));
        return {};
    case Qt::ToolTipRole: {
        if (column == DeviceColumn && code == MixedCode)
            return tr("Split: its parts are on different devices");
        QStringList lines;
        if (!e) {
            lines << tr("%1 %2: transformers 5.6 builds one parameter and fills it on load from %3 stored "
                        "tensors:")
                         .arg(fullName, shapeText(p.shape))
                         .arg(p.parts.size());
            const size_t shown = std::min<size_t>(p.parts.size(), 6);
            for (size_t k = 0; k < shown; ++k)
                lines << QStringLiteral("  ") + QString::fromStdString(p.parts[k].name);
            if (shown < p.parts.size())
                lines << tr("  … and %1 more").arg(p.parts.size() - shown);
        } else {
            lines << tr("Expert %1 of %2: in the checkpoint as").arg(e->index).arg(fullName);
            for (int k : e->parts) {
                const StoredPart& part = p.parts[static_cast<size_t>(k)];
                lines << QStringLiteral("  %1 %2%3")
                             .arg(QString::fromStdString(part.name), shapeText(part.shape),
                                  part.tensor < 0 ? tr(" (not in the checkpoint)") : QString());
            }
        }
        return lines.join(QLatin1Char('\n'));
    }
    case Qt::DisplayRole: break;
    default: return {};
    }
    switch (column) {
    case NameColumn:
        return e ? tr("expert %1").arg(e->index) : QString::fromStdString(p.name.substr(p.name.rfind('.') + 1));
    case DeviceColumn:
        if (code == MixedCode)
            return tr("split");
        return code >= 0 ? deviceLabel(deviceFromCode(code)) : QString();
    case ClassColumn: {
        if (!e)
            return tr("fused from %1 experts").arg(f.experts.size());
        QStringList names;
        for (int k : e->parts)
            names << storedTail(p.parts[static_cast<size_t>(k)].name);
        return tr("stored as %1").arg(names.join(QStringLiteral(" + ")));
    }
    case SizeColumn: return formatBytes(bytes);
    case ShareColumn:
        return total ? QStringLiteral("%1 %").arg(100.0 * double(bytes) / double(total), 0, 'f', 2) : QString();
    case ParamsColumn: return QLocale::system().toString(static_cast<qulonglong>(numel));
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
