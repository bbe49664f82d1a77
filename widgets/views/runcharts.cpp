#include "runcharts.h"

#include "chartstyle.h"

#include "display.h"
#include "samplesmodel.h"
#include "themecolors.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QGridLayout>
#include <QLegendMarker>
#include <QLineSeries>
#include <QScatterSeries>
#include <QValueAxis>

#include <algorithm>
#include <cmath>

namespace stowage {

namespace {
QColor colorOf(const QString& device)
{
    const auto d = Device::parse(device.toStdString());
    return d ? deviceColor(*d) : QColor(0x8c8c8c);
}

QString labelOf(const QString& device)
{
    const auto d = Device::parse(device.toStdString());
    return d ? deviceLabel(*d) : device;
}

bool isDisk(const QString& device) { return device == QLatin1String("disk"); }

QValueAxis* valueAxis(QChart* c, Qt::Alignment where)
{
    auto* a = new QValueAxis;
    a->setRange(0, 1);
    c->addAxis(a, where);
    return a;
}

void setTicks(QValueAxis* axis, double top)
{
    const AxisTicks t = AxisTicks::forTop(top);
    axis->setRange(0, t.max);
    axis->setTickCount(t.count);
    axis->setLabelFormat(QStringLiteral("%.%1f").arg(t.decimals));
}
} // namespace

AxisTicks AxisTicks::forTop(double top)
{
    if (!(top > 0) || !std::isfinite(top))
        top = 1;
    const double raw = top / 5; // at most five steps
    const double p = std::pow(10.0, std::floor(std::log10(raw)));
    double step = 10 * p;
    for (double m : {1.0, 2.0, 2.5, 5.0})
        if (m * p >= raw * (1 - 1e-9)) {
            step = m * p;
            break;
        }
    AxisTicks t;
    const int steps = std::max(1, static_cast<int>(std::ceil(top / step - 1e-9)));
    t.max = steps * step;
    t.count = steps + 1;
    // As many decimals as make the step a whole number (0.25 needs two).
    t.decimals = 0;
    while (t.decimals < 9) {
        const double scaled = step * std::pow(10.0, t.decimals);
        if (std::abs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, scaled))
            break;
        ++t.decimals;
    }
    return t;
}

RunCharts::RunCharts(SamplesModel* model, QWidget* parent) : QWidget(parent), m_model(model)
{
    m_memory = newChart(tr("Weights per device, against each device's own budget"));
    m_rss = newChart(tr("Worker process"));
    m_traffic = newChart(tr("Disk read and host-to-device throughput"));
    m_dispatch = newChart(tr("After dispatch: planned vs actual"));

    for (auto [c, x, y] : {std::tuple{m_memory, &m_memX, &m_memY}, std::tuple{m_rss, &m_rssX, &m_rssY},
                           std::tuple{m_traffic, &m_trafX, &m_trafY}}) {
        *x = valueAxis(c, Qt::AlignBottom);
        *y = valueAxis(c, Qt::AlignLeft);
        (*x)->setTitleText(tr("seconds since dispatch"));
    }
    m_memY->setTitleText(tr("% of own budget"));
    m_rss->legend()->hide();
    for (QScatterSeries** s : {&m_memTokens, &m_trafTokens}) {
        *s = new QScatterSeries;
        (*s)->setName(tr("token"));
        (*s)->setMarkerShape(QScatterSeries::MarkerShapeTriangle);
        (*s)->setMarkerSize(7);
        (*s)->setBorderColor(Qt::transparent);
    }
    m_memory->addSeries(m_memTokens);
    m_memTokens->attachAxis(m_memX);
    m_memTokens->attachAxis(m_memY);
    for (QLegendMarker* marker : m_memory->legend()->markers(m_memTokens))
        marker->setVisible(false); // the throughput chart's legend names the markers
    m_traffic->addSeries(m_trafTokens);
    m_trafTokens->attachAxis(m_trafX);
    m_trafTokens->attachAxis(m_trafY);
    m_budgetLine = new QLineSeries;
    m_budgetLine->setName(tr("budget (100%)"));
    m_memory->addSeries(m_budgetLine);
    m_budgetLine->attachAxis(m_memX);
    m_budgetLine->attachAxis(m_memY);
    seriesFor(SamplesModel::RssColumn);
    seriesFor(SamplesModel::DiskRateColumn);
    seriesFor(SamplesModel::H2dRateColumn);

    m_bars = new QBarSeries;
    m_dispatch->addSeries(m_bars);
    m_dispX = new QBarCategoryAxis;
    QFont small = m_dispX->labelsFont();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    m_dispX->setLabelsFont(small);
    m_dispatch->addAxis(m_dispX, Qt::AlignBottom);
    m_dispY = valueAxis(m_dispatch, Qt::AlignLeft);
    m_bars->attachAxis(m_dispX);
    m_bars->attachAxis(m_dispY);

    auto* grid = new QGridLayout(this);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->setSpacing(4);
    for (QChart* c : {m_memory, m_rss, m_traffic, m_dispatch}) {
        auto* v = new QChartView(c, this);
        v->setRenderHint(QPainter::Antialiasing, true);
        v->setMinimumSize(200, 170);
        m_views << v;
    }
    // Memory across the top (its legend names each device's bytes), then the
    // resident set, the throughput and the bars side by side.
    grid->addWidget(m_views[0], 0, 0, 1, 3);
    grid->addWidget(m_views[1], 1, 0);
    grid->addWidget(m_views[2], 1, 1);
    grid->addWidget(m_views[3], 1, 2);
    grid->setColumnStretch(0, 2);
    grid->setColumnStretch(1, 3);
    grid->setColumnStretch(2, 3);
    m_dispatch->legend()->setAlignment(Qt::AlignBottom); // the bars keep the width
    m_traffic->legend()->setAlignment(Qt::AlignBottom);
    applyPalette();

    auto dirty = [this] { m_dirty = true; };
    connect(model, &QAbstractItemModel::rowsInserted, this, dirty);
    connect(model, &QAbstractItemModel::dataChanged, this, dirty);
    connect(model, &QAbstractItemModel::modelReset, this, dirty);
    connect(model, &QAbstractItemModel::columnsInserted, this, dirty);
    m_timer.setInterval(kRedrawMs);
    connect(&m_timer, &QTimer::timeout, this, [this] {
        if (m_dirty && isVisible()) // paused while hidden: the next tick after show catches up
            refresh();
    });
    m_timer.start();
}

void RunCharts::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange)
        applyPalette();
    QWidget::changeEvent(event);
}

// Qt Charts draws white unless told: every surface, text and rule from the palette.
void RunCharts::applyPalette()
{
    const QPalette& pal = palette();
    const QColor base = pal.color(QPalette::Base), text = pal.color(QPalette::Text);
    for (QChart* c : {m_memory, m_rss, m_traffic, m_dispatch})
        paintChart(c, nullptr, pal);
    for (QChartView* v : std::as_const(m_views))
        v->setBackgroundBrush(base);
    for (QScatterSeries* s : {m_memTokens, m_trafTokens})
        s->setColor(text);
    m_budgetLine->setPen(QPen(mixColors(base, text, 0.45), 1.5, Qt::DashLine));
}

void RunCharts::unitFor(double maxBytes, double* unit, QString* name)
{
    if (maxBytes >= 8.0 * (1ull << 30)) {
        *unit = double(1ull << 30);
        *name = QStringLiteral("GiB");
    } else if (maxBytes >= 8.0 * (1ull << 20)) {
        *unit = double(1ull << 20);
        *name = QStringLiteral("MiB");
    } else {
        *unit = 1024.0;
        *name = QStringLiteral("KiB");
    }
}

QLineSeries* RunCharts::seriesFor(int column)
{
    if (QLineSeries* s = m_series.value(column))
        return s;
    const bool traffic = column == SamplesModel::DiskRateColumn || column == SamplesModel::H2dRateColumn;
    const bool rss = column == SamplesModel::RssColumn;
    auto* s = new QLineSeries;
    s->setName(m_model->seriesName(column));
    QColor c = rss                                      ? colorOf(QStringLiteral("cpu")).darker(120)
               : column == SamplesModel::DiskRateColumn ? QColor(0x8c8c8c)
               : column == SamplesModel::H2dRateColumn  ? QColor(0x4e79a7)
                                                        : colorOf(m_model->devices().value(column - SamplesModel::FirstDeviceColumn));
    s->setPen(QPen(c, 2));
    QChart* chart = traffic ? m_traffic : rss ? m_rss : m_memory;
    chart->addSeries(s);
    s->attachAxis(traffic ? m_trafX : rss ? m_rssX : m_memX);
    s->attachAxis(traffic ? m_trafY : rss ? m_rssY : m_memY);
    m_series.insert(column, s);
    return s;
}

QLineSeries* RunCharts::deviceSeries(const QString& device) const
{
    const int c = m_model->columnOfDevice(device);
    return c < 0 ? nullptr : m_series.value(c);
}

QLineSeries* RunCharts::residentSetSeries() const { return m_series.value(SamplesModel::RssColumn); }

void RunCharts::setDispatchBytes(const QVector<DeviceBytes>& devices)
{
    m_devices = devices;
    rebuildDispatch();
}

void RunCharts::rebuildDispatch()
{
    m_bars->clear();
    m_dispX->clear();
    m_actual = nullptr;
    m_diskPassShown = m_model->diskPassBytes();
    if (m_devices.isEmpty())
        return;
    auto* planned = new QBarSet(tr("planned"));
    m_actual = new QBarSet(tr("actual"));
    planned->setColor(QColor(0xa0b4cc));
    m_actual->setColor(QColor(0x4e79a7));
    // Disk weights are not held: they are read from their files each forward
    // pass, so disk's actual bar is what the last pass read (none before one).
    auto actualOf = [&](const DeviceBytes& d) { return isDisk(d.device) ? m_diskPassShown : d.actual; };
    double maxBytes = 0;
    for (const DeviceBytes& d : m_devices)
        maxBytes = std::max({maxBytes, double(d.planned), double(actualOf(d))});
    double unit = 1;
    QString name;
    unitFor(maxBytes, &unit, &name);
    QStringList categories;
    for (const DeviceBytes& d : m_devices) {
        QString label = labelOf(d.device);
        if (isDisk(d.device))
            label += QStringLiteral("<br>") + tr("per pass");
        categories << label;
        *planned << double(d.planned) / unit;
        *m_actual << double(actualOf(d)) / unit;
    }
    m_bars->append(planned);
    m_bars->append(m_actual);
    m_dispX->append(categories);
    setTicks(m_dispY, maxBytes / unit * 1.05);
    m_dispY->setTitleText(name);
    applyPalette();
}

void RunCharts::clearDispatchBytes()
{
    m_devices.clear();
    rebuildDispatch();
}

void RunCharts::refresh()
{
    m_dirty = false;
    ++m_redraws;
    if (!m_devices.isEmpty() && m_model->diskPassBytes() != m_diskPassShown)
        rebuildDispatch();
    // Every device that holds weights gets a line; disk holds none (its weights
    // are read per pass: the dispatch chart's bar).
    const int rows = m_model->rowCount();
    const double tEnd = std::max(1.0, m_model->lastTime());
    const AxisTicks xTicks = AxisTicks::forTop(tEnd);
    const int buckets = std::max(50, static_cast<int>(m_memory->plotArea().width()));
    double topShare = 100; // the budget line is always in view
    for (const QString& d : m_model->devices()) {
        if (isDisk(d))
            continue;
        const int column = m_model->columnOfDevice(d);
        QLineSeries* s = seriesFor(column);
        // 100% is the device's own budget; without one, what the plan put there, else its peak.
        double whole = double(m_model->budgetOf(d));
        QString of = tr("of %1").arg(formatBytes(quint64(whole)));
        if (!(whole > 0))
            for (const DeviceBytes& b : m_devices)
                if (b.device == d && b.planned > 0) {
                    whole = double(b.planned);
                    of = tr("of the %1 planned").arg(formatBytes(b.planned));
                }
        if (!(whole > 0)) {
            whole = std::max(1.0, m_model->maxValue(column));
            of = tr("of its peak");
        }
        const quint64 now = rows ? quint64(m_model->value(rows - 1, column)) : 0;
        s->setName(tr("%1: %2 %3").arg(m_model->seriesName(column), formatBytes(now), of));
        QVector<QPointF> pts = m_model->points(column, 0, tEnd, buckets);
        for (QPointF& p : pts) {
            p.setY(100.0 * p.y() / whole);
            topShare = std::max(topShare, p.y());
        }
        s->replace(pts);
    }
    m_budgetLine->replace(QVector<QPointF>{{0, 100}, {xTicks.max, 100}});

    // The process's resident set and the throughput, each in its own unit.
    auto plotBytes = [&](std::initializer_list<int> columns, QValueAxis* axis, const QString& suffix) {
        double top = 0;
        for (int c : columns)
            top = std::max(top, m_model->maxValue(c));
        double unit = 1;
        QString name;
        unitFor(top, &unit, &name);
        for (int c : columns) {
            QVector<QPointF> pts = m_model->points(c, 0, tEnd, buckets);
            for (QPointF& p : pts)
                p.setY(p.y() / unit);
            m_series.value(c)->replace(pts);
        }
        setTicks(axis, top / unit * 1.08);
        axis->setTitleText(name + suffix);
    };
    plotBytes({SamplesModel::RssColumn}, m_rssY, tr(", resident set"));
    plotBytes({SamplesModel::DiskRateColumn, SamplesModel::H2dRateColumn}, m_trafY, tr("/s"));
    const quint64 rss = rows ? quint64(m_model->value(rows - 1, SamplesModel::RssColumn)) : 0;
    m_rss->setTitle(rows ? tr("Worker process: %1").arg(formatBytes(rss)) : tr("Worker process"));

    QVector<QPointF> marks;
    double lastX = -1;
    const double minGap = xTicks.max / std::max(1, buckets); // one marker per pixel column
    for (double t : m_model->tokenTimes())
        if (t - lastX >= minGap) {
            marks.push_back({t, 0});
            lastX = t;
        }
    m_memTokens->replace(marks);
    m_trafTokens->replace(marks);

    for (QValueAxis* x : {m_memX, m_rssX, m_trafX})
        setTicks(x, tEnd);
    setTicks(m_memY, std::max(110.0, topShare * 1.05)); // 0..125% while every device is within its budget
}

int RunCharts::memoryPointCount() const
{
    int n = 0;
    for (auto it = m_series.cbegin(); it != m_series.cend(); ++it)
        if (it.key() != SamplesModel::DiskRateColumn && it.key() != SamplesModel::H2dRateColumn)
            n += static_cast<int>(it.value()->count());
    return n;
}

int RunCharts::trafficPointCount() const
{
    return static_cast<int>(m_series.value(SamplesModel::DiskRateColumn)->count() +
                            m_series.value(SamplesModel::H2dRateColumn)->count());
}

int RunCharts::tokenMarkerCount() const { return static_cast<int>(m_memTokens->count()); }

} // namespace stowage
