#include "budgetbar.h"

#include "budgetmodel.h"
#include "budgetscale.h"
#include "display.h"
#include "themecolors.h"

#include <QApplication>
#include <QFontMetrics>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QStyleOptionFocusRect>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace stowage {

namespace {
constexpr int kMargin = 7;     // room for the handle at both ends
constexpr int kTrackTop = 3;
constexpr int kTrackHeight = 18;

quint64 roleBytes(const BudgetModel* m, int row, int role)
{
    return m->data(m->index(row, 0), role).value<quint64>();
}
} // namespace

BudgetBar::BudgetBar(BudgetModel* model, int row, QWidget* parent) : QWidget(parent), m_model(model), m_row(row)
{
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent, false);
    setCursor(Qt::SizeHorCursor);
    setMouseTracking(false);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

void BudgetBar::setRow(int row)
{
    m_row = row;
    update();
}

QSize BudgetBar::sizeHint() const { return {360, kTrackTop + kTrackHeight + fontMetrics().height() + 4}; }

QSize BudgetBar::minimumSizeHint() const { return {120, sizeHint().height()}; }

QRect BudgetBar::trackRect() const { return {kMargin, kTrackTop, std::max(1, width() - 2 * kMargin), kTrackHeight}; }

quint64 BudgetBar::scale() const
{
    if (m_dragging && m_frozenScale)
        return m_frozenScale;
    return m_model ? std::max<quint64>(1, roleBytes(m_model, m_row, BudgetModel::ScaleRole)) : 1;
}

int BudgetBar::xForBytes(quint64 bytes) const
{
    const QRect t = trackRect();
    return t.left() + static_cast<int>(std::lround(BudgetScale(scale()).position(bytes) * t.width()));
}

quint64 BudgetBar::bytesForX(int x) const
{
    const QRect t = trackRect();
    const double f = std::clamp(double(x - t.left()) / double(t.width()), 0.0, 1.0);
    return BudgetScale(scale()).bytesAt(f);
}

void BudgetBar::paintEvent(QPaintEvent*)
{
    if (!m_model || m_row >= m_model->rowCount())
        return;
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing, true);
    const QPalette& pal = palette();
    const QRectF t = QRectF(trackRect()).adjusted(0.5, 0.5, -0.5, -0.5);
    const QColor color = m_model->data(m_model->index(m_row, 0), BudgetModel::ColorRole).value<QColor>();
    const quint64 budget = roleBytes(m_model, m_row, BudgetModel::BudgetRole);
    const quint64 capacity = roleBytes(m_model, m_row, BudgetModel::CapacityRole);
    const quint64 used = roleBytes(m_model, m_row, BudgetModel::UsedRole);
    const quint64 reserved = roleBytes(m_model, m_row, BudgetModel::ReservedRole);
    const quint64 kv = roleBytes(m_model, m_row, BudgetModel::KvReservedRole);
    const bool over = m_model->data(m_model->index(m_row, 0), BudgetModel::OverBudgetRole).toBool();
    const BudgetScale bs(scale());
    auto xf = [&](quint64 b) { return t.left() + bs.position(b) * t.width(); };

    // Track: the device's memory; past it (a budget larger than the card) is tinted.
    QPainterPath track;
    track.addRoundedRect(t, 3, 3);
    p.fillPath(track, pal.color(QPalette::Base));
    p.save();
    p.setClipPath(track);
    if (capacity > 0 && capacity < scale())
        p.fillRect(QRectF(QPointF(xf(capacity), t.top()), t.bottomRight()), QColor(220, 60, 60, 40));
    // Weights, then the layer reserve, then the KV cache reserve.
    const double xUsed = xf(used);
    p.fillRect(QRectF(QPointF(t.left(), t.top()), QPointF(xUsed, t.bottom())), over ? QColor(0xd04040) : color);
    const double xLayer = xf(used + reserved - kv);
    QColor light = color;
    light.setAlpha(110);
    p.fillRect(QRectF(QPointF(xUsed, t.top()), QPointF(xLayer, t.bottom())), QBrush(light, Qt::BDiagPattern));
    p.fillRect(QRectF(QPointF(xLayer, t.top()), QPointF(xf(used + reserved), t.bottom())), QBrush(light, Qt::DiagCrossPattern));
    // Everything above the budget is out of bounds for the planner.
    p.fillRect(QRectF(QPointF(xf(budget), t.top()), t.bottomRight()), QColor(128, 128, 128, 45));
    p.restore();
    p.setPen(QPen(pal.color(QPalette::Mid), 1));
    p.drawPath(track);
    if (capacity > 0 && capacity < scale()) {
        p.setPen(QPen(pal.color(QPalette::Text), 1, Qt::DotLine));
        p.drawLine(QPointF(xf(capacity), t.top() - 2), QPointF(xf(capacity), t.bottom() + 2));
    }

    // The handle.
    const double hx = xf(budget);
    const QRectF knob(hx - 4.5, t.top() - 2, 9, t.height() + 4);
    // Under a dark palette Button and Dark vanish into the track: a light knob, outlined in the text colour.
    const bool dark = isDarkPalette(pal);
    const QColor knobFill = dark ? mixColors(pal.color(QPalette::Button), pal.color(QPalette::Text), 0.7) : pal.color(QPalette::Button);
    const QColor knobEdge = dark ? pal.color(QPalette::Text) : pal.color(QPalette::Dark);
    p.setPen(QPen(hasFocus() ? pal.color(QPalette::Highlight) : knobEdge, hasFocus() ? 2 : 1));
    p.setBrush(m_dragging ? pal.color(QPalette::Highlight) : knobFill);
    p.drawRoundedRect(knob, 3, 3);
    p.setPen(QPen(m_dragging ? pal.color(QPalette::HighlightedText) : dark ? pal.color(QPalette::Base) : pal.color(QPalette::ButtonText), 1));
    p.drawLine(QPointF(hx, knob.top() + 5), QPointF(hx, knob.bottom() - 5));

    // The caption under the bar; while dragging, the budget leads it.
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.9);
    p.setFont(f);
    p.setPen(pal.color(QPalette::Text));
    QString caption = tr("%1 weights").arg(formatBytes(used));
    if (reserved)
        caption += tr(" · %1 kept free").arg(formatBytes(reserved));
    if (kv)
        caption += tr(" (KV, activations %1)").arg(formatBytes(kv));
    const QString budgetText = tr("budget %1").arg(formatBytes(budget)) +
                               (capacity ? tr(" of %1").arg(formatBytes(capacity)) : QString());
    const QRect textRect(trackRect().left(), int(t.bottom()) + 2, trackRect().width(), fontMetrics().height() + 2);
    if (over)
        p.setPen(QColor(0xd04040));
    QFont bold = f;
    bold.setBold(m_dragging);
    // The caption never runs under the budget on the right: elided before it.
    const int room = textRect.width() - QFontMetrics(bold).horizontalAdvance(budgetText) - 12;
    p.drawText(textRect, Qt::AlignLeft | Qt::AlignVCenter, QFontMetrics(f).elidedText(caption, Qt::ElideRight, room));
    p.setFont(bold);
    p.setPen(m_dragging ? pal.color(QPalette::Highlight) : pal.color(QPalette::Text));
    p.drawText(textRect, Qt::AlignRight | Qt::AlignVCenter, budgetText);
}

void BudgetBar::dragTo(int x, bool fine)
{
    if (!m_model)
        return;
    const quint64 s = scale();
    m_model->setBudget(m_row, std::min(BudgetScale(s).snap(bytesForX(x), fine), s));
    update();
}

void BudgetBar::mousePressEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton)
        return QWidget::mousePressEvent(event);
    m_frozenScale = scale();
    m_dragging = true;
    dragTo(qRound(event->position().x()), event->modifiers() & Qt::ShiftModifier);
    event->accept();
}

void BudgetBar::mouseMoveEvent(QMouseEvent* event)
{
    if (!m_dragging)
        return QWidget::mouseMoveEvent(event);
    dragTo(qRound(event->position().x()), event->modifiers() & Qt::ShiftModifier);
    event->accept();
}

void BudgetBar::mouseReleaseEvent(QMouseEvent* event)
{
    if (!m_dragging)
        return QWidget::mouseReleaseEvent(event);
    dragTo(qRound(event->position().x()), event->modifiers() & Qt::ShiftModifier);
    m_dragging = false;
    m_frozenScale = 0;
    update();
}

void BudgetBar::keyPressEvent(QKeyEvent* event)
{
    if (!m_model)
        return QWidget::keyPressEvent(event);
    const quint64 s = scale();
    const BudgetScale bs(s);
    const bool fine = event->modifiers() & Qt::ShiftModifier;
    const quint64 budget = roleBytes(m_model, m_row, BudgetModel::BudgetRole);
    const quint64 capacity = roleBytes(m_model, m_row, BudgetModel::CapacityRole);
    // Steps follow the bar's scale: an arrow moves 1/40 of it, Shift 1/400, a page 1/8.
    quint64 next = budget;
    switch (event->key()) {
    case Qt::Key_Left:
    case Qt::Key_Down: next = bs.moved(budget, -(fine ? BudgetScale::kFineArrow : BudgetScale::kArrow), fine); break;
    case Qt::Key_Right:
    case Qt::Key_Up: next = bs.moved(budget, fine ? BudgetScale::kFineArrow : BudgetScale::kArrow, fine); break;
    case Qt::Key_PageDown: next = bs.moved(budget, -BudgetScale::kPage, fine); break;
    case Qt::Key_PageUp: next = bs.moved(budget, BudgetScale::kPage, fine); break;
    case Qt::Key_Home: next = 0; break;
    case Qt::Key_End: next = capacity ? capacity : s; break;
    default: return QWidget::keyPressEvent(event);
    }
    m_model->setBudget(m_row, next);
    update();
    event->accept();
}

QString BudgetBar::toolTipText() const
{
    if (!m_model)
        return {};
    const quint64 used = roleBytes(m_model, m_row, BudgetModel::UsedRole);
    const quint64 reserved = roleBytes(m_model, m_row, BudgetModel::ReservedRole);
    const quint64 kv = roleBytes(m_model, m_row, BudgetModel::KvReservedRole);
    const quint64 budget = roleBytes(m_model, m_row, BudgetModel::BudgetRole);
    QString t = tr("<b>%1</b><br>Weights placed here: %2<br>Kept free for the largest layer: %3<br>"
                   "Kept free for the KV cache and activations: %4<br>Budget (max_memory): %5")
                    .arg(m_model->data(m_model->index(m_row, BudgetModel::DeviceColumn)).toString(), formatBytes(used),
                         formatBytes(reserved - kv), formatBytes(kv), formatBytes(budget));
    const QString problem = m_model->data(m_model->index(m_row, 0), BudgetModel::ProblemRole).toString();
    if (!problem.isEmpty())
        t += QStringLiteral("<br><span style='color:#c03030'>%1</span>").arg(problem.toHtmlEscaped());
    t += tr("<br><i>Drag the handle (Shift: fine steps),<br>or use ←/→, PgUp/PgDn, Home/End.</i>");
    return t;
}

void BudgetBar::keepToolTipInWindow(const QPoint& cursor) const
{
    // Qt keeps a tooltip on its screen, not in the window: a bar near the
    // window's right edge had its tooltip cut there (a window filling an
    // Xvfb screen, a window beside another screen). Move the shown tip in.
    const QRect win(window()->mapToGlobal(QPoint(0, 0)), window()->size());
    for (QWidget* w : QApplication::topLevelWidgets()) {
        if (w->objectName() != QLatin1String("qtooltip_label") || !w->isVisible())
            continue;
        QRect r = w->frameGeometry(); // move() places the frame
        if (r.right() > win.right())
            r.moveRight(win.right());
        if (r.left() < win.left())
            r.moveLeft(win.left());
        if (r.bottom() > win.bottom())
            r.moveBottom(std::max(win.top() + r.height() - 1, cursor.y() - 4));
        w->move(r.topLeft());
    }
}

bool BudgetBar::event(QEvent* e)
{
    if (e->type() == QEvent::ToolTip) {
        const QPoint at = static_cast<QHelpEvent*>(e)->globalPos();
        QToolTip::showText(at, toolTipText(), this);
        keepToolTipInWindow(at);
        return true;
    }
    return QWidget::event(e);
}

} // namespace stowage
