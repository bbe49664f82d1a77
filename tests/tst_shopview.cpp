// The Plan page's "Hardware to buy" tab offscreen at 96 DPI, on the
// Llama-2-7B-shaped config and index tst_shop works out by hand: the
// setups that reach 60 tok/s cheapest first, the table never showing rows
// for inputs no longer on screen, and one click opening a setup as simulated
// GPUs in the budget bars.
#include "budgetmodel.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "shoppanel.h"

#include <QApplication>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QtTest>

#include <filesystem>

using namespace stowage;

namespace {
MainWindow::Options fixedMachine() { return {false, false, {}, false}; }

QString cell(QTableView* v, int row, int column) { return v->model()->index(row, column).data().toString(); }
} // namespace

class TestShopView : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_dir;

private slots:
    void initTestCase()
    {
        QApplication::setOrganizationName("StowageTest");
        QApplication::setApplicationName("tst_shopview");
        m_dir = m_tmp.path().toStdString() + "/llama7b";
        std::filesystem::create_directories(m_dir);
        const fixtures::LlamaShape s{32000, 4096, 11008, 32, 32, 32, false};
        fixtures::writeSharded(m_dir, fixtures::llamaTensors(s, DType::BF16), 2, false, /*writeShards=*/false);
        fixtures::writeJson(m_dir + "/config.json", fixtures::llamaConfig(s, DType::BF16));
    }

    void listsSetupsAndOpensOne()
    {
        MainWindow w(fixedMachine());
        w.resize(1400, 900);
        w.show();
        QSignalSpy opened(&w, &MainWindow::checkpointOpened);
        w.openCheckpoint(QString::fromStdString(m_dir));
        QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 10000);
        QVERIFY(opened[0][0].toBool());
        PlanningPage* page = w.planningPage();
        ShopPanel* shop = page->shopPanel();
        QSignalSpy searched(shop, &ShopPanel::searched);
        shop->speedBox()->setValue(60);
        shop->maxGpusBox()->setValue(2);
        shop->ramBox()->setText("32");
        // Hidden, it does not search; shown, it does, once.
        QTest::qWait(400);
        QCOMPARE(searched.count(), 0);
        page->outlookTabs()->setCurrentWidget(shop);
        QTRY_VERIFY_WITH_TIMEOUT(searched.count() >= 1 && !shop->searching(), 20000);

        // tst_shop's arithmetic: 13,476,831,232 bytes a token, all on one
        // GPU. Of every preset with a price the RTX 3090 is the cheapest to
        // reach 60: 936e9 / 13.48e9 = 69.45 tok/s for $1,499 + 32 GiB x $4.
        QTableView* v = shop->table();
        QVERIFY(v->model()->rowCount() >= 2);
        QCOMPARE(cell(v, 0, 0), QString("1 × rtx3090"));
        QCOMPARE(cell(v, 0, 1), QString("32 GiB"));
        QCOMPARE(cell(v, 0, 2), QString("$1,627"));
        QCOMPARE(cell(v, 0, 3), QString("69.5 tok/s"));
        // then the RTX 4090: 1008e9 / 13.48e9 = 74.8 tok/s, $1,727
        QCOMPARE(cell(v, 1, 0), QString("1 × rtx4090"));
        QCOMPARE(cell(v, 1, 2), QString("$1,727"));
        QCOMPARE(cell(v, 0, 4), QString("GPUs"));
        QCOMPARE(cell(v, 0, 5), QString("meets"));
        QVERIFY2(shop->statusLabel()->text().contains("reach 60 tok/s"), qPrintable(shop->statusLabel()->text()));
        // the CPU alone is never cheaper than reaching it, and comes after every setup that does
        int cpuRow = -1;
        for (int r = 0; r < v->model()->rowCount(); ++r)
            if (cell(v, r, 0) == "CPU only")
                cpuRow = r;
        QVERIFY(cpuRow > 0 && cell(v, cpuRow, 5) != "meets");

        // A new target clears the table at once: no row answers the old one.
        shop->speedBox()->setValue(500);
        QCOMPARE(v->model()->rowCount(), 0);
        QVERIFY(!shop->openButton()->isEnabled());
        const int before = searched.count();
        QTRY_VERIFY_WITH_TIMEOUT(searched.count() > before && !shop->searching(), 20000);
        // 500 tok/s: 13.48 GB read per token needs 6.7 TB/s; one H200 reads
        // 4.8 TB/s, two 9.6 TB/s in parallel but one after the other at
        // batch 1: none reaches it.
        QVERIFY2(shop->statusLabel()->text().startsWith("No setup reaches 500 tok/s"),
                 qPrintable(shop->statusLabel()->text()));

        // Back to 60; open the cheapest as simulated GPUs: the bars get one
        // RTX 3090 of 24 GB, replacing any simulated GPU there was.
        BudgetModel* m = w.budgetModel();
        m->addSimulatedGpu("GPU", QString(), 4'000'000);
        m->addSimulatedGpu("GPU", QString(), 4'000'000);
        shop->speedBox()->setValue(60);
        const int again = searched.count();
        QTRY_VERIFY_WITH_TIMEOUT(searched.count() > again && !shop->searching(), 20000);
        v->selectRow(0);
        QVERIFY(shop->openButton()->isEnabled());
        QTest::mouseClick(shop->openButton(), Qt::LeftButton);
        QCOMPARE(m->simulatedGpuCount(), 1);
        const int row = m->rowOf(Device::gpu(0));
        QCOMPARE(m->at(row).preset, QString("rtx3090"));
        QCOMPARE(m->at(row).capacity, quint64(24'000'000'000));
        QCOMPARE(m->at(row).hardware, QString("NVIDIA GeForce RTX 3090"));
    }
};

QTEST_MAIN(TestShopView)
#include "tst_shopview.moc"
