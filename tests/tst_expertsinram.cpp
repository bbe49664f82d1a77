// The experts_in_ram strategy (engine/plan/expertsinram.cpp, docs/planner.md):
// every part a token always uses on the GPUs first, the routed experts after
// them by whole layers, then in RAM, then on disk. Expected maps are worked
// out by hand from the sizes below; tst_moe runs one.
#include "fixtures.h"
#include "planfixtures.h"
#include "moefixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/hardware.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/placementlayout.h"
#include "stowage/planner.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
using fixtures::budgets;
using fixtures::mapText;
namespace fs = std::filesystem;

namespace {

// A Mixtral: vocab 1000, hidden 64, 4 heads of 16, 2 KV heads, 8 experts of
// width 128, 4 layers, fp32, untied.
//   embed_tokens, lm_head: 1000 x 64 x 4 = 256,000 each
//   a layer's dense part: attention (64 x 64 x 2 + 32 x 64 x 2) x 4 = 49,152,
//     router 8 x 64 x 4 = 2,048, two norms 512: 51,712
//   its experts: (8 x 256 x 64 + 8 x 64 x 128) x 4 = 786,432
//   norm 256, rotary_emb 2 x 8 x 4 = 64
//   dense in all: 256,000 x 2 + 4 x 51,712 + 320 = 719,168
fixtures::MoeShape shape()
{
    fixtures::MoeShape s;
    s.vocab = 1000;
    s.hidden = 64;
    s.intermediate = 128;
    s.layers = 4;
    s.experts = 8;
    return s;
}

std::string splitLayer(int i, const char* dense, const char* experts)
{
    const std::string L = "model.layers." + std::to_string(i) + ".";
    return L + "self_attn:" + dense + ", " + L + "mlp.gate:" + dense + ", " + L + "mlp.experts:" + experts + ", " + L +
           "input_layernorm:" + dense + ", " + L + "post_attention_layernorm:" + dense;
}

Plan plan(const ModuleTree& t, Budgets b, std::optional<KvReserve> kv = std::nullopt)
{
    PlanOptions o;
    o.strategy = Strategy::ExpertsInRam;
    o.maxMemory = std::move(b);
    o.kv = std::move(kv);
    return planDeviceMap(t, o);
}

} // namespace

class TestExpertsInRam : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    ModuleTree m_tree;

private slots:
    void initTestCase()
    {
        const std::string d = m_tmp.path().toStdString() + "/mixtral";
        fs::create_directories(d);
        fixtures::writeSharded(d, fixtures::moeTensors(shape(), DType::F32), 1, true, /*writeShards=*/false);
        fixtures::writeJson(d + "/config.json", fixtures::moeConfig(shape(), DType::F32));
        m_tree = buildModuleTree(Checkpoint::open(d), DType::F32);
        QCOMPARE(m_tree.modules()[size_t(m_tree.find("model.layers.0.mlp.experts"))].bytes, uint64_t(786'432));
        QCOMPARE(m_tree.expertsPerToken(), int64_t(2)); // num_experts_per_tok
        QCOMPARE(m_tree.modules()[size_t(m_tree.find("model.layers.0"))].bytes, uint64_t(51'712 + 786'432));
    }

    void denseOnTheGpuExpertsInRam()
    {
        QCOMPARE(QString::fromStdString(strategyName(Strategy::ExpertsInRam)), QString("experts_in_ram"));
        QCOMPARE(strategyFromName("experts_in_ram"), std::optional<Strategy>(Strategy::ExpertsInRam));
        // GPU 0 = 2,400,000, less room for one layer's routed experts copied
        // there as the router picks them (786,432): 1,613,568. The dense
        // parts (719,168) and then layer 0's experts (1,505,600) fit; layer
        // 1's would make 2,292,032. Layers 1-3 keep their experts in RAM
        // (2,359,296 of 10 MB).
        Plan p = plan(m_tree, {{Device::gpu(0), 2.4e6}, {Device::cpu(), 10e6}});
        QCOMPARE(QString::fromStdString(mapText(p.deviceMap)),
                 QString::fromStdString("model.embed_tokens:0, model.layers.0:0, " + splitLayer(1, "0", "cpu") + ", " +
                                        splitLayer(2, "0", "cpu") + ", " + splitLayer(3, "0", "cpu") +
                                        ", model.norm:0, model.rotary_emb:0, lm_head:0"));
        QCOMPARE(p.devices.size(), size_t(2));
        QCOMPARE(p.devices[0].used, uint64_t(1'505'600));
        QCOMPARE(p.devices[0].budget, 2.4e6);
        QCOMPARE(p.devices[0].reservedLayer, uint64_t(786'432));
        QCOMPARE(p.devices[1].used, uint64_t(3 * 786'432));
        QCOMPARE(p.notes.back(), std::string("experts_in_ram: 1 of 4 layers keep their routed experts on a GPU; the rest "
                                             "are in RAM or on disk"));
        QVERIFY(validateDeviceMap(m_tree, p.deviceMap).errors.empty());
        // The cost model counts what a token reads: top-2 of 8 experts, a
        // quarter of each layer's 786,432: GPU 0 719,168 + 196,608 = 915,776,
        // RAM 3 x 196,608 = 589,824.
        const CostEstimate c =
            estimateDecode(p, m_tree, hardwarePreset("rtx4090"), ExecutionPolicy::ComputeWhereItLives);
        QCOMPARE(c.devices.size(), size_t(2));
        QCOMPARE(c.devices[0].weightBytes, uint64_t(915'776));
        QCOMPARE(c.devices[1].weightBytes, uint64_t(589'824));
        // The JSON transformers takes: module entries below the layer.
        const auto j = nlohmann::json::parse(deviceMapToJson(p.deviceMap));
        QCOMPARE(j["model.layers.2.mlp.experts"], nlohmann::json("cpu"));
        QCOMPARE(j["model.layers.2.self_attn"], nlohmann::json(0));

        // The placement strip: layer 0 whole on GPU 0 (its experts hatched
        // inside it); layers 1-3 each as their dense part on GPU 0 (51,712)
        // and then their routed experts in RAM (786,432), each in its
        // device's colour, so GPU 0's run and the RAM's alternate.
        const PlacementLayout l = layoutPlacement(m_tree, moduleDevices(m_tree, p.deviceMap));
        std::vector<std::string> blocks;
        for (const PlacementBlock& b : l.blocks)
            blocks.push_back(m_tree.modules()[size_t(b.module)].name + ":" + deviceFromCode(b.deviceCode).name() + ":" +
                             std::to_string(b.bytes) + ":" + std::to_string(b.expertBytes));
        std::vector<std::string> want{"model.embed_tokens:0:256000:0", "model.layers.0:0:838144:786432"};
        for (int i = 1; i <= 3; ++i) {
            want.push_back("model.layers." + std::to_string(i) + ":0:51712:0");
            want.push_back("model.layers." + std::to_string(i) + ".mlp.experts:cpu:786432:786432");
        }
        for (const char* tail : {"model.norm:0:256:0", "model.rotary_emb:0:64:0", "lm_head:0:256000:0"})
            want.push_back(tail);
        QCOMPARE(blocks, want);
        QCOMPARE(l.totalBytes, m_tree.root().bytes);
        QCOMPARE(int(l.runs.size()), 7); // GPU, then RAM and GPU by turns, the head's GPU run last
        // a module inside a split layer finds its block: attention the dense part, the experts theirs
        QCOMPARE(l.blocksOf(m_tree, m_tree.find("model.layers.2.self_attn")), std::vector<int>{4});
        QCOMPARE(l.blocksOf(m_tree, m_tree.find("model.layers.2.mlp.experts")), std::vector<int>{5});
        QCOMPARE(l.blocksOf(m_tree, m_tree.find("model.layers.2")), (std::vector<int>{4, 5}));
    }

    void spillsToRamThenDisk()
    {
        // GPU 0 = 1,300,000 less 786,432 for the routed experts: 513,568. The
        // dense parts up to rotary_emb (463,168) fit, lm_head (another
        // 256,000) goes to RAM. No layer's experts fit on GPU 0. RAM =
        // 3,000,000: lm_head and the experts of layers 0-2 (2,615,296);
        // layer 3's would make 3,401,728: to disk.
        Plan p = plan(m_tree, {{Device::gpu(0), 1.3e6}, {Device::cpu(), 3e6}});
        QCOMPARE(QString::fromStdString(mapText(p.deviceMap)),
                 QString::fromStdString("model.embed_tokens:0, " + splitLayer(0, "0", "cpu") + ", " +
                                        splitLayer(1, "0", "cpu") + ", " + splitLayer(2, "0", "cpu") + ", " +
                                        splitLayer(3, "0", "disk") + ", model.norm:0, model.rotary_emb:0, lm_head:cpu"));
        QCOMPARE(p.devices.back().device, Device::disk());
        QCOMPARE(p.devices.back().used, uint64_t(786'432));
    }

    void kvCacheWeighsOnTheDenseParts()
    {
        // 100,000 bytes of cache a layer, on GPU 0 where attention computes:
        // the dense parts weigh 719,168 + 400,000 = 1,119,168, and layer 0's
        // experts no longer fit beside them in 2,400,000 - 786,432 (1,905,600).
        KvReserve kv{100'000, 0, "MixtralDecoderLayer", 1024, 1};
        Plan p = plan(m_tree, {{Device::gpu(0), 2.4e6}, {Device::cpu(), 10e6}}, kv);
        QCOMPARE(p.deviceMap[1], (std::pair<std::string, Device>{"model.layers.0.self_attn", Device::gpu(0)}));
        QCOMPARE(p.devices[0].used, uint64_t(719'168));
        QCOMPARE(p.devices[0].reservedKv, uint64_t(400'000)); // every layer's cache: they compute on GPU 0
        QCOMPARE(p.devices[0].reserved, uint64_t(400'000 + 786'432));
        QCOMPARE(p.devices[1].reservedKv, uint64_t(0));
    }

    void aDenseModelHasNoExperts()
    {
        const std::string d = m_tmp.path().toStdString() + "/llama";
        fs::create_directories(d);
        const fixtures::LlamaShape s{100, 64, 128, 2, 4, 2, true};
        fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::F32), 1, true, false);
        fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::F32));
        const ModuleTree t = buildModuleTree(Checkpoint::open(d), DType::F32);
        try {
            plan(t, {{Device::gpu(0), 1e6}});
            QFAIL("no error");
        } catch (const InputError& e) {
            QVERIFY2(std::string(e.what()).find("has no routed experts") != std::string::npos, e.what());
        }
    }

    void cliPlansIt()
    {
        auto r = fixtures::runCli({"plan", m_tmp.path() + "/mixtral", "--strategy", "experts_in_ram", "--max-memory",
                                   "0=2400000", "--max-memory", "cpu=10MB", "--json"});
        QCOMPARE(r.exitCode, 0);
        const auto j = nlohmann::json::parse(r.out.toStdString());
        QCOMPARE(j["model.layers.0"], nlohmann::json(0));
        QCOMPARE(j["model.layers.3.mlp.experts"], nlohmann::json("cpu"));
    }
};

QTEST_GUILESS_MAIN(TestExpertsInRam)
#include "tst_expertsinram.moc"
