// A decode step's fixed costs (per token, per unit, per unit on disk, per
// routed expert): how the cost model adds them, how a tree's units are
// counted, their JSON in a profile and the per-CPU cache that keeps what
// `stowage-cli hardware` measured. The formulas per link are tst_costmodel's.
#include "costfixtures.h"
#include "fixtures.h"
#include "moefixtures.h"

#include "stowage/checkpoint.h"
#include "stowage/costmodel.h"
#include "stowage/families.h"
#include "stowage/hardware.h"
#include "stowage/planner.h"

#include <QtTest>

using namespace stowage;
using fixtures::errorOf;
using fixtures::kGB;
using fixtures::near;
using fixtures::Placement;
using fixtures::profileWith;

namespace {

// RAM and disk read at 1 GB/s, a CPU of 1 TFLOP/s: bytes cost 1 ns each and
// compute nothing that shows.
HardwareProfile slowBox()
{
    HardwareProfile p;
    p.name = "box";
    p.ramBandwidth = 1e9;
    p.cpuFlops = 1e12;
    p.ramBytes = 64 * kGB;
    p.diskReadBandwidth = 1e9;
    return p;
}

} // namespace

class TestFixedCosts : public QObject {
    Q_OBJECT

private slots:
    void fixedCostsAddPerTokenUnitAndDiskUnit();
    void unitsPastTheCpuCacheCostTheirFromRamFigure();
    void stepUnitsCountTheTreesUnitsOnDisk();
    void routedExpertsCostPerExpertATokenComputes();
    void fixedCostsInProfileJson();
    void fixedCostsCacheIsPerCpu();
};

void TestFixedCosts::fixedCostsAddPerTokenUnitAndDiskUnit()
{
    // 1 MB in RAM read at 1 GB/s: 1 ms of bytes (CPU 1 TFLOP/s: compute far below).
    HardwareProfile p = slowBox();
    p.fixedCosts["prefetch"] = {1e-3, 1e-4, 5e-4};
    const Placement ram{{Device::cpu(), 1'000'000}};
    // 1 ms of bytes + 1 ms per token + 10 units x 0.1 ms.
    auto e = estimateDecode(ram, 1'000'000 / 2, p, ExecutionPolicy::Prefetch, 0, {10, 0, 0, {}});
    QVERIFY2(near(e.secondsPerToken, 3e-3), qPrintable(QString::number(e.secondsPerToken, 'g', 12)));
    QVERIFY(near(e.fixedSeconds, 2e-3));
    QCOMPARE(e.devices.size(), size_t(1));
    QVERIFY(near(e.devices[0].seconds, 1e-3)); // the device's part is its bytes only
    QCOMPARE(e.devices[0].share, 1.0);
    // 4 of the 10 units fetched from disk: 4 x 0.5 ms more.
    e = estimateDecode(ram, 1'000'000 / 2, p, ExecutionPolicy::Prefetch, 0, {10, 4, 0, {}});
    QVERIFY(near(e.fixedSeconds, 4e-3));
    QVERIFY(near(e.secondsPerToken, 5e-3));
    // 6 routed experts a token at 0.2 ms each: 1.2 ms more.
    p.fixedCosts["prefetch"].perExpert = 2e-4;
    e = estimateDecode(ram, 1'000'000 / 2, p, ExecutionPolicy::Prefetch, 0, {10, 4, 6, {}});
    QVERIFY(near(e.fixedSeconds, 5.2e-3));
    QVERIFY(near(e.secondsPerToken, 6.2e-3));
    // A policy the profile has no fixed costs for counts bytes alone.
    e = estimateDecode(ram, 1'000'000 / 2, p, ExecutionPolicy::AccelerateLike, 0, {10, 4, 6, {}});
    QCOMPARE(e.fixedSeconds, 0.0);
    QVERIFY(near(e.secondsPerToken, 1e-3));
}

void TestFixedCosts::unitsPastTheCpuCacheCostTheirFromRamFigure()
{
    // 0.1 ms a unit in the CPU's caches, 0.4 ms where the weights stream
    // from RAM; caches of 32 MiB.
    HardwareProfile p = slowBox();
    p.fixedCosts["prefetch"] = {0, 1e-4, 0};
    p.fixedCosts["prefetch"].perUnitFromRam = 4e-4;
    p.cpuCacheBytes = 32ULL << 20;
    const StepUnits ten{10, 0, 0, {}};
    // 16 MiB (16.777216 ms of bytes at 1 GB/s) fit: 10 x 0.1 ms.
    auto e = estimateDecode(Placement{{Device::cpu(), 16ULL << 20}}, 0, p, ExecutionPolicy::Prefetch, 0, ten);
    QVERIFY2(near(e.fixedSeconds, 1e-3), qPrintable(QString::number(e.fixedSeconds, 'g', 12)));
    QVERIFY(near(e.secondsPerToken, 16.777216e-3 + 1e-3));
    // Exactly the cache still fits; one byte more does not: 10 x 0.4 ms.
    e = estimateDecode(Placement{{Device::cpu(), 32ULL << 20}}, 0, p, ExecutionPolicy::Prefetch, 0, ten);
    QVERIFY(near(e.fixedSeconds, 1e-3));
    e = estimateDecode(Placement{{Device::cpu(), (32ULL << 20) + 1}}, 0, p, ExecutionPolicy::Prefetch, 0, ten);
    QVERIFY2(near(e.fixedSeconds, 4e-3), qPrintable(QString::number(e.fixedSeconds, 'g', 12)));
    // Weights on disk count too: 16 MiB in RAM and 32 MiB on disk are past it.
    e = estimateDecode(Placement{{Device::cpu(), 16ULL << 20}, {Device::disk(), 32ULL << 20}}, 0, p,
                       ExecutionPolicy::Prefetch, 0, ten);
    QVERIFY(near(e.fixedSeconds, 4e-3));
    // No cache measured (a preset, an older profile): perUnit throughout.
    p.cpuCacheBytes = 0;
    e = estimateDecode(Placement{{Device::cpu(), 1ULL << 30}}, 0, p, ExecutionPolicy::Prefetch, 0, ten);
    QVERIFY(near(e.fixedSeconds, 1e-3));
    // Nor is a from-RAM figure below the cached one taken (a noisy fit).
    p.cpuCacheBytes = 32ULL << 20;
    p.fixedCosts["prefetch"].perUnitFromRam = 5e-5;
    e = estimateDecode(Placement{{Device::cpu(), 1ULL << 30}}, 0, p, ExecutionPolicy::Prefetch, 0, ten);
    QVERIFY(near(e.fixedSeconds, 1e-3));
}

void TestFixedCosts::stepUnitsCountTheTreesUnitsOnDisk()
{
    // A 3-layer Llama, config + index only: its runner's units are
    // embed_tokens, layers.0-2, norm and lm_head (engine/model/families/llama.cpp).
    QTemporaryDir dir;
    fixtures::LlamaShape s;
    s.vocab = 64, s.hidden = 16, s.intermediate = 32, s.layers = 3, s.heads = 4, s.kvHeads = 2, s.tied = false;
    fixtures::writeJson((dir.path() + "/config.json").toStdString(), fixtures::llamaConfig(s, DType::F32));
    fixtures::writeSharded(dir.path().toStdString(), fixtures::llamaTensors(s, DType::F32), 1, true, false);
    const Checkpoint ck = Checkpoint::open(dir.path().toStdString());
    const ModuleTree tree = buildModuleTree(ck, DType::F32, Reference::Transformers);
    QCOMPARE(executionUnits(tree).size(), size_t(6));

    StepUnits u = stepUnits(tree, {{"", Device::cpu()}});
    QCOMPARE(u.total, 6);
    QCOMPARE(u.onDisk, 0);
    u = stepUnits(tree, {{"model.embed_tokens", Device::cpu()}, {"model.layers.0", Device::cpu()},
                         {"model.layers.1", Device::disk()}, {"model.layers.2", Device::disk()},
                         {"model.norm", Device::cpu()}, {"model.rotary_emb", Device::cpu()}, {"lm_head", Device::disk()}});
    QCOMPARE(u.total, 6);
    QCOMPARE(u.onDisk, 3);
    // Their weights by size, in float32: a layer's q and o 16 x 16 (1,024
    // bytes), k and v 2 heads x 4 x 16 (512), gate, up and down 16 x 32
    // (2,048), two norms of 16 (64); lm_head 64 x 16 (4,096).
    QCOMPARE(u.diskWeights, (std::map<uint64_t, uint64_t>{
                                {64, 4 * 64}, {512, 4 * 512}, {1024, 4 * 1024}, {2048, 6 * 2048}, {4096, 4096}}));
    // A layer split below the unit (its MLP on disk) waits for the disk too.
    u = stepUnits(tree, {{"model.embed_tokens", Device::cpu()}, {"model.layers.0.self_attn", Device::cpu()},
                         {"model.layers.0.mlp", Device::disk()}, {"model.layers.0.input_layernorm", Device::cpu()},
                         {"model.layers.0.post_attention_layernorm", Device::cpu()}, {"model.layers.1", Device::cpu()},
                         {"model.layers.2", Device::cpu()}, {"model.norm", Device::cpu()},
                         {"model.rotary_emb", Device::cpu()}, {"lm_head", Device::cpu()}});
    QCOMPARE(u.onDisk, 1);
    QCOMPARE(u.diskWeights, (std::map<uint64_t, uint64_t>{{2048, 3 * 2048}}));
}

void TestFixedCosts::routedExpertsCostPerExpertATokenComputes()
{
    // A Mixtral of 4 layers, 8 experts, two a token (config + index only):
    // each layer computes 2 routed experts, 8 a token, wherever they live.
    QTemporaryDir dir;
    fixtures::MoeShape s;
    s.vocab = 1000, s.hidden = 64, s.intermediate = 128, s.layers = 4, s.experts = 8;
    fixtures::writeSharded(dir.path().toStdString(), fixtures::moeTensors(s, DType::F32), 1, true, false);
    fixtures::writeJson((dir.path() + "/config.json").toStdString(), fixtures::moeConfig(s, DType::F32));
    const ModuleTree tree = buildModuleTree(Checkpoint::open(dir.path().toStdString()), DType::F32);
    QCOMPARE(tree.expertsPerToken(), int64_t(2));
    const DeviceMap ram{{"", Device::cpu()}};
    QCOMPARE(stepUnits(tree, ram).experts, int64_t(8));
    const DeviceMap split{{"model.embed_tokens", Device::cpu()}, {"model.layers.0", Device::cpu()},
                          {"model.layers.1", Device::cpu()},     {"model.layers.2.self_attn", Device::cpu()},
                          {"model.layers.2.mlp", Device::disk()}, {"model.layers.2.input_layernorm", Device::cpu()},
                          {"model.layers.2.post_attention_layernorm", Device::cpu()},
                          {"model.layers.3", Device::disk()},    {"model.norm", Device::cpu()},
                          {"model.rotary_emb", Device::cpu()},   {"lm_head", Device::cpu()}};
    const StepUnits u = stepUnits(tree, split);
    QCOMPARE(u.experts, int64_t(8));
    QCOMPARE(u.onDisk, 2);
    // A dense Llama computes none.
    QTemporaryDir llama;
    fixtures::LlamaShape l;
    l.vocab = 64, l.hidden = 16, l.intermediate = 32, l.layers = 3, l.heads = 4, l.kvHeads = 2;
    fixtures::writeJson((llama.path() + "/config.json").toStdString(), fixtures::llamaConfig(l, DType::F32));
    fixtures::writeSharded(llama.path().toStdString(), fixtures::llamaTensors(l, DType::F32), 1, true, false);
    QCOMPARE(stepUnits(buildModuleTree(Checkpoint::open(llama.path().toStdString()), DType::F32, Reference::Transformers),
                       ram)
                 .experts,
             int64_t(0));
    // The whole-tree estimate adds 8 x perExpert to its fixed part and
    // nothing to its bytes.
    HardwareProfile p = slowBox();
    const Plan plan = planFromDeviceMap(tree, ram, "all in RAM");
    p.fixedCosts["prefetch"] = {1e-3, 1e-4, 0};
    const CostEstimate without = estimateDecode(plan, tree, p, ExecutionPolicy::Prefetch);
    p.fixedCosts["prefetch"].perExpert = 5e-5;
    const CostEstimate with = estimateDecode(plan, tree, p, ExecutionPolicy::Prefetch);
    QVERIFY2(near(with.fixedSeconds - without.fixedSeconds, 8 * 5e-5), qPrintable(QString::number(with.fixedSeconds)));
    QVERIFY(near(with.secondsPerToken - without.secondsPerToken, 8 * 5e-5));
}

void TestFixedCosts::fixedCostsInProfileJson()
{
    HardwareProfile p = hardwarePreset("t4");
    p.fixedCosts["accelerate-like"] = {2e-3, 3e-4, 1e-4};
    p.fixedCosts["compute-where-it-lives"] = {1e-3, 0, 0};
    const HardwareProfile q = profileFromJson(profileToJson(p), "p.json");
    QCOMPARE(q.fixedCosts.size(), size_t(2));
    QCOMPARE(q.fixedCosts.at("accelerate-like").perToken, 2e-3);
    QCOMPARE(q.fixedCosts.at("accelerate-like").perUnit, 3e-4);
    QCOMPARE(q.fixedCosts.at("accelerate-like").perDiskUnit, 1e-4);
    QCOMPARE(q.fixedCosts.at("compute-where-it-lives").perToken, 1e-3);
    QCOMPARE(q.fixedCosts.at("accelerate-like").copyBandwidth, 0.0); // not timed: not written
    QCOMPARE(q.fixedCosts.at("accelerate-like").perExpert, 0.0);
    QVERIFY(profileToJson(p).find("perExpert") == std::string::npos);
    QCOMPARE(q.fixedCosts.at("accelerate-like").perUnitFromRam, 0.0);
    QVERIFY(profileToJson(p).find("perUnitFromRam") == std::string::npos);
    p.fixedCosts["accelerate-like"].perUnitFromRam = 1.5e-4;
    QCOMPARE(profileFromJson(profileToJson(p), "p.json").fixedCosts.at("accelerate-like").perUnitFromRam, 1.5e-4);
    QVERIFY(profileToJson(p).find("cpuCacheBytes") == std::string::npos); // not measured: not written
    p.cpuCacheBytes = 32ULL << 20;
    QCOMPARE(profileFromJson(profileToJson(p), "p.json").cpuCacheBytes, uint64_t(32ULL << 20));
    p.fixedCosts["compute-where-it-lives"].perExpert = 2.5e-5;
    QCOMPARE(profileFromJson(profileToJson(p), "p.json").fixedCosts.at("compute-where-it-lives").perExpert, 2.5e-5);
    p.fixedCosts["compute-where-it-lives"].perExpert = 0;
    QVERIFY(profileToJson(p).find("copyBandwidth") == std::string::npos);
    p.fixedCosts["accelerate-like"].copyBandwidth = 3.2e9;
    QCOMPARE(profileFromJson(profileToJson(p), "p.json").fixedCosts.at("accelerate-like").copyBandwidth, 3.2e9);
    p.fixedCosts["accelerate-like"].copyRates = {{180224, 3.6e9}, {2883584, 1.5e10}, {4194304, 3.2e9}};
    QCOMPARE(profileFromJson(profileToJson(p), "p.json").fixedCosts.at("accelerate-like").copyRates,
             (std::vector<std::pair<double, double>>{{180224, 3.6e9}, {2883584, 1.5e10}, {4194304, 3.2e9}}));
    auto err = [](const std::string& costs) {
        return errorOf([&] { profileFromJson(profileWith("cpuFlops", "1e12, \"fixedCosts\": " + costs), "hw.json"); });
    };
    QVERIFY(err(R"({"prefetch": {"perToken": 0.001}})").isEmpty());
    QVERIFY(err(R"({"prefetch": {"perToken": -0.001}})").contains("fixedCosts.prefetch.perToken must be a non-negative"));
    QVERIFY(err(R"({"fast": {"perToken": 0.001}})").contains("unknown policy \"fast\""));
    QVERIFY(err(R"({"prefetch": {"perExpert": "fast"}})").contains("fixedCosts.prefetch.perExpert must be a non-negative"));
    QVERIFY(err(R"({"prefetch": {"perTok": 0.001}})").contains("unknown field \"perTok\""));
    QVERIFY(err(R"({"prefetch": {"perUnitFromRam": -1e-4}})")
                .contains("fixedCosts.prefetch.perUnitFromRam must be a non-negative number of seconds"));
    QVERIFY(errorOf([] { profileFromJson(profileWith("cpuFlops", "1e12, \"cpuCacheBytes\": -1"), "hw.json"); })
                .contains("\"cpuCacheBytes\" must be a non-negative whole number of bytes"));
    QVERIFY(err("[1]").contains("fixedCosts must be an object"));
    QVERIFY(err(R"({"accelerate-like": {"copyBandwidth": -1}})")
                .contains("fixedCosts.accelerate-like.copyBandwidth must be a non-negative number of bytes per second"));
    QVERIFY(err(R"({"accelerate-like": {"copyRates": [[4194304, 1e9], [180224, 3e9]]}})")
                .contains("fixedCosts.accelerate-like.copyRates must list weight sizes in ascending order"));
    QVERIFY(err(R"({"accelerate-like": {"copyRates": [[4194304, 0]]}})")
                .contains("fixedCosts.accelerate-like.copyRates must be a list of [weight bytes, bytes per second]"));
    QVERIFY(err(R"({"prefetch": {"perToken": 0.001}})").isEmpty());
}

void TestFixedCosts::fixedCostsCacheIsPerCpu()
{
    QTemporaryDir dir;
    const QByteArray before = qgetenv("STOWAGE_CACHE_DIR");
    qputenv("STOWAGE_CACHE_DIR", dir.path().toUtf8());
    QCOMPARE(QString::fromStdString(fixedCostsCachePath()), dir.path() + "/fixed-costs.json");
    QVERIFY(loadFixedCosts().empty()); // nothing measured yet
    saveFixedCosts({{"prefetch", {1e-3, 2e-4, 3e-4}}}, "2026-12-06");
    std::string when;
    auto c = loadFixedCosts(&when);
    QCOMPARE(when, std::string("2026-12-06"));
    QCOMPARE(c.size(), size_t(1));
    QCOMPARE(c.at("prefetch").perUnit, 2e-4);
    // Figures measured on another CPU are not this machine's.
    fixtures::writeJson((dir.path() + "/fixed-costs.json").toStdString(),
                        {{"Some Other CPU, 64 cores", {{"measured", "2026-01-01"}, {"fixedCosts", {{"prefetch", {{"perToken", 1.0}}}}}}}});
    QVERIFY(loadFixedCosts().empty());
    // Nor are this CPU's figures from an earlier runtime (no "revision":
    // measured while OpenBLAS's threads still spun beside decode).
    {
        nlohmann::json saved;
        {
            QFile f(dir.path() + "/fixed-costs.json");
            saveFixedCosts({{"prefetch", {1e-3, 2e-4, 3e-4}}}, "2026-12-06");
            QVERIFY(f.open(QIODevice::ReadOnly));
            saved = nlohmann::json::parse(f.readAll().toStdString());
        }
        QCOMPARE(loadFixedCosts().size(), size_t(1));
        for (auto& entry : saved) // this CPU's, and the other CPU's written above
            entry.erase("revision");
        fixtures::writeJson((dir.path() + "/fixed-costs.json").toStdString(), saved);
        QVERIFY(loadFixedCosts().empty());
    }
    // A damaged file is measured again, never an error.
    fixtures::writeBytes((dir.path() + "/fixed-costs.json").toStdString(), "{not json");
    QVERIFY(loadFixedCosts().empty());
    saveFixedCosts({{"prefetch", {1e-3, 2e-4, 3e-4}}}, "2026-12-07");
    QCOMPARE(loadFixedCosts().size(), size_t(1));
    FittedRates fitted{1.0, 2.0, 3.0, 4};
    loadFixedCosts(nullptr, &fitted);
    QCOMPARE(fitted.ramBandwidth, 0.0); // saved without the rates they were fitted to
    QCOMPARE(fitted.cpuCacheBytes, uint64_t(0));
    // Saved with them, they come back with the costs, and this machine's
    // profile takes them in place of what it reads now: the costs were
    // fitted to them. Without fixed costs, every rate is read now.
    const FittedRates rates{12.5e9, 11.5e9, 10.5e9, 32ULL << 20};
    saveFixedCosts({{"prefetch", {1e-3, 2e-4, 3e-4}}}, "2026-12-08", rates);
    QCOMPARE(loadFixedCosts(nullptr, &fitted).size(), size_t(1));
    QCOMPARE(fitted.ramBandwidth, 12.5e9);
    QCOMPARE(fitted.cpuGemvF32, 11.5e9);
    QCOMPARE(fitted.cpuGemvBf16, 10.5e9);
    QCOMPARE(fitted.cpuCacheBytes, uint64_t(32ULL << 20));
    const HardwareProfile paired = measureThisMachine();
    if (paired.measured) { // an instrumented build measures nothing and keeps no fixed costs
        QCOMPARE(paired.fixedCosts.size(), size_t(1));
        QCOMPARE(paired.ramBandwidth, 12.5e9);
        QCOMPARE(paired.cpuGemvF32, 11.5e9);
        QCOMPARE(paired.cpuGemvBf16, 10.5e9);
        QCOMPARE(paired.cpuCacheBytes, uint64_t(32ULL << 20));
        QVERIFY2(paired.sources.find("the rates they were fitted to") != std::string::npos, paired.sources.c_str());
    } else {
        QVERIFY(paired.fixedCosts.empty());
    }
    const HardwareProfile now = measureThisMachine({}, /*withFixedCosts=*/false);
    QVERIFY(now.fixedCosts.empty());
    QVERIFY(now.ramBandwidth != 12.5e9); // this machine's own reading (no RAM reads at exactly that)
    QVERIFY(now.sources.find("fitted") == std::string::npos && now.sources.find("fixed costs") == std::string::npos);
    // A damaged set of rates is no set: the costs come back alone.
    {
        QFile f(dir.path() + "/fixed-costs.json");
        QVERIFY(f.open(QIODevice::ReadOnly));
        nlohmann::json saved = nlohmann::json::parse(f.readAll().toStdString());
        f.close();
        saved[thisCpuKey()]["fittedTo"]["cpuGemvF32"] = "fast";
        fixtures::writeJson((dir.path() + "/fixed-costs.json").toStdString(), saved);
        QCOMPARE(loadFixedCosts(nullptr, &fitted).size(), size_t(1));
        QCOMPARE(fitted.ramBandwidth, 0.0);
    }
    if (before.isNull())
        qunsetenv("STOWAGE_CACHE_DIR");
    else
        qputenv("STOWAGE_CACHE_DIR", before);
}

QTEST_APPLESS_MAIN(TestFixedCosts)
#include "tst_fixedcosts.moc"
