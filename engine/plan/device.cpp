#include "stowage/device.h"

#include "stowage/error.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace stowage {

std::optional<Device> Device::parse(const std::string& raw)
{
    std::string s = raw;
    if (s == "cpu")
        return cpu();
    if (s == "disk")
        return disk();
    if (s.rfind("cuda:", 0) == 0)
        s = s.substr(5);
    if (s.empty() || s.size() > 4 || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
        return std::nullopt;
    return gpu(std::stoi(s));
}

std::string Device::name() const
{
    switch (kind) {
    case Gpu: return std::to_string(index);
    case Cpu: return "cpu";
    case Disk: return "disk";
    }
    return "?";
}

namespace {

bool endsWithNoCase(const std::string& s, const std::string& suffix)
{
    if (s.size() < suffix.size())
        return false;
    for (size_t i = 0; i < suffix.size(); ++i)
        if (std::toupper(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i])
            return false;
    return true;
}

// Python's float(): optional spaces, sign, digits with '.', exponent, or inf/nan.
bool parseFloat(const std::string& text, double* out)
{
    std::string t = text;
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    size_t b = t.find_first_not_of(" \t\n");
    size_t e = t.find_last_not_of(" \t\n");
    if (b == std::string::npos)
        return false;
    t = t.substr(b, e - b + 1);
    char* end = nullptr;
    *out = std::strtod(t.c_str(), &end);
    return end && *end == '\0' && end != t.c_str();
}

} // namespace

uint64_t parseSize(const std::string& text, const std::string& what)
{
    const std::string bad = "'" + text + "' is not a valid size (use bytes, or a number with a unit like 5GB, 5GiB or 5Gb)";
    if (!text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }))
        return std::stoull(text); // a plain integer is bytes, as an int is for Accelerate
    struct Unit {
        const char* suffix;
        double factor;
        bool binary;
    };
    const Unit units[] = {{"GIB", 1073741824.0, true}, {"MIB", 1048576.0, true}, {"KIB", 1024.0, true},
                          {"GB", 1e9, false},          {"MB", 1e6, false},       {"KB", 1e3, false}};
    for (const auto& u : units) {
        std::string suffix = u.suffix;
        if (!endsWithNoCase(text, suffix))
            continue;
        double v = 0;
        if (!parseFloat(text.substr(0, text.size() - suffix.size()), &v) || std::isnan(v) || std::isinf(v))
            throw InputError(what, bad);
        double bytes = std::trunc(v * u.factor);
        if (bytes < 0)
            throw InputError(what, "'" + text + "' is negative");
        if (bytes > 1.8e19)
            throw InputError(what, "'" + text + "' is too large");
        auto n = static_cast<uint64_t>(bytes);
        // A lowercase final 'b' means bits, for the decimal units only.
        if (!u.binary && text.back() == 'b')
            n /= 8;
        return n;
    }
    throw InputError(what, bad);
}

Budgets normalizeBudgets(Budgets budgets)
{
    std::stable_sort(budgets.begin(), budgets.end(),
                     [](const DeviceBudget& a, const DeviceBudget& b) { return a.device < b.device; });
    for (size_t i = 1; i < budgets.size(); ++i)
        if (budgets[i].device == budgets[i - 1].device)
            throw InputError("memory budgets", "device " + budgets[i].device.name() + " is given twice");
    return budgets;
}

DeviceBudget parseBudget(const std::string& device, const std::string& size, const std::string& what)
{
    const auto d = Device::parse(device);
    if (!d)
        throw InputError(what, "unknown device '" + device + "' (use a GPU index such as 0, or cpu, or disk)");
    return {*d, double(parseSize(size, what))};
}

DeviceBudget parseBudgetSpec(const std::string& spec, const std::string& what)
{
    const auto eq = spec.find('=');
    if (eq == std::string::npos)
        throw InputError(what, "expected DEV=SIZE, e.g. 0=20GiB or cpu=64GB");
    return parseBudget(spec.substr(0, eq), spec.substr(eq + 1), what);
}

} // namespace stowage
