// The families of issue 32 in the window, offscreen: Mixtral from a folder,
// Qwen3-MoE from a Hub cache entry (through the Hub cache dialog), Gemma 3
// (multimodal) from a folder in the Hub's layout. The module tree shows each
// fused expert parameter under 5.6's name with a row per expert naming the
// checkpoint's tensors and their bytes; the vision tower and projector are
// rows with their sizes; the placement strip carries each MoE layer's routed
// experts' bytes and says so in its tooltip. The Run page's strip previews
// the plan before anything is dispatched (issue 33).
#include "display.h"
#include "fixtures.h"
#include "gemmafixtures.h"
#include "gptossfixtures.h"
#include "hubcachedialog.h"
#include "hubcachemodel.h"
#include "mainwindow.h"
#include "moefixtures.h"
#include "budgetmodel.h"
#include "moduletreemodel.h"
#include "placementmap.h"
#include "planningpage.h"
#include "runpage.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QLabel>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTableView>
#include <QTreeView>
#include <QtTest>

#include <filesystem>

using namespace stowage;

namespace {
MainWindow::Options fixedMachine() { return {false, false, {}, false}; }
QString shotDir() { return QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR")); }

// The rows under `parent`, as "name | class | size | params" lines.
QStringList rowsUnder(const ModuleTreeModel& m, const QModelIndex& parent)
{
    QStringList out;
    for (int r = 0; r < m.rowCount(parent); ++r) {
        QStringList cells;
        for (int c : {int(ModuleTreeModel::NameColumn), int(ModuleTreeModel::ClassColumn),
                      int(ModuleTreeModel::SizeColumn), int(ModuleTreeModel::ParamsColumn)})
            cells << m.index(r, c, parent).data().toString();
        out << cells.join(QStringLiteral(" | "));
    }
    return out;
}

QString num(qulonglong n) { return QLocale::system().toString(n); }
} // namespace

class TestFamiliesWindow : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
private slots:
    void initTestCase();
    void runStripPreviewsThePlanBeforeDispatch();
    void mixtralFromAFolderShowsExpertsAndTheirShare();
    void qwen3MoeFromTheHubCache();
    void gemma3ShowsItsVisionTowerAndProjector();
    void quantizedGptOssFollowsTheSimulatedGpu();

private:
    bool open(MainWindow& w, const QString& path);
};

void TestFamiliesWindow::initTestCase()
{
    QVERIFY(m_tmp.isValid());
    QApplication::setOrganizationName("StowageTest");
    QApplication::setApplicationName("tst_familieswindow");
}

void TestFamiliesWindow::quantizedGptOssFollowsTheSimulatedGpu()
{
    // gpt-oss-20b as OpenAI ships it (MXFP4 experts), before download. With
    // no GPU, 5.6 dequantizes the experts to bf16 (41,829,514,624 bytes);
    // a simulated H100 runs the MXFP4 kernels: 13,177,339,264 bytes
    // (tst_quantization derives both). The page says which, and re-sizes
    // the tree when the GPU comes and goes; the Run page says it cannot run it.
    const std::string d = m_tmp.path().toStdString() + "/gpt-oss-mxfp4";
    std::filesystem::create_directories(d);
    fixtures::GptOssShape s;
    s.mxfp4 = true;
    fixtures::writeSharded(d, fixtures::gptOssTensors(s, DType::BF16), 3, false, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::gptOssConfig(s, DType::BF16));
    MainWindow w(fixedMachine());
    QVERIFY(open(w, QString::fromStdString(d)));
    PlanningPage* page = w.planningPage();
    auto* note = page->findChild<QLabel*>("quantNote");
    QVERIFY(note && note->isVisible());
    QVERIFY2(note->text().startsWith("MXFP4 weights will be dequantized to bfloat16"), qPrintable(note->text()));
    QCOMPARE(page->tree()->root().bytes, uint64_t(41'829'514'624));
    QCOMPARE(page->plan()->quantization, note->text().toStdString());

    BudgetModel* m = w.budgetModel();
    const int row = m->addSimulatedGpu("NVIDIA H100 80GB", "h100-80gb", 80'000'000'000ULL);
    QTRY_VERIFY(note->text().startsWith("MXFP4 weights stay quantized"));
    QCOMPARE(page->tree()->root().bytes, uint64_t(13'177'339'264));
    // The plan on screen is sized the same way: GPU 0 holds all of it.
    QCOMPARE(page->plan()->deviceMap.size(), size_t(1));
    QCOMPARE(page->plan()->deviceMap[0].second, Device::gpu(0));
    QVERIFY(m->removeSimulatedGpu(row));
    QTRY_VERIFY(note->text().startsWith("MXFP4 weights will be dequantized"));
    QCOMPARE(page->tree()->root().bytes, uint64_t(41'829'514'624));

    w.pages()->setCurrentWidget(w.runPage());
    QVERIFY2(w.runPage()->noteText().contains("Only config.json and the index are here"), qPrintable(w.runPage()->noteText()));
}

bool TestFamiliesWindow::open(MainWindow& w, const QString& path)
{
    w.resize(1400, 900);
    w.show();
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    w.openCheckpoint(path);
    if (!opened.wait(20000) || !opened[0][0].toBool()) {
        qWarning("open %s: %s", qPrintable(path), opened.isEmpty() ? "timeout" : qPrintable(opened[0][1].toString()));
        return false;
    }
    return w.planningPage()->plan() != nullptr;
}

void TestFamiliesWindow::runStripPreviewsThePlanBeforeDispatch()
{
    // The demo on its own budgets (GPU, RAM and disk): nothing dispatched yet,
    // the Run tab's strip shows the plan on screen, block for block.
    MainWindow::Options o = fixedMachine();
    o.demoBudgets = true;
    MainWindow w(o);
    QVERIFY(open(w, MainWindow::demoPath()));
    w.pages()->setCurrentWidget(w.runPage());
    const PlacementLayout& run = w.runPage()->teachingMap()->layout();
    const PlacementLayout& plan = w.planningPage()->placementMap()->layout();
    QVERIFY(!run.blocks.empty());
    QCOMPARE(run.blocks.size(), plan.blocks.size());
    for (size_t i = 0; i < run.blocks.size(); ++i) {
        QCOMPARE(run.blocks[i].module, plan.blocks[i].module);
        QCOMPARE(run.blocks[i].deviceCode, plan.blocks[i].deviceCode);
    }
    QCOMPARE(run.runs.size(), size_t(3)); // GPU 0, CPU, disk
}

void TestFamiliesWindow::mixtralFromAFolderShowsExpertsAndTheirShare()
{
    // 2 layers, hidden 16, intermediate 24, 4 experts, float32. Per expert:
    // w1 and w3 24x16 = 384 elements each (gate_up_proj: 768, 3,072 bytes),
    // w2 16x24 = 384 (down_proj: 1,536 bytes). Routed experts per layer:
    // 4 x (3,072 + 1,536) = 18,432 bytes.
    const std::string dir = m_tmp.path().toStdString() + "/Mixtral-tiny";
    fixtures::MoeShape s;
    std::filesystem::create_directories(dir);
    fixtures::writeSharded(dir, fixtures::moeTensors(s, DType::F32), 2, false);
    fixtures::writeJson(dir + "/config.json", fixtures::moeConfig(s, DType::F32));

    MainWindow w(fixedMachine());
    QAbstractItemModelTester tester(w.moduleModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(open(w, QString::fromStdString(dir)));
    QVERIFY(w.summary().contains("mixtral"));
    const ModuleTreeModel& m = *w.moduleModel();
    const QModelIndex experts = m.indexOfModule(QStringLiteral("model.layers.1.mlp.experts"));
    QVERIFY(experts.isValid());
    // Its child module first, then 5.6's fused parameters, each with its experts.
    QCOMPARE(rowsUnder(m, experts),
             QStringList({"act_fn | SiLU | 0 bytes | 0", "gate_up_proj | fused from 4 experts | 12.00 KiB | " + num(3072),
                          "down_proj | fused from 4 experts | 6.00 KiB | " + num(1536)}));
    const QModelIndex gateUp = m.index(1, 0, experts);
    QCOMPARE(rowsUnder(m, gateUp).front(),
             "expert 0 | stored as w1.weight + w3.weight | 3.00 KiB | " + num(768));
    QCOMPARE(rowsUnder(m, gateUp).size(), 4);
    QCOMPARE(m.index(3, 0, gateUp).data(ModuleTreeModel::BytesRole).toULongLong(), quint64(3072));
    QCOMPARE(rowsUnder(m, m.index(2, 0, experts)).back(), "expert 3 | stored as w2.weight | 1.50 KiB | " + num(384));
    // Both names: 5.6's on the row, the checkpoint's in the tooltip.
    const QString tip = m.index(0, 0, gateUp).data(Qt::ToolTipRole).toString();
    QVERIFY2(tip.contains("model.layers.1.mlp.experts.gate_up_proj") &&
                 tip.contains("model.layers.1.block_sparse_moe.experts.0.w1.weight [24, 16]") &&
                 tip.contains("model.layers.1.block_sparse_moe.experts.0.w3.weight [24, 16]"),
             qPrintable(tip));
    // Selecting an expert row selects its module everywhere.
    QCOMPARE(m.index(0, 0, gateUp).data(ModuleTreeModel::ModuleIndexRole).toInt(),
             w.planningPage()->tree()->find("model.layers.1.mlp.experts"));
    QCOMPARE(m.index(0, ModuleTreeModel::DeviceColumn, gateUp).data().toString(), QStringLiteral("CPU"));

    // The strip: each layer's routed experts, and nothing elsewhere.
    const PlacementMap* map = w.planningPage()->placementMap();
    const ModuleTree& tree = *w.planningPage()->tree();
    int moe = 0;
    for (size_t b = 0; b < map->layout().blocks.size(); ++b) {
        const PlacementBlock& blk = map->layout().blocks[b];
        const std::string& name = tree.modules()[size_t(blk.module)].name;
        if (name.rfind("model.layers.", 0) == 0) {
            ++moe;
            QCOMPARE(blk.expertBytes, quint64(18432));
            QVERIFY(blk.bytes > blk.expertBytes);
            const QRectF r = map->blockRect(int(b));
            const QString t = map->toolTipAt(r.center().toPoint());
            QVERIFY2(t.contains(QStringLiteral("4 routed experts: 18.00 KiB of its %1").arg(formatBytes(blk.bytes))), qPrintable(t));
        } else {
            QCOMPARE(blk.expertBytes, quint64(0));
        }
    }
    QCOMPARE(moe, 2);
    if (!shotDir().isEmpty()) {
        w.moduleView()->expand(experts);
        w.moduleView()->expand(gateUp);
        w.moduleView()->scrollTo(gateUp);
        QTest::qWait(50);
        w.grab().save(shotDir() + "/mixtral-experts.png");
    }
}

void TestFamiliesWindow::qwen3MoeFromTheHubCache()
{
    // Qwen3-MoE with layer 0 dense (mlp_only_layers), stored per expert under
    // the Hub's names, opened from a cache entry through the dialog.
    fixtures::MoeShape s;
    s.type = "qwen3_moe";
    s.mlpOnly = {0};
    const QString entry = m_tmp.path() + "/hub/models--acme--Qwen3-tiny-A1B";
    const QString snap = entry + "/snapshots/abc";
    QDir().mkpath(entry + "/blobs");
    QDir().mkpath(snap);
    fixtures::writeSafetensorsFile((entry + "/blobs/w").toStdString(), fixtures::moeTensors(s, DType::BF16), false);
    fixtures::writeJson((entry + "/blobs/c").toStdString(), fixtures::moeConfig(s, DType::BF16));
    QVERIFY(QFile::link("../../blobs/w", snap + "/model.safetensors"));
    QVERIFY(QFile::link("../../blobs/c", snap + "/config.json"));

    MainWindow w(fixedMachine());
    w.show();
    HubCacheDialog* dlg = w.showHubCache();
    dlg->setRoot(m_tmp.path() + "/hub");
    QTRY_VERIFY_WITH_TIMEOUT(!dlg->scanning() && dlg->model()->rowCount() == 1, 10000);
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    dlg->view()->setCurrentIndex(dlg->model()->index(0, 0));
    emit dlg->view()->activated(dlg->model()->index(0, 0));
    QTRY_VERIFY_WITH_TIMEOUT(opened.count() == 1, 10000);
    QVERIFY2(opened[0][0].toBool(), qPrintable(opened[0][1].toString()));
    QVERIFY(w.summary().contains("qwen3_moe"));
    const ModuleTreeModel& m = *w.moduleModel();
    // Layer 0 is dense: no fused rows. Layer 1: gate_up_proj from gate_proj and
    // up_proj, moe_intermediate 12 x hidden 16 each: 384 elements, 768 bytes in bf16.
    QVERIFY(!m.indexOfModule(QStringLiteral("model.layers.0.mlp.experts")).isValid());
    const QModelIndex experts = m.indexOfModule(QStringLiteral("model.layers.1.mlp.experts"));
    QVERIFY(experts.isValid());
    const QModelIndex gateUp = m.index(1, 0, experts);
    QCOMPARE(gateUp.data().toString(), QStringLiteral("gate_up_proj"));
    QCOMPARE(rowsUnder(m, gateUp).at(2),
             "expert 2 | stored as gate_proj.weight + up_proj.weight | 768 bytes | " + num(384));
    const ModuleTree& tree = *w.planningPage()->tree();
    for (const PlacementBlock& b : w.planningPage()->placementMap()->layout().blocks) {
        const std::string& name = tree.modules()[size_t(b.module)].name;
        // 4 experts x 3 x 12 x 16 elements x 2 bytes = 4,608 bytes in layer 1.
        QCOMPARE(b.expertBytes, quint64(name == "model.layers.1" ? 4608 : 0));
    }
}

void TestFamiliesWindow::gemma3ShowsItsVisionTowerAndProjector()
{
    // gemma-3-4b-it's layout (transformers 4.50 names). Parameters by hand from
    // the tensors: the tower's patch embedding 8x3x4x4 + 8 = 392, positions
    // 4x8 = 32, one layer (two norms 2 x 16, q/k/v/out 4 x 72, fc1 12x8 + 12 =
    // 108, fc2 8x12 + 8 = 104) 532, post norm 16: 972; projector 8x16 + 8 = 136.
    const std::string dir = m_tmp.path().toStdString() + "/gemma-3-tiny-it";
    std::filesystem::create_directories(dir);
    fixtures::writeSafetensorsFile(dir + "/model.safetensors",
                                   fixtures::gemma3Tensors("language_model.model.", "vision_tower.vision_model.",
                                                           "multi_modal_projector."),
                                   false);
    fixtures::writeJson(dir + "/config.json", fixtures::gemma3Config(false));
    MainWindow w(fixedMachine());
    QAbstractItemModelTester tester(w.moduleModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(open(w, QString::fromStdString(dir)));
    const ModuleTreeModel& m = *w.moduleModel();
    const ModuleTree& tree = *w.planningPage()->tree();
    const QModelIndex model = m.indexOfModule(QStringLiteral("model"));
    QStringList names;
    for (int r = 0; r < m.rowCount(model); ++r)
        names << m.index(r, 0, model).data().toString();
    QCOMPARE(names, QStringList({"vision_tower", "multi_modal_projector", "language_model"}));
    for (const auto& [name, params] : {std::pair<const char*, qulonglong>{"model.vision_tower", 972},
                                       {"model.multi_modal_projector", 136}}) {
        const QModelIndex i = m.indexOfModule(QString::fromLatin1(name));
        QCOMPARE(m.index(i.row(), ModuleTreeModel::ParamsColumn, i.parent()).data().toString(), num(params));
        const quint64 bytes = tree.modules()[size_t(tree.find(name))].bytes;
        QVERIFY(bytes >= 2 * params); // bf16, plus the tower's position_ids buffer
        QCOMPARE(m.index(i.row(), ModuleTreeModel::SizeColumn, i.parent()).data().toString(), formatBytes(bytes));
        // ... and the strip places them with their bytes.
        quint64 onStrip = 0;
        const PlacementLayout& l = w.planningPage()->placementMap()->layout();
        for (int b : l.blocksOf(tree, tree.find(name)))
            onStrip += l.blocks[size_t(b)].bytes;
        QCOMPARE(onStrip, bytes);
    }
    if (!shotDir().isEmpty()) {
        w.moduleView()->expand(model);
        QTest::qWait(50);
        w.grab().save(shotDir() + "/gemma3-tree.png");
    }
}

QTEST_MAIN(TestFamiliesWindow)
#include "tst_familieswindow.moc"
