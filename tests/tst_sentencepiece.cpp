// Our tokenizer.model (SentencePiece) reader, which does not link
// libsentencepiece, against the real library: the committed tiny model,
// models trained here with its trainer, small models written by hand with
// the protobuf wire format, and malformed models with their error messages.
#include "tokenizertestdata.h"

#include "stowage/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

using namespace stowage;
using namespace tokenizertest;

namespace {

// Random valid UTF-8 made of pieces that stress SentencePiece: spaces and
// whitespace runs, NFKC-changed characters, combining marks, ▁ itself,
// control and user-defined pieces, characters outside any vocabulary.
std::vector<std::string> randomSpStrings(size_t count)
{
    static const char* parts[] = {"a", "e", "t", "the", "ing", "th", "er", "A", "Q", "z", "x", " ", " ", " ", "  ", "\t",
                                  "\n", "\r", "0", "1", "7", "42", ".", ",", "'", "-", "\xC3\xA9", "e\xCC\x81",
                                  "\xEF\xAC\x81", "\xEF\xBC\xA1", "\xE2\x91\xA0", "\xE6\x97\xA5", "\xE6\x9C\xAC",
                                  "\xE2\x96\x81", "\xF0\x9F\x98\x80", "\xE3\x80\x80", "\xC2\xA0", "\xE2\x80\x8B",
                                  "\x01", "\x7F", "\xCE\xA9", "\xC3\x9F", "\xC4\xB0", "<s>", "</s>", "<unk>", "<tool>",
                                  "<ctl>", "[sep]", "\xEF\xBF\xBD", "\xD7\xA9", "\xE0\xA4\xA8"};
    std::mt19937 rng(7);
    std::vector<std::string> out;
    for (size_t i = 0; i < count; ++i) {
        std::string s;
        for (size_t n = rng() % 24; n > 0; --n)
            s += parts[rng() % (sizeof parts / sizeof *parts)];
        out.push_back(s);
    }
    return out;
}

// What Tokenizer::encode gives for a tokenizer.model, by the real library:
// control and unknown pieces written in the text are split out first
// (leftmost, longest), the text between them is encoded by SentencePiece.
std::vector<int32_t> spReference(const sentencepiece::SentencePieceProcessor& sp, const std::string& text)
{
    std::vector<int32_t> out;
    auto encode = [&](const std::string& segment) {
        std::vector<int> v;
        if (!sp.Encode(segment, &v).ok())
            throw std::runtime_error("SentencePiece could not encode " + show(segment));
        out.insert(out.end(), v.begin(), v.end());
    };
    std::vector<int> specials;
    for (int i = 0; i < sp.GetPieceSize(); ++i)
        if (sp.IsControl(i) || sp.IsUnknown(i))
            specials.push_back(i);
    size_t start = 0;
    for (size_t pos = 0; pos < text.size();) {
        size_t best = 0;
        int id = -1;
        for (int i : specials) {
            const std::string& p = sp.IdToPiece(i);
            if (p.size() > best && text.compare(pos, p.size(), p) == 0) {
                best = p.size();
                id = i;
            }
        }
        if (best == 0) {
            ++pos;
            continue;
        }
        encode(text.substr(start, pos - start));
        out.push_back(id);
        start = pos += best;
    }
    encode(text.substr(start));
    return out;
}

// Trains a SentencePiece model with the real trainer into folder/tokenizer.model.
void trainSentencePiece(const std::string& folder, const std::string& corpus, const std::string& args)
{
    QDir().mkpath(QString::fromStdString(folder));
    auto status = sentencepiece::SentencePieceTrainer::Train("--input=" + corpus + " --model_prefix=" + folder +
                                                             "/m --minloglevel=2 --num_threads=2 " + args);
    if (!status.ok())
        throw std::runtime_error("SentencePiece training failed: " + status.ToString());
    QFile::remove(QString::fromStdString(folder + "/tokenizer.model"));
    QFile::rename(QString::fromStdString(folder + "/m.model"), QString::fromStdString(folder + "/tokenizer.model"));
}

// The protobuf wire format by hand, for the malformed and handmade models
// (pbField: the key, a varint length for wire type 2, the payload).
std::string pbVarint(uint64_t v)
{
    std::string s;
    for (; v >= 0x80; v >>= 7)
        s += static_cast<char>(0x80 | (v & 0x7F));
    return s + static_cast<char>(v);
}
std::string pbField(int field, int wire, const std::string& payload)
{
    return pbVarint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)) +
           (wire == 2 ? pbVarint(payload.size()) : "") + payload;
}
std::string pbPiece(const std::string& piece, int type, float score = 0)
{
    std::string f(4, '\0');
    std::memcpy(f.data(), &score, 4); // little-endian, as the wire format
    return pbField(1, 2, pbField(1, 2, piece) + pbField(2, 5, f) + pbField(3, 0, pbVarint(type)));
}

} // namespace

// Slots are declared here and defined below: moc misreads raw strings and brace lists in a class body.
class TestSentencePiece : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();

    void sentencePieceModel();
    void sentencePieceMatchesLibrary_data();
    void sentencePieceMatchesLibrary();
    void sentencePieceHandmadeModels_data();
    void sentencePieceHandmadeModels();
    void badSentencePieceModel();
    void malformedSentencePieceModel_data();
    void malformedSentencePieceModel();

private:
    QTemporaryDir m_tmp;
};

void TestSentencePiece::initTestCase() { QVERIFY(m_tmp.isValid()); }

void TestSentencePiece::sentencePieceModel()
{
    const std::string folder = kData + "/tiny-sentencepiece";
    auto t = Tokenizer::fromFolder(folder);
    sentencepiece::SentencePieceProcessor sp;
    QVERIFY(sp.Load(folder + "/tokenizer.model").ok());
    auto spIds = [&](const std::string& s) {
        std::vector<int> v;
        sp.Encode(s, &v);
        return std::vector<int32_t>(v.begin(), v.end());
    };
    for (const char* s : {"hello world", "the quick brown fox. café 123", "  two  spaces", "Ω unseen 日本語"})
        QCOMPARE(t->encode(s), spIds(s));
    std::vector<int32_t> withSpecial = {1};
    for (int32_t id : spIds("hello"))
        withSpecial.push_back(id);
    withSpecial.push_back(2);
    QCOMPARE(t->encode("<s>hello</s>"), withSpecial);
    for (const char* s : {"hello world", "the quick brown fox. café 123", "Ω unseen 日本語"}) {
        QCOMPARE(t->decode(t->encode(s)), std::string(s));
        QCOMPARE(streamed(*t, t->encode(s), false, nullptr), std::string(s));
    }
    QCOMPARE(t->decode(withSpecial, true), std::string("hello"));
    QCOMPARE(t->bosId(), std::optional<int32_t>(1));
    QCOMPARE(t->eosIds(), std::vector<int32_t>{2});
    QCOMPARE(t->vocabSize(), 400);
}

// Our tokenizer.model reader (no libsentencepiece) against the real library:
// the committed model and models trained here with SentencePiece's trainer,
// one for each model type and the options that change encoding.
void TestSentencePiece::sentencePieceMatchesLibrary_data()
{
    QTest::addColumn<QString>("args"); // training options; empty: the committed tiny model
    QTest::newRow("committed bpe, byte_fallback, identity") << QString();
    const QString common = "--hard_vocab_limit=false --user_defined_symbols=<tool>,[sep] --control_symbols=<ctl> ";
    QTest::newRow("unigram nmt_nfkc") << common + "--model_type=unigram --vocab_size=400";
    QTest::newRow("unigram byte_fallback identity, no whitespace removal")
        << common + "--model_type=unigram --vocab_size=700 --byte_fallback=true --normalization_rule_name=identity "
                    "--remove_extra_whitespaces=false --split_digits=true";
    QTest::newRow("unigram nfkc_cf, no dummy prefix, partial coverage")
        << common + "--model_type=unigram --vocab_size=300 --normalization_rule_name=nmt_nfkc_cf "
                    "--add_dummy_prefix=false --character_coverage=0.98";
    QTest::newRow("bpe nmt_nfkc, unknowns merged") << common + "--model_type=bpe --vocab_size=350 --character_coverage=0.98";
    QTest::newRow("bpe whitespace as suffix") << common + "--model_type=bpe --vocab_size=350 --treat_whitespace_as_suffix=true";
    QTest::newRow("word") << common + "--model_type=word --vocab_size=300";
    QTest::newRow("char") << common + "--model_type=char --vocab_size=120 --character_coverage=0.99";
}

void TestSentencePiece::sentencePieceMatchesLibrary()
{
    QFETCH(QString, args);
    std::string folder = kData + "/tiny-sentencepiece";
    if (!args.isEmpty()) {
        const std::string corpus = m_tmp.filePath("spm-corpus.txt").toStdString();
        if (!QFile::exists(QString::fromStdString(corpus))) {
            std::string text = englishLikeText(60000) + "\n";
            for (int k = 0; k < 3; ++k)
                for (const auto& h : hardStrings())
                    text += h + "\n";
            writeText(corpus, text);
        }
        folder = m_tmp.filePath("spm-" + QString::number(qHash(args))).toStdString();
        trainSentencePiece(folder, corpus, args.toStdString());
    }
    auto t = Tokenizer::fromFolder(folder);
    sentencepiece::SentencePieceProcessor sp;
    QVERIFY(sp.Load(folder + "/tokenizer.model").ok());
    QCOMPARE(t->vocabSize(), sp.GetPieceSize());
    for (int i = 0; i < sp.GetPieceSize(); ++i)
        QCOMPARE(t->idToToken(i), std::optional<std::string>(sp.IdToPiece(i)));
    QCOMPARE(t->bosId(), sp.bos_id() >= 0 ? std::optional<int32_t>(sp.bos_id()) : std::nullopt);
    QCOMPARE(t->eosIds(), sp.eos_id() >= 0 ? std::vector<int32_t>{sp.eos_id()} : std::vector<int32_t>{});

    std::vector<std::string> texts = hardStrings(), random = randomSpStrings(1500);
    const size_t hard = texts.size();
    texts.insert(texts.end(), random.begin(), random.end());
    texts.push_back(englishLikeText(20000));
    size_t equal = 0, hardEqual = 0;
    std::string failures;
    for (size_t i = 0; i < texts.size(); ++i) {
        auto got = t->encode(texts[i]), want = spReference(sp, texts[i]);
        if (got == want) {
            ++equal;
            hardEqual += i < hard;
        } else if (failures.size() < 2000) {
            failures += "\n  " + show(texts[i].substr(0, 200)) + ": got " + show(got) + " expected " + show(want);
        }
    }
    qInfo("%s: ids equal to SentencePiece's for %zu/%zu strings (hard_strings.json: %zu/%zu)",
          QTest::currentDataTag(), equal, texts.size(), hardEqual, hard);
    QVERIFY2(equal == texts.size(), failures.c_str());
}

// Small models written by hand for the rules trained models hardly reach:
// unigram's unknown penalty and user-defined bonus (positive scores too),
// BPE's frozen user-defined symbols, unused pieces split back, leftmost ties.
void TestSentencePiece::sentencePieceHandmadeModels_data()
{
    QTest::addColumn<QByteArray>("model");
    QTest::addColumn<QStringList>("texts");
    auto row = [](const char* name, int type, const std::string& pieces, const QStringList& texts) {
        // trainer_spec.model_type; normalizer_spec: identity, no dummy prefix
        std::string m = pieces + pbField(2, 2, pbField(3, 0, pbVarint(static_cast<uint64_t>(type)))) +
                        pbField(3, 2, pbField(1, 2, "identity") + pbField(3, 0, pbVarint(0)));
        QTest::newRow(name) << QByteArray(m.data(), static_cast<qsizetype>(m.size())) << texts;
    };
    const std::string unk = pbPiece("<unk>", 2);
    row("unigram unknown penalty, unused", 1,
        unk + pbPiece("ab", 1, 1) + pbPiece("a", 1, 7) + pbPiece("c", 1, 0.5f) + pbPiece("abc", 5, 100),
        {"ab", "aab", "abc", "cab", "b", "bb", "abab", "cbc", "a b"});
    row("unigram user-defined bonus", 1,
        unk + pbPiece("a", 1, -1) + pbPiece("b", 1, -1) + pbPiece("ab", 4) + pbPiece("c", 1, -0.01f) +
            pbPiece("d", 1, -0.01f) + pbPiece("cd", 4) + pbPiece("abcd", 1, -3),
        {"ab", "cd", "abcd", "aabb", "cdab", "dc"});
    row("unigram user-defined bonus, positive scores", 1,
        unk + pbPiece("a", 1, 1) + pbPiece("b", 1, -0.5f) + pbPiece("ab", 4), {"ab", "aab", "ba", "abab"});
    row("bpe frozen user-defined", 2,
        unk + pbPiece("<t>", 4) + pbPiece("x", 1, -1) + pbPiece("x<t>", 1, -0.5f) + pbPiece("<t>x", 1, -0.5f) + pbPiece("<", 1, -2) +
            pbPiece("t", 1, -2) + pbPiece(">", 1, -2) + pbPiece("<t", 1, -1) + pbPiece("xx", 1, -3),
        {"x<t>", "<t>x", "xx<t>x", "<t><t>", "<tt>", "<t", "x<t"});
    row("bpe unused split back", 2,
        unk + pbPiece("a", 1, -1) + pbPiece("b", 1, -1) + pbPiece("c", 1, -1) + pbPiece("ab", 5, -0.5f) +
            pbPiece("abc", 1, -0.1f) + pbPiece("bc", 1, -0.7f),
        {"abc", "ab", "abab", "cab", "abcab", "bcab"});
    row("bpe ties leftmost", 2, unk + pbPiece("a", 1, -1) + pbPiece("aa", 1, -0.5f) + pbPiece("aaa", 1, -0.5f),
        {"aa", "aaa", "aaaa", "aaaaa", "aaaaaaa"});
}

void TestSentencePiece::sentencePieceHandmadeModels()
{
    QFETCH(QByteArray, model);
    QFETCH(QStringList, texts);
    const std::string d = m_tmp.filePath(QString("handmade-") + QTest::currentDataTag()).toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(d)));
    writeText(d + "/tokenizer.model", model.toStdString());
    auto t = Tokenizer::fromFolder(d);
    sentencepiece::SentencePieceProcessor sp;
    QVERIFY(sp.LoadFromSerializedProto(model.toStdString()).ok());
    for (const QString& text : texts)
        QCOMPARE(t->encode(text.toStdString()), spReference(sp, text.toStdString()));
}

void TestSentencePiece::badSentencePieceModel()
{
    const std::string d = m_tmp.filePath("bad-spm").toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(d)));
    writeText(d + "/tokenizer.model", "definitely not a protobuf");
    QVERIFY2(errorOf(d).startsWith(QString::fromStdString(d + "/tokenizer.model: not a SentencePiece model")),
             qPrintable(errorOf(d)));
}

// Each malformed tokenizer.model gets its own reason, after
// "<file>: not a SentencePiece model: ".
void TestSentencePiece::malformedSentencePieceModel_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("reason");
    std::ifstream in(kData + "/tiny-sentencepiece/tokenizer.model", std::ios::binary);
    const std::string real((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string unk = pbPiece("<unk>", 2);
    auto row = [](const char* name, const std::string& bytes, const char* reason) {
        QTest::newRow(name) << QByteArray(bytes.data(), static_cast<qsizetype>(bytes.size())) << QString(reason);
    };
    row("truncated file", real.substr(0, 1000), "field 1 (pieces) of "); // checked further below
    row("truncated piece", "\x0a\x10\x0a\x03" "abc",
        "field 1 (pieces) of 16 bytes runs past the end (5 left) (ModelProto, byte 0)");
    row("truncated varint", "\x50\x80", "truncated varint (ModelProto, byte 0)");
    row("pieces as 32-bit", std::string("\x0d\0\0\0\0", 5),
        "field 1 (pieces) has wire type 5 (32-bit), expected 2 (length-delimited) (ModelProto, byte 0)");
    row("score as varint", unk + "\x0a\x02\x10\x01",
        "field 2 (score) has wire type 0 (varint), expected 5 (32-bit) (SentencePiece, byte 18)");
    row("invalid wire type", "\x0f", "invalid wire type 7 of field 1 (ModelProto, byte 0)");
    row("field number 0", std::string("\x02\x00", 2), "field number 0 (ModelProto, byte 0)");
    row("group not closed", "\x53\x08\x01", "group of field 10 not closed (ModelProto, byte 0)");
    row("stray end-group", "definitely not a protobuf",
        "end-group tag of field 12 without a start-group tag (ModelProto, byte 0)");
    row("empty", "", "it has no pieces");
    row("no unknown piece", pbPiece("a", 1), "it has no unknown piece");
    row("empty piece", unk + pbPiece("", 1), "piece 1 is empty");
    row("duplicate piece", unk + pbPiece("a", 1) + pbPiece("a", 4), "piece 2 'a' is already defined");
    row("byte piece without byte_fallback", unk + pbPiece("<0x41>", 6),
        "piece 1 is the byte piece '<0x41>' although byte_fallback is false");
    const std::string byteFallback = pbField(2, 2, pbField(35, 0, pbVarint(1)));
    row("bad byte piece", unk + pbPiece("<0x4g>", 6) + byteFallback, "piece 1 '<0x4g>' is not a valid byte piece");
    row("missing byte pieces", unk + pbPiece("<0x41>", 6) + byteFallback,
        "byte_fallback is true but there are not 256 byte pieces");
    row("broken charsmap", unk + pbPiece("a", 1) + pbField(3, 2, pbField(1, 2, "nmt_nfkc") + pbField(2, 2, std::string("\x09\0\0\0" "ab", 6))),
        "the precompiled_charsmap of normalizer 'nmt_nfkc' is broken (6 bytes, trie of 9)");
}

void TestSentencePiece::malformedSentencePieceModel()
{
    QFETCH(QByteArray, bytes);
    QFETCH(QString, reason);
    const std::string d = m_tmp.filePath("bad-spm-" + QString::number(qHash(reason))).toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(d)));
    writeText(d + "/tokenizer.model", bytes.toStdString());
    const QString prefix = QString::fromStdString(d + "/tokenizer.model: not a SentencePiece model: ");
    const QString e = errorOf(d);
    QVERIFY2(e.startsWith(prefix + reason), qPrintable(e));
    if (QByteArray(QTest::currentDataTag()) == "truncated file")
        QVERIFY2(e.contains(" bytes runs past the end (") && e.endsWith("(ModelProto, byte 997)"), qPrintable(e));
}

QTEST_GUILESS_MAIN(TestSentencePiece)
#include "tst_sentencepiece.moc"
