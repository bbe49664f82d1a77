#include "chartstyle.h"

#include "themecolors.h"

#include <QAbstractAxis>
#include <QChart>
#include <QChartView>
#include <QLegend>

namespace stowage {

QChart* newChart(const QString& title)
{
    auto* c = new QChart;
    if (!title.isEmpty()) {
        c->setTitle(title);
        QFont f = c->titleFont();
        f.setBold(true);
        f.setPointSizeF(f.pointSizeF() * 0.95);
        c->setTitleFont(f);
    }
    c->setMargins(QMargins(4, 2, 4, 2));
    c->setBackgroundRoundness(0);
    c->legend()->setAlignment(Qt::AlignRight);
    c->legend()->setMarkerShape(QLegend::MarkerShapeRectangle);
    c->setAnimationOptions(QChart::NoAnimation);
    return c;
}

void paintChart(QChart* c, QChartView* view, const QPalette& pal)
{
    const QColor base = pal.color(QPalette::Base), text = pal.color(QPalette::Text);
    const QColor grid = mixColors(base, text, 0.16), rule = mixColors(base, text, 0.45);
    if (view)
        view->setBackgroundBrush(base);
    c->setBackgroundBrush(base);
    c->setBackgroundPen(Qt::NoPen);
    c->setPlotAreaBackgroundVisible(false);
    c->setTitleBrush(text);
    c->legend()->setLabelColor(text);
    for (QAbstractAxis* a : c->axes()) {
        a->setLabelsColor(text);
        a->setTitleBrush(text);
        a->setGridLineColor(grid);
        a->setLinePenColor(rule);
        a->setShadesVisible(false);
    }
}

} // namespace stowage
