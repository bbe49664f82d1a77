// The Plan page's "Context growth" tab offscreen at 96 DPI: for an imported
// map of the tiny Llama tst_contextsweep works out by hand, the sentences,
// the crossing dots and the axes show those figures; a change of budget
// re-plans and the chart follows the new plan (never the old one); the
// chart's surfaces follow a dark palette.
#include "budgetmodel.h"
#include "contextchart.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "stowage/kvcache.h"

#include <QApplication>
#include <QChart>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QScatterSeries>
#include <QSignalSpy>
#include <QTabWidget>
#include <QValueAxis>
#include <QtTest>

#include <filesystem>

using namespace stowage;

namespace {
MainWindow::Options fixedMachine() { return {false, false, {}, false}; }

// tst_contextsweep's model and map: GPU 0 holds 321,936 + 1,792c bytes at
// context c (every layer's cache: the layers in RAM and on disk compute on
// GPU 0), the CPU 148,688 + 768c; with every cache in RAM 321,936 + 768c
// and 148,688 + 1,792c.
const char* kMap = R"({"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0, "model.layers.2": "cpu",
  "model.layers.3": "disk", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": 0})";
} // namespace

class TestContextChart : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_dir;
    nlohmann::json m_config;

private slots:
    void initTestCase()
    {
        QApplication::setOrganizationName("StowageTest");
        QApplication::setApplicationName("tst_contextchart");
        m_dir = m_tmp.path().toStdString() + "/llama";
        std::filesystem::create_directories(m_dir);
        const fixtures::LlamaShape s{100, 64, 128, 4, 4, 2, true};
        fixtures::writeSharded(m_dir, fixtures::llamaTensors(s, DType::F32), 1, true, /*writeShards=*/false);
        m_config = fixtures::llamaConfig(s, DType::F32);
        m_config["max_position_embeddings"] = 4096;
        fixtures::writeJson(m_dir + "/config.json", m_config);
    }

    void showsWhereEachDeviceRunsOut()
    {
        MainWindow w(fixedMachine());
        w.resize(1400, 900);
        w.show();
        QSignalSpy opened(&w, &MainWindow::checkpointOpened);
        w.openCheckpoint(QString::fromStdString(m_dir));
        QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 10000);
        QVERIFY(opened[0][0].toBool());
        PlanningPage* page = w.planningPage();
        BudgetModel* m = w.budgetModel();
        m->addSimulatedGpu("GPU", QString(), 4'000'000);
        QVERIFY(m->setBudget(m->rowOf(Device::gpu(0)), 1'000'000));
        QVERIFY(m->setBudget(m->rowOf(Device::cpu()), 500'000));
        QVERIFY(page->importMap(QString::fromLatin1(kMap), "map.json"));
        page->outlookTabs()->setCurrentWidget(page->contextChart());

        ContextChart* c = page->contextChart();
        QCOMPARE(c->summary(), QString("GPU 0 runs out at token 379 with batch 1; 883 with the KV cache in RAM\n"
                                       "RAM runs out at token 458 with batch 1; 197 with the KV cache in RAM"));
        // a dot on the budget line where each runs out
        const QList<QPointF> dots = c->crossings()->points();
        QCOMPARE(dots.size(), 2);
        QCOMPARE(dots[0], QPointF(379, 100));
        QCOMPARE(dots[1], QPointF(458, 100));
        // to the model's longest context, max_position_embeddings 4,096
        QCOMPARE(c->contextAxis()->min(), 1.0);
        QCOMPARE(c->contextAxis()->max(), 4096.0);
        // GPU 0 at 4,096: (321,936 + 1,792 x 4,096) / 1,000,000 = 766.2%: the axis stops at 300%
        QLineSeries* gpu = c->deviceSeries("0");
        QVERIFY(gpu);
        QCOMPARE(gpu->points().back().x(), 4096.0);
        QVERIFY(qAbs(gpu->points().back().y() - 766.1968) < 1e-9);
        QCOMPARE(gpu->points().front(), QPointF(1, 100.0 * (321'936 + 1'792) / 1'000'000));
        QCOMPARE(c->shareAxis()->max(), 300.0);
        // the line passes through its dot: at 379, (321,936 + 1,792 x 379) / 1,000,000 = 100.1104%
        bool through = false;
        for (const QPointF& p : gpu->points())
            through = through || (p.x() == 379 && qAbs(p.y() - 100.1104) < 1e-9);
        QVERIFY(through);
        QVERIFY(c->deviceSeries("cpu"));
        QVERIFY(!c->deviceSeries("disk")); // no budget share for the disk

        // A new budget re-plans; the chart follows the plan now on screen.
        QVERIFY(m->setBudget(m->rowOf(Device::gpu(0)), 2'000'000));
        QVERIFY(!page->showingImportedMap());
        const auto plan = page->plan();
        const ContextSweep now = sweepContext(ModelConfig::parse(m_config.dump(), "config.json"), *page->tree(),
                                              plan->deviceMap, plan->budgets, 1, 4096);
        QStringList lines;
        for (const std::string& l : describeContextSweep(now))
            lines << QString::fromStdString(l);
        QCOMPARE(c->summary(), lines.join('\n'));
        QVERIFY(c->summary() != QString("GPU 0 runs out at token 379 with batch 1; 883 with the KV cache in RAM\n"
                                        "RAM runs out at token 458 with batch 1; 197 with the KV cache in RAM"));
    }

    void followsADarkPalette()
    {
        ContextChart c;
        QPalette dark;
        dark.setColor(QPalette::Window, QColor(0x20, 0x20, 0x24));
        dark.setColor(QPalette::Base, QColor(0x18, 0x18, 0x1c));
        dark.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
        c.setPalette(dark);
        QCOMPARE(c.chart()->backgroundBrush().color(), QColor(0x18, 0x18, 0x1c));
        QCOMPARE(c.contextAxis()->labelsColor(), QColor(0xe0, 0xe0, 0xe0));
    }
};

QTEST_MAIN(TestContextChart)
#include "tst_contextchart.moc"
