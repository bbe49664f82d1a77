#pragma once
// "Hardware to buy" on the Plan page: for the model on screen at the KV-cache
// box's context and batch, the GPU presets (1 to N of one model) and RAM
// sizes that reach a decode speed, cheapest first (stowage/shop.h). The
// search runs off the GUI thread and restarts on every change; a result
// shows only for the inputs on screen, never an older one. A row opens as
// simulated GPUs in the budget bars.
#include "stowage/config.h"
#include "stowage/moduletree.h"
#include "stowage/shop.h"

#include <QWidget>

#include <memory>
#include <optional>

class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QStandardItemModel;
class QTableView;
class QTimer;

namespace stowage {

class ShopPanel : public QWidget {
    Q_OBJECT
public:
    explicit ShopPanel(QWidget* parent = nullptr);

    // The model to shop for (null tree: none) and the KV cache to count:
    // context 0 for none.
    void setModel(std::shared_ptr<const ModuleTree> tree, std::optional<ModelConfig> config);
    void setKvCache(int context, int batch);

    QDoubleSpinBox* speedBox() const { return m_speed; }
    QSpinBox* maxGpusBox() const { return m_maxGpus; }
    QLineEdit* ramBox() const { return m_ram; }
    QTableView* table() const { return m_view; }
    QPushButton* openButton() const { return m_open; }
    QLabel* statusLabel() const { return m_status; }
    bool searching() const { return m_running; }
    // The setups on screen (empty while a search for the inputs is running).
    const std::vector<ShopSetup>& setups() const { return m_setups; }

public slots:
    // Starts a search for the inputs now on screen (what every change calls,
    // after a short pause so typing does not start one per key).
    void search();

signals:
    // "Open as simulated GPUs": `count` GPUs of hardware preset `preset`.
    void openSetup(const QString& preset, int count);
    // A search for the inputs on screen finished (tests wait on it).
    void searched();

protected:
    // A search waits until the panel is on screen (the tab is shown).
    void showEvent(QShowEvent* event) override;

private:
    void show(int job, const ShopResult& result, const QString& error);
    void searchWhenShown();
    void invalidate(); // the inputs changed: clear and search again soon

    QDoubleSpinBox* m_speed;
    QSpinBox* m_maxGpus;
    QLineEdit* m_ram;
    QLabel* m_status;
    QLabel* m_notes;
    QTableView* m_view;
    QStandardItemModel* m_model;
    QPushButton* m_open;
    QTimer* m_debounce;
    std::shared_ptr<const ModuleTree> m_tree;
    std::optional<ModelConfig> m_config;
    int m_context = 0, m_batch = 1;
    int m_job = 0;
    bool m_running = false;
    bool m_stale = true; // the inputs changed since the last search started
    std::vector<ShopSetup> m_setups;
};

} // namespace stowage
