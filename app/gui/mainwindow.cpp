#include "mainwindow.h"

#include "budgetbarsview.h"
#include "budgetmodel.h"
#include "devicemapmodel.h"
#include "display.h"
#include "fixedcoststiming.h"
#include "workerclient.h"
#include "hubcachedialog.h"
#include "moduletreemodel.h"
#include "planningpage.h"
#include "runcontroller.h"
#include "runpage.h"
#include "plancontrols.h"
#include "snippets.h"
#include "stowage/checkpoint.h"
#include "stowage/fileio.h"
#include "stowage/moduletree.h"
#include "tintedbanner.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QShortcut>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStorageInfo>
#include <QStyleFactory>
#include <QTabWidget>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace stowage {

namespace {
// The demo's own budgets (applyDemoBudgets).
constexpr quint64 kDemoGpuCapacity = 8ull << 20, kDemoGpuBudget = 4ull << 20, kDemoRamBudget = 3ull << 20;
} // namespace

struct MainWindow::Opened {
    QString path;
    QString folder;
    std::shared_ptr<const ModuleTree> tree;
    std::optional<ModelConfig> config;
    DType dtype = DType::BF16;
    QString weightsPath;
    bool indexOnly = false;
    QString error;
    QString cannotRun; // why this checkpoint cannot run here, or empty
};

MainWindow::MainWindow() : MainWindow(Options{}) {}

MainWindow::MainWindow(Options options, QWidget* parent) : QMainWindow(parent), m_options(options)
{
    setObjectName("mainWindow");
    setWindowTitle(tr("Stowage"));
    setAcceptDrops(true);
    resize(1400, 900);
    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(8, 6, 8, 4);

    m_summary = new QLabel(tr("Open a checkpoint folder, index or weights file (Ctrl+O), drop one here, or browse the Hub cache (Ctrl+Shift+H)."), central);
    m_summary->setObjectName("summary");
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setWordWrap(true);

    m_errorBar = new QWidget(central);
    m_errorBar->setObjectName("errorBar");
    followPalette(m_errorBar, [](const QPalette& p) {
        return bannerStyle(p, QStringLiteral("#errorBar"), errorTint(), errorInk(), QString());
    });
    auto* el = new QHBoxLayout(m_errorBar);
    el->setContentsMargins(8, 4, 4, 4);
    m_errorLabel = new QLabel(m_errorBar);
    m_errorLabel->setWordWrap(true);
    m_errorLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* close = new QToolButton(m_errorBar);
    close->setText(QStringLiteral("✕"));
    close->setAutoRaise(true);
    el->addWidget(m_errorLabel, 1);
    el->addWidget(close);
    m_errorBar->hide();
    connect(close, &QToolButton::clicked, m_errorBar, &QWidget::hide);

    m_model = new ModuleTreeModel(this);
    m_view = new QTreeView(central);
    m_view->setObjectName("moduleTree");
    m_view->setModel(m_model);
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->header()->setSectionResizeMode(ModuleTreeModel::NameColumn, QHeaderView::ResizeToContents);
    m_view->header()->setSectionResizeMode(ModuleTreeModel::DeviceColumn, QHeaderView::ResizeToContents);
    // Every column at its contents' width, so Share and the rest are not cut at the default size.
    for (int c : {int(ModuleTreeModel::SizeColumn), int(ModuleTreeModel::ShareColumn), int(ModuleTreeModel::ParamsColumn)})
        m_view->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    m_view->header()->setStretchLastSection(false);

    m_page = new PlanningPage(m_model, central);
    m_page->setObjectName("planningPage");
    auto* scroll = new QScrollArea(central);
    scroll->setWidget(m_page);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);

    m_splitter = new QSplitter(Qt::Horizontal, central);
    m_splitter->setObjectName("mainSplitter");
    m_splitter->addWidget(m_view);
    m_splitter->addWidget(scroll);
    m_splitter->setStretchFactor(0, 2);
    m_splitter->setStretchFactor(1, 3);
    m_splitter->setSizes({600, 800}); // the tree's six columns fit at the default 1400 px
    m_run = new RunPage(m_page, m_options.workerProgram, central);
    m_run->setObjectName("runPage");
    m_pages = new QTabWidget(central);
    m_pages->setObjectName("pages");
    m_pages->setDocumentMode(true);
    m_pages->addTab(m_splitter, tr("Plan"));
    m_pages->addTab(m_run, tr("Run"));
    // Plan and Run switch from anywhere in the window, as tabs do in other Qt
    // apps (a QTabWidget alone only sees Ctrl+Tab while it has the focus).
    const std::pair<QKeySequence, int> tabKeys[] = {{QKeySequence(Qt::CTRL | Qt::Key_PageDown), 1},
                                                    {QKeySequence(Qt::CTRL | Qt::Key_Tab), 1},
                                                    {QKeySequence(Qt::CTRL | Qt::Key_PageUp), -1},
                                                    {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Backtab), -1}};
    for (const auto& [key, step] : tabKeys) {
        auto* sc = new QShortcut(key, this);
        connect(sc, &QShortcut::activated, this, [this, step = step] {
            m_pages->setCurrentIndex((m_pages->currentIndex() + step + m_pages->count()) % m_pages->count());
        });
    }
    layout->addWidget(m_summary);
    layout->addWidget(m_errorBar);
    layout->addWidget(m_pages, 1);
    setCentralWidget(central);

    connect(m_page, &PlanningPage::planChanged, this, &MainWindow::planChanged);
    connect(m_page, &PlanningPage::moduleActivated, this, &MainWindow::syncTreeSelection);
    connect(m_view->selectionModel(), &QItemSelectionModel::currentChanged, this, [this](const QModelIndex& current) {
        if (!m_syncing)
            m_page->selectModule(current.isValid() ? current.data(ModuleTreeModel::ModuleIndexRole).toInt() : -1);
    });
    connect(m_page->budgetBars(), &BudgetBarsView::customGpuRequested, this, &MainWindow::addCustomGpu);

    buildMenus();
    if (m_options.probeMachine) {
        probeMachine();
    } else {
        // A fixed machine, for tests and screenshots: no GPU, 64 GiB of RAM, a 2 TiB disk.
        m_page->budgetModel()->setMachine({}, {Device::cpu(), tr("RAM"), {}, false, 64ull << 30, 64ull << 30, 32ull << 30},
                                          {Device::disk(), tr("offload folder"), {}, false, 2ull << 40, 2ull << 40, 2ull << 40});
    }
    if (m_options.restoreSettings) {
        restoreBudgets();
        QSettings s;
        restoreGeometry(s.value("window/geometry").toByteArray());
        m_splitter->restoreState(s.value("window/splitter").toByteArray());
    }
    statusBar()->showMessage(tr("Ready"));
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus()
{
    auto add = [this](QMenu* menu, const QString& name, const QString& text, const QKeySequence& key, auto slot) {
        QAction* a = menu->addAction(text, this, slot);
        a->setObjectName(name);
        if (!key.isEmpty())
            a->setShortcut(key);
        return a;
    };
    QMenu* file = menuBar()->addMenu(tr("&File"));
    add(file, "openFolder", tr("&Open Checkpoint Folder…"), QKeySequence::Open, &MainWindow::chooseFolder);
    add(file, "openFile", tr("Open &Weights, Index or config File…"), QKeySequence(tr("Ctrl+Shift+O")), &MainWindow::chooseFile);
    add(file, "hubCache", tr("Browse the &Hub Cache…"), QKeySequence(tr("Ctrl+Shift+H")), [this] { showHubCache(); });
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    file->addSeparator();
    add(file, "importMap", tr("&Import Device Map…"), QKeySequence(tr("Ctrl+I")), &MainWindow::chooseImportFile);
    m_planActions << add(file, "exportMap", tr("&Export Device Map…"), QKeySequence(tr("Ctrl+E")), &MainWindow::chooseExportFile);
    m_planActions << add(file, "copyTransformers", tr("Copy &transformers Snippet"), QKeySequence(tr("Ctrl+Shift+C")),
                         [this] { copyTransformersSnippet(); });
    m_planActions << add(file, "copyAccelerate", tr("Copy &Accelerate Snippet"), QKeySequence(tr("Ctrl+Alt+C")),
                         [this] { copyAccelerateSnippet(); });
    file->addSeparator();
    add(file, "quit", tr("&Quit"), QKeySequence::Quit, [this] { close(); });
    for (QAction* a : m_planActions)
        a->setEnabled(false);
    action("importMap")->setEnabled(false);

    QMenu* devices = menuBar()->addMenu(tr("&Devices"));
    QMenu* sim = devices->addMenu(tr("Add &Simulated GPU"));
    for (QAction* a : m_page->budgetBars()->addGpuButton()->menu()->actions())
        sim->addAction(a);
    add(devices, "resetBudgets", tr("&Reset Budgets to This Machine"), {}, [this] {
        QSettings().remove("budgets");
        m_budgetsBeforeDemo.reset();
        m_page->setBudgetNote({});
        probeMachine();
    });

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    auto runAction = [&](const QString& name, const QString& text, const QKeySequence& key, void (RunPage::*slot)()) {
        add(run, name, text, key, [this, slot] {
            m_pages->setCurrentWidget(m_run);
            (m_run->*slot)();
        });
    };
    runAction("dispatch", tr("&Dispatch the Map"), QKeySequence(tr("F5")), &RunPage::dispatch);
    runAction("generate", tr("&Generate"), QKeySequence(tr("Ctrl+Return")), &RunPage::generate);
    runAction("stepToken", tr("Step One &Token"), QKeySequence(tr("F10")), &RunPage::stepOneToken);
    runAction("stopRun", tr("&Stop"), QKeySequence(tr("Shift+F5")), &RunPage::stop);
    runAction("unload", tr("&Unload"), {}, &RunPage::unload);
    // The Run menu offers what the page can do now, as its buttons do.
    auto syncRunActions = [this] {
        action("dispatch")->setEnabled(m_run->canDispatch());
        action("generate")->setEnabled(m_run->canGenerate());
        action("stepToken")->setEnabled(m_run->canGenerate());
        action("stopRun")->setEnabled(m_run->canStop());
        action("unload")->setEnabled(m_run->canUnload());
    };
    connect(m_run, &RunPage::actionsChanged, this, syncRunActions);
    syncRunActions();

    QMenu* view = menuBar()->addMenu(tr("&View"));
    auto* themes = new QActionGroup(this);
    const int saved = QSettings().value("view/theme", 0).toInt();
    const std::pair<Theme, QString> items[] = {{Theme::System, tr("&System Colours")}, {Theme::Light, tr("&Light")}, {Theme::Dark, tr("&Dark")}};
    for (const auto& [theme, label] : items) {
        QAction* a = view->addAction(label);
        a->setCheckable(true);
        a->setChecked(static_cast<int>(theme) == saved);
        themes->addAction(a);
        connect(a, &QAction::triggered, this, [theme = theme] {
            QSettings().setValue("view/theme", static_cast<int>(theme));
            applyTheme(theme);
        });
    }
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    add(help, "openDemo", tr("Open the &Demo Model"), {}, [this] { openCheckpoint(demoPath()); });
    add(help, "about", tr("&About Stowage"), {}, [this] {
        QMessageBox::about(this, tr("About Stowage"),
                           tr("<b>Stowage %1</b><p>Plans and runs large language models split across GPUs, RAM and "
                              "disk, as transformers' <code>device_map</code> would place them.</p>"
                              "<p>The demo model is a small Llama trained on the King James Bible (public domain).</p>")
                               .arg(QApplication::applicationVersion()));
    });
    rebuildRecentMenu();
}

QAction* MainWindow::action(const QString& objectName) const { return findChild<QAction*>(objectName); }

BudgetModel* MainWindow::budgetModel() const { return m_page->budgetModel(); }

DeviceMapModel* MainWindow::deviceMapModel() const { return m_page->deviceMapModel(); }

QString MainWindow::summary() const { return m_summary->text(); }

QString MainWindow::totalsText() const { return m_page->totalsText(); }

QString MainWindow::errorText() const { return m_errorBar->isVisible() ? m_errorLabel->text() : QString(); }

void MainWindow::showError(const QString& text)
{
    m_errorLabel->setText(text);
    m_errorBar->setVisible(!text.isEmpty());
}

void MainWindow::applyTheme(Theme theme)
{
    if (theme == Theme::System) {
        QApplication::setPalette(QApplication::style()->standardPalette());
        return;
    }
    QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
    QPalette p = QApplication::style()->standardPalette();
    if (theme == Theme::Dark) {
        p.setColor(QPalette::Window, QColor(0x2b2b2b));
        p.setColor(QPalette::WindowText, QColor(0xe6e6e6));
        p.setColor(QPalette::Base, QColor(0x1e1e1e));
        p.setColor(QPalette::AlternateBase, QColor(0x262626));
        p.setColor(QPalette::Text, QColor(0xe6e6e6));
        p.setColor(QPalette::Button, QColor(0x353535));
        p.setColor(QPalette::ButtonText, QColor(0xe6e6e6));
        p.setColor(QPalette::Highlight, QColor(0x3d7bd9));
        p.setColor(QPalette::HighlightedText, Qt::white);
        p.setColor(QPalette::ToolTipBase, QColor(0x353535));
        p.setColor(QPalette::ToolTipText, QColor(0xe6e6e6));
        p.setColor(QPalette::PlaceholderText, QColor(0x8a8a8a));
        p.setColor(QPalette::Mid, QColor(0x555555));
        p.setColor(QPalette::Dark, QColor(0x1a1a1a));
        p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x777777));
        p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x777777));
    }
    QApplication::setPalette(p);
}

void MainWindow::probeMachine()
{
    // Fast figures now (/proc/meminfo, NVML free memory, disk space); names and
    // bandwidths from the self-test later, off the GUI thread.
    const MachineMemory mem = detectMachineMemory();
    // Defaults a person would type: whole GiB below what is free.
    auto round = [](quint64 b) { return b > (4ull << 30) ? b / (1ull << 30) * (1ull << 30) : b / (1ull << 20) * (1ull << 20); };
    QVector<BudgetDevice> gpus;
    for (uint64_t free : mem.gpuFreeBytes) {
        BudgetDevice g;
        g.hardware = tr("NVIDIA GPU");
        g.free = g.capacity = free;
        g.budget = round(free);
        gpus.push_back(g);
    }
    const QString offload = QStandardPaths::writableLocation(QStandardPaths::CacheLocation);
    QDir().mkpath(offload);
    const QStorageInfo storage(offload);
    BudgetDevice cpu{Device::cpu(), tr("RAM"), {}, false, mem.ramAvailableBytes, mem.ramAvailableBytes,
                     round(mem.ramAvailableBytes / 10 * 9)};
    BudgetDevice disk{Device::disk(), tr("offload folder on %1").arg(storage.rootPath()), {}, false,
                      quint64(storage.bytesAvailable()), quint64(storage.bytesAvailable()), round(quint64(storage.bytesAvailable()))};
    budgetModel()->setMachine(gpus, cpu, disk);

    auto* watcher = new QFutureWatcher<HardwareProfile>(this);
    connect(watcher, &QFutureWatcher<HardwareProfile>::finished, this, [this, watcher] {
        const HardwareProfile hw = watcher->result();
        watcher->deleteLater();
        for (size_t i = 0; i < hw.gpus.size(); ++i)
            if (const int row = budgetModel()->rowOf(Device::gpu(int(i))); row >= 0 && !budgetModel()->at(row).simulated)
                budgetModel()->setHardware(row, QString::fromStdString(hw.gpus[i].name), hw.gpus[i].memoryBytes);
        m_page->setThisMachine(hw);
        if (m_options.timeFixedCosts && hw.fixedCosts.empty())
            timeFixedCosts();
    });
    watcher->setFuture(QtConcurrent::run([] { return measureThisMachine(); }));
}

void MainWindow::timeFixedCosts()
{
    if (m_timing)
        return;
    m_timing = new FixedCostTiming(m_options.workerProgram.isEmpty() ? WorkerClient::defaultProgram()
                                                                     : m_options.workerProgram,
                                   this);
    m_timingStatus = new QWidget(statusBar());
    m_timingStatus->setObjectName("fixedCostTiming");
    auto* row = new QHBoxLayout(m_timingStatus);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(new QLabel(tr("Timing this machine for the predictions (about 15 s, once)…"), m_timingStatus));
    auto* stop = new QPushButton(tr("Stop"), m_timingStatus);
    stop->setToolTip(tr("Predictions count bytes only until this machine's fixed costs per token and layer are "
                        "timed (stowage-cli hardware times them too)"));
    row->addWidget(stop);
    statusBar()->addPermanentWidget(m_timingStatus);
    connect(stop, &QPushButton::clicked, this, [this] {
        if (!m_timing) // done a moment ago: the button goes with the next event loop pass
            return;
        m_timing->stop();
        endFixedCostTiming(tr("Stopped timing this machine: predictions count bytes only, without its fixed costs"));
    });
    connect(m_timing, &FixedCostTiming::finished, this, [this](const HardwareProfile& hw) {
        m_page->setThisMachine(hw);
        endFixedCostTiming(tr("Predictions now count this machine's fixed costs per token and layer"));
    });
    connect(m_timing, &FixedCostTiming::failed, this, [this](const QString& why) {
        endFixedCostTiming(tr("Could not time this machine's fixed costs: %1").arg(why));
    });
    m_timing->start();
}

void MainWindow::endFixedCostTiming(const QString& message)
{
    if (m_timingStatus) {
        statusBar()->removeWidget(m_timingStatus);
        m_timingStatus->deleteLater();
        m_timingStatus = nullptr;
    }
    if (m_timing) {
        m_timing->deleteLater();
        m_timing = nullptr;
    }
    statusBar()->showMessage(message, 10000);
}

MainWindow::BudgetState MainWindow::budgetState() const
{
    BudgetState state;
    const BudgetModel* m = budgetModel();
    for (int r = 0; r < m->rowCount(); ++r) {
        const BudgetDevice& d = m->at(r);
        if (d.simulated)
            state.simulated << QStringLiteral("%1|%2|%3").arg(d.preset, d.hardware).arg(d.capacity);
        state.budgets.insert(QString::fromStdString(d.device.name()), d.budget);
    }
    return state;
}

void MainWindow::setBudgetState(const BudgetState& state)
{
    BudgetModel* m = budgetModel();
    for (int r = m->rowCount() - 1; r >= 0; --r)
        m->removeSimulatedGpu(r); // false (nothing done) for this machine's devices
    for (const QString& spec : state.simulated) {
        const QStringList f = spec.split(QLatin1Char('|'));
        if (f.size() == 3)
            m->addSimulatedGpu(f[1], f[0], f[2].toULongLong());
    }
    for (int r = 0; r < m->rowCount(); ++r) {
        const auto it = state.budgets.constFind(QString::fromStdString(m->at(r).device.name()));
        if (it != state.budgets.constEnd())
            m->setBudget(r, it.value());
    }
}

void MainWindow::restoreBudgets()
{
    QSettings s;
    BudgetState state;
    state.simulated = s.value("budgets/simulated").toStringList();
    s.beginGroup("budgets");
    for (const QString& key : s.childKeys())
        if (key != QLatin1String("simulated"))
            state.budgets.insert(key, s.value(key).toULongLong());
    s.endGroup();
    setBudgetState(state);
}

void MainWindow::saveSettings() const
{
    if (!m_options.restoreSettings)
        return;
    QSettings s;
    s.setValue("window/geometry", saveGeometry());
    s.setValue("window/splitter", m_splitter->saveState());
    // The demo's budgets are the demo's: what the user had before it is what they keep.
    const BudgetState state = m_budgetsBeforeDemo ? *m_budgetsBeforeDemo : budgetState();
    s.remove("budgets");
    for (auto it = state.budgets.constBegin(); it != state.budgets.constEnd(); ++it)
        s.setValue(QStringLiteral("budgets/") + it.key(), QVariant::fromValue<quint64>(it.value()));
    s.setValue("budgets/simulated", state.simulated);
}

QString MainWindow::demoPath()
{
    const QString installed = QDir(QCoreApplication::applicationDirPath()).filePath("../share/stowage/demo");
    return QFileInfo::exists(installed + "/config.json") ? QDir::cleanPath(installed) : QStringLiteral(STOWAGE_BUILD_DEMO_DIR);
}

void MainWindow::applyDemoBudgets(bool demo)
{
    if (!m_options.demoBudgets || demo == bool(m_budgetsBeforeDemo))
        return;
    if (!demo) {
        const BudgetState mine = *m_budgetsBeforeDemo;
        m_budgetsBeforeDemo.reset();
        setBudgetState(mine);
        m_page->setBudgetNote({});
        return;
    }
    // The demo weighs ~6.5 MB in float32: an embedding and a head of 1 MiB each
    // and six layers of ~0.7 MiB. These budgets put it on all three kinds of
    // memory, so its first screen shows what Stowage is for.
    m_budgetsBeforeDemo = budgetState();
    BudgetState demoState;
    demoState.simulated << QStringLiteral("|%1|%2").arg(tr("demo GPU")).arg(kDemoGpuCapacity);
    demoState.budgets.insert(QStringLiteral("0"), kDemoGpuBudget);
    demoState.budgets.insert(QStringLiteral("cpu"), kDemoRamBudget);
    setBudgetState(demoState);
    m_page->setBudgetNote(tr("Demo budgets: a simulated %1 GPU and %2 of RAM, so the demo model lands on a GPU, in RAM "
                             "and on disk. Drag the bars to change them; opening another model brings your own budgets back.")
                              .arg(formatBytes(kDemoGpuBudget), formatBytes(kDemoRamBudget)));
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    saveSettings();
    m_run->controller()->shutdown();
    QMainWindow::closeEvent(event);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls() && event->mimeData()->urls().value(0).isLocalFile())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const QString path = event->mimeData()->urls().value(0).toLocalFile();
    if (!path.isEmpty()) {
        openCheckpoint(path);
        event->acceptProposedAction();
    }
}

void MainWindow::addCustomGpu()
{
    auto* dlg = new QInputDialog(this);
    dlg->setObjectName("customGpuDialog");
    dlg->setAttribute(Qt::WA_DeleteOnClose);
    dlg->setWindowTitle(tr("Add Simulated GPU"));
    dlg->setLabelText(tr("Memory of the simulated GPU (e.g. 48GiB, 96GB):"));
    dlg->setTextValue(QStringLiteral("48GiB"));
    connect(dlg, &QInputDialog::textValueSelected, this, [this](const QString& text) {
        try {
            const quint64 bytes = parseSize(text.trimmed().toStdString(), "GPU memory");
            budgetModel()->addSimulatedGpu(tr("GPU with %1").arg(formatBytes(bytes)), QString(), bytes);
        } catch (const std::exception& e) {
            showError(QString::fromStdString(e.what()));
        }
    });
    dlg->open();
}

void MainWindow::updateSummary()
{
    // The tree on screen: the dtype chosen, and a quantized checkpoint sized
    // as its quantizer leaves it on the plan's hardware.
    const std::shared_ptr<const ModuleTree> tree = m_page->tree();
    if (!tree || m_summaryOf.first.isEmpty())
        return;
    m_summary->setText(tr("<b>%1</b> — %2, %3, %4 in %5 modules%6")
                           .arg(m_summaryOf.first.toHtmlEscaped())
                           .arg(QString::fromStdString(tree->modelType().empty() ? "unknown model_type" : tree->modelType()))
                           .arg(QString::fromLatin1(dtypeTorchName(tree->dtype().value_or(DType::F32))))
                           .arg(formatBytes(tree->root().bytes))
                           .arg(tree->modules().size())
                           .arg(m_summaryOf.second ? tr(" <i>(index only: planned before download)</i>") : QString()));
}

void MainWindow::planChanged()
{
    updateSummary();
    const bool has = m_page->plan() != nullptr;
    for (QAction* a : m_planActions)
        a->setEnabled(has);
    m_run->updateButtons();
}

void MainWindow::syncTreeSelection(int module)
{
    const QModelIndex idx = m_model->indexOfModule(module);
    if (!idx.isValid())
        return;
    m_syncing = true;
    m_view->scrollTo(idx);
    m_view->selectionModel()->setCurrentIndex(idx, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    m_syncing = false;
    m_page->selectModule(module);
}

void MainWindow::chooseExportFile()
{
    auto* dlg = new QFileDialog(this, tr("Export Device Map"), QStringLiteral("device_map.json"), tr("Device map (*.json)"));
    dlg->setAcceptMode(QFileDialog::AcceptSave);
    dlg->setAttribute(Qt::WA_DeleteOnClose);
    connect(dlg, &QFileDialog::fileSelected, this, [this](const QString& f) { exportDeviceMap(f); });
    dlg->open();
}

void MainWindow::chooseImportFile()
{
    auto* dlg = new QFileDialog(this, tr("Import Device Map"), QString(), tr("Device map (*.json)"));
    dlg->setFileMode(QFileDialog::ExistingFile);
    dlg->setAttribute(Qt::WA_DeleteOnClose);
    connect(dlg, &QFileDialog::fileSelected, this, [this](const QString& f) { importDeviceMap(f); });
    dlg->open();
}

bool MainWindow::exportDeviceMap(const QString& path)
{
    if (!m_page->plan())
        return false;
    try {
        writeFileAtomically(path.toStdString(), deviceMapToJson(m_page->plan()->deviceMap) + "\n");
    } catch (const std::exception& e) {
        showError(tr("Cannot export the device map: %1").arg(QString::fromStdString(e.what())));
        return false;
    }
    statusBar()->showMessage(tr("Exported %1").arg(path), 5000);
    return true;
}

bool MainWindow::importDeviceMap(const QString& path)
{
    std::string text;
    try {
        text = readTextFile(path.toStdString());
    } catch (const std::exception& e) {
        showError(tr("Cannot import: %1").arg(QString::fromStdString(e.what())));
        return false;
    }
    if (!m_page->importMap(QString::fromStdString(text), path))
        return false;
    statusBar()->showMessage(tr("Imported %1").arg(path), 5000);
    return true;
}

QString MainWindow::copyTransformersSnippet()
{
    const QString s = transformersSnippet(m_page->snippetInput());
    QGuiApplication::clipboard()->setText(s);
    statusBar()->showMessage(tr("Copied a transformers snippet that loads this model with this map"), 5000);
    return s;
}

QString MainWindow::copyAccelerateSnippet()
{
    const QString s = accelerateSnippet(m_page->snippetInput());
    QGuiApplication::clipboard()->setText(s);
    statusBar()->showMessage(tr("Copied an Accelerate snippet that loads this model with this map"), 5000);
    return s;
}

HubCacheDialog* MainWindow::showHubCache()
{
    if (!m_hub) {
        m_hub = new HubCacheDialog(this);
        connect(m_hub, &HubCacheDialog::openRequested, this, &MainWindow::openCheckpoint);
    }
    m_hub->show();
    m_hub->raise();
    m_hub->rescan();
    return m_hub;
}

void MainWindow::chooseFolder()
{
    auto* dlg = new QFileDialog(this, tr("Open Checkpoint Folder"));
    dlg->setFileMode(QFileDialog::Directory);
    dlg->setOption(QFileDialog::ShowDirsOnly);
    dlg->setAttribute(Qt::WA_DeleteOnClose);
    connect(dlg, &QFileDialog::fileSelected, this, &MainWindow::openCheckpoint);
    dlg->open();
}

void MainWindow::chooseFile()
{
    auto* dlg = new QFileDialog(this, tr("Open Weights, Index or config File"), QString(),
                                tr("Checkpoints (*.safetensors *.json *.bin)"));
    dlg->setFileMode(QFileDialog::ExistingFile);
    dlg->setAttribute(Qt::WA_DeleteOnClose);
    connect(dlg, &QFileDialog::fileSelected, this, [this](const QString& f) {
        // config.json stands for its folder (plan before download).
        openCheckpoint(QFileInfo(f).fileName() == QLatin1String("config.json") ? QFileInfo(f).absolutePath() : f);
    });
    dlg->open();
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
            r->dtype = tree->dtype().value_or(DType::F32);
            r->weightsPath = QString::fromStdString(ck.weightsPath());
            r->indexOnly = ck.indexOnly();
            r->folder = QString::fromStdString(ck.folder());
            r->config = ck.config();
            if (ck.indexOnly())
                r->cannotRun = QObject::tr("Only config.json and the index are here: the plan is made before "
                                           "download; download the shards to run this model.");
            else if (!tree->knownArchitecture())
                r->cannotRun = QObject::tr("model_type '%1' has no runner: Stowage plans it from its tensor "
                                           "names but cannot run it.")
                                   .arg(QString::fromStdString(tree->modelType()));
            else if (const Quantization* q = tree->quantization(); q && !quantizationRuns(*q))
                r->cannotRun = QObject::tr("%1 weights (quantization_config) are sized and planned as transformers "
                                           "5.6 plans them, but can be planned, not run, here: Stowage runs MXFP4 "
                                           "and block-wise FP8 checkpoints; an unquantized checkpoint of the "
                                           "model runs.")
                                   .arg(QString::fromStdString(q->label()));
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
        statusBar()->showMessage(tr("Could not open %1").arg(r->path), 5000);
        // In the window, not a dialog: the previous model stays open and usable.
        showError(tr("Cannot open %1: %2").arg(r->path, r->error));
        emit checkpointOpened(false, r->error);
        return;
    }
    showError({});
    m_model->setTree(nullptr); // a different model: reset rather than re-size
    applyDemoBudgets(!r->folder.isEmpty() && QFileInfo(r->folder).canonicalFilePath() == QFileInfo(demoPath()).canonicalFilePath());
    m_page->setModel(r->tree, r->config, r->dtype, r->folder);
    m_run->modelOpened(r->cannotRun);
    m_view->expandToDepth(1);
    m_view->resizeColumnToContents(ModuleTreeModel::ClassColumn);
    m_summaryOf = {r->weightsPath, r->indexOnly};
    updateSummary();
    action("importMap")->setEnabled(true);
    setWindowTitle(tr("%1 — Stowage").arg(r->path));
    statusBar()->showMessage(tr("Opened %1").arg(r->path), 5000);
    rememberRecent(r->path);
    emit checkpointOpened(true, {});
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
