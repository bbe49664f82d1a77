// One test per header rule of the reference safetensors implementation; each
// asserts the specific error, so a rule silently dropped fails here.
#include "stowage/error.h"
#include "stowage/safetensors.h"
#include "stowage/safetensorswriter.h"

#include <QtTest>

#include <cstring>

using namespace stowage;

namespace {

std::vector<uint8_t> file(const std::string& json, size_t dataBytes, size_t padTo8 = true)
{
    std::string h = json;
    while (padTo8 && (8 + h.size()) % 8)
        h.push_back(' ');
    std::vector<uint8_t> out(8 + h.size() + dataBytes, 0);
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i)
        out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
    std::memcpy(out.data() + 8, h.data(), h.size());
    return out;
}

QString errorOf(const std::vector<uint8_t>& bytes)
{
    try {
        parseSafetensors(bytes.data(), bytes.size(), "x.safetensors");
    } catch (const InputError& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

// Kept out of the class body: moc misreads brace-initialised vectors there.
std::vector<TensorBlob> sampleBlobs()
{
    return {{"a", DType::F16, {2, 3}, std::vector<uint8_t>(12, 7)},
            {"b", DType::BF16, {4}, std::vector<uint8_t>(8, 9)},
            {"scalar", DType::F32, {}, std::vector<uint8_t>(4, 1)},
            {"empty", DType::I64, {0, 5}, {}}};
}

} // namespace

// Slots are declared here and defined below: moc misreads raw strings in a class body.
class TestSafetensors : public QObject {
    Q_OBJECT
private slots:
    void readsValidFileAsZeroCopyViews();
    void allKnownDtypes();
    void fileShorterThanEightBytes();
    void headerLargerThan100MB();
    void headerLengthPastEndOfFile();
    void headerNotStartingWithBrace();
    void headerNotJson();
    void headerNotAnObjectOfObjects();
    void metadataMustBeStringMap();
    void unknownDtype();
    void missingFields();
    void negativeShape();
    void offsetsReversed();
    void shapeTimesDtypeMustEqualByteLength();
    void elementCountOverflow();
    void gapBeforeFirstTensor();
    void overlappingTensors();
    void dataBeyondEndOfFile();
    void trailingBytesNotDescribed();
    void duplicateNames();
    void errorNamesTheFile();
};

void TestSafetensors::readsValidFileAsZeroCopyViews()
{
    std::vector<TensorBlob> ts = sampleBlobs();
    auto header = safetensorsHeader(ts, {{"format", "pt"}});
    std::vector<uint8_t> bytes = header;
    for (auto& t : ts)
        bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
    auto h = parseSafetensors(bytes.data(), bytes.size(), "x");
    QCOMPARE(h.tensors.size(), size_t(4));
    QCOMPARE(h.metadata.at("format"), std::string("pt"));
    QCOMPARE(h.tensors[0].name, std::string("a"));
    QCOMPARE(h.tensors[0].offset, uint64_t(header.size()));
    QCOMPARE(h.tensors[0].nbytes, uint64_t(12));
    QCOMPARE(bytes[h.tensors[1].offset], uint8_t(9));
    QCOMPARE(h.tensors[1].dtype, DType::BF16);
    QVERIFY(h.tensors[2].shape.empty());
    QCOMPARE(h.tensors[2].nbytes, uint64_t(4));
}
void TestSafetensors::allKnownDtypes()
{
    for (const char* code : {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3",
                             "F8_E5M2", "U16", "U32", "U64"}) {
        auto d = dtypeFromCode(code);
        QVERIFY2(d.has_value(), code);
        size_t n = size_t(dtypeSize(*d));
        auto bytes = file(std::string(R"({"t":{"dtype":")") + code + R"(","shape":[1],"data_offsets":[0,)" +
                              std::to_string(n) + "]}}",
                          n);
        QCOMPARE(errorOf(bytes), QString());
    }
}
void TestSafetensors::fileShorterThanEightBytes() { QVERIFY(errorOf({1, 2, 3}).contains("header too small")); }
void TestSafetensors::headerLargerThan100MB()
{
    std::vector<uint8_t> b(16, 0);
    uint64_t n = 100'000'001;
    std::memcpy(b.data(), &n, 8);
    QVERIFY(errorOf(b).contains("header too large"));
}
void TestSafetensors::headerLengthPastEndOfFile()
{
    auto b = file("{}", 0);
    b[0] += 50;
    QVERIFY(errorOf(b).contains("runs past the end of the file"));
}
void TestSafetensors::headerNotStartingWithBrace() { QVERIFY(errorOf(file(" {}", 0, false)).contains("does not start with '{'")); }
void TestSafetensors::headerNotJson() { QVERIFY(errorOf(file("{\"a\":", 0)).contains("not valid JSON")); }
void TestSafetensors::headerNotAnObjectOfObjects()
{
    QVERIFY(errorOf(file(R"({"t": 3})", 0)).contains("is not described by an object"));
}
void TestSafetensors::metadataMustBeStringMap()
{
    QVERIFY(errorOf(file(R"({"__metadata__": {"a": 1}})", 0)).contains("__metadata__ value for 'a' is not a string"));
    QVERIFY(errorOf(file(R"({"__metadata__": [1]})", 0)).contains("__metadata__ is not a string-to-string map"));
}
void TestSafetensors::unknownDtype()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1))
                .contains("unknown dtype 'F7'"));
}
void TestSafetensors::missingFields()
{
    QVERIFY(errorOf(file(R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4)).contains("has no dtype"));
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4)).contains("has no shape"));
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[1]}})", 4)).contains("has no data_offsets"));
}
void TestSafetensors::negativeShape()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4))
                .contains("not a non-negative integer"));
}
void TestSafetensors::offsetsReversed()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4))
                .contains("end before they begin"));
}
void TestSafetensors::shapeTimesDtypeMustEqualByteLength()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4))
                .contains("has 4 bytes but shape x dtype needs 8"));
}
void TestSafetensors::elementCountOverflow()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4))
                .contains("element count overflows"));
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})", 4))
                .contains("byte size overflows"));
}
void TestSafetensors::gapBeforeFirstTensor()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)).contains("(gap)"));
}
void TestSafetensors::overlappingTensors()
{
    QVERIFY(errorOf(file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8))
                .contains("(overlap)"));
}
void TestSafetensors::dataBeyondEndOfFile()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8))
                .contains("data is 8 bytes but the header describes 16"));
}
void TestSafetensors::trailingBytesNotDescribed()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12))
                .contains("data is 12 bytes but the header describes 4"));
}
void TestSafetensors::duplicateNames()
{
    QVERIFY(errorOf(file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8))
                .contains("names 't' twice"));
}
void TestSafetensors::errorNamesTheFile() { QVERIFY(errorOf({1}).startsWith("x.safetensors: ")); }

QTEST_APPLESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
