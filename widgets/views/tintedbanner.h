#pragma once
// Tinted banners (notes, errors, the import banner) that read under a dark
// palette as under a light one: the tint and text follow the palette
// (themecolors.h), and are worked out again whenever it changes.
#include <QColor>
#include <QPalette>
#include <QString>

#include <functional>

class QWidget;

namespace stowage {

// The style sheet of a banner matched by `selector` ("QLabel", "#errorBar"):
// the light tint (mixed into the window colour under a dark palette), a
// border a shade darker, and its labels in `lightText` (lifted towards the
// palette's text colour under a dark palette, so it stays readable).
QString bannerStyle(const QPalette& p, const QString& selector, const QColor& lightTint, const QColor& lightText,
                    const QString& extra = QStringLiteral("padding: 4px;"));

// Sets `style(palette)` on `w` now and whenever the palette changes. The
// palette read is the parent's (w's own is coloured by its style sheet);
// the application's for a window.
void followPalette(QWidget* w, std::function<QString(const QPalette&)> style);

// The banner tints used across the window.
inline QColor noteTint() { return QColor(0xfff4d6); }
inline QColor noteInk() { return QColor(0x5a4300); }
inline QColor errorTint() { return QColor(0xfde2e2); }
inline QColor errorInk() { return QColor(0x7a1010); }
inline QColor infoTint() { return QColor(0xe2ecfd); }
inline QColor infoInk() { return QColor(0x10307a); }

} // namespace stowage
