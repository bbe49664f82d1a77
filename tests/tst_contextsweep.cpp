// How a plan's memory grows with the context (kvcache.h sweepContext,
// `stowage-cli plan --context-sweep`), against figures worked out by hand
// below for a tiny Llama (and Mistral, with a window).
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/kvcache.h"
#include "stowage/moduletree.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;

// The model: vocab 100, hidden 64, MLP 128, 4 layers, 4 heads of 16, 2 KV
// heads, tied, fp32, planned before download (config and index only).
//   embed_tokens 100 x 64 x 4 = 25,600
//   a layer: q 4,096 + k 2,048 + v 2,048 + o 4,096 + MLP 3 x 8,192 + norms 128
//            = 36,992 values = 147,968 bytes
//   norm 256; rotary_emb's two float32 buffers of 8 = 64
// The map: embedding and layers 0-1 on GPU 0 (25,600 + 2 x 147,968 =
// 321,536), layer 2, norm and rotary_emb on the CPU (147,968 + 256 + 64 =
// 148,288), layer 3 on disk (147,968). A layer's cache lives where it
// computes: layers 2 and 3 compute on GPU 0, the execution device.
// At context c, batch 1: a layer's cache 2 x c x 2 x 16 x 4 = 256c; the
// activation room c x max(128, 3 x 64) x 4 + 100 x 4 = 768c + 400 on each
// device that holds anything.
//   GPU 0: 321,536 + 4 x 256c + 768c + 400 = 321,936 + 1,792c
//   CPU:   148,288 + 768c + 400 = 148,688 + 768c
// With every cache in RAM:
//   GPU 0: 321,936 + 768c;  CPU: 148,688 + 4 x 256c + 768c = 148,688 + 1,792c
class TestContextSweep : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    ModuleTree m_tree;
    std::optional<ModelConfig> m_config;
    DeviceMap m_map;

    ModuleTree treeFor(const std::string& name, const nlohmann::json& config)
    {
        const std::string d = m_tmp.path().toStdString() + "/" + name;
        fs::create_directories(d);
        fixtures::LlamaShape s{100, 64, 128, 4, 4, 2, true};
        fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::F32), 1, true, /*writeShards=*/false);
        fixtures::writeJson(d + "/config.json", config);
        return buildModuleTree(Checkpoint::open(d), DType::F32);
    }
    static nlohmann::json llama()
    {
        return fixtures::llamaConfig(fixtures::LlamaShape{100, 64, 128, 4, 4, 2, true}, DType::F32);
    }

private slots:
    void initTestCase()
    {
        m_tree = treeFor("llama", llama());
        m_config = ModelConfig::parse(llama().dump(), "config.json");
        m_map = {{"model.embed_tokens", Device::gpu(0)}, {"model.layers.0", Device::gpu(0)},
                 {"model.layers.1", Device::gpu(0)},     {"model.layers.2", Device::cpu()},
                 {"model.layers.3", Device::disk()},     {"model.norm", Device::cpu()},
                 {"model.rotary_emb", Device::cpu()},    {"lm_head", Device::gpu(0)}};
    }

    void bytesAtAContext()
    {
        QCOMPARE(deviceBytesAtContext(*m_config, m_tree, m_map, Device::gpu(0), 1000, 1, false), uint64_t(2'113'936));
        QCOMPARE(deviceBytesAtContext(*m_config, m_tree, m_map, Device::cpu(), 1000, 1, false), uint64_t(916'688));
        QCOMPARE(deviceBytesAtContext(*m_config, m_tree, m_map, Device::gpu(0), 1000, 1, true), uint64_t(1'089'936));
        QCOMPARE(deviceBytesAtContext(*m_config, m_tree, m_map, Device::cpu(), 1000, 1, true), uint64_t(1'940'688));
        QCOMPARE(deviceBytesAtContext(*m_config, m_tree, m_map, Device::disk(), 1000, 1, false), uint64_t(147'968));
        // batch 2 doubles the caches and the activation room: 321,536 + 2 x (1,792 x 1,000 + 400)
        QCOMPARE(deviceBytesAtContext(*m_config, m_tree, m_map, Device::gpu(0), 1000, 2, false), uint64_t(3'906'336));
    }

    void whereEachDeviceRunsOut()
    {
        // GPU 0 at 1,000,000: 321,936 + 1,792c > 1,000,000 from c = 379;
        // with the caches in RAM 321,936 + 768c from c = 883.
        // CPU at 500,000: 148,688 + 768c from c = 458; 148,688 + 1,792c from 197.
        const Budgets budgets{{Device::gpu(0), 1'000'000}, {Device::cpu(), 500'000}};
        const ContextSweep s = sweepContext(*m_config, m_tree, m_map, budgets, 1, 1000);
        QCOMPARE(s.devices.size(), size_t(3));
        QCOMPARE(s.devices[0].device, Device::gpu(0));
        QCOMPARE(s.devices[0].weights, uint64_t(321'536));
        QCOMPARE(s.devices[0].runsOutAt, std::optional<int64_t>(379));
        QCOMPARE(s.devices[0].runsOutAtKvInRam, std::optional<int64_t>(883));
        QCOMPARE(s.devices[1].device, Device::cpu());
        QCOMPARE(s.devices[1].weights, uint64_t(148'288));
        QCOMPARE(s.devices[1].runsOutAt, std::optional<int64_t>(458));
        QCOMPARE(s.devices[1].runsOutAtKvInRam, std::optional<int64_t>(197));
        QCOMPARE(s.devices[2].device, Device::disk());
        QVERIFY(!s.devices[2].runsOutAt);
        // the exact crossings: one token earlier still fits
        QVERIFY(deviceBytesAtContext(*m_config, m_tree, m_map, Device::gpu(0), 378, 1, false) <= 1'000'000);
        QVERIFY(deviceBytesAtContext(*m_config, m_tree, m_map, Device::gpu(0), 379, 1, false) > 1'000'000);
        const std::vector<std::string> lines = describeContextSweep(s);
        QCOMPARE(lines.size(), size_t(2));
        QCOMPARE(QString::fromStdString(lines[0]),
                 QString("GPU 0 runs out at token 379 with batch 1; 883 with the KV cache in RAM"));
        QCOMPARE(QString::fromStdString(lines[1]),
                 QString("RAM runs out at token 458 with batch 1; 197 with the KV cache in RAM"));
        // the sampled contexts: 1 to 1,000, ascending, each once
        QCOMPARE(s.contexts.front(), int64_t(1));
        QCOMPARE(s.contexts.back(), int64_t(1000));
        QVERIFY(std::is_sorted(s.contexts.begin(), s.contexts.end()) &&
                std::adjacent_find(s.contexts.begin(), s.contexts.end()) == s.contexts.end());
        // the crossings are sampled too: GPU 0 at 379 holds 321,936 + 1,792 x 379 = 1,001,104
        const auto at379 = std::find(s.contexts.begin(), s.contexts.end(), 379);
        QVERIFY(at379 != s.contexts.end());
        QVERIFY(std::find(s.contexts.begin(), s.contexts.end(), 458) != s.contexts.end());
        QCOMPARE(s.bytes[size_t(at379 - s.contexts.begin())][0], uint64_t(1'001'104));
        QCOMPARE(s.bytes.back()[0], uint64_t(2'113'936));
        QCOMPARE(s.bytes.front()[1], uint64_t(148'688 + 768));
    }

    void weightsOverOrRoomToSpare()
    {
        // 300,000 < the GPU's 321,536 bytes of weights; RAM at 10 MB never runs out by 1,000
        const Budgets budgets{{Device::gpu(0), 300'000}, {Device::cpu(), 10'000'000}};
        const ContextSweep s = sweepContext(*m_config, m_tree, m_map, budgets, 1, 1000);
        QCOMPARE(s.devices[0].runsOutAt, std::optional<int64_t>(0));
        QVERIFY(!s.devices[1].runsOutAt);
        QVERIFY(!s.devices[1].runsOutAtKvInRam);
        const std::vector<std::string> lines = describeContextSweep(s);
        QCOMPARE(QString::fromStdString(lines[0]), QString("GPU 0 cannot hold its weights (314.00 KiB of 292.97 KiB)"));
        QCOMPARE(QString::fromStdString(lines[1]), QString("RAM holds every context up to 1,000 with batch 1"));
    }

    void slidingWindowsStopTheCacheGrowing()
    {
        // Mistral's layers keep min(c, 100) positions: GPU 0 at 1,000,000 holds
        // 321,536 + 4 x 256 x 100 + 768c + 400 = 424,336 + 768c past c = 100,
        // over from c = 750 (without the window: 379).
        nlohmann::json m = llama();
        m["model_type"] = "mistral";
        m["sliding_window"] = 100;
        const ModuleTree t = treeFor("mistral", m);
        const ModelConfig c = ModelConfig::parse(m.dump(), "config.json");
        const ContextSweep s = sweepContext(c, t, m_map, {{Device::gpu(0), 1'000'000}}, 1, 1000);
        QCOMPARE(s.devices[0].runsOutAt, std::optional<int64_t>(750));
    }

    void unknownFamilyIsAnInputError()
    {
        nlohmann::json x = llama();
        x["model_type"] = "no_such_family";
        const ModelConfig c = ModelConfig::parse(x.dump(), "config.json");
        try {
            sweepContext(c, m_tree, m_map, {}, 1, 1000);
            QFAIL("no error");
        } catch (const InputError& e) {
            QVERIFY2(std::string(e.what()).find("no_such_family") != std::string::npos, e.what());
        }
    }

    void cliPrintsTheSweep()
    {
        const std::string d = m_tmp.path().toStdString() + "/cli";
        fs::create_directories(d);
        fixtures::writeSharded(d, fixtures::llamaTensors({100, 64, 128, 4, 4, 2, true}, DType::F32), 1, true, false);
        fixtures::writeJson(d + "/config.json", llama());
        nlohmann::json map = nlohmann::json::object();
        for (const auto& [k, dev] : m_map)
            map[k] = dev.kind == Device::Gpu ? nlohmann::json(dev.index) : nlohmann::json(dev.name());
        fixtures::writeJson(d + "/map.json", map);
        auto r = fixtures::runCli({"plan", QString::fromStdString(d), "--device-map", QString::fromStdString(d + "/map.json"),
                                   "--max-memory", "0=1000000", "--max-memory", "cpu=500000", "--context-sweep", "1000"});
        QCOMPARE(r.exitCode, 0);
        const auto j = nlohmann::json::parse(r.out.toStdString());
        QCOMPARE(j["devices"][0]["runs_out_at"].get<int64_t>(), int64_t(379));
        QCOMPARE(j["devices"][1]["runs_out_at_kv_in_ram"].get<int64_t>(), int64_t(197));
        QCOMPARE(j["summary"][0].get<std::string>(), std::string("GPU 0 runs out at token 379 with batch 1; 883 with the KV cache in RAM"));
        QCOMPARE(j["points"].back()["bytes"]["0"].get<uint64_t>(), uint64_t(2'113'936));
        auto bad = fixtures::runCli({"plan", QString::fromStdString(d), "--context-sweep", "12x"});
        QVERIFY2(fixtures::badInputProblem(bad, "--context-sweep: expected CONTEXT or CONTEXTxBATCH").isEmpty(),
                 qPrintable(fixtures::badInputProblem(bad, "--context-sweep")));
    }
};

QTEST_GUILESS_MAIN(TestContextSweep)
#include "tst_contextsweep.moc"
