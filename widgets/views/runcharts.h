#pragma once
// Live graphs of a run (Qt Charts), display only: memory per device over
// time (each GPU, real or simulated, and the worker's resident set) with the
// budgets as dashed lines, disk-read and host-to-device throughput, token
// markers on the time axis, and after dispatch the planned vs actual bytes
// per device. A ~40 ms timer redraws only when samples arrived and the
// widget is visible, giving each series its whole decimated point list with
// QXYSeries::replace() (at most one point per pixel column).
#include "rundata.h"

#include <QHash>
#include <QTimer>
#include <QWidget>

class QChart;
class QChartView;
class QLineSeries;
class QScatterSeries;
class QBarSeries;
class QBarCategoryAxis;
class QValueAxis;

namespace stowage {

class SamplesModel;

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
    QChart* trafficChart() const { return m_traffic; }
    QChart* dispatchChart() const { return m_dispatch; }
    static constexpr int kRedrawMs = 40;

private:
    QLineSeries* seriesFor(int column);
    QLineSeries* budgetSeriesFor(const QString& device);
    static QChart* makeChart(const QString& title);
    static void unitFor(double maxBytes, double* unit, QString* name);

    SamplesModel* m_model;
    QTimer m_timer;
    bool m_dirty = true;
    quint64 m_redraws = 0;
    QChart* m_memory = nullptr;
    QChart* m_traffic = nullptr;
    QChart* m_dispatch = nullptr;
    QValueAxis* m_memX = nullptr;
    QValueAxis* m_memY = nullptr;   // device memory
    QValueAxis* m_memRam = nullptr; // the worker's resident set, RAM budget
    QValueAxis* m_trafX = nullptr;
    QValueAxis* m_trafY = nullptr;
    QValueAxis* m_dispY = nullptr;
    QBarCategoryAxis* m_dispX = nullptr;
    QBarSeries* m_bars = nullptr;
    QHash<int, QLineSeries*> m_series;         // model column -> series
    QHash<QString, QLineSeries*> m_budgetLines; // device -> dashed line
    QScatterSeries* m_memTokens = nullptr;
    QScatterSeries* m_trafTokens = nullptr;
    QVector<DeviceBytes> m_devices;
};

} // namespace stowage
