#pragma once
// The execution timeline as a panel: a token slider with "Follow the last
// token", the per-unit table painted by TimelineDelegate, and its legend.
// It only shows the TraceModel it is given; scrubbing to an earlier token
// stops following, ticking Follow returns to the newest.
#include <QWidget>

class QCheckBox;
class QLabel;
class QSlider;
class QTableView;

namespace stowage {

class TraceModel;

class TimelinePanel : public QWidget {
    Q_OBJECT
public:
    explicit TimelinePanel(TraceModel* trace, QWidget* parent = nullptr);

    QTableView* view() const { return m_view; }
    QSlider* stepSlider() const { return m_slider; }
    QCheckBox* followBox() const { return m_follow; }
    QString stepText() const;

private:
    void onStepsChanged();
    void onSlider(int position);
    void showShownStep(); // the label and the header's scale, for the step on screen

    TraceModel* m_trace;
    QTableView* m_view = nullptr;
    QSlider* m_slider = nullptr;
    QLabel* m_stepLabel = nullptr;
    QCheckBox* m_follow = nullptr;
};

} // namespace stowage
