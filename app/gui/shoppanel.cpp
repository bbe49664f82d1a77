#include "shoppanel.h"

#include "stowage/kvcache.h"
#include "stowage/units.h"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

#include <cmath>

namespace stowage {

namespace {

struct Outcome {
    ShopResult result;
    QString error;
};

// "32, 64,128" -> {32, 64, 128}; empty when any item is not a positive whole number.
std::vector<int> ramSizes(const QString& text)
{
    std::vector<int> out;
    for (const QString& part : text.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int v = part.trimmed().toInt(&ok);
        if (!ok || v <= 0)
            return {};
        out.push_back(v);
    }
    return out;
}

} // namespace

ShopPanel::ShopPanel(QWidget* parent) : QWidget(parent)
{
    setObjectName("shopPanel");
    auto* form = new QFormLayout;
    m_speed = new QDoubleSpinBox(this);
    m_speed->setObjectName("shopSpeed");
    m_speed->setRange(0.1, 100000);
    m_speed->setDecimals(1);
    m_speed->setValue(20);
    m_speed->setSuffix(tr(" tok/s"));
    m_speed->setToolTip(tr("The decode speed the setup must reach (predicted, batch as in the KV-cache box)"));
    m_maxGpus = new QSpinBox(this);
    m_maxGpus->setObjectName("shopMaxGpus");
    m_maxGpus->setRange(1, 8);
    m_maxGpus->setValue(8);
    m_ram = new QLineEdit(QStringLiteral("32, 64, 128, 256, 512"), this);
    m_ram->setObjectName("shopRam");
    m_ram->setToolTip(tr("RAM sizes to try, in GiB, separated by commas"));
    auto* row = new QHBoxLayout;
    row->addWidget(m_speed);
    row->addWidget(new QLabel(tr("up to"), this));
    row->addWidget(m_maxGpus);
    row->addWidget(new QLabel(tr("GPUs of one model, RAM (GiB)"), this));
    row->addWidget(m_ram, 1);
    form->addRow(tr("Reach"), row);

    m_status = new QLabel(this);
    m_status->setObjectName("shopStatus");
    m_status->setWordWrap(true);
    m_model = new QStandardItemModel(0, 6, this);
    m_model->setHorizontalHeaderLabels(
        {tr("Setup"), tr("RAM"), tr("Price (GPUs + RAM)"), tr("Predicted"), tr("Weights on"), tr("Target")});
    m_view = new QTableView(this);
    m_view->setObjectName("shopTable");
    m_view->setModel(m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->verticalHeader()->hide();
    m_view->setWordWrap(false); // one line a setup: the reason in full on hover
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_open = new QPushButton(tr("Open as simulated GPUs"), this);
    m_open->setObjectName("shopOpen");
    m_open->setEnabled(false);
    m_open->setToolTip(tr("Replace the simulated GPUs in the budget bars with the selected setup's GPUs"));
    m_notes = new QLabel(this);
    m_notes->setObjectName("shopNotes");
    m_notes->setWordWrap(true);
    m_notes->setForegroundRole(QPalette::PlaceholderText);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_status);
    layout->addWidget(m_view, 1);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_notes, 1);
    buttons->addWidget(m_open);
    layout->addLayout(buttons);

    m_debounce = new QTimer(this);
    m_debounce->setSingleShot(true);
    m_debounce->setInterval(300);
    connect(m_debounce, &QTimer::timeout, this, &ShopPanel::searchWhenShown);
    auto later = [this] { invalidate(); };
    connect(m_speed, &QDoubleSpinBox::valueChanged, this, later);
    connect(m_maxGpus, &QSpinBox::valueChanged, this, later);
    connect(m_ram, &QLineEdit::textChanged, this, later);
    connect(m_view->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        const auto rows = m_view->selectionModel()->selectedRows();
        m_open->setEnabled(!rows.isEmpty() && !m_running && size_t(rows.first().row()) < m_setups.size() &&
                           m_setups[size_t(rows.first().row())].gpuCount > 0);
    });
    connect(m_open, &QPushButton::clicked, this, [this] {
        const auto rows = m_view->selectionModel()->selectedRows();
        if (rows.isEmpty() || size_t(rows.first().row()) >= m_setups.size())
            return;
        const ShopSetup& s = m_setups[size_t(rows.first().row())];
        if (s.gpuCount > 0)
            emit openSetup(QString::fromStdString(s.gpu), s.gpuCount);
    });
    m_status->setText(tr("Open a model to see the hardware that runs it."));
}

void ShopPanel::setModel(std::shared_ptr<const ModuleTree> tree, std::optional<ModelConfig> config)
{
    m_tree = std::move(tree);
    m_config = std::move(config);
    invalidate();
}

void ShopPanel::setKvCache(int context, int batch)
{
    if (context == m_context && batch == m_batch)
        return;
    m_context = std::max(0, context);
    m_batch = std::max(1, batch);
    invalidate();
}

void ShopPanel::invalidate()
{
    // Whatever is on screen or under way answers other inputs now: gone.
    ++m_job;
    m_running = false;
    m_stale = true;
    m_setups.clear();
    m_model->removeRows(0, m_model->rowCount());
    m_open->setEnabled(false);
    m_notes->clear();
    m_status->setText(m_tree ? tr("Searching once the inputs settle…") : tr("Open a model to see the hardware that runs it."));
    m_debounce->start();
}

void ShopPanel::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    if (m_stale)
        search();
}

void ShopPanel::searchWhenShown()
{
    if (isVisible())
        search();
}

void ShopPanel::search()
{
    m_debounce->stop();
    m_stale = false;
    const int job = ++m_job;
    m_setups.clear();
    m_model->removeRows(0, m_model->rowCount());
    m_open->setEnabled(false);
    m_notes->clear();
    if (!m_tree) {
        m_running = false;
        m_status->setText(tr("Open a model to see the hardware that runs it."));
        emit searched();
        return;
    }
    ShopRequest r;
    r.minTokensPerSecond = m_speed->value();
    r.maxGpus = m_maxGpus->value();
    r.ramGiB = ramSizes(m_ram->text());
    if (r.ramGiB.empty()) {
        m_running = false;
        m_status->setText(tr("RAM sizes: write whole GiB separated by commas, such as 64, 128."));
        emit searched();
        return;
    }
    std::optional<KvReserve> kv;
    if (m_context > 0 && m_config) {
        try {
            kv = kvReserveFor(*m_config, *m_tree, m_context, m_batch, m_tree->dtype().value_or(DType::BF16));
        } catch (const std::exception&) {
            kv.reset(); // an unknown attention shape: planned without the cache, and said so below
        }
    }
    m_running = true;
    m_status->setText(tr("Planning every setup for %1 tok/s…").arg(r.minTokensPerSecond));
    auto* watcher = new QFutureWatcher<Outcome>(this);
    connect(watcher, &QFutureWatcher<Outcome>::finished, this, [this, watcher, job] {
        const Outcome o = watcher->result();
        watcher->deleteLater();
        show(job, o.result, o.error);
    });
    const std::shared_ptr<const ModuleTree> tree = m_tree;
    const bool kvAsked = m_context > 0;
    watcher->setFuture(QtConcurrent::run([tree, kv, r, kvAsked] {
        Outcome o;
        try {
            o.result = shopFor(*tree, kv, r);
            if (kvAsked && !kv)
                o.result.notes.push_back("The KV cache is not counted: Stowage does not know this model's attention.");
        } catch (const std::exception& e) {
            o.error = QString::fromStdString(e.what());
        }
        return o;
    }));
}

void ShopPanel::show(int job, const ShopResult& result, const QString& error)
{
    if (job != m_job)
        return; // the inputs changed while it ran: a newer search is on its way
    m_running = false;
    if (!error.isEmpty()) {
        m_status->setText(tr("No search: %1").arg(error));
        emit searched();
        return;
    }
    m_setups = result.setups;
    int meeting = 0;
    for (const ShopSetup& s : m_setups) {
        meeting += s.meets ? 1 : 0;
        QList<QStandardItem*> row;
        const QString setup = s.gpuCount == 0 ? tr("CPU only")
                                              : QStringLiteral("%1 × %2").arg(s.gpuCount).arg(QString::fromStdString(s.gpu));
        row << new QStandardItem(setup) << new QStandardItem(tr("%1 GiB").arg(s.ramGiB))
            << new QStandardItem(QStringLiteral("$") + QString::fromStdString(grouped(uint64_t(std::llround(s.priceUsd)))))
            << new QStandardItem(tr("%1 tok/s").arg(s.estimate.tokensPerSecond, 0, 'f', 1))
            << new QStandardItem(QString::fromStdString(s.where))
            << new QStandardItem(s.meets ? tr("meets") : QString::fromStdString(s.why));
        row[2]->setToolTip(QString::fromStdString(s.priceNote));
        for (QStandardItem* item : row)
            item->setToolTip(item->toolTip().isEmpty() ? QString::fromStdString(s.why) : item->toolTip());
        m_model->appendRow(row);
    }
    m_view->resizeColumnsToContents();
    m_status->setText(meeting > 0 ? tr("%n setup(s) reach %1 tok/s, cheapest first (%2 planned).", "", meeting)
                                        .arg(m_speed->value())
                                        .arg(result.tried)
                                  : tr("No setup reaches %1 tok/s; the fastest of each GPU model are listed (%2 planned).")
                                        .arg(m_speed->value())
                                        .arg(result.tried));
    QStringList notes;
    for (const auto& n : result.notes)
        notes << QString::fromStdString(n);
    m_notes->setText(notes.join(' '));
    if (!m_setups.empty())
        m_view->selectRow(0);
    emit searched();
}

} // namespace stowage
