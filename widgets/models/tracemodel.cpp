#include "tracemodel.h"

#include "display.h"

#include <QPointF>

#include <algorithm>
#include <limits>

namespace stowage {

namespace {
constexpr int kMaxSteps = 256;

QString ms(double seconds) { return QStringLiteral("%1 ms").arg(seconds * 1000.0, 0, 'f', seconds < 0.01 ? 2 : 1); }
} // namespace

QVector<TimelineRow> buildTimeline(const QVector<RunUnit>& units, const QVector<TraceSpan>& stepSpans, StepSummary* summary)
{
    QHash<QString, int> rowOf;
    for (int i = 0; i < units.size(); ++i)
        rowOf.insert(units[i].name, i);
    QVector<TimelineRow> rows(units.size());
    StepSummary s;
    s.t0 = std::numeric_limits<double>::max();
    s.t1 = 0;
    for (const TraceSpan& span : stepSpans) {
        const int r = rowOf.value(span.unit, -1);
        if (r < 0)
            continue;
        rows[r].spans.push_back(span);
        s.step = span.step;
        s.t0 = std::min(s.t0, span.t0);
        s.t1 = std::max(s.t1, span.t1);
    }
    if (s.step < 0)
        s.t0 = 0;
    // Each unit's compute, in the order they ran.
    QVector<std::pair<double, int>> order; // compute t0 -> row
    for (int r = 0; r < rows.size(); ++r) {
        TimelineRow& row = rows[r];
        std::stable_sort(row.spans.begin(), row.spans.end(), [](const TraceSpan& a, const TraceSpan& b) { return a.t0 < b.t0; });
        row.critical.fill(false, row.spans.size());
        for (const TraceSpan& span : row.spans) {
            if (span.kind == TraceSpan::Compute) {
                row.computeSeconds += span.t1 - span.t0;
            } else if (span.kind == TraceSpan::Fetch || span.kind == TraceSpan::Prefetch || span.kind == TraceSpan::Map) {
                row.movedBytes += span.bytes;
            }
        }
        for (const TraceSpan& span : row.spans)
            if (span.kind == TraceSpan::Compute) {
                order.push_back({span.t0, r});
                break;
            }
    }
    std::sort(order.begin(), order.end());
    double gapStart = s.t0;
    for (const auto& [computeStart, r] : order) {
        TimelineRow& row = rows[r];
        double computeEnd = computeStart;
        for (int i = 0; i < row.spans.size(); ++i) {
            const TraceSpan& span = row.spans[i];
            if (span.kind == TraceSpan::Compute) {
                if (span.t0 == computeStart) {
                    row.critical[i] = true;
                    computeEnd = span.t1;
                }
                continue;
            }
            // What the unit waited for: its transfers inside the gap before its compute.
            if (span.kind != TraceSpan::Release &&
                std::min(span.t1, computeStart) - std::max(span.t0, gapStart) > 0)
                row.critical[i] = true;
        }
        row.waitSeconds = std::max(0.0, computeStart - gapStart);
        s.waitSeconds += row.waitSeconds;
        s.computeSeconds += row.computeSeconds;
        gapStart = std::max(gapStart, computeEnd);
    }
    if (summary)
        *summary = s;
    return rows;
}

TraceModel::TraceModel(QObject* parent) : QAbstractTableModel(parent) {}

void TraceModel::setUnits(const QVector<RunUnit>& units)
{
    beginResetModel();
    m_units = units;
    m_unitRow.clear();
    for (int i = 0; i < units.size(); ++i)
        m_unitRow.insert(units[i].name, i);
    m_steps.clear();
    m_follow = true;
    m_step = -1;
    m_rows = buildTimeline(m_units, {}, &m_summary);
    endResetModel();
    emit stepsChanged();
}

void TraceModel::clear()
{
    m_steps.clear();
    m_step = -1;
    m_follow = true;
    rebuild();
    emit stepsChanged();
}

void TraceModel::addSpans(const QVector<TraceSpan>& spans)
{
    if (spans.isEmpty())
        return;
    bool newStep = false;
    bool shownChanged = false;
    const int shown = shownStep();
    for (const TraceSpan& s : spans) {
        auto it = m_steps.find(s.step);
        if (it == m_steps.end()) {
            it = m_steps.insert(s.step, {});
            newStep = true;
        }
        it->push_back(s);
        shownChanged = shownChanged || s.step == shown;
    }
    while (m_steps.size() > kMaxSteps)
        m_steps.erase(m_steps.begin());
    if (m_follow ? (newStep || shownChanged) : shownChanged)
        rebuild();
    if (newStep)
        emit stepsChanged();
}

void TraceModel::showStep(int step)
{
    m_follow = step < 0;
    m_step = step;
    rebuild();
}

int TraceModel::shownStep() const
{
    if (m_follow || !m_steps.contains(m_step))
        return latestStep();
    return m_step;
}

void TraceModel::rebuild()
{
    const int step = shownStep();
    m_rows = buildTimeline(m_units, m_steps.value(step), &m_summary);
    if (!m_rows.isEmpty())
        emit dataChanged(index(0, 0), index(static_cast<int>(m_rows.size()) - 1, ColumnCount - 1));
    // The timeline's header sums the rows ("Step 3: 2.10 s (waited 1.80 s)"):
    // it changes with them, or it would show the first partial step's figures.
    emit headerDataChanged(Qt::Horizontal, TimelineColumn, TimelineColumn);
}

int TraceModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_units.size());
}

int TraceModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant TraceModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const RunUnit& u = m_units[index.row()];
    const TimelineRow& row = m_rows[index.row()];
    switch (role) {
    case TimelineRole: return QVariant::fromValue(row);
    case RangeRole: return QPointF(m_summary.t0, m_summary.t1);
    case DeviceNameRole: return u.device;
    case UnitNameRole: return u.name;
    case Qt::ToolTipRole:
        if (index.column() != TimelineColumn)
            return tr("%1 computes on %2; waited %3, computed %4, moved %5")
                .arg(u.name, u.device, ms(row.waitSeconds), ms(row.computeSeconds), formatBytes(row.movedBytes));
        return {};
    case Qt::TextAlignmentRole:
        if (index.column() == WaitColumn || index.column() == ComputeColumn)
            return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case Qt::DisplayRole:
        switch (index.column()) {
        case UnitColumn: return u.name;
        case DeviceColumn: {
            const auto d = Device::parse(u.device.toStdString());
            return d ? deviceLabel(*d) : u.device;
        }
        case WaitColumn: return row.spans.isEmpty() ? QString() : ms(row.waitSeconds);
        case ComputeColumn: return row.spans.isEmpty() ? QString() : ms(row.computeSeconds);
        default: return {};
        }
    case Qt::DecorationRole:
        if (index.column() == DeviceColumn)
            if (const auto d = Device::parse(u.device.toStdString()))
                return deviceColor(*d);
        return {};
    default: return {};
    }
}

QVariant TraceModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case UnitColumn: return tr("Execution unit");
    case DeviceColumn: return tr("Computes on");
    case WaitColumn: return tr("Waited");
    case ComputeColumn: return tr("Compute");
    case TimelineColumn:
        return m_summary.step < 0 ? tr("Timeline")
                                  : tr("Step %1: %2 (waited %3)")
                                        .arg(m_summary.step)
                                        .arg(ms(m_summary.t1 - m_summary.t0), ms(m_summary.waitSeconds));
    default: return {};
    }
}

} // namespace stowage
