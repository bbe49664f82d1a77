// Device maps against Accelerate's rules. Expected maps are derived by hand
// from infer_auto_device_map / get_balanced_memory / clean_device_map (see
// docs/planner.md); the comments walk through why.
#include "fixtures.h"
#include "planfixtures.h"
#include "moefixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/gpuorder.h"
#include "stowage/kvcache.h"
#include "stowage/planner.h"

#include <QtTest>

#include <filesystem>
#include <random>

using namespace stowage;
using fixtures::budgets;
using fixtures::mapText;
using fixtures::distilgpt2;
namespace fs = std::filesystem;

namespace {

// Accelerate's ModelForTest: Linear(3,4), BatchNorm1d(4), Linear(4,5) in fp32.
// Buffers count like parameters in compute_module_sizes; the batchnorm is a
// leaf, so whether they are split off never matters.
void modelForTest(ModuleTree& t, int parent)
{
    int l1 = t.addModule(parent, "linear1", "Linear");
    t.addParam(l1, "weight", {4, 3}, DType::F32);
    t.addParam(l1, "bias", {4}, DType::F32);
    int bn = t.addModule(parent, "batchnorm", "BatchNorm1d");
    t.addParam(bn, "weight", {4}, DType::F32);
    t.addParam(bn, "bias", {4}, DType::F32);
    t.addParam(bn, "running_mean", {4}, DType::F32);
    t.addParam(bn, "running_var", {4}, DType::F32);
    t.addParam(bn, "num_batches_tracked", {}, DType::I64);
    int l2 = t.addModule(parent, "linear2", "Linear");
    t.addParam(l2, "weight", {5, 4}, DType::F32);
    t.addParam(l2, "bias", {5}, DType::F32);
}

Plan plan(const ModuleTree& t, Budgets b, Strategy s = Strategy::Sequential,
          std::optional<std::vector<std::string>> noSplit = std::nullopt, Reference r = Reference::Transformers)
{
    PlanOptions o;
    o.strategy = s;
    o.reference = r;
    o.maxMemory = std::move(b);
    o.noSplit = std::move(noSplit);
    return planDeviceMap(t, o);
}

} // namespace

class TestPlanner : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string path(const char* n) { return m_tmp.path().toStdString() + "/" + n; }
private slots:
    void seedDistilgpt2_data();
    void seedDistilgpt2();
    void balancedTwoGpus();
    void gpusFilledInTheOrderGiven();
    void modelForTestVectors();
    void tiedSmallModelStaysWhole();
    void sequentialOfModelForTest();
    void balancedMemoryVectors();
    void llamaSplitsAtLayers();
    void oneGpuNoBudgetUses90Percent();
    void kvCacheReservesRoom();
    void propertiesOverRandomBudgets();
    void rotaryBuffersChangeTheMap();
    void phi3PlannedBeforeDownload();
    void tiedHeadChangesBalancedBudget();
    void meanLeafDefinitions();
    void rootBuffersAreQueuedLast();
    void partialBudgetsAreTakenAsGiven();
    void tiedChecksInAccelerateOrder();
    void accelerateSizesAModelBuiltInFloat32();
    void gemma3BeforeDownload();
    void mixtralBeforeDownload();
};

namespace {

ModuleTree tinyLlama(const std::string& d, bool tied, std::optional<DType> dtype, Reference r)
{
    fs::create_directories(d);
    fixtures::LlamaShape s{1000, 64, 128, 4, 4, 4, tied};
    if (!fs::exists(d + "/config.json")) {
        fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::F32), 1, false, false);
        fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::F32));
    }
    return buildModuleTree(Checkpoint::open(d), dtype, r);
}

} // namespace

void TestPlanner::seedDistilgpt2_data()
{
    QTest::addColumn<double>("gpu");
    QTest::addColumn<QString>("expected");
    // GPU 0 keeps 14,175,744 (one GPT2Block) free, leaving 85,824,256: wte with
    // its tied lm_head (77,194,752), wpe and drop fit; h.0 would make 92,943,360,
    // so the rest goes to cpu, where h merges and moves to the end.
    QTest::newRow("100MB") << 100e6
                           << "transformer.wte:0, lm_head:0, transformer.wpe:0, transformer.drop:0, "
                              "transformer.ln_f:cpu, transformer.h:cpu";
    // 50MB leaves 35,824,256 after the reserve: wte cannot fit and cannot be split.
    QTest::newRow("50MB") << 50e6 << "'':cpu";
}

void TestPlanner::seedDistilgpt2()
{
    QFETCH(double, gpu);
    QFETCH(QString, expected);
    ModuleTree t = distilgpt2(path("distil"));
    // Same under both references: GPT-2 has no buffers, no module holds tensors
    // beside child modules, and the float32 checkpoint capped at float16 is float16.
    for (Reference r : {Reference::Transformers, Reference::Accelerate})
        for (Strategy s : {Strategy::Auto, Strategy::Balanced, Strategy::Sequential}) {
            Plan p = plan(t, budgets({{"0", gpu}, {"cpu", 10e9}}), s, std::nullopt, r);
            QCOMPARE(QString::fromStdString(mapText(p.deviceMap)), expected);
            QCOMPARE(p.entries.size(), p.deviceMap.size());
            QCOMPARE(p.reference, r);
        }
}

void TestPlanner::balancedTwoGpus()
{
    // get_balanced_memory: 163,825,152 / 2 + int(1.25 x 14,175,744) = 99,632,256 for
    // GPU 0; the last GPU keeps its 1e9. h.0 fails on GPU 0 (92,943,360 >
    // 99,632,256 - 14,175,744), so the blocks and ln_f go to GPU 1.
    ModuleTree t = distilgpt2(path("distil"));
    Plan p = plan(t, budgets({{"0", 1e9}, {"1", 1e9}, {"cpu", 1e10}}), Strategy::Balanced);
    QCOMPARE(p.budgets[0].bytes, 99'632'256.0);
    QCOMPARE(p.budgets[1].bytes, 1e9);
    QCOMPARE(QString::fromStdString(mapText(p.deviceMap)),
             QString("transformer.wte:0, lm_head:0, transformer.wpe:0, transformer.drop:0, transformer.ln_f:1, "
                     "transformer.h:1"));
    // sequential does not balance: everything fits on GPU 0
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 1e9}, {"1", 1e9}, {"cpu", 1e10}})).deviceMap)),
             QString("'':0"));
}

void TestPlanner::modelForTestVectors()
{
    ModuleTree t;
    t.addModule(-1, "", "ModelForTest");
    modelForTest(t, 0);
    t.finish(std::nullopt);
    QCOMPARE(t.root().bytes, uint64_t(236));
    // GPU 0 keeps 100 (linear2) free: 64 + 72 > 100, so batchnorm moves on.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 200}, {"1", 200}})).deviceMap)),
             QString("linear1:0, batchnorm:1, linear2:1"));
    // GPU 1 is not a main device: 72 + 100 <= 172 exactly.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 200}, {"1", 172}, {"2", 200}})).deviceMap)),
             QString("linear1:0, batchnorm:1, linear2:1"));
    // one byte less and linear2 goes to GPU 2
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 200}, {"1", 171}, {"2", 200}})).deviceMap)),
             QString("linear1:0, batchnorm:1, linear2:2"));
}

void TestPlanner::tiedSmallModelStaysWhole()
{
    // linear1.weight = linear2.weight: sizes linear1 96, batchnorm 72, linear2 20.
    // linear1 with its tie: 96 + 20 <= 200 - 72, then batchnorm 188 <= 200 - 0.
    ModuleTree t;
    t.addModule(-1, "", "ModelForTest");
    int l1 = t.addModule(0, "linear1", "Linear");
    t.addParam(l1, "weight", {5, 4}, DType::F32);
    t.addParam(l1, "bias", {4}, DType::F32);
    int bn = t.addModule(0, "batchnorm", "BatchNorm1d");
    for (const char* n : {"weight", "bias", "running_mean", "running_var"})
        t.addParam(bn, n, {4}, DType::F32);
    t.addParam(bn, "num_batches_tracked", {}, DType::I64);
    int l2 = t.addModule(0, "linear2", "Linear");
    t.addParam(l2, "weight", {5, 4}, DType::F32);
    t.addParam(l2, "bias", {5}, DType::F32);
    t.tie("linear2.weight", "linear1.weight");
    t.finish(std::nullopt);
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 200}, {"1", 200}})).deviceMap)), QString("'':0"));
}

void TestPlanner::sequentialOfModelForTest()
{
    ModuleTree t;
    t.addModule(-1, "", "Sequential");
    for (const char* n : {"0", "1", "2"})
        modelForTest(t, t.addModule(0, n, "ModelForTest"));
    t.finish(std::nullopt);
    // GPU 0 keeps 100 free: "0" (236) fits in 400; "1" does not, split: linear1 and
    // batchnorm fit (236 + 136 <= 400), linear2 (472 > 400) moves to GPU 1.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 500}, {"1", 500}})).deviceMap)),
             QString("0:0, 1.linear1:0, 1.batchnorm:0, 1.linear2:1, 2:1"));
    // no-split blocks are never split and the reserve is one whole block (236).
    QCOMPARE(QString::fromStdString(
                 mapText(plan(t, budgets({{"0", 500}, {"1", 500}}), Strategy::Sequential,
                              std::vector<std::string>{"ModelForTest"})
                             .deviceMap)),
             QString("0:0, 1:1, 2:1"));
}

void TestPlanner::gpusFilledInTheOrderGiven()
{
    ModuleTree t;
    t.addModule(-1, "", "Sequential");
    for (const char* n : {"0", "1", "2"})
        modelForTest(t, t.addModule(0, n, "ModelForTest"));
    t.finish(std::nullopt);
    PlanOptions o;
    o.strategy = Strategy::Sequential; // the budgets as given (auto would balance them first)
    o.maxMemory = budgets({{"0", 500}, {"1", 500}});
    // Equal budgets: GPU 1 filled first makes sequentialOfModelForTest's map
    // with the two GPUs' names swapped.
    Plan p = planInGpuOrder(t, o, {1, 0});
    QCOMPARE(QString::fromStdString(mapText(p.deviceMap)), QString("0:1, 1.linear1:1, 1.batchnorm:1, 1.linear2:0, 2:0"));
    QCOMPARE(p.devices[0].device, Device::gpu(0)); // totals listed by index again
    QCOMPARE(p.devices[0].used, planDeviceMap(t, o).devices[1].used);
    QCOMPARE(p.budgets[1].device, Device::gpu(1));
    QCOMPARE(QString::fromStdString(p.notes.back()), QString("GPUs filled in the order 1, 0 (the notes above number them "
                                                             "in that order from 0)"));
    // In index order it is the plain plan.
    QCOMPARE(mapText(planInGpuOrder(t, o, {0, 1}).deviceMap), mapText(planDeviceMap(t, o).deviceMap));
    // One ModelForTest (236 bytes): a large GPU 0 takes it all, but a GPU 1
    // of 250 filled first takes it all too (no room kept: nothing is left).
    ModuleTree one;
    one.addModule(-1, "", "ModelForTest");
    modelForTest(one, 0);
    one.finish(std::nullopt);
    o.maxMemory = budgets({{"0", 1000}, {"1", 250}});
    QCOMPARE(QString::fromStdString(mapText(planDeviceMap(one, o).deviceMap)), QString("'':0"));
    QCOMPARE(QString::fromStdString(mapText(planInGpuOrder(one, o, {1, 0}).deviceMap)), QString("'':1"));
    // GPU 1 left out (no budget): GPUs 2 then 0.
    o.maxMemory = budgets({{"0", 1000}, {"2", 250}});
    QCOMPARE(QString::fromStdString(mapText(planInGpuOrder(one, o, {2, 0}).deviceMap)), QString("'':2"));
    // An order must name every GPU with a budget once.
    QVERIFY_THROWS_EXCEPTION(InputError, planInGpuOrder(one, o, {2}));
    QVERIFY_THROWS_EXCEPTION(InputError, planInGpuOrder(one, o, {2, 2, 0}));
    QVERIFY_THROWS_EXCEPTION(InputError, planInGpuOrder(one, o, {1, 0}));
    QCOMPARE(parseGpuOrder("2,0", "--gpu-order"), (std::vector<int>{2, 0}));
    QVERIFY_THROWS_EXCEPTION(InputError, parseGpuOrder("2,,0", "--gpu-order"));
    QVERIFY_THROWS_EXCEPTION(InputError, parseGpuOrder("-1", "--gpu-order"));
}

void TestPlanner::balancedMemoryVectors()
{
    ModuleTree t;
    t.addModule(-1, "", "ModelForTest");
    modelForTest(t, 0);
    t.finish(std::nullopt);
    auto balanced = [&](Budgets b) {
        std::vector<double> v;
        for (const auto& x : plan(t, std::move(b), Strategy::Balanced).budgets)
            v.push_back(x.bytes);
        return v;
    };
    // 236 / 2 + int(1.25 x mean leaf 78) = 118 + 97 = 215 on every GPU but the last
    QCOMPARE(balanced(budgets({{"0", 300}, {"1", 300}})), (std::vector<double>{215, 300}));
    QCOMPARE(balanced(budgets({{"0", 300}, {"1", 500}})), (std::vector<double>{215, 500}));
    QCOMPARE(balanced(budgets({{"0", 200}, {"1", 200}})), (std::vector<double>{200, 200}));
    QCOMPARE(balanced(budgets({{"0", 300}, {"cpu", 1000}})), (std::vector<double>{300, 1000}));
    QCOMPARE(balanced(budgets({{"0", 0}, {"1", 300}, {"2", 300}})), (std::vector<double>{0, 215, 300}));
    // balanced_low_0: GPU 1 gets 236/1 + 97 -> min(333, 300) = 300 (it is the last);
    // GPU 0 gets max(0, 236 - 300) = 0.
    std::vector<double> low;
    for (const auto& x : plan(t, budgets({{"0", 300}, {"1", 300}}), Strategy::BalancedLow0).budgets)
        low.push_back(x.bytes);
    QCOMPARE(low, (std::vector<double>{0, 300}));
}

void TestPlanner::llamaSplitsAtLayers()
{
    // Tiny untied Llama, fp32: embed 256,000, each layer 164,352, norm 256, lm_head 256,000,
    // rotary_emb 64 (inv_freq + original_inv_freq: head_dim 64 / 4 = 16, so 8 float32 each).
    // GPU 0 keeps 256,000 (embed/lm_head tie for largest) free of 600,000: embed fits,
    // layers.0 (420,352 > 344,000) does not and is no-split, so the rest goes to cpu,
    // where layers merges and moves to the end.
    std::string d = path("llama");
    fs::create_directories(d);
    fixtures::LlamaShape s{1000, 64, 128, 4, 4, 4, false};
    fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::F32), 1, false, false);
    fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::F32));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    QCOMPARE(t.root().bytes, uint64_t(1'169'664 + 64));
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 600000}, {"cpu", 1e9}})).deviceMap)),
             QString("model.embed_tokens:0, model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu, model.layers:cpu"));
    // With GPU 1 as well (sequential): GPU 1 is not a main device and takes layers
    // 0..2 (3 x 164,352 = 493,056 <= 600,000), then layers.3 goes to cpu.
    QCOMPARE(QString::fromStdString(
                 mapText(plan(t, budgets({{"0", 600000}, {"1", 600000}, {"cpu", 1e9}})).deviceMap)),
             QString("model.embed_tokens:0, model.layers.0:1, model.layers.1:1, model.layers.2:1, model.layers.3:cpu, "
                     "model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu"));
    // No cpu budget given: Accelerate then has no cpu device, so the rest goes to disk.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 600000}})).deviceMap)),
             QString("model.embed_tokens:0, model.norm:disk, model.rotary_emb:disk, lm_head:disk, model.layers:disk"));
}

void TestPlanner::oneGpuNoBudgetUses90Percent()
{
    ModuleTree t = distilgpt2(path("distil"));
    PlanOptions o;
    o.machineMemory = budgets({{"0", 200e6}, {"cpu", 8e9}});
    Plan p = planDeviceMap(t, o);
    QCOMPARE(p.budgets[0].bytes, 180e6);
    // transformers' get_max_memory keeps 10% of the RAM: 0.9 x 8e9
    QCOMPARE(p.budgets[1].bytes, 7.2e9);
    o.strategy = Strategy::Sequential; // no 90% rule for the GPU there; the RAM cut stays
    QCOMPARE(planDeviceMap(t, o).budgets[0].bytes, 200e6);
    QCOMPARE(planDeviceMap(t, o).budgets[1].bytes, 7.2e9);
    // Accelerate's own get_max_memory hands over all the available RAM.
    o.reference = Reference::Accelerate;
    QCOMPARE(planDeviceMap(t, o).budgets[1].bytes, 8e9);
    o.strategy = Strategy::Auto;
    QCOMPARE(planDeviceMap(t, o).budgets[0].bytes, 180e6);
    QCOMPARE(planDeviceMap(t, o).budgets[1].bytes, 8e9);
}

void TestPlanner::kvCacheReservesRoom()
{
    ModuleTree t = distilgpt2(path("distil"));
    PlanOptions o;
    o.strategy = Strategy::Sequential;
    o.maxMemory = budgets({{"0", 100e6}, {"cpu", 10e9}});
    o.kv = KvReserve{1'000'000, 0, "GPT2Block", 1024, 1};
    Plan p = planDeviceMap(t, o);
    // each block now weighs 15,175,744: the reserve grows, nothing else changes here
    QCOMPARE(QString::fromStdString(mapText(p.deviceMap)),
             QString("transformer.wte:0, lm_head:0, transformer.wpe:0, transformer.drop:0, transformer.ln_f:cpu, "
                     "transformer.h:cpu"));
    // Every layer's cache lives on GPU 0, the execution device (the blocks in
    // RAM compute there too): GPU 0 keeps all 6,000,000 and the blocks are
    // placed by their weights (14,175,744). GPU 0 offers 94,000,000 less the
    // largest block still to place: 79,824,256 >= 77,194,752 + 1,572,864.
    QCOMPARE(p.devices[0].reservedKv, uint64_t(6'000'000));
    QCOMPARE(p.devices[0].budget, 100e6); // the budget as given; the caches' room is in reservedKv
    // the cpu keeps the largest block free, and no cache
    QCOMPARE(p.devices[1].reservedKv, uint64_t(0));
    QCOMPARE(p.devices[1].reservedLayer, uint64_t(14'175'744));
    QCOMPARE(p.devices[1].reserved, uint64_t(14'175'744));
    // an activation reserve of 10 MB on GPU 0 pushes wte off it
    o.kv->activationBytes = 10'000'000;
    QCOMPARE(QString::fromStdString(mapText(planDeviceMap(t, o).deviceMap)), QString("'':cpu"));

    // No GPU: a block placed on disk computes on the CPU, so its cache
    // lives in RAM, never on the disk. cpu = 140,000,000, sequential: RAM
    // keeps the 6,000,000 of caches and offers 134,000,000 less the largest
    // block (14,175,744) = 119,824,256: wte, wpe and blocks 0-1
    // (107,119,104); block 2 would make 121,294,848: it, blocks 3-5 and ln_f
    // go to disk.
    o.kv->activationBytes = 0;
    o.maxMemory = budgets({{"cpu", 140e6}});
    Plan disk = planDeviceMap(t, o);
    QCOMPARE(QString::fromStdString(mapText(disk.deviceMap)),
             QString("transformer.wte:cpu, lm_head:cpu, transformer.wpe:cpu, transformer.drop:cpu, "
                     "transformer.h.0:cpu, transformer.h.1:cpu, transformer.h.2:disk, transformer.h.3:disk, "
                     "transformer.h.4:disk, transformer.h.5:disk, transformer.ln_f:disk"));
    QCOMPARE(disk.devices.size(), size_t(2));
    QCOMPARE(disk.devices[0].reservedKv, uint64_t(6'000'000)); // every block's cache in RAM
    QCOMPARE(disk.devices[1].reservedKv, uint64_t(0));         // none on disk
    QCOMPARE(disk.devices[1].used, uint64_t(4 * 14'175'744 + 3'072)); // weights only
    // The context sweep counts the caches on the same devices.
    const std::vector<Device> cacheAt = layerCacheDevices(t, disk.deviceMap, "GPT2Block");
    QCOMPARE(cacheAt, std::vector<Device>(6, Device::cpu()));
    QCOMPARE(layerCacheDevices(t, p.deviceMap, "GPT2Block"), std::vector<Device>(6, Device::gpu(0)));
}

void TestPlanner::propertiesOverRandomBudgets()
{
    std::string d = path("llama-rand");
    fs::create_directories(d);
    fixtures::LlamaShape s{1000, 64, 128, 6, 4, 2, true};
    fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::F32), 1, false, false);
    fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::F32));
    std::vector<ModuleTree> trees{buildModuleTree(Checkpoint::open(d), std::nullopt), distilgpt2(path("distil")),
                                  buildModuleTree(Checkpoint::open(d), DType::F16)};
    for (Reference ref : {Reference::Transformers, Reference::Accelerate}) {
        std::mt19937 rng(7);
        for (int iter = 0; iter < 400; ++iter) {
            const ModuleTree& t = trees[size_t(iter) % trees.size()];
            const double total = double(t.root().bytes);
            std::uniform_real_distribution<double> frac(0.0, 0.8);
            Budgets b;
            int gpus = int(rng() % 4);
            for (int g = 0; g < gpus; ++g)
                b.push_back({Device::gpu(g), std::floor(frac(rng) * total)});
            if (rng() % 4)
                b.push_back({Device::cpu(), std::floor(frac(rng) * total)});
            Strategy st = Strategy(rng() % 4);
            Plan p = plan(t, b, st, std::nullopt, ref);
            const std::string ctx = mapText(p.deviceMap);
            // every tensor covered exactly once: no key lies under another
            QVERIFY2(validateDeviceMap(t, p.deviceMap).errors.empty(), ctx.c_str());
            for (const auto& [k1, d1] : p.deviceMap)
                for (const auto& [k2, d2] : p.deviceMap)
                    if (k1 != k2)
                        QVERIFY2(!(k1.empty() || k2.rfind(k1 + ".", 0) == 0), ctx.c_str());
            // every buffer covered too
            for (const auto& buf : t.buffers())
                QVERIFY2(deviceFor(p.deviceMap, buf.name).has_value(), (ctx + " at " + buf.name).c_str());
            // no device over its budget
            for (const auto& dt : p.devices)
                if (dt.device.kind != Device::Disk)
                    QVERIFY2(double(dt.used) <= dt.budget, ctx.c_str());
            // devices fill in order along the model (tied duplicates aside)
            int last = -1;
            Budgets order = p.budgets;
            order.push_back({Device::disk(), 0});
            for (const auto& prm : t.params()) {
                if (prm.duplicate || t.paramBytes(prm) == 0)
                    continue;
                Device dev = *deviceFor(p.deviceMap, prm.name);
                int pos = int(std::find_if(order.begin(), order.end(), [&](const DeviceBudget& x) { return x.device == dev; }) -
                              order.begin());
                QVERIFY2(pos >= last, (ctx + " at " + prm.name).c_str());
                last = pos;
            }
            // export -> import is the identity
            QCOMPARE(deviceMapToJson(deviceMapFromJson(deviceMapToJson(p.deviceMap), "x")), deviceMapToJson(p.deviceMap));
        }
    }
}

void TestPlanner::rotaryBuffersChangeTheMap()
{
    // Tiny untied Llama planned in float32 (see llamaSplitsAtLayers): model 913,728
    // (embed 256,000 + layers 657,408 + norm 256 + rotary_emb 64), lm_head 256,000,
    // total 1,169,728. Sequential, GPU 0 = 1,169,700 keeps 256,000 (embed/lm_head)
    // free: model (913,728 > 913,700) is split; embed, layers and norm fit
    // (913,664 <= 913,700); rotary_emb's 64 bytes make 913,728 > 913,700, it has no
    // children, so it and everything after go to cpu. Without the buffers (the old
    // rule) model would fit (913,664) and so would lm_head (1,169,664): {'': 0}.
    ModuleTree t = tinyLlama(path("tiny-untied"), false, DType::F32, Reference::Transformers);
    QCOMPARE(t.root().bytes, uint64_t(1'169'728));
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 1'169'700}, {"cpu", 1e9}})).deviceMap)),
             QString("model.embed_tokens:0, model.layers:0, model.norm:0, model.rotary_emb:cpu, lm_head:cpu"));
    // 1,169,728: model fits (913,728 <= 913,728); lm_head is the last layer, so
    // nothing is kept free for it: 913,728 + 256,000 <= 1,169,728.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 1'169'728}, {"cpu", 1e9}})).deviceMap)),
             QString("'':0"));

    // float16 from the float32 checkpoint: parameters 2 bytes under both references
    // (embed 128,000, layer 82,176, norm 128, lm_head 128,000); the float32 buffers
    // stay 4 bytes for transformers (rotary_emb 2 x 8 x 4 = 64) but Accelerate caps
    // them at min(2, 4): 2 x 8 x 2 = 32.
    // transformers: model 128,000 + 4 x 82,176 + 128 + 64 = 456,896, total 584,896
    // accelerate:   model 456,864, total 584,864
    ModuleTree tf = tinyLlama(path("tiny-untied"), false, DType::F16, Reference::Transformers);
    ModuleTree acc = tinyLlama(path("tiny-untied"), false, DType::F16, Reference::Accelerate);
    QCOMPARE(tf.root().bytes, uint64_t(584'896));
    QCOMPARE(acc.root().bytes, uint64_t(584'864));
    // GPU 0 = 584,880 keeps 128,000 free: 456,880 usable.
    // transformers: model 456,896 > 456,880, split; embed + layers + norm = 456,832
    //   fit, rotary_emb makes 456,896 and moves on with lm_head.
    // accelerate: model 456,864 fits; lm_head then needs no reserve: 584,864 <= 584,880.
    const Budgets b = budgets({{"0", 584'880}, {"cpu", 1e9}});
    QCOMPARE(QString::fromStdString(mapText(plan(tf, b).deviceMap)),
             QString("model.embed_tokens:0, model.layers:0, model.norm:0, model.rotary_emb:cpu, lm_head:cpu"));
    QCOMPARE(QString::fromStdString(mapText(plan(acc, b, Strategy::Sequential, std::nullopt, Reference::Accelerate).deviceMap)),
             QString("'':0"));
    // A tree built for one reference is resized for the other on a copy.
    QCOMPARE(QString::fromStdString(mapText(plan(tf, b, Strategy::Sequential, std::nullopt, Reference::Accelerate).deviceMap)),
             QString("'':0"));
    QCOMPARE(tf.root().bytes, uint64_t(584'896));
}

void TestPlanner::phi3PlannedBeforeDownload()
{
    // A tiny untied Phi-3 planned from config.json and the index alone, float32,
    // partial_rotary_factor 0.5: vocab 1,000, hidden 64, intermediate 96, 3 layers,
    // 4 heads (head_dim 16, rotary dims 8).
    // embed 1,000 x 64 x 4 = 256,000; a layer: o_proj 64 x 64 + qkv_proj 192 x 64 +
    // gate_up_proj 192 x 64 + down_proj 64 x 96 + 2 norms x 64 = 34,944 x 4 = 139,776;
    // norm 256; rotary_emb inv_freq + original_inv_freq, arange(0, 8, 2) = 4 float32
    // each: 32; lm_head 256,000. model = 256,000 + 3 x 139,776 + 256 + 32 = 675,616,
    // total 931,616.
    const std::string d = path("phi3-index");
    fs::create_directories(d);
    fixtures::Phi3Shape s{1000, 64, 96, 3, 4, 4, false, 0.5};
    fixtures::writeSharded(d, fixtures::phi3Tensors(s, DType::F32), 2, false, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::phi3Config(s, DType::F32));
    Checkpoint ck = Checkpoint::open(d);
    QVERIFY(ck.indexOnly());
    ModuleTree t = buildModuleTree(ck, DType::F32);
    QCOMPARE(t.root().bytes, uint64_t(931'616));
    // Sequential, GPU 0 = 931,616: the largest layer still to place is embed /
    // lm_head (256,000 > a decoder layer's 139,776), kept free on the main device:
    // model 675,616 <= 931,616 - 256,000 = 675,616 fits; lm_head is then the last
    // module and needs no reserve: 931,616 <= 931,616.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 931'616}, {"cpu", 1e9}})).deviceMap)),
             QString("'':0"));
    // One byte less: model (675,616 > 675,615) is split; embed, layers and norm fit
    // (675,584), rotary_emb's 32 bytes do not (675,616) and it has no children, so it
    // and lm_head go to cpu. Rotary buffers of the full head_dim (64 bytes) would have
    // split the model at 931,616 already.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 931'615}, {"cpu", 1e9}})).deviceMap)),
             QString("model.embed_tokens:0, model.layers:0, model.norm:0, model.rotary_emb:cpu, lm_head:cpu"));
    // GPU 0 = 600,000 keeps 256,000: embed fits (256,000 <= 344,000), layers.0
    // (395,776) does not and Phi3DecoderLayer is no-split, so the rest goes to cpu,
    // where model.layers merges and moves to the end (clean_device_map).
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 600'000}, {"cpu", 1e9}})).deviceMap)),
             QString("model.embed_tokens:0, model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu, model.layers:cpu"));
}

void TestPlanner::tiedHeadChangesBalancedBudget()
{
    // Tiny Llama in float32 over two GPUs, strategy balanced (transformers):
    // per_gpu = total // 2 + int(1.25 x max(first LlamaDecoderLayer, mean leaf)).
    // Leaves are the modules holding tensors themselves: embed_tokens, 9 per layer
    // (q, k, v, o 16,384 each; gate, up, down 32,768 each; two norms 256 each),
    // norm, rotary_emb, and lm_head unless it is tied.
    // untied: total 1,169,728, 40 leaves: 1,169,728 // 2 + int(1.25 x 164,352) = 584,864 + 205,440 = 790,304
    // tied:   lm_head.weight is a tied key, skipped: total 913,728, 39 leaves:
    //         456,864 + 205,440 = 662,304
    ModuleTree untied = tinyLlama(path("tiny-untied"), false, DType::F32, Reference::Transformers);
    ModuleTree tied = tinyLlama(path("tiny-tied"), true, DType::F32, Reference::Transformers);
    QCOMPARE(tied.root().bytes, uint64_t(913'728));
    const Budgets b = budgets({{"0", 1e6}, {"1", 1e6}, {"cpu", 1e9}});
    for (Reference r : {Reference::Transformers, Reference::Accelerate}) {
        // (every leaf here is also a deepest module, so Accelerate agrees)
        QCOMPARE(plan(untied, b, Strategy::Balanced, std::nullopt, r).budgets[0].bytes, 790'304.0);
        QCOMPARE(plan(tied, b, Strategy::Balanced, std::nullopt, r).budgets[0].bytes, 662'304.0);
        // No no-split class at all (an empty set is allowed): the mean leaf decides.
        // untied: int(1,169,728 / 40) = 29,243; int(1.25 x 29,243) = 36,553; 584,864 + 36,553 = 621,417
        // tied:   int(913,728 / 39) = 23,428;   int(1.25 x 23,428) = 29,285; 456,864 + 29,285 = 486,149
        QCOMPARE(plan(untied, b, Strategy::Balanced, std::vector<std::string>{}, r).budgets[0].bytes, 621'417.0);
        QCOMPARE(plan(tied, b, Strategy::Balanced, std::vector<std::string>{}, r).budgets[0].bytes, 486'149.0);
        QCOMPARE(plan(tied, b, Strategy::Balanced, std::nullopt, r).budgets[1].bytes, 1e6); // the last keeps its own
    }
}

void TestPlanner::meanLeafDefinitions()
{
    // block (Block) holds `scale` [100] itself and a child lin (Linear [10, 10] + [10]);
    // head (Linear) holds [50]; float32: block 400 + 440, head 200, total 1,040.
    ModuleTree t;
    t.addModule(-1, "", "Net");
    int block = t.addModule(0, "block", "Block");
    t.addParam(block, "scale", {100}, DType::F32);
    int lin = t.addModule(block, "lin", "Linear");
    t.addParam(lin, "weight", {10, 10}, DType::F32);
    t.addParam(lin, "bias", {10}, DType::F32);
    int head = t.addModule(0, "head", "Linear");
    t.addParam(head, "weight", {50}, DType::F32);
    t.finish(std::nullopt);
    QCOMPARE(t.root().bytes, uint64_t(1'040));
    const Budgets b = budgets({{"0", 2000}, {"1", 2000}});
    // transformers: leaves block (its own 400), block.lin (440), head (200):
    //   int(1,040 / 3) = 346; 1,040 // 2 + int(1.25 x 346) = 520 + 432 = 952
    QCOMPARE(plan(t, b, Strategy::Balanced).budgets[0].bytes, 952.0);
    // accelerate: deepest modules only, block.lin (440) and head (200):
    //   int(640 / 2) = 320; 520 + int(1.25 x 320) = 520 + 400 = 920
    QCOMPARE(plan(t, b, Strategy::Balanced, std::nullopt, Reference::Accelerate).budgets[0].bytes, 920.0);
}

void TestPlanner::rootBuffersAreQueuedLast()
{
    // Net holds `scale` [10] (40 bytes) and a buffer `mask` [5] (20 bytes) itself,
    // then children a and b ([25] each, 100 bytes). The queue is the root's
    // parameters, its children, then its own buffers: scale, a, b, mask.
    // GPU 0 = 250 keeps the largest layer (100: a, b) free: scale 40 <= 150,
    // a 140 <= 150; for b nothing is left to place after it (mask is a tensor, not
    // a layer), so 240 <= 250; mask makes 260 > 250 and goes to cpu.
    ModuleTree t;
    t.addModule(-1, "", "Net");
    t.addParam(0, "scale", {10}, DType::F32);
    t.addBuffer(0, "mask", {5}, DType::F32, false);
    t.addParam(t.addModule(0, "a", "Linear"), "weight", {25}, DType::F32);
    t.addParam(t.addModule(0, "b", "Linear"), "weight", {25}, DType::F32);
    t.finish(std::nullopt);
    QCOMPARE(t.root().bytes, uint64_t(260));
    for (Reference r : {Reference::Transformers, Reference::Accelerate})
        QCOMPARE(QString::fromStdString(
                     mapText(plan(t, budgets({{"0", 250}, {"cpu", 1000}}), Strategy::Sequential, std::nullopt, r).deviceMap)),
                 QString("scale:0, a:0, b:0, mask:cpu"));
    // In float16 the float32 buffer keeps 4 bytes for transformers (20) and is
    // capped to 2 for Accelerate (10): 20 + 50 + 50 + 20 = 140 against 130.
    t.setSizing(DType::F16, Reference::Transformers);
    QCOMPARE(t.root().bytes, uint64_t(140));
    t.setSizing(DType::F16, Reference::Accelerate);
    QCOMPARE(t.root().bytes, uint64_t(130));
}

void TestPlanner::partialBudgetsAreTakenAsGiven()
{
    // A max_memory naming only GPU 0 is used as is (no 90% cuts, no detected
    // RAM): the devices it omits do not exist, so what GPU 0 cannot hold goes
    // to disk. One GPU: the balanced budget leaves the last (only) GPU alone.
    ModuleTree t = tinyLlama(path("tiny-untied"), false, DType::F32, Reference::Transformers);
    for (Reference r : {Reference::Transformers, Reference::Accelerate}) {
        Plan p = plan(t, budgets({{"0", 600'000}}), Strategy::Auto, std::nullopt, r);
        QCOMPARE(p.budgets.size(), size_t(1));
        QCOMPARE(p.budgets[0].bytes, 600'000.0);
        QCOMPARE(QString::fromStdString(mapText(p.deviceMap)),
                 QString("model.embed_tokens:0, model.norm:disk, model.rotary_emb:disk, lm_head:disk, model.layers:disk"));
    }
}

void TestPlanner::accelerateSizesAModelBuiltInFloat32()
{
    // Accelerate is handed a model built from config.json (init_empty_weights +
    // from_config): float32 parameters whatever the checkpoint stores, each
    // counted at numel x min(dtype, 4). Planned in float32, a bf16 checkpoint
    // weighs 4 bytes a parameter (the Qwen2-0.5B: Accelerate 1.13 puts
    // layers from 6 on the CPU with 0=1GB; sized as stored, all fitted GPU 0).
    // Tied tiny Llama stored in bf16: embed 1000 x 64 x 4 = 256,000 (lm_head
    // tied: 0), a layer 41,088 x 4 = 164,352, norm 256, rotary_emb 16 x 4 = 64:
    // 913,728. Sized as stored it would be 456,864.
    const std::string d = path("tiny-tied-bf16");
    fs::create_directories(d);
    fixtures::LlamaShape s{1000, 64, 128, 4, 4, 4, true};
    // Shards written (sparse): their headers say bf16, as the Hub's files do.
    fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::BF16), 1, /*sparse=*/true, /*writeShards=*/true);
    fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::BF16));
    QVERIFY(!Checkpoint::open(d).indexOnly());
    ModuleTree t = buildModuleTree(Checkpoint::open(d), DType::F32, Reference::Accelerate);
    QCOMPARE(t.root().bytes, uint64_t(913'728));
    // GPU 0 = 600,000. model (913,728) > 600,000 - 256,000: split. embed (+ tied
    // lm_head) 256,000 + 164,352 kept free <= 600,000; layers.0 420,352 + 164,352
    // = 584,704 <= 600,000; layers.1 would make 749,056: the rest goes to cpu.
    // Sized as stored: 456,864 <= 600,000 - 128,000, so '':0.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 600'000}, {"cpu", 1e9}}), Strategy::Sequential,
                                                 std::nullopt, Reference::Accelerate)
                                                .deviceMap)),
             QString("model.embed_tokens:0, lm_head:0, model.layers.0:0, model.layers.1:cpu, model.layers.2:cpu, "
                     "model.layers.3:cpu, model.norm:cpu, model.rotary_emb:cpu"));
    // In bf16 both references size it at 2 bytes: 456,864 + 32 more rotary
    // bytes for transformers (its float32 buffers keep 4 bytes).
    QCOMPARE(buildModuleTree(Checkpoint::open(d), DType::BF16, Reference::Accelerate).root().bytes, uint64_t(456'864));
    QCOMPARE(buildModuleTree(Checkpoint::open(d), DType::BF16, Reference::Transformers).root().bytes,
             uint64_t(456'896));
}

void TestPlanner::tiedChecksInAccelerateOrder()
{
    // enc (emb [10] 40 bytes + proj [15] 60 bytes) and head (bias [5] 20 bytes, its
    // weight [10] tied to enc.emb.weight, so 0). Queue: enc, head. Placing enc, the
    // largest layer still to come is head (20): GPU 0 keeps 20 free. enc with its
    // tie weighs 100 + 20 - 0 = 120; head has no children, so it cannot be split.
    ModuleTree t;
    t.addModule(-1, "", "Net");
    int enc = t.addModule(0, "enc", "Encoder");
    t.addParam(t.addModule(enc, "emb", "Embedding"), "weight", {10}, DType::F32);
    t.addParam(t.addModule(enc, "proj", "Linear"), "weight", {15}, DType::F32);
    int head = t.addModule(0, "head", "Linear");
    t.addParam(head, "weight", {10}, DType::F32);
    t.addParam(head, "bias", {5}, DType::F32);
    t.tie("head.weight", "enc.emb.weight");
    t.finish(std::nullopt);
    auto map = [&](double gpu, Reference r) {
        return QString::fromStdString(
            mapText(plan(t, budgets({{"0", gpu}, {"cpu", 1000}}), Strategy::Sequential, std::nullopt, r).deviceMap));
    };
    for (Reference r : {Reference::Transformers, Reference::Accelerate}) {
        // 140: 120 <= 140 - 20, both fit together.
        QCOMPARE(map(140, r), QString("'':0"));
        // 121: with ties 120 > 101; alone 100 <= 101 but head cannot be split; then
        // the split test is used + size >= usable, 100 >= 101 is false: next device.
        QCOMPARE(map(121, r), QString("'':cpu"));
        // 120: alone 100 <= 100, head cannot be split, and 100 >= 100, so enc is split
        // (Accelerate 1.x falls through to the split; 0.34 moved on here). emb with
        // head: 40 + 20 <= 120 - 60 (proj is now the largest layer); proj: nothing
        // left to keep room for, 60 + 60 <= 120. All on GPU 0, merged.
        QCOMPARE(map(120, r), QString("'':0"));
    }
}

void TestPlanner::gemma3BeforeDownload()
{
    // Gemma 3's composite model planned from config.json and the index alone
    // (Hub names: language_model.model.*, vision_tower.vision_model.*), in the
    // config's bfloat16 (dtype "auto"), as transformers 5.6 would map it:
    // text vocab 100, hidden 16, MLP 24, 3 layers, 2 heads / 1 kv, head_dim 12;
    // SigLIP 8 wide, MLP 12, 1 layer, patch 4 on 8 (4 positions), no head.
    //   vision_tower 972 params x 2 = 1,944 + position_ids int64 [1, 4] 32 = 1,976
    //   multi_modal_projector (8 x 16 + 8) x 2 = 272
    //   language_model: embed_tokens 100 x 16 x 2 = 3,200 + embed_scale 2 (bf16);
    //     a Gemma3DecoderLayer 2,392 x 2 = 4,784; norm 32; rotary_emb: all three
    //     layers slide (sliding_window_pattern 6), so only sliding_attention's two
    //     float32 buffers of 6 = 48: 3,202 + 3 x 4,784 + 32 + 48 = 17,634
    //   lm_head tied: 0. Total 19,882.
    // Sequential, GPU 0 = 16,000:
    //   model: popping it drops every largest layer (all inside it), the reserve
    //     is recomputed over [lm_head] = 0; 19,882 > 16,000: split, reserve 4,784.
    //   vision_tower 1,976 and multi_modal_projector 272 fit (2,248 <= 11,216).
    //   language_model: reserve 0 again; 2,248 + 17,634 > 16,000: split, reserve 4,784.
    //   embed_tokens with its tied lm_head (+0): 5,450 <= 11,216, lm_head placed with it.
    //   layers: reserve over [norm, rotary_emb] = 48; 5,450 + 14,352 > 15,952: split.
    //   layers.0: 5,450 + 4,784 = 10,234 <= 11,216; layers.1: 15,018 > 11,216 and
    //   no-split: cpu, where the rest fits. clean_device_map merges nothing.
    const std::string d = path("gemma3");
    fs::create_directories(d);
    nlohmann::json text{{"model_type", "gemma3_text"}, {"vocab_size", 100},  {"hidden_size", 16},
                        {"intermediate_size", 24},     {"num_hidden_layers", 3}, {"num_attention_heads", 2},
                        {"num_key_value_heads", 1},    {"head_dim", 12}};
    nlohmann::json vision{{"model_type", "siglip_vision_model"}, {"hidden_size", 8}, {"intermediate_size", 12},
                          {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"image_size", 8}, {"patch_size", 4},
                          {"vision_use_head", false}};
    fixtures::writeJson(d + "/config.json", {{"model_type", "gemma3"}, {"torch_dtype", "bfloat16"},
                                             {"text_config", text}, {"vision_config", vision}});
    // The index lists the Hub's names; only a few are needed to plan.
    fixtures::writeSharded(d,
                           {{"language_model.model.embed_tokens.weight", DType::BF16, {100, 16}},
                            {"language_model.model.layers.0.mlp.up_proj.weight", DType::BF16, {24, 16}},
                            {"vision_tower.vision_model.post_layernorm.weight", DType::BF16, {8}},
                            {"multi_modal_projector.mm_soft_emb_norm.weight", DType::BF16, {8}}},
                           2, false, /*writeShards=*/false);
    const Checkpoint ck = Checkpoint::open(d);
    QVERIFY(ck.indexOnly());
    ModuleTree t = buildModuleTree(ck, std::nullopt);
    QCOMPARE(*t.dtype(), DType::BF16);
    QCOMPARE(t.root().bytes, uint64_t(19'882));
    QCOMPARE(t.params()[size_t(t.findParam("model.vision_tower.post_layernorm.weight"))].tensor >= 0, true);
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 16000}, {"cpu", 1e9}})).deviceMap)),
             QString("model.vision_tower:0, model.multi_modal_projector:0, model.language_model.embed_tokens:0, "
                     "lm_head:0, model.language_model.layers.0:0, model.language_model.layers.1:cpu, "
                     "model.language_model.layers.2:cpu, model.language_model.norm:cpu, "
                     "model.language_model.rotary_emb:cpu"));
    // 19,882: `model` fits whole, its reserve being lm_head's 0, and the tied
    // lm_head goes with it: {"": 0}.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 19882}, {"cpu", 1e9}})).deviceMap)),
             QString("'':0"));
}

void TestPlanner::mixtralBeforeDownload()
{
    // A tiny Mixtral with only config.json and the index (per-expert names,
    // as on the Hub): vocab 100, hidden 16, 4 heads of 4, 2 kv heads,
    // intermediate 24, 4 experts, 2 layers, untied, float32.
    // Sizes transformers 5.6 counts on its meta model (fused experts):
    //   embed_tokens 100 x 16 x 4 = 6,400; lm_head 6,400; norm 64;
    //   rotary_emb 16 (inv_freq + original_inv_freq, 2 float32 each);
    //   a layer: attention 768 + router 64 + gate_up_proj 4 x 48 x 16 = 3,072
    //   + down_proj 4 x 16 x 24 = 1,536 + norms 32 = 5,472 parameters = 21,888.
    const std::string d = path("mixtral-index");
    fs::create_directories(d);
    fixtures::MoeShape s;
    fixtures::writeSharded(d, fixtures::moeTensors(s, DType::F32), 2, false, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::F32));
    Checkpoint ck = Checkpoint::open(d);
    QVERIFY(ck.indexOnly());
    ModuleTree t = buildModuleTree(ck, std::nullopt);
    QCOMPARE(t.root().bytes, uint64_t(6'400 + 2 * 21'888 + 64 + 16 + 6'400));
    // Sequential, GPU 0 = 50,200, cpu = 30,000. The largest layers are
    // layers.0 and layers.1 (21,888, no-split MixtralDecoderLayer), kept free
    // on the main devices: GPU 0 offers 50,200 - 21,888 = 28,312.
    //   model (50,256) does not fit: split into embed_tokens, layers, norm, rotary_emb.
    //   embed_tokens 6,400 fits. layers (43,776) does not: split.
    //   layers.0: 6,400 + 21,888 = 28,288 <= 28,312: GPU 0.
    //   layers.1: the largest left is now lm_head (6,400): 28,288 + 21,888 =
    //     50,176 > 50,200 - 6,400; no-split, so the cpu: 21,888 <= 30,000 - 6,400.
    //   norm (21,952), rotary_emb (21,968) fit on the cpu; lm_head, the last,
    //     reserves nothing: 28,368 <= 30,000.
    // clean_device_map merges nothing: model's and layers' children differ.
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 50'200}, {"cpu", 30'000}})).deviceMap)),
             QString("model.embed_tokens:0, model.layers.0:0, model.layers.1:cpu, model.norm:cpu, "
                     "model.rotary_emb:cpu, lm_head:cpu"));
    // cpu = 20,000: layers.1 needs 21,888 > 20,000 - 6,400 and goes to disk,
    // and everything after it with it (devices are never gone back to).
    QCOMPARE(QString::fromStdString(mapText(plan(t, budgets({{"0", 50'200}, {"cpu", 20'000}})).deviceMap)),
             QString("model.embed_tokens:0, model.layers.0:0, model.layers.1:disk, model.norm:disk, "
                     "model.rotary_emb:disk, lm_head:disk"));
}

QTEST_APPLESS_MAIN(TestPlanner)
#include "tst_planner.moc"
