#include "budgetbarsview.h"

#include "budgetbar.h"
#include "budgetmodel.h"
#include "display.h"
#include "stowage/costmodel.h"

#include <QGridLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QToolButton>
#include <QVBoxLayout>

namespace stowage {

namespace {
const char* const kInvalidStyle = "QLineEdit { background-color: #ffd6d6; color: #800000; }";
}

BudgetBarsView::BudgetBarsView(BudgetModel* model, QWidget* parent) : QWidget(parent), m_model(model)
{
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->setSpacing(4);
    auto* gridHolder = new QWidget(this);
    m_grid = new QGridLayout(gridHolder);
    m_grid->setContentsMargins(0, 0, 0, 0);
    m_grid->setHorizontalSpacing(8);
    m_grid->setVerticalSpacing(2);
    m_grid->setColumnStretch(1, 1);
    outer->addWidget(gridHolder);

    m_add = new QToolButton(this);
    m_add->setObjectName("addSimulatedGpu");
    m_add->setText(tr("Add simulated GPU"));
    m_add->setToolTip(tr("Plan for a GPU this machine does not have: a hardware preset or a custom size"));
    m_add->setPopupMode(QToolButton::InstantPopup);
    m_add->setToolButtonStyle(Qt::ToolButtonTextOnly);
    auto* menu = new QMenu(m_add);
    for (const std::string& key : hardwarePresetNames()) {
        if (key == "this-machine")
            continue;
        const GpuProfile g = hardwarePreset(key).gpus.front();
        const QString preset = QString::fromStdString(key);
        menu->addAction(tr("%1 (%2)").arg(QString::fromStdString(g.name), formatBytes(g.memoryBytes)), this,
                        [this, preset] { addPresetGpu(preset); });
    }
    menu->addSeparator();
    menu->addAction(tr("Custom size…"), this, &BudgetBarsView::customGpuRequested);
    m_add->setMenu(menu);
    auto* addRow = new QHBoxLayout;
    addRow->addWidget(m_add);
    addRow->addStretch(1);
    outer->addLayout(addRow);

    connect(model, &QAbstractItemModel::modelReset, this, &BudgetBarsView::rebuild);
    connect(model, &QAbstractItemModel::rowsInserted, this, &BudgetBarsView::rebuild);
    connect(model, &QAbstractItemModel::rowsRemoved, this, &BudgetBarsView::rebuild);
    connect(model, &QAbstractItemModel::dataChanged, this, [this](const QModelIndex& tl, const QModelIndex& br) {
        for (int r = tl.row(); r <= br.row(); ++r)
            refreshRow(r);
    });
    rebuild();
}

bool BudgetBarsView::addPresetGpu(const QString& preset)
{
    try {
        const GpuProfile g = hardwarePreset(preset.toStdString()).gpus.front();
        m_model->addSimulatedGpu(QString::fromStdString(g.name), preset, g.memoryBytes);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

BudgetBar* BudgetBarsView::bar(int row) const { return row >= 0 && row < m_rows.size() ? m_rows[row].bar : nullptr; }

QLineEdit* BudgetBarsView::edit(int row) const { return row >= 0 && row < m_rows.size() ? m_rows[row].edit : nullptr; }

QLabel* BudgetBarsView::problemLabel(int row) const
{
    return row >= 0 && row < m_rows.size() ? m_rows[row].problem : nullptr;
}

void BudgetBarsView::rebuild()
{
    // Rows are few (a handful of devices): rebuilding on insert/remove is simplest and keeps focus order right.
    for (Row& r : m_rows) {
        delete r.label;
        delete r.bar;
        delete r.edit;
        delete r.remove;
        delete r.problem;
    }
    m_rows.clear();
    if (!m_model)
        return;
    QWidget* holder = m_grid->parentWidget();
    for (int i = 0; i < m_model->rowCount(); ++i) {
        Row r;
        r.label = new QLabel(holder);
        r.label->setTextFormat(Qt::RichText);
        r.bar = new BudgetBar(m_model, i, holder);
        r.edit = new QLineEdit(holder);
        r.edit->setPlaceholderText(tr("8GiB"));
        r.edit->setMaximumWidth(r.edit->fontMetrics().horizontalAdvance(QStringLiteral("0000.00GiB")) + 16);
        r.edit->setToolTip(tr("Budget as Accelerate writes it: 10GB = 10⁹ bytes, 10GiB = 2³⁰, 10Gb in bits, or bytes"));
        const QString name = QString::fromStdString(m_model->at(i).device.name());
        r.bar->setObjectName(QStringLiteral("budgetBar_") + name);
        r.edit->setObjectName(QStringLiteral("budgetEdit_") + name);
        r.problem = new QLabel(holder);
        r.problem->setObjectName(QStringLiteral("budgetProblem_") + name);
        r.problem->setWordWrap(true);
        r.problem->setStyleSheet(QStringLiteral("QLabel { color: #c03030; }"));
        r.problem->hide();
        // Each device takes two grid rows: the bar, then the words under it (an empty row takes no room).
        const int gridRow = 2 * i;
        m_grid->addWidget(r.label, gridRow, 0);
        m_grid->addWidget(r.bar, gridRow, 1);
        m_grid->addWidget(r.edit, gridRow, 2, Qt::AlignTop);
        m_grid->addWidget(r.problem, gridRow + 1, 1, 1, 3);
        if (m_model->at(i).simulated) {
            r.remove = new QToolButton(holder);
            r.remove->setText(QStringLiteral("✕"));
            r.remove->setAutoRaise(true);
            r.remove->setToolTip(tr("Remove this simulated GPU"));
            m_grid->addWidget(r.remove, gridRow, 3, Qt::AlignTop);
            connect(r.remove, &QToolButton::clicked, this, [this, bar = r.bar] {
                // Deferred: the click handler must not delete its own button.
                const int row = bar->row();
                QMetaObject::invokeMethod(this, [this, row] { m_model->removeSimulatedGpu(row); }, Qt::QueuedConnection);
            });
        }
        if (m_model->at(i).device.kind == Device::Gpu) {
            // Which GPU fills first, and leaving one out (a display GPU, a
            // small card beside a large one): on the bar's context menu.
            r.bar->setContextMenuPolicy(Qt::CustomContextMenu);
            connect(r.bar, &QWidget::customContextMenuRequested, this, [this, bar = r.bar](const QPoint& at) {
                gpuMenu(bar->row())->popup(bar->mapToGlobal(at));
            });
        }
        connect(r.edit, &QLineEdit::editingFinished, this, [this, bar = r.bar] { applyText(bar->row()); });
        connect(r.edit, &QLineEdit::textEdited, this, [this, bar = r.bar] {
            // Say at once whether it parses, and why not; apply on Return or leaving the field.
            const int row = bar->row();
            QLineEdit* edit = m_rows[row].edit;
            m_rows[row].textError.clear();
            try {
                parseSize(edit->text().trimmed().toStdString(), deviceLabel(m_model->at(row).device).toStdString());
                edit->setStyleSheet(QString());
            } catch (const std::exception& e) {
                m_rows[row].textError = QString::fromStdString(e.what());
                edit->setStyleSheet(QString::fromLatin1(kInvalidStyle));
            }
            showProblem(row);
        });
        m_rows.push_back(r);
        refreshRow(i);
    }
    // Tab walks bar, field, bar, field…
    for (int i = 0; i < m_rows.size(); ++i) {
        setTabOrder(m_rows[i].bar, m_rows[i].edit);
        if (i + 1 < m_rows.size())
            setTabOrder(m_rows[i].edit, m_rows[i + 1].bar);
    }
}

void BudgetBarsView::refreshRow(int row)
{
    if (!m_model || row < 0 || row >= m_rows.size())
        return;
    const BudgetDevice& d = m_model->at(row);
    Row& r = m_rows[row];
    const QString hw = d.simulated ? tr("%1 · simulated").arg(d.hardware.toHtmlEscaped()) : d.hardware.toHtmlEscaped();
    r.label->setText(QStringLiteral("<span style='color:%1'>■</span> <b>%2</b><br><small>%3</small>")
                         .arg(deviceColor(d.device).name(), deviceLabel(d.device),
                              d.excluded ? tr("%1 · left out").arg(hw) : hw));
    r.bar->setEnabled(!d.excluded);
    r.edit->setEnabled(!d.excluded);
    r.bar->setAccessibleName(tr("%1 budget").arg(deviceLabel(d.device)));
    r.bar->update();
    // A field being typed into keeps its text until the user applies it.
    if (!r.edit->hasFocus() || !r.edit->isModified()) {
        const QString text = sizeString(d.budget);
        if (r.edit->text() != text) {
            r.edit->setText(text);
            r.edit->setStyleSheet(QString());
            r.textError.clear();
        }
    }
    showProblem(row);
}

QMenu* BudgetBarsView::gpuMenu(int row)
{
    auto* menu = new QMenu(this);
    menu->setAttribute(Qt::WA_DeleteOnClose);
    menu->setObjectName("gpuMenu");
    const bool out = m_model->at(row).excluded;
    QAction* first = menu->addAction(tr("Fill this GPU first"), this, [this, row] { m_model->fillFirst(row); });
    QAction* last = menu->addAction(tr("Fill this GPU last"), this, [this, row] { m_model->fillLast(row); });
    first->setEnabled(!out);
    last->setEnabled(!out);
    menu->addSeparator();
    QAction* exclude = menu->addAction(tr("Leave this GPU out of the plan"), this,
                                       [this, row](bool checked) { m_model->setExcluded(row, checked); });
    exclude->setCheckable(true);
    exclude->setChecked(out);
    return menu;
}

void BudgetBarsView::showProblem(int row)
{
    const Row& r = m_rows[row];
    QString text = m_model->problem(row);
    if (!r.textError.isEmpty()) {
        // "GPU 0: 'abc' is not a valid size (…); the budget stays 3.00 MiB."
        text = tr("%1; the budget stays %2.").arg(r.textError, formatBytes(m_model->at(row).budget)) +
               (text.isEmpty() ? QString() : QStringLiteral(" ") + text);
    }
    r.problem->setText(text);
    r.problem->setVisible(!text.isEmpty());
}

void BudgetBarsView::applyText(int row)
{
    if (!m_model || row < 0 || row >= m_rows.size())
        return;
    QLineEdit* edit = m_rows[row].edit;
    const QString error = m_model->setBudgetText(row, edit->text());
    if (!error.isEmpty()) {
        // Keep the last good budget; say why under the bar and in the tooltip.
        edit->setStyleSheet(QString::fromLatin1(kInvalidStyle));
        edit->setToolTip(error);
        m_rows[row].textError = error;
        showProblem(row);
        return;
    }
    edit->setModified(false);
    edit->setStyleSheet(QString());
    m_rows[row].textError.clear();
    refreshRow(row);
}

} // namespace stowage
