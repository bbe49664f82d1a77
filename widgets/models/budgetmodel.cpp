#include "budgetmodel.h"

#include "display.h"

#include <algorithm>

namespace stowage {

bool BudgetDevice::operator==(const BudgetDevice& o) const
{
    return device == o.device && hardware == o.hardware && preset == o.preset && simulated == o.simulated &&
           capacity == o.capacity && free == o.free && budget == o.budget && used == o.used &&
           reserved == o.reserved && kvReserved == o.kvReserved && excluded == o.excluded && fillRank == o.fillRank;
}

BudgetModel::BudgetModel(QObject* parent) : QAbstractTableModel(parent) {}

void BudgetModel::setMachine(const QVector<BudgetDevice>& gpus, const BudgetDevice& cpu, const BudgetDevice& disk)
{
    beginResetModel();
    m_rows = gpus;
    for (int i = 0; i < m_rows.size(); ++i)
        m_rows[i].device = Device::gpu(i);
    m_rows.push_back(cpu);
    m_rows.back().device = Device::cpu();
    m_rows.push_back(disk);
    m_rows.back().device = Device::disk();
    endResetModel();
    emit budgetsChanged();
}

int BudgetModel::gpuCount() const
{
    return static_cast<int>(std::count_if(m_rows.begin(), m_rows.end(),
                                          [](const BudgetDevice& d) { return d.device.kind == Device::Gpu; }));
}

int BudgetModel::simulatedGpuCount() const
{
    return static_cast<int>(std::count_if(m_rows.begin(), m_rows.end(), [](const BudgetDevice& d) {
        return d.device.kind == Device::Gpu && d.simulated;
    }));
}

int BudgetModel::addSimulatedGpu(const QString& hardware, const QString& preset, quint64 capacity)
{
    const int row = gpuCount();
    BudgetDevice d;
    d.device = Device::gpu(row);
    d.hardware = hardware;
    d.preset = preset;
    d.simulated = true;
    d.capacity = capacity;
    d.budget = capacity;
    beginInsertRows({}, row, row);
    m_rows.insert(row, d);
    endInsertRows();
    emit budgetsChanged();
    return row;
}

bool BudgetModel::removeSimulatedGpu(int row)
{
    if (row < 0 || row >= m_rows.size() || m_rows[row].device.kind != Device::Gpu || !m_rows[row].simulated)
        return false;
    beginRemoveRows({}, row, row);
    m_rows.remove(row);
    endRemoveRows();
    renumberGpus(row);
    emit budgetsChanged();
    return true;
}

void BudgetModel::renumberGpus(int fromRow)
{
    int last = -1;
    for (int r = fromRow; r < m_rows.size() && m_rows[r].device.kind == Device::Gpu; ++r) {
        m_rows[r].device = Device::gpu(r);
        last = r;
    }
    if (last >= fromRow)
        emit dataChanged(index(fromRow, 0), index(last, ColumnCount - 1));
}

void BudgetModel::setHardware(int row, const QString& hardware, quint64 capacity)
{
    if (row < 0 || row >= m_rows.size() || (m_rows[row].hardware == hardware && m_rows[row].capacity == capacity))
        return;
    m_rows[row].hardware = hardware;
    m_rows[row].capacity = capacity;
    emit dataChanged(index(row, HardwareColumn), index(row, CapacityColumn));
}

bool BudgetModel::setBudget(int row, quint64 bytes)
{
    if (row < 0 || row >= m_rows.size() || m_rows[row].budget == bytes)
        return false;
    m_rows[row].budget = bytes;
    // The budget cell, and the scale that may grow with it.
    emit dataChanged(index(row, BudgetColumn), index(row, BudgetColumn),
                     {Qt::DisplayRole, Qt::EditRole, BudgetRole, ScaleRole, OverBudgetRole, ProblemRole});
    emit budgetsChanged();
    return true;
}

QString BudgetModel::setBudgetText(int row, const QString& text)
{
    if (row < 0 || row >= m_rows.size())
        return tr("no such device");
    try {
        setBudget(row, parseSize(text.trimmed().toStdString(), deviceLabel(m_rows[row].device).toStdString()));
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

void BudgetModel::setPlanTotals(const Plan& plan, const QHash<int, quint64>& extraKvPerDevice)
{
    for (int r = 0; r < m_rows.size(); ++r) {
        BudgetDevice& d = m_rows[r];
        quint64 used = 0, reserved = 0, planKv = 0;
        for (const DeviceTotal& t : plan.devices)
            if (t.device == d.device) {
                used = t.used;
                reserved = t.reserved;
                planKv = t.reservedKv;
            }
        const quint64 kv = std::min(reserved, planKv + extraKvPerDevice.value(deviceCode(d.device)));
        if (used == d.used && reserved == d.reserved && kv == d.kvReserved)
            continue;
        d.used = used;
        d.reserved = reserved;
        d.kvReserved = kv;
        emit dataChanged(index(r, UsedColumn), index(r, ReservedColumn));
    }
}

int BudgetModel::rowOf(const Device& dev) const
{
    for (int r = 0; r < m_rows.size(); ++r)
        if (m_rows[r].device == dev)
            return r;
    return -1;
}

Budgets BudgetModel::budgets() const
{
    Budgets b;
    for (const BudgetDevice& d : m_rows)
        if (d.device.kind != Device::Disk && !d.excluded)
            b.push_back({d.device, double(d.budget)});
    return b;
}

bool BudgetModel::setExcluded(int row, bool excluded)
{
    if (row < 0 || row >= m_rows.size() || m_rows[row].device.kind != Device::Gpu || m_rows[row].excluded == excluded)
        return false;
    m_rows[row].excluded = excluded;
    emit dataChanged(index(row, 0), index(row, ColumnCount - 1), {ExcludedRole, ProblemRole});
    emit budgetsChanged();
    return true;
}

bool BudgetModel::fillFirst(int row) { return rankGpu(row, -1); }
bool BudgetModel::fillLast(int row) { return rankGpu(row, +1); }

// A GPU's fill rank below (side -1) or above (+1) every other's.
bool BudgetModel::rankGpu(int row, int side)
{
    if (row < 0 || row >= m_rows.size() || m_rows[row].device.kind != Device::Gpu)
        return false;
    int edge = 0;
    for (const BudgetDevice& d : m_rows)
        edge = side < 0 ? std::min(edge, d.fillRank) : std::max(edge, d.fillRank);
    m_rows[row].fillRank = edge + side;
    emit budgetsChanged();
    return true;
}

std::vector<int> BudgetModel::gpuOrder() const
{
    std::vector<std::pair<int, int>> ranked; // (rank, index)
    for (const BudgetDevice& d : m_rows)
        if (d.device.kind == Device::Gpu && !d.excluded)
            ranked.push_back({d.fillRank, d.device.index});
    std::sort(ranked.begin(), ranked.end());
    std::vector<int> out;
    for (const auto& [rank, index] : ranked)
        out.push_back(index);
    return out;
}

QString BudgetModel::problem(int row) const
{
    if (row < 0 || row >= m_rows.size())
        return {};
    const BudgetDevice& d = m_rows[row];
    if (d.device.kind == Device::Disk) {
        if (d.capacity > 0 && d.used > d.budget)
            return tr("The offload folder needs %1, more than the disk budget of %2.")
                .arg(formatBytes(d.used), formatBytes(d.budget));
        if (d.capacity > 0 && d.budget > d.capacity)
            return tr("The budget is more than the %1 free on this disk.").arg(formatBytes(d.capacity));
        return {};
    }
    if (d.capacity == 0 || d.budget <= d.capacity)
        return {};
    const QString what = d.device.kind == Device::Cpu ? tr("this machine's RAM")
                         : d.simulated              ? tr("this simulated GPU's memory")
                                                    : tr("this GPU's memory");
    return tr("The budget (%1) is more than %2 (%3): weights planned past it cannot be loaded there.")
        .arg(formatBytes(d.budget), what, formatBytes(d.capacity));
}

quint64 BudgetModel::scaleOf(const BudgetDevice& d) const
{
    quint64 s = std::max({d.capacity, d.budget, d.used + d.reserved});
    return s ? s : 1ull << 30;
}

int BudgetModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : m_rows.size(); }

int BudgetModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

Qt::ItemFlags BudgetModel::flags(const QModelIndex& index) const
{
    Qt::ItemFlags f = QAbstractTableModel::flags(index);
    if (index.isValid() && index.column() == BudgetColumn)
        f |= Qt::ItemIsEditable;
    return f;
}

QVariant BudgetModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const BudgetDevice& d = m_rows[index.row()];
    const bool overBudget = d.device.kind == Device::Disk && d.capacity > 0 && d.used > d.budget;
    switch (role) {
    case DeviceNameRole: return QString::fromStdString(d.device.name());
    case BudgetRole: return QVariant::fromValue<quint64>(d.budget);
    case CapacityRole: return QVariant::fromValue<quint64>(d.capacity);
    case FreeRole: return QVariant::fromValue<quint64>(d.free);
    case UsedRole: return QVariant::fromValue<quint64>(d.used);
    case ReservedRole: return QVariant::fromValue<quint64>(d.reserved);
    case KvReservedRole: return QVariant::fromValue<quint64>(d.kvReserved);
    case SimulatedRole: return d.simulated;
    case ColorRole: return deviceColor(d.device);
    case ScaleRole: return QVariant::fromValue<quint64>(scaleOf(d));
    case OverBudgetRole: return overBudget;
    case ProblemRole: return problem(index.row());
    case ExcludedRole: return d.excluded;
    case Qt::DecorationRole:
        return index.column() == DeviceColumn ? QVariant(deviceColor(d.device)) : QVariant();
    case Qt::EditRole:
        return index.column() == BudgetColumn ? QVariant(sizeString(d.budget)) : QVariant();
    case Qt::TextAlignmentRole:
        return index.column() >= CapacityColumn ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
    case Qt::DisplayRole: break;
    default: return {};
    }
    switch (index.column()) {
    case DeviceColumn: return deviceLabel(d.device);
    case HardwareColumn: return d.simulated ? tr("%1 (simulated)").arg(d.hardware) : d.hardware;
    case CapacityColumn: return d.capacity ? formatBytes(d.capacity) : QString();
    case BudgetColumn: return formatBytes(d.budget);
    case UsedColumn: return formatBytes(d.used);
    case ReservedColumn: return formatBytes(d.reserved);
    }
    return {};
}

bool BudgetModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (role != Qt::EditRole || !checkIndex(index, CheckIndexOption::IndexIsValid) || index.column() != BudgetColumn)
        return false;
    if (value.typeId() == QMetaType::QString)
        return setBudgetText(index.row(), value.toString()).isEmpty();
    bool ok = false;
    const qulonglong bytes = value.toULongLong(&ok);
    if (!ok)
        return false;
    setBudget(index.row(), bytes);
    return true;
}

QVariant BudgetModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case DeviceColumn: return tr("Device");
    case HardwareColumn: return tr("Hardware");
    case CapacityColumn: return tr("Memory");
    case BudgetColumn: return tr("Budget");
    case UsedColumn: return tr("Weights");
    case ReservedColumn: return tr("Kept free");
    }
    return {};
}

} // namespace stowage
