#include "mainwindow.h"

#include "budgetpanel.h"
#include "devicemapmodel.h"
#include "moduletreemodel.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/fileio.h"
#include "stowage/moduletree.h"
#include "stowage/planner.h"

#include <QAction>
#include <QApplication>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTableView>
#include <QTreeView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace stowage {

struct MainWindow::Opened {
    QString path;
    std::shared_ptr<const ModuleTree> tree;
    QString summary;
    QString error;
};

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent)
{
    setWindowTitle(tr("Stowage"));
    resize(1000, 700);
    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    m_summary = new QLabel(tr("Open a checkpoint folder, index or weights file (Ctrl+O)."), central);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_model = new ModuleTreeModel(this);
    m_view = new QTreeView(central);
    m_view->setModel(m_model);
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    m_view->header()->setSectionResizeMode(ModuleTreeModel::NameColumn, QHeaderView::ResizeToContents);
    auto* splitter = new QSplitter(Qt::Horizontal, central);
    splitter->addWidget(m_view);
    splitter->addWidget(buildPlanningPanel(splitter));
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 1);
    layout->addWidget(m_summary);
    layout->addWidget(splitter, 1);
    setCentralWidget(central);

    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* openFolder = file->addAction(tr("&Open Checkpoint Folder…"), this, &MainWindow::chooseFolder);
    openFolder->setShortcut(QKeySequence::Open);
    QAction* openFile = file->addAction(tr("Open &Weights or Index File…"), this, &MainWindow::chooseFile);
    openFile->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    file->addSeparator();
    m_exportAction = file->addAction(tr("&Export Device Map…"), this, &MainWindow::chooseExportFile);
    m_exportAction->setShortcut(QKeySequence(tr("Ctrl+E")));
    m_exportAction->setEnabled(false);
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), qApp, &QApplication::quit);
    quit->setShortcut(QKeySequence::Quit);
    rebuildRecentMenu();
    statusBar()->showMessage(tr("Ready"));
}

QString MainWindow::summary() const { return m_summary->text(); }

QString MainWindow::totalsText() const { return m_totals->text(); }

QWidget* MainWindow::buildPlanningPanel(QWidget* parent)
{
    auto* panel = new QWidget(parent);
    auto* layout = new QVBoxLayout(panel);
    layout->setContentsMargins(0, 0, 0, 0);
    m_budgets = new BudgetPanel(panel);
    m_mapModel = new DeviceMapModel(this);
    m_mapView = new QTableView(panel);
    m_mapView->setObjectName("deviceMap");
    m_mapView->setModel(m_mapModel);
    m_mapView->setAlternatingRowColors(true);
    m_mapView->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_mapView->setWordWrap(false);
    m_mapView->verticalHeader()->hide();
    m_mapView->verticalHeader()->setDefaultSectionSize(m_mapView->fontMetrics().height() + 6);
    m_mapView->horizontalHeader()->setStretchLastSection(true);
    m_totals = new QLabel(tr("No plan yet."), panel);
    m_totals->setObjectName("deviceTotals");
    m_totals->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_totals->setWordWrap(true);
    layout->addWidget(m_budgets);
    layout->addWidget(m_mapView, 1);
    layout->addWidget(m_totals);
    connect(m_budgets, &BudgetPanel::budgetsChanged, this, &MainWindow::replan);
    return panel;
}

void MainWindow::replan(const PlanOptions& options)
{
    const ModuleTree* tree = m_model->tree();
    if (!tree)
        return;
    try {
        m_mapModel->setPlan(planDeviceMap(*tree, options));
    } catch (const std::exception& e) {
        // Impossible options: keep showing the last good plan.
        statusBar()->showMessage(tr("Cannot plan: %1").arg(QString::fromStdString(e.what())), 5000);
        return;
    }
    // The Why column stretches and elides; its full text is the tooltip.
    for (int c = DeviceMapModel::ModuleColumn; c < DeviceMapModel::WhyColumn; ++c)
        m_mapView->resizeColumnToContents(c);
    m_totals->setText(DeviceMapModel::totalsLine(m_mapModel->plan()));
    m_exportAction->setEnabled(true);
}

void MainWindow::chooseExportFile()
{
    QString f = QFileDialog::getSaveFileName(this, tr("Export Device Map"), QStringLiteral("device_map.json"),
                                             tr("Device map (*.json)"));
    if (!f.isEmpty())
        exportDeviceMap(f);
}

bool MainWindow::exportDeviceMap(const QString& path)
{
    try {
        writeFileAtomically(path.toStdString(), deviceMapToJson(m_mapModel->plan().deviceMap) + "\n");
    } catch (const std::exception& e) {
        auto* box = new QMessageBox(QMessageBox::Warning, tr("Cannot export device map"),
                                    QString::fromStdString(e.what()), QMessageBox::Ok, this);
        box->setObjectName("exportError");
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open();
        return false;
    }
    statusBar()->showMessage(tr("Exported %1").arg(path), 5000);
    return true;
}

void MainWindow::chooseFolder()
{
    QString dir = QFileDialog::getExistingDirectory(this, tr("Open Checkpoint Folder"));
    if (!dir.isEmpty())
        openCheckpoint(dir);
}

void MainWindow::chooseFile()
{
    QString f = QFileDialog::getOpenFileName(this, tr("Open Weights or Index File"), QString(),
                                             tr("Checkpoints (*.safetensors *.json *.bin)"));
    if (!f.isEmpty())
        openCheckpoint(f);
}

void MainWindow::openCheckpoint(const QString& path)
{
    const int job = ++m_job;
    statusBar()->showMessage(tr("Opening %1…").arg(path));
    auto* watcher = new QFutureWatcher<std::shared_ptr<Opened>>(this);
    connect(watcher, &QFutureWatcher<std::shared_ptr<Opened>>::finished, this, [this, watcher, job] {
        showOpened(job, watcher->result());
        watcher->deleteLater();
    });
    watcher->setFuture(QtConcurrent::run([path] {
        auto r = std::make_shared<Opened>();
        r->path = path;
        try {
            Checkpoint ck = Checkpoint::open(path.toStdString());
            auto tree = std::make_shared<ModuleTree>(buildModuleTree(ck, std::nullopt));
            r->summary = QObject::tr("%1 — %2, %3, %4 in %5 modules%6")
                             .arg(QString::fromStdString(ck.weightsPath()))
                             .arg(QString::fromStdString(tree->modelType().empty() ? "unknown model_type" : tree->modelType()))
                             .arg(QString::fromLatin1(dtypeTorchName(*tree->dtype())))
                             .arg(ModuleTreeModel::formatBytes(tree->root().bytes))
                             .arg(tree->modules().size())
                             .arg(ck.indexOnly() ? QObject::tr(" (index only: shapes from config.json)") : QString());
            r->tree = std::move(tree);
        } catch (const std::exception& e) {
            r->error = QString::fromStdString(e.what());
        }
        return r;
    }));
}

void MainWindow::showOpened(int job, const std::shared_ptr<Opened>& r)
{
    if (job != m_job)
        return; // a newer open superseded this one
    if (!r->error.isEmpty()) {
        statusBar()->showMessage(tr("Could not open %1").arg(r->path));
        // Window-modal but not blocking: the window stays usable behind it.
        auto* box = new QMessageBox(QMessageBox::Warning, tr("Cannot open checkpoint"), r->error, QMessageBox::Ok, this);
        box->setObjectName("openError");
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open();
        return;
    }
    m_model->setTree(r->tree);
    m_view->expandToDepth(1);
    m_view->resizeColumnToContents(ModuleTreeModel::ClassColumn);
    m_summary->setText(r->summary);
    // A plan of the previous checkpoint must not outlive it, even if this one cannot be planned.
    m_mapModel->clear();
    m_totals->setText(tr("No plan yet."));
    m_exportAction->setEnabled(false);
    replan(m_budgets->options());
    setWindowTitle(tr("%1 — Stowage").arg(r->path));
    statusBar()->showMessage(tr("Opened %1").arg(r->path), 5000);
    rememberRecent(r->path);
}

void MainWindow::rememberRecent(const QString& path)
{
    QSettings s;
    QStringList recent = s.value("recentCheckpoints").toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > 8)
        recent.removeLast();
    s.setValue("recentCheckpoints", recent);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = QSettings().value("recentCheckpoints").toStringList();
    for (const QString& p : recent)
        m_recentMenu->addAction(p, this, [this, p] { openCheckpoint(p); });
    m_recentMenu->setEnabled(!recent.isEmpty());
}

} // namespace stowage
