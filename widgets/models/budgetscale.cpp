#include "budgetscale.h"

#include <algorithm>
#include <cmath>

namespace stowage {

BudgetScale::BudgetScale(quint64 full)
    : m_full(std::max<quint64>(1, full)), m_knee(std::max(double(m_full) / 10000.0, double(1ull << 20))),
      m_span(std::log1p(double(m_full) / m_knee))
{
}

double BudgetScale::position(quint64 bytes) const
{
    if (bytes >= m_full)
        return 1.0;
    return std::log1p(double(bytes) / m_knee) / m_span;
}

quint64 BudgetScale::bytesAt(double position) const
{
    if (position <= 0)
        return 0;
    if (position == 1.0)
        return m_full; // exactly the right end, whatever the rounding
    return quint64(std::llround(m_knee * std::expm1(position * m_span)));
}

quint64 BudgetScale::step(quint64 bytes, bool fine) const
{
    const double target = (double(bytes) + m_knee) / (fine ? 400.0 : 40.0);
    quint64 s = 1ull << 10; // never below 1 KiB
    while (double(s * 2) <= target)
        s *= 2;
    return s;
}

quint64 BudgetScale::snap(quint64 bytes, bool fine) const
{
    const quint64 s = step(bytes, fine);
    return (bytes + s / 2) / s * s;
}

quint64 BudgetScale::moved(quint64 bytes, double by, bool fine) const
{
    quint64 next = snap(bytesAt(position(bytes) + by), fine);
    if (bytes >= m_full && by > 0) // past the bar: position() is pinned at 1, go on by steps
        next = bytes + step(bytes, fine);
    if (by > 0 && next <= bytes)
        next = (bytes / step(bytes, fine) + 1) * step(bytes, fine);
    if (by < 0 && next >= bytes) {
        const quint64 s = step(bytes, fine);
        next = bytes > s ? (bytes - 1) / s * s : 0;
    }
    if (bytes < m_full && next > m_full)
        next = m_full; // stop at the bar's end; from there on, a step at a time
    return next;
}

} // namespace stowage
