// The runtime half of `stowage-cli hardware`: times this machine's fixed
// costs of a decode step (stowage/runtimeinfo.h) and keeps them in the
// per-machine cache that measureThisMachine reads. In the plugin, because
// it decodes with LibTorch.
#include "args.h"

#include "stowage/hardware.h"
#include "stowage/runtimeinfo.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

extern "C" int stowage_cli_fixed_costs(int, char**)
{
    return stowage::cli::runGuarded([]() -> int {
        namespace fs = std::filesystem;
        std::string pattern = (fs::temp_directory_path() / "stowage-fixed-costs-XXXXXX").string();
        if (!mkdtemp(pattern.data())) {
            std::fprintf(stderr, "stowage-cli: cannot make a scratch folder in %s; fixed costs not measured\n",
                         fs::temp_directory_path().c_str());
            return 1;
        }
        std::fprintf(stderr, "timing the fixed costs of a decode step (about 15 seconds)...\n");
        std::map<std::string, stowage::FixedCosts> costs;
        try {
            costs = stowage::measureFixedCosts(pattern, stowage::measureThisMachine());
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
        stowage::saveFixedCosts(costs, date);
        return 0;
    });
}
