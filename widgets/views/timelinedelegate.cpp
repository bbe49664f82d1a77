#include "timelinedelegate.h"

#include "themecolors.h"

#include "display.h"
#include "tracemodel.h"

#include <QAbstractItemView>
#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>

namespace stowage {

namespace {
QColor colorOfDevice(const QString& device)
{
    const auto d = Device::parse(device.toStdString());
    return d ? deviceColor(*d) : QColor(0x8c8c8c);
}
} // namespace

TimelineGeometry TimelineGeometry::forCell(const QRect& cell, double t0, double t1, int padding)
{
    TimelineGeometry g;
    g.t0 = t0;
    g.t1 = t1 > t0 ? t1 : t0 + 1e-6;
    g.rect = QRectF(cell).adjusted(padding, 2, -padding, -2);
    return g;
}

double TimelineGeometry::xOf(double t) const { return rect.left() + (t - t0) / (t1 - t0) * rect.width(); }

double TimelineGeometry::timeAt(double x) const { return t0 + (x - rect.left()) / rect.width() * (t1 - t0); }

QRectF TimelineGeometry::spanRect(const TraceSpan& span) const
{
    const double x0 = xOf(span.t0);
    const double x1 = std::max(x0 + 1.0, xOf(span.t1));
    const double half = rect.height() / 2;
    const double top = span.kind == TraceSpan::Compute ? rect.top() + half : rect.top();
    return QRectF(QPointF(x0, top + 0.5), QPointF(x1, top + half - 0.5));
}

QVector<int> spansAt(const TimelineGeometry& g, const QVector<TraceSpan>& spans, double x, double slack)
{
    QVector<int> out;
    const double hi = g.timeAt(x + slack);
    // Spans starting after `hi` cannot be under x; of the others, those ending left of x are not.
    const auto end = std::upper_bound(spans.begin(), spans.end(), hi, [](double t, const TraceSpan& s) { return t < s.t0; });
    for (auto it = spans.begin(); it != end; ++it) {
        const double right = std::max(g.xOf(it->t1), g.xOf(it->t0) + 1.0);
        if (right >= x - slack)
            out.push_back(static_cast<int>(it - spans.begin()));
    }
    return out;
}

QString describeSpan(const TraceSpan& s)
{
    const auto d = Device::parse(s.device.toStdString());
    const QString dev = d ? deviceLabel(*d) : s.device;
    QString what = TraceSpan::kindName(s.kind) + QLatin1Char(' ') + (s.tensor.isEmpty() ? s.unit : s.tensor);
    if (s.bytes)
        what += QObject::tr(": %1").arg(formatBytes(s.bytes));
    switch (s.kind) {
    case TraceSpan::Fetch:
    case TraceSpan::Prefetch: what += QObject::tr(" to %1").arg(dev); break;
    case TraceSpan::Map: what += QObject::tr(" read from disk for %1").arg(dev); break;
    default: what += QObject::tr(" on %1").arg(dev); break;
    }
    return QObject::tr("%1 in %2 ms (%3–%4 s)")
        .arg(what)
        .arg((s.t1 - s.t0) * 1000.0, 0, 'f', 3)
        .arg(s.t0, 0, 'f', 4)
        .arg(s.t1, 0, 'f', 4);
}

QColor spanColor(const TraceSpan& s)
{
    switch (s.kind) {
    case TraceSpan::Compute: return colorOfDevice(s.device);
    case TraceSpan::Fetch: return colorOfDevice(s.device).lighter(135);
    case TraceSpan::Prefetch: return colorOfDevice(s.device).lighter(160);
    case TraceSpan::Map: return QColor(0x8c8c8c);
    case TraceSpan::Wait: return QColor(0xe15759);
    case TraceSpan::Release: return QColor(0x505050);
    }
    return {};
}

TimelineDelegate::TimelineDelegate(QObject* parent) : QStyledItemDelegate(parent) {}

QSize TimelineDelegate::sizeHint(const QStyleOptionViewItem& option, const QModelIndex&) const
{
    return QSize(400, option.fontMetrics.height() + 8);
}

void TimelineDelegate::paint(QPainter* p, const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    const auto row = index.data(TraceModel::TimelineRole).value<TimelineRow>();
    const QPointF range = index.data(TraceModel::RangeRole).toPointF();
    const TimelineGeometry g = TimelineGeometry::forCell(option.rect, range.x(), range.y());
    p->save();
    p->setRenderHint(QPainter::Antialiasing, false);
    if (option.state & QStyle::State_Selected)
        p->fillRect(option.rect, option.palette.highlight().color().lighter(170));
    // A faint rule between the two lanes.
    p->setPen(option.palette.color(QPalette::Midlight));
    p->drawLine(QPointF(g.rect.left(), g.rect.center().y()), QPointF(g.rect.right(), g.rect.center().y()));
    double lastRight[2] = {-1e9, -1e9};
    QVector<QRectF> critical;
    for (int i = 0; i < row.spans.size(); ++i) {
        const TraceSpan& s = row.spans[i];
        QRectF r = g.spanRect(s);
        if (r.right() < option.rect.left() || r.left() > option.rect.right())
            continue;
        const int lane = s.kind == TraceSpan::Compute ? 1 : 0;
        if (s.kind == TraceSpan::Release) {
            // A release is an instant: a thin tick at its start.
            p->fillRect(QRectF(r.left(), r.top(), 1, r.height()), markOn(option.palette, spanColor(s)));
            continue;
        }
        if (r.right() <= lastRight[lane] && !row.critical.value(i))
            continue; // another span already owns this pixel column
        lastRight[lane] = r.right();
        const QColor c = spanColor(s);
        p->fillRect(r, c);
        if (s.kind == TraceSpan::Wait || s.kind == TraceSpan::Prefetch)
            p->fillRect(r, QBrush(c.darker(140), Qt::BDiagPattern));
        if (row.critical.value(i))
            critical.push_back(r);
    }
    p->setPen(QPen(markOn(option.palette, QColor(0xb00020)), 1.5));
    p->setBrush(Qt::NoBrush);
    for (const QRectF& r : critical)
        p->drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
    p->restore();
}

QString TimelineDelegate::toolTipAt(const QModelIndex& index, const QRect& cell, double x)
{
    const auto row = index.data(TraceModel::TimelineRole).value<TimelineRow>();
    const QPointF range = index.data(TraceModel::RangeRole).toPointF();
    const TimelineGeometry g = TimelineGeometry::forCell(cell, range.x(), range.y());
    QStringList lines;
    const QVector<int> hits = spansAt(g, row.spans, x);
    for (int i : hits) {
        if (lines.size() == 8) {
            lines << QObject::tr("… and %1 more").arg(hits.size() - 8);
            break;
        }
        lines << describeSpan(row.spans[i]) + (row.critical.value(i) ? QObject::tr(" — on the critical path") : QString());
    }
    return lines.join(QLatin1Char('\n'));
}

bool TimelineDelegate::helpEvent(QHelpEvent* event, QAbstractItemView* view, const QStyleOptionViewItem& option,
                                 const QModelIndex& index)
{
    if (event->type() != QEvent::ToolTip)
        return QStyledItemDelegate::helpEvent(event, view, option, index);
    const QString text = toolTipAt(index, option.rect, event->pos().x());
    if (text.isEmpty())
        QToolTip::hideText();
    else
        QToolTip::showText(event->globalPos(), text, view);
    return true;
}

} // namespace stowage
