#include "samplesmodel.h"

#include "display.h"

#include <QLocale>

#include <algorithm>
#include <cmath>

namespace stowage {

namespace {
constexpr int kMaxTokens = 4096;

QString defaultLabel(const QString& device)
{
    const auto d = Device::parse(device.toStdString());
    return d ? deviceLabel(*d) : device;
}
} // namespace

SamplesModel::SamplesModel(QObject* parent) : QAbstractTableModel(parent) {}

void SamplesModel::setCapacity(int rows)
{
    beginResetModel();
    m_capacity = std::max(16, rows);
    while (m_rows.size() > m_capacity)
        compact();
    endResetModel();
}

void SamplesModel::clear()
{
    beginResetModel();
    m_rows.clear();
    m_devices.clear();
    m_tokens.clear();
    m_stride = 1;
    m_seen = 0;
    m_hasPrev = false;
    m_diskPass = 0;
    endResetModel();
}

int SamplesModel::columnOfDevice(const QString& device) const
{
    const int i = static_cast<int>(m_devices.indexOf(device));
    return i < 0 ? -1 : FirstDeviceColumn + i;
}

void SamplesModel::setDeviceLabel(const QString& device, const QString& label)
{
    m_labels.insert(device, label);
    if (const int c = columnOfDevice(device); c >= 0)
        emit headerDataChanged(Qt::Horizontal, c, c);
}

void SamplesModel::setBudgets(const QVector<std::pair<QString, quint64>>& budgets) { m_budgets = budgets; }

quint64 SamplesModel::budgetOf(const QString& device) const
{
    for (const auto& [d, bytes] : m_budgets)
        if (d == device)
            return bytes;
    return 0;
}

void SamplesModel::addToken(double t)
{
    m_tokens.push_back(t);
    if (m_tokens.size() > kMaxTokens)
        m_tokens.remove(0, m_tokens.size() - kMaxTokens);
}

void SamplesModel::mergeInto(Row& into, const Row& from) const
{
    into.t = std::max(into.t, from.t);
    for (int i = 0; i < into.values.size() && i < from.values.size(); ++i)
        into.values[i] = std::max(into.values[i], from.values[i]);
    into.merged += from.merged;
}

void SamplesModel::compact()
{
    QVector<Row> out;
    out.reserve(m_rows.size() / 2 + 1);
    for (int i = 0; i < m_rows.size(); i += 2) {
        Row r = m_rows[i];
        if (i + 1 < m_rows.size())
            mergeInto(r, m_rows[i + 1]);
        out.push_back(std::move(r));
    }
    m_rows = std::move(out);
    m_stride *= 2;
}

void SamplesModel::addSample(const RunSample& s)
{
    ++m_seen;
    m_diskPass = s.diskPassBytes;
    // New devices become new columns (GPU 1 may first appear mid-load).
    for (const auto& [device, bytes] : s.resident) {
        if (m_devices.contains(device))
            continue;
        const int c = columnCount();
        beginInsertColumns({}, c, c);
        m_devices << device;
        for (Row& r : m_rows)
            r.values.push_back(0);
        endInsertColumns();
    }
    Row row;
    row.t = s.t;
    row.merged = 1;
    row.values.resize(columnCount() - 1);
    row.values[RssColumn - 1] = double(s.rssBytes);
    // Rates from the cumulative counters; a counter that went back is a new load.
    if (m_hasPrev && s.t > m_prev.t) {
        const double dt = s.t - m_prev.t;
        if (s.diskReadBytes >= m_prev.diskReadBytes)
            row.values[DiskRateColumn - 1] = double(s.diskReadBytes - m_prev.diskReadBytes) / dt;
        if (s.h2dBytes >= m_prev.h2dBytes)
            row.values[H2dRateColumn - 1] = double(s.h2dBytes - m_prev.h2dBytes) / dt;
    }
    m_prev = s;
    m_hasPrev = true;
    for (const auto& [device, bytes] : s.resident)
        row.values[columnOfDevice(device) - 1] = double(bytes);

    if (!m_rows.isEmpty() && m_rows.last().merged < m_stride) {
        mergeInto(m_rows.last(), row);
        const int r = static_cast<int>(m_rows.size()) - 1;
        emit dataChanged(index(r, 0), index(r, columnCount() - 1));
        return;
    }
    if (m_rows.size() >= m_capacity) {
        beginResetModel();
        compact();
        m_rows.push_back(std::move(row));
        endResetModel();
        return;
    }
    const int r = static_cast<int>(m_rows.size());
    beginInsertRows({}, r, r);
    m_rows.push_back(std::move(row));
    endInsertRows();
}

double SamplesModel::value(int row, int column) const
{
    if (row < 0 || row >= m_rows.size() || column < 0 || column >= columnCount())
        return 0;
    const Row& r = m_rows[row];
    return column == TimeColumn ? r.t : r.values.value(column - 1);
}

double SamplesModel::maxValue(int column) const
{
    double m = 0;
    for (int r = 0; r < m_rows.size(); ++r)
        m = std::max(m, value(r, column));
    return m;
}

QVector<QPointF> SamplesModel::points(int column, double t0, double t1, int buckets) const
{
    QVector<QPointF> out;
    if (column <= TimeColumn || column >= columnCount() || buckets <= 0 || !(t1 > t0))
        return out;
    auto first = std::lower_bound(m_rows.begin(), m_rows.end(), t0, [](const Row& r, double t) { return r.t < t; });
    const double scale = buckets / (t1 - t0);
    int bucket = -1;
    for (auto it = first; it != m_rows.end() && it->t <= t1; ++it) {
        const int b = std::min(buckets - 1, static_cast<int>(std::floor((it->t - t0) * scale)));
        const double v = it->values.value(column - 1);
        if (b != bucket || out.isEmpty()) {
            out.push_back(QPointF(it->t, v));
            bucket = b;
        } else {
            out.last().setX(it->t);
            out.last().setY(std::max(out.last().y(), v));
        }
    }
    return out;
}

QString SamplesModel::headroomAlarm(const RunSample& sample) const
{
    QString worst;
    double worstShare = 0.95; // below this there is room
    for (const auto& [device, bytes] : sample.resident) {
        const quint64 budget = budgetOf(device);
        if (budget == 0 || device == QLatin1String("disk"))
            continue;
        const double share = double(bytes) / double(budget);
        if (share < worstShare)
            continue;
        worstShare = share;
        const QString label = m_labels.value(device, defaultLabel(device));
        worst = bytes > budget
                    ? tr("%1 holds %2, past its %3 budget: the room kept for other programs is in use.")
                          .arg(label, formatBytes(bytes), formatBytes(budget))
                    : tr("%1 holds %2% of its budget (%3 of %4): a longer context may not fit.")
                          .arg(label)
                          .arg(int(std::floor(100 * share)))
                          .arg(formatBytes(bytes), formatBytes(budget));
    }
    return worst;
}

QString SamplesModel::seriesName(int column) const
{
    switch (column) {
    case TimeColumn: return tr("Time");
    case RssColumn: return tr("Worker process (resident set)");
    case DiskRateColumn: return tr("Disk read");
    case H2dRateColumn: return tr("Host to device");
    default: break;
    }
    const QString d = m_devices.value(column - FirstDeviceColumn);
    return m_labels.value(d, defaultLabel(d));
}

int SamplesModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int SamplesModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : FirstDeviceColumn + static_cast<int>(m_devices.size());
}

QVariant SamplesModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const double v = value(index.row(), index.column());
    if (role == ValueRole)
        return v;
    if (role == DeviceNameRole)
        return index.column() >= FirstDeviceColumn ? m_devices.value(index.column() - FirstDeviceColumn) : QString();
    if (role != Qt::DisplayRole)
        return {};
    if (index.column() == TimeColumn)
        return QStringLiteral("%1 s").arg(v, 0, 'f', 2);
    if (index.column() == DiskRateColumn || index.column() == H2dRateColumn)
        return tr("%1/s").arg(formatBytes(quint64(v)));
    return formatBytes(quint64(v));
}

QVariant SamplesModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= columnCount())
        return {};
    return seriesName(section);
}

} // namespace stowage
