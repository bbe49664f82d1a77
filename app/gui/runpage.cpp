#include "runpage.h"

#include "budgetmodel.h"
#include "chatoptions.h"
#include "display.h"
#include "placementmap.h"
#include "planningpage.h"
#include "runcharts.h"
#include "runcontroller.h"
#include "samplesmodel.h"
#include "snippets.h"
#include "stowage/moduledevices.h"
#include "stowage/placementlayout.h"
#include "themecolors.h"
#include "timelinepanel.h"
#include "tintedbanner.h"
#include "tracemodel.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QTableView>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>

namespace stowage {

namespace {
QString deviceText(const QString& device)
{
    const auto d = Device::parse(device.toStdString());
    return d ? deviceLabel(*d) : device;
}

QString captionStyle(const QWidget* w, const QString& tint) // the tint and text follow the palette (themecolors.h)
{
    return QStringLiteral("QLabel { padding: 6px; border-radius: 3px; %1 }").arg(tintStyle(w->palette(), QColor(tint)));
}
} // namespace

RunPage::RunPage(PlanningPage* planning, const QString& program, QWidget* parent)
    : QWidget(parent),
      m_planning(planning),
      m_controller(new RunController(program, this)),
      m_samples(new SamplesModel(this)),
      m_trace(new TraceModel(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(6);

    m_messageBar = new QWidget(this);
    m_messageBar->setObjectName("runMessageBar");
    auto* ml = new QHBoxLayout(m_messageBar);
    ml->setContentsMargins(8, 4, 4, 4);
    m_message = new QLabel(m_messageBar);
    m_message->setObjectName("runMessage");
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* close = new QToolButton(m_messageBar);
    close->setText(QStringLiteral("✕"));
    close->setAutoRaise(true);
    ml->addWidget(m_message, 1);
    ml->addWidget(close);
    m_messageBar->hide();
    followPalette(m_messageBar, [this](const QPalette& p) { return messageBarStyle(p); });
    connect(close, &QToolButton::clicked, m_messageBar, &QWidget::hide);
    layout->addWidget(m_messageBar);
    // The headroom alarm: a device near or past its budget while a run goes.
    m_headroom = new QLabel(this);
    m_headroom->setObjectName("headroomAlarm");
    m_headroom->setWordWrap(true);
    followPalette(m_headroom, [](const QPalette& p) { return bannerStyle(p, QStringLiteral("QLabel"), errorTint(), errorInk()); });
    m_headroom->hide();
    layout->addWidget(m_headroom);

    auto* split = new QSplitter(Qt::Horizontal, this);
    split->setObjectName("runSplitter");
    split->addWidget(buildControls());

    auto* right = new QSplitter(Qt::Vertical, split);
    auto* mapBox = new QGroupBox(tr("Placement that runs"), right);
    auto* mapLayout = new QVBoxLayout(mapBox);
    m_map = new PlacementMap(mapBox);
    m_map->setObjectName("runPlacementMap");
    m_map->setShowsMovement(true);
    m_caption = new QLabel(tr("Dispatch the map, then generate, or step one token in slow motion to see each stage."), mapBox);
    m_caption->setObjectName("teachingCaption");
    m_caption->setWordWrap(true);
    m_caption->setStyleSheet(captionStyle(this, QStringLiteral("#eef1f5")));
    mapLayout->addWidget(m_map);
    mapLayout->addWidget(m_caption);
    right->addWidget(mapBox);
    right->addWidget(buildOutput());

    m_tabs = new QTabWidget(right);
    m_tabs->setObjectName("runTabs");
    m_charts = new RunCharts(m_samples, m_tabs);
    m_charts->setObjectName("runCharts");
    m_tabs->addTab(m_charts, tr("Graphs"));
    m_timeline = new TimelinePanel(m_trace, this);
    m_tabs->addTab(m_timeline, tr("Execution timeline"));
    right->addWidget(m_tabs);
    right->setStretchFactor(0, 0);
    right->setStretchFactor(1, 1);
    right->setStretchFactor(2, 3);
    mapBox->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);
    split->addWidget(right);
    split->setStretchFactor(0, 0);
    split->setStretchFactor(1, 1);
    layout->addWidget(split, 1);

    RunController* c = m_controller;
    connect(c, &RunController::stateChanged, this, &RunPage::updateButtons);
    connect(c, &RunController::progress, this, [this](int permille, const QString& what) {
        m_progress->setValue(permille);
        m_status->setText(tr("Dispatching %1…").arg(QFileInfo(what).fileName()));
    });
    connect(c, &RunController::loaded, this, &RunPage::onLoaded);
    connect(c, &RunController::sampleAvailable, m_samples, &SamplesModel::addSample);
    connect(c, &RunController::sampleAvailable, this, [this](const RunSample& s) {
        const QString alarm = m_samples->headroomAlarm(s);
        m_headroom->setText(alarm);
        m_headroom->setVisible(!alarm.isEmpty());
    });
    connect(c, &RunController::traceAvailable, this, &RunPage::onTrace);
    connect(c, &RunController::tokenAvailable, this, &RunPage::onToken);
    connect(c, &RunController::done, this, &RunPage::onDone);
    connect(c, &RunController::warning, this, [this](const QString& m) { showMessage(m, false); });
    connect(c, &RunController::cancelled, this, [this] {
        m_progress->setValue(0);
        m_status->setText(tr("Dispatch cancelled; nothing is loaded."));
        emit dispatched(false);
    });
    connect(c, &RunController::unloaded, this, [this] {
        if (m_controller->state() == RunController::State::Loading)
            return; // a new Dispatch replaced the model: its load is under way
        m_status->setText(tr("Nothing loaded: the worker gave every byte of the model back."));
        m_charts->clearDispatchBytes();
        resetTeaching();
        if (m_running.plan)
            m_mapSummary->setText(tr("Nothing loaded: the strip shows the map of the last Dispatch."));
        updateButtons();
    });
    connect(c, &RunController::failed, this, [this](const QString& m) {
        showMessage(tr("The worker refused: %1").arg(m));
        m_status->setText(m_controller->modelLoaded() ? tr("Loaded.") : tr("Nothing loaded."));
        if (!m_controller->modelLoaded()) {
                emit dispatched(false);
        }
        updateButtons();
    });
    connect(c, &RunController::workerEnded, this, [this](const QString& description, bool byUser) {
        m_progress->setValue(0);
        m_status->setText(tr("No worker. Dispatch starts a new one."));
        QString text = description;
        text[0] = text[0].toUpper();
        showMessage(byUser ? tr("%1. The plan is kept; Dispatch starts a new worker.").arg(text)
                           : tr("%1. The plan is kept; Dispatch starts a new worker (last stderr: %2)")
                                 .arg(text, m_controller->stderrLog().trimmed().right(200)),
                    !byUser);
        emit dispatched(false);
    });
    connect(m_planning, &PlanningPage::planChanged, this, &RunPage::onPlanChanged);
    showPreview();
    updateButtons();
}

RunPage::~RunPage() = default;

QWidget* RunPage::buildControls()
{
    auto* panel = new QWidget(this);
    panel->setMinimumWidth(300);
    panel->setMaximumWidth(380);
    auto* v = new QVBoxLayout(panel);
    v->setContentsMargins(0, 0, 4, 0);

    auto* dispatchBox = new QGroupBox(tr("Dispatch"), panel);
    auto* df = new QFormLayout(dispatchBox);
    m_policy = new QComboBox(dispatchBox);
    m_policy->setObjectName("policyBox");
    // The worker's policy names (docs/worker-protocol.md).
    const std::pair<ExecutionPolicy, const char*> policies[] = {{ExecutionPolicy::AccelerateLike, "accelerate-like"},
                                                                {ExecutionPolicy::Prefetch, "prefetch"},
                                                                {ExecutionPolicy::ComputeWhereItLives, "compute-where-it-lives"}};
    for (const auto& [p, name] : policies) {
        m_policy->addItem(policyLabel(p), QString::fromLatin1(name));
        m_policy->setItemData(m_policy->count() - 1, policyDescription(p), Qt::ToolTipRole);
    }
    df->addRow(tr("Execution policy"), m_policy);
    auto* off = new QHBoxLayout;
    m_offload = new QLineEdit(dispatchBox);
    m_offload->setObjectName("offloadFolder");
    m_offload->setPlaceholderText(tr("a temporary folder"));
    auto* browse = new QToolButton(dispatchBox);
    browse->setText(QStringLiteral("…"));
    connect(browse, &QToolButton::clicked, this, [this] {
        const QString d = QFileDialog::getExistingDirectory(this, tr("Offload Folder"), m_offload->text());
        if (!d.isEmpty())
            m_offload->setText(d);
    });
    off->addWidget(m_offload, 1);
    off->addWidget(browse);
    df->addRow(tr("Offload folder"), off);
    m_throttle = new QCheckBox(tr("Simulated GPUs copy at their preset's PCIe speed"), dispatchBox);
    m_throttle->setObjectName("throttleBox");
    df->addRow(m_throttle);
    m_mapSummary = new QLabel(dispatchBox);
    m_mapSummary->setWordWrap(true);
    m_mapSummary->setObjectName("runMapSummary");
    df->addRow(m_mapSummary);
    m_note = new QLabel(dispatchBox);
    m_note->setObjectName("runNote");
    m_note->setWordWrap(true);
    followPalette(m_note, [](const QPalette& p) { return bannerStyle(p, QStringLiteral("QLabel"), noteTint(), noteInk()); });
    m_note->hide();
    df->addRow(m_note);
    auto* buttons = new QHBoxLayout;
    m_dispatch = new QPushButton(tr("Dispatch"), dispatchBox);
    m_dispatch->setObjectName("dispatchButton");
    m_dispatch->setDefault(true);
    m_cancel = new QPushButton(tr("Cancel"), dispatchBox);
    m_cancel->setObjectName("cancelButton");
    m_unload = new QPushButton(tr("Unload"), dispatchBox);
    m_unload->setObjectName("unloadButton");
    buttons->addWidget(m_dispatch);
    buttons->addWidget(m_cancel);
    buttons->addWidget(m_unload);
    df->addRow(buttons);
    m_progress = new QProgressBar(dispatchBox);
    m_progress->setObjectName("dispatchProgress");
    m_progress->setRange(0, 1000);
    m_progress->setValue(0);
    m_progress->setFormat(QStringLiteral("%p%"));
    df->addRow(m_progress);
    m_status = new QLabel(tr("Nothing loaded."), dispatchBox);
    m_status->setObjectName("runStatus");
    m_status->setWordWrap(true);
    df->addRow(m_status);
    v->addWidget(dispatchBox);

    auto* genBox = new QGroupBox(tr("Generate"), panel);
    auto* gf = new QFormLayout(genBox);
    m_prompt = new QPlainTextEdit(genBox);
    m_prompt->setObjectName("promptEdit");
    m_prompt->setPlaceholderText(tr("Prompt (empty: the model's start token)"));
    m_prompt->setPlainText(QStringLiteral("In the beginning"));
    m_prompt->setMaximumHeight(m_prompt->fontMetrics().height() * 4);
    gf->addRow(m_prompt);
    m_chat = new ChatOptions(genBox);
    m_chat->setObjectName("chatOptions");
    m_chat->setPrompt(m_prompt->toPlainText());
    connect(m_prompt, &QPlainTextEdit::textChanged, m_chat, [this] { m_chat->setPrompt(m_prompt->toPlainText()); });
    gf->addRow(m_chat);
    m_maxTokens = new QSpinBox(genBox);
    m_maxTokens->setObjectName("maxNewTokens");
    m_maxTokens->setRange(1, 100000);
    m_maxTokens->setValue(64);
    gf->addRow(tr("Max new tokens"), m_maxTokens);
    auto* modes = new QHBoxLayout;
    m_greedy = new QRadioButton(tr("Greedy"), genBox);
    m_greedy->setObjectName("greedyButton");
    m_sampling = new QRadioButton(tr("Sampling"), genBox);
    m_sampling->setObjectName("samplingButton");
    m_greedy->setChecked(true);
    modes->addWidget(m_greedy);
    modes->addWidget(m_sampling);
    modes->addStretch();
    gf->addRow(tr("Decoding"), modes);
    m_temperature = new QDoubleSpinBox(genBox);
    m_temperature->setRange(0.01, 5.0);
    m_temperature->setSingleStep(0.05);
    m_temperature->setValue(0.8);
    m_topK = new QSpinBox(genBox);
    m_topK->setRange(0, 100000);
    m_topK->setValue(50);
    m_topK->setSpecialValueText(tr("off"));
    m_topP = new QDoubleSpinBox(genBox);
    m_topP->setRange(0.01, 1.0);
    m_topP->setSingleStep(0.05);
    m_topP->setValue(0.95);
    m_seed = new QSpinBox(genBox);
    m_seed->setRange(0, 2147483647);
    m_seed->setValue(42);
    auto* sampling = new QHBoxLayout;
    for (auto [label, w] : {std::pair<QString, QWidget*>{tr("T"), m_temperature}, {tr("k"), m_topK}, {tr("p"), m_topP}}) {
        auto* l = new QLabel(label, genBox);
        l->setToolTip(w == m_temperature ? tr("Temperature") : w == m_topK ? tr("Top-k") : tr("Top-p"));
        sampling->addWidget(l);
        sampling->addWidget(w, 1);
    }
    gf->addRow(tr("Sampling"), sampling);
    gf->addRow(tr("Seed"), m_seed);
    m_ignoreEos = new QCheckBox(tr("Keep going past end-of-text"), genBox);
    m_ignoreEos->setObjectName("ignoreEos");
    gf->addRow(m_ignoreEos);
    auto setSampling = [this](bool on) {
        for (QWidget* w : {static_cast<QWidget*>(m_temperature), static_cast<QWidget*>(m_topK),
                           static_cast<QWidget*>(m_topP), static_cast<QWidget*>(m_seed)})
            w->setEnabled(on);
    };
    connect(m_sampling, &QRadioButton::toggled, this, setSampling);
    setSampling(false);
    auto* gb = new QHBoxLayout;
    m_generate = new QPushButton(tr("Generate"), genBox);
    m_generate->setObjectName("generateButton");
    m_stop = new QPushButton(tr("Stop"), genBox);
    m_stop->setObjectName("stopButton");
    gb->addWidget(m_generate);
    gb->addWidget(m_stop);
    gf->addRow(gb);
    m_speed = new QLabel(genBox);
    m_speed->setObjectName("tokensPerSecond");
    gf->addRow(m_speed);
    m_predicted = new QLabel(genBox);
    m_predicted->setObjectName("predictedVsMeasured");
    m_predicted->setWordWrap(true);
    m_predicted->setTextInteractionFlags(Qt::TextSelectableByMouse);
    gf->addRow(m_predicted);
    v->addWidget(genBox);

    auto* teachBox = new QGroupBox(tr("Teaching mode"), panel);
    auto* tf = new QFormLayout(teachBox);
    m_unitDelay = new QSpinBox(teachBox);
    m_unitDelay->setObjectName("unitDelay");
    m_unitDelay->setRange(0, 5000);
    m_unitDelay->setSingleStep(50);
    m_unitDelay->setValue(250);
    m_unitDelay->setSuffix(tr(" ms per unit"));
    tf->addRow(tr("Slow motion"), m_unitDelay);
    m_step = new QPushButton(tr("Step One Token"), teachBox);
    m_step->setObjectName("stepButton");
    m_step->setToolTip(tr("Runs the next token unit by unit, pausing before each computes"));
    tf->addRow(m_step);
    v->addWidget(teachBox);
    v->addStretch();

    connect(m_policy, qOverload<int>(&QComboBox::currentIndexChanged), this, &RunPage::updateButtons);
    connect(m_dispatch, &QPushButton::clicked, this, &RunPage::dispatch);
    connect(m_cancel, &QPushButton::clicked, this, &RunPage::cancel);
    connect(m_unload, &QPushButton::clicked, this, &RunPage::unload);
    connect(m_generate, &QPushButton::clicked, this, &RunPage::generate);
    connect(m_stop, &QPushButton::clicked, this, &RunPage::stop);
    connect(m_step, &QPushButton::clicked, this, &RunPage::stepOneToken);
    return panel;
}

QWidget* RunPage::buildOutput()
{
    auto* box = new QGroupBox(tr("Output"));
    auto* l = new QVBoxLayout(box);
    m_output = new QPlainTextEdit(box);
    m_output->setObjectName("runOutput");
    m_output->setReadOnly(true);
    m_output->setPlaceholderText(tr("Generated text streams here."));
    m_output->setMaximumBlockCount(5000);
    l->addWidget(m_output);
    return box;
}

bool RunPage::canDispatch() const
{
    using S = RunController::State;
    const S s = m_controller->state();
    const bool busy = s == S::Loading || s == S::Generating || s == S::Stepping || s == S::Unloading;
    return !busy && m_planning->plan() != nullptr && m_cannotRun.isEmpty();
}

bool RunPage::canGenerate() const
{
    // Generate runs what the worker holds, with the policy it loaded: a policy
    // chosen since then would not be the one that runs.
    return m_controller->state() == RunController::State::Loaded && m_controller->modelLoaded() &&
           m_policy->currentData().toString() == m_controller->policy();
}

QString RunPage::loadedPolicy() const
{
    const auto s = m_controller->state();
    const bool holds = m_controller->modelLoaded() || s == RunController::State::Loading;
    return holds ? m_controller->policy() : QString();
}

bool RunPage::canStop() const
{
    const auto s = m_controller->state();
    return s == RunController::State::Generating || s == RunController::State::Stepping;
}

bool RunPage::canUnload() const
{
    return m_controller->state() == RunController::State::Loaded && m_controller->modelLoaded();
}

void RunPage::updateButtons()
{
    using S = RunController::State;
    const S s = m_controller->state();
    m_dispatch->setEnabled(canDispatch());
    m_cancel->setEnabled(s == S::Loading || (s == S::Starting));
    m_unload->setEnabled(canUnload());
    m_generate->setEnabled(canGenerate());
    m_step->setEnabled(canGenerate());
    m_stop->setEnabled(canStop());

    QStringList notes;
    if (!m_cannotRun.isEmpty())
        notes << m_cannotRun;
    const bool holds = m_controller->modelLoaded() || s == S::Loading || s == S::Starting;
    const QString loaded = loadedPolicy();
    if (!loaded.isEmpty() && m_policy->currentData().toString() != loaded) {
        const int i = m_policy->findData(loaded);
        notes << tr("The worker loaded this map with %1; Dispatch again (F5) to run with %2.")
                     .arg(i >= 0 ? m_policy->itemText(i) : loaded, m_policy->currentText());
    }
    if (holds && m_running.plan) {
        const PlanState now = m_planning->planState();
        const bool same = now.plan && now.modelPath == m_running.modelPath && now.dtype == m_running.dtype &&
                          now.plan->deviceMap == m_running.plan->deviceMap;
        if (!same)
            notes << tr("The plan changed since Dispatch: Generate runs the map shown here, which the worker "
                        "holds; Dispatch again to run the new one.");
    }
    m_note->setText(notes.join(QStringLiteral("\n")));
    m_note->setVisible(!notes.isEmpty());
    emit actionsChanged();
}

QString RunPage::noteText() const { return m_note->isVisible() ? m_note->text() : QString(); }

void RunPage::resetTeaching()
{
    m_map->setMovement({});
    m_map->setSelectedModule(-1);
    m_moved.clear();
    m_movedStep = -1;
    m_caption->setText(tr("Dispatch the map, then generate, or step one token in slow motion to see each stage."));
    m_caption->setStyleSheet(captionStyle(this, QStringLiteral("#eef1f5")));
}

void RunPage::showPreview()
{
    // Nothing dispatched: the strip previews the plan on screen.
    const PlanState st = m_planning->planState();
    if (st.tree && st.plan)
        m_map->setPlacement(st.tree, st.plan, layoutPlacement(*st.tree, moduleDevices(*st.tree, st.plan->deviceMap)));
    else
        m_map->clear();
    m_mapSummary->setText(st.plan ? tr("Not dispatched: the strip shows the plan on screen.") : QString());
}

void RunPage::onPlanChanged()
{
    using S = RunController::State;
    const S s = m_controller->state();
    if (!m_controller->modelLoaded() && s != S::Loading && s != S::Starting)
        showPreview();
    updateButtons();
}

void RunPage::modelOpened(const QString& cannotRun)
{
    m_cannotRun = cannotRun;
    const PlanState st = m_planning->planState();
    m_chat->setModel(st.modelPath, st.tree ? QString::fromStdString(st.tree->modelType()) : QString());
    using S = RunController::State;
    // The worker may hold the previous model: it goes, so that Generate can
    // never run a model that is no longer open.
    if (m_controller->state() == S::Generating || m_controller->state() == S::Stepping ||
        m_controller->state() == S::Loading || m_controller->state() == S::Starting)
        m_controller->stop();
    if (m_controller->modelLoaded())
        m_controller->unload();
    m_running = PlanState();
    m_messageBar->hide();
    m_output->clear();
    m_streamed.clear();
    m_lastDone = DoneInfo();
    m_firstTokenAt = -1;
    m_speed->clear();
    m_predicted->clear();
    m_loadedBytes.clear();
    m_stepping = false;
    m_newContext = true;
    m_samples->clear();
    m_trace->setUnits({});
    m_charts->clearDispatchBytes();
    m_progress->setValue(0);
    m_status->setText(tr("Nothing loaded."));
    resetTeaching();
    showPreview();
    updateButtons();
}

QString RunPage::messageBarStyle(const QPalette& p) const
{
    return m_messageIsError ? bannerStyle(p, QStringLiteral("#runMessageBar"), errorTint(), errorInk(), QString())
                            : bannerStyle(p, QStringLiteral("#runMessageBar"), noteTint(), noteInk(), QString());
}

void RunPage::showMessage(const QString& text, bool error)
{
    m_message->setText(text);
    m_messageIsError = error;
    m_messageBar->setStyleSheet(messageBarStyle(m_messageBar->parentWidget()->palette()));
    m_messageBar->setVisible(!text.isEmpty());
}

void RunPage::dispatch()
{
    QString error;
    const LoadRequest r = loadRequest(&error);
    if (r.deviceMap.empty()) {
        showMessage(error);
        return;
    }
    m_running = m_planning->planState();
    m_runCalibrates = m_planning->predictsThisMachine();
    m_predicted->clear();
    m_loadedBytes.clear();
    m_messageBar->hide();
    m_headroom->hide();
    m_samples->clear();
    m_trace->setUnits({});
    m_charts->clearDispatchBytes();
    QVector<std::pair<QString, quint64>> budgets;
    for (const BudgetDevice& d : m_running.devices) {
        const QString name = QString::fromStdString(d.device.name());
        budgets.push_back({name, d.budget});
        if (d.simulated)
            m_samples->setDeviceLabel(name, tr("%1 (simulated)").arg(deviceLabel(d.device)));
    }
    m_samples->setBudgets(budgets);
    // The map that runs, on the page's own placement strip.
    const auto& plan = m_running.plan;
    const auto& tree = m_running.tree;
    if (tree)
        m_map->setPlacement(tree, plan, layoutPlacement(*tree, moduleDevices(*tree, plan->deviceMap)));
    QStringList devices;
    for (const auto& [key, dev] : plan->deviceMap)
        if (!devices.contains(deviceLabel(dev)))
            devices << deviceLabel(dev);
    const int entries = int(plan->deviceMap.size());
    m_mapSummary->setText(tr("Runs the %1 map on screen: %2 on %3%4.")
                              .arg(m_running.imported ? tr("imported") : tr("planned"))
                              .arg(entries == 1 ? tr("1 entry") : tr("%1 entries").arg(entries))
                              .arg(devices.join(QStringLiteral(", ")),
                                   r.simulateGpus ? (r.throttle ? tr(" (simulated GPUs, PCIe throttled)") : tr(" (simulated GPUs)"))
                                                  : QString()));
    m_progress->setValue(0);
    m_status->setText(m_controller->state() == RunController::State::NoWorker ? tr("Starting the worker…")
                                                                             : tr("Dispatching…"));
    resetTeaching();
    m_controller->dispatch(r);
    updateButtons();
}

void RunPage::cancel() { m_controller->stop(); }

void RunPage::stop()
{
    if (canStop() || m_controller->state() == RunController::State::Loading)
        m_controller->stop();
}

void RunPage::unload()
{
    if (canUnload())
        m_controller->unload();
}

void RunPage::generate()
{
    // The Run menu and Ctrl+Return reach here whatever the buttons say.
    if (!canGenerate()) {
        if (!canStop())
            showMessage(!m_controller->modelLoaded() ? tr("Nothing is loaded: Dispatch the map first (F5).") : noteText(), false);
        return;
    }
    resetTeaching();
    m_stepping = false;
    m_newContext = true;
    const GenerateRequest g = generateRequest();
    m_output->setPlainText(g.chat ? m_chat->rendered(g.prompt) : m_prompt->toPlainText());
    m_output->moveCursor(QTextCursor::End);
    m_streamed.clear();
    m_trace->clear();
    m_firstTokenAt = -1;
    m_speed->setText(tr("Prefilling the prompt…"));
    m_controller->generate(g);
}

void RunPage::stepOneToken()
{
    if (!canGenerate()) {
        if (!canStop())
            showMessage(!m_controller->modelLoaded() ? tr("Nothing is loaded: Dispatch the map first (F5).") : noteText(), false);
        return;
    }
    m_stepping = true;
    m_firstTokenAt = -1;
    m_moved.clear();
    m_movedStep = -1;
    GenerateRequest g = generateRequest();
    if (m_newContext) {
        m_output->setPlainText(g.chat ? m_chat->rendered(g.prompt) : g.prompt);
        m_streamed.clear();
        m_trace->clear();
    } else {
        g.prompt = QString(); // continue the current context
        g.promptIds.clear();
        g.chat = false;
    }
    m_controller->step(g, m_unitDelay->value());
    m_newContext = false;
}

void RunPage::onLoaded(const LoadedInfo& info)
{
    m_progress->setValue(1000);
    m_status->setText(tr("Loaded %1 in %2 s: %3 execution units.").arg(info.modelType).arg(info.loadSeconds, 0, 'f', 2).arg(info.units.size()));
    m_trace->setUnits(info.units);
    m_charts->setDispatchBytes(info.devices);
    m_loadedBytes = info.devices;
    m_hasTokenizer = info.hasTokenizer;
    m_chat->setHasTokenizer(m_hasTokenizer);
    m_prompt->setPlaceholderText(m_hasTokenizer ? tr("Prompt (empty: the model's start token)")
                                                : tr("This model has no tokenizer: type token ids, e.g. 1, 2, 3"));
    if (!m_hasTokenizer)
        m_status->setText(m_status->text() + tr(" No tokenizer: the prompt is token ids."));
    m_newContext = true;
    updateButtons();
    emit dispatched(true);
}

void RunPage::onToken(const TokenMark& t)
{
    m_streamed.push_back(t.id);
    m_samples->addToken(t.t);
    m_output->moveCursor(QTextCursor::End);
    m_output->insertPlainText(m_hasTokenizer || !t.text.isEmpty() ? t.text : QStringLiteral(" %1").arg(t.id));
    if (m_stepping) {
        // One token per step, slowed down on purpose: no rate to show.
        m_speed->setText(m_streamed.size() == 1 ? tr("Stepped 1 token in slow motion.")
                                         : tr("Stepped %1 tokens in slow motion.").arg(m_streamed.size()));
    } else if (m_firstTokenAt < 0) {
        m_firstTokenAt = t.t;
        m_speed->setText(tr("First token after the prompt."));
    } else if (t.t > m_firstTokenAt) {
        m_speed->setText(tr("%1 tokens/s (%2 tokens)")
                             .arg(double(m_streamed.size() - 1) / (t.t - m_firstTokenAt), 0, 'f', 1)
                             .arg(m_streamed.size()));
    }
}

void RunPage::onTrace(const QVector<TraceSpan>& spans)
{
    m_trace->addSpans(spans);
    if (m_stepping && !spans.isEmpty()) {
        // What moved for each unit in this step: its copies summed, the device they went to.
        for (const TraceSpan& s : spans) {
            if (s.step != m_movedStep) {
                m_moved.clear();
                m_movedStep = s.step;
            }
            if (s.kind == TraceSpan::Map || s.kind == TraceSpan::Fetch || s.kind == TraceSpan::Prefetch) {
                TraceSpan& m = m_moved[s.unit];
                const quint64 bytes = m.bytes + s.bytes;
                m = s;
                m.bytes = bytes;
            }
        }
        // The newest stage, told in words, and its unit outlined on the map.
        const TraceSpan* last = &spans.front();
        for (const TraceSpan& s : spans)
            if (s.t1 >= last->t1)
                last = &s;
        showCaption(*last);
    }
}

void RunPage::showCaption(const TraceSpan& s)
{
    const auto& tree = m_running.tree; // the tree of the map that runs
    const int module = tree ? tree->find(s.unit.toStdString()) : -1;
    m_map->setSelectedModule(module);
    // While a unit fetches and computes, an arrow shows where its weights
    // went: to the device that computes with them (copies), or into RAM (a
    // read in place from the mapped file). Released, the arrow goes.
    const auto moved = m_moved.constFind(s.unit);
    if (s.kind != TraceSpan::Release && moved != m_moved.constEnd()) {
        const TraceSpan& m = moved.value();
        const auto to = Device::parse(m.device.toStdString());
        const int toCode = m.kind == TraceSpan::Map ? deviceCode(Device::cpu()) : to ? deviceCode(*to) : -1;
        m_map->setMovement({module, toCode,
                            m.kind == TraceSpan::Map ? tr("%1 read in place from disk").arg(formatBytes(m.bytes))
                                                     : tr("%1 → %2").arg(formatBytes(m.bytes), deviceLabel(deviceFromCode(toCode)))});
    } else {
        m_map->setMovement({});
    }
    const QString dev = deviceText(s.device);
    const QString what = s.tensor.isEmpty() ? s.unit : s.tensor;
    QString text, colour;
    switch (s.kind) {
    case TraceSpan::Map:
        text = tr("<b>Fetch from disk</b> — %1 reads %2 (%3) in place from the memory-mapped file.").arg(s.unit, what, formatBytes(s.bytes));
        colour = QStringLiteral("#e6e6e6");
        break;
    case TraceSpan::Fetch:
        text = tr("<b>Copy to %1</b> — %2 (%3) is copied for %4 before it runs.").arg(dev, what, formatBytes(s.bytes), s.unit);
        colour = QStringLiteral("#dce8f5");
        break;
    case TraceSpan::Prefetch:
        text = tr("<b>Prefetch to %1</b> — %2 (%3) is copied ahead, while the previous unit computes.").arg(dev, what, formatBytes(s.bytes));
        colour = QStringLiteral("#e4eef9");
        break;
    case TraceSpan::Wait:
        text = tr("<b>Wait</b> — %1 waits for its prefetch to arrive on %2.").arg(s.unit, dev);
        colour = QStringLiteral("#fbe0e0");
        break;
    case TraceSpan::Compute:
        text = tr("<b>Compute</b> — %1 runs on %2 (%3 ms).").arg(s.unit, dev).arg((s.t1 - s.t0) * 1000, 0, 'f', 2);
        colour = QStringLiteral("#def0d8");
        break;
    case TraceSpan::Release:
        text = tr("<b>Release</b> — %1's fetched copies are dropped from %2; its weights stay where the map put them.").arg(s.unit, dev);
        colour = QStringLiteral("#eeeeee");
        break;
    }
    m_caption->setText(tr("Step %1 · ").arg(s.step) + text);
    m_caption->setStyleSheet(captionStyle(this, colour));
}

void RunPage::onDone(const DoneInfo& d)
{
    m_lastDone = d;
    if (!m_stepping) {
        m_speed->setText(tr("%1 %2 tokens · prefill %3 s · %4 tokens/s")
                             .arg(d.stopped ? tr("Stopped after") : tr("Done:"))
                             .arg(d.tokenIds.size())
                             .arg(d.prefillSeconds, 0, 'f', 2)
                             .arg(d.tokensPerSecond, 0, 'f', 1));
        showPredictedAgainstMeasured(d);
    } else if (d.stopped) {
        // Stopped mid-step: the token was not finished, so the next step
        // starts again from the prompt.
        resetTeaching();
        m_caption->setText(tr("Stopped before the token was done. Step One Token starts again from the prompt."));
        m_newContext = true;
    } else {
        m_caption->setText(m_caption->text() + tr(" — token done; Step again for the next one."));
    }
    m_charts->refresh();
    emit generationDone(d);
}

void RunPage::setPrompt(const QString& text) { m_prompt->setPlainText(text); }
void RunPage::setMaxNewTokens(int n) { m_maxTokens->setValue(n); }
void RunPage::setGreedy(bool greedy) { (greedy ? m_greedy : m_sampling)->setChecked(true); }
void RunPage::setIgnoreEos(bool ignore) { m_ignoreEos->setChecked(ignore); }
void RunPage::setThrottle(bool throttle) { m_throttle->setChecked(throttle); }
void RunPage::setOffloadFolder(const QString& folder) { m_offload->setText(folder); }
void RunPage::setUnitDelayMs(int ms) { m_unitDelay->setValue(ms); }
bool RunPage::setPolicy(const QString& name)
{
    const int i = m_policy->findData(name);
    if (i >= 0)
        m_policy->setCurrentIndex(i);
    return i >= 0;
}
QTableView* RunPage::timelineView() const { return m_timeline->view(); }
QString RunPage::outputText() const { return m_output->toPlainText(); }
QString RunPage::messageText() const { return m_messageBar->isVisible() ? m_message->text() : QString(); }
QString RunPage::statusText() const { return m_status->text(); }
QString RunPage::captionText() const { return m_caption->text(); }
QString RunPage::tokensPerSecondText() const { return m_speed->text(); }
QString RunPage::predictedText() const { return m_predicted->text(); }

} // namespace stowage
