#pragma once
#include <QMainWindow>

#include <memory>

class QAction;
class QLabel;
class QMenu;
class QTableView;
class QTreeView;

namespace stowage {

class BudgetPanel;
class DeviceMapModel;
class ModuleTreeModel;
class ModuleTree;
struct PlanOptions;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    // Opens on a worker thread; results of an older open are dropped.
    void openCheckpoint(const QString& path);
    ModuleTreeModel* moduleModel() const { return m_model; }
    QString summary() const;
    BudgetPanel* budgetPanel() const { return m_budgets; }
    DeviceMapModel* deviceMapModel() const { return m_mapModel; }
    QString totalsText() const;
    // Writes the current map as device-map JSON; false (and a message) on failure.
    bool exportDeviceMap(const QString& path);

private:
    struct Opened;
    void showOpened(int job, const std::shared_ptr<Opened>& result);
    void chooseFolder();
    void chooseFile();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    QWidget* buildPlanningPanel(QWidget* parent);
    // Re-plans on the GUI thread: planning a 405B skeleton takes well under a millisecond.
    void replan(const PlanOptions& options);
    void chooseExportFile();

    ModuleTreeModel* m_model = nullptr;
    QTreeView* m_view = nullptr;
    QLabel* m_summary = nullptr;
    QMenu* m_recentMenu = nullptr;
    BudgetPanel* m_budgets = nullptr;
    DeviceMapModel* m_mapModel = nullptr;
    QTableView* m_mapView = nullptr;
    QLabel* m_totals = nullptr;
    QAction* m_exportAction = nullptr;
    int m_job = 0;
};

} // namespace stowage
