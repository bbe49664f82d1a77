#include "hubcachedialog.h"

#include "display.h"
#include "hubcachemodel.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace stowage {

HubCacheDialog::HubCacheDialog(QWidget* parent) : QDialog(parent)
{
    setObjectName("hubCacheDialog");
    setWindowTitle(tr("Hugging Face Hub Cache"));
    resize(820, 440);
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    m_root = new QComboBox(this);
    m_root->setEditable(true);
    for (const std::string& root : hubCacheRoots())
        m_root->addItem(QString::fromStdString(root));
    auto* browse = new QPushButton(tr("Browse…"), this);
    top->addWidget(new QLabel(tr("Cache:"), this));
    top->addWidget(m_root, 1);
    top->addWidget(browse);
    layout->addLayout(top);

    m_model = new HubCacheModel(this);
    m_view = new QTableView(this);
    m_view->setModel(m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->verticalHeader()->hide();
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->setShowGrid(false);
    m_view->setAlternatingRowColors(true);
    layout->addWidget(m_view, 1);
    m_status = new QLabel(this);
    layout->addWidget(m_status);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    m_open = buttons->addButton(tr("Open"), QDialogButtonBox::AcceptRole);
    m_open->setEnabled(false);
    layout->addWidget(buttons);

    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_open, &QPushButton::clicked, this, &HubCacheDialog::openSelected);
    connect(m_view, &QTableView::activated, this, &HubCacheDialog::openSelected);
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& i) {
        m_open->setEnabled(i.isValid() && i.data(HubCacheModel::PlannableRole).toBool());
    });
    connect(m_root, &QComboBox::currentTextChanged, this, &HubCacheDialog::rescan);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Hub Cache Folder"), m_root->currentText());
        if (!dir.isEmpty())
            setRoot(dir);
    });
}

void HubCacheDialog::setRoot(const QString& root)
{
    if (m_root->findText(root) < 0)
        m_root->addItem(root);
    m_root->setCurrentText(root); // rescans
}

void HubCacheDialog::rescan()
{
    const int job = ++m_job;
    const QString root = m_root->currentText();
    m_scanning = true;
    m_status->setText(tr("Scanning %1…").arg(root));
    auto* watcher = new QFutureWatcher<std::vector<HubCacheEntry>>(this);
    connect(watcher, &QFutureWatcher<std::vector<HubCacheEntry>>::finished, this, [this, watcher, job, root] {
        watcher->deleteLater();
        if (job != m_job)
            return;
        std::vector<HubCacheEntry> entries = watcher->result();
        quint64 total = 0;
        for (const auto& e : entries)
            total += e.diskBytes;
        const int count = static_cast<int>(entries.size());
        m_model->setEntries(std::move(entries));
        m_view->resizeColumnsToContents();
        m_status->setText(count == 0 ? tr("No models in %1").arg(root)
                                     : tr("%1, %2 on disk").arg(countOf(count, tr("model"), tr("models")), formatBytes(total)));
        m_scanning = false;
        emit scanned();
    });
    watcher->setFuture(QtConcurrent::run([root = root.toStdString()] { return scanHubCache(root); }));
}

void HubCacheDialog::openSelected()
{
    const QModelIndex i = m_view->currentIndex();
    if (!i.isValid() || !i.data(HubCacheModel::PlannableRole).toBool())
        return;
    emit openRequested(i.data(HubCacheModel::PathRole).toString());
    accept();
}

} // namespace stowage
