#pragma once
// One device's budget as a horizontal bar: on one scale it draws the
// weights the plan puts there, the room the planner keeps free for the
// largest layer and for the KV cache, the device's memory and the budget
// handle, on a BudgetScale (linear below a knee, logarithmic above it, so
// a 3 MiB budget on a 24 GiB card is draggable). Drag the handle (Shift:
// fine steps), or use the arrow, Page, Home and End keys when focused; each
// change goes straight into the BudgetModel, which re-plans.
#include <QPointer>
#include <QWidget>

namespace stowage {

class BudgetModel;

class BudgetBar : public QWidget {
    Q_OBJECT
public:
    BudgetBar(BudgetModel* model, int row, QWidget* parent = nullptr);
    void setRow(int row);
    int row() const { return m_row; }
    bool dragging() const { return m_dragging; }
    // Where the handle for `bytes` is drawn, in widget coordinates (tests drag from there).
    int xForBytes(quint64 bytes) const;
    quint64 bytesForX(int x) const;
    QRect trackRect() const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    bool event(QEvent* event) override;

private:
    quint64 scale() const;
    void dragTo(int x, bool fine);
    QString toolTipText() const;
    void keepToolTipInWindow(const QPoint& cursor) const;

    QPointer<BudgetModel> m_model;
    int m_row = 0;
    bool m_dragging = false;
    quint64 m_frozenScale = 0; // the scale stays put while dragging, so the handle follows the mouse
};

} // namespace stowage
