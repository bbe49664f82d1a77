#include "tintedbanner.h"

#include "themecolors.h"

#include <QApplication>
#include <QEvent>
#include <QWidget>

namespace stowage {

QString bannerStyle(const QPalette& p, const QString& selector, const QColor& lightTint, const QColor& lightText,
                    const QString& extra)
{
    const bool dark = isDarkPalette(p);
    const QColor bg = tintFor(p, lightTint);
    const QColor border = dark ? bg.lighter(140) : bg.darker(115);
    const QColor text = dark ? mixColors(lightText, p.color(QPalette::WindowText), 0.75) : lightText;
    return QStringLiteral("%1 { background: %2; border: 1px solid %3; border-radius: 3px; color: %4; %5 } "
                          "%1 QLabel { color: %4; background: transparent; border: none; }")
        .arg(selector, bg.name(), border.name(), text.name(), extra);
}

namespace {
class PaletteFollower : public QObject {
public:
    PaletteFollower(QWidget* w, std::function<QString(const QPalette&)> style)
        : QObject(w), m_widget(w), m_style(std::move(style))
    {
        apply();
        // The widget's own palette is its style sheet's, and a style sheet
        // keeps palette changes from reaching it: the parent's tell.
        w->installEventFilter(this);
        if (QWidget* p = w->parentWidget())
            p->installEventFilter(this);
    }

    bool eventFilter(QObject* watched, QEvent* event) override
    {
        const auto t = event->type();
        if (watched == m_widget && t == QEvent::ParentChange) {
            if (QWidget* p = m_widget->parentWidget())
                p->installEventFilter(this);
            apply();
        } else if (t == QEvent::PaletteChange || t == QEvent::ApplicationPaletteChange) {
            apply();
        }
        return false;
    }

private:
    void apply()
    {
        const QWidget* parent = m_widget->parentWidget();
        const QString s = m_style(parent ? parent->palette() : QApplication::palette(m_widget));
        if (s != m_widget->styleSheet()) // setting it may change w's palette: no loop
            m_widget->setStyleSheet(s);
    }

    QWidget* m_widget;
    std::function<QString(const QPalette&)> m_style;
};
} // namespace

void followPalette(QWidget* w, std::function<QString(const QPalette&)> style)
{
    new PaletteFollower(w, std::move(style));
}

} // namespace stowage
