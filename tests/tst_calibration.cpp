// The calibration the window learns from runs, exactly: the factor is the
// geometric mean of measured/predicted over the newest 20 runs per policy,
// kept per machine in the settings, and reset forgets only this machine.
// Expected values are worked by hand in the comments.
#include "calibration.h"

#include <QCoreApplication>
#include <QSettings>
#include <QSignalSpy>
#include <QtTest>

#include <cmath>

using namespace stowage;

class TestCalibration : public QObject {
    Q_OBJECT
private slots:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName("StowageTest");
        QCoreApplication::setApplicationName("tst_calibration");
    }
    void init() { QSettings().clear(); }

    void factorIsTheGeometricMeanPerPolicy()
    {
        Calibration c("machine A");
        QCOMPARE(c.factor(ExecutionPolicy::Prefetch).runs, 0);
        QCOMPARE(c.factor(ExecutionPolicy::Prefetch).factor, 1.0);
        QVERIFY(c.describe(ExecutionPolicy::Prefetch).isEmpty());
        QSignalSpy changed(&c, &Calibration::changed);
        // 50 tok/s measured of 100 predicted, then 400 of 100: ratios 0.5 and 4,
        // geometric mean sqrt(2).
        QVERIFY(c.record(ExecutionPolicy::Prefetch, 100, 50, 10));
        QVERIFY(c.record(ExecutionPolicy::Prefetch, 100, 400, 10));
        QCOMPARE(changed.size(), 2);
        QCOMPARE(c.factor(ExecutionPolicy::Prefetch).runs, 2);
        QVERIFY(std::abs(c.factor(ExecutionPolicy::Prefetch).factor - std::sqrt(2.0)) < 1e-12);
        // Other policies are untouched.
        QCOMPARE(c.factor(ExecutionPolicy::AccelerateLike).runs, 0);
        QVERIFY(c.record(ExecutionPolicy::AccelerateLike, 2000, 460, 4));
        QCOMPARE(c.describe(ExecutionPolicy::AccelerateLike),
                 QStringLiteral("this machine runs accelerate hooks at 0.23× the model's prediction, from 1 run"));
        QCOMPARE(c.describe(ExecutionPolicy::Prefetch),
                 QStringLiteral("this machine runs prefetch at 1.41× the model's prediction, from 2 runs"));
        QCOMPARE(c.totalRuns(), 3);
    }

    void refusesRunsThatSayNothing()
    {
        Calibration c("machine A");
        QVERIFY(!c.record(ExecutionPolicy::Prefetch, 0, 50, 10));
        QVERIFY(!c.record(ExecutionPolicy::Prefetch, 100, 0, 10));
        QVERIFY(!c.record(ExecutionPolicy::Prefetch, 100, std::nan(""), 10));
        QVERIFY(!c.record(ExecutionPolicy::Prefetch, INFINITY, 50, 10));
        QVERIFY(!c.record(ExecutionPolicy::Prefetch, 100, 50, Calibration::kMinTokens - 1));
        QCOMPARE(c.totalRuns(), 0);
    }

    void keepsTheNewestTwenty()
    {
        Calibration c("machine A");
        for (int i = 0; i < 20; ++i)
            QVERIFY(c.record(ExecutionPolicy::ComputeWhereItLives, 10, 10, 8)); // ratio 1
        for (int i = 0; i < 5; ++i)
            QVERIFY(c.record(ExecutionPolicy::ComputeWhereItLives, 10, 20, 8)); // ratio 2
        // Kept: 15 ones and 5 twos, so 2^(5/20).
        const Calibration::Factor f = c.factor(ExecutionPolicy::ComputeWhereItLives);
        QCOMPARE(f.runs, 20);
        QVERIFY(std::abs(f.factor - std::pow(2.0, 0.25)) < 1e-12);
        // The same after a restart.
        Calibration again("machine A");
        QCOMPARE(again.factor(ExecutionPolicy::ComputeWhereItLives).runs, 20);
        QVERIFY(std::abs(again.factor(ExecutionPolicy::ComputeWhereItLives).factor - std::pow(2.0, 0.25)) < 1e-12);
    }

    void perMachineAndResettable()
    {
        {
            Calibration a("AMD EPYC, 2 cores");
            QVERIFY(a.record(ExecutionPolicy::Prefetch, 100, 80, 10));
            Calibration b("Intel Xeon, 8 cores");
            QVERIFY(b.record(ExecutionPolicy::Prefetch, 100, 120, 10));
        }
        Calibration a("AMD EPYC, 2 cores");
        Calibration b("Intel Xeon, 8 cores");
        QCOMPARE(a.factor(ExecutionPolicy::Prefetch).factor, 0.8);
        QCOMPARE(b.factor(ExecutionPolicy::Prefetch).factor, 1.2);
        QSignalSpy changed(&a, &Calibration::changed);
        a.reset();
        QCOMPARE(changed.size(), 1);
        QCOMPARE(a.totalRuns(), 0);
        QCOMPARE(Calibration("AMD EPYC, 2 cores").totalRuns(), 0);
        QCOMPARE(Calibration("Intel Xeon, 8 cores").factor(ExecutionPolicy::Prefetch).factor, 1.2);
        // Settings written by hand with a bad value: it is skipped, not trusted.
        QSettings().setValue("prediction/calibration",
                             QByteArray(R"({"m":{"prefetch":[0.5,-1,"x",2],"bogus":[3]}})"));
        Calibration m("m");
        QCOMPARE(m.factor(ExecutionPolicy::Prefetch).runs, 2);
        QCOMPARE(m.factor(ExecutionPolicy::Prefetch).factor, 1.0);
    }
};

QTEST_GUILESS_MAIN(TestCalibration)
#include "tst_calibration.moc"
