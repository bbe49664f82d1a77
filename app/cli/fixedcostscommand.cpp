// The runtime half of `stowage-cli hardware`: times this machine's fixed
// costs of a decode step (stowage/runtimeinfo.h) and keeps them in the
// per-machine cache that measureThisMachine reads. In the plugin, because
// it decodes with LibTorch.
#include "args.h"

#include "stowage/hardware.h"
#include "stowage/runtimeinfo.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
const std::string kScratch = "stowage-fixed-costs-";

// A timing stopped midway (the window's Stop kills it, or Ctrl-C) leaves its
// scratch folder behind, ~100 MB of generated models: each timing removes
// those of processes that are gone (the folder is named by its pid).
void removeLeftovers(const fs::path& tmp)
{
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(tmp, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(kScratch, 0) != 0)
            continue;
        const long pid = std::strtol(name.c_str() + kScratch.size(), nullptr, 10);
        if (pid > 0 && pid != long(getpid()) && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) {
            std::error_code ignored;
            fs::remove_all(e.path(), ignored);
        }
    }
}

} // namespace

extern "C" int stowage_cli_fixed_costs(int, char**)
{
    return stowage::cli::runGuarded([]() -> int {
        removeLeftovers(fs::temp_directory_path());
        std::string pattern =
            (fs::temp_directory_path() / (kScratch + std::to_string(getpid()) + "-XXXXXX")).string();
        if (!mkdtemp(pattern.data())) {
            std::fprintf(stderr, "stowage-cli: cannot make a scratch folder in %s; fixed costs not measured\n",
                         fs::temp_directory_path().c_str());
            return 1;
        }
        std::fprintf(stderr, "timing the fixed costs of a decode step (about 15 seconds)...\n");
        std::map<std::string, stowage::FixedCosts> costs;
        const stowage::HardwareProfile machine = stowage::measureThisMachine({}, /*withFixedCosts=*/false);
        try {
            costs = stowage::measureFixedCosts(pattern, machine);
        } catch (...) {
            std::error_code ec;
            fs::remove_all(pattern, ec);
            throw;
        }
        std::error_code ec;
        fs::remove_all(pattern, ec);
        char date[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
        stowage::saveFixedCosts(costs, date, stowage::fittedRatesOf(machine));
        return 0;
    });
}
