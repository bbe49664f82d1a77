#pragma once
// The placement as a picture: the model's layers in definition order as a
// strip, each block as wide as its bytes and coloured by its device, with a
// bracket under each run of blocks on one device. Hovering a block shows
// the planner's reason; clicking selects its module (moduleActivated), and
// setSelectedModule() outlines the blocks of a module chosen elsewhere.
#include "placementlayout.h"

#include <QWidget>

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
    QString blockLabel(const PlacementBlock& b) const;

    std::shared_ptr<const ModuleTree> m_tree;
    std::shared_ptr<const Plan> m_plan;
    PlacementLayout m_layout;
    int m_selectedModule = -1;
    std::vector<int> m_selectedBlocks;
    int m_hover = -1;
    quint64 m_paints = 0;
};

} // namespace stowage
