// The run page's models and views without a worker: SamplesModel (rates
// from the cumulative counters, new devices as new columns, a bounded
// history that keeps peaks, at most one point per bucket), TraceModel and
// buildTimeline (one row per unit, the critical path), the timeline's
// geometry as a value, its tooltips, and the charts' timer that redraws only
// while visible. Expected values are written out by hand.
#include "runcharts.h"
#include "samplesmodel.h"
#include "timelinedelegate.h"
#include "timelinepanel.h"
#include "tracemodel.h"

#include <QAbstractItemModelTester>
#include <QBarCategoryAxis>
#include <QChart>
#include <QCheckBox>
#include <QSlider>
#include <QtTest>

using namespace stowage;

namespace {
RunSample sample(double t, quint64 gpu, quint64 rss, quint64 h2d, quint64 disk)
{
    RunSample s;
    s.t = t;
    s.resident = {{QStringLiteral("0"), gpu}, {QStringLiteral("cpu"), rss / 2}};
    s.rssBytes = rss;
    s.h2dBytes = h2d;
    s.diskReadBytes = disk;
    return s;
}

TraceSpan span(TraceSpan::Kind k, const QString& unit, double t0, double t1, quint64 bytes = 0, int step = 3)
{
    TraceSpan s;
    s.kind = k;
    s.unit = unit;
    s.device = QStringLiteral("0");
    s.step = step;
    s.t0 = t0;
    s.t1 = t1;
    s.bytes = bytes;
    return s;
}

const QVector<RunUnit> kUnits{{"a", "0"}, {"b", "0"}, {"c", "cpu"}};
} // namespace

class TestTimeline : public QObject {
    Q_OBJECT
private slots:
    void samplesRatesAndColumns();
    void samplesBoundedKeepPeaks();
    void samplesPointsOnePerBucket();
    void timelineCriticalPath();
    void traceModelRowsAndSteps();
    void panelScrubsAndFollows();
    void geometryMapsTimeAndHitTests();
    void chartsRedrawOnlyWhenVisible();
};

void TestTimeline::samplesRatesAndColumns()
{
    SamplesModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(m.columnCount(), int(SamplesModel::FirstDeviceColumn));
    m.addSample(sample(0.0, 100, 1000, 0, 0));
    m.addSample(sample(0.5, 300, 1000, 500, 2000));
    QCOMPARE(m.rowCount(), 2);
    QCOMPARE(m.devices(), QStringList({"0", "cpu"}));
    const int gpu = m.columnOfDevice("0");
    QCOMPARE(gpu, int(SamplesModel::FirstDeviceColumn));
    QCOMPARE(m.value(1, gpu), 300.0);
    QCOMPARE(m.value(1, SamplesModel::H2dRateColumn), 1000.0);  // 500 B in 0.5 s
    QCOMPARE(m.value(1, SamplesModel::DiskRateColumn), 4000.0); // 2000 B in 0.5 s
    QCOMPARE(m.value(0, SamplesModel::H2dRateColumn), 0.0);
    // GPU 1 appears later: a new column, zero in the earlier rows.
    RunSample s = sample(1.0, 300, 1000, 500, 2000);
    s.resident.push_back({QStringLiteral("1"), 77});
    m.addSample(s);
    QCOMPARE(m.columnCount(), int(SamplesModel::FirstDeviceColumn) + 3);
    QCOMPARE(m.value(0, m.columnOfDevice("1")), 0.0);
    QCOMPARE(m.value(2, m.columnOfDevice("1")), 77.0);
    QCOMPARE(m.value(2, SamplesModel::H2dRateColumn), 0.0); // nothing copied since
    m.setDeviceLabel("1", "GPU 1 (simulated)");
    QCOMPARE(m.headerData(m.columnOfDevice("1"), Qt::Horizontal).toString(), QString("GPU 1 (simulated)"));
    QCOMPARE(m.headerData(SamplesModel::RssColumn, Qt::Horizontal).toString(), QString("Worker process (resident set)"));
    m.clear();
    QCOMPARE(m.rowCount(), 0);
}

void TestTimeline::samplesBoundedKeepPeaks()
{
    SamplesModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    m.setCapacity(16);
    // An hour at 20 Hz, one spike of 5000 bytes at sample 40000.
    for (int i = 0; i < 72000; ++i)
        m.addSample(sample(i * 0.05, i == 40000 ? 5000 : 10, 1000, 0, 0));
    QVERIFY(m.rowCount() <= 16);
    QCOMPARE(m.samplesSeen(), quint64(72000));
    QCOMPARE(m.maxValue(m.columnOfDevice("0")), 5000.0);
    QVERIFY(m.stride() >= 72000 / 16);
    QCOMPARE(m.lastTime(), 71999 * 0.05);
    // Times stay increasing after every merge.
    for (int r = 1; r < m.rowCount(); ++r)
        QVERIFY(m.value(r, SamplesModel::TimeColumn) > m.value(r - 1, SamplesModel::TimeColumn));
}

void TestTimeline::samplesPointsOnePerBucket()
{
    SamplesModel m;
    for (int i = 0; i <= 100; ++i)
        m.addSample(sample(i * 0.1, i == 55 ? 999 : quint64(i), 1000, 0, 0));
    const int gpu = m.columnOfDevice("0");
    const QVector<QPointF> pts = m.points(gpu, 0, 10, 10);
    QCOMPARE(pts.size(), 10); // 101 samples, 10 buckets
    // Bucket 5 (t in [5, 6)) holds the spike: its maximum wins.
    QCOMPARE(pts[5].y(), 999.0);
    QCOMPARE(pts[0].y(), 9.0); // samples 0..9, the largest
    QVERIFY(m.points(gpu, 0, 10, 1000).size() == 101);
    QVERIFY(m.points(SamplesModel::TimeColumn, 0, 10, 10).isEmpty());
}

void TestTimeline::timelineCriticalPath()
{
    // a computes 0–1; b fetched 0.5–2 (waits 1–2), computes 2–3; c was prefetched 1–1.5 and computes at once 3–4.
    const QVector<TraceSpan> spans{span(TraceSpan::Compute, "a", 0, 1),
                                   span(TraceSpan::Fetch, "b", 0.5, 2, 4096),
                                   span(TraceSpan::Compute, "b", 2, 3),
                                   span(TraceSpan::Release, "b", 3, 3),
                                   span(TraceSpan::Prefetch, "c", 1, 1.5, 1024),
                                   span(TraceSpan::Compute, "c", 3, 4),
                                   span(TraceSpan::Compute, "other", 0, 9)};
    StepSummary s;
    const QVector<TimelineRow> rows = buildTimeline(kUnits, spans, &s);
    QCOMPARE(rows.size(), 3);
    QCOMPARE(s.step, 3);
    QCOMPARE(s.t0, 0.0);
    QCOMPARE(s.t1, 4.0);
    QCOMPARE(s.computeSeconds, 3.0);
    QCOMPARE(s.waitSeconds, 1.0); // b waited 1 s for its fetch
    QCOMPARE(rows[1].spans.size(), 3);
    QCOMPARE(rows[1].critical, QVector<bool>({true, true, false})); // fetch, compute, release
    QCOMPARE(rows[1].waitSeconds, 1.0);
    QCOMPARE(rows[1].movedBytes, quint64(4096));
    QCOMPARE(rows[2].critical, QVector<bool>({false, true})); // the prefetch was hidden
    QCOMPARE(rows[2].waitSeconds, 0.0);
    QCOMPARE(rows[0].critical, QVector<bool>({true}));
}

void TestTimeline::traceModelRowsAndSteps()
{
    TraceModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    m.setUnits(kUnits);
    QCOMPARE(m.rowCount(), 3);
    QCOMPARE(m.columnCount(), int(TraceModel::ColumnCount));
    QSignalSpy steps(&m, &TraceModel::stepsChanged);
    m.addSpans({span(TraceSpan::Compute, "a", 0, 1, 0, 0), span(TraceSpan::Compute, "b", 1, 2, 0, 0)});
    m.addSpans({span(TraceSpan::Compute, "a", 3, 3.5, 0, 1)});
    QCOMPARE(steps.count(), 2);
    QCOMPARE(m.steps(), QVector<int>({0, 1}));
    QCOMPARE(m.shownStep(), 1); // follows the latest
    QCOMPARE(m.row(0).spans.size(), 1);
    QCOMPARE(m.row(1).spans.size(), 0);
    m.showStep(0);
    QVERIFY(!m.following());
    QCOMPARE(m.row(1).spans.size(), 1);
    m.addSpans({span(TraceSpan::Compute, "b", 3.5, 4, 0, 1)}); // step 1 grows; step 0 stays on screen
    QCOMPARE(m.shownStep(), 0);
    QCOMPARE(m.index(0, TraceModel::TimelineColumn).data(TraceModel::RangeRole).toPointF(), QPointF(0, 2));
    QCOMPARE(m.index(2, TraceModel::DeviceColumn).data().toString(), QString("CPU"));
    m.showStep(-1);
    QCOMPARE(m.shownStep(), 1);
    QCOMPARE(m.summary().t1, 4.0);
    m.clear();
    QVERIFY(m.steps().isEmpty());
    QCOMPARE(m.rowCount(), 3);
}

void TestTimeline::panelScrubsAndFollows()
{
    TraceModel m;
    m.setUnits(kUnits);
    TimelinePanel p(&m);
    QCOMPARE(p.stepText(), QString("no steps yet"));
    for (int step = 0; step < 3; ++step)
        m.addSpans({span(TraceSpan::Compute, "a", step, step + 0.5, 0, step)});
    QCOMPARE(p.stepSlider()->maximum(), 2);
    QCOMPARE(p.stepSlider()->value(), 2); // following: the newest token
    QCOMPARE(p.stepText(), QString("step 2 of 2"));
    // Scrubbing back stops following and shows that token's spans.
    p.stepSlider()->setValue(0);
    QVERIFY(!p.followBox()->isChecked());
    QCOMPARE(m.shownStep(), 0);
    QCOMPARE(p.stepText(), QString("step 0 of 2"));
    QCOMPARE(m.index(0, TraceModel::TimelineColumn).data(TraceModel::RangeRole).toPointF(), QPointF(0, 0.5));
    // A new token arrives: the range grows, the scrubbed-to token stays.
    m.addSpans({span(TraceSpan::Compute, "a", 3, 3.5, 0, 3)});
    QCOMPARE(p.stepSlider()->maximum(), 3);
    QCOMPARE(p.stepSlider()->value(), 0);
    QCOMPARE(m.shownStep(), 0);
    QCOMPARE(p.stepText(), QString("step 0 of 3"));
    // Follow again: back to the newest, and the slider with it.
    p.followBox()->setChecked(true);
    QCOMPARE(m.shownStep(), 3);
    QCOMPARE(p.stepSlider()->value(), 3);
    QCOMPARE(p.stepText(), QString("step 3 of 3"));
}

void TestTimeline::geometryMapsTimeAndHitTests()
{
    const TimelineGeometry g = TimelineGeometry::forCell(QRect(10, 0, 206, 20), 1.0, 3.0, 3);
    QCOMPARE(g.rect, QRectF(13, 2, 200, 16));
    QCOMPARE(g.xOf(1.0), 13.0);
    QCOMPARE(g.xOf(2.0), 113.0);
    QCOMPARE(g.timeAt(213.0), 3.0);
    // A span shorter than a pixel is still 1 px wide; compute takes the lower lane.
    const QRectF tiny = g.spanRect(span(TraceSpan::Fetch, "a", 2.0, 2.0001));
    QCOMPARE(tiny.width(), 1.0);
    QVERIFY(tiny.bottom() <= g.rect.center().y());
    QVERIFY(g.spanRect(span(TraceSpan::Compute, "a", 2, 2.5)).top() >= g.rect.center().y());
    const QVector<TraceSpan> spans{span(TraceSpan::Fetch, "a", 1.0, 2.5), span(TraceSpan::Compute, "a", 1.5, 1.6),
                                   span(TraceSpan::Compute, "a", 2.6, 2.9)};
    QCOMPARE(spansAt(g, spans, g.xOf(1.55)), QVector<int>({0, 1}));
    QCOMPARE(spansAt(g, spans, g.xOf(2.7)), QVector<int>({2}));
    QVERIFY(spansAt(g, spans, g.xOf(1.2) + 0.0).contains(0));
    QVERIFY(spansAt(g, {}, 50).isEmpty());
    // The tooltip names bytes and times.
    TraceModel m;
    m.setUnits(kUnits);
    m.addSpans({span(TraceSpan::Fetch, "b", 0.5, 2, 4096), span(TraceSpan::Compute, "b", 2, 3), span(TraceSpan::Compute, "a", 0, 1)});
    const QModelIndex cell = m.index(1, TraceModel::TimelineColumn);
    const QRect r(0, 0, 406, 20);
    const TimelineGeometry cg = TimelineGeometry::forCell(r, 0, 3);
    const QString tip = TimelineDelegate::toolTipAt(cell, r, cg.xOf(1.0));
    QVERIFY2(tip.contains("fetch") && tip.contains("4.00 KiB") && tip.contains("1500.000 ms") && tip.contains("critical"),
             qPrintable(tip));
}

void TestTimeline::chartsRedrawOnlyWhenVisible()
{
    SamplesModel m;
    m.setBudgets({{"0", 400}, {"cpu", 100000}});
    RunCharts charts(&m);
    charts.resize(900, 600);
    const quint64 before = charts.redraws();
    for (int i = 0; i < 50; ++i)
        m.addSample(sample(i * 0.05, 100 + i, 2000, quint64(i) * 100, 0));
    m.addToken(1.0);
    QTest::qWait(10 * RunCharts::kRedrawMs); // hidden: paused
    QCOMPARE(charts.redraws(), before);
    charts.show();
    QVERIFY(QTest::qWaitForWindowExposed(&charts));
    QTRY_VERIFY_WITH_TIMEOUT(charts.redraws() > before, 10000);
    QVERIFY(charts.memoryPointCount() > 0);
    QVERIFY(charts.memoryPointCount() <= 3 * 50); // GPU 0, RAM and the resident set: one point per sample at most
    QVERIFY(charts.trafficPointCount() > 0);
    QCOMPARE(charts.tokenMarkerCount(), 1);
    // Nothing new: no redraw.
    const quint64 settled = charts.redraws();
    QTest::qWait(5 * RunCharts::kRedrawMs);
    QCOMPARE(charts.redraws(), settled);
    charts.setDispatchBytes({{"0", 1000, 900, "GPU 0"}, {"cpu", 500, 500, "RAM"}, {"disk", 800, 0, "disk"}});
    // Disk weights are read from their files each pass: the bar says so.
    auto* axis = qobject_cast<QBarCategoryAxis*>(charts.dispatchChart()->axes(Qt::Horizontal).value(0));
    QVERIFY(axis);
    const QStringList cats = axis->categories();
    QCOMPARE(cats.size(), 3);
    QVERIFY2(cats[2].contains("per pass"), qPrintable(cats.join(" | ")));
    QVERIFY2(!cats[1].contains("per pass"), qPrintable(cats[1]));
}

QTEST_MAIN(TestTimeline)
#include "tst_timeline.moc"
