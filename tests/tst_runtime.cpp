// Dispatch, offload store and hooks: the same logits whatever the map says,
// offload folders that interchange with Accelerate, cancel, faults.
#include "skip.h"
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/generate.h"
#include "stowage/kvcache.h"
#include "stowage/model.h"
#include "stowage/session.h"

#include <QtTest>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/resource.h>

using namespace stowage;
namespace fs = std::filesystem;

namespace {

Device dev(const char* s) { return *Device::parse(s); }

uint64_t rssAnonBytes()
{
    std::ifstream in("/proc/self/status");
    std::string key;
    while (in >> key) {
        if (key == "RssAnon:") {
            uint64_t kb = 0;
            in >> kb;
            return kb * 1024;
        }
        in.ignore(1 << 20, '\n');
    }
    return 0;
}

// Logits of a 5-token prompt and three decode steps through the KV cache.
std::vector<float> promptAndSteps(Model& m)
{
    std::vector<float> all = m.forward({5, 17, 3, 42, 8}, true);
    for (int32_t t : {11, 7, 60}) {
        auto step = m.forward({t});
        all.insert(all.end(), step.begin(), step.end());
    }
    return all;
}

std::vector<float> logitsFor(const std::string& dir, const LoadOptions& o, std::optional<DType> dt = std::nullopt)
{
    Checkpoint ck = Checkpoint::open(dir);
    ModuleTree tree = buildModuleTree(ck, dt);
    LoadOptions lo = o;
    lo.dtype = dt ? dt : tree.dtype();
    auto m = Model::load(ck, tree, lo);
    return promptAndSteps(*m);
}

// A GPT-2 of ~48 MB in fp32 (8000 x 64 vocabulary, 12 layers), stored in `dt`.
void writeGpt2Big(const std::string& d, DType dt)
{
    fs::create_directories(d);
    fixtures::Gpt2Shape s{8000, 64, 256, 12};
    fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::gpt2Tensors(s, dt), 3);
    nlohmann::json c = fixtures::gpt2Config(s, dt);
    c["n_head"] = 8;
    fixtures::writeJson(d + "/config.json", c);
}

bool bitIdentical(const std::vector<float>& a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool runPython(const QStringList& args, QByteArray* out = nullptr)
{
    QProcess p;
    p.start(QStringLiteral(STOWAGE_PYTHON), QStringList{QStringLiteral(STOWAGE_TEST_SCRIPTS "/accelerate_offload.py")} + args);
    p.waitForFinished(60000);
    if (out)
        *out = p.readAllStandardOutput() + p.readAllStandardError();
    return p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

bool pythonHasTorch()
{
    QProcess p;
    p.start(QStringLiteral(STOWAGE_PYTHON), {"-c", "import torch, numpy"});
    return p.waitForFinished(60000) && p.exitCode() == 0;
}

// A tiny fp32 GPT-2 of `layers` blocks written to `dir`, its blocks in RAM
// and the rest on simulated GPU 0, run with prefetch (the prefetcher tests).
struct BlocksInRam {
    Checkpoint ck;
    ModuleTree tree;
    LoadOptions options;
    uint64_t resident = 0; // what GPU 0 holds for good
    uint64_t layer = 0;    // one block

    BlocksInRam(const std::string& dir, int layers) : ck(written(dir, layers)), tree(buildModuleTree(ck, std::nullopt))
    {
        auto bytesOf = [&](const char* name) { return tree.modules()[size_t(tree.find(name))].bytes; };
        resident = bytesOf("transformer.wte") + bytesOf("transformer.wpe") + bytesOf("transformer.ln_f");
        layer = bytesOf("transformer.h.0");
        options.deviceMap = {{"transformer.wte", dev("0")}, {"transformer.wpe", dev("0")},
                             {"transformer.drop", dev("0")}, {"transformer.h", dev("cpu")},
                             {"transformer.ln_f", dev("0")}, {"lm_head", dev("0")}};
        options.simulateGpus = true;
        options.policy = ExecutionPolicy::Prefetch;
    }

private:
    static Checkpoint written(const std::string& dir, int layers)
    {
        fs::create_directories(dir);
        fixtures::writeTinyGpt2(dir, DType::F32, layers);
        return Checkpoint::open(dir);
    }
};

} // namespace

class TestRuntime : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_f32, m_bf16;
    std::string path(const std::string& n) const { return m_tmp.path().toStdString() + "/" + n; }
private slots:
    void initTestCase();
    void sameLogitsWhateverTheMap_data();
    void sameLogitsWhateverTheMap();
    void convertedDiskWeightsGoThroughTheOffloadFolder();
    void offloadFolderInterchangesWithAccelerate();
    void simulatedGpuBudgetIsEnforced();
    void contextRunsOutWherePredicted_data();
    void contextRunsOutWherePredicted();
    void cancelReleasesEverything();
    void fullDiskLeavesNoCompleteLookingFolder();
    void loadAddsNoMoreThanTheWeights();
    void fp16WeightsStayFp16OnTheCpu_data();
    void fp16WeightsStayFp16OnTheCpu();
    void telemetryRecordsTraffic();
    void generationIsReproducible();
    void baseModelSaveReadsDiskWeightsInPlace();
    void tiedHeadDoesNotPrefetchASecondCopy();
    void prefetchRunsAheadOnlyWithRoom();
    void settleWaitsForTheFetchUnderWay();
    void simulatedLinkCarriesEveryByte();
    void sessionLoadsTheCheckpointItIsGiven();
    void cacheHoldsPositionsPastItsFirstBlock_data();
    void cacheHoldsPositionsPastItsFirstBlock();
};

void TestRuntime::initTestCase()
{
    m_f32 = path("gpt2-f32");
    m_bf16 = path("gpt2-bf16");
    fs::create_directories(m_f32);
    fs::create_directories(m_bf16);
    fixtures::writeTinyGpt2(m_f32, DType::F32);
    fixtures::writeTinyGpt2(m_bf16, DType::BF16);
}

void TestRuntime::sameLogitsWhateverTheMap_data()
{
    QTest::addColumn<QString>("map");
    QTest::addColumn<bool>("simulate");
    QTest::addColumn<bool>("prefetch");
    for (bool prefetch : {false, true}) {
        const char* suffix = prefetch ? " +prefetch" : "";
        QTest::addRow("cpu+disk%s", suffix) << "transformer.wte=cpu transformer.wpe=disk transformer.drop=cpu "
                                               "transformer.h.0=disk transformer.h.1=cpu transformer.h.2=disk "
                                               "transformer.ln_f=disk lm_head=cpu"
                                            << false << prefetch;
        QTest::addRow("all disk%s", suffix) << "=disk" << false << prefetch;
        QTest::addRow("simulated 0+cpu+disk%s", suffix)
            << "transformer.wte=0 transformer.wpe=0 transformer.drop=0 transformer.h.0=0 transformer.h.1=cpu "
               "transformer.h.2=disk transformer.ln_f=cpu lm_head=0"
            << true << prefetch;
        QTest::addRow("simulated two GPUs%s", suffix)
            << "transformer.wte=0 transformer.wpe=0 transformer.drop=0 transformer.h.0=0 transformer.h.1=1 "
               "transformer.h.2=1 transformer.ln_f=1 lm_head=0"
            << true << prefetch;
    }
}

void TestRuntime::sameLogitsWhateverTheMap()
{
    QFETCH(QString, map);
    QFETCH(bool, simulate);
    QFETCH(bool, prefetch);
    LoadOptions base;
    const std::vector<float> reference = logitsFor(m_f32, base);
    QVERIFY(std::all_of(reference.begin(), reference.end(), [](float x) { return std::isfinite(x); }));
    LoadOptions o;
    o.deviceMap.clear();
    for (const QString& e : map.split(' ')) {
        auto kv = e.split('=');
        o.deviceMap.emplace_back(kv[0].toStdString(), dev(kv[1].toLatin1().constData()));
    }
    o.simulateGpus = simulate;
    o.policy = prefetch ? ExecutionPolicy::Prefetch : ExecutionPolicy::AccelerateLike;
    QVERIFY(bitIdentical(logitsFor(m_f32, o), reference));
}

void TestRuntime::convertedDiskWeightsGoThroughTheOffloadFolder()
{
    // bf16 weights computed in fp32 cannot be read in place: they are written once, then reused.
    LoadOptions cpu;
    const auto reference = logitsFor(m_bf16, cpu, DType::F32);
    LoadOptions o;
    o.deviceMap = {{"transformer.wte", dev("cpu")}, {"transformer.wpe", dev("cpu")}, {"transformer.drop", dev("cpu")},
                   {"transformer.h", dev("disk")}, {"transformer.ln_f", dev("cpu")}, {"lm_head", dev("cpu")}};
    QVERIFY_THROWS_EXCEPTION(InputError, logitsFor(m_bf16, o, DType::F32)); // no folder given
    o.offloadFolder = path("offload-bf16");
    QVERIFY(bitIdentical(logitsFor(m_bf16, o, DType::F32), reference));
    QVERIFY(fs::exists(o.offloadFolder + "/index.json"));
    QVERIFY(fs::exists(o.offloadFolder + "/transformer.h.0.attn.c_attn.weight.dat"));
    QVERIFY(!fs::exists(o.offloadFolder + "/transformer.wte.weight.dat"));
    auto stamp = fs::last_write_time(o.offloadFolder + "/transformer.h.1.mlp.c_fc.weight.dat");
    QVERIFY(bitIdentical(logitsFor(m_bf16, o, DType::F32), reference));
    QCOMPARE(fs::last_write_time(o.offloadFolder + "/transformer.h.1.mlp.c_fc.weight.dat"), stamp); // reused
}

void TestRuntime::offloadFolderInterchangesWithAccelerate()
{
    if (!pythonHasTorch())
        STOWAGE_SKIP_OR_FAIL(QStringLiteral("Debian's python3-torch and python3-numpy are needed for the Accelerate-format script"));
    // Ours, read back the way Accelerate's load_offloaded_weight reads it.
    LoadOptions o;
    o.deviceMap = {{"", dev("disk")}};
    o.offloadFolder = path("offload-ours");
    logitsFor(m_bf16, o, DType::F32);
    QByteArray out;
    QVERIFY2(runPython({"check", QString::fromStdString(m_bf16 + "/model.safetensors"),
                        QString::fromStdString(o.offloadFolder)},
                       &out),
             out.constData());
    // Accelerate's, written with numpy memmaps, used by us without rewriting.
    const std::string theirs = path("offload-theirs");
    QVERIFY2(runPython({"write", QString::fromStdString(m_bf16 + "/model.safetensors"), QString::fromStdString(theirs),
                        "float32"},
                       &out),
             out.constData());
    auto stamp = fs::last_write_time(theirs + "/index.json");
    o.offloadFolder = theirs;
    LoadOptions cpu;
    QVERIFY(bitIdentical(logitsFor(m_bf16, o, DType::F32), logitsFor(m_bf16, cpu, DType::F32)));
    QCOMPARE(fs::last_write_time(theirs + "/index.json"), stamp);
}

void TestRuntime::simulatedGpuBudgetIsEnforced()
{
    Checkpoint ck = Checkpoint::open(m_f32);
    ModuleTree tree = buildModuleTree(ck, std::nullopt);
    LoadOptions o;
    o.deviceMap = {{"transformer", dev("0")}, {"lm_head", dev("0")}};
    o.simulateGpus = true;
    o.gpuBudgets = {{dev("0"), 20000}};
    try {
        Model::load(ck, tree, o);
        QFAIL("no error");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("device 0: out of memory while placing transformer."), e.what());
    }
    // the failed load released everything: the same process loads again
    o.gpuBudgets = {{dev("0"), 10'000'000}};
    auto m = Model::load(ck, tree, o);
    QCOMPARE(m->forward({1, 2}).size(), size_t(97));
    QVERIFY(m->deviceDescriptions()[1].find("simulated") != std::string::npos);
}

void TestRuntime::contextRunsOutWherePredicted_data()
{
    QTest::addColumn<QString>("checkpoint"); // empty: the tiny Llama below
    QTest::addColumn<int>("fills");          // the prompt that fills the budget
    QTest::addColumn<int>("longest");        // the longest prompt tried (at most max_position_embeddings)
    QTest::newRow("llama, 1,000 tokens") << QString() << 1000 << 2000;
    // The bundled demo: 6 layers x 2 x 2 KV heads x 32 x 4 bytes = 3,072 a
    // position; 200 positions, buffers grown by blocks of 25.
    QTest::newRow("demo, 200 tokens") << QStringLiteral(STOWAGE_BUILD_DEMO_DIR) << 200 << 256;
}

void TestRuntime::contextRunsOutWherePredicted()
{
    // A model all on a simulated GPU whose budget the context sweep says a
    // prompt of `fills` tokens fills: the weights, the KV cache of its
    // positions and the activation room of its pass. Prompts of growing
    // length run until one fails: the first that does is within one KV
    // block (the buffers grow by an eighth of what they hold) of the
    // predicted fills + 1, says which device and why, and leaves the model
    // usable. The tiny Llama: vocab 100, hidden 64, 4 layers, 2 KV heads of
    // 16, fp32: 1,024 bytes of cache a position, blocks of 125 at 1,000.
    QFETCH(QString, checkpoint);
    QFETCH(int, fills);
    QFETCH(int, longest);
    std::string d = checkpoint.toStdString();
    if (d.empty()) {
        d = path("llama-context");
        fs::create_directories(d);
        const fixtures::LlamaShape s{100, 64, 128, 4, 4, 2, true};
        fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::llamaTensors(s, DType::F32), 3);
        nlohmann::json c = fixtures::llamaConfig(s, DType::F32);
        c["max_position_embeddings"] = 4096;
        fixtures::writeJson(d + "/config.json", c);
    }
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    const DeviceMap map{{"", dev("0")}};
    const uint64_t budget = deviceBytesAtContext(*ck.config(), tree, map, dev("0"), fills, 1, false);
    const ContextSweep sweep = sweepContext(*ck.config(), tree, map, {{dev("0"), double(budget)}}, 1, longest);
    QCOMPARE(sweep.devices[0].runsOutAt, std::optional<int64_t>(fills + 1));

    LoadOptions o;
    o.deviceMap = map;
    o.simulateGpus = true;
    o.gpuBudgets = {{dev("0"), double(budget)}};
    auto model = Model::load(ck, tree, o);
    const auto prompt = [](int n) {
        std::vector<int32_t> ids(static_cast<size_t>(n), 0);
        for (int i = 0; i < n; ++i)
            ids[size_t(i)] = int32_t(2 + i % 97);
        return ids;
    };
    const auto fits = [&](int n) {
        model->resetCache();
        try {
            model->forward(prompt(n));
            return true;
        } catch (const InputError& e) {
            const QString what = e.what();
            if (!what.startsWith("device 0: out of memory while placing") || !what.contains("at a context of " + QString::number(n)))
                qWarning("unexpected message: %s", e.what());
            return false;
        }
    };
    QVERIFY(fits(1));
    QVERIFY(!fits(longest));
    int lo = 1, hi = longest; // fits(lo), !fits(hi)
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    const int block = std::clamp(fills / 8, 16, 256);
    QVERIFY2(hi <= fills + 1 && hi >= fills + 1 - block, qPrintable(QString("first failing prompt: %1 tokens").arg(hi)));
    // The message names the device and what outgrew it.
    try {
        model->resetCache();
        model->forward(prompt(hi));
        QFAIL("no error");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).startsWith("device 0: out of memory while placing") &&
                     QString(e.what()).contains(QString("at a context of %1 tokens").arg(hi)),
                 e.what());
    }
    // Nothing lost: the same model answers a short prompt as before.
    model->resetCache();
    const std::vector<float> again = model->forward(prompt(8));
    auto fresh = Model::load(ck, tree, o);
    QCOMPARE(again, fresh->forward(prompt(8)));
}

void TestRuntime::cancelReleasesEverything()
{
    Checkpoint ck = Checkpoint::open(m_f32);
    ModuleTree tree = buildModuleTree(ck, std::nullopt);
    int calls = 0;
    const uint64_t before = rssAnonBytes();
    QVERIFY_THROWS_EXCEPTION(Cancelled, Model::load(ck, tree, LoadOptions{}, [&](double, const std::string&) {
                                 return ++calls < 5;
                             }));
    QCOMPARE(calls, 5);
    QVERIFY(rssAnonBytes() < before + 8'000'000);
    auto m = Model::load(ck, tree, LoadOptions{});
    QVERIFY(!m->forward({3}).empty());
}

void TestRuntime::fullDiskLeavesNoCompleteLookingFolder()
{
    // RLIMIT_FSIZE stands in for a full disk: writes past it fail with EFBIG.
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit old {};
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit small = old;
    small.rlim_cur = 2048;
    setrlimit(RLIMIT_FSIZE, &small);
    LoadOptions o;
    o.deviceMap = {{"", dev("disk")}};
    o.offloadFolder = path("offload-full");
    QString message;
    try {
        logitsFor(m_bf16, o, DType::F32);
    } catch (const InputError& e) {
        message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    QVERIFY2(message.contains("cannot write the offload file"), qPrintable(message));
    QVERIFY(!fs::exists(o.offloadFolder + "/index.json"));
    // with room again the same folder completes
    logitsFor(m_bf16, o, DType::F32);
    QVERIFY(fs::exists(o.offloadFolder + "/index.json"));
}

void TestRuntime::loadAddsNoMoreThanTheWeights()
{
    // ~48 MB of weights. In the checkpoint's dtype, all in RAM, they are used
    // in place from the memory-mapped file: anonymous (private) memory grows
    // by far less than the weights, loaded and after a forward pass. Converted
    // (bf16 -> fp32) they must be copied: it grows by the converted bytes once,
    // not twice.
    for (DType stored : {DType::F32, DType::BF16}) {
        const std::string d = path(stored == DType::F32 ? "gpt2-big" : "gpt2-big-bf16");
        writeGpt2Big(d, stored);
        Checkpoint ck = Checkpoint::open(d);
        ModuleTree tree = buildModuleTree(ck, DType::F32);
        const uint64_t weights = tree.root().bytes; // in fp32
        const uint64_t before = rssAnonBytes();
        LoadOptions o;
        o.dtype = DType::F32;
        auto m = Model::load(ck, tree, o);
        const uint64_t loaded = rssAnonBytes() - before;
        QVERIFY(!m->forward({1, 2, 3}).empty());
        const uint64_t ran = rssAnonBytes() - before;
        const QString what = QString("%1 checkpoint: anonymous memory grew %2 loading, %3 after a forward, for %4 "
                                     "bytes of fp32 weights")
                                 .arg(dtypeTorchName(stored))
                                 .arg(loaded)
                                 .arg(ran)
                                 .arg(weights);
        if (stored == DType::F32) {
            QVERIFY2(loaded < weights / 8 && ran < weights / 4, qPrintable(what));
        } else {
            QVERIFY2(loaded > weights / 2 && loaded < weights + weights / 10 + 4'000'000, qPrintable(what));
        }
    }
}

void TestRuntime::fp16WeightsStayFp16OnTheCpu_data()
{
    QTest::addColumn<QString>("family");
    QTest::newRow("gpt2 (Conv1D, LayerNorm, learned positions)") << "gpt2";
    QTest::newRow("llama (Linear, RMSNorm, rotary)") << "llama";
}

void TestRuntime::fp16WeightsStayFp16OnTheCpu()
{
    // An fp16 checkpoint on the CPU is computed from its fp16 weights, used in
    // place from the mapping (LibTorch 1.13 has no fp16 matmul on the CPU: the
    // kernels widen each weight to fp32 as they read it, activations are
    // fp32). Widening is exact, so the logits are those of the same weights
    // converted to fp32 at load, up to the order of fp32 sums and the keys and
    // values kept in fp16 (runner.h: rounded to 11 bits, 1.1-1.5e-4 of the
    // largest logit here; tst_reference checks them exactly, with the rounding
    // modelled); and anonymous memory does not grow by the weights (it grew
    // by twice their size when they were converted at load).
    QFETCH(QString, family);
    const std::string d = path("f16-" + family.toStdString());
    if (family == "gpt2") {
        writeGpt2Big(d, DType::F16);
    } else {
        fs::create_directories(d);
        const fixtures::LlamaShape s{8000, 256, 688, 4, 8, 4, false};
        fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::llamaTensors(s, DType::F16), 3, 0.05f);
        fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::F16));
    }
    const std::vector<float> widened = logitsFor(d, LoadOptions{}, DType::F32);

    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F16);
    const uint64_t weights = tree.root().bytes; // in fp16
    const uint64_t before = rssAnonBytes();
    LoadOptions o;
    o.dtype = DType::F16;
    auto m = Model::load(ck, tree, o);
    const uint64_t loaded = rssAnonBytes() - before;
    const std::vector<float> got = promptAndSteps(*m);
    QCOMPARE(got.size(), widened.size());
    float scale = 0, worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        QVERIFY2(std::isfinite(got[i]), "a logit is not finite");
        scale = std::max(scale, std::abs(widened[i]));
        worst = std::max(worst, std::abs(got[i] - widened[i]));
    }
    QVERIFY2(scale > 0 && worst <= 1e-3f * scale,
             qPrintable(QString("largest difference %1 for logits up to %2").arg(worst).arg(scale)));
    QVERIFY2(loaded < weights / 4, qPrintable(QString("anonymous memory grew %1 loading %2 bytes of fp16 weights")
                                                  .arg(loaded)
                                                  .arg(weights)));
}

void TestRuntime::telemetryRecordsTraffic()
{
    Checkpoint ck = Checkpoint::open(m_f32);
    ModuleTree tree = buildModuleTree(ck, std::nullopt);
    LoadOptions o;
    o.deviceMap = {{"transformer", dev("cpu")}, {"lm_head", dev("0")}};
    o.simulateGpus = true;
    o.policy = ExecutionPolicy::AccelerateLike; // no prefetch: what stays resident is deterministic
    auto m = Model::load(ck, tree, o);
    m->forward({1, 2, 3});
    Telemetry& t = m->telemetry();
    // the transformer's weights were copied to the execution device (GPU 0)
    QVERIFY(t.h2dBytes() >= tree.modules()[size_t(tree.find("transformer"))].bytes);
    QVERIFY(t.peak().at("0") > 0);
    // every fetched copy was released after its unit ran; what stays is the
    // KV cache of the three layers that computed there: 3 x keys and values
    // x 16 positions (the buffers' first block) x 16 x 4 bytes = 6,144
    QCOMPARE(t.resident().at("0"), uint64_t(6'144));
    bool fetched = false;
    for (const auto& e : t.trace())
        fetched = fetched || (e.kind == TraceKind::Fetch && e.tensor == "transformer.h.0.attn.c_attn.weight" &&
                              e.device == "0" && e.unit == "transformer.h.0" && e.step == -1);
    QVERIFY(fetched);
    t.sample();
    QVERIFY(!t.samples().empty());
}

void TestRuntime::generationIsReproducible()
{
    Checkpoint ck = Checkpoint::open(m_f32);
    ModuleTree tree = buildModuleTree(ck, std::nullopt);
    auto m = Model::load(ck, tree, LoadOptions{});
    SamplingOptions greedy;
    greedy.maxNewTokens = 12;
    auto a = generate(*m, {1, 2, 3}, greedy);
    auto b = generate(*m, {1, 2, 3}, greedy);
    QCOMPARE(a.tokens, b.tokens);
    QCOMPARE(a.tokens.size(), size_t(12));
    SamplingOptions s = greedy;
    s.greedy = false;
    s.temperature = 1.5f;
    s.topK = 20;
    s.topP = 0.9f;
    s.seed = 42;
    auto c = generate(*m, {1, 2, 3}, s), d = generate(*m, {1, 2, 3}, s);
    QCOMPARE(c.tokens, d.tokens);
    s.seed = 43;
    QVERIFY(generate(*m, {1, 2, 3}, s).tokens != c.tokens);
    // a stop id ends generation there
    SamplingOptions stop = greedy;
    stop.stopIds = {a.tokens[3]};
    auto e = generate(*m, {1, 2, 3}, stop);
    QVERIFY(e.tokens.size() <= 4 && e.tokens.back() == a.tokens[3]);
}

void TestRuntime::baseModelSaveReadsDiskWeightsInPlace()
{
    // distilgpt2 on the Hub is saved from GPT2Model: "h.0..." where the tree says
    // "transformer.h.0...". Its disk weights still need no offload folder.
    const std::string d = path("gpt2-base-save");
    fs::create_directories(d);
    fixtures::Gpt2Shape s{97, 32, 16, 2};
    fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::gpt2Tensors(s, DType::F32, ""), 4);
    nlohmann::json c = fixtures::gpt2Config(s, DType::F32);
    fixtures::writeJson(d + "/config.json", c);
    LoadOptions disk;
    disk.deviceMap = {{"", dev("disk")}};
    LoadOptions cpu;
    QVERIFY(bitIdentical(logitsFor(d, disk), logitsFor(d, cpu)));
}

void TestRuntime::tiedHeadDoesNotPrefetchASecondCopy()
{
    // A big vocabulary makes the tied embedding the largest weight by far. When
    // lm_head (the embedding's matrix) runs on GPU 0, prefetching the next
    // step's embedding unit would hold that matrix twice.
    const std::string d = path("gpt2-bigvocab");
    fs::create_directories(d);
    fixtures::Gpt2Shape s{2000, 32, 16, 1};
    fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::gpt2Tensors(s, DType::F32), 6);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config(s, DType::F32));
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, std::nullopt);
    const uint64_t wte = tree.modules()[size_t(tree.find("transformer.wte"))].bytes;
    LoadOptions o;
    o.deviceMap = {{"transformer", dev("cpu")}, {"lm_head", dev("0")}};
    o.simulateGpus = true;
    o.policy = ExecutionPolicy::Prefetch;
    auto m = Model::load(ck, tree, o);
    SamplingOptions so;
    so.maxNewTokens = 6;
    generate(*m, {1, 2, 3}, so);
    const uint64_t peak = m->telemetry().peak().at("0");
    QVERIFY2(peak >= wte && peak < 2 * wte, qPrintable(QString("peak %1, embedding %2").arg(peak).arg(wte)));
}

void TestRuntime::prefetchRunsAheadOnlyWithRoom()
{
    // The prefetcher fetches one offloaded unit ahead; more only on a GPU
    // whose room is known (weightstore.cpp roomAhead). Each unit pauses 50 ms
    // before it computes, so a prefetcher allowed to run ahead has fetched
    // all six layers while the embedding waits: the peak tells how far it went.
    const BlocksInRam g(path("gpt2-six"), 6);
    const Checkpoint& ck = g.ck;
    const ModuleTree& tree = g.tree;
    const uint64_t resident = g.resident, layer = g.layer;
    // Beside the weights GPU 0 holds, during the prompt's pass, its
    // activation room (kvcache.h: 3 tokens x max(4 x 16, 3 x 16) x 4 bytes
    // + 97 float logits = 1,156), and after it the six layers' KV caches
    // (6 x 2 x 16 positions x 16 x 4 = 12,288).
    const uint64_t act = 3 * 64 * 4 + 97 * 4, kv = 6 * 2 * 16 * 16 * 4;
    LoadOptions o = g.options;
    uint64_t afterwards = 0; // on GPU 0 once the generation is over: nothing stays fetched ahead
    auto peakWith = [&](const LoadOptions& lo, std::vector<float>* logits) {
        auto m = Model::load(ck, tree, lo);
        m->setUnitDelay(0.05);
        SamplingOptions so;
        so.maxNewTokens = 1; // the prompt's pass alone
        *logits = generate(*m, {1, 2, 3}, so, {}, /*keepLogits=*/true).logits.at(0);
        const auto peak = m->telemetry().peak();
        const auto now = m->telemetry().resident();
        afterwards = now.count("0") ? now.at("0") : resident;
        return peak.count("0") ? peak.at("0") : uint64_t(0);
    };
    std::vector<float> oneAhead, farAhead, cpu;
    const uint64_t noRoomKnown = peakWith(o, &oneAhead);
    QCOMPARE(afterwards, resident + kv);
    QVERIFY2(noRoomKnown >= resident + act + layer && noRoomKnown <= resident + act + 2 * layer,
             qPrintable(QString("peak %1: resident %2, a layer %3").arg(noRoomKnown).arg(resident).arg(layer)));
    o.gpuBudgets = {{dev("0"), uint64_t(4) << 30}}; // room: half of it, less 256 MiB, may go to units ahead
    const uint64_t withRoom = peakWith(o, &farAhead);
    QCOMPARE(afterwards, resident + kv);
    // all six layers ahead during the pass, or again for a next token once
    // the pass's caches are counted (and before its activation room is given back)
    QVERIFY2(withRoom == resident + act + 6 * layer || withRoom == resident + act + kv + 6 * layer,
             qPrintable(QString("peak %1: resident %2, a layer %3").arg(withRoom).arg(resident).arg(layer)));
    LoadOptions onCpu;
    onCpu.deviceMap = {{"", dev("cpu")}};
    peakWith(onCpu, &cpu);
    QVERIFY(bitIdentical(oneAhead, cpu));
    QVERIFY(bitIdentical(farAhead, cpu));
}

void TestRuntime::settleWaitsForTheFetchUnderWay()
{
    // Model::settle() (benchmarks: a quiet moment between passes) waits for
    // a prefetch under way and keeps what it fetched. The two layers sit in
    // RAM behind a simulated link slow enough that one layer's copy takes
    // 0.8 s; each unit pauses 0.2 s first. When lm_head is entered the
    // prefetcher starts copying the next pass's first layer; the pass ends
    // long before that copy does. After settle() the next pass finds that
    // layer ready (no wait for it in its trace); after idle() it is gone.
    const BlocksInRam g(path("gpt2-settle"), 2);
    LoadOptions o = g.options;
    o.simulatedPcieBytesPerSecond = double(g.layer) / 0.8;
    auto m = Model::load(g.ck, g.tree, o);
    m->setUnitDelay(0.2);
    m->resetCache();
    m->forward({1, 2, 3});
    m->settle();
    const size_t seen = m->telemetry().trace().size();
    m->setUnitDelay(0);
    m->forward({4});
    const auto trace = m->telemetry().trace();
    for (size_t i = seen; i < trace.size(); ++i)
        QVERIFY2(trace[i].kind != TraceKind::Wait || trace[i].unit != "transformer.h.0",
                 "the pass after settle() waited for the layer fetched before it");
    m->idle();
    const auto held = m->telemetry().resident();
    // the weights, and the two layers' KV caches (2 x 2 x 16 positions x 16 x 4 = 4,096)
    QCOMPARE(held.count("0") ? held.at("0") : uint64_t(0), g.resident + 4'096);
}


void TestRuntime::simulatedLinkCarriesEveryByte()
{
    // A simulated link sleeps once what its copies owe is worth a sleep
    // (WeightStore::crossSimulatedLink), not once per weight; every byte is
    // still carried at its rate. Sixteen blocks in RAM cross a link that
    // moves one block in 2.5 ms, each of its weights (a third of it at most)
    // in less than the slack (1 ms): a pass copies each block once, so it
    // lasts at least the link's time for them (40 ms), less the one slack the
    // link may still be owed. Only what the copies owe together makes the
    // link sleep at all; the pass computes in a few ms.
    // At 25 ms a block each weight owes more than the slack, so the link
    // sleeps once a weight and credits what each sleep overslept to the next
    // copy: never so much that the link outruns its rate (400 ms), less a
    // credit (one slack at most) a sleep before the pass may have left.
    const BlocksInRam g(path("gpt2-link"), 16);
    for (const double perBlock : {0.0025, 0.025}) {
        for (ExecutionPolicy policy : {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch}) {
            LoadOptions o = g.options;
            o.policy = policy;
            o.simulatedPcieBytesPerSecond = double(g.layer) / perBlock;
            auto m = Model::load(g.ck, g.tree, o);
            m->resetCache();
            const uint64_t before = m->telemetry().h2dBytes();
            QElapsedTimer t;
            t.start();
            m->forward({1, 2, 3});
            const double seconds = double(t.nsecsElapsed()) / 1e9;
            const uint64_t carried = m->telemetry().h2dBytes() - before;
            // (and the prefetcher may have begun the next pass's first block)
            QVERIFY2(carried >= 16 * g.layer && carried <= 17 * g.layer, qPrintable(QString::number(carried)));
            const double linkTime = double(16 * g.layer) / o.simulatedPcieBytesPerSecond; // 40 or 400 ms
            QVERIFY2(seconds >= linkTime - 2e-3 - 1e-4, qPrintable(QString("%1 s for %2 s of link").arg(seconds).arg(linkTime)));
        }
    }
}

// stowage-cli run and the worker open the checkpoint to check their options
// against it, then hand it to the session: the weights are mapped once, and
// the session loads what was checked even when the path changes in between.
void TestRuntime::sessionLoadsTheCheckpointItIsGiven()
{
    const std::string d = path("given"), moved = path("given-moved");
    fs::create_directories(d);
    fixtures::writeTinyGpt2(d, DType::F32);
    Checkpoint ck = Checkpoint::open(d);
    fs::rename(d, moved); // what the caller opened is no longer at its path
    SessionOptions so;
    so.path = d;
    QVERIFY_THROWS_EXCEPTION(InputError, Session::open(so)); // reopening the path cannot work now
    auto given = Session::open(std::move(ck), so);
    QCOMPARE(given->checkpoint().shards().size(), size_t(1));
    so.path = moved;
    auto reopened = Session::open(so);
    SamplingOptions sampling;
    sampling.maxNewTokens = 6;
    const std::vector<int32_t> prompt{5, 17, 3};
    const GenerationResult a = generate(given->model(), prompt, sampling, {}, true);
    const GenerationResult b = generate(reopened->model(), prompt, sampling, {}, true);
    QCOMPARE(a.tokens, b.tokens);
    QCOMPARE(a.logits, b.logits); // the same weights, bit for bit
}

void TestRuntime::cacheHoldsPositionsPastItsFirstBlock_data()
{
    QTest::addColumn<int>("expected");
    QTest::addRow("growing") << 0;
    // Sized for 300 positions at the first allocation, then growing past them.
    QTest::addRow("expected 300") << 300;
}

void TestRuntime::cacheHoldsPositionsPastItsFirstBlock()
{
    // The KV cache grows a block of positions at a time (common.cpp), many
    // times between 250 and 520 positions, or takes the positions the run
    // expects at once. Decode steps on both sides of a growth must give the
    // logits of the whole text run at once with an empty cache.
    // Grouped-query heads (4 over 2), fp32;
    // head_dim 16, so steps go through the engine's attention kernel where
    // the CPU has AVX2 (gemv.h attendOne) and the whole text through LibTorch's.
    QFETCH(int, expected);
    const std::string d = path("llama-long");
    fs::create_directories(d);
    const fixtures::LlamaShape s{500, 64, 128, 2, 4, 2, false};
    fixtures::writeRandomSafetensors(d + "/model.safetensors", fixtures::llamaTensors(s, DType::F32), 5, 0.3f);
    fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::F32));
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    auto stepped = Model::load(ck, tree, LoadOptions{});
    auto whole = Model::load(ck, tree, LoadOptions{});

    std::vector<int32_t> text;
    for (int i = 0; i < 250; ++i)
        text.push_back(int32_t((i * 37 + 11) % 500));
    stepped->resetCache(expected);
    stepped->forward(text);
    int compared = 0;
    for (int step = 0; step < 270; ++step) { // positions 250..519
        const int32_t next = int32_t((step * 53 + 7) % 500);
        text.push_back(next);
        const std::vector<float> got = stepped->forward({next});
        const int64_t position = int64_t(text.size()) - 1;
        if (step % 3 != 0)
            continue; // every third: after a growth and between
        whole->resetCache();
        const std::vector<float> want = whole->forward(text);
        QCOMPARE(got.size(), want.size());
        float scale = 0, worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            scale = std::max(scale, std::abs(want[i]));
            worst = std::max(worst, std::abs(got[i] - want[i]));
        }
        QVERIFY2(scale > 0 && worst <= 1e-4f * scale,
                 qPrintable(QString("position %1: largest difference %2 for logits up to %3").arg(position).arg(worst).arg(scale)));
        ++compared;
    }
    QCOMPARE(stepped->cachedTokens(), int(text.size()));
    QVERIFY(compared >= 20);
}

QTEST_APPLESS_MAIN(TestRuntime)
#include "tst_runtime.moc"
