#pragma once
// Paints one timeline cell of the TraceModel (hotspot's TimeLineDelegate
// idea): the unit's transfers (fetch, prefetch, map, wait) in the upper lane
// and its compute in the lower lane, coloured by device, the critical path
// outlined, at most one span per pixel column and each at least 1 px wide.
// Tooltips hit-test by binary search. The time<->x mapping is a value type,
// TimelineGeometry, tested without a widget.
#include "rundata.h"

#include <QRectF>
#include <QStyledItemDelegate>

namespace stowage {

struct TimelineGeometry {
    double t0 = 0, t1 = 1; // time across the cell, seconds
    QRectF rect;           // the drawing area inside the cell
    static TimelineGeometry forCell(const QRect& cell, double t0, double t1, int padding = 3);
    double xOf(double t) const;
    double timeAt(double x) const;
    // The upper lane for transfers, the lower for compute; never under 1 px wide.
    QRectF spanRect(const TraceSpan& span) const;
    bool operator==(const TimelineGeometry& o) const { return t0 == o.t0 && t1 == o.t1 && rect == o.rect; }
};

// Indices of `spans` (sorted by t0) drawn under x, within `slack` pixels.
QVector<int> spansAt(const TimelineGeometry& g, const QVector<TraceSpan>& spans, double x, double slack = 1.5);
// "fetch transformer.h.1.mlp.c_fc.weight: 2.25 MiB to GPU 0 in 0.53 ms (12.3410–12.3415 s)".
QString describeSpan(const TraceSpan& span);
QColor spanColor(const TraceSpan& span);

class TimelineDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    explicit TimelineDelegate(QObject* parent = nullptr);
    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    bool helpEvent(QHelpEvent* event, QAbstractItemView* view, const QStyleOptionViewItem& option,
                   const QModelIndex& index) override;
    // The tooltip text at x inside a cell of `index`, for tests.
    static QString toolTipAt(const QModelIndex& index, const QRect& cell, double x);
};

} // namespace stowage
