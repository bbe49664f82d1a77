// The Plan page's "Hardware to buy" and "Deploy" tabs offscreen at 96 DPI,
// on the Llama-2-7B-shaped config and index tst_shop works out by hand: the
// setups that reach 60 tok/s cheapest first, the table never showing rows
// for inputs no longer on screen, and one click opening a setup as simulated
// GPUs in the budget bars; the deployment choices on eight H100s, their
// picture and launch command.
#include "budgetmodel.h"
#include "deploypanel.h"
#include "enginerunpanel.h"
#include "fixtures.h"
#include "moefixtures.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "shoppanel.h"

#include <QApplication>
#include <QComboBox>
#include <QPlainTextEdit>
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

    // The window on `path`, its Deploy tab showing one node of `gpus` H100s and 4,096 tokens.
    DeployPanel* openDeploy(MainWindow& w, const std::string& path, int gpus)
    {
        w.resize(1400, 1100);
        w.show();
        QSignalSpy opened(&w, &MainWindow::checkpointOpened);
        w.openCheckpoint(QString::fromStdString(path));
        if (!QTest::qWaitFor([&] { return opened.count() == 1; }, 10000))
            return nullptr;
        PlanningPage* page = w.planningPage();
        DeployPanel* d = page->deployPanel();
        page->outlookTabs()->setCurrentWidget(d);
        d->gpuBox()->setCurrentIndex(d->gpuBox()->findData(QStringLiteral("h100-80gb")));
        d->nodesBox()->setValue(1);
        d->gpusPerNodeBox()->setValue(gpus);
        d->contextBox()->setValue(4096);
        return d;
    }

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

    void deployTab()
    {
        MainWindow w(fixedMachine());
        DeployPanel* d = openDeploy(w, m_dir, 8);
        QVERIFY(d);
        // vLLM on one node of eight H100s: TP 8 first (tst_deploy's rules):
        // a layer's share 2 x 4096^2 / 8 + 2 x 4 x 128 x 4096 + 3 x 4096 x
        // 11008 / 8 + 8,192 = 25,305,088 parameters, x 32, the embedding and
        // head 32,000 / 8 x 4096 each and the norm: 842,534,912 in bf16.
        QTableView* v = d->table();
        QCOMPARE(cell(v, 0, 0), QString("TP 8 × PP 1"));
        QCOMPARE(d->plan().choices.front().weightsPerGpu, uint64_t(1'685'069'824));
        QCOMPARE(cell(v, 0, 5), QString("fits"));
        QVERIFY2(d->commandView()->toPlainText().startsWith("vllm serve ") &&
                     d->commandView()->toPlainText().contains("--tensor-parallel-size 8 --pipeline-parallel-size 1"),
                 qPrintable(d->commandView()->toPlainText()));
        QVERIFY(d->copyButton()->isEnabled());
        // The picture: every GPU of the node holds the same share.
        const DeployChoice& c = d->plan().choices.front();
        for (int g = 0; g < 8; ++g)
            QCOMPARE(d->picture()->heldOn(0, g), c.stageWeights[0] + c.stageKv[0] + c.overheadPerGpu);
        // TGI: tensor parallel only, so no pipeline choice; the table follows at once.
        d->engineBox()->setCurrentIndex(d->engineBox()->findText("tgi"));
        for (int r = 0; r < v->model()->rowCount(); ++r)
            QVERIFY2(cell(v, r, 0).endsWith("PP 1"), qPrintable(cell(v, r, 0)));
        QVERIFY(d->commandView()->toPlainText().startsWith("text-generation-launcher"));
        // Two nodes of one small GPU each: a row that does not fit says why and offers no command.
        d->engineBox()->setCurrentIndex(d->engineBox()->findText("vllm"));
        d->gpuBox()->setCurrentIndex(d->gpuBox()->findData(QStringLiteral("t4")));
        d->gpusPerNodeBox()->setValue(1);
        int unfit = -1;
        for (int r = 0; r < v->model()->rowCount() && unfit < 0; ++r)
            if (cell(v, r, 5) != "fits")
                unfit = r;
        QVERIFY(unfit >= 0);
        v->selectRow(unfit);
        QVERIFY(!d->copyButton()->isEnabled());
        QVERIFY(d->commandView()->toPlainText().startsWith("needs"));
    }

    // A mixture of experts under llama.cpp: the row that keeps the experts
    // of the first layers in host RAM, its launch, and the host's RAM as an
    // input (tst_deploy derives the sizes; here the window follows them).
    void deployExpertsInHostRam()
    {
        const std::string dir = m_tmp.path().toStdString() + "/mixtral";
        fixtures::writeMixtral8x7bIndex(dir, DType::BF16); // index only
        MainWindow w(fixedMachine());
        DeployPanel* d = openDeploy(w, dir, 1);
        QVERIFY(d);
        QVERIFY(!d->hostRamBox()->isVisible()); // vLLM has no such flag
        d->engineBox()->setCurrentIndex(d->engineBox()->findText("llama.cpp"));
        QVERIFY(d->hostRamBox()->isVisible());
        QCOMPARE(d->hostRamBox()->value(), 64);
        QTableView* v = d->table();
        QCOMPARE(v->model()->rowCount(), 2);
        QCOMPARE(cell(v, 0, 0), QString("TP 1 × PP 1 + experts of 6 layers in RAM"));
        QCOMPARE(cell(v, 0, 5), QString("fits"));
        QCOMPARE(d->commandView()->toPlainText(),
                 QString("llama-server -m MODEL.gguf -ngl all -c 4096 --parallel 1 --n-cpu-moe 6"));
        QVERIFY(cell(v, 1, 5).startsWith("needs"));
        // A host of 16 GB cannot hold six layers' 16.9 GB of experts: no row fits, and it says why.
        d->hostRamBox()->setValue(16);
        QCOMPARE(cell(v, 0, 0), QString("TP 1 × PP 1"));
        QVERIFY2(cell(v, 1, 5).startsWith("the experts kept in RAM need"), qPrintable(cell(v, 1, 5)));
        QVERIFY(!d->copyButton()->isEnabled());
        // Every line of the status shows once the layout settles: its height is its text's at its width.
        d->hostRamBox()->setValue(64);
        QLabel* status = d->statusLabel();
        QTRY_VERIFY2(status->height() >= status->fontMetrics()
                                             .boundingRect(status->contentsRect(), Qt::TextWordWrap, status->text())
                                             .height(),
                     qPrintable(QString::number(status->height())));
        if (const QString shots = QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR")); !shots.isEmpty()) {
            QTRY_VERIFY(!d->runPanel()->statusLabel()->text().startsWith("Checking"));
            QTest::qWait(200); // its new text's layout, for the picture
            QVERIFY(w.grab().save(shots + "/deploy-moe.png"));
        }
    }
};

QTEST_MAIN(TestShopView)
#include "tst_shopview.moc"
