// gpt-oss's experts at run time: stored fused ([experts, in, out] under
// 5.6's names), they are still read one expert at a time, a slice of the
// stored tensor's bytes, and a decode step reads only the experts its router
// picked (as tst_moe measures for per-expert storage). An MXFP4 checkpoint
// keeps its experts as stored and moves them so; a GPTQ one is refused with
// its reason.
#include "fixtures.h"
#include "gptossfixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/model.h"
#include "stowage/quantization.h"

#include <QtTest>

using namespace stowage;

namespace {
// hidden 32, 4 heads of 8, 2 kv heads, 8 experts of width 32, top-2, 2 layers.
fixtures::GptOssShape shape()
{
    fixtures::GptOssShape s;
    s.vocab = 64;
    s.hidden = 32;
    s.intermediate = 32;
    s.layers = 2;
    s.heads = 4;
    s.kvHeads = 2;
    s.headDim = 8;
    s.experts = 8;
    s.topK = 2;
    s.window = 4;
    return s;
}
std::string writeCheckpoint(const QString& root, bool mxfp4 = false)
{
    const std::string d = root.toStdString() + (mxfp4 ? "/gptoss-mxfp4" : "/gptoss");
    if (!QFileInfo::exists(QString::fromStdString(d + "/config.json"))) {
        QDir().mkpath(QString::fromStdString(d));
        fixtures::GptOssShape s = shape();
        s.mxfp4 = mxfp4;
        fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::gptOssTensors(s, DType::F32), 5);
        fixtures::writeJson(d + "/config.json", fixtures::gptOssConfig(s, DType::F32));
    }
    return d;
}

// Bytes of one layer read per decoded token, fp32:
//   attention q 32x32 + 32, k and v 16x32 + 16 each, o 32x32 + 32, sinks 4:
//   3,172 values; two norms 64; router 8x32 + 8 = 264: 3,500 values, 14,000
//   bytes, always read;
//   one expert: gate_up_proj [32, 64] + its bias 64, down_proj [32, 32] +
//   its bias 32: 3,168 values, 12,672 bytes.
// Two experts a token: 14,000 + 2 x 12,672 = 39,344 bytes a layer; all eight
// would be 115,376.
constexpr uint64_t kRest = 14'000, kExpert = 12'672;

// Layer 0 on disk, everything else on a simulated GPU 0, accelerate-like
// (no prefetch: the traffic is deterministic): what the decode step after a
// three-token prompt reads from disk and sends to GPU 0.
std::pair<uint64_t, uint64_t> layer0FromDisk(const Checkpoint& ck, const ModuleTree& tree)
{
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.simulateGpus = true;
    lo.policy = ExecutionPolicy::AccelerateLike;
    lo.deviceMap = {{"model.embed_tokens", Device::gpu(0)}, {"model.layers.0", Device::disk()},
                    {"model.layers.1", Device::gpu(0)},     {"model.norm", Device::gpu(0)},
                    {"model.rotary_emb", Device::gpu(0)},   {"lm_head", Device::gpu(0)}};
    auto model = Model::load(ck, tree, lo);
    Telemetry& t = model->telemetry();
    model->forward({3, 17, 5});
    const uint64_t disk = t.diskReadBytes(), h2d = t.h2dBytes();
    model->forward({9});
    return {t.diskReadBytes() - disk, t.h2dBytes() - h2d};
}
} // namespace

class TestMoeGptOss : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
private slots:
    void decodeReadsOnlyRoutedExperts_data();
    void decodeReadsOnlyRoutedExperts();
    void expertsOnAnotherDevice();
    void mxfp4ExpertsStayQuantized();
    void planOnlyQuantizersAreRefused();
};

void TestMoeGptOss::decodeReadsOnlyRoutedExperts_data()
{
    QTest::addColumn<int>("policy");
    QTest::newRow("accelerate-like (copies)") << int(ExecutionPolicy::AccelerateLike);
    QTest::newRow("prefetch (mapped in place)") << int(ExecutionPolicy::Prefetch);
}

void TestMoeGptOss::decodeReadsOnlyRoutedExperts()
{
    QFETCH(int, policy);
    Checkpoint ck = Checkpoint::open(writeCheckpoint(m_tmp.path()));
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    QVERIFY(tree.missing().empty());
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.policy = ExecutionPolicy(policy);
    lo.deviceMap = {{"model.embed_tokens", Device::cpu()},
                    {"model.layers", Device::disk()},
                    {"model.norm", Device::cpu()},
                    {"model.rotary_emb", Device::cpu()},
                    {"lm_head", Device::cpu()}};
    auto model = Model::load(ck, tree, lo);
    Telemetry& t = model->telemetry();
    model->forward({3, 17, 5, 42, 8, 1});
    constexpr uint64_t kPerToken = 2 * (kRest + 2 * kExpert);
    constexpr int kSteps = 6;
    model->settle();
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
        QCOMPARE(read, kSteps * kPerToken);
    } else { // one layer's non-expert bytes may be prefetched across the window's edges
        QVERIFY2(read + kRest >= kSteps * kPerToken && read <= kSteps * kPerToken + kRest,
                 qPrintable(QString::number(read)));
    }
    // Per layer and token two experts, each four slices (gate_up_proj, its
    // bias, down_proj, its bias) of the fused tensors, never ahead of the router.
    int expertMoves = 0;
    for (const TraceEvent& e : t.traceSince(cursor).items) {
        if ((e.kind != TraceKind::Fetch && e.kind != TraceKind::Map && e.kind != TraceKind::Prefetch) ||
            e.tensor.find(".experts.") == std::string::npos)
            continue;
        QVERIFY2(e.kind != TraceKind::Prefetch, e.tensor.c_str());
        QVERIFY2(e.tensor.back() == ']', e.tensor.c_str()); // "...experts.down_proj[5]": one expert's slice
        ++expertMoves;
    }
    QCOMPARE(expertMoves, kSteps * 2 * 2 * 4);
}

void TestMoeGptOss::expertsOnAnotherDevice()
{
    // Layer 1 on a simulated GPU with its experts: nothing of it moves; layer
    // 0 on disk sends its 14,000 bytes and two experts' slices to GPU 0.
    Checkpoint ck = Checkpoint::open(writeCheckpoint(m_tmp.path()));
    const auto [disk, h2d] = layer0FromDisk(ck, buildModuleTree(ck, DType::F32));
    QCOMPARE(disk, kRest + 2 * kExpert);
    QCOMPARE(h2d, kRest + 2 * kExpert);
}

void TestMoeGptOss::mxfp4ExpertsStayQuantized()
{
    // OpenAI's own layout: the experts as MXFP4 blocks and scales (random
    // bytes here: the values are not checked, tst_reference runs a real
    // quantization against its reference). What one expert weighs stored:
    //   gate_up_proj_blocks [64, 1, 16] 1,024 + gate_up_proj_scales [64, 1] 64,
    //   down_proj_blocks [32, 1, 16] 512 + down_proj_scales [32, 1] 32,
    //   biases fp32 (64 + 32) x 4 = 384: 2,016 bytes (12,672 dequantized to fp32).
    constexpr uint64_t kStoredExpert = 2'016;
    const std::string d = writeCheckpoint(m_tmp.path(), true);
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32); // plans: the blocks are the experts' stored form
    QVERIFY(tree.missing().empty());
    QVERIFY(tree.unexpected().empty());
    QVERIFY(tree.quantization() && tree.quantization()->kind == Quantization::Kind::Mxfp4);
    {
        // All in RAM: the blocks stay as stored, dequantized per unit as it
        // runs. Held: embedding and head 64 x 32 x 4 = 8,192 each, the norm
        // 128, and per layer 14,000 + 8 experts x 2,016 = 30,128: 76,768
        // bytes (the experts dequantized would add 2 x 8 x 10,656).
        LoadOptions lo;
        lo.dtype = DType::F32;
        lo.deviceMap = {{"", Device::cpu()}};
        auto model = Model::load(ck, tree, lo);
        QCOMPARE(model->telemetry().resident().at("cpu"), uint64_t(76'768));
        model->forward({3, 17, 5});
    }
    // Layer 0 on disk computes on GPU 0: a decode step reads and sends its
    // 14,000 bytes and, per expert the router picks, its stored 2,016.
    const auto [disk, h2d] = layer0FromDisk(ck, tree);
    QCOMPARE(disk, kRest + 2 * kStoredExpert);
    QCOMPARE(h2d, kRest + 2 * kStoredExpert);
}

void TestMoeGptOss::planOnlyQuantizersAreRefused()
{
    // A GPTQ gpt-oss is planned (sized as the unquantized model: GPTQ does
    // not replace GptOssExperts) but not run: one error naming config.json
    // and saying so.
    const std::string d = m_tmp.path().toStdString() + "/gptoss-gptq";
    QDir().mkpath(QString::fromStdString(d));
    fixtures::GptOssShape s = shape();
    fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::gptOssTensors(s, DType::F32), 5);
    nlohmann::json c = fixtures::gptOssConfig(s, DType::F32);
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
    fixtures::writeJson(d + "/config.json", c);
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.deviceMap = {{"", Device::cpu()}};
    try {
        Model::load(ck, tree, lo);
        QFAIL("a GPTQ checkpoint was loaded");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("config.json") && QString(e.what()).contains("GPTQ") &&
                     QString(e.what()).contains("planned and inspected but not run"),
                 e.what());
    }
}

QTEST_APPLESS_MAIN(TestMoeGptOss)
#include "tst_moe_gptoss.moc"
