// Mixture-of-experts weights at run time: a decode step reads only the
// experts its router picked. Measured with the weight store's telemetry on a
// tiny Mixtral whose layers all live on disk.
#include "fixtures.h"
#include "moefixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/model.h"
#include "stowage/planner.h"

#include <QtTest>

#include <cmath>
#include <set>

using namespace stowage;

class TestMoe : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
private slots:
    void decodeReadsOnlyRoutedExperts_data();
    void decodeReadsOnlyRoutedExperts();
    void expertsOnAnotherDevice();
    void expertsInRamPlansAndRuns();
};

namespace {
// hidden 32, 4 heads of 8, 2 kv heads, intermediate 64, 8 experts, top-2, 2 layers.
fixtures::MoeShape shape()
{
    fixtures::MoeShape s;
    s.vocab = 64;
    s.hidden = 32;
    s.intermediate = 64;
    s.experts = 8;
    s.topK = 2;
    return s;
}
std::string writeCheckpoint(const QString& root)
{
    const std::string d = root.toStdString() + "/mixtral";
    if (!QFileInfo::exists(QString::fromStdString(d + "/config.json"))) {
        QDir().mkpath(QString::fromStdString(d));
        fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::moeTensors(shape(), DType::F32), 3);
        fixtures::writeJson(d + "/config.json", fixtures::moeConfig(shape(), DType::F32));
    }
    return d;
}
} // namespace

void TestMoe::decodeReadsOnlyRoutedExperts_data()
{
    QTest::addColumn<int>("policy");
    QTest::newRow("accelerate-like (copies)") << int(ExecutionPolicy::AccelerateLike);
    QTest::newRow("prefetch (mapped in place)") << int(ExecutionPolicy::Prefetch);
}

void TestMoe::decodeReadsOnlyRoutedExperts()
{
    QFETCH(int, policy);
    const std::string d = writeCheckpoint(m_tmp.path());
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.policy = ExecutionPolicy(policy);
    lo.deviceMap = {{"model.embed_tokens", Device::cpu()},
                    {"model.layers", Device::disk()},
                    {"model.norm", Device::cpu()},
                    {"lm_head", Device::cpu()}};
    auto model = Model::load(ck, tree, lo);
    Telemetry& t = model->telemetry();
    model->forward({3, 17, 5, 42, 8, 1});
    // Bytes of one layer read from disk per decoded token, fp32:
    //   attention q 32x32 + k 16x32 + v 16x32 + o 32x32 = 3072, two norms 64,
    //   router 8x32 = 256: 3392 parameters, 13,568 bytes, always read;
    //   one expert w1 + w3 64x32 and w2 32x64 = 6144 parameters, 24,576 bytes.
    // Two experts a token: 13,568 + 2 x 24,576 = 62,720 bytes a layer,
    // 125,440 for both layers; reading every expert would be 420,352.
    constexpr uint64_t kPerToken = 2 * (13'568 + 2 * 24'576);
    constexpr int kSteps = 6;
    model->settle(); // what the prompt's pass fetched ahead is counted before
    const uint64_t before = t.diskReadBytes();
    const uint64_t cursor = t.eventCount();
    int32_t next = 9;
    for (int s = 0; s < kSteps; ++s) {
        const std::vector<float> logits = model->forward({next});
        next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    model->settle();
    const uint64_t read = t.diskReadBytes() - before;
    if (ExecutionPolicy(policy) == ExecutionPolicy::AccelerateLike) {
        // No prefetch: exactly the routed experts and the rest of each layer.
        QCOMPARE(read, kSteps * kPerToken);
    } else {
        // The prefetcher reads the next token's first layer (not its
        // experts) while a token finishes, so one layer's 13,568 bytes of
        // attention, norms and router may fall before or after the window.
        QVERIFY2(read + 13'568 >= kSteps * kPerToken && read <= kSteps * kPerToken + 13'568,
                 qPrintable(QString::number(read)));
    }
    // Per layer and token, two experts' three tensors moved, each its own slot.
    std::map<std::string, std::set<std::string>> expertsPerUnit;
    int expertMoves = 0;
    for (const TraceEvent& e : t.traceSince(cursor).items) {
        if ((e.kind != TraceKind::Fetch && e.kind != TraceKind::Map && e.kind != TraceKind::Prefetch) ||
            e.tensor.find(".experts.") == std::string::npos)
            continue;
        QVERIFY2(e.kind != TraceKind::Prefetch, e.tensor.c_str()); // never ahead of the router
        QVERIFY2(e.tensor.find("block_sparse_moe.experts.") != std::string::npos, e.tensor.c_str());
        ++expertMoves;
    }
    QCOMPARE(expertMoves, kSteps * 2 * 2 * 3);
}

void TestMoe::expertsOnAnotherDevice()
{
    // Layer 1's experts live on a simulated GPU with the rest of the layer:
    // nothing of it is fetched, layer 0 (on disk) still reads only routed experts.
    const std::string d = writeCheckpoint(m_tmp.path());
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.simulateGpus = true;
    lo.policy = ExecutionPolicy::AccelerateLike;
    lo.deviceMap = {{"model.embed_tokens", Device::gpu(0)},
                    {"model.layers.0", Device::disk()},
                    {"model.layers.1", Device::gpu(0)},
                    {"model.norm", Device::gpu(0)},
                    {"lm_head", Device::gpu(0)}};
    auto model = Model::load(ck, tree, lo);
    Telemetry& t = model->telemetry();
    model->forward({3, 17, 5});
    const uint64_t before = t.diskReadBytes(), h2d = t.h2dBytes();
    model->forward({9});
    // layer 0 from disk to GPU 0: its 13,568 bytes and two experts' 49,152.
    QCOMPARE(t.diskReadBytes() - before, uint64_t(13'568 + 2 * 24'576));
    QCOMPARE(t.h2dBytes() - h2d, uint64_t(13'568 + 2 * 24'576));
}

void TestMoe::expertsInRamPlansAndRuns()
{
    // The experts_in_ram strategy on this Mixtral (fp32): the dense part of
    // a layer is 13,568 bytes (attention 12,288, router 1,024, norms 256),
    // its experts 8 x 24,576 = 196,608; embed_tokens and lm_head 8,192 each,
    // norm 128, rotary_emb 32. GPU 0 = 250,000 keeps room for one layer's
    // experts copied there as routed (196,608): every dense part fits
    // (43,680 <= 53,392), a layer's experts after them do not: both layers'
    // experts go to RAM.
    const std::string d = writeCheckpoint(m_tmp.path());
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    PlanOptions po;
    po.strategy = Strategy::ExpertsInRam;
    po.maxMemory = Budgets{{Device::gpu(0), 250'000}, {Device::cpu(), 1'000'000}};
    const Plan plan = planDeviceMap(tree, po);
    std::string text;
    for (const auto& [k, dev] : plan.deviceMap)
        text += (text.empty() ? "" : ", ") + k + ":" + dev.name();
    std::string expected = "model.embed_tokens:0";
    for (int i = 0; i < 2; ++i) {
        const std::string L = "model.layers." + std::to_string(i) + ".";
        expected += ", " + L + "self_attn:0, " + L + "mlp.gate:0, " + L + "mlp.experts:cpu, " + L +
                    "input_layernorm:0, " + L + "post_attention_layernorm:0";
    }
    expected += ", model.norm:0, model.rotary_emb:0, lm_head:0";
    QCOMPARE(QString::fromStdString(text), QString::fromStdString(expected));
    QVERIFY(validateDeviceMap(tree, plan.deviceMap).errors.empty()); // a map from_pretrained accepts

    // It runs: each decode step moves only the two routed experts of each
    // layer to the (simulated) GPU, 2 x 2 x 24,576 = 98,304 bytes, and the
    // logits are those of the model all in RAM.
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.simulateGpus = true;
    lo.policy = ExecutionPolicy::AccelerateLike;
    lo.deviceMap = plan.deviceMap;
    auto split = Model::load(ck, tree, lo);
    LoadOptions ram = lo;
    ram.deviceMap = {{"", Device::cpu()}};
    auto all = Model::load(ck, tree, ram);
    const std::vector<int32_t> prompt{3, 17, 5};
    auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
        if (a.size() != b.size())
            return false;
        for (size_t i = 0; i < a.size(); ++i)
            if (std::abs(a[i] - b[i]) > 1e-4f * std::max(1.0f, std::abs(b[i])))
                return false;
        return true;
    };
    QVERIFY(close(split->forward(prompt), all->forward(prompt)));
    Telemetry& t = split->telemetry();
    for (int32_t id : {9, 30, 41}) {
        const uint64_t h2d = t.h2dBytes();
        QVERIFY(close(split->forward({id}), all->forward({id})));
        QCOMPARE(t.h2dBytes() - h2d, uint64_t(2 * 2 * 24'576));
    }

    // Compute-where-it-lives multiplies the routed experts in RAM, where
    // they live (llama.cpp's -ot exps=CPU): the same logits, no expert byte
    // crosses to the GPU, and each step maps the two experts of each layer
    // in place (three tensors each: w1, w3, w2).
    lo.policy = ExecutionPolicy::ComputeWhereItLives;
    auto home = Model::load(ck, tree, lo);
    all->resetCache();
    QVERIFY(close(home->forward(prompt), all->forward(prompt)));
    Telemetry& th = home->telemetry();
    for (int32_t id : {9, 30, 41}) {
        const uint64_t h2d = th.h2dBytes(), cursor = th.eventCount();
        QVERIFY(close(home->forward({id}), all->forward({id})));
        QCOMPARE(th.h2dBytes() - h2d, uint64_t(0));
        int inPlace = 0;
        for (const TraceEvent& e : th.traceSince(cursor).items)
            if (e.kind == TraceKind::Map && e.tensor.find(".experts.") != std::string::npos && e.device == "cpu")
                ++inPlace;
        QCOMPARE(inPlace, 2 * 2 * 3);
    }
}

QTEST_APPLESS_MAIN(TestMoe)
#include "tst_moe.moc"
