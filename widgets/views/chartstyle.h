#pragma once
// What every chart of the window shares (Qt Charts): the plain look (no
// animation, square corners, small margins, legend at the right) and the
// palette's colours on every surface, text and rule, since Qt Charts draws
// white unless told (the run graphs, the Plan page's context chart).
#include <QPalette>
#include <QString>

class QChart;
class QChartView;

namespace stowage {

// A chart with the window's look; `title` empty: no title.
QChart* newChart(const QString& title = QString());
// Background, plot area, title, legend and every axis of `chart` (and the
// view's background, where given) from `palette`.
void paintChart(QChart* chart, QChartView* view, const QPalette& palette);

} // namespace stowage
