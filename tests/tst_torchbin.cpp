// parseTorchBin against files written by real torch.save() (Debian's
// python3-torch, via tests/scripts/make_bin.py), compared byte for byte with
// the tensors' own memory, plus hostile and broken files.
#include "skip.h"
#include "stowage/error.h"
#include "stowage/torchbin.h"
#include "stowage/mappedfile.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <vector>

using namespace stowage;

// Fixtures come from Python; without it (or without torch) those tests skip,
// and a script that fails for any other reason fails them.
#define NEED_FIXTURES()                                                                                                \
    do {                                                                                                               \
        if (!m_skip.isEmpty())                                                                                         \
            STOWAGE_SKIP_OR_FAIL(m_skip);                                                                                 \
        if (!m_failure.isEmpty())                                                                                      \
            QFAIL(qPrintable(m_failure));                                                                              \
    } while (0)

class TestTorchBin : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void dtypesAndShapes();
    void scalarTensor();
    void storageOffsetView();
    void exactBytes();
    void tiedWeights();
    void moduleStateDict();
    void rebuildTensorV3Float8();
    void zip64ExtraFields();
    void maliciousGlobalRefused();
    void maliciousStackGlobalRefused();
    void legacyFormatRefused();
    void truncatedFile();
    void everyTruncationRefused();
    void nonContiguousRefused();
    void compressedEntryRefused();
    void nestedStateDictRefused();
    void emptyAndGarbage();
    void damagedPicklesStayInBounds();
    void flippedBytesStayInBounds();

private:
    QString file(const QString& name) const { return m_dir.filePath(name); }
    QByteArray raw(const QString& name) const;
    static std::vector<TensorInfo> parse(const QByteArray& bytes, const QString& path);
    static QString errorOf(const QByteArray& bytes, const QString& path);
    static QByteArray contents(const QString& path);
    static const TensorInfo* find(const std::vector<TensorInfo>& ts, const char* name);
    static QList<qint64> shape(const TensorInfo& t) { return QList<qint64>(t.shape.begin(), t.shape.end()); }
    static QByteArray view(const MappedFile& m, const TensorInfo& t);
    void checkInBounds(const QByteArray& bytes);

    QTemporaryDir m_dir;
    QString m_skip;
    QString m_failure;
};

void TestTorchBin::initTestCase()
{
    QVERIFY(m_dir.isValid());
    const QString python = QStringLiteral(STOWAGE_PYTHON);
    if (!QFileInfo(python).isExecutable()) {
        m_skip = "no python3 at '" + python + "' to write torch.save fixtures";
        return;
    }
    QProcess p;
    p.start(python, {QStringLiteral(STOWAGE_TEST_SCRIPTS "/make_bin.py"), m_dir.path()});
    if (!p.waitForFinished(180000)) {
        m_failure = "make_bin.py did not finish: " + p.errorString();
        return;
    }
    const QString err = QString::fromUtf8(p.readAllStandardError());
    if (p.exitStatus() == QProcess::NormalExit && p.exitCode() == 3)
        m_skip = python + " cannot import torch (install python3-torch): " + err.trimmed();
    else if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
        m_failure = "make_bin.py failed: " + err;
}

QByteArray TestTorchBin::contents(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return f.readAll();
}

QByteArray TestTorchBin::raw(const QString& name) const { return contents(file(name)); }

std::vector<TensorInfo> TestTorchBin::parse(const QByteArray& bytes, const QString& path)
{
    return parseTorchBin(reinterpret_cast<const uint8_t*>(bytes.constData()), static_cast<uint64_t>(bytes.size()),
                         path.toStdString());
}

QString TestTorchBin::errorOf(const QByteArray& bytes, const QString& path)
{
    try {
        parse(bytes, path);
    } catch (const InputError& e) {
        return QString::fromStdString(e.what());
    }
    return QStringLiteral("(no error)");
}

const TensorInfo* TestTorchBin::find(const std::vector<TensorInfo>& ts, const char* name)
{
    for (const auto& t : ts)
        if (t.name == name)
            return &t;
    return nullptr;
}

QByteArray TestTorchBin::view(const MappedFile& m, const TensorInfo& t)
{
    if (t.offset > m.size() || t.nbytes > m.size() - t.offset)
        return QByteArray("(out of bounds)");
    return QByteArray(reinterpret_cast<const char*>(m.data() + t.offset), static_cast<qsizetype>(t.nbytes));
}

// Whatever a damaged file parses to, every view must stay inside the file.
void TestTorchBin::checkInBounds(const QByteArray& bytes)
{
    try {
        for (const auto& t : parse(bytes, "damaged.bin")) {
            QVERIFY(t.offset <= static_cast<uint64_t>(bytes.size()));
            QVERIFY(t.nbytes <= static_cast<uint64_t>(bytes.size()) - t.offset);
            QCOMPARE(t.nbytes, t.numel() * static_cast<uint64_t>(dtypeSize(t.dtype)));
        }
    } catch (const InputError&) {
    }
}

void TestTorchBin::dtypesAndShapes()
{
    NEED_FIXTURES();
    MappedFile m(file("basic.bin").toStdString());
    const auto ts = parseTorchBin(m.data(), m.size(), m.path());
    QCOMPARE(ts.size(), size_t(10));
    const struct {
        const char* name;
        const char* code;
        QList<qint64> shape;
    } expected[] = {
        {"f32", "F32", {2, 3}},  {"f16", "F16", {4, 5}},    {"bf16", "BF16", {3, 7}}, {"i64", "I64", {2, 2}},
        {"flags", "BOOL", {4}},  {"big", "F32", {10}},      {"view", "F32", {3}},     {"tail", "I64", {15}},
        {"param", "F32", {3}},
    };
    for (const auto& e : expected) {
        const TensorInfo* t = find(ts, e.name);
        QVERIFY2(t, e.name);
        QCOMPARE(QString(dtypeCode(t->dtype)), QString(e.code));
        QCOMPARE(shape(*t), e.shape);
        QCOMPARE(t->shard, -1);
    }
    QCOMPARE(QString::fromStdString(ts.front().name), QStringLiteral("f32")); // dict order
}

void TestTorchBin::scalarTensor()
{
    NEED_FIXTURES();
    MappedFile m(file("basic.bin").toStdString());
    const TensorInfo* t = nullptr;
    const auto ts = parseTorchBin(m.data(), m.size(), m.path());
    QVERIFY((t = find(ts, "scalar")));
    QVERIFY(t->shape.empty());
    QCOMPARE(t->numel(), uint64_t(1));
    QCOMPARE(t->nbytes, uint64_t(4));
    float v = 0;
    std::memcpy(&v, m.data() + t->offset, sizeof v);
    QCOMPARE(v, 3.5f);
}

void TestTorchBin::storageOffsetView()
{
    NEED_FIXTURES();
    MappedFile m(file("basic.bin").toStdString());
    const auto ts = parseTorchBin(m.data(), m.size(), m.path());
    const TensorInfo* big = find(ts, "big");
    const TensorInfo* v = find(ts, "view");
    const TensorInfo* tail = find(ts, "tail");
    QVERIFY(big && v && tail);
    QCOMPARE(v->offset, big->offset + 2 * sizeof(float)); // big[2:5] is saved as big's storage + offset 2
    QCOMPARE(v->nbytes, uint64_t(3 * sizeof(float)));
    QCOMPARE(view(m, *v), raw("basic/view.raw"));
    QCOMPARE(tail->nbytes, uint64_t(15 * 8));
    QCOMPARE(view(m, *tail), raw("basic/tail.raw")); // a view whose base tensor is not in the dict
}

void TestTorchBin::exactBytes()
{
    NEED_FIXTURES();
    MappedFile m(file("basic.bin").toStdString());
    for (const auto& t : parseTorchBin(m.data(), m.size(), m.path())) {
        const QByteArray expected = raw("basic/" + QString::fromStdString(t.name) + ".raw");
        QVERIFY2(!expected.isEmpty(), t.name.c_str());
        QCOMPARE(view(m, t), expected);
    }
}

void TestTorchBin::tiedWeights()
{
    NEED_FIXTURES();
    MappedFile m(file("tied.bin").toStdString());
    const auto ts = parseTorchBin(m.data(), m.size(), m.path());
    QCOMPARE(ts.size(), size_t(2));
    QCOMPARE(ts[0].offset, ts[1].offset);
    QCOMPARE(ts[0].nbytes, ts[1].nbytes);
    QCOMPARE(view(m, ts[1]), raw("tied/w.raw"));
}

void TestTorchBin::moduleStateDict()
{
    NEED_FIXTURES();
    MappedFile m(file("module.bin").toStdString());
    const auto ts = parseTorchBin(m.data(), m.size(), m.path());
    const QStringList names = QString::fromUtf8(raw("module/names.txt")).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(int(ts.size()), names.size()); // _metadata (set by BUILD) is not a tensor
    for (size_t i = 0; i < ts.size(); ++i) {
        const QString name = QString::fromStdString(ts[i].name);
        QCOMPARE(name, names[int(i)]);
        QCOMPARE(view(m, ts[i]), raw("module/" + QString(name).replace('.', '_') + ".raw"));
    }
    const TensorInfo* counter = find(ts, "1.num_batches_tracked");
    QVERIFY(counter);
    QCOMPARE(counter->dtype, DType::I64);
    QVERIFY(counter->shape.empty());
}

void TestTorchBin::rebuildTensorV3Float8()
{
    NEED_FIXTURES();
    MappedFile m(file("fp8_v3.bin").toStdString());
    const auto ts = parseTorchBin(m.data(), m.size(), m.path());
    QCOMPARE(ts.size(), size_t(1));
    QCOMPARE(ts[0].dtype, DType::F8_E4M3);
    QCOMPARE(shape(ts[0]), (QList<qint64>{3, 4}));
    QByteArray expected;
    for (char c = 4; c < 16; ++c) // storage holds bytes 0..15, the tensor starts at offset 4
        expected.append(c);
    QCOMPARE(view(m, ts[0]), expected);
}

void TestTorchBin::zip64ExtraFields()
{
    NEED_FIXTURES();
    MappedFile a(file("basic.bin").toStdString());
    MappedFile b(file("zip64.bin").toStdString());
    const auto ta = parseTorchBin(a.data(), a.size(), a.path());
    const auto tb = parseTorchBin(b.data(), b.size(), b.path());
    QCOMPARE(tb.size(), ta.size());
    for (size_t i = 0; i < ta.size(); ++i) {
        QCOMPARE(tb[i].name, ta[i].name);
        QCOMPARE(shape(tb[i]), shape(ta[i]));
        QCOMPARE(view(b, tb[i]), view(a, ta[i]));
    }
}

void TestTorchBin::maliciousGlobalRefused()
{
    NEED_FIXTURES();
    const QString path = file("malicious_system.bin");
    QCOMPARE(errorOf(contents(path), path),
             path + ": refuses pickle global 'os.system' (only tensors and plain containers are allowed)");
    QVERIFY2(!QFile::exists(file("PWNED")), "the payload ran");
}

void TestTorchBin::maliciousStackGlobalRefused()
{
    NEED_FIXTURES();
    const QString path = file("malicious_eval.bin");
    QCOMPARE(errorOf(contents(path), path),
             path + ": refuses pickle global 'builtins.eval' (only tensors and plain containers are allowed)");
    QVERIFY2(!QFile::exists(file("PWNED")), "the payload ran");
}

void TestTorchBin::legacyFormatRefused()
{
    NEED_FIXTURES();
    const QString path = file("legacy.bin");
    QCOMPARE(errorOf(contents(path), path),
             path + ": legacy (non-zip) torch.save format is not supported; convert it to safetensors");
}

void TestTorchBin::truncatedFile()
{
    NEED_FIXTURES();
    const QString path = file("truncated.bin");
    const QString error = errorOf(contents(path), path);
    QVERIFY2(error.startsWith(path + ": truncated zip archive"), qPrintable(error));
}

void TestTorchBin::everyTruncationRefused()
{
    NEED_FIXTURES();
    const QByteArray whole = contents(file("basic.bin"));
    for (qsizetype n = 0; n < whole.size(); ++n) {
        // A separate exact-size buffer, so a sanitizer sees any read past the end.
        const QByteArray prefix(whole.constData(), n);
        QVERIFY2(errorOf(prefix, "cut.bin") != "(no error)", qPrintable(QString::number(n)));
    }
}

void TestTorchBin::nonContiguousRefused()
{
    NEED_FIXTURES();
    const QString path = file("noncontig.bin");
    QCOMPARE(errorOf(contents(path), path),
             path + ": tensor 't' is not contiguous; convert the checkpoint to safetensors");
}

void TestTorchBin::compressedEntryRefused()
{
    NEED_FIXTURES();
    const QString path = file("deflated.bin");
    const QString error = errorOf(contents(path), path);
    QVERIFY2(error.contains("is compressed (method 8)"), qPrintable(error));
}

void TestTorchBin::nestedStateDictRefused()
{
    NEED_FIXTURES();
    const QString path = file("nested.bin");
    const QString error = errorOf(contents(path), path);
    QVERIFY2(error.contains("the tensors are nested under 'model'"), qPrintable(error));
}

void TestTorchBin::emptyAndGarbage()
{
    QCOMPARE(errorOf(QByteArray(), "e.bin"), QStringLiteral("e.bin: file is empty"));
    QByteArray junk(4096, '\0');
    QRandomGenerator rng(7);
    for (char& c : junk)
        c = char(rng.bounded(256));
    junk[0] = 'x'; // not the pickle magic
    QVERIFY(errorOf(junk, "j.bin").startsWith("j.bin: not a zip archive"));
    QVERIFY(errorOf("PK\x05\x06", "k.bin").startsWith("k.bin: not a zip archive"));
}

void TestTorchBin::damagedPicklesStayInBounds()
{
    NEED_FIXTURES();
    const QStringList files = QDir(file("fuzz")).entryList({"*.bin"}, QDir::Files);
    QVERIFY(files.size() >= 100);
    for (const QString& name : files) {
        checkInBounds(contents(file("fuzz/" + name)));
        if (QTest::currentTestFailed())
            QFAIL(qPrintable(name));
    }
    QVERIFY(!QFile::exists(file("PWNED")));
}

void TestTorchBin::flippedBytesStayInBounds()
{
    NEED_FIXTURES();
    const QByteArray whole = contents(file("module.bin"));
    QRandomGenerator rng(42);
    for (int i = 0; i < 3000; ++i) {
        QByteArray damaged = whole;
        for (int k = 0, n = 1 + int(rng.bounded(3)); k < n; ++k)
            damaged[qsizetype(rng.bounded(quint32(damaged.size())))] = char(rng.bounded(256));
        checkInBounds(damaged);
        if (QTest::currentTestFailed())
            QFAIL(qPrintable(QString::number(i)));
    }
}

QTEST_APPLESS_MAIN(TestTorchBin)
#include "tst_torchbin.moc"
