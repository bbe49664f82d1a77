#pragma once
// The planning page: budget bars per device, plan options, the placement
// map, per-device totals, the predicted decode speed per execution policy
// and the device map table. Every change re-plans at once on the GUI
// thread: planning a 405B-class skeleton takes a few milliseconds, well
// inside a frame (tst_budgetbars prints the drag-to-repaint figure), and a
// synchronous plan never shows a stale map.
#include "stowage/config.h"
#include "stowage/costmodel.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include "budgetmodel.h"

#include <QStringList>
#include <QVector>
#include <QWidget>

#include <memory>
#include <optional>

class QComboBox;
class QLabel;
class QListWidget;
class QTabWidget;
class QTableView;
class QToolButton;

namespace stowage {

class BudgetBarsView;
class BudgetModel;
class Calibration;
class ContextChart;
class DeviceMapModel;
class ModuleTreeModel;
class PlacementMap;
class PlanControls;
class PredictionModel;
class ShopPanel;
class DeployPanel;
struct SnippetInput;

// What the Run page runs, handed over by the planning page as one value: the
// map on screen with the tree it was made on, the budgets, and the machine
// the prediction assumes. The run's simulated GPUs are that machine's, so the
// run and the prediction cannot describe different machines.
struct PlanState {
    std::shared_ptr<const ModuleTree> tree;
    std::shared_ptr<const Plan> plan; // null: nothing to run
    bool imported = false;            // a user's map rather than a planned one
    QString modelPath;
    DType dtype = DType::BF16;
    QVector<BudgetDevice> devices; // the budget rows, in device order
    HardwareProfile profile;       // what predictionProfile describes
    QStringList assumptions;       // where each of its figures comes from
};

class PlanningPage : public QWidget {
    Q_OBJECT
public:
    PlanningPage(ModuleTreeModel* treeModel, QWidget* parent = nullptr);

    // A newly opened model: its skeleton sized under the checkpoint's own dtype.
    void setModel(std::shared_ptr<const ModuleTree> baseTree, std::optional<ModelConfig> config, DType autoDType,
                  const QString& modelPath);
    // This machine's figures for predictions (measured off the GUI thread).
    void setThisMachine(const HardwareProfile& profile);
    const std::optional<HardwareProfile>& thisMachine() const { return m_thisMachine; }
    // Shows a user's map instead of a planned one until the next change.
    // Returns false (and shows why) when the text is not a device map.
    bool importMap(const QString& json, const QString& source);
    bool showingImportedMap() const { return !m_importedFrom.isEmpty(); }

    BudgetModel* budgetModel() const { return m_budgets; }
    BudgetBarsView* budgetBars() const { return m_bars; }
    PlanControls* controls() const { return m_controls; }
    PlacementMap* placementMap() const { return m_placement; }
    ContextChart* contextChart() const { return m_context; }
    ShopPanel* shopPanel() const { return m_shop; }
    DeployPanel* deployPanel() const { return m_deploy; }
    QTabWidget* outlookTabs() const { return m_outlook; }
    DeviceMapModel* deviceMapModel() const { return m_mapModel; }
    PredictionModel* predictionModel() const { return m_prediction; }
    // This machine's measured/predicted ratios per policy (the Run page adds runs).
    Calibration* calibration() const { return m_calibration; }
    // True when the prediction is for this machine as it is: measured host
    // figures and no simulated GPU, so runs can calibrate it.
    bool predictsThisMachine() const;
    QString calibrationText() const;
    QComboBox* assumedGpuBox() const { return m_assumeGpu; }
    QListWidget* problemList() const { return m_problems; }
    std::shared_ptr<const Plan> plan() const { return m_plan; }
    std::shared_ptr<const ModuleTree> tree() const { return m_tree; }
    QString totalsText() const;
    // A line above the budget bars (the demo's budgets say what they are); empty hides it.
    void setBudgetNote(const QString& text);
    QString budgetNote() const;
    QString predictionHardwareText() const;
    QString planError() const;
    SnippetInput snippetInput() const;
    PlanOptions options() const;
    PlanState planState() const;
    // The machine predictions assume: this machine's host figures (or a
    // typical host's), its real GPUs, and each simulated GPU's preset (or the
    // assumed GPU for one without); `assumptions` says which is which.
    HardwareProfile predictionProfile(QStringList* assumptions = nullptr) const;
    bool quantAppliedOnTarget() const;

public slots:
    void replan();
    // Shows the module's blocks in the map (from the module tree's selection).
    void selectModule(int module);

signals:
    void planChanged();
    // A block of the map was clicked.
    void moduleActivated(int module);

private:
    void resize();
    void applyPlan(Plan plan);
    void predict();
    // The context chart for the plan on screen (ContextChart).
    void updateContextChart();
    void setError(const QString& text);
    QWidget* buildPrediction();

    ModuleTreeModel* m_treeModel;
    BudgetModel* m_budgets = nullptr;
    BudgetBarsView* m_bars = nullptr;
    PlanControls* m_controls = nullptr;
    PlacementMap* m_placement = nullptr;
    ContextChart* m_context = nullptr;
    ShopPanel* m_shop = nullptr;
    DeployPanel* m_deploy = nullptr;
    QTabWidget* m_outlook = nullptr;
    DeviceMapModel* m_mapModel = nullptr;
    PredictionModel* m_prediction = nullptr;
    QTableView* m_mapView = nullptr;
    QTableView* m_predictionView = nullptr;
    QLabel* m_totals = nullptr;
    QLabel* m_banner = nullptr;
    QLabel* m_budgetNote = nullptr;
    QLabel* m_quantNote = nullptr;
    QLabel* m_quantRefusal = nullptr;
    bool m_quantOnTarget = false; // the tree on screen is sized with the quantizer applied
    QLabel* m_error = nullptr;
    QLabel* m_hardware = nullptr;
    QComboBox* m_assumeGpu = nullptr;
    QListWidget* m_problems = nullptr;

    std::shared_ptr<const ModuleTree> m_baseTree; // as opened (dtype "auto")
    std::shared_ptr<const ModuleTree> m_tree;     // sized for the chosen dtype and reference
    std::optional<ModelConfig> m_config;
    DType m_autoDType = DType::BF16;
    QString m_modelPath;
    std::shared_ptr<const Plan> m_plan;
    std::optional<KvReserve> m_kv;
    QString m_importedFrom;
    std::optional<HardwareProfile> m_thisMachine;
    Calibration* m_calibration = nullptr;
    QLabel* m_calibrationNote = nullptr;
    QToolButton* m_resetCalibration = nullptr;
};

} // namespace stowage
