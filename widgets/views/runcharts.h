#pragma once
// Live graphs of a run (Qt Charts), display only: the weights each device
// holds over time as a share of that device's own budget (every device on one
// axis, 100% = its budget: GPUs of 3 MiB and RAM of 10 GiB compare at a
// glance, and a device over its budget is over the one dashed line), the
// worker process's resident set apart on its own small chart (it counts
// LibTorch and mapped files, not the plan's weights), disk-read and
// host-to-device throughput, token markers on the time axis, and after
// dispatch the planned vs actual bytes per device, where disk's actual bar
// is what the last forward pass read in place. A ~40 ms timer redraws only
// when samples arrived and the widget is visible, giving each series its
// whole decimated point list with QXYSeries::replace() (at most one point per
// pixel column). Colours follow the palette (light or dark).
#include "rundata.h"

#include <QHash>
#include <QTimer>
#include <QWidget>

class QChart;
class QChartView;
class QLineSeries;
class QScatterSeries;
class QBarSeries;
class QBarSet;
class QBarCategoryAxis;
class QValueAxis;

namespace stowage {

class SamplesModel;

// A value axis from 0 that reads right: a 1, 2, 2.5 or 5 step, at most 6 ticks,
// and as many decimals as the step needs (an empty chart's 0..1 reads
// "0.0 0.2 … 1.0", never "0 0 0 1 1 1").
struct AxisTicks {
    double max = 1;
    int count = 6;
    int decimals = 1;
    static AxisTicks forTop(double top);
};

class RunCharts : public QWidget {
    Q_OBJECT
public:
    explicit RunCharts(SamplesModel* model, QWidget* parent = nullptr);

    void setDispatchBytes(const QVector<DeviceBytes>& devices);
    void clearDispatchBytes();
    // Redraws now if anything changed (tests, screenshots); the timer calls it.
    void refresh();
    quint64 redraws() const { return m_redraws; }
    int memoryPointCount() const;
    int trafficPointCount() const;
    int tokenMarkerCount() const;
    QChart* memoryChart() const { return m_memory; }
    QChart* residentSetChart() const { return m_rss; }
    QChart* trafficChart() const { return m_traffic; }
    QChart* dispatchChart() const { return m_dispatch; }
    QValueAxis* memoryAxis() const { return m_memY; }
    // A device's line on the memory chart (nullptr until it has samples).
    QLineSeries* deviceSeries(const QString& device) const;
    QLineSeries* residentSetSeries() const;
    QBarSet* actualBars() const { return m_actual; }
    static constexpr int kRedrawMs = 40;

protected:
    void changeEvent(QEvent* event) override;

private:
    QLineSeries* seriesFor(int column);
    void applyPalette();
    void rebuildDispatch();
    static void unitFor(double maxBytes, double* unit, QString* name);

    SamplesModel* m_model;
    QTimer m_timer;
    bool m_dirty = true;
    quint64 m_redraws = 0;
    QChart* m_memory = nullptr;
    QChart* m_rss = nullptr;
    QChart* m_traffic = nullptr;
    QChart* m_dispatch = nullptr;
    QList<QChartView*> m_views;
    QValueAxis* m_memX = nullptr;
    QValueAxis* m_memY = nullptr; // % of each device's own budget
    QValueAxis* m_rssX = nullptr;
    QValueAxis* m_rssY = nullptr;
    QValueAxis* m_trafX = nullptr;
    QValueAxis* m_trafY = nullptr;
    QValueAxis* m_dispY = nullptr;
    QBarCategoryAxis* m_dispX = nullptr;
    QBarSeries* m_bars = nullptr;
    QBarSet* m_actual = nullptr;
    QLineSeries* m_budgetLine = nullptr; // 100%
    QHash<int, QLineSeries*> m_series;   // model column -> series
    QScatterSeries* m_memTokens = nullptr;
    QScatterSeries* m_trafTokens = nullptr;
    QVector<DeviceBytes> m_devices;
    quint64 m_diskPassShown = 0;
};

} // namespace stowage
