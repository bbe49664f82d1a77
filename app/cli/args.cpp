#include "args.h"

#include "stowage/error.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <unistd.h>

namespace stowage::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued, const std::set<std::string>& flags)
{
    for (size_t i = 0; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && std::isdigit(static_cast<unsigned char>(a[1])))) {
            std::string name = a, val;
            bool hasEq = false;
            if (auto eq = a.find('='); eq != std::string::npos) {
                name = a.substr(0, eq);
                val = a.substr(eq + 1);
                hasEq = true;
            }
            if (valued.count(name)) {
                if (!hasEq) {
                    if (i + 1 >= argv.size())
                        throw InputError("", "option " + name + " needs a value");
                    val = argv[++i];
                }
                m_values.emplace(name, val);
            } else if (flags.count(name) && !hasEq) {
                m_flags.insert(name);
            } else {
                throw InputError("", "unknown option " + name);
            }
        } else {
            m_positional.push_back(a);
        }
    }
    if (m_positional.size() > 1)
        throw InputError("", "unexpected argument '" + m_positional[1] + "' (only one PATH is taken)");
}

std::optional<std::string> Args::value(const std::string& name) const
{
    auto range = m_values.equal_range(name);
    if (range.first == range.second)
        return std::nullopt;
    return std::prev(range.second)->second; // the last one wins, as in most tools
}

std::vector<std::string> Args::values(const std::string& name) const
{
    std::vector<std::string> out;
    auto range = m_values.equal_range(name);
    for (auto it = range.first; it != range.second; ++it)
        out.push_back(it->second);
    return out;
}

std::string withFlagNames(const InputError& error)
{
    static const std::map<std::string, std::string> flags{{"prompt token ids", "--prompt-ids"},
                                                          {"prompt", "--prompt"},
                                                          {"offload folder", "--offload-folder"},
                                                          {"memory budgets", "--max-memory"}};
    auto it = flags.find(error.file());
    return it == flags.end() ? error.what() : it->second + ": " + error.problem();
}

int runGuarded(const std::function<int()>& command)
{
    try {
        return command();
    } catch (const InputError& e) {
        std::fprintf(stderr, "stowage-cli: %s\n", withFlagNames(e).c_str());
        return 2;
    } catch (const Cancelled&) {
        std::fprintf(stderr, "stowage-cli: cancelled\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "stowage-cli: internal error: %s\n", e.what());
        return 1;
    }
}

std::string checkpointPath(const Args& args)
{
    return args.positional().empty() ? demoCheckpointPath() : args.positional()[0];
}

std::string demoCheckpointPath()
{
    if (const char* env = std::getenv("STOWAGE_DEMO"))
        return env;
    // Installed layout: <prefix>/bin/stowage-cli and <prefix>/share/stowage/demo.
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        auto installed = exe.parent_path().parent_path() / "share" / "stowage" / "demo";
        if (std::filesystem::exists(installed / "config.json"))
            return installed.string();
    }
    return STOWAGE_BUILD_DEMO_DIR;
}

std::optional<DType> parseDTypeOption(const Args& a)
{
    auto v = a.value("--dtype");
    if (!v)
        return std::nullopt;
    auto d = dtypeFromTorchName(*v);
    if (!d || !dtypeIsFloating(*d))
        throw InputError("", "--dtype '" + *v + "' is not one of float32, float16, bfloat16");
    return d;
}

std::optional<double> parseNumber(const std::string& text)
{
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (used != text.size() || !std::isfinite(v))
        return std::nullopt;
    return v;
}

int wholeNumberOption(const Args& args, const std::string& name, int fallback, int lo, int hi)
{
    const auto v = args.value(name);
    if (!v)
        return fallback;
    const auto n = parseNumber(*v);
    if (!n || *n != std::floor(*n) || *n < lo || *n > hi)
        throw InputError(name, "expected a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) +
                                   ", got '" + *v + "'");
    return int(*n);
}

std::vector<int32_t> parseIds(const std::string& text, const std::string& what)
{
    std::vector<int32_t> ids;
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(part, &used);
        } catch (...) {
            used = 0;
        }
        if (used != part.size() || v < 0 || v > INT32_MAX)
            throw InputError(what, "'" + part + "' is not a token id");
        ids.push_back(int32_t(v));
    }
    if (ids.empty())
        throw InputError(what, "no token ids given");
    return ids;
}

} // namespace stowage::cli
