// stowage-cli end to end: output contract and exit codes.
#include "fixtures.h"
#include "moefixtures.h"

#include <QtTest>

#include <filesystem>
#include <set>

using namespace stowage;
namespace fs = std::filesystem;

class TestCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_distil;

private slots:
    void initTestCase();
    void inspectJsonContract();
    void inspectHumanTree();
    void inspectShowsStoredExpertNames();
    void demoIsTheDefault();
    void badInputExitsTwoWithOneLine_data();
    void badInputExitsTwoWithOneLine();
    void planSeedJsonIsTransformersExact();
    void planWritesMapReportAndChecksUserMaps();
    void planIndexOnly70b();
    void malformedShardExitsTwo();
    void tokenizeRoundTrip();
    void tokenizeNeedsNoWeights();
    void tokenizeWithChatTemplate();
    void configClaimingTooManyLayersIsAnError();
    void hardwareProfiles();
};

void TestCli::initTestCase()
{
    m_distil = m_tmp.path().toStdString() + "/distilgpt2";
    fs::create_directories(m_distil);
    fixtures::writeSafetensorsFile(m_distil + "/model.safetensors", fixtures::gpt2Tensors({}, DType::F32, "", true),
                                   true);
    fixtures::writeJson(m_distil + "/config.json", fixtures::gpt2Config({}, DType::F32));
}
void TestCli::inspectJsonContract()
{
    auto r = fixtures::runCli({"inspect", QString::fromStdString(m_distil), "--dtype", "float16", "--json"});
    QCOMPARE(r.exitCode, 0);
    auto j = nlohmann::ordered_json::parse(r.out.toStdString());
    const auto keys = fixtures::keysOf(j);
    QCOMPARE(std::vector<std::string>(keys.begin(), keys.begin() + 6),
             (std::vector<std::string>{"model_type", "dtype", "total_bytes", "modules", "tied", "no_split"}));
    QCOMPARE(j["model_type"].get<std::string>(), std::string("gpt2"));
    QCOMPARE(j["reference"].get<std::string>(), std::string("transformers"));
    QCOMPARE(j["buffers"].size(), size_t(0)); // GPT-2 registers none in transformers 5.6
    QCOMPARE(j["dtype"].get<std::string>(), std::string("float16"));
    QCOMPARE(j["total_bytes"].get<uint64_t>(), uint64_t(163'825'152));
    bool found = false;
    for (const auto& m : j["modules"])
        if (m["name"] == "transformer.h.0") {
            QCOMPARE(m["bytes"].get<uint64_t>(), uint64_t(14'175'744));
            QCOMPARE(m["class"].get<std::string>(), std::string("GPT2Block"));
            QCOMPARE(m["params"].get<uint64_t>(), uint64_t(7'087'872));
            found = true;
        }
    QVERIFY(found);
    QCOMPARE(j["modules"][0]["name"].get<std::string>(), std::string(""));
    QCOMPARE(j["modules"][1]["name"].get<std::string>(), std::string("transformer"));
    QCOMPARE(j["tied"][0][0].get<std::string>(), std::string("lm_head.weight"));
    QCOMPARE(j["no_split"][0].get<std::string>(), std::string("GPT2Block"));
    // a GPT2Model save: every parameter is read without the "transformer." prefix
    QCOMPARE(j["stored_as"]["transformer.h.0.attn.c_attn.weight"].get<std::string>(),
             std::string("h.0.attn.c_attn.weight"));
    QVERIFY(!j["stored_as"].contains("lm_head.weight")); // tied: no tensor of its own
}
void TestCli::inspectHumanTree()
{
    auto r = fixtures::runCli({"inspect", QString::fromStdString(m_distil), "--dtype", "float16"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.contains("163,825,152 bytes"));
    QVERIFY(r.out.contains("GPT2Block"));
    QVERIFY(r.out.contains("8.65%")); // one block's share of the model
}
void TestCli::inspectShowsStoredExpertNames()
{
    // A Mixtral index as on the Hub: 5.6's fused parameters and the
    // per-expert tensors they are read from, both named.
    std::string d = m_tmp.path().toStdString() + "/mixtral";
    fs::create_directories(d);
    fixtures::MoeShape s;
    fixtures::writeSharded(d, fixtures::moeTensors(s, DType::BF16), 2, true, false);
    fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::BF16));
    auto r = fixtures::runCli({"inspect", QString::fromStdString(d), "--json"});
    QCOMPARE(r.exitCode, 0);
    auto j = nlohmann::ordered_json::parse(r.out.toStdString());
    QCOMPARE(j["model_type"].get<std::string>(), std::string("mixtral"));
    QVERIFY(j["missing"].empty());
    std::map<std::string, nlohmann::ordered_json> byParam;
    for (const auto& e : j["stored_names"])
        byParam[e["param"].get<std::string>()] = e;
    // Per layer: the router renamed, gate_up_proj from w1 and w3, down_proj from w2.
    QCOMPARE(byParam.size(), size_t(2 * 3));
    const auto& gu = byParam.at("model.layers.1.mlp.experts.gate_up_proj");
    QCOMPARE(gu["stored"].get<std::vector<std::string>>(),
             (std::vector<std::string>{"model.layers.1.block_sparse_moe.experts.*.w1.weight",
                                       "model.layers.1.block_sparse_moe.experts.*.w3.weight"}));
    QCOMPARE(gu["experts"].get<int>(), 4);
    QCOMPARE(byParam.at("model.layers.0.mlp.gate.weight")["stored"].get<std::vector<std::string>>(),
             std::vector<std::string>{"model.layers.0.block_sparse_moe.gate.weight"});
    bool fused = false;
    for (const auto& m : j["modules"])
        fused = fused || (m["name"] == "model.layers.0.mlp.experts" && m["class"] == "MixtralExperts" &&
                          m["params"].get<uint64_t>() == 4 * (48 * 16 + 16 * 24));
    QVERIFY(fused);
    auto human = fixtures::runCli({"inspect", QString::fromStdString(d)});
    QCOMPARE(human.exitCode, 0);
    QVERIFY2(human.out.contains("stored under other names (6"), human.out.constData());
}

void TestCli::demoIsTheDefault()
{
    auto r = fixtures::runCli({"inspect", "--json"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(nlohmann::json::parse(r.out.toStdString())["total_bytes"].get<uint64_t>() > 0);
}
void TestCli::badInputExitsTwoWithOneLine_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("missing path") << QStringList{"inspect", "/no/such/checkpoint"}
                                  << "/no/such/checkpoint: no such file or folder";
    QTest::newRow("bad dtype") << QStringList{"inspect", "--dtype", "float13"} << "--dtype 'float13' is not one of";
    QTest::newRow("unknown option") << QStringList{"inspect", "--frobnicate"} << "unknown option --frobnicate";
    QTest::newRow("unknown command") << QStringList{"explode"} << "unknown command 'explode'";
    QTest::newRow("unknown device") << QStringList{"plan", "--max-memory", "gpu0=1GB"} << "unknown device 'gpu0'";
    QTest::newRow("bad size") << QStringList{"plan", "--max-memory", "0=lots"} << "'lots' is not a valid size";
    QTest::newRow("negative") << QStringList{"plan", "--max-memory", "0=-1GB"} << "'-1GB' is negative";
    QTest::newRow("no equals") << QStringList{"plan", "--max-memory", "0"} << "expected DEV=SIZE";
    QTest::newRow("twice") << QStringList{"plan", "--max-memory", "0=1GB", "--max-memory", "0=2GB"}
                           << "device 0 is given twice";
    QTest::newRow("strategy") << QStringList{"plan", "--strategy", "fast"} << "expected auto, balanced";
    QTest::newRow("reference") << QStringList{"plan", "--reference", "torch"} << "expected transformers or accelerate";
    QTest::newRow("inspect reference") << QStringList{"inspect", "--reference", "hf"}
                                       << "--reference hf: expected transformers or accelerate";
    QTest::newRow("kv") << QStringList{"plan", "--kv-cache", "lots"} << "expected CONTEXT or CONTEXTxBATCH";
    QTest::newRow("preset") << QStringList{"plan", "--report", "/dev/null", "--hardware", "abacus"} << "abacus";
}
void TestCli::badInputExitsTwoWithOneLine()
{
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const QString problem = fixtures::badInputProblem(fixtures::runCli(args), message);
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}
void TestCli::planSeedJsonIsTransformersExact()
{
    auto r = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--dtype", "float16", "--max-memory",
                               "0=100MB", "--max-memory", "cpu=10GB", "--json"});
    QCOMPARE(r.exitCode, 0);
    QCOMPARE(r.out, QByteArray("{\n  \"transformer.wte\": 0,\n  \"lm_head\": 0,\n  \"transformer.wpe\": 0,\n"
                               "  \"transformer.drop\": 0,\n  \"transformer.ln_f\": \"cpu\",\n"
                               "  \"transformer.h\": \"cpu\"\n}\n"));
    auto all = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--dtype", "float16", "--max-memory",
                                 "0=50MB", "--max-memory", "cpu=10GB", "--json"});
    QCOMPARE(all.out, QByteArray("{\n  \"\": \"cpu\"\n}\n"));
    // GPT-2 has no buffers and its tensors are all float32 as stored, so a
    // direct Accelerate call gives the same seed maps.
    auto acc = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--dtype", "float16", "--max-memory",
                                 "0=100MB", "--max-memory", "cpu=10GB", "--reference", "accelerate", "--json"});
    QCOMPARE(acc.out, r.out);
}
void TestCli::planWritesMapReportAndChecksUserMaps()
{
    const QString dir = m_tmp.path();
    auto r = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--dtype", "float16", "--max-memory",
                               "0=100MB", "--max-memory", "cpu=10GB", "-o", dir + "/map.json", "--report",
                               dir + "/report.json", "--hardware", "rtx4090", "--explain"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains("after keeping 14,175,744 for the largest layer still to place (transformer.h.0)"),
             r.out.constData());
    QVERIFY2(r.out.contains("float16, transformers reference)"), r.out.constData());
    QVERIFY2(r.out.contains("reference: transformers 5.6"), r.out.constData());
    QFile f(dir + "/report.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    auto rep = nlohmann::ordered_json::parse(f.readAll().toStdString());
    QCOMPARE(rep["reference"].get<std::string>(), std::string("transformers"));
    QCOMPARE(rep["device_map"].size(), size_t(6));
    QCOMPARE(rep["entries"][1]["module"].get<std::string>(), std::string("lm_head"));
    QVERIFY(rep["entries"][1]["why"].get<std::string>().find("tied to transformer.wte") != std::string::npos);
    QCOMPARE(rep["cost"].size(), size_t(3));
    QVERIFY(rep["cost"][0]["tokens_per_second"].get<double>() > 0);
    QCOMPARE(rep["cost"][0]["devices"].size(), size_t(2));
    // the exported map checks clean against the model
    auto check = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--device-map", dir + "/map.json",
                                   "--explain"});
    QCOMPARE(check.exitCode, 0);
    // with budgets given, the map must fit them: a GPU they do not list is an error, a device over its budget a warning
    auto noGpu = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--dtype", "float16", "--device-map",
                                   dir + "/map.json", "--max-memory", "cpu=10GB"});
    QCOMPARE(noGpu.exitCode, 2);
    QVERIFY2(noGpu.err.contains("map.json: the map puts ") && noGpu.err.contains(" on GPU 0, which is not one of the devices (cpu)"),
             noGpu.err.constData());
    QCOMPARE(noGpu.err.count('\n'), 1);
    auto over = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--dtype", "float16", "--device-map",
                                  dir + "/map.json", "--max-memory", "0=10MB", "--max-memory", "cpu=10GB"});
    QCOMPARE(over.exitCode, 0);
    QVERIFY2(over.err.contains("warning: the map puts ") && over.err.contains(" on GPU 0, more than its budget of 9.54 MiB"),
             over.err.constData());
    fixtures::writeJson((dir + "/bad.json").toStdString(), {{"transformer", 0}});
    auto bad = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--device-map", dir + "/bad.json"});
    QCOMPARE(bad.exitCode, 2);
    QVERIFY2(bad.err.contains("bad.json: tensor 'lm_head.weight' is not covered"), bad.err.constData());
}
void TestCli::planIndexOnly70b()
{
    // Llama-3-70B-shaped index, nothing downloaded: two 40 GiB GPUs and 48 GiB of RAM.
    std::string d = m_tmp.path().toStdString() + "/llama70";
    fs::create_directories(d);
    fixtures::LlamaShape s{128256, 8192, 28672, 80, 64, 8, false};
    fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::BF16), 30, true, false);
    fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::BF16));
    auto r = fixtures::runCli({"plan", QString::fromStdString(d), "--max-memory", "0=40GiB", "--max-memory",
                               "1=40GiB", "--max-memory", "cpu=48GiB", "--json"});
    QCOMPARE(r.exitCode, 0);
    auto j = nlohmann::ordered_json::parse(r.out.toStdString());
    std::set<std::string> devices;
    for (auto it = j.begin(); it != j.end(); ++it)
        devices.insert(it.value().dump());
    QCOMPARE(devices, (std::set<std::string>{"0", "1", "\"cpu\"", "\"disk\""}));
    QCOMPARE(j.begin().key(), std::string("model.embed_tokens"));
    // the KV cache of 8192 tokens takes room: fewer layers stay on the GPUs
    auto kv = fixtures::runCli({"plan", QString::fromStdString(d), "--max-memory", "0=40GiB", "--max-memory",
                                "1=40GiB", "--max-memory", "cpu=48GiB", "--kv-cache", "8192x4", "--json"});
    QCOMPARE(kv.exitCode, 0);
    auto onGpu = [](const nlohmann::ordered_json& m) {
        int n = 0;
        for (auto it = m.begin(); it != m.end(); ++it)
            n += it.value().is_number() && it.key().rfind("model.layers.", 0) == 0;
        return n;
    };
    QVERIFY(onGpu(nlohmann::ordered_json::parse(kv.out.toStdString())) < onGpu(j));
}
void TestCli::malformedShardExitsTwo()
{
    std::string d = m_tmp.path().toStdString() + "/bad";
    fs::create_directories(d);
    fixtures::writeBytes(d + "/model.safetensors", QByteArray("\x05\0\0\0\0\0\0\0{\"a\":", 13));
    auto r = fixtures::runCli({"inspect", QString::fromStdString(d)});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("model.safetensors: safetensors header is not valid JSON"), r.err.constData());
}

void TestCli::tokenizeRoundTrip()
{
    // The demo's byte-level BPE: the ids the training tool's own tokenizer
    // (tools/train_demo/bpe.py) gives for this text, no BOS added here.
    auto enc = fixtures::runCli({"tokenize", "--text", "In the beginning", "--json"});
    QCOMPARE(enc.exitCode, 0);
    QCOMPARE(nlohmann::json::parse(enc.out.toStdString())["ids"].get<std::vector<int>>(),
             (std::vector<int>{1144, 260, 1797, 1240}));
    // Byte-level: any text comes back as it went in, words the corpus never had included.
    auto any = fixtures::runCli({"tokenize", "--text", "Hello, wörld!", "--json"});
    QCOMPARE(any.exitCode, 0);
    auto ids = nlohmann::json::parse(any.out.toStdString())["ids"];
    QVERIFY(!ids.empty());
    std::string list;
    for (const auto& id : ids)
        list += (list.empty() ? "" : ",") + std::to_string(id.get<int>());
    auto dec = fixtures::runCli({"tokenize", "--ids", QString::fromStdString(list), "--json"});
    QCOMPARE(dec.exitCode, 0);
    QCOMPARE(nlohmann::json::parse(dec.out.toStdString())["text"].get<std::string>(), std::string("Hello, wörld!"));
    auto both = fixtures::runCli({"tokenize", "--text", "a", "--ids", "1"});
    QCOMPARE(both.exitCode, 2);
    auto none = fixtures::runCli({"tokenize", QString::fromStdString(m_distil), "--text", "a"});
    QCOMPARE(none.exitCode, 2); // that checkpoint has no tokenizer files
}

void TestCli::tokenizeNeedsNoWeights()
{
    // What a user has before downloading: config.json and the tokenizer files.
    const std::string d = m_tmp.path().toStdString() + "/tokenizer-only";
    fs::create_directories(d);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({}, DType::F32));
    fs::copy_file(std::string(STOWAGE_TEST_SCRIPTS) + "/../tokenizer_data/tiny-bytelevel/tokenizer.json",
                  d + "/tokenizer.json", fs::copy_options::overwrite_existing);
    auto enc = fixtures::runCli({"tokenize", QString::fromStdString(d), "--text", "hello", "--json"});
    QVERIFY2(enc.exitCode == 0, enc.err.constData());
    const auto ids = nlohmann::json::parse(enc.out.toStdString())["ids"];
    QVERIFY(!ids.empty());
    std::string list;
    for (const auto& id : ids)
        list += (list.empty() ? "" : ",") + std::to_string(id.get<int>());
    auto dec = fixtures::runCli({"tokenize", QString::fromStdString(d), "--ids", QString::fromStdString(list), "--json"});
    QCOMPARE(dec.exitCode, 0);
    QCOMPARE(nlohmann::json::parse(dec.out.toStdString())["text"].get<std::string>(), std::string("hello"));
    // Planning does need the weights or their index, and says so.
    auto plan = fixtures::runCli({"plan", QString::fromStdString(d)});
    QCOMPARE(plan.exitCode, 2);
}

void TestCli::tokenizeWithChatTemplate()
{
    // --chat: the text as one user message through tokenizer_config.json's
    // chat_template, with the generation prompt, then encoded as --text is.
    const std::string d = m_tmp.path().toStdString() + "/chat-tokenizer";
    fs::create_directories(d);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({}, DType::F32));
    fs::copy_file(std::string(STOWAGE_TEST_SCRIPTS) + "/../tokenizer_data/tiny-bytelevel/tokenizer.json",
                  d + "/tokenizer.json", fs::copy_options::overwrite_existing);
    fixtures::writeJson(d + "/tokenizer_config.json",
                        {{"bos_token", "<s>"},
                         {"chat_template", "{{ bos_token }}{% for m in messages %}\n  <{{ m.role }}>{{ m.content | trim }}\n"
                                           "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"}});
    const QString dir = QString::fromStdString(d);
    auto chat = fixtures::runCli({"tokenize", dir, "--text", "  hello ", "--chat", "--json"});
    QVERIFY2(chat.exitCode == 0, chat.err.constData());
    const auto cj = nlohmann::json::parse(chat.out.toStdString());
    // By hand: trim_blocks drops the newline after {% for %}, lstrip_blocks does not touch "  <" (text, not a tag).
    const std::string rendered = "<s>  <user>hello\n<assistant>";
    QCOMPARE(cj["text"].get<std::string>(), rendered);
    auto plain = fixtures::runCli({"tokenize", dir, "--text", QString::fromStdString(rendered), "--json"});
    QCOMPARE(plain.exitCode, 0);
    QCOMPARE(cj["ids"], nlohmann::json::parse(plain.out.toStdString())["ids"]);
    // No template (the demo has none), or --chat with --ids: exit 2, saying why.
    const QString demo = QStringLiteral(STOWAGE_TEST_SCRIPTS "/../../resources/demo");
    auto none = fixtures::runCli({"tokenize", demo, "--text", "hi", "--chat"});
    QCOMPARE(none.exitCode, 2);
    QVERIFY2(none.err.contains("no chat template"), none.err.constData());
    auto ids = fixtures::runCli({"tokenize", dir, "--ids", "1", "--chat"});
    QCOMPARE(ids.exitCode, 2);
    QVERIFY2(ids.err.contains("--chat"), ids.err.constData());
    // A template the subset refuses names the file and the construct.
    fixtures::writeJson(d + "/tokenizer_config.json", {{"chat_template", "{% include 'other.jinja' %}"}});
    auto bad = fixtures::runCli({"tokenize", dir, "--text", "hi", "--chat"});
    QCOMPARE(bad.exitCode, 2);
    QVERIFY2(bad.err.contains("tokenizer_config.json") && bad.err.contains("include"), bad.err.constData());
}

void TestCli::configClaimingTooManyLayersIsAnError()
{
    // A config.json that disagrees with its shards: distilgpt2's 6 layers
    // under a config claiming 100,000 or 10^9 layers. The file holds
    // wte, wpe, 6 x 14 per layer (ln_1 w/b, attn.bias, attn.masked_bias,
    // c_attn w/b, c_proj w/b, ln_2 w/b, c_fc w/b, mlp c_proj w/b), ln_f w/b
    // = 2 + 84 + 2 = 88 tensors. Planning
    // that tree took minutes and gigabytes, or never ended; it is an input
    // error now, found before any tree is built.
    for (int64_t layers : {int64_t(100000), int64_t(1000000000)}) {
        const std::string d = m_tmp.path().toStdString() + "/layers-" + std::to_string(layers);
        fs::create_directories(d);
        fs::copy_file(m_distil + "/model.safetensors", d + "/model.safetensors", fs::copy_options::overwrite_existing);
        auto cfg = fixtures::gpt2Config({}, DType::F32);
        cfg["n_layer"] = layers;
        fixtures::writeJson(d + "/config.json", cfg);
        for (const char* cmd : {"plan", "inspect"}) {
            const QString problem = fixtures::badInputProblem(
                fixtures::runCli({cmd, QString::fromStdString(d)}),
                QString("n_layer is %1, but the weights hold only 88 tensors").arg(layers));
            QVERIFY2(problem.isEmpty(), qPrintable(problem));
        }
    }
}

void TestCli::hardwareProfiles()
{
    const QString f = m_tmp.path() + "/h100.json";
    auto w = fixtures::runCli({"hardware", "h100-80gb", "-o", f});
    QCOMPARE(w.exitCode, 0);
    auto r = fixtures::runCli({"plan", QString::fromStdString(m_distil), "--max-memory", "0=100MB", "--max-memory",
                               "cpu=10GB", "--explain", "--hardware", f});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains("predicted decode on NVIDIA H100") && r.out.contains("compute-where-it-lives"),
             r.out.constData());
    auto list = fixtures::runCli({"hardware", "--list"});
    QVERIFY(list.out.contains("rtx4090") && list.out.contains("this-machine"));
}

QTEST_APPLESS_MAIN(TestCli)
#include "tst_cli.moc"
