#include "deploypanel.h"

#include "display.h"
#include "enginerunpanel.h"
#include "stowage/units.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

#include <cmath>

namespace stowage {

DeployPanel::DeployPanel(QWidget* parent) : QWidget(parent)
{
    setObjectName("deployPanel");
    m_engine = new QComboBox(this);
    m_engine->setObjectName("deployEngine");
    for (ServingEngine e : {ServingEngine::Vllm, ServingEngine::Sglang, ServingEngine::Tgi, ServingEngine::LlamaCpp,
                            ServingEngine::TransformersTp})
        m_engine->addItem(QString::fromLatin1(servingEngineName(e)), int(e));
    m_gpu = new QComboBox(this);
    m_gpu->setObjectName("deployGpu");
    for (const std::string& p : hardwarePresetNames())
        if (p != "this-machine")
            m_gpu->addItem(QString::fromStdString(hardwarePreset(p).gpus.front().name), QString::fromStdString(p));
    m_gpu->setCurrentIndex(std::max(0, m_gpu->findData(QStringLiteral("h100-80gb"))));
    const auto spin = [this](const char* name, int lo, int hi, int value) {
        auto* s = new QSpinBox(this);
        s->setObjectName(name);
        s->setRange(lo, hi);
        s->setValue(value);
        return s;
    };
    m_nodes = spin("deployNodes", 1, 64, 1);
    m_perNode = spin("deployGpusPerNode", 1, 16, 8);
    m_context = spin("deployContext", 1, 1 << 24, 8192);
    m_context->setSuffix(tr(" tokens"));
    m_context->setSingleStep(1024);
    m_sequences = spin("deploySequences", 1, 4096, 1);
    // The host where llama.cpp's --n-cpu-moe keeps experts (the presets' typical host: 64 GB).
    m_hostRam = spin("deployHostRam", 1, 65536, 64);
    m_hostRam->setSuffix(tr(" GB host RAM"));
    m_hostRam->setToolTip(tr("The first node's RAM, where llama.cpp keeps the experts of the layers that do not fit "
                             "the GPUs (--n-cpu-moe)"));
    m_ep = new QCheckBox(tr("Expert parallel"), this);
    m_ep->setObjectName("deployExpertParallel");
    m_ep->setToolTip(tr("Divide a mixture of experts' experts over the GPUs (vLLM --enable-expert-parallel, SGLang --ep-size)"));

    auto* row1 = new QHBoxLayout;
    row1->addWidget(m_engine);
    row1->addWidget(new QLabel(tr("on"), this));
    row1->addWidget(m_nodes);
    row1->addWidget(new QLabel(tr("nodes of"), this));
    row1->addWidget(m_perNode);
    row1->addWidget(m_gpu, 1);
    auto* row2 = new QHBoxLayout;
    row2->addWidget(m_context);
    row2->addWidget(new QLabel(tr("×"), this));
    row2->addWidget(m_sequences);
    row2->addWidget(new QLabel(tr("sequences"), this));
    row2->addWidget(m_ep);
    row2->addWidget(m_hostRam);
    row2->addStretch(1);
    auto* form = new QFormLayout;
    form->addRow(tr("Serve with"), row1);
    form->addRow(tr("Context"), row2);

    m_status = new QLabel(this);
    m_status->setObjectName("deployStatus");
    m_status->setWordWrap(true);
    m_status->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_model = new QStandardItemModel(0, 6, this);
    m_model->setHorizontalHeaderLabels({tr("Parallel"), tr("Weights a GPU"), tr("KV cache a GPU"), tr("Usable"),
                                        tr("Decode"), tr("Fits")});
    m_view = new QTableView(this);
    m_view->setObjectName("deployTable");
    m_view->setModel(m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->verticalHeader()->hide();
    m_view->setWordWrap(false);
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_picture = new DeployPicture(this);
    m_picture->setObjectName("deployPicture");
    m_command = new QPlainTextEdit(this);
    m_command->setObjectName("deployCommand");
    m_command->setReadOnly(true);
    m_command->setMaximumHeight(m_command->fontMetrics().height() * 5);
    m_copy = new QPushButton(tr("Copy command"), this);
    m_copy->setObjectName("deployCopy");
    connect(m_copy, &QPushButton::clicked, this,
            [this] { QApplication::clipboard()->setText(m_command->toPlainText()); });

    m_run = new EngineRunPanel(this);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_status);
    auto* middle = new QHBoxLayout;
    middle->addWidget(m_view, 3);
    middle->addWidget(m_picture, 2);
    layout->addLayout(middle, 1);
    auto* bottom = new QHBoxLayout;
    bottom->addWidget(m_command, 1);
    bottom->addWidget(m_copy, 0, Qt::AlignTop);
    layout->addLayout(bottom);
    layout->addWidget(m_run);

    for (QComboBox* c : {m_engine, m_gpu})
        connect(c, &QComboBox::currentIndexChanged, this, &DeployPanel::replan);
    for (QSpinBox* s : {m_nodes, m_perNode, m_context, m_sequences, m_hostRam})
        connect(s, &QSpinBox::valueChanged, this, &DeployPanel::replan);
    connect(m_ep, &QCheckBox::toggled, this, &DeployPanel::replan);
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex& now) { showChoice(now.row()); });
    replan();
}

void DeployPanel::setModel(std::shared_ptr<const ModuleTree> tree, std::optional<ModelConfig> config,
                           const QString& modelPath)
{
    if (modelPath != m_modelPath || tree != m_tree)
        m_run->modelChanged(); // a running engine serves the model it was started with
    m_tree = std::move(tree);
    m_config = std::move(config);
    m_modelPath = modelPath;
    replan();
}

void DeployPanel::replan()
{
    m_plan = DeployPlan{};
    m_model->removeRows(0, m_model->rowCount());
    m_picture->setChoice(nullptr, 1, 1);
    m_command->clear();
    m_copy->setEnabled(false);
    m_run->setLaunch(ServingEngine(m_engine->currentData().toInt()), {}, 1, m_tree ? m_modelPath : QString());
    // Only llama.cpp keeps experts in host RAM, and only a mixture of experts has them.
    m_hostRam->setVisible(ServingEngine(m_engine->currentData().toInt()) == ServingEngine::LlamaCpp && m_tree &&
                          m_tree->expertsPerToken() > 0);
    if (!m_tree || !m_config) {
        m_status->setText(m_tree ? tr("Deploy planning needs the checkpoint's config.json.")
                                 : tr("Open a model to plan its deployment."));
        return;
    }
    DeployRequest r;
    r.engine = ServingEngine(m_engine->currentData().toInt());
    r.contextTokens = m_context->value();
    r.sequences = m_sequences->value();
    r.expertParallel = m_ep->isChecked();
    try {
        DeployCluster cluster =
            clusterFromPreset(m_gpu->currentData().toString().toStdString(), m_nodes->value(), m_perNode->value());
        cluster.hostMemoryBytes = uint64_t(m_hostRam->value()) * 1'000'000'000ULL;
        const QFileInfo where(m_modelPath);
        const QString id = where.isDir() ? where.absoluteFilePath() : where.absolutePath();
        m_plan = planDeployment(*m_tree, *m_config, cluster, r, id.toStdString());
    } catch (const std::exception& e) {
        m_status->setText(tr("No deployment plan: %1").arg(QString::fromStdString(e.what())));
        return;
    }
    int fitting = 0;
    for (const DeployChoice& c : m_plan.choices) {
        fitting += c.fits ? 1 : 0;
        QString parallel = tr("TP %1 × PP %2").arg(c.tp).arg(c.pp);
        if (c.ep > 1)
            parallel += tr(" × EP %1").arg(c.ep);
        if (c.cpuMoeLayers > 0)
            parallel += c.cpuMoeLayers == 1 ? tr(" + experts of 1 layer in RAM")
                                            : tr(" + experts of %1 layers in RAM").arg(c.cpuMoeLayers);
        QList<QStandardItem*> row;
        const bool planned = c.weightsPerGpu > 0;
        row << new QStandardItem(parallel)
            << new QStandardItem(planned ? formatBytes(c.weightsPerGpu) : QString())
            << new QStandardItem(planned ? formatBytes(c.kvPerGpu) : QString())
            << new QStandardItem(planned ? formatBytes(c.usablePerGpu) : QString())
            << new QStandardItem(planned ? tr("%1 tok/s").arg(c.tokensPerSecond, 0, 'f', 1) : QString())
            << new QStandardItem(c.fits ? tr("fits") : QString::fromStdString(c.why));
        for (QStandardItem* item : row)
            item->setToolTip(c.fits ? QString::fromStdString(c.command) : QString::fromStdString(c.why));
        m_model->appendRow(row);
    }
    m_view->resizeColumnsToContents();
    QStringList notes;
    for (const auto& n : m_plan.notes)
        notes << QString::fromStdString(n);
    m_status->setText((fitting > 0 ? tr("%n choice(s) fit, fastest first.", "", fitting)
                                   : tr("No choice fits: more GPUs, larger ones, or a shorter context.")) +
                      QStringLiteral(" ") + notes.join(' '));
    if (!m_plan.choices.empty())
        m_view->selectRow(0);
}

void DeployPanel::showChoice(int row)
{
    if (row < 0 || size_t(row) >= m_plan.choices.size()) {
        m_picture->setChoice(nullptr, 1, 1);
        m_command->clear();
        m_copy->setEnabled(false);
        m_run->setLaunch(ServingEngine(m_engine->currentData().toInt()), {}, 1, m_tree ? m_modelPath : QString());
        return;
    }
    const DeployChoice& c = m_plan.choices[size_t(row)];
    m_picture->setChoice(&c, m_nodes->value(), m_perNode->value());
    m_command->setPlainText(c.fits ? QString::fromStdString(c.command) : QString::fromStdString(c.why));
    m_copy->setEnabled(c.fits);
    const int perNode = std::max(1, m_perNode->value());
    m_run->setLaunch(ServingEngine(m_engine->currentData().toInt()), c.fits ? QString::fromStdString(c.command) : QString(),
                     (c.tp * c.pp + perNode - 1) / perNode, m_modelPath, c.weightsPerGpu, c.kvPerGpu);
}

DeployPicture::DeployPicture(QWidget* parent) : QWidget(parent) { setMinimumSize(200, 80); }

void DeployPicture::setChoice(const DeployChoice* choice, int nodes, int gpusPerNode)
{
    m_choice = choice ? std::optional<DeployChoice>(*choice) : std::nullopt;
    m_nodes = std::max(1, nodes);
    m_perNode = std::max(1, gpusPerNode);
    update();
}

uint64_t DeployPicture::heldOn(int node, int gpu) const
{
    if (!m_choice || m_choice->stageWeights.empty())
        return 0;
    const int index = node * m_perNode + gpu;
    if (index >= m_choice->tp * m_choice->pp)
        return 0;
    const size_t stage = size_t(index / m_choice->tp);
    return m_choice->stageWeights[stage] + m_choice->stageKv[stage] + m_choice->overheadPerGpu;
}

int DeployPicture::captionLines() const { return m_choice && m_choice->cpuMoeLayers > 0 ? 4 : 3; }

QSize DeployPicture::sizeHint() const { return {360, captionLines() * fontMetrics().height() + 8 + 34 * m_nodes}; }

void DeployPicture::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing, false);
    const QPalette& pal = palette();
    if (!m_choice || m_choice->stageWeights.empty()) {
        p.setPen(pal.color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
                   m_choice ? QString::fromStdString(m_choice->why) : tr("Select a choice to see its GPUs."));
        return;
    }
    const QColor weights = pal.color(QPalette::Highlight), kv = QColor(0xf2, 0x8e, 0x2b), other = pal.color(QPalette::Mid);
    const int labelWidth = fontMetrics().horizontalAdvance(tr("node 00")) + 8;
    const int rowHeight = std::max(18, std::min(40, (height() - captionLines() * fontMetrics().height() - 8) / m_nodes));
    const double cell = double(width() - labelWidth - 4) / m_perNode;
    const double usable = double(std::max<uint64_t>(1, m_choice->usablePerGpu));
    for (int n = 0; n < m_nodes; ++n) {
        const int y = 4 + n * rowHeight;
        p.setPen(pal.color(QPalette::WindowText));
        p.drawText(QRect(0, y, labelWidth, rowHeight - 4), Qt::AlignVCenter, tr("node %1").arg(n));
        for (int g = 0; g < m_perNode; ++g) {
            const QRectF box(labelWidth + g * cell + 1, y, cell - 3, rowHeight - 6);
            const int index = n * m_perNode + g;
            if (index < m_choice->tp * m_choice->pp) {
                const size_t stage = size_t(index / m_choice->tp);
                // from the left, as the budget bars: weights, KV cache, activations and graphs
                double left = box.left();
                for (const auto& [bytes, colour] :
                     {std::pair{double(m_choice->stageWeights[stage]), weights},
                      std::pair{double(m_choice->stageKv[stage]), kv},
                      std::pair{double(m_choice->overheadPerGpu), other}}) {
                    const double w = std::min(box.right() - left, box.width() * bytes / usable);
                    p.fillRect(QRectF(left, box.top(), w, box.height()), colour);
                    left += w;
                }
            }
            const bool over = heldOn(n, g) > m_choice->usablePerGpu;
            p.setPen(over ? QColor(0xc0, 0x30, 0x30) : pal.color(QPalette::Dark));
            p.setBrush(Qt::NoBrush);
            p.drawRect(box);
        }
    }
    p.setPen(pal.color(QPalette::WindowText));
    const QRect caption(0, 4 + m_nodes * rowHeight, width(), captionLines() * fontMetrics().height());
    p.drawText(caption, Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap,
               tr("Each GPU against the %1 the engine may use: weights, KV cache, activations and graphs")
                       .arg(formatBytes(m_choice->usablePerGpu)) +
                   (m_choice->cpuMoeLayers > 0
                        ? tr("; in host RAM, the experts of the first %1 layers: %2")
                              .arg(m_choice->cpuMoeLayers)
                              .arg(formatBytes(m_choice->hostBytes))
                        : QString()));
}

} // namespace stowage
