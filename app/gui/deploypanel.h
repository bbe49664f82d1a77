#pragma once
// "Deploy" on the Plan page: the model on a serving engine over nodes x GPUs
// (stowage/deploy.h). Every tensor x pipeline (x expert) parallel choice the
// engine allows, what each GPU holds and whether it fits, the decode speed,
// and for the selected choice one strip per node (each GPU's weights, KV
// cache and overhead against what the engine may use) and its launch
// command, copyable. For llama.cpp and a mixture of experts, also the
// experts of the first layers kept in host RAM (--n-cpu-moe). Where the
// engine is installed here, Start runs it on this machine
// (enginerunpanel.h). Planning is milliseconds: it follows every change at
// once, never showing choices for other inputs.
#include "stowage/config.h"
#include "stowage/deploy.h"
#include "stowage/moduletree.h"

#include <QWidget>

#include <memory>
#include <optional>

class QCheckBox;
class QComboBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QStandardItemModel;
class QTableView;

namespace stowage {

class DeployPicture;
class EngineRunPanel;

class DeployPanel : public QWidget {
    Q_OBJECT
public:
    explicit DeployPanel(QWidget* parent = nullptr);

    void setModel(std::shared_ptr<const ModuleTree> tree, std::optional<ModelConfig> config, const QString& modelPath);

    QComboBox* engineBox() const { return m_engine; }
    QComboBox* gpuBox() const { return m_gpu; }
    QSpinBox* nodesBox() const { return m_nodes; }
    QSpinBox* gpusPerNodeBox() const { return m_perNode; }
    QSpinBox* contextBox() const { return m_context; }
    QSpinBox* sequencesBox() const { return m_sequences; }
    QCheckBox* expertParallelBox() const { return m_ep; }
    QSpinBox* hostRamBox() const { return m_hostRam; } // GB
    QTableView* table() const { return m_view; }
    QPlainTextEdit* commandView() const { return m_command; }
    QPushButton* copyButton() const { return m_copy; }
    QLabel* statusLabel() const { return m_status; }
    DeployPicture* picture() const { return m_picture; }
    EngineRunPanel* runPanel() const { return m_run; }
    const DeployPlan& plan() const { return m_plan; }

public slots:
    void replan();

private:
    void showChoice(int row);

    QComboBox* m_engine;
    QComboBox* m_gpu;
    QSpinBox* m_nodes;
    QSpinBox* m_perNode;
    QSpinBox* m_context;
    QSpinBox* m_sequences;
    QCheckBox* m_ep;
    QSpinBox* m_hostRam;
    QLabel* m_status;
    QTableView* m_view;
    QStandardItemModel* m_model;
    DeployPicture* m_picture;
    QPlainTextEdit* m_command;
    QPushButton* m_copy;
    EngineRunPanel* m_run;
    std::shared_ptr<const ModuleTree> m_tree;
    std::optional<ModelConfig> m_config;
    QString m_modelPath;
    DeployPlan m_plan;
};

// One strip per node: each GPU's weights, KV cache and overhead as shares
// of what the engine may use on it.
class DeployPicture : public QWidget {
    Q_OBJECT
public:
    explicit DeployPicture(QWidget* parent = nullptr);
    void setChoice(const DeployChoice* choice, int nodes, int gpusPerNode);
    // What GPU `gpu` of node `node` holds: 0 when the choice leaves it idle.
    uint64_t heldOn(int node, int gpu) const;
    QSize sizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    int captionLines() const;

    std::optional<DeployChoice> m_choice;
    int m_nodes = 1, m_perNode = 1;
};

} // namespace stowage
