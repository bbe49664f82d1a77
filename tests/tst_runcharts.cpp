// The Run page's graphs without a worker (issue 33, "Graphs that read
// right"): every device's weights against its own budget on one axis (RAM
// scaled by RAM's budget, not drawn on the process's resident-set axis), the
// resident set on its own chart, disk's actual bar = the bytes the last pass
// read in place, tick labels that differ from each other on empty and tiny
// ranges, and a chart background that follows a dark palette (pixels read
// back from a grab). Expected values are worked out by hand in the comments.
#include "runcharts.h"
#include "samplesmodel.h"
#include "themecolors.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QLineSeries>
#include <QValueAxis>
#include <QtTest>

using namespace stowage;

namespace {
constexpr quint64 MiB = 1ull << 20;

RunSample sample(double t, quint64 gpu, quint64 ram, quint64 rss, quint64 diskPass = 0)
{
    RunSample s;
    s.t = t;
    s.resident = {{QStringLiteral("0"), gpu}, {QStringLiteral("cpu"), ram}};
    s.rssBytes = rss;
    s.diskPassBytes = diskPass;
    return s;
}

// The labels Qt Charts prints on a fixed-tick value axis: the label format
// applied to each of tickCount evenly spaced values.
QStringList tickLabels(const QValueAxis* a)
{
    QStringList out;
    const QByteArray format = a->labelFormat().toLatin1();
    for (int i = 0; i < a->tickCount(); ++i)
        out << QString::asprintf(format.constData(), a->min() + i * (a->max() - a->min()) / (a->tickCount() - 1));
    return out;
}

QValueAxis* axisOf(QChart* c, Qt::Orientation o)
{
    return qobject_cast<QValueAxis*>(c->axes(o).value(0));
}

QPalette darkPalette()
{
    QPalette p;
    p.setColor(QPalette::Window, QColor(0x2b2b2b));
    p.setColor(QPalette::WindowText, QColor(0xe6e6e6));
    p.setColor(QPalette::Base, QColor(0x1e1e1e));
    p.setColor(QPalette::AlternateBase, QColor(0x262626));
    p.setColor(QPalette::Text, QColor(0xe6e6e6));
    p.setColor(QPalette::Button, QColor(0x353535));
    p.setColor(QPalette::ButtonText, QColor(0xe6e6e6));
    return p;
}

// The share of a grid of pixels over the image whose lightness is below 0.3.
double darkShare(const QImage& img)
{
    int dark = 0, all = 0;
    for (int y = 5; y < img.height(); y += 7)
        for (int x = 5; x < img.width(); x += 7, ++all)
            dark += QColor(img.pixel(x, y)).lightnessF() < 0.3;
    return all ? double(dark) / all : 0;
}
} // namespace

class TestRunCharts : public QObject {
    Q_OBJECT
private slots:
    void axisTicks_data();
    void axisTicks();
    void emptyChartsHaveDistinctTickLabels();
    void ramScaledByRamBudget();
    void diskInPlaceShowsBytesReadPerPass();
    void chartsFollowDarkPalette();
    void tintsFollowDarkPalette();
    void headroomAlarm();
};

void TestRunCharts::axisTicks_data()
{
    QTest::addColumn<double>("top");
    QTest::addColumn<double>("max");
    QTest::addColumn<int>("count");
    QTest::addColumn<int>("decimals");
    // top/5 rounded up to 1, 2, 2.5 or 5 × 10^k; the axis ends at the first multiple of it ≥ top.
    QTest::newRow("empty") << 0.0 << 1.0 << 6 << 1;          // 0.2 steps: 0.0 … 1.0
    QTest::newRow("percent") << 100.0 << 100.0 << 6 << 0;   // 20
    QTest::newRow("just over") << 110.0 << 125.0 << 6 << 0; // 22 -> 25
    QTest::newRow("tiny") << 0.3 << 0.3 << 4 << 1;          // 0.06 -> 0.1
    QTest::newRow("quarter") << 1.1 << 1.25 << 6 << 2;      // 0.22 -> 0.25: two decimals
    QTest::newRow("seven") << 7.0 << 8.0 << 5 << 0;         // 1.4 -> 2
}

void TestRunCharts::axisTicks()
{
    QFETCH(double, top);
    const AxisTicks t = AxisTicks::forTop(top);
    QTEST(t.max, "max");
    QTEST(t.count, "count");
    QTEST(t.decimals, "decimals");
}

void TestRunCharts::emptyChartsHaveDistinctTickLabels()
{
    SamplesModel m;
    RunCharts charts(&m);
    charts.resize(1000, 600);
    charts.refresh();
    // Nothing yet: memory reads 0..125% of budget, the others 0..1 in 0.2 steps.
    QCOMPARE(tickLabels(charts.memoryAxis()), QStringList({"0", "25", "50", "75", "100", "125"}));
    const QStringList unit{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"};
    QCOMPARE(tickLabels(axisOf(charts.trafficChart(), Qt::Vertical)), unit);
    QCOMPARE(tickLabels(axisOf(charts.residentSetChart(), Qt::Vertical)), unit);
    QCOMPARE(tickLabels(axisOf(charts.memoryChart(), Qt::Horizontal)), unit);
    // Half a second of a tiny run: still six different labels on every axis.
    m.addSample(sample(0.0, 1000, 2000, 3000));
    m.addSample(sample(0.3, 1000, 2000, 3000));
    charts.refresh();
    for (QChart* c : {charts.memoryChart(), charts.residentSetChart(), charts.trafficChart()})
        for (Qt::Orientation o : {Qt::Horizontal, Qt::Vertical}) {
            const QStringList labels = tickLabels(axisOf(c, o));
            QVERIFY2(labels.size() >= 2 && QSet<QString>(labels.begin(), labels.end()).size() == labels.size(),
                     qPrintable(c->title() + ": " + labels.join(' ')));
        }
    // The time axis shows at least a second; 3000 bytes of resident set read 0..4 KiB.
    QCOMPARE(tickLabels(axisOf(charts.memoryChart(), Qt::Horizontal)), unit);
    QCOMPARE(tickLabels(axisOf(charts.residentSetChart(), Qt::Vertical)), QStringList({"0", "1", "2", "3", "4"}));
}

void TestRunCharts::ramScaledByRamBudget()
{
    SamplesModel m;
    m.setBudgets({{"0", 4 * MiB}, {"cpu", 10 * MiB}, {"disk", 0}});
    RunCharts charts(&m);
    charts.resize(1000, 600);
    // The plan put 1 MiB on GPU 0 and 5 MiB in RAM; the process's resident set is 500 MiB.
    for (int i = 0; i <= 10; ++i)
        m.addSample(sample(i * 0.1, 1 * MiB, 5 * MiB, 500 * MiB));
    charts.refresh();
    QLineSeries* ram = charts.deviceSeries("cpu");
    QLineSeries* gpu = charts.deviceSeries("0");
    QVERIFY(ram && gpu);
    // One axis, each device against its own budget: RAM 5/10 = 50%, GPU 0 1/4 = 25%.
    QVERIFY(ram->attachedAxes().contains(charts.memoryAxis()));
    QVERIFY(gpu->attachedAxes().contains(charts.memoryAxis()));
    QVERIFY(ram->count() > 0 && gpu->count() > 0);
    QCOMPARE(ram->at(ram->count() - 1).y(), 50.0);
    QCOMPARE(gpu->at(gpu->count() - 1).y(), 25.0);
    QVERIFY2(ram->name().contains("5.00 MiB of 10.00 MiB"), qPrintable(ram->name())); // the bytes behind the share
    // Both within budget: the axis stops at 125%, not at the resident set's 500.
    QCOMPARE(charts.memoryAxis()->max(), 125.0);
    // The resident set is on its own chart, in MiB: 500.
    QLineSeries* rss = charts.residentSetSeries();
    QVERIFY(charts.residentSetChart()->series().contains(rss));
    QVERIFY(!charts.memoryChart()->series().contains(rss));
    QCOMPARE(rss->at(rss->count() - 1).y(), 500.0);
    QVERIFY2(charts.residentSetChart()->title().contains("500"), qPrintable(charts.residentSetChart()->title()));
    // A device over its budget is over the line: 6 MiB of 4 = 150%.
    m.addSample(sample(1.1, 6 * MiB, 5 * MiB, 500 * MiB));
    charts.refresh();
    QCOMPARE(gpu->at(gpu->count() - 1).y(), 150.0);
    QVERIFY(charts.memoryAxis()->max() >= 150.0);
}

void TestRunCharts::diskInPlaceShowsBytesReadPerPass()
{
    SamplesModel m;
    RunCharts charts(&m);
    charts.resize(1000, 600);
    charts.setDispatchBytes({{"0", 1 * MiB, 1 * MiB, "GPU 0"}, {"cpu", 2 * MiB, 2 * MiB, "RAM"}, {"disk", 3 * MiB, 0, "disk"}});
    QVERIFY(charts.actualBars());
    // Before a pass nothing was read: 0. Bars are in KiB (the largest, 3 MiB, is under 8 MiB).
    QCOMPARE(charts.actualBars()->at(2), 0.0);
    QCOMPARE(charts.actualBars()->at(1), 2048.0);
    // A pass read all 3 MiB of the disk weights in place: the actual bar is 3072 KiB.
    m.addSample(sample(0.5, 1 * MiB, 2 * MiB, 200 * MiB, 3 * MiB));
    charts.refresh();
    QCOMPARE(charts.actualBars()->count(), 3);
    QCOMPARE(charts.actualBars()->at(2), 3072.0);
    QCOMPARE(axisOf(charts.dispatchChart(), Qt::Vertical)->titleText(), QString("KiB"));
    auto* cats = qobject_cast<QBarCategoryAxis*>(charts.dispatchChart()->axes(Qt::Horizontal).value(0));
    QVERIFY(cats);
    QVERIFY2(cats->categories().value(2).contains("per pass"), qPrintable(cats->categories().join(" | ")));
}

void TestRunCharts::chartsFollowDarkPalette()
{
    SamplesModel m;
    m.setBudgets({{"0", 4 * MiB}, {"cpu", 10 * MiB}});
    for (int i = 0; i <= 10; ++i)
        m.addSample(sample(i * 0.1, 1 * MiB, 5 * MiB, 300 * MiB));
    RunCharts charts(&m);
    charts.resize(900, 500);
    charts.setDispatchBytes({{"0", 1 * MiB, 1 * MiB, "GPU 0"}, {"disk", 3 * MiB, 0, "disk"}});
    charts.show();
    QVERIFY(QTest::qWaitForWindowExposed(&charts));
    charts.refresh();
    // Under the default (light) palette the charts are light: the test can tell.
    QVERIFY2(darkShare(charts.grab().toImage()) < 0.2, "light palette, dark charts");
    charts.setPalette(darkPalette());
    charts.refresh();
    const QImage img = charts.grab().toImage();
    // Lines, labels and bars cover a little; the background (0x1e1e1e, lightness 0.12) the rest.
    const double share = darkShare(img);
    QVERIFY2(share > 0.8, qPrintable(QString::number(share)));
    QCOMPARE(charts.memoryChart()->backgroundBrush().color(), QColor(0x1e1e1e));
}

void TestRunCharts::tintsFollowDarkPalette()
{
    const QPalette dark = darkPalette();
    QVERIFY(isDarkPalette(dark));
    QVERIFY(!isDarkPalette(QPalette(QColor(0xefefef))));
    // The caption's light tint, #def0d8, is itself under a light palette; under the
    // dark one, 22% of it over the window 0x2b: 43 + 0.22 × (222 − 43) = 82.4 (red).
    QCOMPARE(tintFor(QPalette(QColor(0xefefef)), QColor(0xdef0d8)), QColor(0xdef0d8));
    const QColor t = tintFor(dark, QColor(0xdef0d8));
    QVERIFY2(std::abs(t.red() - 82) <= 1 && t.lightnessF() < 0.4, qPrintable(t.name()));
    QVERIFY(tintStyle(dark, QColor(0xdef0d8)).contains("color: #e6e6e6"));
}

void TestRunCharts::headroomAlarm()
{
    // GPU 0 (simulated) with 4 MiB, RAM with 16 GiB, the disk unlimited.
    SamplesModel m;
    m.setBudgets({{"0", 4ull << 20}, {"cpu", 16ull << 30}, {"disk", 100ull << 30}});
    m.setDeviceLabel("0", "GPU 0 (simulated)");
    RunSample s;
    // 3.7 MiB of 4: 92.5%, below 95%: no alarm; the disk never alarms.
    s.resident = {{"0", 3'879'731}, {"cpu", 1ull << 30}, {"disk", 200ull << 30}};
    QCOMPARE(m.headroomAlarm(s), QString());
    // 3.9 MiB: 97.5%, floored to 97.
    s.resident[0].second = 4'089'446;
    QCOMPARE(m.headroomAlarm(s),
             QString("GPU 0 (simulated) holds 97% of its budget (3.90 MiB of 4.00 MiB): a longer context may not fit."));
    // RAM past its budget (17 of 16 GiB) is the nearer to running out: it is the one said.
    s.resident[1].second = 17ull << 30;
    QCOMPARE(m.headroomAlarm(s),
             QString("CPU holds 17.00 GiB, past its 16.00 GiB budget: the room kept for other programs is in use."));
}

QTEST_MAIN(TestRunCharts)
#include "tst_runcharts.moc"
