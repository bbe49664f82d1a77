#pragma once
// The worker's memory and traffic samples as a table: one row per sample
// (time, the worker process's resident set, disk-read and host-to-device rates, then the
// bytes each device holds), bounded for sessions of any length. When the
// rows reach the capacity, pairs of neighbours merge into one (each value
// the larger of the two: a peak never disappears) and later samples are
// merged `stride` at a time, so an hour keeps the same number of rows as a
// minute at a coarser step. Charts read points(): at most one point per
// bucket, the bucket's maximum (heaptrack's MAX_CHART_DATAPOINTS idea).
#include "rundata.h"

#include <QAbstractTableModel>
#include <QPointF>
#include <QStringList>
#include <QVector>

namespace stowage {

class SamplesModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { TimeColumn, RssColumn, DiskRateColumn, H2dRateColumn, FirstDeviceColumn };
    enum Role { ValueRole = Qt::UserRole + 1, DeviceNameRole };

    explicit SamplesModel(QObject* parent = nullptr);

    // At least 16; the default keeps 2048 rows (100 s at full resolution).
    void setCapacity(int rows);
    int capacity() const { return m_capacity; }
    int stride() const { return m_stride; }
    quint64 samplesSeen() const { return m_seen; }

    void clear();
    void addSample(const RunSample& sample);
    // A token's time, for the markers on the time axis (the last 4096 kept).
    void addToken(double t);
    const QVector<double>& tokenTimes() const { return m_tokens; }
    // Budgets to draw as lines: device name -> bytes.
    void setBudgets(const QVector<std::pair<QString, quint64>>& budgets);
    const QVector<std::pair<QString, quint64>>& budgets() const { return m_budgets; }
    quint64 budgetOf(const QString& device) const; // 0 when none was set
    // What the last complete forward pass read from disk-placed weights, as
    // the newest sample says (0 before the first pass).
    quint64 diskPassBytes() const { return m_diskPass; }
    // "GPU 0 (simulated)" instead of "GPU 0", for example.
    void setDeviceLabel(const QString& device, const QString& label);
    // The headroom alarm for a sample: the device nearest its budget once one
    // holds 95% of it or more ("GPU 0 holds 97% of its budget (3.88 of 4.00
    // MiB): a longer context may not fit"), past it ("CPU holds 17.2 GiB,
    // past its 16.0 GiB budget: the room kept for other programs is in
    // use"); empty while every budgeted device has room.
    QString headroomAlarm(const RunSample& sample) const;

    QStringList devices() const { return m_devices; }
    int columnOfDevice(const QString& device) const; // -1 when not seen
    double value(int row, int column) const;
    double lastTime() const { return m_rows.isEmpty() ? 0 : m_rows.last().t; }
    double maxValue(int column) const;
    // The column's points between t0 and t1, at most one per bucket (its
    // maximum, at the bucket's last time), for a chart `buckets` pixels wide.
    QVector<QPointF> points(int column, double t0, double t1, int buckets) const;
    QString seriesName(int column) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Row {
        double t = 0;
        QVector<double> values; // per column after TimeColumn
        int merged = 0;         // raw samples in this row
    };
    void compact();
    void mergeInto(Row& into, const Row& from) const;

    int m_capacity = 2048;
    int m_stride = 1;
    quint64 m_seen = 0;
    QVector<Row> m_rows;
    QStringList m_devices;
    QHash<QString, QString> m_labels;
    QVector<double> m_tokens;
    QVector<std::pair<QString, quint64>> m_budgets;
    quint64 m_diskPass = 0;
    // The previous raw sample's counters, for the rates.
    bool m_hasPrev = false;
    RunSample m_prev;
};

} // namespace stowage
