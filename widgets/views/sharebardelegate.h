#pragma once
// Paints PredictionModel's share column as a stacked bar: each device's
// part of a decode step in its colour, the percentages on top.
#include <QStyledItemDelegate>

namespace stowage {

class ShareBarDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};

} // namespace stowage
