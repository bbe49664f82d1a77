#pragma once
#include <QMainWindow>

#include <memory>

class QLabel;
class QMenu;
class QTreeView;

namespace stowage {

class ModuleTreeModel;
class ModuleTree;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    // Opens on a worker thread; results of an older open are dropped.
    void openCheckpoint(const QString& path);
    ModuleTreeModel* moduleModel() const { return m_model; }
    QString summary() const;

private:
    struct Opened;
    void showOpened(int job, const std::shared_ptr<Opened>& result);
    void chooseFolder();
    void chooseFile();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();

    ModuleTreeModel* m_model = nullptr;
    QTreeView* m_view = nullptr;
    QLabel* m_summary = nullptr;
    QMenu* m_recentMenu = nullptr;
    int m_job = 0;
};

} // namespace stowage
