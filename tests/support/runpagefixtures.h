#pragma once
// Test support for the Run page suites against the real worker process
// (tst_runpage, tst_runpage_predictions), header only: the window's options,
// the screenshot folder, and a suite's scratch folder, demo checkpoint and
// slow machine profile with the steps most tests take (open, Dispatch,
// Generate).
#include "fixtures.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "runcontroller.h"
#include "runpage.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

namespace fixtures {

// A suite's state and steps, a test class's second base (after QObject).
class RunPageSuite {
protected:
    QTemporaryDir m_tmp;
    QString m_demo, m_slowProfile;

    static QString shotDir() { return QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR")); }

    static stowage::MainWindow::Options options()
    {
        stowage::MainWindow::Options o;
        o.probeMachine = false;
        o.restoreSettings = false;
        o.workerProgram = QStringLiteral(STOWAGE_CLI);
        o.demoBudgets = false; // each test sets the budgets it runs under
        return o;
    }

    // initTestCase's common part: settings kept under `application`, the demo
    // built with the tests, and a machine profile whose GPU copies at a crawl.
    void initSuite(const char* application)
    {
        QVERIFY(m_tmp.isValid());
        QApplication::setOrganizationName("StowageTest");
        QApplication::setApplicationName(application);
        m_demo = QStringLiteral(STOWAGE_BUILD_DEMO_DIR);
        QVERIFY2(QFileInfo::exists(m_demo + "/config.json"), qPrintable(m_demo));
        nlohmann::json gpu{{"name", "slow test GPU"}, {"memoryBytes", 1000000000}, {"memoryBandwidth", 1e11},
                           {"h2dPinned", 3e6}, {"h2dPageable", 3e6}, {"flops", 1e12}};
        nlohmann::json p{{"name", "slow test machine"}, {"ramBytes", 1000000000}, {"ramBandwidth", 1e10},
                         {"diskReadBandwidth", 1e9}, {"cpuFlops", 1e11}, {"gpus", {gpu}}};
        m_slowProfile = m_tmp.path() + "/slow.json";
        writeJson(m_slowProfile.toStdString(), p);
    }

    bool open(stowage::MainWindow& w, const QString& path)
    {
        w.resize(1500, 950);
        w.show();
        QSignalSpy opened(&w, &stowage::MainWindow::checkpointOpened);
        w.openCheckpoint(path);
        if (!opened.wait(60000) || !opened[0][0].toBool())
            return false;
        w.pages()->setCurrentWidget(w.runPage());
        return w.planningPage()->plan() != nullptr;
    }

    bool dispatchAndWait(stowage::RunPage* run, int ms = 120000)
    {
        QSignalSpy spy(run, &stowage::RunPage::dispatched);
        run->dispatch();
        return spy.wait(ms) && spy[0][0].toBool();
    }

    bool generateAndWait(stowage::RunPage* run, int ms = 120000)
    {
        QSignalSpy done(run, &stowage::RunPage::generationDone);
        QSignalSpy failed(run->controller(), &stowage::RunController::failed);
        QSignalSpy ended(run->controller(), &stowage::RunController::workerEnded);
        run->generate();
        QElapsedTimer t;
        t.start();
        while (done.isEmpty() && failed.isEmpty() && ended.isEmpty() && t.elapsed() < ms)
            QTest::qWait(10);
        if (!failed.isEmpty())
            qWarning("generation failed: %s", qPrintable(failed[0][0].toString()));
        return !done.isEmpty();
    }
};

} // namespace fixtures
