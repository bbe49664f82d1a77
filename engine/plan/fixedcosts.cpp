// Fixed costs of a decode step: their JSON form and the per-machine cache
// `stowage-cli hardware` writes and measureThisMachine reads.
#include "fixedcosts.h"

#include "stowage/error.h"
#include "stowage/fileio.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace stowage {
namespace detail {

namespace {
const char* const kPolicies[] = {"accelerate-like", "prefetch", "compute-where-it-lives"};
}

nlohmann::json fixedCostsToJson(const std::map<std::string, FixedCosts>& costs)
{
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [policy, c] : costs)
    {
        j[policy] = {{"perToken", c.perToken}, {"perUnit", c.perUnit}, {"perDiskUnit", c.perDiskUnit}};
        if (c.perUnitFromRam > 0)
            j[policy]["perUnitFromRam"] = c.perUnitFromRam;
        if (c.perExpert > 0)
            j[policy]["perExpert"] = c.perExpert;
        if (c.copyBandwidth > 0)
            j[policy]["copyBandwidth"] = c.copyBandwidth;
        if (!c.copyRates.empty())
            j[policy]["copyRates"] = c.copyRates; // [[weight bytes, bytes/s], ...]
    }
    return j;
}

std::map<std::string, FixedCosts> fixedCostsFromJson(const nlohmann::json& j, const std::string& path,
                                                     const std::string& where)
{
    auto fail = [&](const std::string& problem) -> void {
        throw InputError(path, where + "fixedCosts" + problem);
    };
    if (!j.is_object())
        fail(" must be an object of policies");
    std::map<std::string, FixedCosts> out;
    for (const auto& [policy, v] : j.items()) {
        if (std::find(std::begin(kPolicies), std::end(kPolicies), policy) == std::end(kPolicies))
            fail(": unknown policy \"" + policy + "\" (expected accelerate-like, prefetch or compute-where-it-lives)");
        if (!v.is_object())
            fail("." + policy + " must be an object");
        FixedCosts c;
        for (const auto& [key, x] : v.items()) {
            if (key == "copyRates") {
                const std::string what = "." + policy + ".copyRates";
                if (!x.is_array())
                    fail(what + " must be a list of [weight bytes, bytes per second]");
                for (const auto& e : x) {
                    if (!e.is_array() || e.size() != 2 || !e[0].is_number() || !e[1].is_number() ||
                        !(e[0].get<double>() > 0) || !(e[1].get<double>() > 0) || !std::isfinite(e[0].get<double>()) ||
                        !std::isfinite(e[1].get<double>()))
                        fail(what + " must be a list of [weight bytes, bytes per second], both positive, got " + e.dump());
                    if (!c.copyRates.empty() && !(e[0].get<double>() > c.copyRates.back().first))
                        fail(what + " must list weight sizes in ascending order, got " + x.dump());
                    c.copyRates.emplace_back(e[0].get<double>(), e[1].get<double>());
                }
                continue;
            }
            double* field = key == "perToken"        ? &c.perToken
                            : key == "perUnit"       ? &c.perUnit
                            : key == "perUnitFromRam" ? &c.perUnitFromRam
                            : key == "perDiskUnit"   ? &c.perDiskUnit
                            : key == "perExpert"     ? &c.perExpert
                            : key == "copyBandwidth" ? &c.copyBandwidth
                                                     : nullptr;
            if (!field)
                fail("." + policy + ": unknown field \"" + key + "\"");
            if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>()))
                fail("." + policy + "." + key + " must be a non-negative number of " +
                     (field == &c.copyBandwidth ? "bytes per second" : "seconds") + ", got " + x.dump());
            *field = x.get<double>();
        }
        out[policy] = c;
    }
    return out;
}

} // namespace detail

std::string fixedCostsCachePath()
{
    namespace fs = std::filesystem;
    fs::path dir;
    if (const char* d = std::getenv("STOWAGE_CACHE_DIR"); d && *d)
        dir = d;
    else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
        dir = fs::path(x) / "stowage";
    else if (const char* h = std::getenv("HOME"); h && *h)
        dir = fs::path(h) / ".cache" / "stowage";
    else
        dir = fs::temp_directory_path() / "stowage";
    return (dir / "fixed-costs.json").string();
}

std::string thisCpuKey()
{
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "unknown CPU";
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos) {
                model = line.substr(line.find_first_not_of(" \t", colon + 1));
                break;
            }
        }
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    return model + ", " + std::to_string(cores) + (cores == 1 ? " core" : " cores");
}

namespace {

// Which runtime measured a cache entry: raised when the runtime's cost per
// step changes, so that an entry measured before is measured again rather
// than predicting from costs the runtime no longer has (2: OpenBLAS's threads
// no longer spin beside decode, runtimeenv.h; 3: accelerate-like's copy rate
// timed, FixedCosts::copyBandwidth; 4: a routed expert's cost timed,
// FixedCosts::perExpert; 5: the copy rate timed on three weight sizes,
// FixedCosts::copyRates; 6: glibc's malloc thresholds fixed while a model
// runs, pinAllocator in runtimeenv.h, and FixedCosts::perUnitFromRam timed;
// entries without one are 1).
constexpr int kRevision = 6;

nlohmann::json readCache(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        return nlohmann::json::object();
    try {
        nlohmann::json j = nlohmann::json::parse(in);
        return j.is_object() ? j : nlohmann::json::object();
    } catch (const nlohmann::json::exception&) {
        return nlohmann::json::object(); // a damaged cache is measured again
    }
}

} // namespace

FittedRates fittedRatesOf(const HardwareProfile& profile)
{
    return {profile.ramBandwidth, profile.cpuGemvF32, profile.cpuGemvBf16, profile.cpuCacheBytes};
}

void saveFixedCosts(const std::map<std::string, FixedCosts>& costs, const std::string& when,
                    const FittedRates& fittedTo)
{
    const std::string path = fixedCostsCachePath();
    nlohmann::json all = readCache(path);
    all[thisCpuKey()] = {{"measured", when}, {"revision", kRevision}, {"fixedCosts", detail::fixedCostsToJson(costs)}};
    if (fittedTo.ramBandwidth > 0)
        all[thisCpuKey()]["fittedTo"] = {{"ramBandwidth", fittedTo.ramBandwidth},
                                        {"cpuGemvF32", fittedTo.cpuGemvF32},
                                        {"cpuGemvBf16", fittedTo.cpuGemvBf16},
                                        {"cpuCacheBytes", fittedTo.cpuCacheBytes}};
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    writeFileAtomically(path, all.dump(2) + "\n");
}

std::map<std::string, FixedCosts> loadFixedCosts(std::string* when, FittedRates* fittedTo)
{
    if (fittedTo)
        *fittedTo = {};
    const std::string path = fixedCostsCachePath();
    const nlohmann::json all = readCache(path);
    auto it = all.find(thisCpuKey());
    if (it == all.end() || !it->is_object() || !it->contains("fixedCosts") ||
        it->value("revision", nlohmann::json(1)) != nlohmann::json(kRevision))
        return {};
    try {
        auto costs = detail::fixedCostsFromJson((*it)["fixedCosts"], path, "");
        if (when && it->contains("measured") && (*it)["measured"].is_string())
            *when = (*it)["measured"].get<std::string>();
        // The rates together or none: a damaged set would pair the costs
        // with figures they were not fitted to.
        const nlohmann::json f = it->value("fittedTo", nlohmann::json::object());
        const auto rate = [&](const char* k) { // bytes/s, 0 where not measured
            return f.contains(k) && f[k].is_number() && f[k].get<double>() >= 0 && std::isfinite(f[k].get<double>());
        };
        if (fittedTo && f.is_object() && rate("ramBandwidth") && f["ramBandwidth"].get<double>() > 0 &&
            rate("cpuGemvF32") && rate("cpuGemvBf16") && f.contains("cpuCacheBytes") &&
            f["cpuCacheBytes"].is_number_unsigned())
            *fittedTo = {f["ramBandwidth"].get<double>(), f["cpuGemvF32"].get<double>(),
                         f["cpuGemvBf16"].get<double>(), f["cpuCacheBytes"].get<uint64_t>()};
        return costs;
    } catch (const InputError&) {
        return {};
    }
}

} // namespace stowage
