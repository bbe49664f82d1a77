// The Run page against the real worker process (`stowage-cli worker`),
// offscreen: greedy tokens equal `stowage-cli run --json` on a cpu+disk map;
// samples reach the graphs during dispatch and generation; the timeline has
// a row for every execution unit; Stop and Cancel work mid-way; a worker
// killed with SIGKILL is reported and a new run then works; teaching mode
// steps one token with captions; `stowage --screenshot --run-tokens N`. The
// GUI thread's worst stalls while a >= 400 MB checkpoint is dispatched and
// generates are printed (the figure is the deliverable; the assertion is a
// hang guard only). The prediction beside a run, the execution policy and the
// timing of this machine are in tst_runpage_predictions.
#include "budgetmodel.h"
#include "display.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "placementmap.h"
#include "planningpage.h"
#include "runcharts.h"
#include "runcontroller.h"
#include "runpage.h"
#include "runpagefixtures.h"
#include "samplesmodel.h"
#include "stowage/planner.h"
#include "tracemodel.h"

#include <QAbstractItemModelTester>
#include <QElapsedTimer>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QSet>
#include <QtTest>

#include <algorithm>
#include <csignal>
#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;

namespace {
// Gaps between the ticks of a 5 ms timer: how long the event loop could not run.
class StallMeter : public QObject {
public:
    StallMeter()
    {
        m_timer.setInterval(5);
        connect(&m_timer, &QTimer::timeout, this, [this] {
            const qint64 now = m_clock.nsecsElapsed();
            if (m_last >= 0)
                m_gaps.push_back(double(now - m_last) / 1e6);
            m_last = now;
        });
    }
    void start()
    {
        m_gaps.clear();
        m_last = -1;
        m_clock.start();
        m_timer.start();
    }
    void stop() { m_timer.stop(); }
    double percentile(double p) const
    {
        if (m_gaps.empty())
            return 0;
        std::vector<double> g = m_gaps;
        std::sort(g.begin(), g.end());
        return g[std::min(g.size() - 1, size_t(p / 100.0 * double(g.size())))];
    }
    double worst() const { return m_gaps.empty() ? 0 : *std::max_element(m_gaps.begin(), m_gaps.end()); }
    size_t count() const { return m_gaps.size(); }

private:
    QTimer m_timer;
    QElapsedTimer m_clock;
    qint64 m_last = -1;
    std::vector<double> m_gaps;
};

QString cpuModel()
{
    QFile f("/proc/cpuinfo");
    if (f.open(QIODevice::ReadOnly))
        for (const QByteArray& line : f.readAll().split('\n'))
            if (line.startsWith("model name"))
                return QString::fromUtf8(line.mid(line.indexOf(':') + 1).trimmed());
    return QStringLiteral("unknown CPU");
}
} // namespace

class TestRunPage : public QObject, fixtures::RunPageSuite {
    Q_OBJECT
    QString m_big;

    // GPU 0 simulated, its layers in RAM and copied at a crawl before each runs.
    bool openThrottledDemo(MainWindow& w);
private slots:
    void initTestCase();
    void greedyTokensEqualCliWithGraphsAndTimeline();
    void stopMidGeneration();
    void cancelMidDispatch();
    void killedWorkerIsReportedAndNewRunWorks();
    void teachingModeStepsOneToken();
    void stallFigureDuringDispatchAndGeneration();
    void screenshotAfterRunTokens();
    void openingAnotherModelResetsTheRunPage();
    void generateWithNothingLoadedDoesNothing();
    void stopMidStepSaysSo();
};

void TestRunPage::initTestCase()
{
    initSuite("tst_runpage");
    if (QTest::currentTestFailed())
        return;
    // >= 400 MB: 210 M bf16 parameters, no tokenizer (prompts are ids).
    m_big = m_tmp.path() + "/big";
    fs::create_directories(m_big.toStdString());
    fixtures::Gpt2Shape s{8000, 256, 1024, 16};
    fixtures::writeRandomSafetensors(m_big.toStdString() + "/model.safetensors", fixtures::gpt2Tensors(s, DType::BF16), 5, 0.02f);
    nlohmann::json c = fixtures::gpt2Config(s, DType::BF16);
    c["n_head"] = 16;
    fixtures::writeJson(m_big.toStdString() + "/config.json", c);
}

bool TestRunPage::openThrottledDemo(MainWindow& w)
{
    if (!open(w, m_demo))
        return false;
    w.budgetModel()->addSimulatedGpu("slow test GPU", QString(), 1000000000);
    const QString map = R"({"model.embed_tokens": 0, "model.layers": "cpu", "model.norm": 0,
                            "model.rotary_emb": 0, "lm_head": 0})";
    if (!w.planningPage()->importMap(map, "test map"))
        return false;
    RunPage* run = w.runPage();
    run->setHardwareOverride(hardwareFromSpec(m_slowProfile.toStdString()));
    run->setThrottle(true);
    run->setPolicy("accelerate-like");
    return true;
}

void TestRunPage::greedyTokensEqualCliWithGraphsAndTimeline()
{
    // The reference: the CLI on the same checkpoint, budgets and prompt.
    const QString off = m_tmp.path() + "/off-demo";
    const QString prompt = QStringLiteral("In the beginning");
    auto cli = fixtures::runCli({"run", m_demo, "--prompt", prompt, "--max-new-tokens", "16", "--greedy",
                                 "--ignore-eos", "--max-memory", "cpu=3MB", "--offload-folder", off + "-cli", "--json"});
    QCOMPARE(cli.exitCode, 0);
    const auto j = nlohmann::json::parse(cli.out.toStdString());
    QVector<int> expected;
    for (int id : j["token_ids"].get<std::vector<int>>())
        expected.push_back(id);
    QCOMPARE(expected.size(), 16);
    QVERIFY(j["device_map"].dump().find("disk") != std::string::npos);
    QVERIFY(j["device_map"].dump().find("cpu") != std::string::npos);

    MainWindow w(options());
    QVERIFY(open(w, m_demo));
    BudgetModel* b = w.budgetModel();
    b->setBudget(b->rowOf(Device::cpu()), 3000000);
    QCOMPARE(QString::fromStdString(nlohmann::json::parse(deviceMapToJson(w.planningPage()->plan()->deviceMap)).dump()),
             QString::fromStdString(j["device_map"].dump()));
    RunPage* run = w.runPage();
    QAbstractItemModelTester samplesTester(run->samplesModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester traceTester(run->traceModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    run->setOffloadFolder(off);
    run->setPrompt(prompt);
    run->setMaxNewTokens(16);
    run->setGreedy(true);
    run->setIgnoreEos(true);

    int samplesDuringLoad = 0, samplesDuringGeneration = 0;
    bool generating = false;
    connect(run->controller(), &RunController::sampleAvailable, run, [&] {
        (generating ? samplesDuringGeneration : samplesDuringLoad)++;
    });
    QSignalSpy loaded(run->controller(), &RunController::loaded);
    QVERIFY2(dispatchAndWait(run), qPrintable(run->messageText()));
    QCOMPARE(loaded.count(), 1);
    const LoadedInfo info = loaded[0][0].value<LoadedInfo>();
    generating = true;
    const quint64 redrawsBefore = run->charts()->redraws();
    QVERIFY(generateAndWait(run));
    QCOMPARE(run->lastDone().tokenIds, expected);
    QCOMPARE(run->streamedTokens(), expected);
    QCOMPARE(run->lastDone().stopped, false);
    QVERIFY(run->outputText().startsWith(prompt));
    QVERIFY(run->tokensPerSecondText().contains("tokens/s"));

    // Graphs: samples during dispatch and during generation, drawn on the timer.
    qInfo("samples: %d during dispatch, %d during generation", samplesDuringLoad, samplesDuringGeneration);
    QVERIFY(samplesDuringLoad >= 1);
    QVERIFY(samplesDuringGeneration >= 1);
    QTRY_VERIFY_WITH_TIMEOUT(run->charts()->redraws() > redrawsBefore, 10000);
    QVERIFY(run->samplesModel()->rowCount() >= 2);
    QVERIFY(run->charts()->memoryPointCount() > 0);
    QCOMPARE(run->charts()->tokenMarkerCount() > 0, true);
    QVERIFY(!info.devices.isEmpty());

    // Timeline: one row per execution unit, each computing in the last token's step.
    TraceModel* t = run->traceModel();
    QCOMPARE(t->rowCount(), int(info.units.size()));
    QVERIFY(info.units.size() >= 3);
    for (int r = 0; r < t->rowCount(); ++r) {
        QCOMPARE(t->index(r, TraceModel::UnitColumn).data().toString(), info.units[r].name);
        const TimelineRow& row = t->row(r);
        QVERIFY2(std::any_of(row.spans.begin(), row.spans.end(), [](const TraceSpan& s) { return s.kind == TraceSpan::Compute; }),
                 qPrintable(info.units[r].name));
    }
    QCOMPARE(t->latestStep(), 15); // the last token is chosen, never run
    // Unload gives the memory back; the page says so.
    QSignalSpy unloaded(run->controller(), &RunController::unloaded);
    run->unload();
    QVERIFY(unloaded.wait(30000));
    QVERIFY(!run->controller()->modelLoaded());
}

void TestRunPage::stopMidGeneration()
{
    MainWindow w(options());
    QVERIFY(openThrottledDemo(w));
    RunPage* run = w.runPage();
    QVERIFY2(dispatchAndWait(run), qPrintable(run->messageText()));
    run->setPrompt({});
    run->setMaxNewTokens(1000);
    run->setIgnoreEos(true);
    QSignalSpy done(run, &RunPage::generationDone);
    run->generate();
    QTest::qWait(700); // inside a slow step: each layer's copy takes ~0.5 s
    QCOMPARE(done.count(), 0);
    QVERIFY(w.findChild<QPushButton*>("stopButton")->isEnabled());
    QElapsedTimer t;
    t.start();
    QTest::mouseClick(w.findChild<QPushButton*>("stopButton"), Qt::LeftButton);
    QVERIFY(done.wait(20000));
    qInfo("Stop -> done in %lld ms", static_cast<long long>(t.elapsed()));
    QVERIFY(run->lastDone().stopped);
    QVERIFY(run->lastDone().tokenIds.size() < 1000);
    QVERIFY(run->tokensPerSecondText().startsWith("Stopped"));
    // Still loaded and usable.
    QVERIFY(run->controller()->modelLoaded());
    QVERIFY(w.findChild<QPushButton*>("generateButton")->isEnabled());
    QCOMPARE(run->controller()->state(), RunController::State::Loaded);
}

void TestRunPage::cancelMidDispatch()
{
    // The big checkpoint read as float32 into RAM: the worker converts 840 MB
    // tensor by tensor, reporting progress after each, long enough to cancel.
    MainWindow w(options());
    QVERIFY(open(w, m_big));
    RunPage* run = w.runPage();
    QSignalSpy progress(run->controller(), &RunController::progress);
    QSignalSpy cancelled(run->controller(), &RunController::cancelled);
    QSignalSpy dispatched(run, &RunPage::dispatched);
    // Cancel as soon as the first tensor is in, with the Cancel button.
    int cancelledAt = -1;
    connect(run->controller(), &RunController::progress, run, [&](int permille) {
        if (permille > 0 && cancelledAt < 0) {
            cancelledAt = permille;
            QVERIFY(w.findChild<QPushButton*>("cancelButton")->isEnabled());
            QTest::mouseClick(w.findChild<QPushButton*>("cancelButton"), Qt::LeftButton);
        }
    });
    LoadRequest r = run->loadRequest();
    r.dtype = "float32";
    run->controller()->dispatch(r);
    QTRY_VERIFY_WITH_TIMEOUT(dispatched.count() == 1, 60000);
    qInfo("Cancel pressed at %.1f%% of the dispatch; the last progress said %.1f%%", cancelledAt / 10.0,
          progress.last()[0].toInt() / 10.0);
    QVERIFY(progress.last()[0].toInt() < 1000);
    QCOMPARE(cancelled.count(), 1);
    QVERIFY(!dispatched[0][0].toBool());
    QVERIFY(!run->controller()->modelLoaded());
    QVERIFY(run->statusText().contains("cancelled"));
    // The same worker dispatches again (bf16, used in place from the mapped file: quick).
    const qint64 pid = run->controller()->workerPid();
    QVERIFY(dispatchAndWait(run));
    QCOMPARE(run->controller()->workerPid(), pid);
}

void TestRunPage::killedWorkerIsReportedAndNewRunWorks()
{
    MainWindow w(options());
    QVERIFY(openThrottledDemo(w));
    RunPage* run = w.runPage();
    QVERIFY(dispatchAndWait(run));
    run->setMaxNewTokens(1000);
    run->setIgnoreEos(true);
    QSignalSpy ended(run->controller(), &RunController::workerEnded);
    run->generate();
    QTest::qWait(300);
    const qint64 pid = run->controller()->workerPid();
    QVERIFY(pid > 0);
    QVERIFY(::kill(pid_t(pid), SIGKILL) == 0);
    QVERIFY(ended.wait(20000));
    QVERIFY(!ended[0][1].toBool()); // not the user's stop
    const QString msg = run->messageText();
    qInfo("message: %s", qPrintable(msg));
    QVERIFY2(msg.contains("SIGKILL") && msg.contains("generating") && msg.contains("plan is kept"), qPrintable(msg));
    QCOMPARE(run->controller()->state(), RunController::State::NoWorker);
    QVERIFY(w.planningPage()->plan() != nullptr);
    QVERIFY(w.findChild<QPushButton*>("dispatchButton")->isEnabled());
    QVERIFY(!w.findChild<QPushButton*>("generateButton")->isEnabled());
    // A new worker, a new run.
    run->setThrottle(false);
    run->setMaxNewTokens(4);
    QVERIFY(dispatchAndWait(run));
    QVERIFY(run->controller()->workerPid() != pid);
    QVERIFY(generateAndWait(run));
    QCOMPARE(run->lastDone().tokenIds.size(), 4);
}

void TestRunPage::teachingModeStepsOneToken()
{
    // On the demo's own budgets: a simulated GPU, RAM and disk, so weights move.
    MainWindow::Options o = options();
    o.demoBudgets = true;
    MainWindow w(o);
    QVERIFY(open(w, m_demo));
    QCOMPARE(w.budgetModel()->gpuCount(), 1);
    RunPage* run = w.runPage();
    QVERIFY(dispatchAndWait(run));
    // The reference: two greedy tokens in one go.
    run->setMaxNewTokens(2);
    run->setIgnoreEos(true);
    QVERIFY(generateAndWait(run));
    const QVector<int> expected = run->lastDone().tokenIds;
    run->setUnitDelayMs(20);
    QVector<int> stepped;
    QStringList captions;
    connect(run->traceModel(), &TraceModel::stepsChanged, run, [&] { captions << run->captionText(); });
    // What the map shows, sampled as the user would see it: the devices it drew weights moving to.
    QSet<int> movedTo;
    QTimer sampler;
    connect(&sampler, &QTimer::timeout, run, [&] {
        if (run->teachingMap()->movement().module >= 0) {
            if (movedTo.isEmpty() && !shotDir().isEmpty())
                w.grab().save(shotDir() + "/teaching.png");
            movedTo << run->teachingMap()->movement().toDeviceCode;
        }
        if (!captions.contains(run->captionText()))
            captions << run->captionText();
    });
    sampler.start(2);
    QSignalSpy modules(run->teachingMap(), &PlacementMap::moduleActivated);
    for (int i = 0; i < 2; ++i) {
        QSignalSpy done(run, &RunPage::generationDone);
        QTest::mouseClick(w.findChild<QPushButton*>("stepButton"), Qt::LeftButton);
        QVERIFY(done.wait(60000));
        QCOMPARE(run->lastDone().tokenIds.size(), 1);
        stepped << run->lastDone().tokenIds[0];
        QVERIFY(run->captionText().contains("Step"));
        QVERIFY(run->teachingMap()->selectedModule() >= 0);
    }
    QCOMPARE(stepped, expected);
    QVERIFY(run->captionText().contains("Compute") || run->captionText().contains("Release"));
    // Layers in RAM and on disk are copied to the simulated GPU that computes them.
    QVERIFY2(movedTo.contains(deviceCode(Device::gpu(0))), qPrintable(captions.join('\n')));
    QVERIFY(captions.join('\n').contains("Copy to GPU 0"));
}

void TestRunPage::stallFigureDuringDispatchAndGeneration()
{
    // The >= 400 MB checkpoint read as float32 (converted while dispatching),
    // a quarter in RAM and the rest in the offload folder.
    const qint64 bytes = QFileInfo(m_big + "/model.safetensors").size();
    QVERIFY(bytes >= 400000000);

    MainWindow w(options());
    QVERIFY(open(w, m_big));
    BudgetModel* b = w.budgetModel();
    b->setBudget(b->rowOf(Device::cpu()), quint64(bytes) / 2); // float32 doubles it: a quarter fits
    RunPage* run = w.runPage();
    run->setOffloadFolder(m_tmp.path() + "/off-big");
    run->setMaxNewTokens(6);
    run->setIgnoreEos(true);
    run->setPrompt("1, 2, 3");
    LoadRequest r = run->loadRequest();
    r.dtype = "float32";
    StallMeter meter;
    QSignalSpy dispatched(run, &RunPage::dispatched);
    meter.start();
    run->controller()->dispatch(r);
    QVERIFY(dispatched.wait(300000));
    meter.stop();
    QVERIFY2(dispatched[0][0].toBool(), qPrintable(run->messageText()));
    const double loadP99 = meter.percentile(99), loadWorst = meter.worst();
    const size_t loadTicks = meter.count();
    meter.start();
    QVERIFY(generateAndWait(run, 300000));
    meter.stop();
    QCOMPARE(run->lastDone().tokenIds.size(), 6);
    qInfo("GUI-thread stalls on %s, %.0f MB checkpoint: dispatch p99 %.1f ms (worst %.1f ms, %zu ticks); "
          "generation p99 %.1f ms (worst %.1f ms, %zu ticks); goal p99 <= 50 ms",
          qPrintable(cpuModel()), bytes / 1e6, loadP99, loadWorst, loadTicks, meter.percentile(99), meter.worst(),
          meter.count());
    // Hang guard only (10x the goal).
    QVERIFY(loadP99 < 500);
    QVERIFY(meter.percentile(99) < 500);
}

void TestRunPage::screenshotAfterRunTokens()
{
    const QString png = m_tmp.path() + "/run.png";
    QProcess p;
    p.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("STOWAGE_CLI", QStringLiteral(STOWAGE_CLI));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(STOWAGE_GUI), {"--screenshot", png, m_demo, "--run-tokens", "8", "--max-memory", "cpu=3MB",
                                          "--offload-folder", m_tmp.path() + "/off-shot", "--size", "1400x900"});
    QVERIFY(p.waitForFinished(180000));
    QCOMPARE(p.exitCode(), 0);
    if (!shotDir().isEmpty())
        QFile::copy(png, shotDir() + "/run.png");
    const QImage img(png);
    QCOMPARE(img.size(), QSize(1400, 900));
    QHash<QRgb, int> count;
    for (int y = 0; y < img.height(); y += 2)
        for (int x = 0; x < img.width(); x += 2)
            ++count[img.pixel(x, y) & 0xffffff];
    QVERIFY2(count.value(0xf28e2b) > 100, "CPU colour missing"); // map and RSS line
    QVERIFY(count.size() > 50);
    p.start(QStringLiteral(STOWAGE_GUI), {"--screenshot", png, m_demo, "--run-tokens", "zero"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 2);
}

void TestRunPage::openingAnotherModelResetsTheRunPage()
{
    MainWindow::Options o = options();
    o.demoBudgets = true;
    MainWindow w(o);
    QVERIFY(open(w, m_demo));
    RunPage* run = w.runPage();
    run->setOffloadFolder(m_tmp.path() + "/off-reset");
    // Before any Dispatch the strip previews the plan on screen.
    QVERIFY(!run->teachingMap()->layout().blocks.empty());
    QVERIFY(dispatchAndWait(run));
    run->setMaxNewTokens(3);
    run->setUnitDelayMs(5);
    QSignalSpy stepped(run, &RunPage::generationDone);
    run->stepOneToken();
    QVERIFY(stepped.wait(60000));
    QVERIFY(!run->outputText().isEmpty());
    QVERIFY(run->captionText().contains("Step"));

    // Another model: nothing of the demo's run stays, and the worker lets it go.
    QSignalSpy unloaded(run->controller(), &RunController::unloaded);
    QVERIFY(open(w, m_big));
    QVERIFY(unloaded.count() == 1 || unloaded.wait(30000));
    QVERIFY(!run->controller()->modelLoaded());
    QVERIFY(run->outputText().isEmpty());
    QVERIFY(run->streamedTokens().isEmpty());
    QVERIFY2(!run->captionText().contains("Step"), qPrintable(run->captionText()));
    QCOMPARE(run->teachingMap()->movement().module, -1);
    QCOMPARE(run->teachingMap()->selectedModule(), -1);
    QVERIFY2(run->statusText().startsWith("Nothing loaded"), qPrintable(run->statusText()));
    QVERIFY(run->tokensPerSecondText().isEmpty());
    QVERIFY(!run->canGenerate() && !w.findChild<QPushButton*>("generateButton")->isEnabled());
    QVERIFY(run->canDispatch());
    // The strip previews the new model's plan: its blocks are the big model's modules.
    const auto& blocks = run->teachingMap()->layout().blocks;
    QVERIFY(!blocks.empty());
    QCOMPARE(w.planningPage()->planState().modelPath, QFileInfo(m_big).absoluteFilePath());

    // Config and index only: planned before download, and it cannot run.
    const QString indexOnly = m_tmp.path() + "/index-only";
    QDir().mkpath(indexOnly);
    QVERIFY(QFile::copy(m_demo + "/config.json", indexOnly + "/config.json"));
    QVERIFY(QFile::copy(m_demo + "/model.safetensors.index.json", indexOnly + "/model.safetensors.index.json"));
    QVERIFY(open(w, indexOnly));
    QVERIFY(!run->canDispatch());
    QVERIFY(!w.findChild<QPushButton*>("dispatchButton")->isEnabled());
    QVERIFY(!w.action("dispatch")->isEnabled());
    QVERIFY2(run->noteText().contains("download the shards"), qPrintable(run->noteText()));
}

void TestRunPage::generateWithNothingLoadedDoesNothing()
{
    MainWindow w(options());
    QVERIFY(open(w, m_demo));
    RunPage* run = w.runPage();
    for (const char* a : {"generate", "stepToken", "stopRun", "unload"})
        QVERIFY2(!w.action(a)->isEnabled(), a);
    QVERIFY(w.action("dispatch")->isEnabled());
    QSignalSpy done(run, &RunPage::generationDone);
    run->generate();
    run->stepOneToken();
    QTest::keyClick(&w, Qt::Key_Return, Qt::ControlModifier);
    QTest::qWait(200);
    QCOMPARE(done.count(), 0);
    QCOMPARE(run->controller()->state(), RunController::State::NoWorker);
    QVERIFY2(!run->tokensPerSecondText().contains("Prefilling"), qPrintable(run->tokensPerSecondText()));
    QVERIFY2(run->messageText().contains("Nothing is loaded"), qPrintable(run->messageText()));
}

void TestRunPage::stopMidStepSaysSo()
{
    MainWindow w(options());
    QVERIFY(openThrottledDemo(w));
    RunPage* run = w.runPage();
    run->setThrottle(false);
    QVERIFY(dispatchAndWait(run));
    run->setUnitDelayMs(400); // each unit pauses 0.4 s before it computes
    QSignalSpy done(run, &RunPage::generationDone);
    run->stepOneToken();
    QTest::qWait(600);
    QCOMPARE(done.count(), 0);
    QVERIFY(run->canStop() && w.action("stopRun")->isEnabled());
    run->stop();
    QVERIFY(done.wait(20000));
    QVERIFY(run->lastDone().stopped);
    QVERIFY2(run->captionText().contains("Stopped") && !run->captionText().contains("token done"),
             qPrintable(run->captionText()));
    QVERIFY2(!run->tokensPerSecondText().contains("tokens/s"), qPrintable(run->tokensPerSecondText()));
    // A whole step afterwards: one token, and the timeline's header sums its rows' waits.
    run->setUnitDelayMs(30);
    QVERIFY(run->canGenerate());
    run->stepOneToken();
    QVERIFY(done.wait(60000));
    QVERIFY(!run->lastDone().stopped);
    QVERIFY(run->captionText().contains("token done"));
    TraceModel* t = run->traceModel();
    double rowsWait = 0;
    for (int r = 0; r < t->rowCount(); ++r)
        rowsWait += t->row(r).waitSeconds;
    QVERIFY(rowsWait >= 0.03 * t->rowCount() * 0.9); // every unit paused 30 ms before computing
    const QString header = t->headerData(TraceModel::TimelineColumn, Qt::Horizontal).toString();
    QVERIFY2(!header.contains("waited 0.00"), qPrintable(header));
    QVERIFY2(run->tokensPerSecondText().contains("Stepped 1 token"), qPrintable(run->tokensPerSecondText()));
}

QTEST_MAIN(TestRunPage)
#include "tst_runpage.moc"
