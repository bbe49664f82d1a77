#include "enginerunpanel.h"

#include "display.h"
#include "engineserver.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/gguf.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSettings>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace stowage {

EngineRunPanel::EngineRunPanel(QWidget* parent)
    : QWidget(parent), m_server(new EngineServer(this)), m_program(EngineServer::findLlamaServer())
{
    setObjectName("engineRunPanel");
    m_status = new QLabel(this);
    m_status->setObjectName("engineStatus");
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_start = new QPushButton(tr("Start here"), this);
    m_start->setObjectName("engineStart");
    m_start->setToolTip(tr("Write the model as GGUF and start llama-server with this launch on 127.0.0.1"));
    m_stop = new QPushButton(tr("Stop"), this);
    m_stop->setObjectName("engineStop");
    m_write = new QPushButton(tr("Write GGUF…"), this);
    m_write->setObjectName("engineWriteGguf");
    m_write->setToolTip(tr("Write the model as one GGUF file, the MODEL.gguf llama.cpp's launch loads"));
    m_progress = new QProgressBar(this);
    m_progress->setObjectName("engineProgress");
    m_progress->setRange(0, 1000);
    m_progress->setFormat(tr("Writing GGUF %p%"));
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setObjectName("engineCancel");
    m_memory = new QLabel(this);
    m_memory->setObjectName("engineMemory");
    m_prompt = new QLineEdit(this);
    m_prompt->setObjectName("enginePrompt");
    m_prompt->setPlaceholderText(tr("Prompt for the running engine"));
    m_maxTokens = new QSpinBox(this);
    m_maxTokens->setObjectName("engineMaxTokens");
    m_maxTokens->setRange(1, 8192);
    m_maxTokens->setValue(64);
    m_maxTokens->setSuffix(tr(" tokens"));
    m_generate = new QPushButton(tr("Generate"), this);
    m_generate->setObjectName("engineGenerate");
    m_output = new QPlainTextEdit(this);
    m_output->setObjectName("engineOutput");
    m_output->setReadOnly(true);
    m_output->setMaximumHeight(m_output->fontMetrics().height() * 6);

    auto* top = new QHBoxLayout;
    top->addWidget(m_status, 1);
    top->addWidget(m_progress);
    top->addWidget(m_cancel);
    top->addWidget(m_memory);
    top->addWidget(m_write);
    top->addWidget(m_start);
    top->addWidget(m_stop);
    auto* ask = new QHBoxLayout;
    ask->addWidget(m_prompt, 1);
    ask->addWidget(m_maxTokens);
    ask->addWidget(m_generate);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(top);
    layout->addLayout(ask);
    layout->addWidget(m_output);

    connect(m_start, &QPushButton::clicked, this, &EngineRunPanel::start);
    connect(m_write, &QPushButton::clicked, this, [this] {
        if (m_write->isEnabled())
            writeGguf(false);
    });
    connect(m_stop, &QPushButton::clicked, this, [this] { m_server->stop(); });
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        if (m_cancelFlag)
            m_cancelFlag->store(true);
    });
    connect(m_generate, &QPushButton::clicked, this, &EngineRunPanel::generate);
    connect(m_prompt, &QLineEdit::returnPressed, this, &EngineRunPanel::generate);
    connect(m_server, &EngineServer::ready, this, [this] {
        m_starting = false;
        refresh();
    });
    connect(m_server, &EngineServer::failed, this, [this](const QString& why) {
        m_starting = false;
        m_serving.clear();
        refresh();
        m_status->setText(tr("llama-server did not start: %1").arg(why));
    });
    connect(m_server, &EngineServer::ended, this, [this](const QString& why) {
        const bool wasStarting = m_starting;
        m_starting = false;
        m_serving.clear();
        m_memory->clear();
        refresh();
        if (!wasStarting)
            m_status->setText(why + QStringLiteral(". ") + m_status->text());
    });
    connect(m_server, &EngineServer::text, this, [this](const QString& piece) {
        m_output->moveCursor(QTextCursor::End);
        m_output->insertPlainText(piece);
        m_output->verticalScrollBar()->setValue(m_output->verticalScrollBar()->maximum());
    });
    connect(m_server, &EngineServer::completed, this, [this](int pieces, double seconds) {
        refresh();
        m_status->setText(m_status->text() + tr(" Last answer: %n piece(s) in %1 s.", "", pieces).arg(seconds, 0, 'f', 2));
    });
    connect(m_server, &EngineServer::completionFailed, this, [this](const QString& why) {
        refresh();
        m_status->setText(m_status->text() + tr(" The completion failed: %1").arg(why));
    });
    connect(m_server, &EngineServer::memorySampled, this, [this](qint64 bytes) {
        m_memory->setText(tr("%1 resident").arg(formatBytes(uint64_t(bytes))));
    });
    refresh();
}

EngineRunPanel::~EngineRunPanel()
{
    if (m_cancelFlag)
        m_cancelFlag->store(true);
}

void EngineRunPanel::setProgram(const QString& program)
{
    m_program = program;
    refresh();
}

void EngineRunPanel::setLaunch(ServingEngine engine, const QString& command, int nodesUsed, const QString& checkpoint,
                               uint64_t plannedWeights, uint64_t plannedKv)
{
    m_planWeights = plannedWeights;
    m_planKv = plannedKv;
    m_engine = engine;
    m_command = command;
    m_nodes = nodesUsed;
    if (checkpoint != m_checkpoint) {
        m_checkpoint = checkpoint;
        m_exportProblem.clear();
        ++m_checkJob; // an answer still coming is for the path before
        m_checking = false;
        if (!checkpoint.isEmpty() && engine == ServingEngine::LlamaCpp)
            checkExport();
        else if (engine != ServingEngine::LlamaCpp)
            m_checkpoint.clear(); // checked again once llama.cpp is chosen
    }
    refresh();
}

void EngineRunPanel::checkExport()
{
    // Off the GUI thread: it loads tokenizer.json in full (0.7 s for Qwen3's
    // 151k tokens). Numbered, so the answer for a model no longer shown is dropped.
    const int job = ++m_checkJob;
    m_checking = true;
    auto* watcher = new QFutureWatcher<QString>(this);
    connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher, job] {
        watcher->deleteLater();
        if (job != m_checkJob)
            return;
        m_checking = false;
        m_exportProblem = watcher->result();
        refresh();
    });
    watcher->setFuture(QtConcurrent::run([checkpoint = m_checkpoint.toStdString()]() -> QString {
        try {
            return QString::fromStdString(ggufExportProblem(Checkpoint::open(checkpoint)));
        } catch (const std::exception& e) {
            return QString::fromStdString(e.what());
        }
    }));
}

void EngineRunPanel::modelChanged()
{
    if (m_cancelFlag)
        m_cancelFlag->store(true);
    m_server->stop();
    m_output->clear();
    m_gguf.clear(); // the next model's file is asked for, never written over this one's
    m_checkpoint.clear(); // and whether it can be written is checked again, even at the same path
    ++m_checkJob;
    m_checking = false;
}

void EngineRunPanel::refresh()
{
    const bool running = m_server->processId() > 0 || m_starting;
    const bool ready = m_server->isReady();
    m_progress->setVisible(m_writing);
    m_cancel->setVisible(m_writing);
    m_stop->setEnabled(running && !m_writing);
    m_generate->setEnabled(ready && !m_server->isGenerating());
    m_prompt->setEnabled(ready);
    m_maxTokens->setEnabled(ready);
    QString why;
    if (m_engine != ServingEngine::LlamaCpp)
        why = tr("Starting %1 here: only llama.cpp for now; copy the command above to run it.")
                  .arg(QString::fromLatin1(servingEngineName(m_engine)));
    else if (m_program.isEmpty())
        why = tr("llama-server is not installed here: put it on PATH, set STOWAGE_LLAMA_SERVER, or run "
                 "tools/engines/install-llama-cpp.sh.");
    else if (m_checkpoint.isEmpty())
        why = tr("Open a checkpoint to run it with llama-server.");
    else if (m_checking)
        why = tr("Checking whether this model can be written as GGUF…");
    else if (!m_exportProblem.isEmpty())
        why = tr("Cannot write this model as GGUF: %1").arg(m_exportProblem);
    else if (m_command.isEmpty())
        why = tr("Select a choice that fits to start it here.");
    else if (m_nodes > 1)
        why = tr("This choice spans %1 nodes; starting it here would run only this one. Pick a one-node choice.")
                  .arg(m_nodes);
    m_start->setEnabled(why.isEmpty() && !running && !m_writing);
    // The file alone needs no engine here: it is what the launch elsewhere loads.
    // Not while an engine serves a file: writing one would change what the line above says it serves.
    m_write->setEnabled(m_engine == ServingEngine::LlamaCpp && !m_checkpoint.isEmpty() && !m_checking &&
                        m_exportProblem.isEmpty() && !m_writing && !running);
    m_write->setVisible(m_engine == ServingEngine::LlamaCpp);
    if (m_writing)
        m_status->setText(tr("Writing %1 for llama-server…").arg(QDir::toNativeSeparators(m_gguf)));
    else if (ready) {
        QString text = tr("llama-server on 127.0.0.1:%1 serving %2.")
                           .arg(m_server->port())
                           .arg(QDir::toNativeSeparators(m_serving));
        const EngineServer::Reported r = m_server->reported();
        if (r.known())
            text += tr(" It allocated weights %1, KV cache %2, compute %3; the plan: weights %4, KV cache %5.")
                        .arg(formatBytes(uint64_t(r.weights)), formatBytes(uint64_t(r.kvCache)),
                             formatBytes(uint64_t(r.compute)), formatBytes(m_servedWeights), formatBytes(m_servedKv));
        m_status->setText(text);
    }
    else if (running)
        m_status->setText(tr("Starting llama-server on %1…").arg(QDir::toNativeSeparators(m_serving)));
    else
        m_status->setText(why.isEmpty() ? tr("llama-server is installed (%1): Start writes the model as GGUF and "
                                             "runs this launch on 127.0.0.1.")
                                              .arg(QDir::toNativeSeparators(m_program))
                                        : why);
}

void EngineRunPanel::setWriting(bool on)
{
    m_writing = on;
    m_progress->setValue(0);
    refresh();
}

void EngineRunPanel::start()
{
    if (m_start->isEnabled())
        writeGguf(true);
}

void EngineRunPanel::writeGguf(bool thenStart)
{
    if (m_gguf.isEmpty()) {
        QSettings settings;
        const QString folder = settings.value("deploy/ggufFolder", QDir::homePath()).toString();
        const QString name = QFileInfo(m_checkpoint).isDir() ? QFileInfo(m_checkpoint).fileName()
                                                             : QFileInfo(m_checkpoint).completeBaseName();
        const QString chosen = QFileDialog::getSaveFileName(this, tr("Write the model as GGUF for llama-server"),
                                                            folder + QLatin1Char('/') + name + QStringLiteral(".gguf"),
                                                            tr("GGUF (*.gguf)"));
        if (chosen.isEmpty())
            return;
        settings.setValue("deploy/ggufFolder", QFileInfo(chosen).absolutePath());
        m_gguf = chosen;
    }
    m_cancelFlag = std::make_shared<std::atomic<bool>>(false);
    m_permille = std::make_shared<std::atomic<int>>(0);
    setWriting(true);
    auto* tick = new QTimer(this);
    connect(tick, &QTimer::timeout, this, [this, permille = m_permille] { m_progress->setValue(permille->load()); });
    tick->start(100);
    auto* watcher = new QFutureWatcher<QString>(this);
    const QString gguf = m_gguf;
    connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher, tick, gguf, thenStart] {
        watcher->deleteLater();
        tick->deleteLater();
        const QString error = watcher->result();
        setWriting(false);
        if (!error.isEmpty())
            m_status->setText(error);
        else if (thenStart)
            startServer(gguf);
        else
            m_status->setText(tr("Wrote %1 (%2) for llama.cpp: the launch's MODEL.gguf.")
                                  .arg(QDir::toNativeSeparators(gguf), formatBytes(uint64_t(QFileInfo(gguf).size()))));
    });
    watcher->setFuture(QtConcurrent::run([checkpoint = m_checkpoint.toStdString(), out = gguf.toStdString(),
                                          cancel = m_cancelFlag, permille = m_permille]() -> QString {
        try {
            exportGguf(Checkpoint::open(checkpoint), out, [&](uint64_t done, uint64_t total) {
                permille->store(total ? int(1000 * done / total) : 1000);
                return !cancel->load();
            });
        } catch (const Cancelled&) {
            return QObject::tr("Writing the GGUF was cancelled; nothing was left behind.");
        } catch (const std::exception& e) {
            return QObject::tr("Writing the GGUF failed: %1").arg(QString::fromStdString(e.what()));
        }
        return {};
    }));
}

void EngineRunPanel::startServer(const QString& gguf)
{
    QStringList args = EngineServer::llamaServerArguments(m_command, gguf);
    if (!args.isEmpty() && !args.contains(QStringLiteral("-lv")))
        args << QStringLiteral("-lv") << QStringLiteral("4"); // its buffer sizes, to set beside the plan
    if (args.isEmpty()) {
        m_status->setText(tr("The launch has no llama-server line to start."));
        return;
    }
    m_serving = gguf;
    m_servedWeights = m_planWeights;
    m_servedKv = m_planKv;
    m_starting = true;
    m_output->clear();
    m_server->start(m_program, args);
    refresh();
}

void EngineRunPanel::generate()
{
    if (!m_generate->isEnabled() || m_prompt->text().isEmpty())
        return;
    m_output->clear();
    m_server->complete(m_prompt->text(), m_maxTokens->value());
    refresh();
}

} // namespace stowage
