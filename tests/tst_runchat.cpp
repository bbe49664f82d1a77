// The Run page's Chat toggle against the real worker, offscreen: a checkpoint
// with a chat template opens with Chat on when its name says instruct; the
// page shows what the model reads (rendered by hand below from the template);
// Generate with Chat on sends the `chat` field, and the worker's tokens equal
// `stowage-cli run --chat`, and equal plain Generate of the rendered text;
// with Chat off the raw prompt goes, as `stowage-cli run` without --chat.
// No template: the toggle is disabled and says why. A user's choice is
// remembered per checkpoint.
#include "chatoptions.h"
#include "fixtures.h"
#include "mainwindow.h"
#include "planningpage.h"
#include "runcontroller.h"
#include "runpage.h"
#include "workercodec.h"

#include <QCheckBox>
#include <QSettings>
#include <QSignalSpy>
#include <QTabWidget>
#include <QtTest>

#include <filesystem>

using namespace stowage;

namespace {
MainWindow::Options options()
{
    MainWindow::Options o;
    o.probeMachine = false;
    o.restoreSettings = false;
    o.workerProgram = QStringLiteral(STOWAGE_CLI);
    o.demoBudgets = false;
    return o;
}

// A template that writes BOS itself, as Llama 3's and Gemma's do.
const char* kTemplate = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n"
                        "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

QVector<int> cliTokens(const QStringList& args)
{
    auto r = fixtures::runCli(args);
    if (r.exitCode != 0) {
        qWarning("%s", r.err.constData());
        return {};
    }
    QVector<int> out;
    for (int id : nlohmann::json::parse(r.out.toStdString())["token_ids"].get<std::vector<int>>())
        out.push_back(id);
    return out;
}
} // namespace

class TestRunChat : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    QString m_chatModel;
private slots:
    void initTestCase();
    void chatOnSendsTheTemplateAndOffSendsTheRawPrompt();
    void noTemplateDisablesTheToggle();
    void choiceIsRememberedPerCheckpoint();
    void instructNames();

private:
    bool open(MainWindow& w, const QString& path);
    bool generateAndWait(RunPage* run);
};

void TestRunChat::initTestCase()
{
    QVERIFY(m_tmp.isValid());
    QApplication::setOrganizationName("StowageTest");
    QApplication::setApplicationName("tst_runchat");
    QSettings().clear();
    m_chatModel = m_tmp.path() + "/demo-chat-Instruct";
    fixtures::writeDemoWithChatTemplate(m_chatModel.toStdString(), kTemplate);
}

bool TestRunChat::open(MainWindow& w, const QString& path)
{
    w.resize(1400, 900);
    w.show();
    QSignalSpy opened(&w, &MainWindow::checkpointOpened);
    w.openCheckpoint(path);
    if (!opened.wait(60000) || !opened[0][0].toBool())
        return false;
    w.pages()->setCurrentWidget(w.runPage());
    return w.planningPage()->plan() != nullptr;
}

bool TestRunChat::generateAndWait(RunPage* run)
{
    QSignalSpy done(run, &RunPage::generationDone);
    QSignalSpy failed(run->controller(), &RunController::failed);
    run->generate();
    QElapsedTimer t;
    t.start();
    while (done.isEmpty() && failed.isEmpty() && t.elapsed() < 60000)
        QTest::qWait(10);
    if (!failed.isEmpty())
        qWarning("generation failed: %s", qPrintable(failed[0][0].toString()));
    return !done.isEmpty();
}

void TestRunChat::chatOnSendsTheTemplateAndOffSendsTheRawPrompt()
{
    const QString prompt = QStringLiteral("And God said");
    // By hand from kTemplate: the demo's bos_token is "<s>".
    const QString rendered = QStringLiteral("<s>[user] And God said\n[assistant]");
    const QStringList common{"--max-new-tokens", "6", "--greedy", "--ignore-eos", "--json"};
    const QVector<int> cliChat = cliTokens(QStringList{"run", m_chatModel, "--prompt", prompt, "--chat"} + common);
    const QVector<int> cliRaw = cliTokens(QStringList{"run", m_chatModel, "--prompt", prompt} + common);
    QCOMPARE(cliChat.size(), 6);
    QCOMPARE(cliRaw.size(), 6);
    QVERIFY2(cliChat != cliRaw, "the fixture must tell a chat prompt from a raw one");

    MainWindow w(options());
    QVERIFY(open(w, m_chatModel));
    RunPage* run = w.runPage();
    ChatOptions* chat = run->chatOptions();
    // A name with "Instruct" and a template: on by default, and shown.
    QVERIFY(chat->toggle()->isEnabled());
    QVERIFY(chat->isOn());
    run->setPrompt(prompt);
    QCOMPARE(chat->previewText(), rendered);
    run->setMaxNewTokens(6);
    run->setGreedy(true);
    run->setIgnoreEos(true);
    run->setOffloadFolder(m_tmp.path() + "/off");
    // The command the page sends has the field.
    QVERIFY(run->generateRequest().chat);
    QCOMPARE(encodeGenerate(run->generateRequest(), false).value("chat").toBool(), true);

    QSignalSpy dispatched(run, &RunPage::dispatched);
    run->dispatch();
    QVERIFY(dispatched.wait(60000) && dispatched[0][0].toBool());
    QVERIFY(generateAndWait(run));
    QCOMPARE(run->lastDone().tokenIds, cliChat);
    QVERIFY(run->outputText().startsWith(rendered)); // the output shows what the model read

    // The rendered text typed as a plain prompt (the demo adds BOS itself) is the same prompt.
    chat->setOn(false);
    QVERIFY(!chat->isOn());
    QCOMPARE(chat->previewText(), QString());
    run->setPrompt(QStringLiteral("[user] And God said\n[assistant]"));
    QVERIFY(!run->generateRequest().chat);
    QVERIFY(generateAndWait(run));
    QCOMPARE(run->lastDone().tokenIds, cliChat);

    // Chat off: the raw prompt, no field.
    run->setPrompt(prompt);
    QVERIFY(!encodeGenerate(run->generateRequest(), false).contains("chat"));
    QVERIFY(generateAndWait(run));
    QCOMPARE(run->lastDone().tokenIds, cliRaw);
    QVERIFY(run->outputText().startsWith(prompt));

    if (const QString dir = QString::fromLocal8Bit(qgetenv("STOWAGE_SCREENSHOT_DIR")); !dir.isEmpty()) {
        chat->setOn(true);
        QTest::qWait(50);
        w.grab().save(dir + "/run-chat.png");
    }
    chat->setOn(true); // leave the saved choice as the default would be
}

void TestRunChat::noTemplateDisablesTheToggle()
{
    MainWindow w(options());
    QVERIFY(open(w, QStringLiteral(STOWAGE_BUILD_DEMO_DIR)));
    ChatOptions* chat = w.runPage()->chatOptions();
    QVERIFY(!chat->hasTemplate());
    QVERIFY(!chat->toggle()->isEnabled());
    QVERIFY(!chat->isOn());
    QVERIFY2(chat->toggle()->toolTip().contains("no chat template"), qPrintable(chat->toggle()->toolTip()));
    QVERIFY(!w.runPage()->generateRequest().chat);
    // Opening the chat model afterwards enables it.
    QVERIFY(open(w, m_chatModel));
    QVERIFY(chat->toggle()->isEnabled());
}

void TestRunChat::choiceIsRememberedPerCheckpoint()
{
    const QString other = m_tmp.path() + "/other-model"; // no instruct word: off by default
    fixtures::writeDemoWithChatTemplate(other.toStdString(), kTemplate);
    {
        MainWindow w(options());
        QVERIFY(open(w, other));
        ChatOptions* chat = w.runPage()->chatOptions();
        QVERIFY(chat->toggle()->isEnabled());
        QVERIFY(!chat->isOn());
        QVERIFY(open(w, m_chatModel));
        QVERIFY(chat->isOn());
        chat->toggle()->click(); // the user turns it off for this checkpoint
        QVERIFY(!chat->isOn());
        QVERIFY(open(w, other));
        chat->toggle()->click(); // and on for the other
        QVERIFY(chat->isOn());
    }
    MainWindow w(options());
    ChatOptions* chat = w.runPage()->chatOptions();
    QVERIFY(open(w, m_chatModel));
    QVERIFY(!chat->isOn());
    QVERIFY(open(w, other));
    QVERIFY(chat->isOn());
    QSettings().remove("run/chat");
}

void TestRunChat::instructNames()
{
    // Hub names: instruct ones on, base ones off.
    for (const char* n : {"gemma-3-4b-it", "Phi-4-mini-instruct", "Mixtral-8x7B-Instruct-v0.1", "Llama-2-7b-chat-hf",
                          "Qwen2.5-0.5B-Instruct"})
        QVERIFY2(ChatOptions::looksInstruct(n, "llama"), n);
    for (const char* n : {"gemma-3-4b-pt", "Mixtral-8x7B-v0.1", "Llama-3.1-8B", "Qwen2.5-0.5B", "Mistral-7B-v0.1",
                          "digit-classifier"})
        QVERIFY2(!ChatOptions::looksInstruct(n, "llama"), n);
    // Qwen3, gpt-oss and DeepSeek-V3 ship their chat models without a suffix.
    QVERIFY(ChatOptions::looksInstruct("Qwen3-30B-A3B", "qwen3_moe"));
    QVERIFY(!ChatOptions::looksInstruct("Qwen3-30B-A3B-Base", "qwen3_moe"));
    QVERIFY(ChatOptions::looksInstruct("gpt-oss-20b", "gpt_oss"));
    QCOMPARE(ChatOptions::modelName("/home/u/.cache/huggingface/hub/models--google--gemma-3-4b-it/snapshots/abc123"),
             QStringLiteral("gemma-3-4b-it"));
    QCOMPARE(ChatOptions::modelName("/data/Phi-4-mini-instruct"), QStringLiteral("Phi-4-mini-instruct"));
}

QTEST_MAIN(TestRunChat)
#include "tst_runchat.moc"
