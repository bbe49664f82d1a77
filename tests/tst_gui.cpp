// The main window offscreen at 96 DPI: opening a checkpoint off the GUI
// thread; errors in the window that keep the previous model; budget bars
// dragged with QTest mouse events, moved with keys and typed into, each
// re-planning exactly as planDeviceMap does; the placement map's hover
// reasons and its selection synced with the module tree; import -> export
// through the UI actions is the identity; snippets; the Hub cache dialog;
// `stowage --screenshot` draws bars, map and totals.
#include "budgetbar.h"
#include "budgetbarsview.h"
#include "budgetmodel.h"
#include "devicemapmodel.h"
#include "display.h"
#include "fixtures.h"
#include "hubcachedialog.h"
#include "hubcachemodel.h"
#include "mainwindow.h"
#include "moduletreemodel.h"
#include "placementmap.h"
#include "planningpage.h"
#include "plancontrols.h"
#include "predictionmodel.h"
#include "stowage/checkpoint.h"
#include "stowage/fileio.h"
#include "stowage/planner.h"
#include "stowage/units.h"

#include <QAbstractItemModelTester>
#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QFileDialog>
#include <QHeaderView>
#include <QLineEdit>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QProcess>
#include <QSignalSpy>
#include <QTableView>
#include <QTreeView>
#include <QtTest>

#include <filesystem>
#include <set>

using namespace stowage;

namespace {
constexpr quint64 MiB = 1ull << 20;

QString shotDir() { return QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR")); }

MainWindow::Options fixedMachine() { return {false, false, {}, false}; }
} // namespace

class TestGui : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_dir;
private slots:
    void initTestCase();
    void windowOpensCheckpoint();
    void badPathShowsErrorAndKeepsModel();
    void planSplitsAcrossGpuAndCpu();
    void dragChangesBudgetAndPlan();
    void keysChangeBudget();
    void typedBudgetReplansAndBadTextKeepsPlan();
    void placementHoverAndSelectionSync();
    void importExportThroughActionsIsIdentity();
    void importListsProblemsByModule();
    void importNamesMissingGpuAndOverBudget();
    void snippetsCopied();
    void predictionNamesAssumedHardware();
    void hubCacheDialogListsAndOpens();
    void screenshotShowsBarsMapAndTotals();
    void demoOpensOnItsOwnBudgetsAndGivesThemBack();
    void mnemonicsAreUniqueAndTabsSwitchByKeys();
    void tabLeavesTheMapAndColumnsFit();

private:
    void open(MainWindow& w);
    // GPU 0 (simulated, 1 MiB) gets three quarters of the model: the map splits.
    void openAndSplit(MainWindow& w);
    void expectPlanMatchesEngine(MainWindow& w);
};

void TestGui::initTestCase()
{
    QApplication::setOrganizationName("StowageTest");
    QApplication::setApplicationName("tst_gui");
    m_dir = m_tmp.path().toStdString() + "/gpt2";
    std::filesystem::create_directories(m_dir);
    fixtures::writeSafetensorsFile(m_dir + "/model.safetensors", fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F16), false);
    fixtures::writeJson(m_dir + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F16));
}

void TestGui::open(MainWindow& w)
{
    w.resize(1400, 900);
    w.show();
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    w.openCheckpoint(QString::fromStdString(m_dir));
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 10000);
    QVERIFY(opened[0][0].toBool());
    QVERIFY(w.planningPage()->plan() != nullptr);
}

void TestGui::openAndSplit(MainWindow& w)
{
    open(w);
    BudgetModel* m = w.budgetModel();
    m->addSimulatedGpu("NVIDIA GeForce RTX 4090", "rtx4090", 1 * MiB);
    const quint64 gpu = w.moduleModel()->tree()->root().bytes * 3 / 4;
    m->setBudget(m->rowOf(Device::gpu(0)), gpu);
    m->setBudget(m->rowOf(Device::cpu()), 1'000'000'000);
}

void TestGui::expectPlanMatchesEngine(MainWindow& w)
{
    const Plan expected = planDeviceMap(*w.planningPage()->tree(), w.planningPage()->options());
    QCOMPARE(deviceMapToJson(w.planningPage()->plan()->deviceMap), deviceMapToJson(expected.deviceMap));
    const DeviceMapModel& model = *w.deviceMapModel();
    QCOMPARE(model.rowCount(), int(expected.entries.size()));
    for (int r = 0; r < model.rowCount(); ++r)
        QCOMPARE(model.data(model.index(r, DeviceMapModel::DeviceColumn), DeviceMapModel::DeviceNameRole).toString(),
                 QString::fromStdString(expected.entries[size_t(r)].device.name()));
}

void TestGui::windowOpensCheckpoint()
{
    MainWindow w(fixedMachine());
    QAbstractItemModelTester t1(w.moduleModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t2(w.budgetModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t3(w.deviceMapModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t4(w.planningPage()->predictionModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    open(w);
    QVERIFY(w.summary().contains("gpt2"));
    QCOMPARE(w.moduleModel()->rowCount(), 1);
    // No GPU on the fixed machine: everything on the CPU, said in the totals.
    QCOMPARE(w.planningPage()->plan()->deviceMap.front().second, Device::cpu());
    QVERIFY(w.totalsText().contains("CPU"));
    QVERIFY(w.action("exportMap")->isEnabled());
    QCOMPARE(w.planningPage()->predictionModel()->rowCount(), 3);
}

void TestGui::badPathShowsErrorAndKeepsModel()
{
    MainWindow w(fixedMachine());
    open(w);
    const auto tree = w.moduleModel()->sharedTree();
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    w.openCheckpoint("/no/such/checkpoint");
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 10000);
    QVERIFY(!opened[0][0].toBool());
    QVERIFY2(w.errorText().contains("/no/such/checkpoint: no such file or folder"), qPrintable(w.errorText()));
    QCOMPARE(w.moduleModel()->sharedTree(), tree); // the open model is kept
    QVERIFY(w.planningPage()->plan() != nullptr);
    w.openCheckpoint(QString::fromStdString(m_dir)); // and the window still works
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 2, 10000);
    QVERIFY(w.errorText().isEmpty());
}

void TestGui::planSplitsAcrossGpuAndCpu()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    expectPlanMatchesEngine(w);
    QSet<Device::Kind> kinds;
    for (const auto& [k, d] : w.planningPage()->plan()->deviceMap)
        kinds.insert(d.kind);
    QVERIFY(kinds.contains(Device::Gpu));
    QVERIFY(kinds.contains(Device::Cpu));
    QVERIFY(w.totalsText().contains("GPU 0"));
    // The bars carry the plan's totals.
    const BudgetModel* m = w.budgetModel();
    QVERIFY(m->at(m->rowOf(Device::gpu(0))).used > 0);
    QVERIFY(m->at(m->rowOf(Device::cpu())).used > 0);
    if (!shotDir().isEmpty())
        w.grab().save(shotDir() + "/planning.png");
}

void TestGui::dragChangesBudgetAndPlan()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    BudgetModel* m = w.budgetModel();
    const int row = m->rowOf(Device::gpu(0));
    BudgetBar* bar = w.planningPage()->budgetBars()->bar(row);
    QVERIFY(bar);
    QTRY_VERIFY(bar->isVisible());
    const std::string before = deviceMapToJson(w.planningPage()->plan()->deviceMap);
    const quint64 budgetBefore = m->at(row).budget;
    const int y = bar->trackRect().center().y();
    // Drag the handle to the far left: GPU 0 gets nothing, all goes to the CPU.
    QTest::mousePress(bar, Qt::LeftButton, {}, QPoint(bar->xForBytes(budgetBefore), y));
    QVERIFY(bar->dragging());
    for (int x = bar->xForBytes(budgetBefore); x > 0; x -= 10)
        QTest::mouseMove(bar, QPoint(x, y));
    QTest::mouseRelease(bar, Qt::LeftButton, {}, QPoint(1, y));
    QCOMPARE(m->at(row).budget, quint64(0));
    QVERIFY(deviceMapToJson(w.planningPage()->plan()->deviceMap) != before);
    QCOMPARE(w.planningPage()->plan()->deviceMap.size(), size_t(1));
    QCOMPARE(w.planningPage()->plan()->deviceMap.front().second, Device::cpu());
    // The field shows the dragged value.
    QCOMPARE(w.planningPage()->budgetBars()->edit(row)->text(), QString("0"));
    // Drag to the right end: the bar's scale (1 MiB, the GPU's memory) -> all on GPU 0.
    QTest::mousePress(bar, Qt::LeftButton, {}, QPoint(2, y));
    QTest::mouseMove(bar, QPoint(bar->width() / 2, y));
    const quint64 half = m->at(row).budget;
    QVERIFY2(half > 400 * 1024 && half < 600 * 1024, qPrintable(QString::number(half)));
    // The middle of a 1 MiB bar (knee 1 MiB): (sqrt(2) - 1) MiB = 434,334, snapped to 32 KiB = 416 KiB.
    QCOMPARE(half, quint64(425984));
    QTest::mouseRelease(bar, Qt::LeftButton, {}, QPoint(bar->width() - 1, y));
    QCOMPARE(m->at(row).budget, 1 * MiB);
    QCOMPARE(w.planningPage()->plan()->deviceMap.front().second, Device::gpu(0));
    expectPlanMatchesEngine(w);
}

void TestGui::keysChangeBudget()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    BudgetModel* m = w.budgetModel();
    const int row = m->rowOf(Device::gpu(0));
    BudgetBar* bar = w.planningPage()->budgetBars()->bar(row);
    bar->setFocus();
    m->setBudget(row, 512 * 1024);
    // Arrows move 1/40 of the bar (position log2(1 + b / 1 MiB)), snapped to 32 KiB:
    // 512 KiB sits at 0.58496; -0.025 -> 497,165 -> 480 KiB; +0.025 twice -> 512 KiB, 544 KiB.
    QTest::keyClick(bar, Qt::Key_Left);
    QCOMPARE(m->at(row).budget, quint64(480 * 1024));
    QTest::keyClick(bar, Qt::Key_Right);
    QCOMPARE(m->at(row).budget, quint64(512 * 1024));
    QTest::keyClick(bar, Qt::Key_Right);
    QCOMPARE(m->at(row).budget, quint64(544 * 1024));
    QTest::keyClick(bar, Qt::Key_Home);
    QCOMPARE(m->at(row).budget, quint64(0));
    QCOMPARE(w.planningPage()->plan()->deviceMap.front().second, Device::cpu());
    QTest::keyClick(bar, Qt::Key_End);
    QCOMPARE(m->at(row).budget, 1 * MiB); // the GPU's memory
    QCOMPARE(w.planningPage()->plan()->deviceMap.front().second, Device::gpu(0));
    // On the 64 GiB CPU bar (knee 6.87 MB) a page is an eighth of the bar: 32 GiB sits at
    // ln(5001) / ln(10001) = 0.92475; -0.125 -> 10.0 GiB (step 256 MiB). Shift+Right, 1/400:
    // (10 GiB + k) x e^(9.21044 / 400) - k = 10,485 MiB, snapped to the fine 16 MiB step -> 10,480 MiB.
    const int cpu = m->rowOf(Device::cpu());
    BudgetBar* cbar = w.planningPage()->budgetBars()->bar(cpu);
    m->setBudget(cpu, 32ull << 30);
    QCOMPARE(m->data(m->index(cpu, 0), BudgetModel::ScaleRole).value<quint64>(), 64ull << 30);
    QTest::keyClick(cbar, Qt::Key_PageDown);
    QCOMPARE(m->at(cpu).budget, 10ull << 30);
    const quint64 b = m->at(cpu).budget;
    QTest::keyClick(cbar, Qt::Key_Right, Qt::ShiftModifier);
    QCOMPARE(b, 10ull << 30);
    QCOMPARE(m->at(cpu).budget, 10480 * MiB);
    expectPlanMatchesEngine(w);
}

void TestGui::typedBudgetReplansAndBadTextKeepsPlan()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    BudgetModel* m = w.budgetModel();
    const int row = m->rowOf(Device::gpu(0));
    QLineEdit* edit = w.planningPage()->budgetBars()->edit(row);
    edit->setFocus();
    edit->selectAll();
    QTest::keyClicks(edit, "1MiB");
    QTest::keyClick(edit, Qt::Key_Return);
    QCOMPARE(m->at(row).budget, 1 * MiB);
    QCOMPARE(w.planningPage()->plan()->deviceMap.front().second, Device::gpu(0));
    const std::string before = deviceMapToJson(w.planningPage()->plan()->deviceMap);
    edit->selectAll();
    QTest::keyClicks(edit, "ten gigs");
    QTest::keyClick(edit, Qt::Key_Return);
    QCOMPARE(m->at(row).budget, 1 * MiB); // the last good value stays
    QVERIFY(!edit->styleSheet().isEmpty()); // shown red
    QVERIFY(edit->toolTip().contains("ten gigs"));
    QCOMPARE(deviceMapToJson(w.planningPage()->plan()->deviceMap), before);
    edit->selectAll();
    QTest::keyClicks(edit, "10KB"); // Accelerate: KB = 10^3
    QTest::keyClick(edit, Qt::Key_Return);
    QCOMPARE(m->at(row).budget, quint64(10'000));
    QVERIFY(edit->styleSheet().isEmpty());
    expectPlanMatchesEngine(w);
    // Strategy and dtype re-plan too.
    w.planningPage()->controls()->setStrategy(Strategy::Sequential);
    w.planningPage()->controls()->setDType(DType::F32);
    QCOMPARE(w.planningPage()->tree()->dtype(), std::optional<DType>(DType::F32));
    expectPlanMatchesEngine(w);
}

void TestGui::placementHoverAndSelectionSync()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    PlacementMap* map = w.planningPage()->placementMap();
    const PlacementLayout& l = map->layout();
    QVERIFY(l.blocks.size() >= 4);
    // The last block is ln_f (on the CPU); a block on GPU 0 is the first.
    const ModuleTree& tree = *w.planningPage()->tree();
    int cpuBlock = -1;
    for (size_t b = 0; b < l.blocks.size(); ++b)
        if (l.blocks[b].deviceCode == CpuCode) {
            cpuBlock = int(b);
            break;
        }
    QVERIFY(cpuBlock >= 0);
    const QPoint at = map->blockRect(cpuBlock).center().toPoint();
    const QString tip = map->toolTipAt(at);
    const PlanEntry& e = w.planningPage()->plan()->entries[size_t(l.blocks[size_t(cpuBlock)].entry)];
    QVERIFY2(tip.contains("on CPU") && tip.contains(QString::fromStdString(e.why)), qPrintable(tip));
    // Clicking selects the module in the tree.
    QTest::mouseClick(map, Qt::LeftButton, {}, at);
    const QModelIndex current = w.moduleView()->currentIndex();
    QCOMPARE(current.data(ModuleTreeModel::ModuleIndexRole).toInt(), l.blocks[size_t(cpuBlock)].module);
    // The tree's device column carries the same device.
    QCOMPARE(w.moduleModel()->index(current.row(), ModuleTreeModel::DeviceColumn, current.parent()).data().toString(),
             QString("CPU"));
    // Selecting in the tree outlines the module's blocks in the map.
    const int h = tree.find("transformer.h");
    w.moduleView()->setCurrentIndex(w.moduleModel()->indexOfModule(h));
    QCOMPARE(map->selectedModule(), h);
    if (!shotDir().isEmpty())
        w.grab().save(shotDir() + "/selection.png");
}

void TestGui::importExportThroughActionsIsIdentity()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    // A hand-written map in transformers' form, not what the planner would say.
    const DeviceMap map{{"transformer.wte", Device::cpu()}, {"transformer.wpe", Device::gpu(0)},
                        {"transformer.drop", Device::gpu(0)}, {"transformer.h", Device::disk()},
                        {"transformer.ln_f", Device::cpu()}, {"lm_head", Device::cpu()}};
    const QString in = m_tmp.path() + "/in_map.json", out = m_tmp.path() + "/out_map.json";
    writeFileAtomically(in.toStdString(), deviceMapToJson(map) + "\n");

    w.action("importMap")->trigger();
    QFileDialog* dlg = nullptr;
    QTRY_VERIFY((dlg = w.findChild<QFileDialog*>()) != nullptr);
    dlg->selectFile(in);
    static_cast<QDialog*>(dlg)->accept();
    QVERIFY(w.planningPage()->showingImportedMap());
    QCOMPARE(w.deviceMapModel()->rowCount(), int(map.size()));
    QVERIFY(w.planningPage()->problemList()->count() == 0);
    QCOMPARE(w.budgetModel()->at(w.budgetModel()->rowOf(Device::disk())).used,
             quint64(w.moduleModel()->tree()->modules()[size_t(w.moduleModel()->tree()->find("transformer.h"))].bytes));
    QTRY_VERIFY(w.findChild<QFileDialog*>() == nullptr);

    w.action("exportMap")->trigger();
    QTRY_VERIFY((dlg = w.findChild<QFileDialog*>()) != nullptr);
    dlg->selectFile(out);
    static_cast<QDialog*>(dlg)->accept();
    QCOMPARE(readTextFile(out.toStdString()), readTextFile(in.toStdString()));

    // A budget change plans again.
    w.budgetModel()->setBudget(w.budgetModel()->rowOf(Device::cpu()), 2'000'000'000);
    QVERIFY(!w.planningPage()->showingImportedMap());
}

void TestGui::importListsProblemsByModule()
{
    MainWindow w(fixedMachine());
    open(w);
    const QString in = m_tmp.path() + "/bad_map.json";
    writeFileAtomically(in.toStdString(), "{\"transformer.wte\": \"cpu\", \"transformer.nope\": 0}\n");
    QVERIFY(w.importDeviceMap(in));
    QListWidget* problems = w.planningPage()->problemList();
    QVERIFY(problems->count() >= 1);
    QStringList all;
    for (int i = 0; i < problems->count(); ++i)
        all << problems->item(i)->text();
    QVERIFY2(all.join("\n").contains("transformer.nope") || all.join("\n").contains("transformer.wpe"), qPrintable(all.join("\n")));
    // Not JSON: said in the window, the last plan stays.
    writeFileAtomically(in.toStdString(), "not json");
    QVERIFY(!w.importDeviceMap(in));
    QVERIFY(w.planningPage()->planError().contains("bad_map.json"));
}

void TestGui::importNamesMissingGpuAndOverBudget()
{
    MainWindow w(fixedMachine());
    openAndSplit(w); // GPU 0 (budget: 3/4 of the model) and the CPU
    const quint64 model = w.moduleModel()->tree()->root().bytes;
    const QString in = m_tmp.path() + "/gpu3_map.json";
    // wpe: 16 positions x 8 wide x 2 bytes (float16) = 256 B on a GPU this page has not; the
    // rest, model - 256 B, on GPU 0, whose budget is 3/4 of the model.
    writeFileAtomically(in.toStdString(), "{\"transformer.wpe\": 3, \"\": 0}\n");
    QVERIFY(w.importDeviceMap(in));
    QListWidget* problems = w.planningPage()->problemList();
    QVERIFY(problems->isVisibleTo(w.planningPage()));
    QStringList all;
    for (int i = 0; i < problems->count(); ++i)
        all << problems->item(i)->text();
    QVERIFY2(all.contains(QString::fromUtf8("✖ transformer.wpe: the map puts 256 B on GPU 3, which is not one of the devices "
                                            "(GPU 0, cpu)")),
             qPrintable(all.join("\n")));
    QVERIFY2(all.contains(QString::fromUtf8("⚠ the map puts %1 on GPU 0, more than its budget of %2")
                              .arg(QString::fromStdString(humanBytes(model - 256)), QString::fromStdString(humanBytes(model * 3 / 4)))),
             qPrintable(all.join("\n")));
    QCOMPARE(all.size(), 2);
    // The entry's Why cell carries it too, and the banner counts both.
    const DeviceMapModel& m = *w.deviceMapModel();
    QVERIFY(m.data(m.index(0, DeviceMapModel::WhyColumn)).toString().contains("not one of the devices"));
    // A map within the budgets and devices lists nothing.
    writeFileAtomically(in.toStdString(), "{\"\": \"cpu\"}\n");
    QVERIFY(w.importDeviceMap(in));
    QCOMPARE(problems->count(), 0);
}

void TestGui::snippetsCopied()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    w.action("copyTransformers")->trigger();
    const QString t = QGuiApplication::clipboard()->text();
    QVERIFY(t.contains("from_pretrained("));
    for (const auto& [k, d] : w.planningPage()->plan()->deviceMap)
        QVERIFY(t.contains(QString::fromStdString("\"" + k + "\": ")));
    QVERIFY(t.contains(QString::fromStdString(m_dir)));
    QVERIFY(t.contains("dtype=torch.float16"));
    w.action("copyAccelerate")->trigger();
    QVERIFY(QGuiApplication::clipboard()->text().contains("no_split_module_classes=[\"GPT2Block\"]"));
}

void TestGui::predictionNamesAssumedHardware()
{
    MainWindow w(fixedMachine());
    openAndSplit(w);
    PlanningPage* page = w.planningPage();
    // The simulated GPU came from the RTX 4090 preset: named, with its source.
    QVERIFY2(page->predictionHardwareText().contains("GPU 0: NVIDIA GeForce RTX 4090 (datasheet)"),
             qPrintable(page->predictionHardwareText()));
    const double before = page->predictionModel()->data(page->predictionModel()->index(0, 0), PredictionModel::TokensPerSecondRole).toDouble();
    QVERIFY(before > 0);
    // A custom-size GPU follows the assumed-GPU box.
    w.budgetModel()->addSimulatedGpu("custom", QString(), 1 * MiB);
    page->assumedGpuBox()->setCurrentIndex(page->assumedGpuBox()->findData("h200"));
    QVERIFY2(page->predictionHardwareText().contains("GPU 1: NVIDIA H200 (datasheet)"), qPrintable(page->predictionHardwareText()));
}

void TestGui::hubCacheDialogListsAndOpens()
{
    const QString root = m_tmp.path() + "/hub";
    const QString entry = root + "/models--acme--tiny-gpt2";
    QDir().mkpath(entry + "/blobs");
    QDir().mkpath(entry + "/snapshots/abc");
    QFile::copy(QString::fromStdString(m_dir) + "/config.json", entry + "/blobs/c1");
    QFile::copy(QString::fromStdString(m_dir) + "/model.safetensors", entry + "/blobs/w1");
    QVERIFY(QFile::link("../../blobs/c1", entry + "/snapshots/abc/config.json"));
    QVERIFY(QFile::link("../../blobs/w1", entry + "/snapshots/abc/model.safetensors"));
    const quint64 expected = quint64(QFileInfo(QString::fromStdString(m_dir) + "/config.json").size() +
                                     QFileInfo(QString::fromStdString(m_dir) + "/model.safetensors").size());

    MainWindow w(fixedMachine());
    w.show();
    HubCacheDialog* dlg = w.showHubCache();
    QAbstractItemModelTester tester(dlg->model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    dlg->setRoot(root);
    QTRY_VERIFY_WITH_TIMEOUT(!dlg->scanning() && dlg->model()->rowCount() == 1, 10000);
    QCOMPARE(dlg->model()->data(dlg->model()->index(0, HubCacheModel::ModelColumn)).toString(), QString("acme/tiny-gpt2"));
    QCOMPARE(dlg->model()->data(dlg->model()->index(0, 0), HubCacheModel::DiskBytesRole).toULongLong(), expected);
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    dlg->view()->setCurrentIndex(dlg->model()->index(0, 0));
    emit dlg->view()->activated(dlg->model()->index(0, 0));
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 10000);
    QVERIFY(opened[0][0].toBool());
    QVERIFY(w.summary().contains("gpt2"));
}

void TestGui::screenshotShowsBarsMapAndTotals()
{
    const QString png = m_tmp.path() + "/shot.png";
    QProcess p;
    p.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    // About a third of the weights on GPU 0 (after the largest-layer reserve), the rest on the CPU.
    const quint64 file = quint64(QFileInfo(QString::fromStdString(m_dir) + "/model.safetensors").size());
    p.start(QStringLiteral(STOWAGE_GUI), {"--screenshot", png, QString::fromStdString(m_dir), "--max-memory",
                                          QStringLiteral("0=%1").arg(file / 2), "--max-memory",
                                          QStringLiteral("cpu=%1").arg(file * 2), "--size", "1400x900"});
    QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitCode(), 0);
    if (!shotDir().isEmpty())
        QFile::copy(png, shotDir() + "/screenshot-cli.png");
    const QImage img(png);
    // The requested size, or a few pixels more where the window's minimum size is larger.
    QVERIFY2(img.width() >= 1400 && img.width() <= 1420 && img.height() >= 900 && img.height() <= 920,
             qPrintable(QStringLiteral("%1x%2").arg(img.width()).arg(img.height())));
    // Not blank: the device colours of GPU 0, the CPU and the disk are all drawn (bars, map, totals).
    QHash<QRgb, int> count;
    for (int y = 0; y < img.height(); y += 2)
        for (int x = 0; x < img.width(); x += 2)
            ++count[img.pixel(x, y) & 0xffffff];
    QVERIFY2(count.value(0x4e79a7) > 200, "GPU 0 colour missing");
    QVERIFY2(count.value(0xf28e2b) > 200, "CPU colour missing");
    QVERIFY(count.size() > 50);
    // Bad input: exit 2 with one line.
    p.start(QStringLiteral(STOWAGE_GUI), {"--screenshot", png, QString::fromStdString(m_dir), "--strategy", "fastest"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 2);
}

// Help -> Open the Demo Model: the demo's budgets put it on a simulated GPU,
// in RAM and on disk, say so above the bars, and give way to the user's own
// budgets when another model opens.
void TestGui::demoOpensOnItsOwnBudgetsAndGivesThemBack()
{
    MainWindow::Options o = fixedMachine();
    o.demoBudgets = true;
    MainWindow w(o);
    w.resize(1400, 900);
    w.show();
    BudgetModel* m = w.budgetModel();
    m->setBudget(m->rowOf(Device::cpu()), 3'000'000'000);
    QCOMPARE(m->gpuCount(), 0);

    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    QAction* demo = w.action("openDemo");
    QVERIFY(demo);
    demo->trigger();
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 10000);
    QVERIFY2(opened[0][0].toBool(), qPrintable(opened[0][1].toString()));
    QVERIFY(w.summary().contains("llama"));
    QCOMPARE(m->gpuCount(), 1);
    QVERIFY(m->at(m->rowOf(Device::gpu(0))).simulated);
    QVERIFY(w.planningPage()->budgetNote().startsWith("Demo budgets"));
    // The note's tint follows the palette: light on a light window, dark
    // with light text on a dark one, and light again when it returns.
    auto* note = w.findChild<QLabel*>("budgetNote");
    QVERIFY(note && note->isVisible());
    auto lightness = [&] {
        QApplication::processEvents();
        const QImage img = note->grab().toImage();
        double sum = 0;
        int n = 0, bright = 0;
        for (int y = 2; y < img.height() - 2; y += 3)
            for (int x = 2; x < img.width() - 2; x += 3, ++n) {
                const double l = QColor(img.pixel(x, y)).lightnessF();
                sum += l;
                bright += l > 0.6;
            }
        return std::make_pair(n ? sum / n : 0.0, n ? double(bright) / n : 0.0);
    };
    const QPalette light = QApplication::palette();
    QVERIFY(lightness().first > 0.75);
    QPalette dark;
    dark.setColor(QPalette::Window, QColor(0x2b2b2b));
    dark.setColor(QPalette::WindowText, QColor(0xe6e6e6));
    dark.setColor(QPalette::Base, QColor(0x1e1e1e));
    dark.setColor(QPalette::Text, QColor(0xe6e6e6));
    QApplication::setPalette(dark);
    const auto [darkMean, darkText] = lightness();
    QApplication::setPalette(light);
    QVERIFY2(darkMean < 0.45, qPrintable(QString::number(darkMean)));
    QVERIFY2(darkText > 0.005, qPrintable(QString::number(darkText))); // its words are light
    QVERIFY(lightness().first > 0.75);
    // All three kinds of memory hold part of the demo.
    std::set<Device::Kind> kinds;
    for (const auto& [module, device] : w.planningPage()->plan()->deviceMap)
        kinds.insert(device.kind);
    QCOMPARE(kinds, (std::set<Device::Kind>{Device::Gpu, Device::Cpu, Device::Disk}));
    expectPlanMatchesEngine(w);

    // Another model: the user's budgets are back, the note gone.
    open(w);
    QCOMPARE(m->gpuCount(), 0);
    QCOMPARE(m->at(m->rowOf(Device::cpu())).budget, quint64(3'000'000'000));
    QVERIFY(w.planningPage()->budgetNote().isEmpty());
}

void TestGui::mnemonicsAreUniqueAndTabsSwitchByKeys()
{
    MainWindow w(fixedMachine());
    open(w);
    // Every Alt+letter of the menu bar and of the Plan page's labels opens
    // one thing: Alt+D the Devices menu, Alt+R the Run menu.
    auto mnemonic = [](const QString& text) {
        const int i = text.indexOf(QRegularExpression(QStringLiteral("&[^&]")));
        return i < 0 ? QChar() : text.at(i + 1).toUpper();
    };
    QMap<QChar, QString> owners;
    QStringList clashes;
    auto claim = [&](const QString& text) {
        const QChar c = mnemonic(text);
        if (c.isNull())
            return;
        if (owners.contains(c))
            clashes << owners[c] + " / " + text;
        owners[c] = text;
    };
    for (QAction* a : w.menuBar()->actions())
        claim(a->text());
    QCOMPARE(owners.value('D'), QString("&Devices"));
    QCOMPARE(owners.value('R'), QString("&Run"));
    for (QLabel* l : w.planningPage()->findChildren<QLabel*>())
        if (l->buddy())
            claim(l->text());
    QVERIFY2(clashes.isEmpty(), qPrintable(clashes.join(", ")));

    // Ctrl+PgDown / Ctrl+PgUp (and Ctrl+Tab) switch Plan and Run from any focus.
    QTreeView* tree = w.findChild<QTreeView*>();
    QVERIFY(tree);
    tree->setFocus();
    QCOMPARE(w.pages()->currentIndex(), 0);
    QTest::keyClick(tree, Qt::Key_PageDown, Qt::ControlModifier);
    QCOMPARE(w.pages()->currentIndex(), 1);
    QTest::keyClick(QApplication::focusWidget() ? QApplication::focusWidget() : &w, Qt::Key_PageUp, Qt::ControlModifier);
    QCOMPARE(w.pages()->currentIndex(), 0);
    QTest::keyClick(QApplication::focusWidget() ? QApplication::focusWidget() : &w, Qt::Key_Tab, Qt::ControlModifier);
    QCOMPARE(w.pages()->currentIndex(), 1);
}

void TestGui::tabLeavesTheMapAndColumnsFit()
{
    MainWindow w(fixedMachine());
    openAndSplit(w); // at the default 1400 x 900
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    // Tab moves on from the device map, not from cell to cell inside it.
    auto* map = w.findChild<QTableView*>("deviceMap");
    QVERIFY(map && map->model()->rowCount() > 1);
    QVERIFY(!map->tabKeyNavigation());
    map->setFocus();
    map->setCurrentIndex(map->model()->index(0, 0));
    QTRY_VERIFY(map->hasFocus());
    QTest::keyClick(map, Qt::Key_Tab);
    QVERIFY(QApplication::focusWidget() != map);
    // Every column of the module tree is as wide as its contents, and all fit the tree.
    auto* tree = w.findChild<QTreeView*>("moduleTree");
    QVERIFY(tree);
    int total = 0;
    for (int c = 0; c < tree->model()->columnCount(); ++c) {
        QVERIFY2(tree->header()->sectionSize(c) >= static_cast<QAbstractItemView*>(tree)->sizeHintForColumn(c), qPrintable(QString::number(c)));
        total += tree->header()->sectionSize(c);
    }
    QVERIFY2(total <= tree->viewport()->width(), qPrintable(QStringLiteral("%1 > %2").arg(total).arg(tree->viewport()->width())));
    // The map's Why column takes its sentences' width (scrolling sideways) rather than cutting them.
    QVERIFY(map->horizontalHeader()->sectionSize(DeviceMapModel::WhyColumn) >= static_cast<QAbstractItemView*>(map)->sizeHintForColumn(DeviceMapModel::WhyColumn));
    QVERIFY(map->horizontalHeader()->sectionSize(DeviceMapModel::DeviceColumn) >= static_cast<QAbstractItemView*>(map)->sizeHintForColumn(DeviceMapModel::DeviceColumn));
}

QTEST_MAIN(TestGui)
#include "tst_gui.moc"
