#include "contextchart.h"

#include "chartstyle.h"
#include "display.h"
#include "themecolors.h"

#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QLabel>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QScatterSeries>
#include <QValueAxis>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace stowage {

ContextChart::ContextChart(QWidget* parent) : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 0);
    m_summary = new QLabel(this);
    m_summary->setObjectName("contextSummary");
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_chart = newChart();
    m_x = new QLogValueAxis;
    m_x->setBase(10);
    m_x->setLabelFormat("%g");
    m_x->setTitleText(tr("context (tokens)"));
    m_y = new QValueAxis;
    m_y->setTitleText(tr("% of budget"));
    m_y->setLabelFormat("%.0f");
    m_chart->addAxis(m_x, Qt::AlignBottom);
    m_chart->addAxis(m_y, Qt::AlignLeft);
    m_budgetLine = new QLineSeries;
    m_budgetLine->setName(tr("budget"));
    m_chart->addSeries(m_budgetLine);
    m_budgetLine->attachAxis(m_x);
    m_budgetLine->attachAxis(m_y);
    m_crossings = new QScatterSeries;
    m_crossings->setName(tr("runs out"));
    m_crossings->setMarkerSize(9);
    m_chart->addSeries(m_crossings);
    m_crossings->attachAxis(m_x);
    m_crossings->attachAxis(m_y);
    m_view = new QChartView(m_chart, this);
    m_view->setObjectName("contextChartView");
    m_view->setRenderHint(QPainter::Antialiasing);
    m_view->setMinimumHeight(140);
    layout->addWidget(m_summary);
    layout->addWidget(m_view, 1);
    applyPalette();
    clear(tr("Open a checkpoint to see how its memory grows with the context."));
}

void ContextChart::clear(const QString& why)
{
    for (QLineSeries* s : std::as_const(m_lines)) {
        m_chart->removeSeries(s);
        delete s;
    }
    m_lines.clear();
    m_budgetLine->clear();
    m_crossings->clear();
    m_x->setRange(1, 10);
    m_y->setRange(0, 120);
    m_summary->setText(why);
}

void ContextChart::setSweep(const ContextSweep& s)
{
    clear(QString());
    double top = 120;
    const double first = s.contexts.empty() ? 1 : double(s.contexts.front());
    const double last = std::max(first * 10, double(s.maxContext));
    for (size_t d = 0; d < s.devices.size(); ++d) {
        const ContextSweep::DeviceRow& row = s.devices[d];
        if (row.budget <= 0)
            continue; // the disk, or a device without a budget: no share to draw
        auto* line = new QLineSeries;
        line->setName(deviceLabel(row.device));
        line->setPen(QPen(deviceColor(row.device), 2));
        for (size_t i = 0; i < s.contexts.size(); ++i) {
            const double share = 100.0 * double(s.bytes[i][d]) / row.budget;
            line->append(double(s.contexts[i]), share);
            top = std::max(top, std::min(share, 300.0));
        }
        m_chart->addSeries(line);
        line->attachAxis(m_x);
        line->attachAxis(m_y);
        m_lines << line;
        if (row.runsOutAt && *row.runsOutAt > 0)
            m_crossings->append(double(*row.runsOutAt), 100.0);
    }
    m_budgetLine->append(first, 100.0);
    m_budgetLine->append(last, 100.0);
    m_x->setRange(first, last);
    m_y->setRange(0, std::ceil(top / 20.0) * 20.0);
    QStringList lines;
    for (const std::string& line : describeContextSweep(s))
        lines << QString::fromStdString(line);
    m_summary->setText(lines.isEmpty() ? tr("No device has a budget: nothing runs out.") : lines.join('\n'));
}

QString ContextChart::summary() const { return m_summary->text(); }

QLineSeries* ContextChart::deviceSeries(const QString& device) const
{
    const std::optional<Device> d = Device::parse(device.toStdString());
    if (!d)
        return nullptr;
    for (QLineSeries* s : m_lines)
        if (s->name() == deviceLabel(*d))
            return s;
    return nullptr;
}

void ContextChart::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange)
        applyPalette();
    QWidget::changeEvent(event);
}

// Qt Charts draws white unless told: every surface, text and rule from the palette.
void ContextChart::applyPalette()
{
    const QPalette& pal = palette();
    paintChart(m_chart, m_view, pal);
    const QColor base = pal.color(QPalette::Base), text = pal.color(QPalette::Text);
    m_budgetLine->setPen(QPen(mixColors(base, text, 0.45), 1.5, Qt::DashLine));
    m_crossings->setColor(text);
    m_crossings->setBorderColor(base);
}

} // namespace stowage
