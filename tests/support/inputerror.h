#pragma once
// Test support: the text of the InputError a call throws ("" when it throws
// none), for the suites that check what bad input is told.
#include "stowage/error.h"

#include <QString>

#include <functional>

namespace fixtures {

inline QString errorOf(const std::function<void()>& fn)
{
    try {
        fn();
    } catch (const stowage::InputError& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

} // namespace fixtures
