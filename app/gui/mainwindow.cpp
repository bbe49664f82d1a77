#include "mainwindow.h"

#include "moduletreemodel.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/moduletree.h"

#include <QAction>
#include <QApplication>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
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
    m_view->header()->setSectionResizeMode(ModuleTreeModel::NameColumn, QHeaderView::Stretch);
    layout->addWidget(m_summary);
    layout->addWidget(m_view);
    setCentralWidget(central);

    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* openFolder = file->addAction(tr("&Open Checkpoint Folder…"), this, &MainWindow::chooseFolder);
    openFolder->setShortcut(QKeySequence::Open);
    QAction* openFile = file->addAction(tr("Open &Weights or Index File…"), this, &MainWindow::chooseFile);
    openFile->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), qApp, &QApplication::quit);
    quit->setShortcut(QKeySequence::Quit);
    rebuildRecentMenu();
    statusBar()->showMessage(tr("Ready"));
}

QString MainWindow::summary() const { return m_summary->text(); }

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
