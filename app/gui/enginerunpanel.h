#pragma once
// "Run it here" under the Deploy tab's launch command. For llama.cpp, Write
// GGUF writes the model file its launch loads (the hand-off needs no engine
// here). Where the selected
// engine is installed on this machine (llama.cpp's llama-server for now),
// write the model in the engine's format (GGUF, with progress and Cancel,
// into a file the user chose), start the engine with the launch's own
// arguments on loopback, stream a completion from its OpenAI-compatible
// endpoint, and show its resident memory. It says why when it cannot: the
// engine is not installed, the choice spans other hosts, or the checkpoint
// cannot be written as GGUF. A running engine serves the model it was
// started with; the panel always names it, and a new model stops it.
#include "stowage/deploy.h"

#include <QString>
#include <QWidget>

#include <atomic>
#include <memory>

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace stowage {

class EngineServer;

class EngineRunPanel : public QWidget {
    Q_OBJECT
public:
    explicit EngineRunPanel(QWidget* parent = nullptr);
    ~EngineRunPanel() override;

    // The Deploy tab's selection: its engine, launch command and node count,
    // the checkpoint (empty path: no model open), and what the plan puts on
    // a GPU (weights, KV cache), shown beside what the started engine reports.
    void setLaunch(ServingEngine engine, const QString& command, int nodesUsed, const QString& checkpoint,
                   uint64_t plannedWeights = 0, uint64_t plannedKv = 0);
    // The model changed: a running engine serves the old one, so it stops.
    void modelChanged();
    // Where the GGUF is written; asked with a file dialog when empty.
    void setGgufPath(const QString& path) { m_gguf = path; }
    // The engine program (llama-server); EngineServer::findLlamaServer() by default.
    void setProgram(const QString& program);

    QLabel* statusLabel() const { return m_status; }
    QPushButton* startButton() const { return m_start; }
    QPushButton* stopButton() const { return m_stop; }
    QPushButton* writeButton() const { return m_write; }
    QPushButton* generateButton() const { return m_generate; }
    QLineEdit* promptEdit() const { return m_prompt; }
    QSpinBox* maxTokensBox() const { return m_maxTokens; }
    QPlainTextEdit* output() const { return m_output; }
    QProgressBar* progress() const { return m_progress; }
    QPushButton* cancelButton() const { return m_cancel; }
    QLabel* memoryLabel() const { return m_memory; }
    EngineServer* server() const { return m_server; }

private:
    void start();
    // Writes the GGUF (asking where first, unless set), then starts llama-server on it when `thenStart`.
    void writeGguf(bool thenStart);
    void startServer(const QString& gguf);
    void generate();
    void refresh();
    void setWriting(bool on);
    // Whether m_checkpoint can be written as GGUF, asked on a worker thread.
    void checkExport();

    EngineServer* m_server;
    QLabel* m_status;
    QPushButton* m_start;
    QPushButton* m_stop;
    QPushButton* m_write;
    QLineEdit* m_prompt;
    QSpinBox* m_maxTokens;
    QPushButton* m_generate;
    QPlainTextEdit* m_output;
    QProgressBar* m_progress;
    QPushButton* m_cancel;
    QLabel* m_memory;

    ServingEngine m_engine = ServingEngine::LlamaCpp;
    QString m_command, m_checkpoint, m_gguf, m_program, m_serving, m_exportProblem;
    int m_nodes = 1;
    uint64_t m_planWeights = 0, m_planKv = 0;       // the selection's
    uint64_t m_servedWeights = 0, m_servedKv = 0;   // the running launch's
    bool m_writing = false;
    bool m_starting = false;
    bool m_checking = false; // checkExport's answer is still coming
    int m_checkJob = 0;
    std::shared_ptr<std::atomic<bool>> m_cancelFlag;
    std::shared_ptr<std::atomic<int>> m_permille;
};

} // namespace stowage
