#pragma once
// The execution trace as a timeline: one row per execution unit in forward
// order (from the worker's `loaded` event), for one step at a time — the
// latest by default, or any earlier one the user scrubs to. The spans
// column's TimelineRole carries the row's fetch / prefetch / map / wait /
// compute / release spans of that step and which of them lie on the
// critical path: the compute of every unit, and whatever the unit waited
// for between the previous unit's compute and its own. Steps are kept in a
// bounded history (the last 256).
#include "rundata.h"

#include <QAbstractTableModel>
#include <QHash>
#include <QMap>
#include <QVector>

namespace stowage {

struct TimelineRow {
    QVector<TraceSpan> spans; // sorted by t0
    QVector<bool> critical;   // per span
    double waitSeconds = 0;   // from the previous unit's compute end to this compute start
    double computeSeconds = 0;
    quint64 movedBytes = 0;   // fetched, prefetched or mapped
    bool operator==(const TimelineRow& o) const
    {
        return spans == o.spans && critical == o.critical && waitSeconds == o.waitSeconds &&
               computeSeconds == o.computeSeconds && movedBytes == o.movedBytes;
    }
};

// A step's extent and what its time went to.
struct StepSummary {
    int step = -1;
    double t0 = 0, t1 = 0;
    double computeSeconds = 0;
    double waitSeconds = 0; // on the critical path, not computing
    bool operator==(const StepSummary& o) const
    {
        return step == o.step && t0 == o.t0 && t1 == o.t1 && computeSeconds == o.computeSeconds &&
               waitSeconds == o.waitSeconds;
    }
};

// Pure: the rows of one step for `units`, spans of other units ignored.
QVector<TimelineRow> buildTimeline(const QVector<RunUnit>& units, const QVector<TraceSpan>& stepSpans,
                                   StepSummary* summary = nullptr);

class TraceModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { UnitColumn, DeviceColumn, WaitColumn, ComputeColumn, TimelineColumn, ColumnCount };
    enum Role {
        TimelineRole = Qt::UserRole + 1, // TimelineRow
        RangeRole,                       // QPointF(t0, t1) of the shown step
        DeviceNameRole,
        UnitNameRole,
    };

    explicit TraceModel(QObject* parent = nullptr);

    void setUnits(const QVector<RunUnit>& units);
    const QVector<RunUnit>& units() const { return m_units; }
    void clear(); // spans only; the units stay
    void addSpans(const QVector<TraceSpan>& spans);

    QVector<int> steps() const { return m_steps.keys().toVector(); }
    int latestStep() const { return m_steps.isEmpty() ? -1 : m_steps.lastKey(); }
    // -1 follows the latest step as new ones arrive.
    void showStep(int step);
    int shownStep() const;
    bool following() const { return m_follow; }
    StepSummary summary() const { return m_summary; }
    const TimelineRow& row(int r) const { return m_rows[r]; }
    int rowOfUnit(const QString& unit) const { return m_unitRow.value(unit, -1); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

signals:
    void stepsChanged();

private:
    void rebuild();

    QVector<RunUnit> m_units;
    QHash<QString, int> m_unitRow;
    QMap<int, QVector<TraceSpan>> m_steps;
    bool m_follow = true;
    int m_step = -1;
    QVector<TimelineRow> m_rows;
    StepSummary m_summary;
};

} // namespace stowage

Q_DECLARE_METATYPE(stowage::TimelineRow)
