// The Run page against the real worker process, with the prediction beside
// it: the run gets the machine the prediction describes; an execution policy
// chosen after Dispatch is not run until the next Dispatch; runs on this
// machine calibrate the prediction; the window times this machine's fixed
// costs once. The runs themselves are in tst_runpage.
#include "budgetmodel.h"
#include "calibration.h"
#include "fixedcoststiming.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "predictionmodel.h"
#include "runcontroller.h"
#include "runpage.h"
#include "runpagefixtures.h"
#include "tracemodel.h"

#include <QComboBox>
#include <QJsonArray>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QToolButton>
#include <QtTest>

#include <algorithm>

using namespace stowage;

class TestRunPagePredictions : public QObject, fixtures::RunPageSuite {
    Q_OBJECT
private slots:
    void initTestCase();
    void runAndPredictionDescribeOneMachine();
    void policyChosenAfterDispatchIsWhatRuns();
    void runsCalibrateThePrediction();
    void windowTimesThisMachineOnce();
};

void TestRunPagePredictions::initTestCase()
{
    initSuite("tst_runpage_predictions");
}

void TestRunPagePredictions::runAndPredictionDescribeOneMachine()
{
    // Simulated GPUs: one of a custom size (the prediction assumes the GPU
    // chosen under "Custom GPUs as") and one from a preset. The run gets the
    // machine the prediction describes, inside the load command.
    MainWindow w(options());
    QVERIFY(open(w, m_demo));
    BudgetModel* b = w.budgetModel();
    b->addSimulatedGpu("custom GPU", QString(), 2000000000);
    b->addSimulatedGpu("NVIDIA H100 80GB", "h100-80gb", 80000000000);
    QComboBox* assumed = w.planningPage()->assumedGpuBox();
    assumed->setCurrentIndex(assumed->findData(QStringLiteral("a100-80gb")));
    const QString predicted = w.planningPage()->predictionHardwareText();
    QVERIFY2(predicted.contains("NVIDIA A100 80GB") && predicted.contains("NVIDIA H100 80GB"), qPrintable(predicted));
    RunPage* run = w.runPage();
    const LoadRequest r = run->loadRequest();
    QVERIFY(r.simulateGpus);
    QVERIFY(r.hardware.has_value());
    QCOMPARE(r.hardware->gpus.size(), size_t(2));
    QCOMPARE(QString::fromStdString(r.hardware->gpus[0].name), QString("NVIDIA A100 80GB"));
    QCOMPARE(r.hardware->gpus[0].memoryBytes, uint64_t(2000000000));
    QCOMPARE(r.hardware->gpus[0].memoryBandwidth, 2039e9); // the A100 80GB datasheet figure
    QCOMPARE(QString::fromStdString(r.hardware->gpus[1].name), QString("NVIDIA H100 80GB"));
    QCOMPARE(r.hardware->gpus[1].memoryBandwidth, 3350e9);
    // The profile travels in the command itself, not through a file.
    const QJsonObject cmd = encodeLoad(r);
    QVERIFY(cmd.value("hardware").isObject());
    QCOMPARE(cmd.value("hardware").toObject().value("gpus").toArray().at(0).toObject().value("name").toString(),
             QString("NVIDIA A100 80GB"));
    // And the worker runs with it.
    QVERIFY2(dispatchAndWait(run), qPrintable(run->messageText()));
}

void TestRunPagePredictions::policyChosenAfterDispatchIsWhatRuns()
{
    // The demo on its own budgets: layers on a simulated GPU 0, in RAM and on disk.
    MainWindow::Options o = options();
    o.demoBudgets = true;
    MainWindow w(o);
    QVERIFY(open(w, m_demo));
    RunPage* run = w.runPage();
    run->setOffloadFolder(m_tmp.path() + "/off-policy");
    run->setPolicy("accelerate-like");
    QSignalSpy loaded(run->controller(), &RunController::loaded);
    QVERIFY2(dispatchAndWait(run), qPrintable(run->messageText()));
    // Accelerate's hooks compute every unit on the execution device, GPU 0.
    for (const RunUnit& u : loaded.last()[0].value<LoadedInfo>().units)
        QCOMPARE(u.device, QString("0"));
    QCOMPARE(run->loadedPolicy(), QString("accelerate-like"));
    QVERIFY(run->canGenerate());
    QVERIFY(run->noteText().isEmpty());

    // Another policy chosen: Generate would run the loaded one, so it waits for Dispatch.
    QVERIFY(run->setPolicy("compute-where-it-lives"));
    QVERIFY(!run->canGenerate());
    QVERIFY(!w.findChild<QPushButton*>("generateButton")->isEnabled());
    QVERIFY(!w.findChild<QPushButton*>("stepButton")->isEnabled());
    QVERIFY(!w.action("generate")->isEnabled());
    QVERIFY2(run->noteText().contains("Accelerate") && run->noteText().contains("Dispatch again"), qPrintable(run->noteText()));
    QSignalSpy done(run, &RunPage::generationDone);
    w.action("generate")->trigger();
    run->generate(); // as Ctrl+Return would, whatever the action says
    QTest::qWait(300);
    QCOMPARE(done.count(), 0);
    QCOMPARE(run->controller()->state(), RunController::State::Loaded);
    // Back to the loaded policy: Generate again.
    run->setPolicy("accelerate-like");
    QVERIFY(run->canGenerate());
    QVERIFY(run->noteText().isEmpty());

    // Dispatched with the new policy, units in RAM compute on the CPU, as the worker reports.
    run->setPolicy("compute-where-it-lives");
    QVERIFY(dispatchAndWait(run));
    QCOMPARE(run->loadedPolicy(), QString("compute-where-it-lives"));
    const LoadedInfo info = loaded.last()[0].value<LoadedInfo>();
    QVERIFY(std::any_of(info.units.begin(), info.units.end(), [](const RunUnit& u) { return u.device == "cpu"; }));
    QVERIFY(run->canGenerate() && w.action("generate")->isEnabled());
    run->setMaxNewTokens(2);
    QVERIFY(generateAndWait(run));
    // The timeline shows where each unit computed in that run.
    TraceModel* t = run->traceModel();
    QCOMPARE(t->rowCount(), int(info.units.size()));
    for (int r = 0; r < t->rowCount(); ++r)
        QCOMPARE(t->index(r, TraceModel::DeviceColumn).data(TraceModel::DeviceNameRole).toString(), info.units[r].device);

    // A plan changed after Dispatch is named; Generate still runs the map on the strip.
    BudgetModel* b = w.budgetModel();
    b->setBudget(b->rowOf(Device::cpu()), b->at(b->rowOf(Device::cpu())).budget / 2);
    QVERIFY2(run->noteText().contains("plan changed"), qPrintable(run->noteText()));
    QVERIFY(run->canGenerate());
}

void TestRunPagePredictions::runsCalibrateThePrediction()
{
    // The page shows the dispatched plan's prediction next to the measured
    // speed; a run of a plan for this machine as measured teaches the
    // calibration, so the planning page's prediction for that policy becomes
    // the measured speed after one run (the geometric mean of one ratio).
    QSettings().remove("prediction/calibration");
    MainWindow w(options());
    QVERIFY(open(w, m_demo));
    PlanningPage* planning = w.planningPage();
    HardwareProfile host = hardwareFromSpec(m_slowProfile.toStdString());
    host.gpus.clear();
    host.measured = true;
    planning->setThisMachine(host);
    QVERIFY(planning->predictsThisMachine());
    auto row = [&](ExecutionPolicy p) {
        const auto& rows = planning->predictionModel()->predictions();
        const auto it = std::find_if(rows.begin(), rows.end(), [&](const Prediction& r) { return r.policy == p; });
        return it == rows.end() ? Prediction() : *it;
    };
    auto speedText = [&](ExecutionPolicy p) {
        const auto& rows = planning->predictionModel()->predictions();
        for (int i = 0; i < rows.size(); ++i)
            if (rows[i].policy == p)
                return planning->predictionModel()->index(i, PredictionModel::SpeedColumn).data().toString();
        return QString();
    };
    QCOMPARE(row(ExecutionPolicy::Prefetch).calibrationRuns, 0);
    const double model = row(ExecutionPolicy::Prefetch).estimate.tokensPerSecond;
    QVERIFY(model > 0);
    QVERIFY(!speedText(ExecutionPolicy::Prefetch).contains("calibrated"));
    auto* reset = planning->findChild<QToolButton*>("resetCalibration");
    QVERIFY(reset && !reset->isEnabled());

    RunPage* run = w.runPage();
    QVERIFY(run->setPolicy("prefetch"));
    run->setPrompt("And God said");
    run->setMaxNewTokens(8);
    run->setGreedy(true);
    run->setIgnoreEos(true);
    run->setOffloadFolder(m_tmp.path() + "/off-calibration");
    QVERIFY2(dispatchAndWait(run), qPrintable(run->messageText()));
    QVERIFY(generateAndWait(run));
    const double measured = run->lastDone().tokensPerSecond;
    QVERIFY(measured > 0);
    const QString said = run->predictedText();
    QVERIFY2(said.startsWith("Predicted " + PredictionModel::formatSpeed(model)), qPrintable(said));
    QVERIFY2(said.contains("measured " + PredictionModel::formatSpeed(measured)), qPrintable(said));
    QVERIFY2(said.contains("now this machine runs prefetch at") && said.contains("from 1 run"), qPrintable(said));
    QVERIFY2(said.contains("Weights: CPU"), qPrintable(said));

    const Prediction calibrated = row(ExecutionPolicy::Prefetch);
    QCOMPARE(calibrated.calibrationRuns, 1);
    QVERIFY(std::abs(calibrated.tokensPerSecond() / measured - 1) < 1e-9);
    QVERIFY(speedText(ExecutionPolicy::Prefetch).contains("(calibrated)"));
    QCOMPARE(row(ExecutionPolicy::AccelerateLike).calibrationRuns, 0);
    QVERIFY2(planning->calibrationText().contains("this machine runs prefetch at"), qPrintable(planning->calibrationText()));
    QVERIFY(reset->isEnabled());

    // A simulated GPU: the prediction is for another machine, so it is not
    // calibrated, and says why.
    const int simulated = w.budgetModel()->addSimulatedGpu("NVIDIA H100 80GB", "h100-80gb", 80000000000);
    QVERIFY(!planning->predictsThisMachine());
    QCOMPARE(row(ExecutionPolicy::Prefetch).calibrationRuns, 0);
    QVERIFY2(planning->calibrationText().startsWith("Not calibrated"), qPrintable(planning->calibrationText()));
    QVERIFY(w.budgetModel()->removeSimulatedGpu(simulated));
    QCOMPARE(row(ExecutionPolicy::Prefetch).calibrationRuns, 1);

    // Reset forgets it, here and after a restart.
    reset->click();
    QCOMPARE(row(ExecutionPolicy::Prefetch).calibrationRuns, 0);
    QVERIFY(!speedText(ExecutionPolicy::Prefetch).contains("calibrated"));
    QCOMPARE(Calibration(planning->calibration()->machine()).totalRuns(), 0);
}

void TestRunPagePredictions::windowTimesThisMachineOnce()
{
    // No fixed costs kept for this CPU: the window times them in the
    // background (`stowage-cli hardware`), says so with a Stop button, and
    // its predictions then count them; Stop ends a timing and keeps nothing;
    // a later window finds them kept and times nothing.
    QTemporaryDir cache;
    const QByteArray before = qgetenv("STOWAGE_CACHE_DIR");
    qputenv("STOWAGE_CACHE_DIR", cache.path().toUtf8());
    const QString kept = cache.path() + "/fixed-costs.json";
    MainWindow::Options o = options();
    o.probeMachine = true;
    o.timeFixedCosts = true;
    auto stopButton = [](MainWindow& w) -> QPushButton* {
        auto* status = w.statusBar()->findChild<QWidget*>("fixedCostTiming");
        return status ? status->findChild<QPushButton*>() : nullptr;
    };
    {
        MainWindow w(o);
        QTRY_VERIFY_WITH_TIMEOUT(w.fixedCostTiming() && w.fixedCostTiming()->running(), 60000);
        QPushButton* stop = stopButton(w);
        QVERIFY(stop);
        stop->click();
        QVERIFY(!w.fixedCostTiming());
        QTRY_VERIFY(!stopButton(w)); // gone once the event loop has run
        QVERIFY2(w.statusBar()->currentMessage().contains("Stopped timing"), qPrintable(w.statusBar()->currentMessage()));
        QVERIFY(!QFileInfo::exists(kept));
        QVERIFY(w.planningPage()->thisMachine() && w.planningPage()->thisMachine()->fixedCosts.empty());
    }
    {
        MainWindow w(o);
        QTRY_VERIFY_WITH_TIMEOUT(w.fixedCostTiming(), 60000);
        QVERIFY(stopButton(w));
        if (!shotDir().isEmpty()) {
            w.resize(1400, 900);
            w.grab().save(shotDir() + "/timing.png");
        }
        QTRY_VERIFY_WITH_TIMEOUT(!w.fixedCostTiming(), 600000); // hang guard only: about 15 s
        QVERIFY2(w.statusBar()->currentMessage().contains("now count this machine's fixed costs"),
                 qPrintable(w.statusBar()->currentMessage()));
        QTRY_VERIFY(!stopButton(w));
        QVERIFY(QFileInfo::exists(kept));
        const auto& hw = w.planningPage()->thisMachine();
        QVERIFY(hw && hw->fixedCosts.size() == 3);
        QVERIFY(hw->fixedCosts.at("accelerate-like").copyBandwidth > 0);
    }
    {
        MainWindow w(o);
        QTRY_VERIFY_WITH_TIMEOUT(w.planningPage()->thisMachine(), 60000);
        QVERIFY(!w.fixedCostTiming()); // kept: nothing to time
        QCOMPARE(w.planningPage()->thisMachine()->fixedCosts.size(), size_t(3));
    }
    if (before.isNull())
        qunsetenv("STOWAGE_CACHE_DIR");
    else
        qputenv("STOWAGE_CACHE_DIR", before);
}

QTEST_MAIN(TestRunPagePredictions)
#include "tst_runpage_predictions.moc"
