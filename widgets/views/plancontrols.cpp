#include "plancontrols.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>

namespace stowage {

namespace {
const Strategy kStrategies[] = {Strategy::Auto, Strategy::Balanced, Strategy::BalancedLow0, Strategy::Sequential,
                                Strategy::ExpertsInRam};
const DType kDTypes[] = {DType::BF16, DType::F16, DType::F32};
} // namespace

PlanControls::PlanControls(QWidget* parent) : QWidget(parent)
{
    auto* grid = new QGridLayout(this);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->setHorizontalSpacing(8);
    grid->setVerticalSpacing(4);

    m_strategy = new QComboBox(this);
    m_strategy->setObjectName("strategy");
    for (Strategy s : kStrategies)
        m_strategy->addItem(QString::fromLatin1(strategyName(s)), static_cast<int>(s));
    m_strategy->setToolTip(tr("device_map=… : how from_pretrained spreads the layers over the devices"));

    m_dtype = new QComboBox(this);
    m_dtype->setObjectName("dtype");
    m_dtype->addItem(tr("auto"), -1);
    for (DType d : kDTypes)
        m_dtype->addItem(QString::fromLatin1(dtypeTorchName(d)), static_cast<int>(d));
    m_dtype->setToolTip(tr("dtype=… : the type the weights load in"));

    m_reference = new QComboBox(this);
    m_reference->setObjectName("reference");
    m_reference->addItem(tr("transformers 5.6"), static_cast<int>(Reference::Transformers));
    m_reference->addItem(tr("accelerate 1.13"), static_cast<int>(Reference::Accelerate));
    m_reference->setToolTip(tr("Whose sizing and balancing rules to follow: from_pretrained, or "
                               "load_checkpoint_and_dispatch (Accelerate's own infer_auto_device_map)"));

    m_noSplit = new QLineEdit(this);
    m_noSplit->setObjectName("noSplit");
    m_noSplit->setClearButtonEnabled(true);
    m_noSplit->setToolTip(tr("Module classes never split across devices, comma-separated; empty: the model's own"));

    m_kv = new QCheckBox(tr("KV cache"), this);
    m_kv->setObjectName("kvCache");
    m_kv->setToolTip(tr("Keep room for the KV cache of a generation of this context and batch on the devices "
                        "that hold the layers"));
    m_context = new QSpinBox(this);
    m_context->setObjectName("kvContext");
    m_context->setRange(1, 10'000'000);
    m_context->setValue(4096);
    m_context->setSuffix(tr(" tokens"));
    m_context->setEnabled(false);
    m_batch = new QSpinBox(this);
    m_batch->setObjectName("kvBatch");
    m_batch->setRange(1, 4096);
    m_batch->setPrefix(QStringLiteral("× "));
    m_batch->setEnabled(false);

    auto label = [this](const QString& text, QWidget* buddy) {
        auto* l = new QLabel(text, this);
        l->setBuddy(buddy);
        return l;
    };
    grid->addWidget(label(tr("&Strategy"), m_strategy), 0, 0);
    grid->addWidget(m_strategy, 0, 1);
    grid->addWidget(label(tr("d&type"), m_dtype), 0, 2);
    grid->addWidget(m_dtype, 0, 3);
    grid->addWidget(label(tr("R&eference"), m_reference), 0, 4);
    grid->addWidget(m_reference, 0, 5);
    grid->addWidget(label(tr("&No split"), m_noSplit), 1, 0);
    grid->addWidget(m_noSplit, 1, 1, 1, 3);
    auto* kvRow = new QHBoxLayout;
    kvRow->addWidget(m_kv);
    kvRow->addWidget(m_context, 1);
    kvRow->addWidget(m_batch);
    grid->addLayout(kvRow, 1, 4, 1, 2);
    grid->setColumnStretch(1, 1);
    grid->setColumnStretch(3, 1);
    grid->setColumnStretch(5, 1);

    connect(m_strategy, &QComboBox::currentIndexChanged, this, &PlanControls::optionsChanged);
    connect(m_dtype, &QComboBox::currentIndexChanged, this, &PlanControls::sizingChanged);
    connect(m_reference, &QComboBox::currentIndexChanged, this, &PlanControls::sizingChanged);
    connect(m_noSplit, &QLineEdit::editingFinished, this, &PlanControls::optionsChanged);
    connect(m_kv, &QCheckBox::toggled, this, [this](bool on) {
        m_context->setEnabled(on);
        m_batch->setEnabled(on);
        emit optionsChanged();
    });
    connect(m_context, &QSpinBox::valueChanged, this, [this] {
        if (m_kv->isChecked())
            emit optionsChanged();
    });
    connect(m_batch, &QSpinBox::valueChanged, this, [this] {
        if (m_kv->isChecked())
            emit optionsChanged();
    });
}

Strategy PlanControls::strategy() const { return static_cast<Strategy>(m_strategy->currentData().toInt()); }

void PlanControls::setStrategy(Strategy s)
{
    const int i = m_strategy->findData(static_cast<int>(s));
    if (i >= 0)
        m_strategy->setCurrentIndex(i);
}

std::optional<DType> PlanControls::dtype() const
{
    const int v = m_dtype->currentData().toInt();
    return v < 0 ? std::nullopt : std::optional<DType>(static_cast<DType>(v));
}

void PlanControls::setDType(std::optional<DType> dt)
{
    const int i = m_dtype->findData(dt ? static_cast<int>(*dt) : -1);
    if (i >= 0)
        m_dtype->setCurrentIndex(i);
}

void PlanControls::setAutoDType(DType dt) { m_dtype->setItemText(0, tr("auto (%1)").arg(QLatin1String(dtypeTorchName(dt)))); }

Reference PlanControls::reference() const { return static_cast<Reference>(m_reference->currentData().toInt()); }

void PlanControls::setReference(Reference r)
{
    const int i = m_reference->findData(static_cast<int>(r));
    if (i >= 0)
        m_reference->setCurrentIndex(i);
}

std::optional<std::vector<std::string>> PlanControls::noSplit() const
{
    const QString text = m_noSplit->text().trimmed();
    if (text.isEmpty())
        return std::nullopt;
    std::vector<std::string> out;
    for (const QString& c : text.split(QLatin1Char(','), Qt::SkipEmptyParts))
        if (!c.trimmed().isEmpty())
            out.push_back(c.trimmed().toStdString());
    return out;
}

void PlanControls::setNoSplit(const QString& commaSeparated)
{
    m_noSplit->setText(commaSeparated);
    emit optionsChanged();
}

void PlanControls::setNoSplitPlaceholder(const QString& modelClasses)
{
    m_noSplit->setPlaceholderText(modelClasses.isEmpty() ? tr("(none)") : tr("model's: %1").arg(modelClasses));
}

std::optional<std::pair<int, int>> PlanControls::kvCache() const
{
    if (!m_kv->isChecked())
        return std::nullopt;
    return std::make_pair(m_context->value(), m_batch->value());
}

void PlanControls::setKvCache(std::optional<std::pair<int, int>> kv)
{
    const QSignalBlocker b1(m_context), b2(m_batch);
    if (kv) {
        m_context->setValue(kv->first);
        m_batch->setValue(kv->second);
    }
    if (m_kv->isChecked() != kv.has_value())
        m_kv->setChecked(kv.has_value());
    else
        emit optionsChanged();
}

} // namespace stowage
