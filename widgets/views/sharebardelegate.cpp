#include "sharebardelegate.h"

#include "display.h"
#include "predictionmodel.h"

#include <QApplication>
#include <QPainter>

namespace stowage {

void ShareBarDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    const QVariantList shares = index.data(PredictionModel::SharesRole).toList();
    if (shares.isEmpty())
        return QStyledItemDelegate::paint(painter, option, index);
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    opt.text.clear();
    QApplication::style()->drawControl(QStyle::CE_ItemViewItem, &opt, painter, opt.widget);
    const QRectF r = QRectF(option.rect).adjusted(3, 3, -3, -3);
    double x = r.left();
    painter->save();
    for (const QVariant& v : shares) {
        const QVariantMap m = v.toMap();
        const double w = m.value(QStringLiteral("share")).toDouble() * r.width();
        const QColor c = deviceColor(deviceFromCode(m.value(QStringLiteral("code")).toInt()));
        const QRectF seg(x, r.top(), w, r.height());
        painter->fillRect(seg, c);
        const QString pct = QStringLiteral("%1 %2 %")
                                .arg(deviceLabel(deviceFromCode(m.value(QStringLiteral("code")).toInt())))
                                .arg(m.value(QStringLiteral("share")).toDouble() * 100, 0, 'f', 0);
        if (option.fontMetrics.horizontalAdvance(pct) + 6 < w) {
            painter->setPen(c.lightnessF() > 0.6 ? QColor(0x202020) : QColor(0xffffff));
            painter->drawText(seg, Qt::AlignCenter, pct);
        }
        x += w;
    }
    painter->restore();
}

QSize ShareBarDelegate::sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    QSize s = QStyledItemDelegate::sizeHint(option, index);
    return {std::max(s.width(), 220), s.height() + 4};
}

} // namespace stowage
