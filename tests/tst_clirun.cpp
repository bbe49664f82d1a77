// stowage-cli run end to end (needs the LibTorch plugin): offloaded and
// simulated-GPU maps give the all-CPU tokens, the report, exit codes.
#include "fixtures.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;

class TestCliRun : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
private slots:
    void runOffloadedAndSimulatedGiveAllCpuTokens();
    void runReportsDevicesAndPeakBytes();
    void runReportsThePredictionPlanShows();
    void hardwareMeasuresFixedCostsOncePerMachine();
    void runBadInput_data();
    void runBadInput();
    void textPromptComesBackDecoded();
    void chatPromptGoesThroughTheTemplate();
};

namespace {
std::vector<int32_t> tokensOf(const fixtures::CliResult& r)
{
    auto j = nlohmann::json::parse(r.out.toStdString(), nullptr, false);
    return j.is_object() ? j["token_ids"].get<std::vector<int32_t>>() : std::vector<int32_t>{};
}
} // namespace

void TestCliRun::runOffloadedAndSimulatedGiveAllCpuTokens()
{
    const QString dir = m_tmp.path() + "/tiny";
    fs::create_directories(dir.toStdString());
    fixtures::writeTinyGpt2(dir.toStdString(), DType::BF16, 4, 9);
    const QStringList common{"run", dir, "--prompt-ids", "4,8,15,16,23,42", "--max-new-tokens", "24", "--ignore-eos",
                             "--dtype", "float32", "--json"};
    auto cpu = fixtures::runCli(common);
    QCOMPARE(cpu.exitCode, 0);
    const auto ref = tokensOf(cpu);
    QCOMPARE(ref.size(), size_t(24));
    // cpu budget smaller than the model: the rest is offloaded to disk (converted bf16 -> fp32 in the folder)
    auto off = fixtures::runCli(common + QStringList{"--max-memory", "cpu=20000", "--offload-folder", dir + "/off"});
    QCOMPARE(off.exitCode, 0);
    QCOMPARE(tokensOf(off), ref);
    QVERIFY(QFileInfo::exists(dir + "/off/index.json"));
    auto offMap = nlohmann::json::parse(off.out.toStdString())["device_map"];
    QVERIFY2(offMap.dump().find("disk") != std::string::npos, offMap.dump().c_str());
    // a simulated GPU, RAM and disk, with every policy
    for (const char* policy : {"accelerate-like", "prefetch", "compute-where-it-lives"}) {
        auto sim = fixtures::runCli(common + QStringList{"--max-memory", "0=60000", "--max-memory", "cpu=35000",
                                                         "--kv-cache", "32", "--offload-folder", dir + "/off",
                                                         "--simulate-gpus", "--policy", policy});
        QCOMPARE(sim.exitCode, 0);
        QCOMPARE(tokensOf(sim), ref);
        // What crossed the link: the GPU's own weights once, at dispatch,
        // and under every policy but compute-where-it-lives the RAM and disk
        // layers again for each step. Compute-where-it-lives multiplies
        // those where they live, the disk ones read in place from the
        // mapping (without a profile the CPU counts as the faster reader).
        const auto j = nlohmann::json::parse(sim.out.toStdString());
        uint64_t onGpu = 0;
        for (const auto& d : j["placement"])
            if (d["device"] == "0")
                onGpu = d["planned_bytes"].get<uint64_t>(); // the weights the plan put there
        const std::string map = j["device_map"].dump();
        for (const char* where : {"0", "\"cpu\"", "\"disk\""}) // a GPU, RAM and disk
            QVERIFY2(map.find(where) != std::string::npos, map.c_str());
        QVERIFY2(onGpu > 0, j.dump().c_str());
        const uint64_t h2d = j["traffic"]["host_to_device_bytes"].get<uint64_t>();
        if (std::string(policy) == "compute-where-it-lives")
            QCOMPARE(h2d, onGpu);
        else
            QVERIFY2(h2d > 10 * onGpu, j["traffic"].dump().c_str());
    }
}

void TestCliRun::runReportsDevicesAndPeakBytes()
{
    const QString dir = m_tmp.path() + "/tiny";
    // --kv-cache 16: room for the 7 positions' caches and a pass's activations
    // beside the weights, which the simulated GPU counts against its budget.
    auto r = fixtures::runCli({"run", dir, "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--max-memory",
                               "0=25000", "--max-memory", "cpu=20000", "--kv-cache", "16", "--offload-folder",
                               dir + "/off", "--simulate-gpus", "--json"});
    QCOMPARE(r.exitCode, 0);
    auto j = nlohmann::ordered_json::parse(r.out.toStdString());
    const auto keys = fixtures::keysOf(j);
    QCOMPARE(std::vector<std::string>(keys.begin(), keys.begin() + 6),
             (std::vector<std::string>{"prompt_ids", "token_ids", "text", "device_map", "timings", "peak_bytes"}));
    QVERIFY(j["peak_bytes"]["0"].get<uint64_t>() > 0);
    QVERIFY(j["peak_bytes"]["0"].get<uint64_t>() <= 25000);
    QVERIFY(j["peak_bytes"]["cpu"].get<uint64_t>() > 0);
    QVERIFY(j["timings"]["decode_tokens_per_s"].get<double>() > 0);
    QVERIFY(j["devices"].dump().find("simulated") != std::string::npos);
    QVERIFY(j["traffic"]["disk_read_bytes"].get<uint64_t>() > 0);
}

void TestCliRun::runReportsThePredictionPlanShows()
{
    // Beside what it measured, `run --json` says what `plan` predicts for the
    // same map, policy and hardware (a preset here: the same figures twice).
    const QString dir = m_tmp.path() + "/tiny";
    const QStringList budgets{"--max-memory", "0=25000", "--max-memory", "cpu=20000", "--kv-cache", "16",
                              "--hardware", "t4"};
    auto r = fixtures::runCli(QStringList{"run", dir, "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--offload-folder",
                                          dir + "/off", "--simulate-gpus", "--policy", "accelerate-like", "--json"} +
                              budgets);
    QCOMPARE(r.exitCode, 0);
    const auto j = nlohmann::ordered_json::parse(r.out.toStdString());
    const QString report = m_tmp.path() + "/report.json";
    auto p = fixtures::runCli(QStringList{"plan", dir, "--report", report} + budgets);
    QCOMPARE(p.exitCode, 0);
    QFile f(report);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto plan = nlohmann::ordered_json::parse(f.readAll().toStdString());
    QCOMPARE(j["prediction"]["policy"].get<std::string>(), std::string("accelerate-like"));
    QCOMPARE(plan["cost"][0]["policy"].get<std::string>(), std::string("accelerate-like"));
    QVERIFY(j["prediction"]["tokens_per_second"].get<double>() > 0);
    QCOMPARE(j["prediction"].dump(), plan["cost"][0].dump());
    // And where the weights went: planned and resident bytes per device.
    QCOMPARE(j["device_map"].dump(), plan["device_map"].dump());
    uint64_t planned = 0;
    for (const auto& d : j["placement"])
        planned += d["planned_bytes"].get<uint64_t>();
    uint64_t used = 0;
    for (const auto& d : plan["devices"])
        used += d["used"].get<uint64_t>();
    QCOMPARE(planned, used);
}

void TestCliRun::hardwareMeasuresFixedCostsOncePerMachine()
{
    // `stowage-cli hardware` times the fixed costs through the runtime and
    // keeps them for this CPU; a later profile of this machine (what `plan`
    // and the window use) carries them without timing again.
    QTemporaryDir cache;
    const QByteArray before = qgetenv("STOWAGE_CACHE_DIR");
    qputenv("STOWAGE_CACHE_DIR", cache.path().toUtf8());
    // A timing killed midway left its scratch folder (named by its pid): the
    // next one removes it, and leaves a live process's alone.
    QTemporaryDir scratch;
    QProcess gone;
    gone.start("true", {});
    QVERIFY(gone.waitForStarted());
    const qint64 deadPid = gone.processId();
    QVERIFY(gone.waitForFinished());
    const QString left = scratch.path() + QStringLiteral("/stowage-fixed-costs-%1-abcdef").arg(deadPid);
    const QString live = scratch.path() + QStringLiteral("/stowage-fixed-costs-%1-abcdef").arg(QCoreApplication::applicationPid());
    for (const QString& d : {left, live}) {
        QVERIFY(QDir().mkpath(d + "/llama-2-64"));
        fixtures::writeBytes((d + "/llama-2-64/model.safetensors").toStdString(), "x");
    }
    const QByteArray tmpBefore = qgetenv("TMPDIR");
    qputenv("TMPDIR", scratch.path().toUtf8());
    auto r = fixtures::runCli({"hardware"}, 600000); // hang guard only: about 15 s
    if (tmpBefore.isNull())
        qunsetenv("TMPDIR");
    else
        qputenv("TMPDIR", tmpBefore);
    QVERIFY(!QFileInfo::exists(left));
    QVERIFY(QFileInfo::exists(live + "/llama-2-64/model.safetensors"));
    QCOMPARE(QDir(scratch.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot), QStringList{QFileInfo(live).fileName()});
    auto again = fixtures::runCli({"hardware", "--no-fixed-costs", "--json"});
    auto kept = fixtures::runCli({"hardware", "this-machine", "--json"}); // a profile as `plan` makes it: no timing
    qputenv("STOWAGE_CACHE_DIR", before);
    QCOMPARE(r.exitCode, 0);
    QFile f(cache.path() + "/fixed-costs.json");
    QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(QString(r.err)));
    const auto saved = nlohmann::json::parse(f.readAll().toStdString());
    QCOMPARE(saved.size(), size_t(1));
    const auto& costs = saved.begin().value()["fixedCosts"];
    for (const char* policy : {"accelerate-like", "prefetch", "compute-where-it-lives"}) {
        QVERIFY2(costs.contains(policy), costs.dump().c_str());
        QVERIFY(QString(r.out).contains(QStringLiteral("fixed costs %1").arg(policy)));
        for (const char* k : {"perToken", "perUnit", "perDiskUnit"})
            QVERIFY(costs[policy][k].get<double>() >= 0);
        // A routed expert, timed on a mixture of experts of its own: a few
        // microseconds to a few milliseconds (written only when above zero).
        // A layer past the CPU's caches, timed on 154 and 308 MB models:
        // never below the cached figure, and not a tenth of a second.
        const double fromRam = costs[policy].value("perUnitFromRam", 0.0);
        QVERIFY2(fromRam >= costs[policy]["perUnit"].get<double>() && fromRam < 0.1, costs.dump().c_str());
        const double expert = costs[policy].value("perExpert", 0.0);
        QVERIFY2(expert >= 0 && expert < 0.01, costs.dump().c_str());
        // A decode step of a 10-layer model cannot be free: some of it is fixed.
        QVERIFY2(costs[policy]["perToken"].get<double>() + costs[policy]["perUnit"].get<double>() > 0,
                 costs.dump().c_str());
    }
    // Accelerate-like's copies of disk weights into new tensors, timed: a
    // memory copy, slower than nothing and not past a terabyte a second.
    const double copy = costs["accelerate-like"].value("copyBandwidth", 0.0);
    QVERIFY2(copy > 1e7 && copy < 1e12, costs.dump().c_str());
    QVERIFY(!costs["prefetch"].contains("copyBandwidth")); // it reads disk weights in place
    QVERIFY(QString(r.out).contains("disk weights copied at"));
    // Kept with the rates they were fitted to, measured in the same run.
    const auto& fitted = saved.begin().value()["fittedTo"];
    QVERIFY2(fitted["ramBandwidth"].get<double>() > 1e8, saved.dump().c_str());
    QVERIFY(fitted["cpuCacheBytes"].is_number_unsigned());
    // --no-fixed-costs: neither timed nor attached; every rate read now.
    QCOMPARE(again.exitCode, 0);
    const auto profile = nlohmann::json::parse(again.out.toStdString());
    QVERIFY2(!profile.contains("fixedCosts"), again.out.constData());
    QVERIFY(profile["sources"].get<std::string>().find("fixed costs") == std::string::npos);
    // A later profile of this machine pairs the costs with those rates.
    QCOMPARE(kept.exitCode, 0);
    const auto printed = nlohmann::json::parse(kept.out.toStdString());
    QCOMPARE(printed["fixedCosts"].dump(), costs.dump());
    QCOMPARE(printed["ramBandwidth"].get<double>(), fitted["ramBandwidth"].get<double>());
    QVERIFY(printed["sources"].get<std::string>().find("measured by `stowage-cli hardware` on") != std::string::npos);
}

void TestCliRun::runBadInput_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    const QString dir = m_tmp.path() + "/tiny";
    QTest::newRow("id out of vocab") << QStringList{"run", dir, "--prompt-ids", "5000"} << "outside the vocabulary";
    QTest::newRow("bad ids") << QStringList{"run", dir, "--prompt-ids", "1,x"} << "'x' is not a token id";
    QTest::newRow("policy") << QStringList{"run", dir, "--prompt-ids", "1", "--policy", "fast"} << "expected accelerate-like";
    // bf16 weights computed in fp32 must be converted into an offload folder
    QTest::newRow("disk without folder") << QStringList{"run", dir, "--prompt-ids", "1", "--max-memory", "cpu=1000",
                                                        "--dtype", "float32"}
                                         << "give an offload folder";
    QTest::newRow("over the GPU budget") << QStringList{"run", dir, "--prompt-ids", "1", "--device-map",
                                                        dir + "/gpu-map.json", "--simulate-gpus", "--max-memory",
                                                        "0=1000", "--max-memory", "cpu=1GB"}
                                         << "device 0: out of memory while";
    QTest::newRow("unknown family") << QStringList{"run", m_tmp.path() + "/unknownfam",
                                                   "--prompt-ids", "1"}
                                    << "cannot be run yet";
}

void TestCliRun::runBadInput()
{
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const std::string dir = m_tmp.path().toStdString() + "/tiny";
    fixtures::writeJson(dir + "/gpu-map.json", {{"", 0}});
    const std::string unknown = m_tmp.path().toStdString() + "/unknownfam";
    fs::create_directories(unknown);
    fixtures::writeSafetensorsFile(unknown + "/model.safetensors", {{"blocks.0.w", DType::F32, {2, 2}}}, false);
    fixtures::writeJson(unknown + "/config.json", {{"model_type", "mamba"}});
    const QString problem = fixtures::badInputProblem(fixtures::runCli(args), message);
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestCliRun::textPromptComesBackDecoded()
{
    // The demo: a Llama whose tokenizer_config.json says add_bos_token, so
    // <s> (id 0) comes first; the ids of "In the beginning" are what the
    // training tool's own BPE (tools/train_demo/bpe.py) gives for it.
    auto run = fixtures::runCli({"run", "--prompt", "In the beginning", "--max-new-tokens", "5", "--ignore-eos", "--json"});
    QCOMPARE(run.exitCode, 0);
    auto j = nlohmann::json::parse(run.out.toStdString());
    QCOMPARE(j["prompt_ids"].get<std::vector<int>>(), (std::vector<int>{0, 1144, 260, 1797, 1240}));
    QCOMPARE(j["token_ids"].size(), size_t(5));
    QVERIFY(j["text"].is_string());
    auto streamed = fixtures::runCli({"run", "--prompt", "In the beginning", "--max-new-tokens", "5", "--ignore-eos"});
    QCOMPARE(streamed.exitCode, 0);
    QVERIFY2(streamed.out.startsWith("In the beginning"), streamed.out.constData()); // BOS is special: not shown
    QVERIFY(streamed.out.trimmed().endsWith(QByteArray::fromStdString(j["text"].get<std::string>()).trimmed()));
}

void TestCliRun::chatPromptGoesThroughTheTemplate()
{
    // The demo with a chat template that writes BOS itself: --chat encodes
    // the rendering with no second BOS (apply_chat_template tokenizes with
    // add_special_tokens=False), though tokenizer_config.json says add_bos_token.
    const std::string dir = m_tmp.path().toStdString() + "/demo-chat";
    fixtures::writeDemoWithChatTemplate(dir, "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n"
                                             "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}");
    const QString d = QString::fromStdString(dir);
    auto run = fixtures::runCli({"run", d, "--prompt", "In the beginning", "--chat", "--max-new-tokens", "3",
                                 "--ignore-eos", "--json"});
    QVERIFY2(run.exitCode == 0, run.err.constData());
    const auto j = nlohmann::json::parse(run.out.toStdString());
    // By hand: "<s>[user] In the beginning\n[assistant]"; <s> is the demo's id 0, matched as a special token.
    auto tok = fixtures::runCli({"tokenize", d, "--text", "[user] In the beginning\n[assistant]", "--json"});
    QCOMPARE(tok.exitCode, 0);
    std::vector<int> expected{0};
    const auto tj = nlohmann::json::parse(tok.out.toStdString());
    for (const auto& id : tj["ids"])
        expected.push_back(id.get<int>());
    QVERIFY(expected.size() > 5);
    QCOMPARE(j["prompt_ids"].get<std::vector<int>>(), expected);
    QCOMPARE(j["token_ids"].size(), size_t(3));
    // Without a template, and with ids, --chat is refused.
    auto none = fixtures::runCli({"run", QStringLiteral(STOWAGE_TEST_SCRIPTS "/../../resources/demo"), "--prompt", "x",
                                  "--chat", "--max-new-tokens", "1"});
    QCOMPARE(none.exitCode, 2);
    QVERIFY2(none.err.contains("no chat template"), none.err.constData());
    auto ids = fixtures::runCli({"run", d, "--prompt-ids", "1", "--chat"});
    QCOMPARE(ids.exitCode, 2);
    QVERIFY2(ids.err.contains("--chat"), ids.err.constData());
}

QTEST_APPLESS_MAIN(TestCliRun)
#include "tst_clirun.moc"
