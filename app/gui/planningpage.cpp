#include "planningpage.h"

#include "budgetbarsview.h"
#include "budgetmodel.h"
#include "calibration.h"
#include "contextchart.h"
#include "devicemapmodel.h"
#include "display.h"
#include "moduletreemodel.h"
#include "placementmap.h"
#include "plancontrols.h"
#include "predictionmodel.h"
#include "sharebardelegate.h"
#include "deploypanel.h"
#include "shoppanel.h"
#include "snippets.h"
#include "tintedbanner.h"
#include "stowage/gpuorder.h"
#include "stowage/kvcache.h"
#include "stowage/moduledevices.h"
#include "stowage/placementlayout.h"

#include <algorithm>

#include <QComboBox>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>

namespace stowage {

namespace {
const ExecutionPolicy kPolicies[] = {ExecutionPolicy::AccelerateLike, ExecutionPolicy::Prefetch,
                                     ExecutionPolicy::ComputeWhereItLives};

QLabel* banner(QWidget* parent, const char* name, QColor tint, QColor text)
{
    auto* l = new QLabel(parent);
    l->setObjectName(QLatin1String(name));
    l->setWordWrap(true);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    followPalette(l, [tint, text](const QPalette& p) { return bannerStyle(p, QStringLiteral("QLabel"), tint, text); });
    l->hide();
    return l;
}

QTableView* table(QWidget* parent, const char* name)
{
    auto* v = new QTableView(parent);
    v->setObjectName(QLatin1String(name));
    v->setSelectionBehavior(QAbstractItemView::SelectRows);
    v->setWordWrap(false);
    v->verticalHeader()->hide();
    v->verticalHeader()->setDefaultSectionSize(v->fontMetrics().height() + 8);
    v->horizontalHeader()->setStretchLastSection(true);
    v->setAlternatingRowColors(true);
    v->setShowGrid(false);
    // Tab leaves the table (arrows move between cells), as in a form; not trapped cell by cell.
    v->setTabKeyNavigation(false);
    return v;
}
} // namespace

PlanningPage::PlanningPage(ModuleTreeModel* treeModel, QWidget* parent) : QWidget(parent), m_treeModel(treeModel)
{
    m_budgets = new BudgetModel(this);
    m_mapModel = new DeviceMapModel(this);
    m_prediction = new PredictionModel(this);
    m_calibration = new Calibration(QString::fromStdString(thisCpuKey()), this);
    connect(m_calibration, &Calibration::changed, this, &PlanningPage::predict);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(6);

    auto* optionsBox = new QGroupBox(tr("Plan"), this);
    auto* ol = new QVBoxLayout(optionsBox);
    m_controls = new PlanControls(optionsBox);
    ol->addWidget(m_controls);
    layout->addWidget(optionsBox);

    auto* devicesBox = new QGroupBox(tr("Devices and budgets (max_memory)"), this);
    auto* dl = new QVBoxLayout(devicesBox);
    m_bars = new BudgetBarsView(m_budgets, devicesBox);
    m_budgetNote = banner(devicesBox, "budgetNote", noteTint(), noteInk());
    dl->addWidget(m_budgetNote);
    dl->addWidget(m_bars);
    layout->addWidget(devicesBox);

    auto* placementBox = new QGroupBox(tr("Placement"), this);
    auto* pl = new QVBoxLayout(placementBox);
    m_error = banner(placementBox, "planError", errorTint(), errorInk());
    m_banner = banner(placementBox, "importBanner", infoTint(), infoInk());
    // A quantized checkpoint: how its weights are sized on the plan's
    // hardware (dequantized or not), and why 5.6 would refuse the map.
    m_quantNote = banner(placementBox, "quantNote", noteTint(), noteInk());
    m_quantRefusal = banner(placementBox, "quantRefusal", errorTint(), errorInk());
    m_placement = new PlacementMap(placementBox);
    m_placement->setObjectName("placementMap");
    m_totals = new QLabel(tr("No plan yet."), placementBox);
    m_totals->setObjectName("deviceTotals");
    m_totals->setTextFormat(Qt::RichText);
    m_totals->setWordWrap(true);
    m_totals->setTextInteractionFlags(Qt::TextSelectableByMouse);
    pl->addWidget(m_error);
    pl->addWidget(m_banner);
    pl->addWidget(m_quantNote);
    pl->addWidget(m_quantRefusal);
    pl->addWidget(m_placement);
    pl->addWidget(m_totals);
    layout->addWidget(placementBox);

    auto* splitter = new QSplitter(Qt::Vertical, this);
    // The speed the plan predicts and how its memory grows with the context, one tab each.
    m_outlook = new QTabWidget(splitter);
    m_outlook->setObjectName("planOutlook");
    m_outlook->setDocumentMode(true);
    m_outlook->addTab(buildPrediction(), tr("Predicted speed"));
    m_context = new ContextChart(m_outlook);
    m_context->setObjectName("contextChart");
    m_outlook->addTab(m_context, tr("Context growth"));
    m_shop = new ShopPanel(m_outlook);
    m_outlook->addTab(m_shop, tr("Hardware to buy"));
    m_deploy = new DeployPanel(m_outlook);
    m_outlook->addTab(m_deploy, tr("Deploy"));
    // One click: the budget bars get the setup's GPUs as simulated ones.
    connect(m_shop, &ShopPanel::openSetup, this, [this](const QString& preset, int count) {
        const HardwareProfile p = hardwarePreset(preset.toStdString());
        for (int r = m_budgets->rowCount() - 1; r >= 0; --r)
            m_budgets->removeSimulatedGpu(r); // false for this machine's devices
        for (int i = 0; i < count; ++i)
            m_budgets->addSimulatedGpu(QString::fromStdString(p.gpus.front().name), preset, p.gpus.front().memoryBytes);
    });
    splitter->addWidget(m_outlook);
    auto* mapBox = new QGroupBox(tr("Device map"), splitter);
    auto* ml = new QVBoxLayout(mapBox);
    m_mapView = table(mapBox, "deviceMap");
    m_mapView->setModel(m_mapModel);
    m_mapView->horizontalHeader()->setSectionResizeMode(DeviceMapModel::ModuleColumn, QHeaderView::Interactive);
    // The reasons are long sentences: the Why column takes its text's width (a scroll bar when
    // wider than the page) instead of being stretched to the page and cut.
    m_mapView->horizontalHeader()->setStretchLastSection(false);
    m_problems = new QListWidget(mapBox);
    m_problems->setObjectName("mapProblems");
    m_problems->setMaximumHeight(m_problems->fontMetrics().height() * 5);
    m_problems->hide();
    ml->addWidget(m_problems);
    ml->addWidget(m_mapView, 1);
    splitter->addWidget(mapBox);
    splitter->setStretchFactor(1, 1);
    layout->addWidget(splitter, 1);

    connect(m_budgets, &BudgetModel::budgetsChanged, this, &PlanningPage::replan);
    connect(m_controls, &PlanControls::optionsChanged, this, &PlanningPage::replan);
    connect(m_controls, &PlanControls::sizingChanged, this, [this] {
        resize();
        replan();
    });
    connect(m_placement, &PlacementMap::moduleActivated, this, &PlanningPage::moduleActivated);
    connect(m_assumeGpu, &QComboBox::currentIndexChanged, this, &PlanningPage::predict);
    connect(m_problems, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
        if (m_tree) {
            const int module = m_tree->find(item->data(Qt::UserRole).toString().toStdString());
            if (module >= 0)
                emit moduleActivated(module);
        }
    });
}

QWidget* PlanningPage::buildPrediction()
{
    auto* box = new QWidget;
    auto* l = new QVBoxLayout(box);
    auto* row = new QHBoxLayout;
    m_hardware = new QLabel(box);
    m_hardware->setObjectName("predictionHardware");
    m_hardware->setWordWrap(true);
    m_hardware->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_assumeGpu = new QComboBox(box);
    m_assumeGpu->setObjectName("assumedGpu");
    m_assumeGpu->setToolTip(tr("The GPU model assumed for simulated GPUs of a custom size"));
    for (const std::string& key : hardwarePresetNames())
        if (key != "this-machine")
            m_assumeGpu->addItem(QString::fromStdString(hardwarePreset(key).gpus.front().name), QString::fromStdString(key));
    m_assumeGpu->setCurrentIndex(std::max(0, m_assumeGpu->findData(QStringLiteral("rtx4090"))));
    auto* assumeLabel = new QLabel(tr("Custom GPUs as"), box);
    assumeLabel->setBuddy(m_assumeGpu);
    row->addWidget(m_hardware, 1);
    row->addWidget(assumeLabel);
    row->addWidget(m_assumeGpu);
    l->addLayout(row);
    m_predictionView = table(box, "prediction");
    m_predictionView->setModel(m_prediction);
    m_predictionView->setItemDelegateForColumn(PredictionModel::SharesColumn, new ShareBarDelegate(m_predictionView));
    m_predictionView->setSelectionMode(QAbstractItemView::NoSelection);
    m_predictionView->setFocusPolicy(Qt::NoFocus);
    m_predictionView->setAlternatingRowColors(false);
    m_predictionView->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    const int rowH = m_predictionView->verticalHeader()->defaultSectionSize();
    m_predictionView->setFixedHeight(rowH * 3 + m_predictionView->horizontalHeader()->sizeHint().height() + 4);
    l->addWidget(m_predictionView);
    auto* calRow = new QHBoxLayout;
    m_calibrationNote = new QLabel(box);
    m_calibrationNote->setObjectName("calibrationNote");
    m_calibrationNote->setWordWrap(true);
    m_calibrationNote->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_resetCalibration = new QToolButton(box);
    m_resetCalibration->setObjectName("resetCalibration");
    m_resetCalibration->setText(tr("Reset calibration"));
    m_resetCalibration->setToolTip(tr("Forget what this machine's runs measured; show the cost model's own predictions"));
    connect(m_resetCalibration, &QToolButton::clicked, m_calibration, &Calibration::reset);
    calRow->addWidget(m_calibrationNote, 1);
    calRow->addWidget(m_resetCalibration);
    l->addLayout(calRow);
    return box;
}

bool PlanningPage::predictsThisMachine() const
{
    if (!m_thisMachine || !m_thisMachine->measured)
        return false;
    for (int r = 0; r < m_budgets->rowCount(); ++r)
        if (m_budgets->at(r).simulated)
            return false;
    return true;
}

QString PlanningPage::calibrationText() const { return m_calibrationNote->text(); }

void PlanningPage::setModel(std::shared_ptr<const ModuleTree> baseTree, std::optional<ModelConfig> config,
                            DType autoDType, const QString& modelPath)
{
    m_baseTree = std::move(baseTree);
    m_config = std::move(config);
    m_autoDType = autoDType;
    m_modelPath = modelPath;
    m_importedFrom.clear();
    m_banner->hide();
    m_problems->clear();
    m_problems->hide();
    m_controls->setAutoDType(autoDType);
    QStringList ns;
    for (const auto& c : m_baseTree->noSplitClasses())
        ns << QString::fromStdString(c);
    m_controls->setNoSplitPlaceholder(ns.join(QStringLiteral(", ")));
    m_tree.reset();
    m_plan.reset();
    m_mapModel->clear();
    m_placement->clear();
    resize();
    replan();
}

void PlanningPage::setThisMachine(const HardwareProfile& profile)
{
    m_thisMachine = profile;
    predict();
}

void PlanningPage::resize()
{
    if (!m_baseTree)
        return;
    const std::optional<DType> dt = m_controls->dtype();
    const Reference ref = m_controls->reference();
    const bool quant = m_quantOnTarget = quantAppliedOnTarget();
    if (!dt && ref == m_baseTree->reference() && quant == m_baseTree->quantApplied()) {
        m_tree = m_baseTree;
    } else {
        auto t = std::make_shared<ModuleTree>(*m_baseTree);
        t->setSizing(dt ? dt : std::optional<DType>(m_autoDType), ref);
        if (t->quantization())
            t->setQuantApplied(quant);
        m_tree = std::move(t);
    }
    m_treeModel->setTree(m_tree);
    m_shop->setModel(m_tree, m_config);
    m_deploy->setModel(m_tree, m_config, m_modelPath);
}

bool PlanningPage::quantAppliedOnTarget() const
{
    // The quantizer sees GPU 0 of the hardware the plan is for: a simulated
    // GPU's preset, this machine's GPU, or none.
    const Quantization* q = m_baseTree ? m_baseTree->quantization() : nullptr;
    return q && quantDecision(*q, quantTargetOf(predictionProfile())).applied;
}

PlanOptions PlanningPage::options() const
{
    PlanOptions o;
    o.strategy = m_controls->strategy();
    o.reference = m_controls->reference();
    o.maxMemory = m_budgets->budgets();
    o.noSplit = m_controls->noSplit();
    o.kv = m_kv;
    if (m_baseTree && m_baseTree->quantization())
        o.quantTarget = quantTargetOf(predictionProfile());
    return o;
}

void PlanningPage::setError(const QString& text)
{
    m_error->setText(text);
    m_error->setVisible(!text.isEmpty());
}

QString PlanningPage::planError() const { return m_error->isVisible() ? m_error->text() : QString(); }

void PlanningPage::replan()
{
    if (!m_tree)
        return;
    if (!m_importedFrom.isEmpty()) {
        // Any change to the plan's inputs goes back to planning.
        m_importedFrom.clear();
        m_banner->hide();
        m_problems->clear();
        m_problems->hide();
    }
    if (m_baseTree && m_baseTree->quantization() && quantAppliedOnTarget() != m_quantOnTarget)
        resize(); // GPUs added or removed: the quantizer's choice may change the sizes
    m_kv.reset();
    QString kvProblem;
    if (const auto kv = m_controls->kvCache()) {
        if (m_config)
            m_kv = kvReserveFor(*m_config, *m_tree, kv->first, kv->second, m_tree->dtype().value_or(m_autoDType));
        if (!m_kv)
            kvProblem = tr("KV cache: Stowage does not know the attention shape of this model type; planned without it.");
    }
    if (const auto kv = m_controls->kvCache())
        m_shop->setKvCache(kv->first, kv->second);
    else
        m_shop->setKvCache(0, 1);
    try {
        applyPlan(planInGpuOrder(*m_tree, options(), m_budgets->gpuOrder()));
    } catch (const std::exception& e) {
        // Impossible options: say why and keep the last good plan on screen.
        setError(tr("Cannot plan: %1").arg(QString::fromStdString(e.what())));
        return;
    }
    setError(kvProblem);
}

void PlanningPage::applyPlan(Plan plan)
{
    auto shared = std::make_shared<const Plan>(std::move(plan));
    m_plan = shared;
    m_quantNote->setText(QString::fromStdString(shared->quantization));
    m_quantNote->setVisible(!shared->quantization.empty());
    m_quantRefusal->setText(QString::fromStdString(shared->refusal));
    m_quantRefusal->setVisible(!shared->refusal.empty());
    const ModuleDevices devices = moduleDevices(*m_tree, shared->deviceMap);
    m_treeModel->setDevices(devices);
    PlacementLayout layout = layoutPlacement(*m_tree, devices);

    // The plan reports its layers' KV caches per device (DeviceTotal::reservedKv); the
    // room for the largest activation it took off each budget is drawn with them.
    QHash<int, quint64> activationPer;
    if (m_kv)
        for (const DeviceTotal& t : shared->devices)
            if (t.device.kind != Device::Disk && t.used > 0)
                activationPer[deviceCode(t.device)] = m_kv->activationBytes;
    m_budgets->setPlanTotals(*shared, activationPer);

    // Per-device totals, in device order, with the block counts the strip shows.
    QHash<int, int> blocks;
    for (const PlacementBlock& b : layout.blocks)
        ++blocks[b.deviceCode];
    QStringList parts;
    for (const DeviceTotal& t : shared->devices) {
        if (t.used == 0)
            continue;
        parts << tr("<span style='color:%1'>■</span> <b>%2</b> %3 · %4")
                     .arg(deviceColor(t.device).name(), deviceLabel(t.device), formatBytes(t.used),
                          countOf(blocks.value(deviceCode(t.device)), tr("block"), tr("blocks")));
    }
    const int diskRow = m_budgets->rowOf(Device::disk());
    if (diskRow >= 0 && m_budgets->data(m_budgets->index(diskRow, 0), BudgetModel::OverBudgetRole).toBool())
        parts << tr("<span style='color:#d04040'>the offload folder needs more than the disk budget</span>");
    m_totals->setText(parts.join(QStringLiteral(" &nbsp;&nbsp; ")));

    m_placement->setPlacement(m_tree, shared, std::move(layout));
    const int rowsBefore = m_mapModel->rowCount();
    m_mapModel->setPlan(*shared);
    // Measuring every row costs time while dragging: only when the map's length changes.
    if (m_mapModel->rowCount() != rowsBefore)
        for (int c : {int(DeviceMapModel::ModuleColumn), int(DeviceMapModel::DeviceColumn), int(DeviceMapModel::SizeColumn),
                      int(DeviceMapModel::WhyColumn)})
            m_mapView->resizeColumnToContents(c);
    predict();
    updateContextChart();
    emit planChanged();
}

void PlanningPage::updateContextChart()
{
    if (!m_config || !m_plan) {
        m_context->clear(tr("Context growth needs the checkpoint's config.json."));
        return;
    }
    // To the longest context the model takes (max_position_embeddings; the
    // KV-cache box's context where larger), at the KV-cache box's batch.
    const auto kv = m_controls->kvCache();
    const ModelConfig text = m_config->textConfig();
    int64_t longest = 131072;
    try {
        longest = text.positive("max_position_embeddings", 131072);
    } catch (const std::exception&) {
    }
    if (kv)
        longest = std::max<int64_t>(longest, kv->first);
    longest = std::clamp<int64_t>(longest, 2, int64_t(1) << 24);
    try {
        m_context->setSweep(stowage::sweepContext(*m_config, *m_tree, m_plan->deviceMap, m_plan->budgets,
                                                  kv ? kv->second : 1, longest));
    } catch (const std::exception& e) {
        m_context->clear(tr("No context chart: %1").arg(QString::fromStdString(e.what())));
    }
}

bool PlanningPage::importMap(const QString& json, const QString& source)
{
    if (!m_tree)
        return false;
    DeviceMap map;
    try {
        map = deviceMapFromJson(json.toStdString(), source.toStdString());
    } catch (const std::exception& e) {
        setError(tr("Cannot import: %1").arg(QString::fromStdString(e.what())));
        return false;
    }
    setError({});
    MapCheck check = validateDeviceMap(*m_tree, map);
    // And against the devices on this page: a GPU the page has not, a device past its budget.
    const MapCheck fits = checkDeviceMapFits(*m_tree, map, m_budgets->budgets());
    check.errors.insert(check.errors.end(), fits.errors.begin(), fits.errors.end());
    check.errorSubjects.insert(check.errorSubjects.end(), fits.errorSubjects.begin(), fits.errorSubjects.end());
    check.warnings.insert(check.warnings.end(), fits.warnings.begin(), fits.warnings.end());
    check.warningSubjects.insert(check.warningSubjects.end(), fits.warningSubjects.begin(), fits.warningSubjects.end());

    // Sizes per entry and per device, as the planner reports them.
    Plan plan = planFromDeviceMap(*m_tree, map, "imported from " + source.toStdString());
    plan.budgets = m_budgets->budgets();

    // Problems by module: the map key each one is about (validateDeviceMap names it).
    QHash<QString, QString> byKey;
    m_problems->clear();
    auto addProblem = [&](const std::string& msg, const std::string& subject, bool error) {
        const bool isKey = std::any_of(map.begin(), map.end(), [&](const auto& e) { return e.first == subject; });
        const QString key = isKey ? QString::fromStdString(subject) : QString();
        const QString text = QString::fromStdString(msg);
        if (!key.isEmpty())
            byKey.insert(key, byKey.contains(key) ? byKey.value(key) + QStringLiteral("; ") + text : text);
        auto* item = new QListWidgetItem((error ? QStringLiteral("✖ ") : QStringLiteral("⚠ ")) +
                                         (key.isEmpty() ? text : key + QStringLiteral(": ") + text));
        item->setData(Qt::UserRole, key);
        item->setForeground(error ? QColor(0xc03030) : QColor(0xb07000));
        m_problems->addItem(item);
    };
    for (size_t i = 0; i < check.errors.size(); ++i)
        addProblem(check.errors[i], check.errorSubjects[i], true);
    for (size_t i = 0; i < check.warnings.size(); ++i)
        addProblem(check.warnings[i], check.warningSubjects[i], false);

    m_importedFrom = source;
    applyPlan(std::move(plan));
    m_mapModel->setProblems(byKey);
    m_problems->setVisible(m_problems->count() > 0);
    m_banner->setText(tr("Showing the map imported from <b>%1</b>: %2. Any change to the budgets or options plans again.")
                          .arg(source.toHtmlEscaped(),
                               check.errors.empty() && check.warnings.empty()
                                   ? tr("it fits this model")
                                   : tr("%1 listed below")
                                         .arg(countOf(qint64(check.errors.size() + check.warnings.size()),
                                                      tr("problem"), tr("problems")))));
    m_banner->show();
    return true;
}

HardwareProfile PlanningPage::predictionProfile(QStringList* assumptions) const
{
    QStringList unused;
    if (!assumptions)
        assumptions = &unused;
    // The host: this machine as measured, else a typical one (labelled so).
    HardwareProfile p = m_thisMachine ? *m_thisMachine : hardwarePreset("rtx4090");
    if (!m_thisMachine)
        assumptions->push_back(tr("CPU and disk: a typical host (this machine is being measured)"));
    else
        assumptions->push_back(tr("CPU and disk: this machine%1").arg(m_thisMachine->measured ? tr(" (measured)") : QString()));
    const std::vector<GpuProfile> mine = m_thisMachine ? m_thisMachine->gpus : std::vector<GpuProfile>{};
    p.gpus.clear();
    for (int r = 0; r < m_budgets->rowCount(); ++r) {
        const BudgetDevice& d = m_budgets->at(r);
        if (d.device.kind != Device::Gpu)
            continue;
        GpuProfile g;
        QString source;
        if (!d.simulated && static_cast<size_t>(d.device.index) < mine.size()) {
            g = mine[static_cast<size_t>(d.device.index)];
            source = tr("this machine");
        } else {
            const QString preset = d.simulated && !d.preset.isEmpty() ? d.preset : m_assumeGpu->currentData().toString();
            g = hardwarePreset(preset.toStdString()).gpus.front();
            if (d.capacity)
                g.memoryBytes = d.capacity;
            source = tr("datasheet");
        }
        assumptions->push_back(tr("%1: %2 (%3)").arg(deviceLabel(d.device), QString::fromStdString(g.name), source));
        p.gpus.push_back(g);
    }
    return p;
}

void PlanningPage::predict()
{
    if (!m_plan || !m_tree) {
        m_prediction->setPredictions({});
        m_hardware->clear();
        return;
    }
    QStringList assumptions;
    const HardwareProfile hw = predictionProfile(&assumptions);
    const bool calibrate = predictsThisMachine();
    QVector<Prediction> rows;
    QStringList calibrated;
    for (ExecutionPolicy pol : kPolicies) {
        Prediction pr;
        pr.policy = pol;
        if (calibrate) {
            const Calibration::Factor f = m_calibration->factor(pol);
            pr.factor = f.factor;
            pr.calibrationRuns = f.runs;
            if (f.runs > 0)
                calibrated << m_calibration->describe(pol);
        }
        try {
            pr.estimate = estimateDecode(*m_plan, *m_tree, hw, pol);
        } catch (const std::exception& e) {
            pr.error = QString::fromStdString(e.what());
        }
        rows.push_back(pr);
    }
    m_prediction->setPredictions(rows);
    const int runs = m_calibration->totalRuns();
    if (!calibrated.isEmpty())
        m_calibrationNote->setText(tr("Calibrated by this machine's runs: %1.").arg(calibrated.join(QStringLiteral("; "))));
    else if (runs > 0)
        m_calibrationNote->setText(tr("Not calibrated: %1 on this machine calibrate plans for it as it is, without simulated GPUs.")
                                       .arg(countOf(runs, tr("run"), tr("runs"))));
    else
        m_calibrationNote->setText(tr("Uncalibrated: runs on this machine without simulated GPUs (Run page) teach the prediction how fast it really is."));
    m_resetCalibration->setEnabled(runs > 0);
    m_hardware->setText(tr("Assumes %1.").arg(assumptions.join(QStringLiteral("; "))));
    m_predictionView->resizeColumnToContents(PredictionModel::PolicyColumn);
    m_predictionView->resizeColumnToContents(PredictionModel::SpeedColumn);
}

void PlanningPage::setBudgetNote(const QString& text)
{
    m_budgetNote->setText(text);
    m_budgetNote->setVisible(!text.isEmpty());
}

QString PlanningPage::budgetNote() const { return m_budgetNote->isVisible() ? m_budgetNote->text() : QString(); }

QString PlanningPage::totalsText() const { return m_totals->text(); }

QString PlanningPage::predictionHardwareText() const { return m_hardware->text(); }

void PlanningPage::selectModule(int module) { m_placement->setSelectedModule(module); }

PlanState PlanningPage::planState() const
{
    PlanState st;
    st.tree = m_tree;
    st.plan = m_plan;
    st.imported = showingImportedMap();
    st.modelPath = m_modelPath;
    st.dtype = m_tree && m_tree->dtype() ? *m_tree->dtype() : m_autoDType;
    for (int r = 0; r < m_budgets->rowCount(); ++r)
        st.devices.push_back(m_budgets->at(r));
    st.profile = predictionProfile(&st.assumptions);
    return st;
}

SnippetInput PlanningPage::snippetInput() const
{
    SnippetInput in;
    in.modelPath = m_modelPath;
    if (m_plan)
        in.map = m_plan->deviceMap;
    in.budgets = m_budgets->budgets();
    in.dtype = m_tree && m_tree->dtype() ? *m_tree->dtype() : m_autoDType;
    const auto ns = m_controls->noSplit();
    for (const auto& c : ns ? *ns : (m_tree ? m_tree->noSplitClasses() : std::vector<std::string>{}))
        in.noSplit << QString::fromStdString(c);
    return in;
}

} // namespace stowage
