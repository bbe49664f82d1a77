#pragma once
// Where a budget sits on its bar, and the sizes a drag or a key lands on.
// A linear bar made small budgets hairlines (3 MiB of 23 GiB is a tenth of
// a pixel), so the bar is linear below a knee and logarithmic above it:
//     position(b) = ln(1 + b/k) / ln(1 + full/k),  k = max(full / 10000, 1 MiB)
// 0 bytes is the left end, `full` the right; 3 MiB of 24 GiB sits at 8.7 %.
// Steps follow the scale: a power of two near (b + k)/40 (fine: /400), at
// least 1 KiB, so every size a drag or a key gives is a multiple of a power
// of two and sizeString() writes it exactly ("1.75MiB", "416KiB").
#include <QtGlobal>

namespace stowage {

class BudgetScale {
public:
    explicit BudgetScale(quint64 full);
    quint64 full() const { return m_full; }
    double knee() const { return m_knee; }
    // 0..1 along the bar; at and past `full`, 1.
    double position(quint64 bytes) const;
    // The inverse; 0 at and below 0, past 1 it goes on growing (keys may push a budget past the bar).
    quint64 bytesAt(double position) const;
    // Snapping step near `bytes`: coarse for drags and arrows, fine with Shift.
    quint64 step(quint64 bytes, bool fine) const;
    // `bytes` to the nearest multiple of step(bytes, fine).
    quint64 snap(quint64 bytes, bool fine) const;
    // Keyboard moves along the bar: `by` is a fraction of its length (an arrow
    // 1/40, Shift+arrow 1/400, a page 1/8), snapped; always at least one step
    // while there is room, never below 0; stops at `full` before going past it.
    quint64 moved(quint64 bytes, double by, bool fine) const;

    static constexpr double kArrow = 1.0 / 40, kFineArrow = 1.0 / 400, kPage = 1.0 / 8;

private:
    quint64 m_full;
    double m_knee;
    double m_span; // ln(1 + full/k)
};

} // namespace stowage
