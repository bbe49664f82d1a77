#pragma once
// The plan on screen as the context grows (kvcache.h ContextSweep): each
// device's bytes (weights, the KV cache of its layers, activation room) as a
// share of its own budget on one axis (100% = its budget, the dashed line),
// over the context on a log axis from 1 token to the model's longest, a dot
// where each device runs out, and the sentences that say where ("GPU 0 runs
// out at token 11,400 with batch 1; 46,000 with the KV cache in RAM").
// Display only: the Plan page computes the sweep. Colours follow the palette.
#include "stowage/kvcache.h"

#include <QWidget>

class QChart;
class QChartView;
class QLabel;
class QLineSeries;
class QScatterSeries;
class QLogValueAxis;
class QValueAxis;

namespace stowage {

class ContextChart : public QWidget {
    Q_OBJECT
public:
    explicit ContextChart(QWidget* parent = nullptr);

    void setSweep(const ContextSweep& sweep);
    // Nothing to show, and why ("Stowage does not know this model's attention").
    void clear(const QString& why);

    QChart* chart() const { return m_chart; }
    QString summary() const;
    // The line of a device ("0", "cpu"), nullptr when it has no budget.
    QLineSeries* deviceSeries(const QString& device) const;
    QScatterSeries* crossings() const { return m_crossings; }
    QLogValueAxis* contextAxis() const { return m_x; }
    QValueAxis* shareAxis() const { return m_y; }

protected:
    void changeEvent(QEvent* event) override;

private:
    void applyPalette();

    QChart* m_chart;
    QChartView* m_view;
    QLabel* m_summary;
    QLogValueAxis* m_x;
    QValueAxis* m_y;
    QLineSeries* m_budgetLine;
    QScatterSeries* m_crossings;
    QList<QLineSeries*> m_lines;
};

} // namespace stowage
