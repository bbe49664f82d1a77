// stowage-cli: the engine from scripts. Exit 0 on success, 2 on bad input
// (one line on stderr naming the file and the problem), 1 on our own failure.
#include "commands.h"

#include "stowage/error.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

const char* kUsage =
    "usage: stowage-cli <command> [PATH] [options]\n"
    "\n"
    "commands:\n"
    "  inspect [PATH] [--dtype DT] [--json]   module tree with sizes\n"
    "  plan    [PATH] [--max-memory DEV=SIZE]... [--strategy auto|balanced|balanced_low_0|sequential]\n"
    "          [--dtype DT] [--no-split CLASS]... [--offload-buffers] [--kv-cache CTX[xBATCH]]\n"
    "          [--device-map FILE] [--explain] [--report FILE] [--hardware PRESET|FILE.json] [--json] [-o FILE]\n"
    "\n"
    "PATH is a checkpoint folder, an index .json, a .safetensors/.bin file or a\n"
    "Hub cache folder (models--org--name); without it the bundled demo is used.\n";

} // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
        std::fputs(kUsage, args.empty() ? stderr : stdout);
        return args.empty() ? 2 : 0;
    }
    const std::string command = args[0];
    args.erase(args.begin());
    try {
        if (command == "inspect")
            return stowage::cli::inspectCommand(args);
        if (command == "plan")
            return stowage::cli::planCommand(args);
        std::fprintf(stderr, "stowage-cli: unknown command '%s' (try --help)\n", command.c_str());
        return 2;
    } catch (const stowage::InputError& e) {
        std::fprintf(stderr, "stowage-cli: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "stowage-cli: internal error: %s\n", e.what());
        return 1;
    }
}
