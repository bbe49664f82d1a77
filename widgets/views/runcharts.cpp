#include "runcharts.h"

#include "display.h"
#include "samplesmodel.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
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

QChartView* viewOf(QChart* chart, QWidget* parent)
{
    auto* v = new QChartView(chart, parent);
    v->setRenderHint(QPainter::Antialiasing, true);
    v->setMinimumSize(200, 170);
    return v;
}

double niceCeil(double v)
{
    if (v <= 0)
        return 1;
    const double p = std::pow(10.0, std::floor(std::log10(v)));
    for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
        if (m * p >= v)
            return m * p;
    return 10 * p;
}
} // namespace

RunCharts::RunCharts(SamplesModel* model, QWidget* parent) : QWidget(parent), m_model(model)
{
    m_memory = makeChart(tr("Memory per device"));
    m_traffic = makeChart(tr("Disk read and host-to-device throughput"));
    m_dispatch = makeChart(tr("After dispatch: planned vs actual bytes"));

    auto axes = [](QChart* c, QValueAxis** x, QValueAxis** y) {
        *x = new QValueAxis;
        *y = new QValueAxis;
        (*x)->setTitleText(tr("seconds since dispatch"));
        (*x)->setLabelFormat(QStringLiteral("%.0f"));
        (*y)->setLabelFormat(QStringLiteral("%.0f"));
        (*x)->setRange(0, 10);
        (*y)->setRange(0, 1);
        c->addAxis(*x, Qt::AlignBottom);
        c->addAxis(*y, Qt::AlignLeft);
    };
    axes(m_memory, &m_memX, &m_memY);
    axes(m_traffic, &m_trafX, &m_trafY);
    m_memRam = new QValueAxis;
    m_memRam->setLabelFormat(QStringLiteral("%.0f"));
    m_memRam->setRange(0, 1);
    m_memory->addAxis(m_memRam, Qt::AlignRight);
    for (QScatterSeries** s : {&m_memTokens, &m_trafTokens}) {
        *s = new QScatterSeries;
        (*s)->setName(tr("token"));
        (*s)->setMarkerShape(QScatterSeries::MarkerShapeTriangle);
        (*s)->setMarkerSize(7);
        (*s)->setColor(QColor(0x303030));
        (*s)->setBorderColor(Qt::transparent);
    }
    m_memory->addSeries(m_memTokens);
    m_memTokens->attachAxis(m_memX);
    m_memTokens->attachAxis(m_memY);
    m_traffic->addSeries(m_trafTokens);
    m_trafTokens->attachAxis(m_trafX);
    m_trafTokens->attachAxis(m_trafY);
    seriesFor(SamplesModel::RssColumn);
    seriesFor(SamplesModel::DiskRateColumn);
    seriesFor(SamplesModel::H2dRateColumn);

    m_bars = new QBarSeries;
    m_dispatch->addSeries(m_bars);
    m_dispX = new QBarCategoryAxis;
    m_dispY = new QValueAxis;
    m_dispY->setLabelFormat(QStringLiteral("%.0f"));
    m_dispatch->addAxis(m_dispX, Qt::AlignBottom);
    m_dispatch->addAxis(m_dispY, Qt::AlignLeft);
    m_bars->attachAxis(m_dispX);
    m_bars->attachAxis(m_dispY);

    auto* grid = new QGridLayout(this);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->setSpacing(4);
    grid->addWidget(viewOf(m_memory, this), 0, 0, 1, 2);
    grid->addWidget(viewOf(m_traffic, this), 1, 0);
    grid->addWidget(viewOf(m_dispatch, this), 1, 1);
    grid->setColumnStretch(0, 3);
    grid->setColumnStretch(1, 2);

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

QChart* RunCharts::makeChart(const QString& title)
{
    auto* c = new QChart;
    c->setTitle(title);
    QFont f = c->titleFont();
    f.setBold(true);
    f.setPointSizeF(f.pointSizeF() * 0.95);
    c->setTitleFont(f);
    c->setMargins(QMargins(4, 2, 4, 2));
    c->setBackgroundRoundness(0);
    c->legend()->setAlignment(Qt::AlignRight);
    c->legend()->setMarkerShape(QLegend::MarkerShapeRectangle);
    c->setAnimationOptions(QChart::NoAnimation);
    return c;
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
    QString device = column >= SamplesModel::FirstDeviceColumn
                         ? m_model->devices().value(column - SamplesModel::FirstDeviceColumn)
                         : QString();
    auto* s = new QLineSeries;
    s->setName(m_model->seriesName(column));
    QColor c = column == SamplesModel::RssColumn       ? colorOf(QStringLiteral("cpu"))
               : column == SamplesModel::DiskRateColumn ? QColor(0x8c8c8c)
               : column == SamplesModel::H2dRateColumn  ? QColor(0x4e79a7)
                                                        : colorOf(device);
    s->setPen(QPen(c, 2));
    QChart* chart = traffic ? m_traffic : m_memory;
    chart->addSeries(s);
    s->attachAxis(traffic ? m_trafX : m_memX);
    s->attachAxis(traffic ? m_trafY : column == SamplesModel::RssColumn ? m_memRam : m_memY);
    m_series.insert(column, s);
    return s;
}

QLineSeries* RunCharts::budgetSeriesFor(const QString& device)
{
    if (QLineSeries* s = m_budgetLines.value(device))
        return s;
    auto* s = new QLineSeries;
    const auto d = Device::parse(device.toStdString());
    s->setName(tr("%1 budget").arg(d ? deviceLabel(*d) : device));
    s->setPen(QPen(colorOf(device), 1.2, Qt::DashLine));
    m_memory->addSeries(s);
    s->attachAxis(m_memX);
    s->attachAxis(device == QLatin1String("cpu") ? m_memRam : m_memY);
    m_budgetLines.insert(device, s);
    return s;
}

void RunCharts::setDispatchBytes(const QVector<DeviceBytes>& devices)
{
    m_devices = devices;
    m_bars->clear();
    m_dispX->clear();
    auto* planned = new QBarSet(tr("planned"));
    auto* actual = new QBarSet(tr("actual"));
    planned->setColor(QColor(0xa0b4cc));
    actual->setColor(QColor(0x4e79a7));
    double maxBytes = 0;
    for (const DeviceBytes& d : devices)
        maxBytes = std::max({maxBytes, double(d.planned), double(d.actual)});
    double unit = 1;
    QString name;
    unitFor(maxBytes, &unit, &name);
    QStringList categories;
    for (const DeviceBytes& d : devices) {
        const auto dev = Device::parse(d.device.toStdString());
        QString label = dev ? deviceLabel(*dev) : d.device;
        // Disk weights are read from their files each step: none held after
        // dispatch is the design, not a failed load; the label says so.
        if (dev && dev->kind == Device::Disk && d.actual == 0 && d.planned > 0)
            label += QStringLiteral("<br>") + tr("in place");
        categories << label;
        *planned << double(d.planned) / unit;
        *actual << double(d.actual) / unit;
    }
    m_bars->append(planned);
    m_bars->append(actual);
    m_dispX->append(categories);
    m_dispY->setRange(0, niceCeil(maxBytes / unit * 1.05));
    m_dispY->applyNiceNumbers();
    m_dispY->setTitleText(name);
}

void RunCharts::clearDispatchBytes()
{
    m_devices.clear();
    m_bars->clear();
    m_dispX->clear();
}

void RunCharts::refresh()
{
    m_dirty = false;
    ++m_redraws;
    // New device columns become series; "cpu" and "disk" are shown as the resident set.
    for (const QString& d : m_model->devices()) {
        if (d == QLatin1String("cpu") || d == QLatin1String("disk"))
            continue;
        QLineSeries* s = seriesFor(m_model->columnOfDevice(d));
        s->setName(m_model->seriesName(m_model->columnOfDevice(d)));
    }
    const double tEnd = std::max(1.0, m_model->lastTime());
    const double xMax = niceCeil(tEnd);
    const int buckets = std::max(50, static_cast<int>(m_memory->plotArea().width()));

    // Three scales: device memory (left), the worker's resident set with the
    // RAM budget (right: LibTorch alone holds ~150 MiB, which would flatten a
    // small model's GPU lines), and throughput.
    enum Scale { Devices, Ram, Traffic };
    auto scaleOf = [](int column) {
        return column == SamplesModel::RssColumn ? Ram
               : column == SamplesModel::DiskRateColumn || column == SamplesModel::H2dRateColumn ? Traffic
                                                                                                 : Devices;
    };
    double top[3] = {0, 0, 0};
    bool hasDevices = false;
    for (auto it = m_series.cbegin(); it != m_series.cend(); ++it) {
        const Scale sc = scaleOf(it.key());
        top[sc] = std::max(top[sc], m_model->maxValue(it.key()));
        hasDevices = hasDevices || sc == Devices;
    }
    // A budget far above what the run uses would flatten every line: such
    // budgets stay in the legend, marked off scale, and out of the range.
    const double dataTop[3] = {top[0], top[1], top[2]};
    auto budgetScale = [](const QString& device) { return device == QLatin1String("cpu") ? Ram : Devices; };
    auto onScale = [&](const QString& device, quint64 bytes) {
        const double d = dataTop[budgetScale(device)];
        return d <= 0 || double(bytes) <= 3 * d;
    };
    for (const auto& [device, bytes] : m_model->budgets())
        if (device != QLatin1String("disk") && onScale(device, bytes))
            top[budgetScale(device)] = std::max(top[budgetScale(device)], double(bytes));
    double unit[3] = {1, 1, 1};
    QString unitName[3];
    for (int i = 0; i < 3; ++i)
        unitFor(top[i], &unit[i], &unitName[i]);

    for (auto it = m_series.cbegin(); it != m_series.cend(); ++it) {
        QVector<QPointF> pts = m_model->points(it.key(), 0, tEnd, buckets);
        const double u = unit[scaleOf(it.key())];
        for (QPointF& p : pts)
            p.setY(p.y() / u);
        it.value()->replace(pts);
    }
    for (const auto& [device, bytes] : m_model->budgets()) {
        if (device == QLatin1String("disk"))
            continue;
        QLineSeries* line = budgetSeriesFor(device);
        const auto d = Device::parse(device.toStdString());
        const QString label = tr("%1 budget %2").arg(d ? deviceLabel(*d) : device, formatBytes(bytes));
        if (onScale(device, bytes)) {
            const double y = double(bytes) / unit[budgetScale(device)];
            line->setName(label);
            line->replace(QVector<QPointF>{{0, y}, {xMax, y}});
        } else {
            line->setName(tr("%1 (off scale)").arg(label));
            line->clear();
        }
    }
    QVector<QPointF> marks;
    double lastX = -1;
    const double minGap = xMax / std::max(1, buckets); // one marker per pixel column
    for (double t : m_model->tokenTimes())
        if (t - lastX >= minGap) {
            marks.push_back({t, 0});
            lastX = t;
        }
    m_memTokens->replace(marks);
    m_trafTokens->replace(marks);

    const QString xFormat = xMax < 5 ? QStringLiteral("%.1f") : QStringLiteral("%.0f");
    for (QValueAxis* x : {m_memX, m_trafX}) {
        x->setRange(0, xMax);
        x->setLabelFormat(xFormat);
        x->applyNiceNumbers();
    }
    auto setY = [](QValueAxis* axis, double max, const QString& title) {
        axis->setRange(0, niceCeil(std::max(1.0, max * 1.08)));
        axis->applyNiceNumbers();
        axis->setTitleText(title);
    };
    setY(m_memY, top[Devices] / unit[Devices], tr("devices, %1").arg(unitName[Devices]));
    setY(m_memRam, top[Ram] / unit[Ram], tr("resident set, %1").arg(unitName[Ram]));
    setY(m_trafY, top[Traffic] / unit[Traffic], unitName[Traffic] + tr("/s"));
    m_memY->setVisible(hasDevices);
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
