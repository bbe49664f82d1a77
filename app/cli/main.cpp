// stowage-cli: the engine from scripts. Exit 0 on success, 2 on bad input
// (one line on stderr naming the file and the problem), 1 on our own failure.
#include "args.h"
#include "commands.h"

#include "stowage/error.h"
#include "stowage/runtimeenv.h"

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <exception>
#include <string>
#include <vector>

namespace {

const char* kUsage =
    "usage: stowage-cli <command> [PATH] [options]\n"
    "\n"
    "commands:\n"
    "  inspect [PATH] [--dtype DT] [--hardware PRESET|FILE.json] [--json]   module tree with sizes\n"
    "  plan    [PATH] [--max-memory DEV=SIZE]... [--strategy auto|balanced|balanced_low_0|sequential|experts_in_ram]\n"
    "          [--dtype DT] [--no-split CLASS]... [--offload-buffers] [--kv-cache CTX[xBATCH]]\n"
    "          [--device-map FILE] [--explain] [--report FILE] [--hardware PRESET|FILE.json] [--json] [-o FILE]\n"
    "          [--context-sweep MAXCTX[xBATCH]]   memory per device as the context grows (JSON)\n"
    "          [--gpu-order 1,0]   fill the GPUs in this order (leave one out of --max-memory to exclude it)\n"
    "  run     [PATH] [--device-map FILE | plan options] [--prompt-ids 1,2,3] [--max-new-tokens N]\n"
    "          [--greedy | --temperature T --top-k K --top-p P --seed N] [--offload-folder DIR]\n"
    "          [--prompt TEXT] [--simulate-gpus] [--policy accelerate-like|prefetch|compute-where-it-lives]\n"
    "          [--hardware PRESET|FILE.json [--throttle]] [--threads N] [--unit-delay S] [--ignore-eos] [--json]\n"
    "  worker                                 serve run sessions as JSON lines on stdin/stdout\n"
    "                                         (docs/worker-protocol.md)\n"
    "  hardware [PRESET] [--list] [--json] [-o FILE] [--no-fixed-costs]\n"
    "                                         a hardware profile for --hardware (default: this\n"
    "                                         machine, with its fixed costs per token and layer)\n"
    "  tokenize [PATH] (--text TEXT | --ids 1,2,3) [--json]\n"
    "  shop    [PATH] --speed TOK/S [--kv-cache CTX[xBATCH]] [--gpus PRESET,...] [--max-gpus N]\n"
    "          [--ram GIB,...] [--policy P] [--strategy S] [--price PRESET=USD]... [--dtype DT] [--json] [-o FILE]\n"
    "                                         the cheapest GPU and RAM setups that reach a decode speed\n"
    "  deploy  [PATH] --gpu PRESET [--nodes N] [--gpus-per-node G] [--engine vllm|sglang|tgi|llama.cpp|transformers]\n"
    "          [--context C] [--sequences S] [--memory-fraction F] [--expert-parallel] [--host-ram SIZE] [--model-id ID]\n"
    "          [--json] [-o FILE]\n"
    "                                         tensor x pipeline parallel choices on a serving engine, and its launch\n"
    "  gguf    [PATH] (-o FILE.gguf | --check) the checkpoint as one GGUF file for llama.cpp (llama, mistral, qwen2/3)\n"
    "\n"
    "PATH is a checkpoint folder, an index .json, a .safetensors/.bin file or a\n"
    "Hub cache folder (models--org--name); without it the bundled demo is used.\n";

// `run` and `worker` live in a plugin linked with LibTorch, loaded only when needed.
int runPlugin(const char* entryName, const std::vector<std::string>& args)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path exeDir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    // What LibTorch's thread pools and its BLAS read when the plugin loads
    // them (runtimeenv.h: spin windows, OpenBLAS's kernels for this CPU).
    stowage::prepareRuntimeEnvironment();
    void* lib = nullptr;
    std::string tried;
    for (const fs::path& p : {exeDir / "libstowage_run.so", exeDir.parent_path() / "lib" / "stowage" / "libstowage_run.so"}) {
        lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib)
            break;
        tried += std::string(tried.empty() ? "" : "; ") + dlerror();
    }
    if (!lib) {
        std::fprintf(stderr, "stowage-cli: internal error: this build has no LibTorch runtime (%s)\n", tried.c_str());
        return 1;
    }
    using Entry = int (*)(int, char**);
    auto entry = reinterpret_cast<Entry>(dlsym(lib, entryName));
    if (!entry) {
        std::fprintf(stderr, "stowage-cli: internal error: the runtime plugin has no entry point\n");
        return 1;
    }
    std::vector<char*> argv;
    for (const auto& s : args)
        argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    return entry(int(args.size()), argv.data());
}

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
    return stowage::cli::runGuarded([&]() -> int {
        if (command == "inspect")
            return stowage::cli::inspectCommand(args);
        if (command == "plan")
            return stowage::cli::planCommand(args);
        if (command == "run")
            return runPlugin("stowage_cli_run", args);
        if (command == "worker")
            return runPlugin("stowage_cli_worker", args);
        if (command == "hardware")
            return stowage::cli::hardwareCommand(args, [] { return runPlugin("stowage_cli_fixed_costs", {"fixed-costs"}); });
        if (command == "tokenize")
            return stowage::cli::tokenizeCommand(args);
        if (command == "shop")
            return stowage::cli::shopCommand(args);
        if (command == "deploy")
            return stowage::cli::deployCommand(args);
        if (command == "gguf")
            return stowage::cli::ggufCommand(args);
        std::fprintf(stderr, "stowage-cli: unknown command '%s' (try --help)\n", command.c_str());
        return 2;
    });
}
