// Device maps as data: Accelerate's clean_device_map, size strings, the JSON
// transformers reads, checks of a given map, and the bytes a given map puts
// on each device. Split from tst_planner (placement), expectations by hand.
#include "fixtures.h"
#include "planfixtures.h"
#include "stowage/error.h"
#include "stowage/planner.h"

#include <QtTest>

#include <map>

using namespace stowage;
using fixtures::budgets;
using fixtures::distilgpt2;
using fixtures::mapText;

class TestDeviceMap : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string path(const char* n) { return m_tmp.path().toStdString() + "/" + n; }
private slots:
    void cleanDeviceMapVectors();
    void sizeStrings_data();
    void sizeStrings();
    void badSizeStrings();
    void jsonRoundTrip();
    void validation();
    void bytesOfAGivenMap();
};

void TestDeviceMap::cleanDeviceMapVectors()
{
    auto clean = [](DeviceMap m) {
        cleanDeviceMap(m);
        return QString::fromStdString(mapText(m));
    };
    auto d = [](const char* s) { return *Device::parse(s); };
    QCOMPARE(clean({{"a", d("0")}, {"b", d("0")}, {"c", d("0")}}), QString("'':0"));
    // Accelerate's own test compares these as unordered dicts; merged keys are
    // re-inserted, so in insertion order "c" comes first.
    QCOMPARE(clean({{"a.x", d("0")}, {"a.y", d("0")}, {"b.x", d("1")}, {"b.y", d("1")}, {"c", d("1")}}),
             QString("c:1, a:0, b:1"));
    QCOMPARE(clean({{"a.x.0", d("0")}, {"a.x.1", d("0")}, {"a.y", d("1")}, {"b", d("1")}}), QString("a.y:1, b:1, a.x:0"));
    QCOMPARE(clean({{"a.x", d("0")}}), QString("a.x:0"));
    // "h.1" must not swallow "h.10"
    QCOMPARE(clean({{"h.1.a", d("0")}, {"h.1.b", d("0")}, {"h.10", d("1")}}), QString("h.10:1, h.1:0"));
    // Found by fuzz_devicemap: a key starting with '.' recursed forever.
    QCOMPARE(clean({{".x", d("0")}, {"a", d("1")}}), QString(".x:0, a:1"));
    QCOMPARE(clean({{".x", d("0")}, {"a.y", d("1")}, {"a.z", d("1")}}), QString(".x:0, a:1"));
    QCOMPARE(clean({{".x", d("0")}, {"a", d("0")}}), QString("'':0"));
}

void TestDeviceMap::sizeStrings_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<qulonglong>("bytes");
    QTest::newRow("GB") << "10GB" << 10'000'000'000ull;
    QTest::newRow("GiB") << "10GiB" << 10'737'418'240ull;
    QTest::newRow("gib lower") << "1gib" << 1'073'741'824ull;
    QTest::newRow("Gb bits") << "1Gb" << 125'000'000ull;
    QTest::newRow("gb bits") << "1gb" << 125'000'000ull;
    QTest::newRow("gB bytes") << "1gB" << 1'000'000'000ull;
    QTest::newRow("MB") << "100MB" << 100'000'000ull;
    QTest::newRow("kb bits") << "5kb" << 625ull;
    QTest::newRow("decimal") << "1.5GB" << 1'500'000'000ull;
    QTest::newRow("exponent") << "1e3MB" << 1'000'000'000ull;
    QTest::newRow("plain bytes") << "123456" << 123456ull;
    QTest::newRow("zero") << "0MB" << 0ull;
}

void TestDeviceMap::sizeStrings()
{
    QFETCH(QString, text);
    QFETCH(qulonglong, bytes);
    QCOMPARE(qulonglong(parseSize(text.toStdString())), bytes);
}

void TestDeviceMap::badSizeStrings()
{
    for (const char* s : {"", "5B", "5TB", "5MBB", "5k0MB", "-1GB", "GB", "nanGB", "-5"}) {
        try {
            parseSize(s, "--max-memory 0");
            QFAIL(s);
        } catch (const InputError& e) {
            QVERIFY2(QString(e.what()).startsWith("--max-memory 0: "), e.what());
        }
    }
}

void TestDeviceMap::jsonRoundTrip()
{
    ModuleTree t = distilgpt2(path("distil"));
    PlanOptions o;
    o.strategy = Strategy::Sequential;
    o.maxMemory = budgets({{"0", 100e6}, {"cpu", 10e9}});
    Plan p = planDeviceMap(t, o);
    std::string json = deviceMapToJson(p.deviceMap);
    QCOMPARE(QString::fromStdString(json).simplified(),
             QString(R"({ "transformer.wte": 0, "lm_head": 0, "transformer.wpe": 0, "transformer.drop": 0, )"
                     R"("transformer.ln_f": "cpu", "transformer.h": "cpu" })"));
    QCOMPARE(deviceMapToJson(deviceMapFromJson(json, "m.json")), json);
    QVERIFY_THROWS_EXCEPTION(InputError, deviceMapFromJson(R"({"a": "gpu"})", "m.json"));
    QVERIFY_THROWS_EXCEPTION(InputError, deviceMapFromJson(R"([1])", "m.json"));
    QVERIFY_THROWS_EXCEPTION(InputError, deviceMapFromJson(R"({"a": -1})", "m.json"));
    // Found by fuzz_devicemap: "8888" was accepted, but its export (8888) was refused.
    QVERIFY_THROWS_EXCEPTION(InputError, deviceMapFromJson(R"({"a": "8888"})", "m.json"));
    QVERIFY_THROWS_EXCEPTION(InputError, deviceMapFromJson(R"({"a": 4096})", "m.json"));
    QCOMPARE(deviceMapToJson(deviceMapFromJson(R"({"a": "cuda:4095"})", "m.json"), -1), std::string(R"({"a":4095})"));
}

void TestDeviceMap::validation()
{
    ModuleTree t = distilgpt2(path("distil"));
    auto d = [](const char* s) { return *Device::parse(s); };
    QVERIFY(validateDeviceMap(t, {{"", d("cpu")}}).errors.empty());
    auto uncovered = validateDeviceMap(t, {{"transformer", d("0")}});
    QCOMPARE(uncovered.errors.size(), size_t(1));
    QVERIFY(QString::fromStdString(uncovered.errors[0]).contains("tensor 'lm_head.weight' is not covered"));
    QCOMPARE(uncovered.errorSubjects, std::vector<std::string>{"lm_head.weight"});
    auto split = validateDeviceMap(t, {{"transformer", d("0")}, {"lm_head", d("cpu")}});
    QVERIFY(!split.errors.empty() && QString::fromStdString(split.errors[0]).contains("different devices"));
    QCOMPARE(split.errorSubjects.size(), split.errors.size());
    auto unknown = validateDeviceMap(t, {{"", d("cpu")}, {"transformer.h.99", d("0")}});
    QVERIFY(unknown.errors.empty());
    QCOMPARE(unknown.warnings.size(), size_t(1));
    QCOMPARE(unknown.warningSubjects, std::vector<std::string>{"transformer.h.99"});
    QCOMPARE(deviceFor({{"transformer.h.1", d("0")}, {"", d("cpu")}}, "transformer.h.10.ln_1.weight")->name(),
             std::string("cpu"));
}

void TestDeviceMap::bytesOfAGivenMap()
{
    // embed.weight 10x4 f32 = 160; block.linear 4x4 f32 = 64 + bias 16, and
    // block's inv_freq buffer 2 f32 = 8; head.weight tied to embed (0); norm 4 f16 = 8.
    ModuleTree t;
    t.addModule(-1, "", "ModelForTest");
    t.addParam(t.addModule(0, "embed", "Embedding"), "weight", {10, 4}, DType::F32);
    const int block = t.addModule(0, "block", "Block");
    const int linear = t.addModule(block, "linear", "Linear");
    t.addParam(linear, "weight", {4, 4}, DType::F32);
    t.addParam(linear, "bias", {4}, DType::F32);
    t.addBuffer(block, "inv_freq", {2}, DType::F32, false);
    t.addParam(t.addModule(0, "head", "Linear"), "weight", {10, 4}, DType::F32);
    t.tie("head.weight", "embed.weight");
    t.addParam(t.addModule(0, "norm", "LayerNorm"), "weight", {4}, DType::F16);
    t.finish(std::nullopt);
    auto d = [](const char* s) { return *Device::parse(s); };
    // A parameter key beside its module's, and a key that names nothing (device 1 gets no bytes).
    const DeviceMap map{{"embed", d("0")}, {"head", d("0")}, {"block.linear.weight", d("cpu")},
                        {"block", d("cpu")}, {"norm", d("disk")}, {"extra", d("1")}};
    auto byName = [](const std::map<Device, uint64_t>& m) {
        std::map<std::string, uint64_t> out;
        for (const auto& [dev, bytes] : m)
            out[dev.name()] = bytes;
        return out;
    };
    using Sizes = std::map<std::string, uint64_t>;
    QCOMPARE(byName(bytesPerDevice(t, map)), (Sizes{{"0", 160}, {"cpu", 88}, {"disk", 8}}));
    QCOMPARE(byName(bytesPerDevice(t, map, /*buffers=*/false)), (Sizes{{"0", 160}, {"cpu", 80}, {"disk", 8}}));
    // Nothing is placed where the map does not reach.
    QCOMPARE(byName(bytesPerDevice(t, {{"block", d("0")}})), (Sizes{{"0", 88}}));

    const Plan p = planFromDeviceMap(t, map, "given in m.json");
    QCOMPARE(p.deviceMap, map);
    QCOMPARE(p.reference, Reference::Transformers);
    QCOMPARE(p.entries.size(), size_t(6));
    const uint64_t entryBytes[] = {160, 0, 64, 88, 8, 0};
    for (size_t i = 0; i < p.entries.size(); ++i) {
        QCOMPARE(p.entries[i].module, map[i].first);
        QCOMPARE(p.entries[i].device, map[i].second);
        QCOMPARE(p.entries[i].bytes, entryBytes[i]);
        QCOMPARE(p.entries[i].why, std::string("given in m.json"));
    }
    Sizes used;
    for (const DeviceTotal& total : p.devices) {
        QCOMPARE(total.budget, -1.0);
        QCOMPARE(total.reserved, uint64_t(0));
        used[total.device.name()] = total.used;
    }
    QCOMPARE(used, (Sizes{{"0", 160}, {"cpu", 88}, {"disk", 8}}));
    QVERIFY(p.budgets.empty() && p.notes.empty());
}

QTEST_APPLESS_MAIN(TestDeviceMap)
#include "tst_devicemap.moc"
