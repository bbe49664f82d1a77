// The Deploy tab's "Start here" (app/gui/enginerunpanel.h) offscreen, with
// the real llama-server (tools/engines/install-llama-cpp.sh): the demo
// written as GGUF, llama-server started with the llama.cpp launch, a
// streamed greedy completion equal to what Stowage's own runner generates
// (`stowage-cli run`, an independent implementation), its memory shown;
// and the states where it cannot start, each saying why.
#include "deploypanel.h"
#include "engineserver.h"
#include "enginerunpanel.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "skip.h"

#include <QApplication>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QtTest>

#include <filesystem>

using namespace stowage;

namespace {
const QString kDemo = QDir::cleanPath(QStringLiteral(STOWAGE_TEST_SCRIPTS "/../../resources/demo"));
QString shotDir() { return QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR")); }
} // namespace

class TestEngineRun : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    // The window on `path`, its Deploy tab showing llama.cpp on one GPU.
    DeployPanel* openDeploy(MainWindow& w, const QString& path)
    {
        w.resize(1400, 1100);
        w.show();
        QSignalSpy opened(&w, &MainWindow::checkpointOpened);
        w.openCheckpoint(path);
        if (!QTest::qWaitFor([&] { return opened.count() == 1; }, 20000))
            return nullptr;
        DeployPanel* d = w.planningPage()->deployPanel();
        w.planningPage()->outlookTabs()->setCurrentWidget(d);
        d->engineBox()->setCurrentIndex(d->engineBox()->findText("llama.cpp"));
        d->gpuBox()->setCurrentIndex(d->gpuBox()->findData(QStringLiteral("rtx4090")));
        d->nodesBox()->setValue(1);
        d->gpusPerNodeBox()->setValue(1);
        d->contextBox()->setValue(256);
        d->sequencesBox()->setValue(1);
        // Whether the model can be written as GGUF is asked off the GUI thread.
        if (!QTest::qWaitFor([&] { return !d->runPanel()->statusLabel()->text().startsWith("Checking"); }, 30000))
            return nullptr;
        return d;
    }

private slots:
    void initTestCase()
    {
        QApplication::setOrganizationName("StowageTest");
        QApplication::setApplicationName("tst_enginerun");
    }

    void startsStreamsAndStops()
    {
        const QString server = EngineServer::findLlamaServer();
        if (server.isEmpty())
            STOWAGE_SKIP_OR_FAIL("no llama-server (tools/engines/install-llama-cpp.sh installs one)");
        const QString prompt = QStringLiteral("Once upon a time");
        auto run = fixtures::runCli({"run", kDemo, "--prompt", prompt, "--max-new-tokens", "12", "--greedy",
                                     "--ignore-eos", "--json"});
        QVERIFY2(run.exitCode == 0, run.err.constData());
        const auto expected = QString::fromStdString(nlohmann::json::parse(run.out.toStdString())["text"].get<std::string>());

        MainWindow w({false, false, {}, false});
        DeployPanel* d = openDeploy(w, kDemo);
        QVERIFY(d);
        EngineRunPanel* p = d->runPanel();
        p->setProgram(server);
        QVERIFY2(d->commandView()->toPlainText().startsWith("llama-server -m MODEL.gguf"),
                 qPrintable(d->commandView()->toPlainText()));
        QVERIFY2(p->startButton()->isEnabled(), qPrintable(p->statusLabel()->text()));
        QVERIFY(!p->generateButton()->isEnabled());
        const QString gguf = m_tmp.path() + "/demo.gguf";
        p->setGgufPath(gguf);
        QTest::mouseClick(p->startButton(), Qt::LeftButton);
        QVERIFY(!p->startButton()->isEnabled()); // no second start while writing or starting
        QTRY_VERIFY_WITH_TIMEOUT(p->generateButton()->isEnabled() || p->statusLabel()->text().contains("did not"), 120000);
        QVERIFY2(p->statusLabel()->text().contains("serving") && p->statusLabel()->text().contains("demo.gguf"),
                 qPrintable(p->statusLabel()->text()));
        QVERIFY(std::filesystem::exists(gguf.toStdString()));
        // What llama-server allocated against the plan: the weights in full
        // (F32 as stored), and a KV cache of 6 layers x 256 cells x K and V of
        // 2 heads x 32 in F16: 393,216 bytes. It prints MiB to 2 decimals (0.375 as 0.38).
        const DeployChoice& planned = d->plan().choices.front();
        QCOMPARE(planned.kvPerGpu, uint64_t(393'216));
        const EngineServer::Reported r = p->server()->reported();
        const double mib = 1024.0 * 1024.0;
        QVERIFY2(std::abs(r.weights - double(planned.weightsPerGpu)) <= 0.0051 * mib,
                 qPrintable(QString::number(r.weights) + " vs " + QString::number(planned.weightsPerGpu)));
        QVERIFY2(std::abs(r.kvCache - double(planned.kvPerGpu)) <= 0.0051 * mib,
                 qPrintable(QString::number(r.kvCache) + " vs " + QString::number(planned.kvPerGpu)));
        QVERIFY2(p->statusLabel()->text().contains("It allocated weights") &&
                     p->statusLabel()->text().contains("the plan: weights 6.23 MiB, KV cache 384.00 KiB"),
                 qPrintable(p->statusLabel()->text()));
        QVERIFY(!p->progress()->isVisible());
        QVERIFY(p->stopButton()->isEnabled());
        QVERIFY(!p->writeButton()->isEnabled()); // not while it serves a file

        p->promptEdit()->setText(prompt);
        p->maxTokensBox()->setValue(12);
        QSignalSpy done(p->server(), &EngineServer::completed);
        QTest::mouseClick(p->generateButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty(), 60000);
        QCOMPARE(p->output()->toPlainText(), expected);
        QTRY_VERIFY_WITH_TIMEOUT(p->memoryLabel()->text().contains("resident"), 10000);
        QVERIFY(p->statusLabel()->text().contains("Last answer"));
        if (const QString dir = shotDir(); !dir.isEmpty())
            QVERIFY(w.grab().save(dir + "/deploy-run.png"));

        // Another model: the engine served the demo, so it stops, and the
        // panel says why this one cannot start.
        std::filesystem::create_directories((m_tmp.path() + "/gpt2").toStdString());
        fixtures::writeTinyGpt2((m_tmp.path() + "/gpt2").toStdString(), DType::F32);
        QSignalSpy ended(p->server(), &EngineServer::ended);
        QSignalSpy opened(&w, &MainWindow::checkpointOpened);
        w.openCheckpoint(m_tmp.path() + "/gpt2");
        QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1 && !ended.isEmpty(), 30000);
        QVERIFY(!p->generateButton()->isEnabled());
        QVERIFY(!p->startButton()->isEnabled());
        QTRY_VERIFY2_WITH_TIMEOUT(p->statusLabel()->text().contains("model_type 'gpt2'"),
                                  qPrintable(p->statusLabel()->text()), 30000);
        QVERIFY(p->output()->toPlainText().isEmpty());
    }

    // The GGUF check loads the whole tokenizer, so it runs on a worker
    // thread: until its answer comes, neither Start nor Write is offered, the
    // status says so, and an answer for a path no longer shown is dropped.
    void checksTheModelOffTheGuiThread()
    {
        MainWindow w({false, false, {}, false});
        DeployPanel* d = openDeploy(w, kDemo);
        QVERIFY(d);
        EngineRunPanel* p = d->runPanel();
        p->setProgram(QStringLiteral("/bin/true"));
        QVERIFY2(p->startButton()->isEnabled(), qPrintable(p->statusLabel()->text()));
        const QString command = d->commandView()->toPlainText();
        const QString gpt2 = m_tmp.path() + "/gpt2-check";
        std::filesystem::create_directories(gpt2.toStdString());
        fixtures::writeTinyGpt2(gpt2.toStdString(), DType::F32);

        p->setLaunch(ServingEngine::LlamaCpp, command, 1, gpt2);
        QVERIFY(!p->startButton()->isEnabled());
        QVERIFY(!p->writeButton()->isEnabled());
        QVERIFY2(p->statusLabel()->text().startsWith("Checking"), qPrintable(p->statusLabel()->text()));
        QTRY_VERIFY2_WITH_TIMEOUT(p->statusLabel()->text().contains("model_type 'gpt2'"),
                                  qPrintable(p->statusLabel()->text()), 30000);
        QVERIFY(!p->startButton()->isEnabled());

        // gpt2 asked, then the demo at once: gpt2's refusal, answered after, is not the demo's.
        p->setLaunch(ServingEngine::LlamaCpp, command, 1, gpt2 + "/");
        p->setLaunch(ServingEngine::LlamaCpp, command, 1, kDemo);
        QTRY_VERIFY2_WITH_TIMEOUT(p->startButton()->isEnabled(), qPrintable(p->statusLabel()->text()), 30000);
        QTest::qWait(200);
        QVERIFY2(p->startButton()->isEnabled() && !p->statusLabel()->text().contains("gpt2"),
                 qPrintable(p->statusLabel()->text()));
    }

    void saysWhyItCannotStart()
    {
        MainWindow w({false, false, {}, false});
        DeployPanel* d = openDeploy(w, kDemo);
        QVERIFY(d);
        EngineRunPanel* p = d->runPanel();
        p->setProgram(QString());
        QVERIFY(!p->startButton()->isEnabled());
        QVERIFY2(p->statusLabel()->text().contains("install-llama-cpp.sh"), qPrintable(p->statusLabel()->text()));
        // Without an engine here the file is the hand-off: Write GGUF still works.
        QVERIFY(p->writeButton()->isEnabled());
        const QString gguf = m_tmp.path() + "/written.gguf";
        p->setGgufPath(gguf);
        QTest::mouseClick(p->writeButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(p->statusLabel()->text().startsWith("Wrote"), 60000);
        QVERIFY2(p->statusLabel()->text().contains("written.gguf"), qPrintable(p->statusLabel()->text()));
        QFile written(gguf);
        QVERIFY(written.open(QIODevice::ReadOnly));
        QCOMPARE(written.read(4), QByteArray("GGUF"));
        QVERIFY(p->server()->processId() == 0); // written, not started
        p->setProgram(QStringLiteral("/bin/true"));
        QVERIFY2(p->startButton()->isEnabled(), qPrintable(p->statusLabel()->text()));
        // Two nodes of one GPU each: the first choice that spans both cannot start here.
        d->nodesBox()->setValue(2);
        const auto& choices = d->plan().choices;
        int twoNodes = -1;
        for (size_t i = 0; i < choices.size() && twoNodes < 0; ++i)
            if (choices[i].fits && choices[i].tp * choices[i].pp == 2)
                twoNodes = int(i);
        QVERIFY(twoNodes >= 0);
        d->table()->selectRow(twoNodes);
        QVERIFY(!p->startButton()->isEnabled());
        QVERIFY2(p->statusLabel()->text().contains("spans 2 nodes"), qPrintable(p->statusLabel()->text()));
        // Another engine: only llama.cpp starts here for now.
        d->engineBox()->setCurrentIndex(d->engineBox()->findText("vllm"));
        QVERIFY(!p->startButton()->isEnabled());
        QVERIFY2(p->statusLabel()->text().contains("only llama.cpp"), qPrintable(p->statusLabel()->text()));
    }
};

QTEST_MAIN(TestEngineRun)
#include "tst_enginerun.moc"
