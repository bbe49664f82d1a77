#pragma once
// The placement as a picture: the model's layers in definition order as a
// strip, each block as wide as its bytes and coloured by its device, with a
// bracket under each run of blocks on one device. Hovering a block shows
// the planner's reason; clicking selects its module (moduleActivated), and
// setSelectedModule() outlines the blocks of a module chosen elsewhere.
// In teaching mode (setShowsMovement) an arrow over the strip shows which
// module's weights are moving and to which device. An MoE layer carries a
// hatched band along its bottom as long as its routed experts' share of it.
#include "stowage/placementlayout.h"

#include <QWidget>

class QPainter;

#include <memory>

namespace stowage {

class PlacementMap : public QWidget {
    Q_OBJECT
public:
    explicit PlacementMap(QWidget* parent = nullptr);

    void setPlacement(std::shared_ptr<const ModuleTree> tree, std::shared_ptr<const Plan> plan, PlacementLayout layout);
    void clear();
    const PlacementLayout& layout() const { return m_layout; }
    void setSelectedModule(int module);
    int selectedModule() const { return m_selectedModule; }

    // Weights on the move: `module`'s blocks to the nearest run of blocks on
    // `toDeviceCode` (deviceCode()), labelled. module -1 clears it.
    struct Movement {
        int module = -1;
        int toDeviceCode = -1;
        QString label;
    };
    void setMovement(const Movement& movement);
    const Movement& movement() const { return m_movement; }
    // Keeps room above the strip for the movement arrow (the run page's map).
    void setShowsMovement(bool shows);

    // Geometry, for tests and hit-testing: the strip, and a block's rectangle.
    QRect stripRect() const;
    QRectF blockRect(int block) const;
    int blockAt(const QPoint& pos) const;
    QString toolTipAt(const QPoint& pos) const;
    // Paints done so far: tests wait for the next one to time a drag.
    quint64 paintCount() const { return m_paints; }

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

signals:
    void moduleActivated(int module);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    bool event(QEvent* event) override;

private:
    double xOf(quint64 bytes) const;
    int arrowSpace() const;
    void paintMovement(QPainter& p);
    QString blockLabel(const PlacementBlock& b) const;
    // An MoE layer's routed experts, in words, for its tooltip.
    QString expertText(const PlacementBlock& b) const;

    std::shared_ptr<const ModuleTree> m_tree;
    std::shared_ptr<const Plan> m_plan;
    PlacementLayout m_layout;
    int m_selectedModule = -1;
    std::vector<int> m_selectedBlocks;
    int m_hover = -1;
    quint64 m_paints = 0;
    Movement m_movement;
    bool m_showsMovement = false;
};

} // namespace stowage
