#include "budgetpanel.h"

#include "moduletreemodel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QLineEdit>
#include <QSpinBox>

namespace stowage {

namespace {
const Strategy kStrategies[] = {Strategy::Auto, Strategy::Balanced, Strategy::BalancedLow0, Strategy::Sequential};
const char* const kInvalidStyle = "QLineEdit { background-color: #ffd6d6; color: #800000; }";
} // namespace

BudgetPanel::BudgetPanel(QWidget* parent) : QWidget(parent)
{
    m_form = new QFormLayout(this);
    m_form->setContentsMargins(0, 0, 0, 0);
    m_form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    m_strategy = new QComboBox(this);
    m_strategy->setObjectName("strategy");
    for (Strategy s : kStrategies)
        m_strategy->addItem(QString::fromLatin1(strategyName(s)), static_cast<int>(s));
    m_strategy->setToolTip(tr("How transformers' from_pretrained(device_map=…) spreads the layers"));
    m_form->addRow(tr("&Strategy"), m_strategy);

    m_gpus = new QSpinBox(this);
    m_gpus->setObjectName("gpuCount");
    m_gpus->setRange(0, MaxGpus);
    m_gpus->setValue(1);
    m_form->addRow(tr("&GPUs"), m_gpus);

    for (int slot = 0; slot <= CpuSlot; ++slot) {
        auto* edit = new QLineEdit(this);
        const bool cpu = slot == CpuSlot;
        edit->setObjectName(cpu ? QStringLiteral("budget_cpu") : QStringLiteral("budget_%1").arg(slot));
        edit->setPlaceholderText(tr("e.g. 8GiB, 500MB, bytes"));
        edit->setText(cpu ? QStringLiteral("32GiB") : QStringLiteral("8GiB"));
        m_good[static_cast<size_t>(slot)] = cpu ? 32ull << 30 : 8ull << 30;
        m_valid[static_cast<size_t>(slot)] = true;
        m_edits[static_cast<size_t>(slot)] = edit;
        m_form->addRow(cpu ? tr("&CPU RAM") : tr("GPU %1").arg(slot), edit);
        connect(edit, &QLineEdit::textChanged, this, [this, slot] { budgetEdited(slot); });
    }
    gpuCountChanged(m_gpus->value());

    connect(m_strategy, &QComboBox::currentIndexChanged, this, [this] { emit budgetsChanged(options()); });
    connect(m_gpus, &QSpinBox::valueChanged, this, &BudgetPanel::gpuCountChanged);
}

PlanOptions BudgetPanel::options() const
{
    PlanOptions o;
    o.strategy = strategy();
    Budgets b;
    for (int i = 0; i < gpuCount(); ++i)
        b.push_back({Device::gpu(i), double(m_good[static_cast<size_t>(i)])});
    b.push_back({Device::cpu(), double(m_good[CpuSlot])});
    o.maxMemory = std::move(b);
    return o;
}

void BudgetPanel::setStrategy(Strategy s)
{
    const int i = m_strategy->findData(static_cast<int>(s));
    if (i >= 0)
        m_strategy->setCurrentIndex(i);
}

Strategy BudgetPanel::strategy() const { return static_cast<Strategy>(m_strategy->currentData().toInt()); }

void BudgetPanel::setGpuCount(int count) { m_gpus->setValue(count); }

int BudgetPanel::gpuCount() const { return m_gpus->value(); }

int BudgetPanel::slotOf(const Device& device) const
{
    if (device.kind == Device::Cpu)
        return CpuSlot;
    if (device.kind == Device::Gpu && device.index >= 0 && device.index < MaxGpus)
        return device.index;
    return -1;
}

void BudgetPanel::setBudgetText(const Device& device, const QString& text)
{
    if (QLineEdit* e = budgetEdit(device))
        e->setText(text);
}

QString BudgetPanel::budgetText(const Device& device) const
{
    const QLineEdit* e = budgetEdit(device);
    return e ? e->text() : QString();
}

bool BudgetPanel::budgetValid(const Device& device) const
{
    const int slot = slotOf(device);
    return slot >= 0 && m_valid[static_cast<size_t>(slot)];
}

QLineEdit* BudgetPanel::budgetEdit(const Device& device) const
{
    const int slot = slotOf(device);
    return slot >= 0 ? m_edits[static_cast<size_t>(slot)] : nullptr;
}

void BudgetPanel::budgetEdited(int slot)
{
    const auto s = static_cast<size_t>(slot);
    QLineEdit* edit = m_edits[s];
    try {
        const uint64_t bytes = parseSize(edit->text().trimmed().toStdString(), "budget");
        m_good[s] = bytes;
        m_valid[s] = true;
        edit->setStyleSheet(QString());
        edit->setToolTip(ModuleTreeModel::formatBytes(bytes));
    } catch (const std::exception& e) {
        // Keep the last good value; say why in the tooltip.
        m_valid[s] = false;
        edit->setStyleSheet(QString::fromLatin1(kInvalidStyle));
        edit->setToolTip(QString::fromStdString(e.what()));
        return;
    }
    if (slot == CpuSlot || slot < gpuCount())
        emit budgetsChanged(options());
}

void BudgetPanel::gpuCountChanged(int count)
{
    for (int i = 0; i < MaxGpus; ++i)
        m_form->setRowVisible(m_edits[static_cast<size_t>(i)], i < count);
    emit budgetsChanged(options());
}

} // namespace stowage
