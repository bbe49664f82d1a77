// Every item model of widgets/models under QAbstractItemModelTester, with
// the fine-grained updates the views rely on: a budget edit changes one
// cell, a plan changes only the rows whose totals moved; the Hub cache
// scanner on a fake cache (and that it resolves the snapshot Checkpoint::open
// reads); the placement layout; the Python snippets.
#include "budgetmodel.h"
#include "budgetscale.h"
#include "devicemapmodel.h"
#include "display.h"
#include "fixtures.h"
#include "hubcachemodel.h"
#include "moduletreemodel.h"
#include "predictionmodel.h"
#include "snippets.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/hubcache.h"
#include "stowage/moduledevices.h"
#include "stowage/placementlayout.h"

#include <QAbstractItemModelTester>
#include <QDir>
#include <QFile>
#include <QSignalSpy>
#include <QtTest>

#include <chrono>
#include <filesystem>
#include <fstream>

using namespace stowage;

namespace {
constexpr quint64 GiB = 1ull << 30;

BudgetModel* machine(BudgetModel* m)
{
    m->setMachine({}, {Device::cpu(), "RAM", {}, false, 64 * GiB, 64 * GiB, 32 * GiB},
                  {Device::disk(), "disk", {}, false, 1000 * GiB, 1000 * GiB, 1000 * GiB});
    return m;
}

void writeFile(const QString& path, const QByteArray& bytes)
{
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bytes);
}
} // namespace

class TestModels : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_dir;
private slots:
    void initTestCase();
    void budgetModelEditsOneCell();
    void budgetModelSimulatedGpus();
    void budgetModelPlanTotalsChangeOnlyMovedRows();
    void budgetSteps();
    void budgetProblemsInWords();
    void moduleTreeModelDevices();
    void placementLayoutFollowsDefinitionOrder();
    void deviceMapModelProblems();
    void predictionModel();
    void hubCacheListsFakeCache();
    void hubCacheSnapshotIsTheOneOpenReads();
    void hubCacheLinkedBlobsListAndOpenAgree();
    void snippets();
};

void TestModels::initTestCase()
{
    m_dir = m_tmp.path().toStdString() + "/gpt2";
    std::filesystem::create_directories(m_dir);
    fixtures::writeSafetensorsFile(m_dir + "/model.safetensors", fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F16), false);
    fixtures::writeJson(m_dir + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F16));
}

void TestModels::budgetModelEditsOneCell()
{
    BudgetModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    machine(&m);
    QCOMPARE(m.rowCount(), 2);
    QSignalSpy changed(&m, &QAbstractItemModel::dataChanged);
    QSignalSpy reset(&m, &QAbstractItemModel::modelReset);
    QSignalSpy budgets(&m, &BudgetModel::budgetsChanged);
    QVERIFY(m.setBudget(0, 10 * GiB));
    QCOMPARE(reset.count(), 0);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(changed[0][0].toModelIndex(), m.index(0, BudgetModel::BudgetColumn));
    QCOMPARE(changed[0][1].toModelIndex(), m.index(0, BudgetModel::BudgetColumn));
    QCOMPARE(budgets.count(), 1);
    QVERIFY(!m.setBudget(0, 10 * GiB)); // unchanged: no signal
    QCOMPARE(budgets.count(), 1);
    // Typed sizes, as Accelerate parses them.
    QVERIFY(m.setBudgetText(0, "10GB").isEmpty());
    QCOMPARE(m.at(0).budget, quint64(10'000'000'000));
    QVERIFY(m.setData(m.index(0, BudgetModel::BudgetColumn), QStringLiteral("1Gb")));
    QCOMPARE(m.at(0).budget, quint64(125'000'000));
    QVERIFY(!m.setBudgetText(0, "ten gigs").isEmpty());
    QCOMPARE(m.at(0).budget, quint64(125'000'000)); // the last good value stays
    QCOMPARE(m.data(m.index(0, BudgetModel::BudgetColumn), Qt::EditRole).toString(), QString("125MB"));
    QVERIFY(m.setData(m.index(0, BudgetModel::BudgetColumn), QVariant::fromValue<quint64>(8 * GiB)));
    QCOMPARE(m.data(m.index(0, BudgetModel::BudgetColumn), Qt::EditRole).toString(), QString("8GiB"));
    QCOMPARE(reset.count(), 0);
    // The disk is not a planner budget: Accelerate keeps it unlimited.
    const Budgets b = m.budgets();
    QCOMPARE(b.size(), size_t(1));
    QCOMPARE(b[0].device, Device::cpu());
    QCOMPARE(b[0].bytes, double(8 * GiB));
}

void TestModels::budgetModelSimulatedGpus()
{
    BudgetModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    machine(&m);
    QSignalSpy inserted(&m, &QAbstractItemModel::rowsInserted);
    QCOMPARE(m.addSimulatedGpu("NVIDIA H100 80GB", "h100-80gb", 80'000'000'000), 0);
    QCOMPARE(m.addSimulatedGpu("NVIDIA GeForce RTX 4090", "rtx4090", 24'000'000'000), 1);
    QCOMPARE(inserted.count(), 2);
    QCOMPARE(m.rowCount(), 4);
    QCOMPARE(m.gpuCount(), 2);
    QCOMPARE(m.data(m.index(1, BudgetModel::DeviceColumn)).toString(), QString("GPU 1"));
    QCOMPARE(m.at(1).budget, quint64(24'000'000'000)); // a new GPU's budget is its memory
    QVERIFY(!m.removeSimulatedGpu(2)); // the CPU is not removable
    QVERIFY(m.removeSimulatedGpu(0));
    QCOMPARE(m.rowCount(), 3);
    QCOMPARE(m.at(0).device, Device::gpu(0)); // renumbered
    QCOMPARE(m.at(0).hardware, QString("NVIDIA GeForce RTX 4090"));
    const Budgets b = m.budgets();
    QCOMPARE(b.size(), size_t(2));
    QCOMPARE(b[0].device, Device::gpu(0));
    QCOMPARE(b[0].bytes, 24e9);
}

void TestModels::budgetModelPlanTotalsChangeOnlyMovedRows()
{
    BudgetModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    machine(&m);
    m.addSimulatedGpu("GPU", {}, 8 * GiB);
    Plan plan;
    plan.devices = {{Device::gpu(0), 8.0 * GiB, 5 * GiB, 1 * GiB}, {Device::cpu(), 32.0 * GiB, 2 * GiB, 0}};
    QSignalSpy changed(&m, &QAbstractItemModel::dataChanged);
    m.setPlanTotals(plan, {{0, 256ull << 20}});
    QCOMPARE(changed.count(), 2); // GPU 0 and CPU; the disk holds nothing, as before
    QCOMPARE(m.at(0).used, 5 * GiB);
    QCOMPARE(m.at(0).reserved, 1 * GiB);
    QCOMPARE(m.at(0).kvReserved, quint64(256ull << 20));
    changed.clear();
    plan.devices[1].used = 3 * GiB;
    m.setPlanTotals(plan, {{0, 256ull << 20}});
    QCOMPARE(changed.count(), 1);
    QCOMPARE(changed[0][0].toModelIndex().row(), 1);
    // A disk holding more than its budget is flagged.
    plan.devices.push_back({Device::disk(), -1, 2000 * GiB, 0});
    m.setPlanTotals(plan);
    QVERIFY(m.data(m.index(2, 0), BudgetModel::OverBudgetRole).toBool());
}

void TestModels::budgetSteps()
{
    constexpr quint64 MiB = 1ull << 20;
    // A 24 GiB bar: knee k = 24 GiB / 10000 = 2,576,980.4 bytes; position = ln(1 + b/k) / ln(10001).
    const BudgetScale big(24 * GiB);
    QCOMPARE(big.position(0), 0.0);
    QCOMPARE(big.position(24 * GiB), 1.0);
    QCOMPARE(big.bytesAt(1.0), 24 * GiB);
    QCOMPARE(big.bytesAt(-0.5), quint64(0));
    // 3 MiB: ln(1 + 3,145,728 / 2,576,980.4) / 9.21044 = 0.79792 / 9.21044 = 0.0866 (linear: 0.00012).
    QVERIFY2(qAbs(big.position(3 * MiB) - 0.0866) < 0.0005, qPrintable(QString::number(big.position(3 * MiB))));
    QVERIFY(qAbs(qint64(big.bytesAt(big.position(3 * MiB))) - qint64(3 * MiB)) <= 1);
    // Steps: the power of two at most (b + k) / 40, fine / 400.
    QCOMPARE(big.step(100 * MiB, false), 2 * MiB);  // 107,434,580 / 40 = 2.69 MB
    QCOMPARE(big.step(20 * GiB, false), 512 * MiB); // 21,477,160,940 / 40 = 537 MB
    QCOMPARE(big.step(20 * GiB, true), 32 * MiB);   // / 400 = 53.7 MB
    QCOMPARE(big.step(0, true), quint64(4096));     // 2,576,980 / 400 = 6,442
    QCOMPARE(BudgetScale(100).step(0, true), quint64(2048)); // the knee is at least 1 MiB: 1,048,576 / 400 = 2,621
    QCOMPARE(big.snap(3 * GiB + 300 * MiB, false), 3 * GiB + 320 * MiB); // step 64 MiB (88.5 MB): 3,372 MiB -> 53 x 64
    // PgUp (an eighth of the bar) from 100 MiB: position 0.40500 -> 0.53000 -> k(e^(0.53 x 9.21044) - 1)
    // = 336,411,000 -> step 8 MiB -> 320 MiB; then 1 GiB, 3,264 MiB, 10 GiB, the bar's end, one step past it.
    const quint64 pgUp[] = {320 * MiB, 1 * GiB, 3264 * MiB, 10 * GiB, 24 * GiB, 24 * GiB + 512 * MiB};
    quint64 b = 100 * MiB;
    for (quint64 expected : pgUp) {
        b = big.moved(b, BudgetScale::kPage, false);
        QCOMPARE(b, expected);
    }
    // PgDn from the end: 7,808 MiB, 2,464 MiB, 784 MiB; an arrow from 0 is 640 KiB.
    QCOMPARE(big.moved(24 * GiB, -BudgetScale::kPage, false), 7808 * MiB);
    QCOMPARE(big.moved(7808 * MiB, -BudgetScale::kPage, false), 2464 * MiB);
    QCOMPARE(big.moved(0, BudgetScale::kArrow, false), 640 * 1024ull);
    QCOMPARE(big.moved(0, -BudgetScale::kArrow, false), quint64(0));
    // A 1 MiB bar: knee 1 MiB, position = log2(1 + b / 1 MiB); its middle is (sqrt(2) - 1) MiB = 434,334,
    // snapped to 32 KiB ((434,334 + 1,048,576) / 40 = 37,073) = 13 x 32 KiB.
    const BudgetScale small(MiB);
    QCOMPARE(small.bytesAt(0.5), quint64(434334));
    QCOMPARE(small.snap(434334, false), quint64(425984));
    QCOMPARE(sizeString(425984), QString("416KiB"));
    QCOMPARE(sizeString(8 * GiB), QString("8GiB"));
    QCOMPARE(sizeString(10'000'000'000), QString("10GB"));
    QCOMPARE(sizeString(1234567), QString("1234567")); // 1.234567 MB: no unit with three decimals is exact
    // A dragged budget snapped to a 256 KiB step: 1,835,008 = 1.75 x 2^20.
    QCOMPARE(sizeString(1835008), QString("1.75MiB"));
    QCOMPARE(sizeString(1536 * 1024), QString("1.5MiB"));
    QCOMPARE(sizeString(1792 * 1024 + 1), QString("1835009"));
    QCOMPARE(sizeString(2500000), QString("2.5MB"));
    QCOMPARE(sizeString(1024), QString("1KiB"));
    QCOMPARE(sizeString(100), QString("100"));
}

void TestModels::budgetProblemsInWords()
{
    BudgetModel m;
    BudgetDevice cpu, disk;
    cpu.capacity = 16 * GiB;
    cpu.budget = 8 * GiB;
    disk.capacity = 100 * GiB;
    disk.budget = 100 * GiB;
    m.setMachine({}, cpu, disk);
    const int g = m.addSimulatedGpu("Tiny", QString(), 8ull << 20);
    QCOMPARE(m.problem(g), QString());
    QSignalSpy changed(&m, &QAbstractItemModel::dataChanged);
    m.setBudget(g, 20'000'000'000); // 18.63 GiB
    QVERIFY(changed.last()[2].value<QList<int>>().contains(BudgetModel::ProblemRole));
    QCOMPARE(m.data(m.index(g, 0), BudgetModel::ProblemRole).toString(),
             QString("The budget (18.63 GiB) is more than this simulated GPU's memory (8.00 MiB): "
                     "weights planned past it cannot be loaded there."));
    m.setBudget(m.rowOf(Device::cpu()), 17 * GiB);
    QVERIFY(m.problem(m.rowOf(Device::cpu())).startsWith("The budget (17.00 GiB) is more than this machine's RAM (16.00 GiB)"));
    // The disk: its budget is the offload folder's limit.
    const int d = m.rowOf(Device::disk());
    QCOMPARE(m.problem(d), QString());
    Plan plan;
    plan.devices.push_back({Device::disk(), -1, 120 * GiB, 0});
    m.setPlanTotals(plan);
    QCOMPARE(m.problem(d), QString("The offload folder needs 120.00 GiB, more than the disk budget of 100.00 GiB."));
}

void TestModels::moduleTreeModelDevices()
{
    ModuleTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    auto tree = std::make_shared<ModuleTree>(buildModuleTree(Checkpoint::open(m_dir), std::nullopt));
    model.setTree(tree);
    const QModelIndex root = model.index(0, 0);
    QCOMPARE(model.data(root).toString(), QString("(model)"));
    QCOMPARE(model.rowCount(root), 2); // transformer, lm_head
    const QModelIndex transformer = model.index(0, 0, root);
    const QModelIndex h = model.index(3, 0, transformer);
    QCOMPARE(model.data(h).toString(), QString("h"));
    QCOMPARE(model.data(model.index(0, ModuleTreeModel::ClassColumn, h)).toString(), QString("GPT2Block"));
    QCOMPARE(model.parent(model.index(0, 0, h)), h);
    QCOMPARE(model.indexOfModule(QString("transformer.h")), h);
    QCOMPARE(model.data(model.index(0, ModuleTreeModel::ShareColumn, root)).toString(), QString("100.00 %"));

    // A hand-written map: embeddings on GPU 0, blocks split 0 / cpu, the rest on disk.
    const DeviceMap map{{"transformer.wte", Device::gpu(0)}, {"transformer.wpe", Device::gpu(0)},
                        {"transformer.h.0", Device::gpu(0)}, {"transformer.h.1", Device::cpu()},
                        {"transformer.drop", Device::disk()}, {"transformer.ln_f", Device::disk()},
                        {"lm_head", Device::gpu(0)}};
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    model.setDeviceMap(map);
    QVERIFY(changed.count() > 0);
    auto dev = [&](const QString& name) {
        return model.data(model.indexOfModule(name, ModuleTreeModel::DeviceColumn)).toString();
    };
    QCOMPARE(dev("transformer.h.0"), QString("GPU 0"));
    QCOMPARE(dev("transformer.h.0.attn"), QString("GPU 0"));
    QCOMPARE(dev("transformer.h.1.mlp"), QString("CPU"));
    QCOMPARE(dev("transformer.h"), QString("split"));
    QCOMPARE(dev(""), QString("split"));
    QCOMPARE(dev("transformer.ln_f"), QString("Disk"));
    // The same map again changes nothing.
    changed.clear();
    model.setDeviceMap(map);
    QCOMPARE(changed.count(), 0);
    // Only h.1's subtree (and the ancestors that were split anyway, unchanged) moves.
    DeviceMap moved = map;
    moved[3].second = Device::gpu(0);
    model.setDeviceMap(moved);
    QVERIFY(changed.count() > 0);
    for (const auto& args : changed)
        QVERIFY(args[0].toModelIndex().data(ModuleTreeModel::ModuleNameRole).toString().startsWith("transformer.h"));
    QCOMPARE(dev("transformer.h"), QString("GPU 0"));

    // Re-sizing the same model keeps the rows (no reset).
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    auto f32 = std::make_shared<ModuleTree>(*tree);
    f32->setDType(DType::F32);
    model.setTree(f32);
    QCOMPARE(reset.count(), 0);
    QCOMPARE(model.data(root, ModuleTreeModel::BytesRole).toULongLong(), quint64(2 * tree->root().bytes));
    model.setTree(nullptr);
    QCOMPARE(model.rowCount(), 0);
}

void TestModels::placementLayoutFollowsDefinitionOrder()
{
    const ModuleTree tree = buildModuleTree(Checkpoint::open(m_dir), std::nullopt);
    const DeviceMap map{{"transformer.wte", Device::gpu(0)}, {"transformer.wpe", Device::gpu(0)},
                        {"transformer.h.0", Device::gpu(0)}, {"transformer.h.1", Device::cpu()},
                        {"transformer.drop", Device::cpu()}, {"transformer.ln_f", Device::cpu()},
                        {"lm_head", Device::gpu(0)}};
    const PlacementLayout l = layoutPlacement(tree, moduleDevices(tree, map));
    QStringList names;
    for (const PlacementBlock& b : l.blocks)
        names << QString::fromStdString(tree.modules()[size_t(b.module)].name);
    // drop has no tensors, lm_head is tied to wte: neither takes room.
    QCOMPARE(names, QStringList({"transformer.wte", "transformer.wpe", "transformer.h.0", "transformer.h.1", "transformer.ln_f"}));
    QCOMPARE(l.totalBytes, uint64_t(tree.root().bytes));
    QCOMPARE(l.runs.size(), size_t(2));
    QCOMPARE(l.runs[0].deviceCode, 0);
    QCOMPARE(l.runs[0].last, 2);
    QCOMPARE(l.runs[1].deviceCode, CpuCode);
    // Hit-testing by byte offset.
    QCOMPARE(l.blockAt(0), 0);
    QCOMPARE(l.blockAt(l.blocks[3].offset), 3);
    QCOMPARE(l.blockAt(l.blocks[3].offset - 1), 2);
    QCOMPARE(l.blockAt(l.totalBytes), -1);
    // A module inside a block selects that block; a parent selects its blocks.
    QCOMPARE(l.blocksOf(tree, tree.find("transformer.h.1.attn")), std::vector<int>({3}));
    QCOMPARE(l.blocksOf(tree, tree.find("transformer.h")), std::vector<int>({2, 3}));
    Plan plan;
    plan.deviceMap = map;
    for (const auto& [k, d] : map)
        plan.entries.push_back({k, d, 0, "because of a test"});
    const QString why = describeBlock(tree, plan, l.blocks[3]);
    QVERIFY2(why.contains("transformer.h.1 (GPT2Block)") && why.contains("on CPU") && why.contains("because of a test"),
             qPrintable(why));
}

void TestModels::deviceMapModelProblems()
{
    DeviceMapModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    Plan plan;
    plan.deviceMap = {{"a", Device::gpu(0)}, {"b", Device::cpu()}};
    plan.entries = {{"a", Device::gpu(0), 10, "fits"}, {"b", Device::cpu(), 20, "does not fit on 0"}};
    model.setPlan(plan);
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.data(model.index(1, DeviceMapModel::DeviceColumn)).toString(), QString("CPU"));
    model.setProblems({{"b", "no module named b"}});
    QCOMPARE(model.data(model.index(1, DeviceMapModel::WhyColumn)).toString(), QString("no module named b"));
    QCOMPARE(model.data(model.index(0, DeviceMapModel::WhyColumn)).toString(), QString("fits"));
    model.clear();
    QCOMPARE(model.rowCount(), 0);
}

void TestModels::predictionModel()
{
    PredictionModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    Prediction p;
    p.estimate.tokensPerSecond = 12.5;
    p.estimate.devices = {{Device::gpu(0), 100, 0.02, 0.25, "HBM read"}, {Device::cpu(), 200, 0.06, 0.75, "RAM read"}};
    model.setPredictions({p, p});
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.data(model.index(0, PredictionModel::SpeedColumn)).toString(), QString("12.5 tok/s"));
    QCOMPARE(model.data(model.index(0, PredictionModel::SharesColumn)).toString(), QString("GPU 0 25 % · CPU 75 %"));
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    p.estimate.tokensPerSecond = 1234.5;
    model.setPredictions({p, p});
    QCOMPARE(reset.count(), 0); // same policies: cells change in place
    QCOMPARE(model.data(model.index(1, PredictionModel::SpeedColumn)).toString(), QString("1,235 tok/s"));
    model.setPredictions({});
    QCOMPARE(model.rowCount(), 0);
}

void TestModels::hubCacheListsFakeCache()
{
    const QString root = m_tmp.path() + "/hub";
    // A complete single-file model: two blobs, 1000 + 2345 bytes, refs/main names the snapshot.
    const QString full = root + "/models--acme--full";
    writeFile(full + "/blobs/aaa", QByteArray(1000, 'c'));
    writeFile(full + "/blobs/bbb", QByteArray(2345, 'w'));
    writeFile(full + "/refs/main", "snap1");
    QDir().mkpath(full + "/snapshots/snap1");
    QVERIFY(QFile::link("../../blobs/aaa", full + "/snapshots/snap1/config.json"));
    QVERIFY(QFile::link("../../blobs/bbb", full + "/snapshots/snap1/model.safetensors"));
    // Index and config only: two shards named, none downloaded.
    const QString idx = root + "/models--acme--big-model";
    const QByteArray index = R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
    writeFile(idx + "/blobs/ccc", QByteArray(300, 'c'));
    writeFile(idx + "/blobs/ddd", index);
    QDir().mkpath(idx + "/snapshots/s2");
    QVERIFY(QFile::link("../../blobs/ccc", idx + "/snapshots/s2/config.json"));
    QVERIFY(QFile::link("../../blobs/ddd", idx + "/snapshots/s2/model.safetensors.index.json"));
    // Not a model entry.
    QDir().mkpath(root + "/datasets--acme--data");

    HubCacheModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setEntries(scanHubCache(root.toStdString()));
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.data(model.index(0, HubCacheModel::ModelColumn)).toString(), QString("acme/big-model"));
    QCOMPARE(model.data(model.index(0, HubCacheModel::SizeColumn), HubCacheModel::DiskBytesRole).toULongLong(),
             quint64(300 + index.size()));
    QCOMPARE(model.data(model.index(0, HubCacheModel::WeightsColumn)).toString(), QString("index and config only"));
    QVERIFY(model.data(model.index(0, 0), HubCacheModel::PlannableRole).toBool());
    QCOMPARE(model.data(model.index(1, HubCacheModel::ModelColumn)).toString(), QString("acme/full"));
    QCOMPARE(model.data(model.index(1, HubCacheModel::SizeColumn), HubCacheModel::DiskBytesRole).toULongLong(), quint64(3345));
    QCOMPARE(model.data(model.index(1, HubCacheModel::SizeColumn)).toString(), QString("3.27 KiB"));
    QCOMPARE(model.data(model.index(1, HubCacheModel::WeightsColumn)).toString(), QString("weights downloaded"));
    QCOMPARE(QString::fromStdString(model.entries()[1].snapshot), full + "/snapshots/snap1");

    qputenv("HF_HUB_CACHE", root.toUtf8());
    QCOMPARE(QString::fromStdString(hubCacheRoots().front()), QDir::cleanPath(root));
    qunsetenv("HF_HUB_CACHE");
}

void TestModels::hubCacheLinkedBlobsListAndOpenAgree()
{
    namespace fs = std::filesystem;
    const std::string root = m_tmp.path().toStdString() + "/hub-linked";
    const std::string store = m_tmp.path().toStdString() + "/bigdisk"; // where the blobs were moved
    fs::create_directories(store);
    const fixtures::Gpt2Shape shape{97, 16, 8, 2};
    const auto tensors = fixtures::gpt2Tensors(shape, DType::F32);
    fixtures::writeSharded(store, tensors, 2, false); // model-0000{1,2}-of-00002.safetensors + the index
    fixtures::writeJson(store + "/config.json", fixtures::gpt2Config(shape, DType::F32));
    const uint64_t shard1 = fs::file_size(store + "/model-00001-of-00002.safetensors");
    const uint64_t shard2 = fs::file_size(store + "/model-00002-of-00002.safetensors");
    // A real cache's layout: snapshots/<rev>/<file> -> ../../blobs/<sha>; here blobs/<sha> are links to
    // the other disk, except the small index and config, which stay real files.
    auto entryWith = [&](const std::string& name, bool viaBlobs) {
        const std::string e = root + "/models--acme--" + name;
        fs::create_directories(e + "/blobs");
        fs::create_directories(e + "/refs");
        fs::create_directories(e + "/snapshots/rev1");
        std::ofstream(e + "/refs/main") << "rev1";
        fs::copy_file(store + "/config.json", e + "/blobs/c0nf");
        fs::copy_file(store + "/model.safetensors.index.json", e + "/blobs/1dx");
        fs::create_symlink("../../blobs/c0nf", e + "/snapshots/rev1/config.json");
        fs::create_symlink("../../blobs/1dx", e + "/snapshots/rev1/model.safetensors.index.json");
        for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
            const std::string sha = std::string("sha-") + shard;
            if (viaBlobs) {
                fs::create_symlink(store + "/" + shard, e + "/blobs/" + sha);
                fs::create_symlink("../../blobs/" + sha, e + "/snapshots/rev1/" + shard);
            } else {
                fs::create_symlink(store + "/" + shard, e + "/snapshots/rev1/" + shard); // straight out
            }
        }
        return e;
    };
    const std::string moved = entryWith("moved", true);
    const std::string escaping = entryWith("escaping", false);
    const uint64_t smallFiles = fs::file_size(store + "/config.json") + fs::file_size(store + "/model.safetensors.index.json");

    HubCacheModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setEntries(scanHubCache(root));
    QCOMPARE(model.rowCount(), 2);
    // acme/escaping: its shards lead out of the entry, not through blobs/: neither counted nor opened.
    const HubCacheEntry& out = model.entries()[0];
    QCOMPARE(out.repoId, std::string("acme/escaping"));
    QCOMPARE(out.weights, HubCacheEntry::Weights::IndexOnly);
    QCOMPARE(out.diskBytes, smallFiles);
    QCOMPARE(out.linkedBytes, uint64_t(0));
    QVERIFY2(QString::fromStdString(out.problem).contains("model-00001-of-00002.safetensors: leads outside the cache entry"),
             out.problem.c_str());
    QCOMPARE(model.data(model.index(0, HubCacheModel::WeightsColumn)).toString(),
             QString("index and config only; a weights file leads outside the cache"));
    try {
        Checkpoint::open(escaping);
        QFAIL("an entry whose shard leads straight out opened");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("shard leads outside the checkpoint folder"), e.what());
    }
    // acme/moved: blobs/ links to the other disk: listed with their size, and it opens.
    const HubCacheEntry& in = model.entries()[1];
    QCOMPARE(in.repoId, std::string("acme/moved"));
    QCOMPARE(in.weights, HubCacheEntry::Weights::All);
    QCOMPARE(in.shardsPresent, 2);
    QCOMPARE(in.problem, std::string());
    QCOMPARE(in.diskBytes, smallFiles + shard1 + shard2);
    QCOMPARE(in.linkedBytes, shard1 + shard2);
    QCOMPARE(model.data(model.index(1, HubCacheModel::WeightsColumn)).toString(), QString("weights downloaded"));
    QVERIFY(model.data(model.index(1, 0), Qt::ToolTipRole).toString().contains("in blobs linked from elsewhere"));
    const Checkpoint ck = Checkpoint::open(moved);
    QCOMPARE(ck.tensors().size(), tensors.size());
    QVERIFY(!ck.indexOnly());
    QVERIFY(ck.data(ck.tensors()[0]) != nullptr);
    // The rule itself: through blobs/ yes, straight out no, a missing file no.
    QVERIFY(hubEntryMayRead(moved, moved + "/snapshots/rev1/model-00001-of-00002.safetensors"));
    QVERIFY(!hubEntryMayRead(escaping, escaping + "/snapshots/rev1/model-00001-of-00002.safetensors"));
    QVERIFY(!hubEntryMayRead(moved, moved + "/snapshots/rev1/absent.safetensors"));
}

void TestModels::hubCacheSnapshotIsTheOneOpenReads()
{
    namespace fs = std::filesystem;
    const std::string root = m_tmp.path().toStdString() + "/hub-resolve";
    // No refs/main: the snapshot modified last, whatever the names say.
    const std::string two = root + "/models--acme--two";
    fs::create_directories(two + "/snapshots/bbb-old");
    fs::create_directories(two + "/snapshots/aaa-new");
    fs::create_directories(two + "/blobs");
    fs::copy_file(m_dir + "/model.safetensors", two + "/snapshots/aaa-new/model.safetensors");
    fs::copy_file(m_dir + "/config.json", two + "/snapshots/aaa-new/config.json");
    fs::last_write_time(two + "/snapshots/bbb-old", fs::last_write_time(two + "/snapshots/aaa-new") - std::chrono::hours(1));
    // refs/main naming a snapshot that is not there: opening fails, the scan lists it without one.
    const std::string broken = root + "/models--acme--broken";
    fs::create_directories(broken + "/snapshots/s1");
    writeFile(QString::fromStdString(broken + "/snapshots/s1/config.json"), "{}");
    writeFile(QString::fromStdString(broken + "/refs/main"), "nothere\n");

    const std::vector<HubCacheEntry> entries = scanHubCache(root);
    QCOMPARE(entries.size(), size_t(2));
    QCOMPARE(entries[0].repoId, std::string("acme/broken"));
    QVERIFY(entries[0].snapshot.empty());
    QCOMPARE(entries[0].weights, HubCacheEntry::Weights::None);
    QVERIFY2(entries[0].problem.find("names snapshot 'nothere'") != std::string::npos, entries[0].problem.c_str());
    QVERIFY_THROWS_EXCEPTION(InputError, Checkpoint::open(broken));
    QCOMPARE(entries[1].snapshot, two + "/snapshots/aaa-new");
    QCOMPARE(entries[1].weights, HubCacheEntry::Weights::All);
    QCOMPARE(hubSnapshot(two).value_or(""), entries[1].snapshot);
    QCOMPARE(Checkpoint::open(two).folder(), entries[1].snapshot);
    // Not a cache entry; a root that is not there lists nothing.
    QVERIFY(!hubSnapshot(m_dir));
    QVERIFY(scanHubCache(root + "/absent").empty());

    HubCacheModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setEntries(entries);
    QVERIFY(!model.data(model.index(0, 0), HubCacheModel::PlannableRole).toBool());
    QCOMPARE(model.data(model.index(0, HubCacheModel::WeightsColumn)).toString(), QString("no snapshot"));
    QVERIFY(model.data(model.index(0, 0), Qt::ToolTipRole).toString().contains("refs/main"));
}

void TestModels::snippets()
{
    SnippetInput in;
    in.modelPath = "/models/llama";
    in.map = {{"model.embed_tokens", Device::gpu(0)}, {"model.layers", Device::cpu()}, {"lm_head", Device::disk()}};
    in.budgets = {{Device::gpu(0), double(8 * GiB)}, {Device::cpu(), 1e10}, {Device::gpu(1), 1234567.0}};
    in.dtype = DType::BF16;
    in.noSplit = {"LlamaDecoderLayer"};
    QCOMPARE(pythonMaxMemory(in.budgets), QString("{0: \"8GiB\", \"cpu\": \"10GB\", 1: 1234567}"));
    const QString t = transformersSnippet(in);
    QVERIFY(t.contains("AutoModelForCausalLM.from_pretrained("));
    QVERIFY(t.contains("model_path = \"/models/llama\""));
    QVERIFY(t.contains("    \"model.embed_tokens\": 0,\n    \"model.layers\": \"cpu\",\n    \"lm_head\": \"disk\",\n"));
    QVERIFY(t.contains("dtype=torch.bfloat16"));
    const QString a = accelerateSnippet(in);
    QVERIFY(a.contains("load_checkpoint_and_dispatch("));
    QVERIFY(a.contains("no_split_module_classes=[\"LlamaDecoderLayer\"]"));
    QVERIFY(a.contains("init_empty_weights()"));
}

QTEST_MAIN(TestModels)
#include "tst_models.moc"
