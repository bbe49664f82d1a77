#pragma once
// Colours that follow the widget's QPalette, so charts, the timeline, the
// teaching caption and the budget bars read under a dark palette as under a
// light one. Light tints (written for a light window) keep their hue and are
// mixed into the window colour when the palette is dark.
#include <QColor>
#include <QPalette>
#include <QString>

namespace stowage {

inline bool isDarkPalette(const QPalette& p) { return p.color(QPalette::Window).lightnessF() < 0.5; }

// a at t = 0, b at t = 1.
inline QColor mixColors(const QColor& a, const QColor& b, double t)
{
    return QColor::fromRgbF(float(a.redF() + (b.redF() - a.redF()) * t), float(a.greenF() + (b.greenF() - a.greenF()) * t),
                            float(a.blueF() + (b.blueF() - a.blueF()) * t));
}

// A background tint: itself under a light palette, a quarter of it over the
// window colour under a dark one.
inline QColor tintFor(const QPalette& p, const QColor& lightTint)
{
    return isDarkPalette(p) ? mixColors(p.color(QPalette::Window), lightTint, 0.22) : lightTint;
}

// Style sheet declarations for a label on such a tint, with readable text.
inline QString tintStyle(const QPalette& p, const QColor& lightTint)
{
    const QColor text = isDarkPalette(p) ? p.color(QPalette::WindowText) : QColor(0x101010);
    return QStringLiteral("background: %1; color: %2;").arg(tintFor(p, lightTint).name(), text.name());
}

// A mark drawn over the palette's Base (a critical-path outline, a release
// tick): darker marks are lifted towards the text colour under a dark palette.
inline QColor markOn(const QPalette& p, const QColor& onLight)
{
    return isDarkPalette(p) ? mixColors(onLight, p.color(QPalette::Text), 0.45) : onLight;
}

} // namespace stowage
