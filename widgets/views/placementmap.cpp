#include "placementmap.h"

#include "display.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <optional>

namespace stowage {

namespace {
constexpr int kMargin = 2;
constexpr int kStripHeight = 40;
constexpr int kBracketGap = 4;
constexpr int kExpertBand = 9; // the hatched band of an MoE layer's routed experts
} // namespace

PlacementMap::PlacementMap(QWidget* parent) : QWidget(parent)
{
    setMouseTracking(true);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    setFocusPolicy(Qt::NoFocus);
}

QSize PlacementMap::sizeHint() const { return {640, arrowSpace() + kStripHeight + kBracketGap + 2 * fontMetrics().height() + 8}; }

int PlacementMap::arrowSpace() const { return m_showsMovement ? fontMetrics().height() + 16 : 0; }

void PlacementMap::setShowsMovement(bool shows)
{
    if (shows == m_showsMovement)
        return;
    m_showsMovement = shows;
    updateGeometry();
    update();
}

void PlacementMap::setMovement(const Movement& movement)
{
    m_movement = movement;
    update();
}

QSize PlacementMap::minimumSizeHint() const { return {160, sizeHint().height()}; }

void PlacementMap::setPlacement(std::shared_ptr<const ModuleTree> tree, std::shared_ptr<const Plan> plan,
                                PlacementLayout layout)
{
    const bool sameTree = tree == m_tree;
    m_tree = std::move(tree);
    m_plan = std::move(plan);
    m_layout = std::move(layout);
    if (!sameTree)
        m_selectedModule = -1;
    m_selectedBlocks = m_tree ? m_layout.blocksOf(*m_tree, m_selectedModule) : std::vector<int>{};
    if (m_hover >= static_cast<int>(m_layout.blocks.size()))
        m_hover = -1;
    update();
}

void PlacementMap::clear() { setPlacement(nullptr, nullptr, {}); }

void PlacementMap::setSelectedModule(int module)
{
    if (module == m_selectedModule)
        return;
    m_selectedModule = module;
    m_selectedBlocks = m_tree ? m_layout.blocksOf(*m_tree, module) : std::vector<int>{};
    update();
}

QRect PlacementMap::stripRect() const
{
    return {kMargin, kMargin + arrowSpace(), std::max(1, width() - 2 * kMargin), kStripHeight};
}

double PlacementMap::xOf(quint64 bytes) const
{
    const QRect s = stripRect();
    return m_layout.totalBytes ? s.left() + double(bytes) / double(m_layout.totalBytes) * s.width() : s.left();
}

QRectF PlacementMap::blockRect(int block) const
{
    if (block < 0 || block >= static_cast<int>(m_layout.blocks.size()))
        return {};
    const PlacementBlock& b = m_layout.blocks[static_cast<size_t>(block)];
    const QRect s = stripRect();
    const double x0 = xOf(b.offset), x1 = std::max(x0 + 1.0, xOf(b.offset + b.bytes));
    return {QPointF(x0, s.top()), QPointF(x1, s.bottom() + 1)};
}

int PlacementMap::blockAt(const QPoint& pos) const
{
    const QRect s = stripRect();
    if (!s.contains(pos) || !m_layout.totalBytes)
        return -1;
    const double f = double(pos.x() - s.left()) / double(s.width());
    return m_layout.blockAt(static_cast<quint64>(f * double(m_layout.totalBytes)));
}

QString PlacementMap::toolTipAt(const QPoint& pos) const
{
    const int b = blockAt(pos);
    if (b < 0 || !m_tree || !m_plan)
        return {};
    const PlacementBlock& block = m_layout.blocks[static_cast<size_t>(b)];
    QString text = describeBlock(*m_tree, *m_plan, block);
    if (block.expertBytes > 0)
        text += QStringLiteral("\n") + expertText(block);
    return text;
}

QString PlacementMap::expertText(const PlacementBlock& b) const
{
    // How many experts: the leading dimension of the first fused expert parameter.
    int64_t experts = 0;
    const auto& mods = m_tree->modules();
    for (int j = b.module; j < mods[static_cast<size_t>(b.module)].end && !experts; ++j) {
        const Module& m = mods[static_cast<size_t>(j)];
        if (m.name.substr(m.name.rfind('.') + 1) != "experts" || m.params.empty())
            continue; // routed experts only, as layoutPlacement counts them (not shared_experts)
        const Param& p = m_tree->params()[static_cast<size_t>(m.params.front())];
        if (p.shape.size() == 3)
            experts = p.shape[0];
    }
    const QString count = experts > 0 ? tr("%1 routed experts").arg(experts) : tr("Routed experts");
    return tr("%1: %2 of its %3 (%4 %, the hatched band); a token reads only the experts its router picks.")
        .arg(count, formatBytes(b.expertBytes), formatBytes(b.bytes))
        .arg(100.0 * double(b.expertBytes) / double(b.bytes), 0, 'f', 1);
}

QString PlacementMap::blockLabel(const PlacementBlock& b) const
{
    const std::string& n = m_tree->modules()[static_cast<size_t>(b.module)].name;
    return QString::fromStdString(n.substr(n.rfind('.') + 1));
}

void PlacementMap::paintEvent(QPaintEvent*)
{
    ++m_paints;
    QPainter p(this);
    const QPalette& pal = palette();
    const QRect s = stripRect();
    p.fillRect(s, pal.color(QPalette::Base));
    if (!m_tree || m_layout.blocks.empty()) {
        p.setPen(pal.color(QPalette::PlaceholderText));
        p.drawText(s, Qt::AlignCenter, tr("Open a checkpoint to see where its layers go"));
        return;
    }
    const QColor separator = pal.color(QPalette::Base);
    double lastDrawnRight = -1;
    const QFontMetrics fm = fontMetrics();
    for (size_t i = 0; i < m_layout.blocks.size(); ++i) {
        const PlacementBlock& b = m_layout.blocks[i];
        const QRectF r = blockRect(static_cast<int>(i));
        // Blocks narrower than a pixel share it: draw the first, skip the rest.
        if (r.right() <= lastDrawnRight)
            continue;
        lastDrawnRight = r.right();
        QColor c = b.deviceCode >= 0 ? deviceColor(deviceFromCode(b.deviceCode)) : pal.color(QPalette::Mid);
        if (static_cast<int>(i) == m_hover)
            c = c.lighter(125);
        p.fillRect(r, b.deviceCode == MixedCode ? QBrush(c, Qt::Dense4Pattern) : QBrush(c));
        if (b.expertBytes > 0 && b.bytes > 0) {
            // An MoE layer: a hatched band along its bottom, as long as its routed experts' share.
            const double share = double(b.expertBytes) / double(b.bytes);
            const QRectF band(r.left(), r.bottom() - kExpertBand + 1, std::max(1.0, (r.width() - 1) * share), kExpertBand);
            p.fillRect(band, c.lighter(135));
            p.fillRect(band, QBrush(c.darker(160), Qt::BDiagPattern));
        }
        if (r.width() >= 4)
            p.fillRect(QRectF(r.right() - 1, r.top(), 1, r.height()), separator);
        if (r.width() >= fm.horizontalAdvance(QStringLiteral("000")) + 4) {
            const QString label = fm.elidedText(blockLabel(b), Qt::ElideRight, int(r.width()) - 4);
            p.setPen(c.lightnessF() > 0.6 ? QColor(0x202020) : QColor(0xffffff));
            p.drawText(r.adjusted(2, 0, -2, 0), Qt::AlignCenter, label);
        }
    }
    // Outline the selected module's blocks as one span, and the hovered block.
    p.setRenderHint(QPainter::Antialiasing, true);
    if (!m_selectedBlocks.empty()) {
        const QRectF first = blockRect(m_selectedBlocks.front()), last = blockRect(m_selectedBlocks.back());
        p.setPen(QPen(pal.color(QPalette::Text), 2.5));
        p.setBrush(Qt::NoBrush);
        p.drawRect(QRectF(first.topLeft(), last.bottomRight()).adjusted(1, 1, -1, -1));
    }
    if (m_hover >= 0) {
        p.setPen(QPen(pal.color(QPalette::Highlight), 1.5));
        p.setBrush(Qt::NoBrush);
        p.drawRect(blockRect(m_hover).adjusted(0.75, 0.75, -0.75, -0.75));
    }
    paintMovement(p);
    p.setRenderHint(QPainter::Antialiasing, false);

    // A bracket and a label under each run of blocks on one device.
    const int by = s.bottom() + kBracketGap;
    QFont small = font();
    small.setPointSizeF(small.pointSizeF() * 0.9);
    p.setFont(small);
    const QFontMetrics sfm(small);
    for (const PlacementRun& run : m_layout.runs) {
        const double x0 = blockRect(run.first).left(), x1 = blockRect(run.last).right();
        const QColor c = run.deviceCode >= 0 ? deviceColor(deviceFromCode(run.deviceCode)) : pal.color(QPalette::Mid);
        p.setPen(QPen(c, 2));
        p.drawLine(QPointF(x0 + 1, by), QPointF(x1 - 1, by));
        p.drawLine(QPointF(x0 + 1, by - 3), QPointF(x0 + 1, by));
        p.drawLine(QPointF(x1 - 1, by - 3), QPointF(x1 - 1, by));
        const QString name = run.deviceCode >= 0 ? deviceLabel(deviceFromCode(run.deviceCode))
                                                 : run.deviceCode == MixedCode ? tr("split") : tr("unmapped");
        const int layers = run.last - run.first + 1;
        QString label = tr("%1 · %2 · %3").arg(name, formatBytes(run.bytes), countOf(layers, tr("block"), tr("blocks")));
        const int w = int(x1 - x0);
        if (sfm.horizontalAdvance(label) > w)
            label = name;
        if (sfm.horizontalAdvance(label) > w + 8)
            continue;
        p.setPen(pal.color(QPalette::Text));
        p.drawText(QRectF(x0, by + 2, std::max(w, sfm.horizontalAdvance(label)), sfm.height()),
                   Qt::AlignHCenter | Qt::AlignTop, label);
    }
}

// An arc over the strip from the moving module's blocks to the middle of the
// nearest run on the target device, with its label at the top; without such
// a run (a device that holds no block, as RAM may), a short arrow up and the label.
void PlacementMap::paintMovement(QPainter& p)
{
    if (!m_showsMovement || m_movement.module < 0 || !m_tree)
        return;
    const std::vector<int> blocks = m_layout.blocksOf(*m_tree, m_movement.module);
    if (blocks.empty())
        return;
    const QRect s = stripRect();
    const double fromX = (blockRect(blocks.front()).left() + blockRect(blocks.back()).right()) / 2;
    std::optional<double> toX;
    for (const PlacementRun& run : m_layout.runs) {
        if (run.deviceCode != m_movement.toDeviceCode)
            continue;
        const double x = (blockRect(run.first).left() + blockRect(run.last).right()) / 2;
        if (!toX || std::abs(x - fromX) < std::abs(*toX - fromX))
            toX = x;
    }
    const QColor c = m_movement.toDeviceCode >= 0 ? deviceColor(deviceFromCode(m_movement.toDeviceCode)) : palette().color(QPalette::Text);
    const double top = kMargin + 2, y = s.top();
    QPainterPath path(QPointF(fromX, y));
    QPointF head, from;
    if (toX && std::abs(*toX - fromX) > 6) {
        path.cubicTo(QPointF(fromX, top), QPointF(*toX, top), QPointF(*toX, y));
        head = QPointF(*toX, y);
        from = QPointF(*toX, y - 6);
    } else {
        path.lineTo(fromX, top + 4);
        head = QPointF(fromX, top + 4);
        from = QPointF(fromX, top + 10);
    }
    p.setBrush(Qt::NoBrush);
    p.setPen(QPen(palette().color(QPalette::Base), 5, Qt::SolidLine, Qt::RoundCap));
    p.drawPath(path);
    p.setPen(QPen(c.darker(115), 2.5, Qt::SolidLine, Qt::RoundCap));
    p.drawPath(path);
    // Arrowhead along the last segment's direction.
    const QPointF d = head - from;
    const double len = std::max(1e-6, std::hypot(d.x(), d.y()));
    const QPointF u(d.x() / len, d.y() / len), n(-u.y(), u.x());
    p.setBrush(c.darker(115));
    p.drawPolygon(QPolygonF({head, head - 8 * u + 4.5 * n, head - 8 * u - 4.5 * n}));
    if (!m_movement.label.isEmpty()) {
        const QFontMetrics fm = fontMetrics();
        const double mid = toX ? (fromX + *toX) / 2 : fromX;
        const int w = fm.horizontalAdvance(m_movement.label) + 10;
        QRectF box(mid - w / 2.0, kMargin, w, fm.height() + 2);
        box.moveLeft(std::clamp(box.left(), double(kMargin), double(width() - kMargin - w)));
        p.setPen(QPen(c.darker(115), 1));
        p.setBrush(palette().color(QPalette::Base));
        p.drawRoundedRect(box, 3, 3);
        p.setPen(palette().color(QPalette::Text));
        p.drawText(box, Qt::AlignCenter, m_movement.label);
    }
}

void PlacementMap::mouseMoveEvent(QMouseEvent* event)
{
    const int h = blockAt(event->position().toPoint());
    if (h != m_hover) {
        m_hover = h;
        update();
        if (QToolTip::isVisible())
            QToolTip::showText(event->globalPosition().toPoint(), toolTipAt(event->position().toPoint()), this);
    }
}

void PlacementMap::mousePressEvent(QMouseEvent* event)
{
    const int b = blockAt(event->position().toPoint());
    if (event->button() != Qt::LeftButton || b < 0)
        return QWidget::mousePressEvent(event);
    const int module = m_layout.blocks[static_cast<size_t>(b)].module;
    setSelectedModule(module);
    emit moduleActivated(module);
}

void PlacementMap::leaveEvent(QEvent*)
{
    if (m_hover >= 0) {
        m_hover = -1;
        update();
    }
}

bool PlacementMap::event(QEvent* e)
{
    if (e->type() == QEvent::ToolTip) {
        auto* he = static_cast<QHelpEvent*>(e);
        const QString t = toolTipAt(he->pos());
        if (t.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(he->globalPos(), t, this);
        return true;
    }
    return QWidget::event(e);
}

} // namespace stowage
