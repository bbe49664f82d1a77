#include "rundata.h"

namespace stowage {

namespace {
const char* const kKindNames[] = {"fetch", "prefetch", "map", "wait", "compute", "release"};
} // namespace

bool TraceSpan::kindFromName(const QString& name, Kind* kind)
{
    for (int i = 0; i < 6; ++i)
        if (name == QLatin1String(kKindNames[i])) {
            *kind = static_cast<Kind>(i);
            return true;
        }
    return false;
}

QString TraceSpan::kindName(Kind kind) { return QLatin1String(kKindNames[static_cast<int>(kind)]); }

} // namespace stowage
