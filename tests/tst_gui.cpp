// The module tree and device map models under QAbstractItemModelTester, and
// the main window offscreen: opening a checkpoint fills the tree off the GUI
// thread; a bad path shows a message and leaves the window usable; budgets
// typed into the planning panel re-plan exactly as planDeviceMap does.
#include "budgetpanel.h"
#include "devicemapmodel.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "moduletreemodel.h"
#include "stowage/checkpoint.h"
#include "stowage/fileio.h"
#include "stowage/planner.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QLineEdit>
#include <QMessageBox>
#include <QSignalSpy>
#include <QTreeView>
#include <QtTest>

#include <filesystem>

using namespace stowage;

class TestGui : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_dir;
private slots:
    void initTestCase();
    void modelPassesTheTester();
    void windowOpensCheckpoint();
    void badPathShowsMessageAndStaysUsable();
    void deviceMapModelPassesTheTester();
    void budgetPanelParsesSizes();
    void planSplitsAcrossGpuAndCpu();
    void invalidBudgetKeepsLastPlan();
    void exportWritesDeviceMapJson();

private:
    void openAndSplit(MainWindow& w);
};

void TestGui::initTestCase()
{
    m_dir = m_tmp.path().toStdString() + "/gpt2";
    std::filesystem::create_directories(m_dir);
    fixtures::writeSafetensorsFile(m_dir + "/model.safetensors", fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F16), false);
    fixtures::writeJson(m_dir + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F16));
}

void TestGui::modelPassesTheTester()
{
    ModuleTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    auto tree = std::make_shared<ModuleTree>(buildModuleTree(Checkpoint::open(m_dir), std::nullopt));
    model.setTree(tree);
    QCOMPARE(model.rowCount(), 1);
    QModelIndex root = model.index(0, 0);
    QCOMPARE(model.data(root).toString(), QString("(model)"));
    QCOMPARE(model.rowCount(root), 2); // transformer, lm_head
    QModelIndex transformer = model.index(0, 0, root);
    QCOMPARE(model.data(transformer).toString(), QString("transformer"));
    QModelIndex h = model.index(3, 0, transformer);
    QCOMPARE(model.data(h).toString(), QString("h"));
    QCOMPARE(model.data(model.index(0, ModuleTreeModel::ClassColumn, h)).toString(), QString("GPT2Block"));
    QCOMPARE(model.parent(model.index(0, 0, h)), h);
    QCOMPARE(model.data(root, ModuleTreeModel::BytesRole).toULongLong(), quint64(tree->root().bytes));
    QCOMPARE(model.data(model.index(0, ModuleTreeModel::ShareColumn, root)).toString(), QString("100.00 %"));
    model.setTree(nullptr);
    QCOMPARE(model.rowCount(), 0);
}

void TestGui::windowOpensCheckpoint()
{
    MainWindow w;
    w.show();
    w.openCheckpoint(QString::fromStdString(m_dir));
    QTRY_VERIFY_WITH_TIMEOUT(w.moduleModel()->tree() != nullptr, 10000);
    QVERIFY(w.summary().contains("gpt2"));
    QCOMPARE(w.moduleModel()->rowCount(), 1);
    const QString shot = QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR"));
    if (!shot.isEmpty())
        w.grab().save(shot + "/main-window.png");
}

void TestGui::badPathShowsMessageAndStaysUsable()
{
    MainWindow w;
    w.show();
    w.openCheckpoint(QString::fromStdString(m_dir));
    QTRY_VERIFY_WITH_TIMEOUT(w.moduleModel()->tree() != nullptr, 10000);
    w.openCheckpoint("/no/such/checkpoint");
    QMessageBox* box = nullptr;
    QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("openError")) != nullptr, 10000);
    QVERIFY(box->text().contains("/no/such/checkpoint: no such file or folder"));
    QVERIFY(w.moduleModel()->tree() != nullptr); // the open checkpoint is kept
    box->accept();
    w.openCheckpoint(QString::fromStdString(m_dir)); // and the window still works
    QTRY_VERIFY_WITH_TIMEOUT(w.summary().contains("gpt2"), 10000);
}

void TestGui::deviceMapModelPassesTheTester()
{
    DeviceMapModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model.rowCount(), 0);
    QCOMPARE(model.columnCount(), int(DeviceMapModel::ColumnCount));
    const ModuleTree tree = buildModuleTree(Checkpoint::open(m_dir), std::nullopt);
    PlanOptions o;
    o.maxMemory = Budgets{{Device::gpu(0), double(tree.root().bytes * 3 / 4)}, {Device::cpu(), 1e9}};
    const Plan plan = planDeviceMap(tree, o);
    model.setPlan(plan);
    QCOMPARE(model.rowCount(), int(plan.entries.size()));
    QVERIFY(model.rowCount() > 0);
    const PlanEntry& e = plan.entries.front();
    QCOMPARE(model.data(model.index(0, DeviceMapModel::ModuleColumn)).toString(),
             e.module.empty() ? QString("(whole model)") : QString::fromStdString(e.module));
    QCOMPARE(model.data(model.index(0, DeviceMapModel::DeviceColumn), DeviceMapModel::DeviceNameRole).toString(),
             QString::fromStdString(e.device.name()));
    QCOMPARE(model.data(model.index(0, DeviceMapModel::SizeColumn), DeviceMapModel::BytesRole).toULongLong(),
             quint64(e.bytes));
    QCOMPARE(model.data(model.index(0, DeviceMapModel::WhyColumn)).toString(), QString::fromStdString(e.why));
    QCOMPARE(model.headerData(DeviceMapModel::WhyColumn, Qt::Horizontal).toString(), QString("Why"));
    QVERIFY(!DeviceMapModel::totalsLine(plan).isEmpty());
    model.clear();
    QCOMPARE(model.rowCount(), 0);
}

void TestGui::budgetPanelParsesSizes()
{
    BudgetPanel panel;
    // Defaults: one GPU at 8 GiB, the CPU at 32 GiB, strategy auto.
    PlanOptions o = panel.options();
    QCOMPARE(o.strategy, Strategy::Auto);
    QVERIFY(o.maxMemory.has_value());
    QCOMPARE(o.maxMemory->size(), size_t(2));
    QCOMPARE((*o.maxMemory)[0].device, Device::gpu(0));
    QCOMPARE((*o.maxMemory)[0].bytes, double(8ull << 30));
    QCOMPARE((*o.maxMemory)[1].device, Device::cpu());
    QCOMPARE((*o.maxMemory)[1].bytes, double(32ull << 30));

    QSignalSpy spy(&panel, &BudgetPanel::budgetsChanged);
    panel.setBudgetText(Device::gpu(0), "10GB"); // Accelerate: GB = 10^9
    QCOMPARE(spy.count(), 1);
    QCOMPARE((*spy.last().at(0).value<PlanOptions>().maxMemory)[0].bytes, 1e10);
    panel.setBudgetText(Device::gpu(0), "ten gigs");
    QCOMPARE(spy.count(), 1); // ignored
    QVERIFY(!panel.budgetValid(Device::gpu(0)));
    QVERIFY(!panel.budgetEdit(Device::gpu(0))->styleSheet().isEmpty()); // shown red
    QCOMPARE((*panel.options().maxMemory)[0].bytes, 1e10); // last good value stays
    panel.setBudgetText(Device::gpu(0), "1Gb"); // bits
    QVERIFY(panel.budgetValid(Device::gpu(0)));
    QVERIFY(panel.budgetEdit(Device::gpu(0))->styleSheet().isEmpty());
    QCOMPARE((*panel.options().maxMemory)[0].bytes, 1e9 / 8);

    panel.setGpuCount(3);
    QCOMPARE(panel.options().maxMemory->size(), size_t(4));
    QCOMPARE(panel.options().maxMemory->back().device, Device::cpu());
    panel.setGpuCount(0);
    QCOMPARE(panel.options().maxMemory->size(), size_t(1));
    panel.setStrategy(Strategy::BalancedLow0);
    QCOMPARE(spy.last().at(0).value<PlanOptions>().strategy, Strategy::BalancedLow0);
    panel.setBudgetText(Device::disk(), "1GB"); // no editor: ignored, no crash
    QVERIFY(!panel.budgetValid(Device::disk()));
}

// Opens the fixture and gives GPU 0 three quarters of the model: after the
// room Accelerate keeps for the largest layer, the embeddings fit and the
// blocks do not, so the map splits.
void TestGui::openAndSplit(MainWindow& w)
{
    w.show();
    w.openCheckpoint(QString::fromStdString(m_dir));
    QTRY_VERIFY_WITH_TIMEOUT(w.moduleModel()->tree() != nullptr, 10000);
    QTRY_VERIFY(w.deviceMapModel()->rowCount() > 0); // planned with the defaults
    const quint64 gpu = w.moduleModel()->tree()->root().bytes * 3 / 4;
    w.budgetPanel()->setBudgetText(Device::gpu(0), QString::number(gpu));
    w.budgetPanel()->setBudgetText(Device::cpu(), "1GB");
}

void TestGui::planSplitsAcrossGpuAndCpu()
{
    MainWindow w;
    openAndSplit(w);
    const ModuleTree& tree = *w.moduleModel()->tree();
    const Plan expected = planDeviceMap(tree, w.budgetPanel()->options());
    const DeviceMapModel& model = *w.deviceMapModel();
    QCOMPARE(model.rowCount(), int(expected.entries.size()));
    QSet<QString> devices;
    for (int r = 0; r < model.rowCount(); ++r) {
        const PlanEntry& e = expected.entries[size_t(r)];
        QCOMPARE(model.data(model.index(r, DeviceMapModel::ModuleColumn)).toString(),
                 e.module.empty() ? QString("(whole model)") : QString::fromStdString(e.module));
        const QString dev = model.data(model.index(r, DeviceMapModel::DeviceColumn), DeviceMapModel::DeviceNameRole).toString();
        QCOMPARE(dev, QString::fromStdString(e.device.name()));
        QCOMPARE(model.data(model.index(r, DeviceMapModel::SizeColumn), DeviceMapModel::BytesRole).toULongLong(),
                 quint64(e.bytes));
        devices.insert(dev);
    }
    QVERIFY(devices.contains("0"));
    QVERIFY(devices.contains("cpu"));
    QCOMPARE(deviceMapToJson(model.plan().deviceMap), deviceMapToJson(expected.deviceMap));
    QVERIFY(w.totalsText().contains("GPU 0"));
    QVERIFY(w.totalsText().contains("CPU"));
    const QString shot = QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR"));
    if (!shot.isEmpty()) {
        w.resize(1000, 700);
        QTest::qWait(50);
        w.grab().save(shot + "/planning.png");
    }
}

void TestGui::invalidBudgetKeepsLastPlan()
{
    MainWindow w;
    openAndSplit(w);
    const std::string before = deviceMapToJson(w.deviceMapModel()->plan().deviceMap);
    const QString totals = w.totalsText();
    QLineEdit* gpu = w.budgetPanel()->budgetEdit(Device::gpu(0));
    QTest::keyClicks(gpu, "x!"); // typed by hand: "…x!" does not parse
    QVERIFY(!w.budgetPanel()->budgetValid(Device::gpu(0)));
    gpu->setText("-5GB");
    QVERIFY(!w.budgetPanel()->budgetValid(Device::gpu(0)));
    gpu->setText("");
    QVERIFY(!w.budgetPanel()->budgetValid(Device::gpu(0)));
    QCOMPARE(deviceMapToJson(w.deviceMapModel()->plan().deviceMap), before);
    QCOMPARE(w.totalsText(), totals);
    // Moving everything to the CPU still re-plans.
    w.budgetPanel()->setGpuCount(0);
    QCOMPARE(w.deviceMapModel()->rowCount(), 1);
    QCOMPARE(w.deviceMapModel()->plan().deviceMap.front().second, Device::cpu());
}

void TestGui::exportWritesDeviceMapJson()
{
    MainWindow w;
    openAndSplit(w);
    const QString path = m_tmp.path() + "/device_map.json";
    QVERIFY(w.exportDeviceMap(path));
    QCOMPARE(readTextFile(path.toStdString()), deviceMapToJson(w.deviceMapModel()->plan().deviceMap) + "\n");
    QVERIFY(!w.exportDeviceMap("/no/such/folder/map.json"));
    QMessageBox* box = nullptr;
    QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("exportError")) != nullptr, 10000);
    QVERIFY(box->text().contains("/no/such/folder/map.json"));
    box->accept();
}

QTEST_MAIN(TestGui)
#include "tst_gui.moc"
