// The session (stowage/session.h) as the CLI and the worker use it: a tree
// and a map checked once, and the text of each token streamed by one
// decoder, a character split over tokens coming out whole.
#include "fixtures.h"
#include "stowage/error.h"
#include "stowage/safetensorswriter.h"
#include "stowage/session.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;

namespace {

// Token ids of the scripted model's tokenizer, their bytes (byte-level
// letters) and the embedding direction of each.
enum : int32_t { A, B, C, D, E, F }; // "a", E6 97, A5, E6, 9C AC, "b"
const char* const kTokens[] = {"a", "æĹ", "¥", "æ", "ľ¬", "b"};
// 日 is E6 97 A5 and 本 is E6 9C AC: after the prompt "bb", greedy decoding
// gives A B C D E, "a日本", the two characters split over tokens.
const int32_t kScript[] = {A, B, C, D, E};

// A one-layer GPT-2 whose blocks add nothing (zero weights), so the last
// position's hidden state is wte[token] + wpe[position]. Token i's
// embedding is unit vector i (tokens past F: zero); wpe[p] is three times
// the embedding of the token the script wants after position p. The tied
// head then scores that token highest, whatever token came before.
void writeScriptedGpt2(const std::string& dir)
{
    fs::create_directories(dir);
    const fixtures::Gpt2Shape s{97, 32, 16, 1};
    std::vector<TensorBlob> blobs;
    for (const auto& t : fixtures::gpt2Tensors(s, DType::F32)) {
        uint64_t n = 1;
        for (auto d : t.shape)
            n *= uint64_t(d);
        std::vector<float> v(n, 0.0f);
        if (t.name == "transformer.wte.weight")
            for (int32_t i = A; i <= F; ++i)
                v[size_t(i) * 16 + size_t(i)] = 1.0f;
        else if (t.name == "transformer.wpe.weight")
            for (size_t p = 0; p < std::size(kScript); ++p)
                v[(p + 1) * 16 + size_t(kScript[p])] = 3.0f; // the prompt's last position is 1
        else if (t.name == "transformer.ln_f.weight")
            std::fill(v.begin(), v.end(), 1.0f);
        TensorBlob b{t.name, t.dtype, t.shape, {}};
        b.bytes.resize(n * 4);
        std::memcpy(b.bytes.data(), v.data(), b.bytes.size());
        blobs.push_back(std::move(b));
    }
    writeSafetensors(dir + "/model.safetensors", blobs);
    nlohmann::json c = fixtures::gpt2Config(s, DType::F32);
    c["n_head"] = 4;
    fixtures::writeJson(dir + "/config.json", c);
    nlohmann::json vocab = nlohmann::json::object();
    for (int32_t i = A; i <= F; ++i)
        vocab[kTokens[i]] = i;
    const nlohmann::json byteLevel{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                   {"use_regex", true}};
    fixtures::writeJson(dir + "/tokenizer.json",
                        {{"version", "1.0"},
                         {"added_tokens", nlohmann::json::array()},
                         {"normalizer", nullptr},
                         {"pre_tokenizer", byteLevel},
                         {"post_processor", nullptr},
                         {"decoder", byteLevel},
                         {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}});
}

struct Streamed {
    std::vector<int32_t> ids;
    std::vector<std::string> texts;
    std::vector<double> times;
    std::function<void(const TokenPiece&)> sink()
    {
        return [this](const TokenPiece& p) {
            ids.push_back(p.id);
            texts.push_back(p.text);
            times.push_back(p.t);
        };
    }
};

const std::string kReplacement = "\xEF\xBF\xBD";

} // namespace

class TestSession : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void generateStreamsCharactersWhole();
    void stepsStreamTheSameText();
    void stepAfterGenerateContinuesTheText();
    void givenTreeAndMapAreCheckedOnce();

private:
    std::unique_ptr<Session> open() const;
    QTemporaryDir m_tmp;
    std::string m_dir;
    const std::vector<int32_t> m_prompt{F, F};
};

void TestSession::initTestCase()
{
    QVERIFY(m_tmp.isValid());
    m_dir = m_tmp.filePath("scripted").toStdString();
    writeScriptedGpt2(m_dir);
}

std::unique_ptr<Session> TestSession::open() const
{
    SessionOptions so;
    so.path = m_dir;
    so.deviceMap = DeviceMap{{"", Device::cpu()}};
    return Session::open(so);
}

void TestSession::generateStreamsCharactersWhole()
{
    auto s = open();
    QVERIFY(s->tokenizer());
    SamplingOptions o;
    o.maxNewTokens = 5;
    Streamed got;
    const double before = s->telemetry().now();
    const GenerationResult r = s->generate(m_prompt, o, got.sink());
    QCOMPARE(r.tokens, (std::vector<int32_t>{A, B, C, D, E}));
    QCOMPARE(got.ids, (std::vector<int32_t>{A, B, C, D, E})); // nothing held back at the end
    QCOMPARE(got.texts, (std::vector<std::string>{"a", "", "日", "", "本"}));
    // Each token's time on the telemetry clock, in order.
    for (size_t i = 0; i < got.times.size(); ++i) {
        QVERIFY(got.times[i] >= (i ? got.times[i - 1] : before));
        QVERIFY(got.times[i] <= s->telemetry().now());
    }
}

void TestSession::stepsStreamTheSameText()
{
    auto s = open();
    SamplingOptions o;
    Streamed got;
    s->step(m_prompt, o, 0, got.sink());
    for (int i = 0; i < 4; ++i)
        s->step(std::nullopt, o, 0, got.sink());
    QCOMPARE(got.ids, (std::vector<int32_t>{A, B, C, D, E}));
    QCOMPARE(got.texts, (std::vector<std::string>{"a", "", "日", "", "本"}));
    QVERIFY(got.times.front() > 0 && got.times.back() >= got.times.front());
    // A step with a prompt starts the text afresh.
    got = {};
    s->step(m_prompt, o, 0, got.sink());
    QCOMPARE(got.texts, (std::vector<std::string>{"a"}));
}

void TestSession::stepAfterGenerateContinuesTheText()
{
    auto s = open();
    SamplingOptions o;
    o.maxNewTokens = 4;
    Streamed got;
    s->generate(m_prompt, o, got.sink());
    // The E6 that starts 本 is still held back when generation ends: a last piece without a token.
    QCOMPARE(got.ids, (std::vector<int32_t>{A, B, C, D, -1}));
    QCOMPARE(got.texts, (std::vector<std::string>{"a", "", "日", "", kReplacement}));
    got = {};
    s->step(std::nullopt, o, 0, got.sink());
    QCOMPARE(got.ids, (std::vector<int32_t>{E}));
    QCOMPARE(got.texts, (std::vector<std::string>{"本"}));
}

void TestSession::givenTreeAndMapAreCheckedOnce()
{
    // Hand-counted: wte 97x16 + wpe 32x16 = 2064; the block: ln_1 32, c_attn
    // 16x48 + 48, c_proj 256 + 16, ln_2 32, c_fc 16x64 + 64, c_proj 64x16 + 16
    // = 3280; ln_f 32; 5376 float32 parameters, 21504 bytes (lm_head is tied).
    const Checkpoint ck = Checkpoint::open(m_dir);
    auto tree = std::make_shared<const ModuleTree>(buildModuleTree(ck, std::nullopt));
    SessionOptions so;
    so.path = m_dir;
    so.tree = tree;
    so.deviceMap = DeviceMap{{"", Device::cpu()}, {"transformer.h.7", Device::cpu()}};
    std::vector<std::string> warnings;
    so.onWarning = [&](const std::string& w) { warnings.push_back(w); };
    auto s = Session::open(so);
    QCOMPARE(&s->tree(), tree.get()); // the caller's tree, not one built again
    QCOMPARE(warnings.size(), size_t(1));
    QVERIFY2(warnings[0].find("'transformer.h.7'") != std::string::npos, warnings[0].c_str());
    const auto placed = s->placement();
    QCOMPARE(placed.size(), size_t(1));
    QCOMPARE(placed[0].device, std::string("cpu"));
    QCOMPARE(placed[0].plannedBytes, uint64_t(21504));
    s.reset();

    // A map that leaves the head out is refused, naming where it came from.
    so.deviceMap = DeviceMap{{"transformer", Device::cpu()}};
    so.deviceMapSource = "m.json";
    warnings.clear();
    try {
        Session::open(so);
        QFAIL("a map that leaves lm_head out was accepted");
    } catch (const InputError& e) {
        QCOMPARE(e.file(), std::string("m.json"));
        QVERIFY2(e.problem().find("tensor 'lm_head.weight' is not covered") != std::string::npos, e.what());
    }
    so.deviceMapSource = SessionOptions().deviceMapSource;
    try {
        Session::open(so);
        QFAIL("a map that leaves lm_head out was accepted");
    } catch (const InputError& e) {
        QCOMPARE(e.file(), std::string("device map")); // the worker's message, as before
    }
    QVERIFY(warnings.empty());
}

QTEST_GUILESS_MAIN(TestSession)
#include "tst_session.moc"
