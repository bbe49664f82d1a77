// stowage-cli end to end: output contract and exit codes.
#include "fixtures.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;

class TestCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_distil;

private slots:
    void initTestCase()
    {
        m_distil = m_tmp.path().toStdString() + "/distilgpt2";
        fs::create_directories(m_distil);
        fixtures::writeSafetensorsFile(m_distil + "/model.safetensors", fixtures::gpt2Tensors({}, DType::F32, "", true),
                                       true);
        fixtures::writeJson(m_distil + "/config.json", fixtures::gpt2Config({}, DType::F32));
    }
    void inspectJsonContract()
    {
        auto r = fixtures::runCli({"inspect", QString::fromStdString(m_distil), "--dtype", "float16", "--json"});
        QCOMPARE(r.exitCode, 0);
        auto j = nlohmann::ordered_json::parse(r.out.toStdString());
        std::vector<std::string> keys;
        for (auto it = j.begin(); it != j.end(); ++it)
            keys.push_back(it.key());
        QCOMPARE(std::vector<std::string>(keys.begin(), keys.begin() + 6),
                 (std::vector<std::string>{"model_type", "dtype", "total_bytes", "modules", "tied", "no_split"}));
        QCOMPARE(j["model_type"].get<std::string>(), std::string("gpt2"));
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
    }
    void inspectHumanTree()
    {
        auto r = fixtures::runCli({"inspect", QString::fromStdString(m_distil), "--dtype", "float16"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("163,825,152 bytes"));
        QVERIFY(r.out.contains("GPT2Block"));
        QVERIFY(r.out.contains("8.65%")); // one block's share of the model
    }
    void demoIsTheDefault()
    {
        auto r = fixtures::runCli({"inspect", "--json"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(nlohmann::json::parse(r.out.toStdString())["total_bytes"].get<uint64_t>() > 0);
    }
    void badInputExitsTwoWithOneLine_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing path") << QStringList{"inspect", "/no/such/checkpoint"}
                                      << "/no/such/checkpoint: no such file or folder";
        QTest::newRow("bad dtype") << QStringList{"inspect", "--dtype", "float13"} << "--dtype 'float13' is not one of";
        QTest::newRow("unknown option") << QStringList{"inspect", "--frobnicate"} << "unknown option --frobnicate";
        QTest::newRow("unknown command") << QStringList{"explode"} << "unknown command 'explode'";
    }
    void badInputExitsTwoWithOneLine()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        auto r = fixtures::runCli(args);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(QString(r.err).contains(message), r.err.constData());
        QCOMPARE(r.err.count('\n'), 1);
        QVERIFY(r.out.isEmpty());
    }
    void malformedShardExitsTwo()
    {
        std::string d = m_tmp.path().toStdString() + "/bad";
        fs::create_directories(d);
        fixtures::writeBytes(d + "/model.safetensors", QByteArray("\x05\0\0\0\0\0\0\0{\"a\":", 13));
        auto r = fixtures::runCli({"inspect", QString::fromStdString(d)});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("model.safetensors: safetensors header is not valid JSON"), r.err.constData());
    }
};

QTEST_APPLESS_MAIN(TestCli)
#include "tst_cli.moc"
