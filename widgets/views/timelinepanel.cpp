#include "timelinepanel.h"

#include "timelinedelegate.h"
#include "tracemodel.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSlider>
#include <QTableView>
#include <QVBoxLayout>

namespace stowage {
namespace {

QString swatch(const QColor& c, const QString& text)
{
    return QStringLiteral("<span style='background:%1'>&nbsp;&nbsp;&nbsp;</span>&nbsp;%2&nbsp;&nbsp;").arg(c.name(), text);
}

QString legendText()
{
    TraceSpan gpu;
    gpu.device = QStringLiteral("0");
    TraceSpan fetch = gpu, pre = gpu, map = gpu, wait = gpu;
    fetch.kind = TraceSpan::Fetch;
    pre.kind = TraceSpan::Prefetch;
    map.kind = TraceSpan::Map;
    wait.kind = TraceSpan::Wait;
    return TimelinePanel::tr("Upper lane: ") + swatch(spanColor(fetch), TimelinePanel::tr("fetch")) +
           swatch(spanColor(pre), TimelinePanel::tr("prefetch")) + swatch(spanColor(map), TimelinePanel::tr("read from disk")) +
           swatch(spanColor(wait), TimelinePanel::tr("wait")) + TimelinePanel::tr("&nbsp; Lower lane: ") +
           swatch(spanColor(gpu), TimelinePanel::tr("compute (device colour)")) +
           TimelinePanel::tr("&nbsp; <span style='color:#b00020'>▭</span> critical path: what the token waited on. "
                             "Hover a bar for bytes and times.");
}

} // namespace

TimelinePanel::TimelinePanel(TraceModel* trace, QWidget* parent)
    : QWidget(parent),
      m_trace(trace)
{
    auto* l = new QVBoxLayout(this);
    l->setContentsMargins(4, 4, 4, 4);
    auto* top = new QHBoxLayout;
    m_slider = new QSlider(Qt::Horizontal, this);
    m_slider->setObjectName("stepSlider");
    m_slider->setRange(0, 0);
    m_stepLabel = new QLabel(tr("no steps yet"), this);
    m_stepLabel->setMinimumWidth(110);
    m_follow = new QCheckBox(tr("Follow the last token"), this);
    m_follow->setChecked(true);
    top->addWidget(new QLabel(tr("Token"), this));
    top->addWidget(m_slider, 1);
    top->addWidget(m_stepLabel);
    top->addWidget(m_follow);
    l->addLayout(top);

    m_view = new QTableView(this);
    m_view->setObjectName("timelineView");
    m_view->setModel(m_trace);
    m_view->setItemDelegateForColumn(TraceModel::TimelineColumn, new TimelineDelegate(m_view));
    m_view->verticalHeader()->hide();
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 8);
    m_view->setShowGrid(false);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setMouseTracking(true);
    m_view->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOn); // the scale must not jump
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->horizontalHeader()->setDefaultAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    m_view->setColumnWidth(TraceModel::UnitColumn, 170);
    m_view->setColumnWidth(TraceModel::DeviceColumn, 90);
    m_view->setColumnWidth(TraceModel::WaitColumn, 70);
    m_view->setColumnWidth(TraceModel::ComputeColumn, 70);
    l->addWidget(m_view, 1);

    auto* legend = new QLabel(legendText(), this);
    legend->setObjectName("timelineLegend");
    legend->setTextFormat(Qt::RichText);
    legend->setWordWrap(true);
    l->addWidget(legend);

    connect(m_slider, &QSlider::valueChanged, this, &TimelinePanel::onSlider);
    connect(m_follow, &QCheckBox::toggled, this, [this](bool on) {
        if (on) {
            m_trace->showStep(-1);
            m_slider->setValue(m_slider->maximum());
        }
    });
    connect(m_trace, &TraceModel::stepsChanged, this, &TimelinePanel::onStepsChanged);
}

QString TimelinePanel::stepText() const { return m_stepLabel->text(); }

void TimelinePanel::onStepsChanged()
{
    const QVector<int> steps = m_trace->steps();
    m_slider->setRange(0, std::max(0, int(steps.size()) - 1));
    if (m_follow->isChecked())
        m_slider->setValue(m_slider->maximum());
    showShownStep();
}

void TimelinePanel::onSlider(int position)
{
    const QVector<int> steps = m_trace->steps();
    if (steps.isEmpty())
        return;
    if (position < steps.size() - 1)
        m_follow->setChecked(false);
    m_trace->showStep(m_follow->isChecked() ? -1 : steps.value(position));
    showShownStep();
}

void TimelinePanel::showShownStep()
{
    const int latest = m_trace->latestStep();
    m_stepLabel->setText(latest < 0 ? tr("no steps yet") : tr("step %1 of %2").arg(m_trace->shownStep()).arg(latest));
    m_view->horizontalHeader()->viewport()->update(); // the time scale in the header
}

} // namespace stowage
