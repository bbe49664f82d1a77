// Module sizes and device maps against transformers 5.6's own planner run on
// its own model classes: tests/reference/hf56/hf56_plan.py called
// from_pretrained(device_map=..., max_memory=..., dtype=...) on each
// configs/NAME folder (config.json and index only, nothing downloaded) and
// wrote what compute_module_sizes and _get_device_map returned to
// configs/NAME/transformers-5.6.json. Stowage plans the same folders before
// download and must give the same sizes, no-split classes and maps, entry
// for entry and in the same order. Quantized releases are planned for each
// machine their quantizer tells apart (no GPU, and CUDA GPUs of compute
// capability 9.0, 8.9, 8.0 and 7.0): whether it dequantizes, the sizes that
// follow, and which maps its final check refuses.
#include "stowage/checkpoint.h"
#include "stowage/device.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"
#include "stowage/quantization.h"
#include "planfixtures.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

using namespace stowage;
namespace fs = std::filesystem;

namespace {

const fs::path kRoot = STOWAGE_HF56_DIR;

nlohmann::json readJson(const fs::path& p)
{
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}

// The machines hf56_plan.py's TARGETS emulate for the quantizers.
QuantTarget targetOf(const std::string& name)
{
    if (name == "cpu")
        return {};
    const std::map<std::string, double> capability{{"h100", 9.0}, {"rtx4090", 8.9}, {"a100", 8.0}, {"v100", 7.0}};
    return {true, capability.at(name)};
}

} // namespace

class TestHf56Plans : public QObject {
    Q_OBJECT
private slots:
    void everyFamilyIsCovered();
    void plansEqualTransformers_data();
    void plansEqualTransformers();
};

void TestHf56Plans::everyFamilyIsCovered()
{
    // The twelve model types of the README's table (gemma3 twice: its text
    // checkpoints and the multimodal ones; phi3 twice: Phi-3 and Phi-4-mini).
    std::set<std::string> types;
    for (const auto& e : fs::directory_iterator(kRoot / "configs")) {
        QVERIFY2(fs::exists(e.path() / "transformers-5.6.json"), e.path().c_str());
        types.insert(readJson(e.path() / "config.json").at("model_type").get<std::string>());
    }
    const std::set<std::string> want{"gpt2",    "llama",   "mistral", "qwen2",     "qwen3",   "opt",        "gemma3",
                                     "gemma3_text", "phi3", "mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3"};
    QCOMPARE(types, want);
}

void TestHf56Plans::plansEqualTransformers_data()
{
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("target");
    QTest::addColumn<QString>("dtype");
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(kRoot / "configs"))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
        const nlohmann::json ref = readJson(kRoot / "configs" / n / "transformers-5.6.json");
        for (const auto& [target, dtypes] : ref.at("targets").items())
            for (const auto& [d, unused] : dtypes.items())
                QTest::newRow((n + " " + target + " " + d).c_str())
                    << QString::fromStdString(n) << QString::fromStdString(target) << QString::fromStdString(d);
    }
}

void TestHf56Plans::plansEqualTransformers()
{
    QFETCH(QString, model);
    QFETCH(QString, target);
    QFETCH(QString, dtype);
    const fs::path folder = kRoot / "configs" / model.toStdString();
    const nlohmann::json ref = readJson(folder / "transformers-5.6.json");
    QCOMPARE(ref.at("generator").at("transformers").get<std::string>(), std::string("5.6.0"));
    const nlohmann::json& want = ref.at("targets").at(target.toStdString()).at(dtype.toStdString());
    const DType dt = *dtypeFromTorchName(dtype.toStdString());
    const QuantTarget machine = targetOf(target.toStdString());
    ModuleTree tree = buildModuleTree(Checkpoint::open(folder.string()), dt, Reference::Transformers);
    if (want.contains("error")) {
        // from_pretrained stops before it has a map on this machine: every
        // plan for it must say so, naming transformers' error.
        QVERIFY(tree.quantization());
        PlanOptions o;
        o.quantTarget = machine;
        o.maxMemory = Budgets{{*Device::parse("0"), 1e12}, {*Device::parse("cpu"), 1e12}};
        const Plan p = planDeviceMap(tree, o);
        const std::string error = want.at("error").get<std::string>();
        const std::string detail = error.substr(error.find(':') + 2);
        QVERIFY2(p.refusal.find(detail) != std::string::npos, p.refusal.c_str());
        return;
    }
    QCOMPARE(tree.quantization() != nullptr, want.contains("dequantized"));
    if (tree.quantization()) {
        const QuantDecision decision = quantDecision(*tree.quantization(), machine);
        QCOMPARE(!decision.applied, want.at("dequantized").get<bool>());
        tree.setQuantApplied(decision.applied);
    }

    // Sizes: every module transformers counts bytes under, and no other.
    QStringList wrong;
    std::set<std::string> counted;
    for (const auto& [name, bytes] : want.at("sizes").items()) {
        counted.insert(name);
        const int i = tree.find(name);
        if (i < 0)
            wrong << QString("%1: missing").arg(QString::fromStdString(name));
        else if (tree.modules()[size_t(i)].bytes != bytes.get<uint64_t>())
            wrong << QString("%1: %2, transformers %3")
                         .arg(QString::fromStdString(name))
                         .arg(tree.modules()[size_t(i)].bytes)
                         .arg(bytes.get<uint64_t>());
    }
    for (const Module& m : tree.modules())
        if (m.bytes > 0 && !counted.count(m.name))
            wrong << QString("%1: %2 bytes transformers does not count").arg(QString::fromStdString(m.name)).arg(m.bytes);
    QVERIFY2(wrong.isEmpty(), qPrintable(wrong.mid(0, 12).join("\n")));

    const auto noSplit = want.at("no_split").get<std::vector<std::string>>();
    QCOMPARE(std::set<std::string>(tree.noSplitClasses().begin(), tree.noSplitClasses().end()),
             std::set<std::string>(noSplit.begin(), noSplit.end()));

    // Maps: all four strategies over one to three GPUs, RAM and disk.
    for (const nlohmann::json& c : want.at("maps")) {
        PlanOptions o;
        o.strategy = *strategyFromName(c.at("strategy").get<std::string>());
        o.reference = Reference::Transformers;
        o.quantTarget = machine;
        Budgets b;
        for (const auto& [dev, bytes] : c.at("max_memory").items())
            b.push_back({*Device::parse(dev), bytes.get<double>()});
        o.maxMemory = b;
        const Plan p = planDeviceMap(tree, o);
        DeviceMap expected;
        for (const nlohmann::json& e : c.at("device_map"))
            expected.emplace_back(e[0].get<std::string>(),
                                  *Device::parse(e[1].is_number() ? std::to_string(e[1].get<int>())
                                                                  : e[1].get<std::string>()));
        if (p.refusal.empty() == c.contains("refused"))
            wrong << QString("%1 %2: stowage %3, transformers %4")
                         .arg(QString::fromStdString(c.at("budget").get<std::string>()),
                              QString::fromStdString(c.at("strategy").get<std::string>()),
                              QString::fromStdString(p.refusal.empty() ? "accepts" : "refuses: " + p.refusal),
                              QString::fromStdString(c.value("refused", std::string("accepts"))));
        if (p.deviceMap != expected)
            wrong << QString("%1 %2:\n  stowage      %3\n  transformers %4")
                         .arg(QString::fromStdString(c.at("budget").get<std::string>()),
                              QString::fromStdString(c.at("strategy").get<std::string>()),
                              QString::fromStdString(fixtures::mapText(p.deviceMap)),
                              QString::fromStdString(fixtures::mapText(expected)));
    }
    QVERIFY2(wrong.isEmpty(), qPrintable(QString("%1 of %2 maps differ\n").arg(wrong.size()).arg(want.at("maps").size()) +
                                         wrong.mid(0, 4).join("\n")));
}

QTEST_APPLESS_MAIN(TestHf56Plans)
#include "tst_hf56plans.moc"
