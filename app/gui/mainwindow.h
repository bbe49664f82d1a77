#pragma once
// The main window: a Plan page (the module tree on the left, the planning
// page on the right) and a Run page, File/View/Devices/Run menus. Opening runs off the GUI thread (each
// open numbered, stale results dropped); errors show in the window and
// keep the previous model open.
#include <QHash>
#include <QMainWindow>

#include <memory>
#include <optional>

class QAction;
class QLabel;
class QMenu;
class QSplitter;
class QTabWidget;
class QToolButton;
class QTreeView;

namespace stowage {

class FixedCostTiming;

class BudgetModel;
class DeviceMapModel;
class HubCacheDialog;
class ModuleTreeModel;
class PlanningPage;
class RunPage;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    struct Options {
        bool probeMachine = true;    // detect GPUs, RAM, disk and measure this machine
        bool restoreSettings = true; // budgets, simulated GPUs, window state from QSettings
        QString workerProgram;       // stowage-cli for runs; empty: WorkerClient's default
        bool demoBudgets = true;     // the demo opens on budgets that use a simulated GPU, RAM and disk
        // With probeMachine: time this CPU's fixed costs of a decode step in
        // the background (`stowage-cli hardware`, ~15 s) when none are kept.
        bool timeFixedCosts = false;
    };
    MainWindow();
    explicit MainWindow(Options options, QWidget* parent = nullptr);
    ~MainWindow() override;

    // Opens on a worker thread; results of an older open are dropped.
    void openCheckpoint(const QString& path);
    // The bundled demo checkpoint: installed (<prefix>/share/stowage/demo) or the build's copy.
    static QString demoPath();
    ModuleTreeModel* moduleModel() const { return m_model; }
    QTreeView* moduleView() const { return m_view; }
    PlanningPage* planningPage() const { return m_page; }
    RunPage* runPage() const { return m_run; }
    // The background timing of this machine's fixed costs; null when none is under way.
    FixedCostTiming* fixedCostTiming() const { return m_timing; }
    // Plan (0) or Run (1).
    QTabWidget* pages() const { return m_pages; }
    BudgetModel* budgetModel() const;
    DeviceMapModel* deviceMapModel() const;
    QString summary() const;
    QString totalsText() const;
    QString errorText() const; // the error bar's text, empty when hidden
    // Writes the current map as device-map JSON; false (and a message) on failure.
    bool exportDeviceMap(const QString& path);
    bool importDeviceMap(const QString& path);
    // Python for transformers / Accelerate, also put on the clipboard.
    QString copyTransformersSnippet();
    QString copyAccelerateSnippet();
    QAction* action(const QString& objectName) const;
    HubCacheDialog* showHubCache();
    enum class Theme { System, Light, Dark };
    static void applyTheme(Theme theme);

signals:
    // After each open: ok, or the error shown.
    void checkpointOpened(bool ok, const QString& error);

protected:
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    struct Opened;
    void buildMenus();
    void showOpened(int job, const std::shared_ptr<Opened>& result);
    void showError(const QString& text);
    void chooseFolder();
    void chooseFile();
    void chooseImportFile();
    void chooseExportFile();
    void addCustomGpu();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    void probeMachine();
    void timeFixedCosts();
    void endFixedCostTiming(const QString& message);
    void saveSettings() const;
    void restoreBudgets();
    // Budgets as settings keep them: simulated GPUs ("preset|hardware|capacity") and bytes per device name.
    struct BudgetState {
        QStringList simulated;
        QHash<QString, quint64> budgets;
    };
    BudgetState budgetState() const;
    void setBudgetState(const BudgetState& state);
    // On opening the demo: its own budgets, the user's kept aside; on leaving it: the user's back.
    void applyDemoBudgets(bool demo);
    void planChanged();
    void syncTreeSelection(int module);

    Options m_options;
    ModuleTreeModel* m_model = nullptr;
    QTreeView* m_view = nullptr;
    QLabel* m_summary = nullptr;
    std::pair<QString, bool> m_summaryOf; // the open checkpoint's weights path, and whether only its index is here
    void updateSummary();
    QWidget* m_errorBar = nullptr;
    QLabel* m_errorLabel = nullptr;
    QSplitter* m_splitter = nullptr;
    PlanningPage* m_page = nullptr;
    RunPage* m_run = nullptr;
    QTabWidget* m_pages = nullptr;
    QMenu* m_recentMenu = nullptr;
    QList<QAction*> m_planActions; // enabled once there is a plan
    HubCacheDialog* m_hub = nullptr;
    int m_job = 0;
    bool m_syncing = false;
    std::optional<BudgetState> m_budgetsBeforeDemo; // set while the demo's budgets are on
    FixedCostTiming* m_timing = nullptr;
    QWidget* m_timingStatus = nullptr; // its line and Stop button in the status bar
};

} // namespace stowage
